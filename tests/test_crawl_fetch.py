"""WebCrawler against a real HTTP server on 127.0.0.1: pages, index crawls, bounds, errors."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest
from aiohttp import web
from test_crawl_site_helper import LocalSite, crawl_settings

from rag_app.crawl import crawler as crawler_module
from rag_app.crawl.crawler import WebCrawler
from rag_app.crawl.exceptions import (
    BinaryContentError,
    CrawlTimeoutError,
    HttpStatusError,
    InvalidPatternError,
    PageTooLargeError,
    RedirectNotFollowedError,
    UnsupportedContentTypeError,
)
from rag_app.crawl.pages import CrawledPage, NotModified
from rag_app.errors import CrawlError, RAGError


@pytest.fixture
async def site() -> AsyncIterator[LocalSite]:
    async with LocalSite() as server:
        server.serve_fixtures()
        yield server


@pytest.fixture
async def crawler() -> AsyncIterator[WebCrawler]:
    async with WebCrawler(crawl_settings()) as web_crawler:
        yield web_crawler


async def fetch_page(crawler: WebCrawler, url: str) -> CrawledPage:
    page = await crawler.crawl_page(url)
    assert isinstance(page, CrawledPage)
    return page


# -- single pages ------------------------------------------------------------------------------


async def test_crawl_page_keeps_the_table_and_headings(
    site: LocalSite, crawler: WebCrawler
) -> None:
    page = await fetch_page(crawler, site.url("/table_numeric.html#stats"))
    assert page.url == site.url("/table_numeric.html")
    assert page.title == "モンスター能力値一覧 | 冒険者ギルド資料室"
    assert "| りゅうおう | 90 | 75 | 100 | 75 | 60 | 0 | 0 |" in page.text
    assert "| 名前 | HP | MP | 攻撃力 |" in page.text
    assert "\n## 補足\n" in page.text
    assert datetime.fromisoformat(page.crawled_at).utcoffset() is not None
    assert re.fullmatch(r"[0-9a-f]{64}", page.content_hash)
    assert page.content_type == "text/html"
    hit = site.hits[-1]
    assert hit.path == "/table_numeric.html"
    assert hit.headers["User-Agent"] == "RagKnowledgeBot/0.1"


async def test_same_text_gives_same_hash(site: LocalSite, crawler: WebCrawler) -> None:
    first = await fetch_page(crawler, site.url("/prose_only.html"))
    second = await fetch_page(crawler, site.url("/prose_only.html#again"))
    other = await fetch_page(crawler, site.url("/japanese_names.html"))
    assert first.content_hash == second.content_hash != other.content_hash


async def test_plain_text_and_markdown_pass_through(site: LocalSite, crawler: WebCrawler) -> None:
    site.page("/notes.md", "# メモ\r\n\r\n| a | b |\r\n", content_type="text/markdown")
    site.page("/notes.txt", "ただのテキスト\n二行目", content_type="text/plain; charset=utf-8")
    md = await fetch_page(crawler, site.url("/notes.md"))
    assert (md.title, md.text) == ("メモ", "# メモ\n\n| a | b |")
    txt = await fetch_page(crawler, site.url("/notes.txt"))
    assert txt.text == "ただのテキスト\n二行目"
    assert txt.title == site.url("/notes.txt")


async def test_shift_jis_page_with_meta_charset(site: LocalSite, crawler: WebCrawler) -> None:
    html = (
        '<html><head><meta charset="Shift_JIS"><title>能力値</title></head>'
        "<body><p>りゅうおう ＨＰ90</p></body></html>"
    )
    site.page("/sjis.html", html.encode("cp932"), content_type="text/html")
    page = await fetch_page(crawler, site.url("/sjis.html"))
    assert (page.title, page.text, page.encoding) == ("能力値", "りゅうおう ＨＰ90", "cp932")


async def test_broken_bytes_do_not_crash(site: LocalSite, crawler: WebCrawler) -> None:
    site.page("/broken.html", "<p>前半".encode() + b"\xff\xfe\x80" + "後半</p>".encode())
    page = await fetch_page(crawler, site.url("/broken.html"))
    assert page.text.startswith("前半") and page.text.endswith("後半")


async def test_missing_content_type_is_sniffed(crawler: WebCrawler) -> None:
    """aiohttp's server always adds a Content-Type, so answer from a raw socket server."""

    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b"<!DOCTYPE html><title>t</title><p>x</p>" if paths.pop(0) else b"\x00\x01binary"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body))
        writer.write(b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    paths = [False, True, False]  # robots.txt (not HTML: treated as no rules), page, binary
    server = await asyncio.start_server(raw, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        page = await fetch_page(crawler, f"http://127.0.0.1:{port}/untyped")
        assert (page.title, page.text) == ("t", "x")
        with pytest.raises(UnsupportedContentTypeError, match=r"content type \(none\)"):
            await crawler.crawl_page(f"http://127.0.0.1:{port}/binary")


@pytest.mark.parametrize("content_type", ["image/png", "application/octet-stream"])
async def test_wrong_content_type_is_refused(
    site: LocalSite, crawler: WebCrawler, content_type: str
) -> None:
    site.page("/file", b"\x89PNG....", content_type=content_type)
    with pytest.raises(
        UnsupportedContentTypeError, match=f"Unsupported content type {content_type}"
    ):
        await crawler.crawl_page(site.url("/file"))


async def test_empty_page_is_an_error(site: LocalSite, crawler: WebCrawler) -> None:
    site.page("/spa", "<html><body><div id=root></div><script>app()</script></body></html>")
    with pytest.raises(CrawlError, match="no readable text"):
        await crawler.crawl_page(site.url("/spa"))


# -- bounds ------------------------------------------------------------------------------------


async def test_oversized_body_with_content_length(site: LocalSite) -> None:
    site.page("/big", "<p>" + "あ" * 3000 + "</p>")
    async with WebCrawler(crawl_settings(rag_max_page_bytes=4096)) as crawler:
        with pytest.raises(PageTooLargeError, match="4,096-byte limit"):
            await crawler.crawl_page(site.url("/big"))


async def test_oversized_chunked_body_is_stopped_while_streaming(site: LocalSite) -> None:
    sent: list[int] = []

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(200):  # 200 x 1 KB, far beyond the 4 KB limit
            await response.write(b"<p>" + b"x" * 1017 + b"</p>")
            sent.append(1)
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    site.route("/stream", endless)
    async with WebCrawler(crawl_settings(rag_max_page_bytes=4096)) as crawler:
        with pytest.raises(PageTooLargeError):
            await crawler.crawl_page(site.url("/stream"))
    assert "Content-Length" not in site.hits[-1].headers


async def test_slow_server_times_out(site: LocalSite) -> None:
    async def slow(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3)
        return web.Response(text="too late")

    site.route("/slow", slow)
    async with WebCrawler(crawl_settings(rag_crawl_timeout_sec=0.5)) as crawler:
        with pytest.raises(CrawlTimeoutError, match=r"接続がタイムアウトしました \(0.5秒\)"):
            await crawler.crawl_page(site.url("/slow"))


async def test_slow_body_times_out(site: LocalSite) -> None:
    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        await response.prepare(request)
        for _ in range(30):
            await response.write(b"<p>x</p>")
            await asyncio.sleep(0.1)
        return response

    site.route("/trickle", trickle)
    async with WebCrawler(crawl_settings(rag_crawl_timeout_sec=0.5)) as crawler:
        with pytest.raises(CrawlTimeoutError):
            await crawler.crawl_page(site.url("/trickle"))


# -- HTTP status, conditional GET, redirects ---------------------------------------------------


async def test_http_404_message_and_status(site: LocalSite, crawler: WebCrawler) -> None:
    with pytest.raises(HttpStatusError) as caught:
        await crawler.crawl_page(site.url("/missing.html"))
    assert str(caught.value).startswith("HTTP 404 Not Found for http://127.0.0.1:")
    assert caught.value.status == 404 and caught.value.is_gone
    site.page("/gone", "", status=410)
    with pytest.raises(HttpStatusError, match="HTTP 410 Gone") as gone:
        await crawler.crawl_page(site.url("/gone"))
    assert gone.value.is_gone


async def test_304_with_etag(site: LocalSite, crawler: WebCrawler) -> None:
    async def conditional(request: web.Request) -> web.StreamResponse:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(
            text="<p>版1</p>",
            content_type="text/html",
            headers={"ETag": '"v1"', "Last-Modified": "Wed, 01 Jan 2025 00:00:00 GMT"},
        )

    site.route("/cond", conditional)
    page = await fetch_page(crawler, site.url("/cond"))
    assert (page.etag, page.last_modified) == ('"v1"', "Wed, 01 Jan 2025 00:00:00 GMT")
    again = await crawler.crawl_page(
        site.url("/cond"), etag=page.etag, last_modified=page.last_modified
    )
    assert isinstance(again, NotModified)
    assert again.etag == '"v1"' and again.url == site.url("/cond")
    assert site.hits[-1].headers["If-Modified-Since"] == "Wed, 01 Jan 2025 00:00:00 GMT"
    results = await crawler.crawl_pages(
        [site.url("/cond")], validators={site.url("/cond"): ('"v1"', None)}
    )
    assert results[0].not_modified and results[0].ok and results[0].page is None


async def test_redirect_is_not_followed_and_names_the_target(
    site: LocalSite, crawler: WebCrawler
) -> None:
    site.page("/old", "", status=301, headers={"Location": "/table_numeric.html#x"})
    target = site.url("/table_numeric.html")
    with pytest.raises(RedirectNotFollowedError) as caught:
        await crawler.crawl_page(site.url("/old"))
    assert str(caught.value) == f"Redirect to {target} not followed; add the target URL directly."
    assert "/table_numeric.html" not in site.paths()


async def test_follow_redirects_revalidates_each_hop(site: LocalSite) -> None:
    site.page("/a", "", status=302, headers={"Location": "/b"})
    site.page("/b", "", status=307, headers={"Location": site.url("/table_numeric.html")})
    site.page("/to-file", "", status=302, headers={"Location": "file:///etc/passwd"})
    site.page("/loop", "", status=302, headers={"Location": "/loop"})
    async with WebCrawler(crawl_settings(rag_follow_redirects=True)) as crawler:
        page = await fetch_page(crawler, site.url("/a"))
        assert page.url == site.url("/a")
        assert page.final_url == site.url("/table_numeric.html")
        assert "りゅうおう" in page.text
        with pytest.raises(RAGError, match="not scheme 'file'"):
            await crawler.crawl_page(site.url("/to-file"))
        with pytest.raises(RedirectNotFollowedError, match="Too many redirects"):
            await crawler.crawl_page(site.url("/loop"))
    assert site.paths().count("/loop") == 6  # the first request + 5 followed hops


# -- index crawls -----------------------------------------------------------------------------


async def test_index_crawl_returns_same_domain_links(site: LocalSite, crawler: WebCrawler) -> None:
    links = await crawler.crawl_index(site.url("/index.html"))
    expected = [
        site.url(f"/{name}.html")
        for name in (
            "prose_only",
            "table_numeric",
            "table_mixed",
            "headings_deep",
            "japanese_names",
            "long_document",
            "edge_cases",
        )
    ]
    assert links.urls == expected
    assert links.skipped_external == 1
    assert links.index_url == site.url("/index.html")
    assert all("#" not in url for url in links.urls)
    assert await crawler.crawl_index_page(site.url("/index.html")) == expected


async def test_index_pattern_and_page_cap(site: LocalSite) -> None:
    async with WebCrawler(crawl_settings(rag_max_crawl_pages=2)) as crawler:
        assert await crawler.crawl_index_page(site.url("/index.html"), r"table_") == [
            site.url("/table_numeric.html"),
            site.url("/table_mixed.html"),
        ]
        assert await crawler.crawl_index_page(site.url("/index.html"), r"\.html$") == [
            site.url("/prose_only.html"),
            site.url("/table_numeric.html"),
        ]
        links = await crawler.crawl_index(site.url("/index.html"), r"names")
        assert links.urls == [site.url("/japanese_names.html")]
        assert links.skipped_by_pattern == 6


async def test_invalid_pattern_fails_before_any_fetch(site: LocalSite, crawler: WebCrawler) -> None:
    with pytest.raises(InvalidPatternError, match="not a valid regular expression"):
        await crawler.crawl_index_page(site.url("/index.html"), "([a-z")
    with pytest.raises(InvalidPatternError, match="longer than 500"):
        await crawler.crawl_index_page(site.url("/index.html"), "x" * 501)
    assert site.hits == []


# -- many pages -------------------------------------------------------------------------------


async def test_one_500_among_ten_is_isolated(site: LocalSite) -> None:
    for number in range(10):
        if number == 6:
            site.page(f"/p{number}", "boom", status=500)
        else:
            site.page(f"/p{number}", f"<title>ページ{number}</title><p>本文{number}</p>")
    calls: list[tuple[int, int]] = []
    async with WebCrawler(crawl_settings(rag_crawl_concurrency=3)) as crawler:
        results = await crawler.crawl_pages(
            [site.url(f"/p{n}") for n in range(10)], progress=lambda d, t: calls.append((d, t))
        )
    assert [r.url for r in results] == [site.url(f"/p{n}") for n in range(10)]
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1 and failed[0].url == site.url("/p6")
    assert failed[0].error is not None and failed[0].error.startswith(
        "HTTP 500 Internal Server Error"
    )
    assert failed[0].status == 500 and not failed[0].gone
    assert [r.page.title for r in results if r.page] == [f"ページ{n}" for n in range(10) if n != 6]
    assert calls == [(n, 10) for n in range(1, 11)]


async def test_crawl_pages_dedupes_anchors_and_caps(site: LocalSite) -> None:
    async def async_progress(done: int, total: int) -> None:
        seen.append(done)

    seen: list[int] = []
    async with WebCrawler(crawl_settings(rag_max_crawl_pages=2)) as crawler:
        results = await crawler.crawl_pages(
            [
                site.url("/prose_only.html#a"),
                site.url("/prose_only.html#b"),
                "ftp://example.com/",
                site.url("/table_numeric.html"),
                site.url("/japanese_names.html"),
            ],
            progress=async_progress,
        )
    assert [(r.url, r.ok) for r in results] == [
        (site.url("/prose_only.html"), True),
        ("ftp://example.com/", False),
        (site.url("/table_numeric.html"), True),
        (site.url("/japanese_names.html"), False),
    ]
    assert results[3].error is not None and "RAG_MAX_CRAWL_PAGES" in results[3].error
    assert site.paths().count("/prose_only.html") == 1
    assert "/japanese_names.html" not in site.paths()
    assert sorted(seen) == [2, 3, 4]


async def test_concurrency_cap(site: LocalSite) -> None:
    in_flight = 0
    peak = 0

    async def slowish(_request: web.Request) -> web.StreamResponse:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.1)
        in_flight -= 1
        return web.Response(text="<p>ok</p>", content_type="text/html")

    for number in range(6):
        site.route(f"/c{number}", slowish)
    settings = crawl_settings(rag_crawl_concurrency=2, rag_respect_robots_txt=False)
    async with WebCrawler(settings) as crawler:
        results = await crawler.crawl_pages([site.url(f"/c{n}") for n in range(6)])
    assert all(r.ok for r in results)
    assert peak == 2


# -- hostile bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "a PDF document"),
        (b"PK\x03\x04\x14\x00\x00\x00", "a ZIP archive"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "a PNG image"),
        (b"<html>" + b"\x00" * 10 + b"</html>", "binary data (NUL bytes)"),
    ],
)
async def test_binary_body_served_as_html_is_refused(
    site: LocalSite, crawler: WebCrawler, body: bytes, kind: str
) -> None:
    site.page("/fake.html", body, content_type="text/html")
    with pytest.raises(BinaryContentError) as caught:
        await crawler.crawl_page(site.url("/fake.html"))
    message = str(caught.value)
    assert message == (
        f"The page {site.url('/fake.html')} is served as text/html but its body is {kind}; "
        "only HTML, XHTML, plain text, Markdown, PDF and Word (.docx) pages can be ingested, "
        "each served as its own type."
    )
    assert isinstance(caught.value, CrawlError) and caught.value.status is None


