"""A hostile site crawled with `--sitemap` or recursively: its redirects, sitemaps and
robots.txt neither reach outside the scope nor hold the crawler, its memory or the
owner's event loop. A real crawler against real HTTP servers on loopback; pages are
recorded as the store would receive them."""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rag_app import site_crawl as site_crawl_module
from rag_app.crawl.crawler import PARSES_AT_ONCE, WebCrawler
from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.scope import CrawlScope
from rag_app.crawl.sitemap import parse_sitemap
from rag_app.crawl_options import CrawlOptions
from rag_app.errors import CrawlError
from rag_app.results import CrawlSummary, IngestResult
from rag_app.site_crawl import MAX_SITEMAP_PAGES, SiteCrawl
from tests.processes import rag, rag_async, rag_json, store_env
from tests.test_crawl_site_helper import LocalSite, crawl_settings


class Stored:
    """What the crawl hands to the store: source → text."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}

    async def ingest(self, fetched: Any, _old: Any, committed: Any) -> IngestResult:
        self.pages[fetched.source] = getattr(fetched, "text", "")
        result = IngestResult(source=fetched.source, chunks=1)
        committed(result)
        return result

    async def remove(self, _url: str) -> int:
        return 0


def site_crawl(crawler: WebCrawler, start: str, options: CrawlOptions, stored: Stored) -> SiteCrawl:
    options = options.validated(50, 10_000)
    scope = CrawlScope.build(start, "", options.exclude, whole_site=not options.recursive)
    return SiteCrawl(
        crawler, scope, options, known={}, ingest=stored.ingest, remove=stored.remove, workers=4
    )


class LoopWatch:
    """The longest time the event loop did not get round to a 10 ms tick."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> LoopWatch:
        self._task = asyncio.ensure_future(self._tick())
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


XML = "application/xml"


