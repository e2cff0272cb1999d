"""A cap on the store service's open connections.

The service listens on loopback, and any local process may connect before it shows the
token. Without a cap, a process holding thousands of idle or half-sent connections uses
up the service's file descriptors, which its store needs too (SQLite, Chroma's index
files): writes would fail. At the cap, the connection idle the longest (no request being
answered: idle keep-alive, or a request whose headers never finish) is closed to make
room, so a flood neither exhausts descriptors nor locks clients out; a connection whose
request is being answered (a search, a crawl being followed) is never closed. When every
connection is answering a request, the new one is closed instead.
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
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def _make_room(self, newest: Any) -> None:
        victim = next(
            (h for h, t in self.open.items() if h is not newest and not self._busy(t)), newest
        )
        transport = self.open.pop(victim)
        self.closed += 1
        if self.closed == 1 or self.closed % 1000 == 0:
            logger.warning(
                "More than %d connections are open; closed the one idle the longest "
                "(%d so far): a local process may be opening connections without a request.",
                self.limit,
                self.closed,
            )
        # after the connection's handler has started: closed inside `connection_made`,
        # its start would find the connection already torn down
        asyncio.get_running_loop().call_soon(transport.close)

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