async def test_binary_index_page_is_refused(site: LocalSite, crawler: WebCrawler) -> None:
    site.page("/index.bin", b"\x1f\x8b\x08\x00gzip", content_type="text/html")
    with pytest.raises(BinaryContentError, match="gzip-compressed data"):
        await crawler.crawl_index(site.url("/index.bin"))


async def test_binary_page_among_others_is_one_line_error(site: LocalSite) -> None:
    site.page("/ok", "<p>本文</p>")
    site.page("/bin", b"GIF89a\x01\x00\x01\x00", content_type="text/plain")
    async with WebCrawler(crawl_settings()) as crawler:
        ok, binary = await crawler.crawl_pages([site.url("/ok"), site.url("/bin")])
    assert ok.ok and binary.error is not None
    assert "\n" not in binary.error and "a GIF image" in binary.error


async def test_utf16_page_with_declared_charset_is_not_binary(
    site: LocalSite, crawler: WebCrawler
) -> None:
    site.page(
        "/u16", "<p>本文です</p>".encode("utf-16-le"), content_type="text/html; charset=utf-16le"
    )
    page = await fetch_page(crawler, site.url("/u16"))
    assert page.text == "本文です"


@pytest.mark.parametrize("charset", ["x-unknown-123", "utf-7", "base64", "undefined", "a" * 300])
async def test_bogus_declared_charset_falls_back_to_detection(
    site: LocalSite, crawler: WebCrawler, charset: str
) -> None:
    site.route("/c", _with_charset("<p>Café crème brûlée à la française</p>", "cp1252", charset))
    page = await fetch_page(crawler, site.url("/c"))
    assert (page.text, page.encoding) == ("Café crème brûlée à la française", "cp1252")


