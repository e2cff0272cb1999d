"""A cap on the store service's open connections.

The service listens on loopback, and any local process may connect before it shows the
token. Without a cap, a process holding thousands of idle or half-sent connections uses
up the service's file descriptors, which its store needs too (SQLite, Chroma's index
files): writes would fail. At the cap, a connection is closed to make room, so a flood
neither exhausts descriptors nor locks clients out: first the oldest that never showed
the token (a flood's; idle, half-sent, or only asking for health), then the oldest idle
one of a client (a pooled keep-alive connection, which its client may be about to reuse:
only when clients alone hold more than the cap). A connection whose request is being
answered (a search, a crawl being followed) is never closed; when every connection is,
the new one is closed instead. Closed means aborted: a connection with answers its peer
never reads would otherwise stay open, uncounted, until they are sent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

logger = logging.getLogger(__name__)

MAX_CONNECTIONS = 256
"""Open connections at most; the clients of one store (MCP servers, commands, the Slack
bot) use a few each."""


class ConnectionCap:
    """Counts a `web.Server`'s connections (oldest first) and the requests each is
    answering; `install` it on the server, add `middleware` to the application."""

    def __init__(self, limit: int = MAX_CONNECTIONS) -> None:
        self.limit = limit
        self.open: dict[Any, asyncio.BaseTransport] = {}  # handler -> transport, oldest first
        self.answering: dict[Any, int] = {}  # transport -> requests being answered
        self.trusted: set[Any] = set()  # transports that showed the token
        self.closed = 0  # connections closed to make room

    def install(self, server: web.Server) -> None:
        """Wrap the server's connection bookkeeping (called by each connection's handler)."""
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self.open[handler] = transport
            if len(self.open) > self.limit:
                self._make_room(handler)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            transport = self.open.pop(handler, None)
            if transport is not None:
                self.answering.pop(transport, None)
                self.trusted.discard(transport)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def trust(self, transport: asyncio.BaseTransport | None) -> None:
        """The connection's request showed the token: a client's, closed last."""
        if transport is not None:
            self.trusted.add(transport)

    def _make_room(self, newest: Any) -> None:
        idle = [h for h, t in self.open.items() if h is not newest and not self._busy(t)]
        victim = next((h for h in idle if self.open[h] not in self.trusted), None)
        if victim is None:
            victim = idle[0] if idle else newest
        transport = self.open.pop(victim)
        self.answering.pop(transport, None)
        self.trusted.discard(transport)
        self.closed += 1
        if self.closed == 1 or self.closed % 1000 == 0:
            logger.warning(
                "More than %d connections are open; closed an idle one to make room "
                "(%d so far): a local process may be opening connections without a request.",
                self.limit,
                self.closed,
            )
        # after the connection's handler has started: closed inside `connection_made`,
        # its start would find the connection already torn down
        asyncio.get_running_loop().call_soon(transport.abort)  # type: ignore[attr-defined]

    def _busy(self, transport: asyncio.BaseTransport) -> bool:
        return self.answering.get(transport, 0) > 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Marks the request's connection as answering until the answer is sent."""
        transport = request.transport
        if transport is None:  # already gone
            return await handler(request)
        self.answering[transport] = self.answering.get(transport, 0) + 1
        try:
            return await handler(request)
        finally:
            left = self.answering.get(transport, 0) - 1
            if left > 0:
                self.answering[transport] = left
            else:
                self.answering.pop(transport, None)