def redirect(to: str) -> Any:
    async def handler(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(to)

    return handler


async def test_a_redirect_out_of_the_scope_is_not_stored() -> None:
    async with LocalSite() as site, LocalSite() as other:
        links = '<a href="/docs/a.html">a</a><a href="/docs/b.html">b</a>'
        site.page("/docs/index.html", f"<title>i</title><p>index</p>{links}")
        site.route("/docs/a.html", redirect(site.url("/admin/secret.html")))
        site.route("/docs/b.html", redirect(other.url("/elsewhere.html")))
        site.page("/admin/secret.html", "<title>s</title><p>ADMIN-ONLY TEXT outside /docs/</p>")
        other.page("/elsewhere.html", "<title>x</title><p>OTHER-SITE TEXT</p>")
        stored = Stored()
        async with WebCrawler(crawl_settings(rag_follow_redirects=True)) as crawler:
            crawl = site_crawl(
                crawler, site.url("/docs/index.html"), CrawlOptions(max_depth=2), stored
            )
            summary = await asyncio.wait_for(crawl.run(site.url("/docs/index.html")), 30)
    assert list(stored.pages) == [site.url("/docs/index.html")], stored.pages
    assert summary.out_of_scope >= 2


async def test_a_sitemap_index_cannot_send_the_crawl_to_another_site() -> None:
    async with LocalSite() as site, LocalSite() as victim:
        victim.page("/sitemap.xml", "<urlset></urlset>", content_type="application/xml")
        index = "".join(
            f"<sitemap><loc>{victim.url('/sitemap.xml')}?n={i}</loc></sitemap>" for i in range(20)
        )
        index += f"<sitemap><loc>{site.url('/docs-sitemap.xml')}</loc></sitemap>"
        site.page(
            "/sitemap.xml", f"<sitemapindex>{index}</sitemapindex>", content_type="application/xml"
        )
        urlset = f"<urlset><url><loc>{site.url('/docs/a.html')}</loc></url></urlset>"
        site.page("/docs-sitemap.xml", urlset, content_type="application/xml")
        site.page("/docs/a.html", "<title>a</title><p>a page</p>")
        stored = Stored()
        async with WebCrawler(crawl_settings()) as crawler:
            crawl = site_crawl(crawler, site.url("/docs/"), CrawlOptions(sitemap=True), stored)
            await asyncio.wait_for(crawl.run(site.url("/docs/")), 30)
    assert victim.paths() == []  # not one request to the other host
    assert list(stored.pages) == [site.url("/docs/a.html")]


async def test_a_crawl_delay_of_hours_is_refused_and_a_slow_site_holds_up_no_other() -> None:
    # politeness is per host name, so the unrelated site is on another loopback address
    async with LocalSite() as hostile, LocalSite() as slow, LocalSite("127.0.0.2") as other:
        hostile.page("/robots.txt", "User-agent: *\nCrawl-delay: 1e9\n", content_type="text/plain")
        hostile.page("/docs/index.html", "<title>i</title><p>index</p>")
        links = "".join(f'<a href="/docs/p{i}.html">p{i}</a>' for i in range(8))
        slow.page("/robots.txt", "User-agent: *\nCrawl-delay: 30\n", content_type="text/plain")
        slow.page("/docs/index.html", f"<title>i</title><p>index text</p>{links}")
        for i in range(8):
            slow.page(f"/docs/p{i}.html", f"<title>p{i}</title><p>page {i}</p>")
        other.page("/a.html", "<title>a</title><p>an unrelated page</p>")
        async with WebCrawler(crawl_settings(rag_crawl_timeout_sec=2.0)) as crawler:
            refused = site_crawl(
                crawler, hostile.url("/docs/index.html"), CrawlOptions(max_depth=2), Stored()
            )
            began = time.monotonic()
            try:
                await asyncio.wait_for(refused.run(hostile.url("/docs/index.html")), 10)
            except Exception as err:  # the start page itself cannot be crawled: one line
                assert "Crawl-delay" in str(err) and "\n" not in str(err), err
            assert time.monotonic() - began < 5
            assert hostile.paths() == ["/robots.txt"]  # no page was asked for

            # a site asking 30 s between pages: its queued pages wait without holding a
            # slot, so another site's page is fetched at once through the same crawler
            polite = site_crawl(
                crawler, slow.url("/docs/index.html"), CrawlOptions(max_depth=2), Stored()
            )
            task = asyncio.create_task(polite.run(slow.url("/docs/index.html")))
            while "/docs/index.html" not in slow.paths():
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # its next pages are now waiting their turn
            began = time.monotonic()
            page = await asyncio.wait_for(crawler.crawl_page(other.url("/a.html")), 10)
            waited = time.monotonic() - began
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert isinstance(page, CrawledPage) and waited < 3, waited


def test_a_gzip_sitemap_of_half_a_million_elements_is_read_in_little_memory() -> None:
    body = b"<urlset>" + b"<a/>" * 500_000 + b"<url><loc>http://h/p</loc></url></urlset>"
    wire = gzip.compress(body, 9)  # ~2 KB on the wire, 2 MB inflated
    del body
    tracemalloc.start()
    try:
        entries = parse_sitemap(wire, "s")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert entries.pages == ["http://h/p"]
    # a tree of it took ~40 MB (~240 MB for 10 MB); read entry by entry ~7 MB
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MB for a 2 MB sitemap"


def serve_listed_pages(site: LocalSite, files: int, per_file: int, also: Any = ()) -> None:
    """A sitemap index of `files` plain-text sitemaps, each listing `per_file` pages of
    /docs/, and the sitemaps `also` names."""
    body = "".join(site.url(f"/docs/p{i}.html") + "\n" for i in range(per_file)).encode()

    async def plain(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, content_type="text/plain")

    site.route("/part.txt", plain)
    listed = [f"{site.url('/part.txt')}?n={n}" for n in range(files)] + list(also)
    index = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in listed)
    site.page("/sitemap.xml", f"<sitemapindex>{index}</sitemapindex>", content_type=XML)


async def test_a_flood_of_listed_pages_costs_no_more_than_the_page_limit() -> None:
    files, per_file = 8, 50_000
    async with LocalSite() as site:
        serve_listed_pages(site, files, per_file)
        for i in range(5):
            site.page(f"/docs/p{i}.html", f"<title>p{i}</title><p>page {i}</p>")
        stored = Stored()
        async with WebCrawler(crawl_settings()) as crawler:
            crawl = site_crawl(
                crawler, site.url("/docs/"), CrawlOptions(sitemap=True, max_pages=5), stored
            )
            with LoopWatch() as loop:
                summary: CrawlSummary = await asyncio.wait_for(crawl.run(site.url("/docs/")), 120)
    # the files are read until MAX_SITEMAP_PAGES listed pages: 4 of the 8 here
    assert len(stored.pages) == 5 and summary.over_cap == MAX_SITEMAP_PAGES - 5
    assert loop.longest < 1.0, f"the event loop stood still for {loop.longest:.1f} s"


