"""A programmable aiohttp site on loopback: pages with ETags, per-path handlers, one
handler for everything, a robots.txt; requests and statuses are recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Any]


def html(title: str, body: str, links: tuple[str, ...] = (), head: str = "") -> str:
    nav = "".join(f'<li><a href="{h}">{h}</a></li>' for h in links)
    return (
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>"
        f"<nav><ul>{nav}</ul></nav><main><h1>{title}</h1><p>{body}</p></main></body></html>"
    )


@dataclass
class Site:
    base: str = ""
    pages: dict[str, str] = field(default_factory=dict)
    override: dict[str, Handler] = field(default_factory=dict)
    everything: Handler | None = None
    robots: str = "User-agent: *\nAllow: /\n"
    statuses: list[tuple[str, int]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.base + path

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path_qs
        if path == "/robots.txt":
            resp = web.Response(text=self.robots, content_type="text/plain")
        elif self.everything is not None:
            resp = await _call(self.everything, request)
        elif path in self.override:
            resp = await _call(self.override[path], request)
        elif path in self.pages:
            etag = f'"{abs(hash(self.pages[path]))}"'
            if request.headers.get("If-None-Match") == etag:
                resp = web.Response(status=304, headers={"ETag": etag})
            else:
                resp = web.Response(
                    text=self.pages[path], content_type="text/html", headers={"ETag": etag}
                )
        else:
            resp = web.Response(status=404, text="not found")
        self.statuses.append((path, resp.status))
        return resp


async def _call(fn: Handler, request: web.Request) -> web.StreamResponse:
    out = fn(request)
    if asyncio.iscoroutine(out):
        out = await out
    return out  # type: ignore[no-any-return]


class running:
    """`async with running(site):` serves `site` on 127.0.0.1 (sets `site.base`)."""

    def __init__(self, site: Site) -> None:
        self.site = site

    async def __aenter__(self) -> Site:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self.site.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        tcp = web.TCPSite(self.runner, "127.0.0.1", 0)
        await tcp.start()
        port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.site.base = f"http://127.0.0.1:{port}"
        return self.site

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()
