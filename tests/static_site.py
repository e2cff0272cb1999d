"""Test helper: a folder served by Python's own `http.server` on loopback, as a static
documentation site is (Last-Modified, If-Modified-Since → 304, `/dir` → `/dir/`,
`index.html` for folders). Every request is recorded: path and conditional headers. A
page can be held: its requests wait until the test lets it go (a crawl that cannot end
before the test has done what it must do while the crawl runs)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOLD_LIMIT_SEC = 120.0
"""The longest a held request waits: a test that forgets to let it go still ends."""


@dataclass
class StaticSite:
    """A running server: its base URL and what it was asked."""

    root: Path
    base: str
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(path, If-Modified-Since header or '') per request, in arrival order."""
    statuses: list[tuple[str, int]] = field(default_factory=list)
    arrivals: list[tuple[str, float]] = field(default_factory=list)
    """(path, `time.monotonic()`) of each request, in arrival order."""
    held: dict[str, threading.Event] = field(default_factory=dict)
    """Paths whose requests wait until their event is set (at most `HOLD_LIMIT_SEC`)."""
    held_after: dict[str, int] = field(default_factory=dict)
    """How many requests of a held path go through before the hold starts."""

    def hold(self, path: str, after: int = 0) -> threading.Event:
        """Make requests for `path` wait until the returned event is set; with `after`,
        from the request that comes after that many more."""
        self.held_after[path] = self.paths().count(path) + after
        return self.held.setdefault(path, threading.Event())

    def url(self, path: str) -> str:
        return self.base + path

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


class _Handler(SimpleHTTPRequestHandler):
    site: StaticSite

    def do_GET(self) -> None:
        self.site.arrivals.append((self.path, time.monotonic()))
        earlier = self.site.paths().count(self.path)
        self.site.requests.append((self.path, self.headers.get("If-Modified-Since", "")))
        gate = self.site.held.get(self.path)
        if gate is not None and earlier >= self.site.held_after.get(self.path, 0):
            gate.wait(HOLD_LIMIT_SEC)
        super().do_GET()

    def send_response(self, code: int, message: str | None = None) -> None:
        self.site.statuses.append((self.path, code))
        super().send_response(code, message)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_folder(root: Path) -> Iterator[StaticSite]:
    """Serve `root` on 127.0.0.1 (a free port) for the duration of the block."""
    site = StaticSite(root=root, base="")
    handler = type("Handler", (_Handler,), {"site": site})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()


def page(title: str, body: str, *, links: Sequence[str] = (), head: str = "") -> str:
    """A small documentation page with a nav of `links` and a main text."""
    nav = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
    return (
        f"<!doctype html><html><head><title>{title}</title>{head}</head><body>"
        f"<nav><ul>{nav}</ul></nav><main><h1>{title}</h1><p>{body}</p></main></body></html>"
    )


def write_site(root: Path, pages: dict[str, str]) -> None:
    """Write `{path: html}` under `root`, creating folders."""
    for path, html in pages.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(html, encoding="utf-8")
