"""Safe Browsing Lookup API v4 client against a loopback stand-in (never Google)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from test_crawl_site_helper import LocalSite, crawl_settings

from rag_app.crawl.crawler import WebCrawler
from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.safe_browsing import THREAT_TYPES, SafeBrowsingClient
from rag_app.errors import UrlRefusedError

FLAGGED = {
    "http://malware.test/": "MALWARE",
    "http://phish.test/login": "SOCIAL_ENGINEERING",
}


class FakeApi:
    """Records requests and answers like `threatMatches:find`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str] = []
        self.status = 200
        self.delay = 0.0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.keys.append(request.query.get("key", ""))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.status != 200:
            return web.json_response({"error": "boom"}, status=self.status)
        matches = [
            {
                "threatType": FLAGGED[entry["url"]],
                "platformType": "ANY_PLATFORM",
                "threatEntryType": "URL",
                "threat": {"url": entry["url"]},
            }
            for entry in body["threatInfo"]["threatEntries"]
            if entry["url"] in FLAGGED
        ]
        return web.json_response({"matches": matches} if matches else {})


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeApi, str]]:
    fake = FakeApi()
    async with LocalSite() as server:
        server.route("/v4/threatMatches:find", fake.handle)
        yield fake, server.url("/v4/threatMatches:find")


def client(url: str, **kwargs: Any) -> SafeBrowsingClient:
    return SafeBrowsingClient("test-key", api_url=url, **kwargs)


async def test_request_format_and_verdicts(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    async with client(url) as sb:
        assert await sb.check("http://malware.test/") == "MALWARE"
        assert await sb.check("http://clean.test/") is None
    body = fake.requests[0]
    assert body["client"]["clientId"] == "rag-knowledge"
    assert body["threatInfo"]["threatTypes"] == list(THREAT_TYPES)
    assert body["threatInfo"]["threatEntries"] == [{"url": "http://malware.test/"}]
    assert body["threatInfo"]["threatEntryTypes"] == ["URL"]
    assert fake.keys == ["test-key", "test-key"]


async def test_unsafe_url_is_refused_with_threat_type(api: tuple[FakeApi, str]) -> None:
    _fake, url = api
    async with client(url) as sb:
        with pytest.raises(
            UrlRefusedError, match=r"flags http://phish\.test/login as SOCIAL_ENGINEERING"
        ):
            await sb.ensure_safe("http://phish.test/login")
        await sb.ensure_safe("http://clean.test/")


async def test_cache_ttl_and_lru(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    now = [0.0]
    async with client(url, cache_ttl=300, max_entries=2, clock=lambda: now[0]) as sb:
        await sb.check("http://a.test/")
        await sb.check("http://a.test/")
        assert sb.api_calls == 1  # cached
        now[0] = 301.0
        await sb.check("http://a.test/")
        assert sb.api_calls == 2  # expired
        await sb.check("http://b.test/")
        await sb.check("http://c.test/")  # evicts a.test (least recently used)
        await sb.check("http://b.test/")
        assert sb.api_calls == 4
        await sb.check("http://a.test/")
        assert sb.api_calls == 5
    assert len(fake.requests) == 5


async def test_check_many_batches_uncached_urls(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    async with client(url) as sb:
        verdicts = await sb.check_many(["http://malware.test/", "http://x.test/", "http://x.test/"])
        assert verdicts == {"http://malware.test/": "MALWARE", "http://x.test/": None}
        await sb.check_many(["http://x.test/", "http://y.test/"])
    assert [len(r["threatInfo"]["threatEntries"]) for r in fake.requests] == [2, 1]


async def test_fail_open_and_fail_closed(
    api: tuple[FakeApi, str], caplog: pytest.LogCaptureFixture
) -> None:
    fake, url = api
    fake.status = 503
    with caplog.at_level(logging.WARNING, logger="rag_app.crawl.safe_browsing"):
        async with client(url, fail_open=True) as sb:
            assert await sb.check("http://malware.test/") is None
            await sb.check("http://malware.test/")
            assert sb.api_calls == 2  # failures are not cached
    assert "fail-open" in caplog.text and "HTTP 503" in caplog.text
    async with client(url, fail_open=False) as sb:
        with pytest.raises(UrlRefusedError, match="RAG_URL_SAFETY_FAIL_OPEN is false"):
            await sb.check("http://clean.test/")


async def test_api_timeout(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    fake.delay = 2.0
    async with client(url, timeout=0.3, fail_open=False) as sb:
        with pytest.raises(UrlRefusedError, match=r"timed out after 0\.3 s"):
            await sb.check("http://clean.test/")


async def test_crawler_refuses_flagged_url_without_connecting(api: tuple[FakeApi, str]) -> None:
    """The API on loopback works with private networks OFF: the API client is not the crawler."""
    fake, url = api

    async def lookup(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]  # never contacted: the verdict comes first

    settings = crawl_settings(
        rag_allow_private_network=False,
        rag_url_safety_check=True,
        google_safe_browsing_api_key="test-key",
        rag_url_safety_api_url=url,
    )
    async with WebCrawler(settings, resolver_lookup=lookup) as crawler:
        with pytest.raises(UrlRefusedError, match="as MALWARE"):
            await crawler.crawl_page("http://malware.test/")
        assert crawler.requests_made == 0
    assert len(fake.requests) == 1


async def test_crawl_pages_checks_in_one_batch(api: tuple[FakeApi, str]) -> None:
    fake, url = api
    async with LocalSite() as site:
        site.page("/ok", "<p>安全なページ</p>")
        lookups: list[str] = []

        async def lookup(host: str, port: int) -> list[str]:
            lookups.append(host)
            return ["93.184.216.34"]

        sb = client(url)
        crawler = WebCrawler(crawl_settings(), safe_browsing=sb, resolver_lookup=lookup)
        async with sb, crawler:
            results = await crawler.crawl_pages([site.url("/ok"), "http://malware.test/"])
        assert isinstance(results[0].page, CrawledPage)
        assert results[1].error is not None and "MALWARE" in results[1].error
        assert len(fake.requests) == 1
        assert site.paths() == ["/robots.txt", "/ok"]
        assert lookups == []  # the flagged host was never even resolved
