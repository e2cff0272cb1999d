"""robots.txt: Disallow, user-agent groups, fail-open, Crawl-delay, per-origin TTL cache."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from test_crawl_site_helper import LocalSite, crawl_settings

from rag_app.crawl.crawler import WebCrawler
from rag_app.crawl.exceptions import RobotsBlockedError
from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.robots import RobotsCache, RobotsResponse, parse_crawl_delays, parse_rules

ROBOTS = """\
# comment
User-agent: OtherBot
Disallow: /

User-agent: *
Disallow: /private/
Allow: /private/open.html
"""


@pytest.fixture
async def site() -> AsyncIterator[LocalSite]:
    async with LocalSite() as server:
        for path in ("/a", "/b", "/c", "/private/secret.html", "/private/open.html"):
            server.page(path, f"<title>{path}</title><p>本文 {path}</p>")
        yield server


def robots_txt(site: LocalSite, text: str, status: int = 200) -> None:
    site.page("/robots.txt", text, content_type="text/plain", status=status)


async def test_disallowed_page_is_blocked_without_fetching_it(site: LocalSite) -> None:
    robots_txt(site, ROBOTS)
    async with WebCrawler(crawl_settings()) as crawler:
        with pytest.raises(RobotsBlockedError, match=r"^Blocked by robots.txt"):
            await crawler.crawl_page(site.url("/private/secret.html"))
        page = await crawler.crawl_page(site.url("/private/open.html"))
        assert isinstance(page, CrawledPage)
        results = await crawler.crawl_pages([site.url("/a"), site.url("/private/secret.html")])
    assert [r.ok for r in results] == [True, False]
    assert results[1].error is not None and "Blocked by robots.txt" in results[1].error
    assert "/private/secret.html" not in site.paths()
    assert site.paths().count("/robots.txt") == 1


async def test_our_user_agent_group_applies(site: LocalSite) -> None:
    robots_txt(site, "User-agent: RagKnowledgeBot\nDisallow: /a\n\nUser-agent: *\nDisallow: /b\n")
    async with WebCrawler(crawl_settings()) as crawler:
        with pytest.raises(RobotsBlockedError):
            await crawler.crawl_page(site.url("/a"))
        assert isinstance(await crawler.crawl_page(site.url("/b")), CrawledPage)


async def test_respect_robots_off_ignores_it(site: LocalSite) -> None:
    robots_txt(site, "User-agent: *\nDisallow: /\n")
    async with WebCrawler(crawl_settings(rag_respect_robots_txt=False)) as crawler:
        assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)
    assert site.paths() == ["/a"]


async def test_robots_404_allows_everything(
    site: LocalSite, caplog: pytest.LogCaptureFixture
) -> None:
    async with WebCrawler(crawl_settings()) as crawler:
        assert isinstance(await crawler.crawl_page(site.url("/private/secret.html")), CrawledPage)
    assert site.paths() == ["/robots.txt", "/private/secret.html"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_robots_500_fails_open_with_warning(
    site: LocalSite, caplog: pytest.LogCaptureFixture
) -> None:
    robots_txt(site, "User-agent: *\nDisallow: /\n", status=500)
    with caplog.at_level(logging.WARNING, logger="rag_app.crawl.robots"):
        async with WebCrawler(crawl_settings()) as crawler:
            assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "HTTP 500" in warnings[0] and "robots.txt" in warnings[0]


async def test_robots_timeout_fails_open_with_warning(
    site: LocalSite, caplog: pytest.LogCaptureFixture
) -> None:
    async def hanging(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3)
        return web.Response(text="User-agent: *\nDisallow: /\n")

    site.route("/robots.txt", hanging)
    with caplog.at_level(logging.WARNING, logger="rag_app.crawl.robots"):
        async with WebCrawler(crawl_settings(rag_crawl_timeout_sec=0.5)) as crawler:
            assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)
    assert any("タイムアウト" in r.getMessage() for r in caplog.records)


async def test_robots_cached_within_ttl_and_refetched_after(site: LocalSite) -> None:
    robots_txt(site, ROBOTS)
    async with WebCrawler(crawl_settings()) as crawler:
        await crawler.crawl_pages([site.url("/a"), site.url("/b"), site.url("/c")])
        await crawler.crawl_page(site.url("/a"))
    assert site.paths().count("/robots.txt") == 1
    async with WebCrawler(crawl_settings(rag_robots_txt_cache_ttl=0)) as crawler:
        await crawler.crawl_page(site.url("/a"))
        await crawler.crawl_page(site.url("/b"))
    assert site.paths().count("/robots.txt") == 3


async def test_crawl_delay_from_robots_is_honoured(site: LocalSite) -> None:
    robots_txt(site, "User-agent: *\nCrawl-delay: 0.4\nDisallow: /private/\n")
    async with WebCrawler(crawl_settings(rag_crawl_delay_sec=0.0)) as crawler:
        results = await crawler.crawl_pages([site.url("/a"), site.url("/b")])
    assert all(r.ok for r in results)
    arrivals = [hit.at for hit in site.hits if hit.path in ("/a", "/b")]
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 0.35  # generous lower bound only


async def test_setting_delay_applies_when_larger(site: LocalSite) -> None:
    robots_txt(site, "User-agent: *\nCrawl-delay: 0\n")
    async with WebCrawler(crawl_settings(rag_crawl_delay_sec=0.3)) as crawler:
        await crawler.crawl_page(site.url("/a"))
        await crawler.crawl_page(site.url("/b"))
    arrivals = [hit.at for hit in site.hits if hit.path in ("/a", "/b")]
    assert arrivals[1] - arrivals[0] >= 0.25


# -- parser units ------------------------------------------------------------------------------


def test_parse_crawl_delays_handles_groups_and_fractions() -> None:
    text = "User-agent: a\nUser-agent: b\nCrawl-delay: 2.5\n\nUser-agent: *\nCrawl-delay: 1\n"
    assert parse_crawl_delays(text) == {"a": 2.5, "b": 2.5, "*": 1.0}


def test_specific_group_delay_beats_star() -> None:
    text = "User-agent: *\nCrawl-delay: 1\n\nUser-agent: ragknowledgebot\nCrawl-delay: 7\n"
    rules = parse_rules(text, "RagKnowledgeBot/0.1", fetched_at=0.0, ttl=60)
    assert rules.crawl_delay == 7.0
    assert parse_rules(text, "Other/1", 0.0, 60).crawl_delay == 1.0


async def test_cache_uses_ttl_with_injected_clock() -> None:
    now = [0.0]
    fetched: list[str] = []

    async def fetch(url: str) -> RobotsResponse:
        fetched.append(url)
        return RobotsResponse(200, "User-agent: *\nDisallow: /x\n")

    cache = RobotsCache(fetch, "Bot/1", ttl=100, clock=lambda: now[0])
    assert await cache.allowed("http://h.test/x") == (False, None)
    now[0] = 99.0
    assert await cache.allowed("http://h.test/y") == (True, None)
    assert await cache.allowed("https://h.test/y") == (True, None)  # another origin
    now[0] = 100.0
    await cache.allowed("http://h.test/y")
    assert fetched == [
        "http://h.test/robots.txt",
        "https://h.test/robots.txt",
        "http://h.test/robots.txt",
    ]
