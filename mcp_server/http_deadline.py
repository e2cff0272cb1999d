"""uvicorn's HTTP protocol with a deadline for each request and a cap on connections.

uvicorn times out an idle keep-alive connection only after a response, and every byte
received resets that timer: a client that connects and sends nothing, or trickles a
request a byte at a time, holds its connection (a file descriptor) for ever, before any
token is checked (19,950 were held against one `rag-mcp` here). With this protocol a
request must arrive whole within `REQUEST_DEADLINE_SEC` of the connection (or of the
previous answer on a kept-alive one), or the connection is closed; while a request is
being answered (a long tool call, the server's event stream) no deadline runs. An answer
the peer does not read is a hold too (pipelined requests whose answers fill the send
buffer): while sending is held up by the peer, it must take some of what waits within
each `REQUEST_DEADLINE_SEC`, or the connection is closed; a slow reader that keeps
reading gets its whole answer. Past `MAX_CONNECTIONS` open connections one is closed to
make room: the oldest still waiting for a request that never completed one (a flood's),
then the oldest whose peer reads nothing of what is sent, then the oldest idle kept-alive
one; when every other connection is being answered, the new one is closed.

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
    """Counts connections closed by the deadline or the cap; logs at most once a minute
    (a burst's count in one line at the minute's end)."""

    def __init__(self) -> None:
        self.count = 0
        self._logged = 0
        self._last = -60.0
        self._pending: asyncio.TimerHandle | None = None

    def note(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count += 1
        wait = self._last + 60 - time.monotonic()
        if wait <= 0:
            self._log()
        elif self._pending is None:
            self._pending = loop.call_later(wait, self._log)

    def _log(self) -> None:
        self._pending = None
        if self.count > self._logged:
            logger.warning(
                "Closed %d HTTP connection(s) that sent no whole request in time, read "
                "nothing of their answers, or held a place past the cap of open connections.",
                self.count - self._logged,
            )
        self._logged, self._last = self.count, time.monotonic()


CLOSED = _Closed()


class DeadlineH11Protocol(H11Protocol):
    """`uvicorn.run(app, http=DeadlineH11Protocol)`; subclass to change the limits."""

    deadline_sec: float = REQUEST_DEADLINE_SEC
    max_connections: int = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None  # watching a held-up answer
        self._left = 0  # bytes waiting to be sent at the last look
        self._resumed = False  # sending went on since the last look
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
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_sending()

    def resume_writing(self) -> None:
        self._resumed = True
        super().resume_writing()

    def handle_events(self) -> None:
        super().handle_events()
        self._follow()

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()
        self._follow()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm()  # the connection is the websocket protocol's from here on
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()
        self._follow()

    def waiting(self) -> bool:
        """Open, and its request (or the next one) has not arrived whole."""
        return self.conn.their_state in _WAITING and not self.transport.is_closing()

    def unread(self) -> bool:
        """Sending is held up by a peer that has not read what was sent (also after
        the connection was closed on our side with bytes still to send)."""
        held = self.flow.write_paused or self.transport.is_closing()
        return held and self.transport.get_write_buffer_size() > 0

    def _watch_sending(self) -> None:
        """While bytes wait to be sent, look every deadline whether the peer took any."""
        if self._stall is None:
            self._left = self.transport.get_write_buffer_size()
            self._resumed = False
            self._stall = self.loop.call_later(self.deadline_sec, self._look)

    def _look(self) -> None:
        self._stall = None
        left = self.transport.get_write_buffer_size()
        if not left:  # all sent: a request may be awaited (or the close goes through)
            self._follow()
        elif self._resumed or left < self._left:  # the peer is reading, however slowly
            self._watch_sending()
        else:
            self._close()

    def _follow(self) -> None:
        """A deadline runs exactly while a request is awaited; a running one is never
        pushed back (bytes trickling in do not buy time)."""
        if not self.waiting():
            self._disarm()
        elif self._deadline is None:
            self._deadline = self.loop.call_later(self.deadline_sec, self._expired)
        if self.transport.is_closing() and self.transport.get_write_buffer_size():
            self._watch_sending()  # closed on our side, the rest of an answer to send

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.waiting():
            return
        if self.transport.get_write_buffer_size():  # an answer is still being sent
            self._watch_sending()
        else:
            self._close()

    def _close(self) -> None:
        self._disarm()
        CLOSED.note(self.loop)
        self.transport.abort()  # what waits to be sent is dropped: its peer does not read

    def _make_room(self) -> None:
        waiting = [
            c
            for c in self.connections
            if isinstance(c, DeadlineH11Protocol) and c is not self and c.waiting()
        ]
        never = [c for c in waiting if not c._answered]
        unread = [
            c
            for c in self.connections
            if isinstance(c, DeadlineH11Protocol) and c is not self and c.unread()
        ]
        pool = never or unread or waiting
        if pool:
            min(pool, key=lambda c: c._opened)._close()
        else:  # every other connection is being answered: the new one goes
            self._close()
