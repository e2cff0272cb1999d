"""Test helper: a real HTTP server on loopback whose routes tests add on the fly.

Every request is recorded (path, headers, arrival time) so tests can prove that a refused
URL caused no request at all, or measure the gap between two arrivals.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDictProxy

from rag_app.config import RAGSettings, load_settings

FIXTURE_PAGES = Path(__file__).parent / "fixtures" / "rag_test_pages"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def crawl_settings(**overrides: Any) -> RAGSettings:
    """Settings for crawling the local test server: loopback allowed, no delay, no .env."""
    values: dict[str, Any] = {
        "rag_allow_private_network": True,
        "rag_crawl_delay_sec": 0.0,
        "rag_crawl_timeout_sec": 5.0,
    }
    values.update(overrides)
    return load_settings(_env_file=None, **values)


@dataclass(frozen=True)
class Hit:
    """One request that reached the server."""

    method: str
    path: str
    headers: CIMultiDictProxy[str]
    at: float


class LocalSite:
    """aiohttp server on `host` (default 127.0.0.1), random port, recorded requests."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.hits: list[Hit] = []
        self._routes: dict[str, Handler] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def __aenter__(self) -> LocalSite:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def paths(self) -> list[str]:
        return [hit.path for hit in self.hits]

    def route(self, path: str, handler: Handler) -> None:
        self._routes[path] = handler

    def page(
        self,
        path: str,
        body: str | bytes,
        *,
        content_type: str = "text/html; charset=utf-8",
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Serve a fixed body at `path`."""
        data = body.encode("utf-8") if isinstance(body, str) else body

        async def handler(_request: web.Request) -> web.StreamResponse:
            all_headers = {"Content-Type": content_type, **(headers or {})}
            return web.Response(body=data, status=status, headers=all_headers)

        self.route(path, handler)

    def serve_fixtures(self, directory: Path = FIXTURE_PAGES) -> None:
        """Serve every file of the fixture site at `/<name>`."""
        for file in sorted(directory.iterdir()):
            if file.suffix == ".html":
                self.page(f"/{file.name}", file.read_bytes())

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(Hit(request.method, request.path, request.headers, time.monotonic()))
        handler = self._routes.get(request.path)
        if handler is None:
            return web.Response(status=404, text="not found")
        return await handler(request)
