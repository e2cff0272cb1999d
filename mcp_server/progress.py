"""Progress notifications for long tools, with a heartbeat while one step is slow.

The KnowledgeBase reports `progress(done, total)` synchronously after each page. Clients
time out a request that stays silent, and one slow page (robots.txt, a 30 s fetch, a big
embedding batch) can be silent for long. `Heartbeat` polls the latest count and sends a
notification whenever it moved, and at least every `interval` seconds when it did not.
MCP wants the progress value to increase with every notification, so a heartbeat sends
`done + k/(k+1)` (k = heartbeats since the last page): always more, never a whole page.
While the tool's write waits behind a restore or a reindex of the store, the message says
so (`rag_app.write_wait`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import Token
from types import TracebackType

from rag_app.write_wait import NOTICE, Notice, WriteWait

logger = logging.getLogger("mcp_server.progress")

ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]
"""Where notifications go: `Context.report_progress(progress, total, message)`."""
MessageFn = Callable[[int, int | None], str]


class Heartbeat:
    """Async context manager; pass `update` to the KnowledgeBase as its progress callback."""

    def __init__(
        self,
        send: ProgressSink,
        message: MessageFn,
        *,
        interval: float = 2.0,
        tick: float = 0.1,
        total: int | None = None,
    ) -> None:
        self._send = send
        self._message = message
        self._interval = interval
        self._tick = tick
        self._latest: tuple[int, int | None] = (0, total)
        self._task: asyncio.Task[None] | None = None
        self._done = -1
        self._beats = 0
        self._sent_total: int | None = None
        self._last_sent = float("-inf")
        self._wait: WriteWait | None = None
        self._sent_wait: WriteWait | None = None
        self._notice: Token[Notice | None] | None = None
        self.sent = 0

    def waiting(self, wait: WriteWait | None) -> None:
        """`write_wait.NOTICE` for this tool call: what its write waits for, or None."""
        self._wait = wait

    def update(self, done: int, total: int) -> None:
        """The KnowledgeBase's progress callback; cheap, sync and safe from any thread."""
        self._latest = (done, total if total > 0 else None)

    async def __aenter__(self) -> Heartbeat:
        self._notice = NOTICE.set(self.waiting)
        try:
            await self._step(force=True)
        except BaseException:  # cancelled before the block: `__aexit__` will not run
            NOTICE.reset(self._notice)
            raise
        self._task = asyncio.create_task(self._run(), name="progress-heartbeat")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._notice is not None:
            NOTICE.reset(self._notice)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if exc_type is None:
            await self._step(force=False, heartbeat=False)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._tick)
            await self._step(force=False)

    async def _step(self, *, force: bool, heartbeat: bool = True) -> None:
        done, total = self._latest
        if done > self._done:
            self._done, self._beats = done, 0
            value = float(done)
        elif (
            force
            or total != self._sent_total
            or self._wait != self._sent_wait
            or (heartbeat and time.monotonic() - self._last_sent >= self._interval)
        ):
            self._beats += 1
            value = max(self._done, 0) + self._beats / (self._beats + 1)
        else:
            return
        self._sent_total, self._last_sent, self._sent_wait = total, time.monotonic(), self._wait
        text = self._wait.japanese() if self._wait is not None else self._message(done, total)
        try:
            await self._send(value, None if total is None else float(total), text)
            self.sent += 1
        except Exception as err:  # a client that went away must not fail the crawl
            logger.debug("Could not send a progress notification: %s", err)
