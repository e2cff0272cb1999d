"""uvicorn's HTTP protocol with a deadline for each request and a cap on connections.

uvicorn times out an idle keep-alive connection only after a response, and every byte
received resets that timer: a client that connects and sends nothing, or trickles a
request a byte at a time, holds its connection (a file descriptor) for ever, before any
token is checked (19,950 were held against one `rag-mcp` here). With this protocol a
request must arrive whole within `REQUEST_DEADLINE_SEC` of the connection (or of the
previous response on a kept-alive one), or the connection is closed; while a request is
being answered (a long tool call, the server's event stream) no deadline runs. Past
`MAX_CONNECTIONS` open connections, the oldest one still waiting for its request is
closed to make room — first one that never completed a request (a flood's), then an idle
kept-alive one; when every connection is being answered, the new one is closed.

h11 is used whatever else is installed: one parser, the same behaviour everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

REQUEST_DEADLINE_SEC = 30.0
"""Time for a whole request (headers and body); MCP requests are a few KB."""
MAX_CONNECTIONS = 256
"""Open connections at most; an MCP client keeps one or two."""
_WAITING = (h11.IDLE, h11.SEND_BODY)  # the peer's request has not arrived whole


class _Closed:
    """Counts connections closed by the deadline or the cap; logs at most once a minute."""

    def __init__(self) -> None:
        self.count = 0
        self._logged = 0
        self._last = 0.0

    def note(self) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._last >= 60:
            logger.warning(
                "Closed %d HTTP connection(s) that sent no whole request in time or held "
                "a place past the cap of open connections.",
                self.count - self._logged,
            )
            self._logged, self._last = self.count, now


CLOSED = _Closed()


class DeadlineH11Protocol(H11Protocol):
    """`uvicorn.run(app, http=DeadlineH11Protocol)`; subclass to change the limits."""

    deadline_sec: float = REQUEST_DEADLINE_SEC
    max_connections: int = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._opened = 0.0
        self._answered = 0  # requests answered on this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened = self.loop.time()
        self._follow()
        if len(self.connections) > self.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        self._follow()

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()
        self._follow()

    def waiting(self) -> bool:
        """Open, and its request (or the next one) has not arrived whole."""
        return self.conn.their_state in _WAITING and not self.transport.is_closing()

    def _follow(self) -> None:
        """A deadline runs exactly while a request is awaited; a running one is never
        pushed back (bytes trickling in do not buy time)."""
        if not self.waiting():
            self._disarm()
        elif self._deadline is None:
            self._deadline = self.loop.call_later(self.deadline_sec, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.waiting():
            self._close()

    def _close(self) -> None:
        self._disarm()
        CLOSED.note()
        self.transport.abort()  # nothing of ours is pending: the peer sent no whole request

    def _make_room(self) -> None:
        waiting = [
            c
            for c in self.connections
            if isinstance(c, DeadlineH11Protocol) and c is not self and c.waiting()
        ]
        never = [c for c in waiting if not c._answered]
        pool = never or waiting
        if pool:
            min(pool, key=lambda c: c._opened)._close()
        else:  # every other connection is being answered: the new one goes
            self._close()