def _with_charset(text: str, codec: str, charset: str) -> Callable[[web.Request], Awaitable[Any]]:
    body = text.encode(codec)

    async def handler(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, headers={"Content-Type": f"text/html; charset={charset}"})

    return handler


async def test_huge_title_is_capped(site: LocalSite, crawler: WebCrawler) -> None:
    site.page("/t", f"<title>{'長い題名' * 25_000}</title><p>本文</p>")
    page = await fetch_page(crawler, site.url("/t"))
    assert len(page.title) == 200 and page.title.endswith("…")
    assert page.text == "本文"


async def test_html_is_parsed_off_the_event_loop(
    site: LocalSite, crawler: WebCrawler, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    real = crawler_module.html_to_text

    def recording(html: str, url: str = "") -> Any:
        threads.append(threading.get_ident())
        return real(html, url)

    monkeypatch.setattr(crawler_module, "html_to_text", recording)
    await fetch_page(crawler, site.url("/prose_only.html"))
    assert threads and threads[0] != threading.get_ident()


async def test_a_huge_one_line_table_does_not_stall_the_loop(site: LocalSite) -> None:
    row = "<tr><td>りゅうおう</td><td>90</td><td>75</td><td>100</td></tr>"
    site.page("/big", "<table>" + row * 12_000 + "</table>")  # ~0.7 MB, one line
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with WebCrawler(crawl_settings(rag_max_page_bytes=5 * 1024 * 1024)) as crawler:
        tick = asyncio.create_task(ticker())
        started = time.perf_counter()
        page = await fetch_page(crawler, site.url("/big"))
        took = time.perf_counter() - started
        done.set()
        await tick
    assert page.text.count("| りゅうおう |") == 12_000
    # The loop kept ticking while the page was parsed (it took ~1 s or more).
    assert max(gaps) < max(0.5, took / 2), (max(gaps), took)