class CountingParses(WebCrawler):
    """The real crawler, counting how many pages it builds at the same time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = self.most = 0
        self._count = threading.Lock()

    def _build_page(self, url: str, response: Any) -> CrawledPage:
        with self._count:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.2)  # a big page: its tree takes a while, and memory
            return super()._build_page(url, response)
        finally:
            with self._count:
                self.now -= 1


async def test_pages_are_parsed_a_few_at_a_time_whatever_the_fetch_concurrency() -> None:
    async with LocalSite() as site:
        links = "".join(f'<a href="/docs/p{i}.html">p{i}</a>' for i in range(8))
        site.page("/docs/index.html", f"<title>i</title><p>index</p>{links}")
        for i in range(8):
            site.page(f"/docs/p{i}.html", f"<title>p{i}</title><p>page {i}</p>")
        stored = Stored()
        async with CountingParses(crawl_settings(rag_crawl_concurrency=8)) as crawler:
            start = site.url("/docs/index.html")
            crawl = site_crawl(crawler, start, CrawlOptions(max_depth=2), stored)
            await asyncio.wait_for(crawl.run(start), 30)
    assert len(stored.pages) == 9 and crawler.most == PARSES_AT_ONCE == 2


async def test_rag_crawl_of_a_hostile_site_stores_nothing_outside_and_searches_are_answered(
    tmp_path: Path,
) -> None:
    """The same site through real processes: `rag crawl --sitemap` in one, searches from
    others while the owner reads 200,000 listed pages, then what was stored."""
    async with LocalSite() as site, LocalSite() as victim:
        serve_listed_pages(site, 4, 50_000, also=[victim.url("/sitemap.xml")])
        site.route("/docs/p0.html", redirect(site.url("/admin/secret.html")))
        site.page("/admin/secret.html", "<title>s</title><p>ADMIN-ONLY TEXT</p>")
        for i in range(1, 5):
            site.page(f"/docs/p{i}.html", f"<title>p{i}</title><p>kettle page {i}</p>")
        victim.page("/sitemap.xml", "<urlset></urlset>", content_type=XML)
        env = store_env(tmp_path, RAG_FOLLOW_REDIRECTS="true")
        assert (await asyncio.to_thread(rag, env, "stats")).returncode == 0  # owner up
        crawl = rag_async(env, "crawl", site.url("/docs/"), "--sitemap", "--max-pages", "5")
        try:
            slowest = 0.0
            while crawl.poll() is None:
                began = time.monotonic()
                found = await asyncio.to_thread(rag, env, "search", "kettle", timeout=60)
                assert found.returncode == 0, found.stderr
                slowest = max(slowest, time.monotonic() - began)
            _out, err = await asyncio.to_thread(crawl.communicate, timeout=60)
            assert crawl.returncode == 0, err
            sources = rag_json(env, "stats")["sources"]
        finally:
            await asyncio.to_thread(rag, env, "service", "stop")
    assert victim.paths() == []
    assert sorted(sources) == [site.url(f"/docs/p{i}.html") for i in range(1, 5)]
    assert slowest < 15, f"a search took {slowest:.1f} s while the crawl read its sitemaps"


async def test_slow_sitemaps_hold_the_crawl_for_a_bounded_time(monkeypatch: Any) -> None:
    """A sitemap index of many files that each answer slowly (one of them listed twice):
    reading them stops after `SITEMAP_SECONDS`, the file then being read included; the
    pages of the files read are crawled and the files left out are reported, each
    once."""
    monkeypatch.setattr(site_crawl_module, "SITEMAP_SECONDS", 1.0)
    async with LocalSite() as site:

        async def slow(request: web.Request) -> web.StreamResponse:
            await asyncio.sleep(0.4)
            n = request.query["n"]
            return web.Response(
                body=site.url(f"/docs/p{n}.html").encode(), content_type="text/plain"
            )

        site.route("/slow.txt", slow)
        listed = [*range(40), 39]  # the last file twice
        index = "".join(
            f"<sitemap><loc>{site.url('/slow.txt')}?n={n}</loc></sitemap>" for n in listed
        )
        site.page("/sitemap.xml", f"<sitemapindex>{index}</sitemapindex>", content_type=XML)
        for n in range(40):
            site.page(f"/docs/p{n}.html", f"<title>p{n}</title><p>page {n}</p>")
        stored = Stored()
        async with WebCrawler(crawl_settings()) as crawler:
            crawl = site_crawl(crawler, site.url("/docs/"), CrawlOptions(sitemap=True), stored)
            began = time.monotonic()
            summary: CrawlSummary = await asyncio.wait_for(crawl.run(site.url("/docs/")), 60)
            took = time.monotonic() - began
    asked = [p for p in site.paths() if p.startswith("/slow.txt")]
    assert 2 <= len(asked) <= 5, asked  # ~1 s of 0.4 s files, not all 40 (16 s)
    assert took < 10
    assert len(stored.pages) == len(asked) - 1  # the last one asked was given up
    took_over = "not read: reading the site's sitemaps took over 1 s"
    reasons = [d["reason"] for d in summary.error_details]
    (given_up,) = [r for r in reasons if r.endswith(took_over) and "file(s)" not in r]
    assert given_up == f"{site.url('/slow.txt')}?n={len(asked) - 1} {took_over}"
    (skipped,) = [r for r in reasons if "sitemap file(s) not read" in r]
    assert skipped.startswith(f"{40 - len(asked)} sitemap file(s) not read")


async def test_a_sitemap_redirecting_slowly_is_given_up_at_the_bound(monkeypatch: Any) -> None:
    """Each redirect hop has its own request timeout: a sitemap answering every hop just
    in time is still given up when reading sitemaps has taken `SITEMAP_SECONDS`, and an
    index read before it names no page, which the error says."""
    monkeypatch.setattr(site_crawl_module, "SITEMAP_SECONDS", 1.0)
    async with LocalSite() as site:

        async def hop(request: web.Request) -> web.StreamResponse:
            await asyncio.sleep(0.8)
            n = int(request.query.get("n", "0"))
            raise web.HTTPFound(site.url(f"/hop.xml?n={n + 1}"))

        site.route("/hop.xml", hop)
        index = f"<sitemapindex><sitemap><loc>{site.url('/hop.xml')}</loc></sitemap></sitemapindex>"
        site.page("/sitemap.xml", index, content_type=XML)
        settings = crawl_settings(rag_follow_redirects=True, rag_crawl_timeout_sec=1.0)
        async with WebCrawler(settings) as crawler:
            crawl = site_crawl(crawler, site.url("/docs/"), CrawlOptions(sitemap=True), Stored())
            began = time.monotonic()
            with pytest.raises(
                CrawlError, match=r"No page was found in the sitemaps of .*\(1 read, 1 not\)"
            ):
                await asyncio.wait_for(crawl.run(site.url("/docs/")), 30)
            took = time.monotonic() - began
    assert took < 2.5, took  # not five hops of 0.8 s


@pytest.mark.parametrize("robots", ["moved", "not-a-url"])
async def test_rag_crawl_follows_a_moved_robots_txt_and_survives_a_broken_one(
    tmp_path: Path, robots: str
) -> None:
    """Through real processes (`rag crawl` and the store service it starts): a robots.txt
    that moved is followed with redirects off and its rules keep the crawl out of the
    private folder; one that points to no URL at all is read as unreadable (fail-open),
    the crawl goes on and the service keeps answering."""
    async with LocalSite() as site:
        if robots == "moved":
            site.route("/robots.txt", redirect("/cdn/robots.txt"))
            site.page(
                "/cdn/robots.txt", "User-agent: *\nDisallow: /docs/private/\n",
                content_type="text/plain",
            )  # fmt: skip
        else:
            site.page(
                "/robots.txt", "", content_type="text/plain", status=301,
                headers={"Location": "http://[::1/robots.txt"},
            )  # fmt: skip
        links = '<a href="a.html">a</a> <a href="private/s.html">s</a>'
        site.page("/docs/", f"<title>index</title><p>kettle index</p>{links}")
        site.page("/docs/a.html", "<title>a</title><p>kettle page a</p>")
        site.page("/docs/private/s.html", "<title>s</title><p>kettle private page</p>")
        env = store_env(tmp_path)  # RAG_FOLLOW_REDIRECTS: off, the default
        try:
            crawl = await asyncio.to_thread(
                rag, env, "crawl", site.url("/docs/"), "--max-depth", "2", timeout=120
            )
            blocked = "Blocked by robots.txt" in crawl.stdout + crawl.stderr
            # some pages failed (3) when the moved rules blocked one; else all went in (0)
            assert crawl.returncode == (3 if robots == "moved" else 0), crawl.stderr
            assert blocked == (robots == "moved"), crawl.stdout + crawl.stderr
            sources = sorted(rag_json(env, "stats")["sources"])
            found = await asyncio.to_thread(rag, env, "search", "kettle")
            assert found.returncode == 0, found.stderr
        finally:
            await asyncio.to_thread(rag, env, "service", "stop")
    docs = [site.url("/docs/"), site.url("/docs/a.html")]
    if robots == "moved":
        assert sources == docs
        assert "/docs/private/s.html" not in site.paths()
    else:
        assert sources == sorted([*docs, site.url("/docs/private/s.html")])
    assert site.paths().count("/robots.txt") == 1  # read once for the whole crawl
