"""robots.txt: Disallow, user-agent groups, fail-open, Crawl-delay, per-origin TTL cache,
RFC 9309 matching (`*`, `$`, longest match) and the 500 KiB parsing limit."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from protego import Protego
from test_crawl_site_helper import LocalSite, crawl_settings

from rag_app.crawl.crawler import WebCrawler
from rag_app.crawl.exceptions import CrawlTimeoutError, RobotsBlockedError
from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.robots import (
    MAX_FAILURE_CACHE_SEC,
    RobotsCache,
    RobotsResponse,
    parse_crawl_delays,
    parse_rules,
)
from rag_app.crawl.safe_browsing import SafeBrowsingClient
from rag_app.crawl.throttle import DomainThrottle

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


def moved(site: LocalSite, path: str, to: str, status: int = 301) -> None:
    site.page(path, "", content_type="text/plain", status=status, headers={"Location": to})


async def test_a_robots_txt_that_moved_is_followed_and_its_rules_apply(site: LocalSite) -> None:
    moved(site, "/robots.txt", "/hop-1")  # e.g. http:// → https://, then a CDN path
    moved(site, "/hop-1", site.url("/hop-2"), status=308)
    site.page("/hop-2", ROBOTS, content_type="text/plain")
    async with WebCrawler(crawl_settings()) as crawler:  # RAG_FOLLOW_REDIRECTS off
        assert not crawler._settings.rag_follow_redirects
        with pytest.raises(RobotsBlockedError):
            await crawler.crawl_page(site.url("/private/secret.html"))
        assert isinstance(await crawler.crawl_page(site.url("/private/open.html")), CrawledPage)
    assert "/private/secret.html" not in site.paths()
    assert site.paths().count("/hop-2") == 1  # read once, cached for the site


async def test_a_robots_txt_on_another_host_applies_to_the_site_asked_about(
    site: LocalSite,
) -> None:
    async with LocalSite() as elsewhere:  # another port: another authority
        elsewhere.page("/robots.txt", "User-agent: *\nDisallow: /b\n", content_type="text/plain")
        moved(site, "/robots.txt", elsewhere.url("/robots.txt"))
        async with WebCrawler(crawl_settings()) as crawler:
            with pytest.raises(RobotsBlockedError):
                await crawler.crawl_page(site.url("/b"))
            assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)
        assert elsewhere.paths() == ["/robots.txt"]
    assert "/b" not in site.paths()


@pytest.mark.parametrize(
    "target",
    ["/robots.txt", "ftp://127.0.0.1/robots.txt", "http://169.254.169.254/robots.txt"],
    ids=["loop", "another-scheme", "link-local-address"],
)
async def test_a_robots_txt_redirect_that_cannot_be_followed_fails_open(
    site: LocalSite, caplog: pytest.LogCaptureFixture, target: str
) -> None:
    moved(site, "/robots.txt", target)
    with caplog.at_level(logging.WARNING, logger="rag_app.crawl.robots"):
        settings = crawl_settings(rag_allow_private_network=False)
        async with WebCrawler(settings, allowed_networks=["127.0.0.0/8"]) as crawler:
            assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "robots.txt" in warnings[0]
    assert site.paths().count("/robots.txt") <= 6  # a loop ends after five redirects


class FlagsOneHost(SafeBrowsingClient):
    """Safe Browsing that flags every URL on `evil.test` (Google's API cannot be reached
    here) and records what it was asked."""

    def __init__(self) -> None:
        super().__init__("key", api_url="http://127.0.0.9/unused")
        self.asked: list[str] = []

    async def _lookup(self, urls: list[str]) -> dict[str, str]:
        self.asked += urls
        return {u: "MALWARE" for u in urls if "//evil.test" in u}


async def test_a_robots_txt_redirect_to_a_flagged_site_is_not_followed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with LocalSite() as site, LocalSite("127.0.0.2") as evil:
        names = {"site.test": "127.0.0.1", "evil.test": "127.0.0.2"}

        async def lookup(host: str, port: int) -> list[str]:
            return [names[host]]

        evil.page("/robots.txt", "User-agent: *\nDisallow: /a\n", content_type="text/plain")
        moved(site, "/robots.txt", f"http://evil.test:{evil.port}/robots.txt")
        site.page("/a", "<title>a</title><p>本文</p>")
        flags = FlagsOneHost()
        with caplog.at_level(logging.WARNING, logger="rag_app.crawl.robots"):
            async with WebCrawler(
                crawl_settings(), resolver_lookup=lookup, safe_browsing=flags
            ) as crawler:
                page = await crawler.crawl_page(f"http://site.test:{site.port}/a")
        assert isinstance(page, CrawledPage)  # its robots.txt unreadable: fail-open
        assert evil.paths() == []  # the flagged host was never contacted
        assert f"http://evil.test:{evil.port}/robots.txt" in flags.asked
        assert any("Safe Browsing" in r.getMessage() for r in caplog.records)


async def test_a_slow_robots_txt_redirect_chain_gets_one_timeout_in_all(
    site: LocalSite,
) -> None:
    def hop(n: int) -> Any:
        async def answer(_request: web.Request) -> web.StreamResponse:
            await asyncio.sleep(0.4)
            if n == 5:
                return web.Response(text="User-agent: *\nDisallow: /a\n")
            return web.Response(status=302, headers={"Location": f"/r{n + 1}"})

        return answer

    site.route("/robots.txt", hop(0))
    for n in range(1, 6):
        site.route(f"/r{n}", hop(n))
    async with WebCrawler(crawl_settings(rag_crawl_timeout_sec=1.0)) as crawler:
        started = time.monotonic()
        assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)  # fail-open
        took = time.monotonic() - started
    assert took < 1.9, took  # one timeout for the chain, not one per hop (2.4 s)
    assert "/r5" not in site.paths()


async def test_a_robots_txt_redirect_to_no_url_at_all_fails_open_once(
    site: LocalSite, caplog: pytest.LogCaptureFixture
) -> None:
    moved(site, "/robots.txt", "http://[::1/robots.txt")
    with caplog.at_level(logging.WARNING, logger="rag_app.crawl.robots"):
        async with WebCrawler(crawl_settings()) as crawler:
            results = await crawler.crawl_pages([site.url("/a"), site.url("/b")])
    assert all(r.ok for r in results), results
    assert site.paths().count("/robots.txt") == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not a URL" in warnings[0], warnings


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


async def test_turns_that_waited_for_a_slot_still_reach_the_host_a_delay_apart() -> None:
    """With every connection slot taken by a slow site, a polite host's turns come due
    while its requests wait for a slot; when the slot frees, they must not go out at once."""

    async def slow(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.0)
        return web.Response(text="<title>slow</title><p>遅いページ</p>", content_type="text/html")

    async with LocalSite("127.0.0.2") as busy, LocalSite() as polite:
        busy.route("/slow", slow)
        for path in ("/a", "/b", "/c"):
            polite.page(path, f"<title>{path}</title><p>本文 {path}</p>")
        settings = crawl_settings(rag_crawl_delay_sec=0.3, rag_crawl_concurrency=1)
        async with WebCrawler(settings) as crawler:
            results = await crawler.crawl_pages(
                [busy.url("/slow"), polite.url("/a"), polite.url("/b"), polite.url("/c")]
            )
        assert all(r.ok for r in results), results
        arrivals = [hit.at for hit in polite.hits if hit.path in ("/a", "/b", "/c")]
        assert busy.hits[0].at < arrivals[0]  # the slow page held the slot first
    assert len(arrivals) == 3
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert min(gaps) >= 0.25, gaps


async def test_a_robots_txt_redirect_does_not_queue_behind_the_target_hosts_pages() -> None:
    """`a.test`'s robots.txt moved to `www.a.test`, whose pages (Crawl-delay 0.5) are queued:
    the hop must not wait out their turns while every page of `a.test` waits for it."""
    async with LocalSite() as site, LocalSite("127.0.0.2") as www:
        names = {"a.test": "127.0.0.1", "www.a.test": "127.0.0.2"}

        async def lookup(host: str, port: int) -> list[str]:
            return [names[host]]

        www.page("/robots.txt", "User-agent: *\nCrawl-delay: 0.5\n", content_type="text/plain")
        www.page("/a-robots.txt", "User-agent: *\nDisallow: /private\n", content_type="text/plain")
        for i in range(8):
            www.page(f"/p{i}", f"<title>{i}</title><p>本文 {i}</p>")
        moved(site, "/robots.txt", f"http://www.a.test:{www.port}/a-robots.txt")
        site.page("/a", "<title>a</title><p>本文</p>")
        async with WebCrawler(crawl_settings(), resolver_lookup=lookup) as crawler:
            queued = asyncio.create_task(
                crawler.crawl_pages([f"http://www.a.test:{www.port}/p{i}" for i in range(8)])
            )
            await asyncio.sleep(0.2)
            started = time.monotonic()
            page = await crawler.crawl_page(f"http://a.test:{site.port}/a")
            took = time.monotonic() - started
            with pytest.raises(RobotsBlockedError):  # the moved rules apply to a.test
                await crawler.crawl_page(f"http://a.test:{site.port}/private")
            assert all(r.ok for r in await queued)
    assert isinstance(page, CrawledPage)
    assert took < 0.45, took  # 7 queued pages × 0.5 s when the hop waited for their turns


async def test_a_sites_first_page_does_not_wait_its_delay_after_robots_txt(
    site: LocalSite,
) -> None:
    robots_txt(site, "User-agent: *\nCrawl-delay: 2\n")
    async with WebCrawler(crawl_settings()) as crawler:
        started = time.monotonic()
        assert isinstance(await crawler.crawl_page(site.url("/a")), CrawledPage)
        assert time.monotonic() - started < 1.0


async def test_a_start_due_exactly_on_its_turn_is_not_refused() -> None:
    """`wait_turn` and `try_start` reckon the same way: a start at the very moment a turn
    falls due (a clock that lands on it, as a fake one does) goes out."""
    now = [12345.678]

    async def advance(seconds: float) -> None:
        now[0] += seconds

    throttle = DomainThrottle(clock=lambda: now[0], sleep=advance)
    for delay in (0.1, 0.3, 0.7):
        for _ in range(3):
            await throttle.wait_turn("h", delay)
            assert throttle.try_start("h", delay)


async def test_a_host_with_a_long_delay_never_holds_slots_other_sites_need() -> None:
    """Requests to a host with a long delay queue up while a slow site holds every slot;
    afterwards they wait for their turns without a slot, so a third site's pages still get
    both slots at once."""

    async def slow(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2.0)
        return web.Response(text="<title>slow</title><p>遅い</p>", content_type="text/html")

    async def quick(_request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(0.2)
        return web.Response(text="<title>q</title><p>速い</p>", content_type="text/html")

    async with (
        LocalSite() as polite,
        LocalSite("127.0.0.2") as busy,
        LocalSite("127.0.0.3") as other,
    ):
        polite.page("/robots.txt", "User-agent: *\nCrawl-delay: 0.5\n", content_type="text/plain")
        for i in range(8):
            polite.page(f"/p{i}", f"<title>{i}</title><p>本文 {i}</p>")
            other.route(f"/o{i}", quick)
        busy.route("/s0", slow)
        busy.route("/s1", slow)
        async with WebCrawler(crawl_settings(rag_crawl_concurrency=2)) as crawler:
            await crawler.robots.rules_for(polite.url("/"))
            stall = asyncio.create_task(crawler.crawl_pages([busy.url("/s0"), busy.url("/s1")]))
            await asyncio.sleep(0.1)
            queued = asyncio.create_task(
                crawler.crawl_pages([polite.url(f"/p{i}") for i in range(8)])
            )
            await asyncio.sleep(2.5)  # the stall is over; the polite host's turns go on
            started = time.monotonic()
            others = await crawler.crawl_pages([other.url(f"/o{i}") for i in range(8)])
            took = time.monotonic() - started
            results = [*await stall, *await queued, *others]
        assert all(r.ok for r in results), results
        arrivals = [hit.at for hit in polite.hits if hit.path.startswith("/p")]
    assert min(b - a for a, b in itertools.pairwise(arrivals)) >= 0.45
    # 8 × 0.2 s on two slots: 0.8 s. Requests of the polite host that waited out its delay
    # holding a slot (each ~1.9 s behind its turn after the stall) held both: 3.0 s
    assert took < 1.4, took


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


# -- RFC 9309 matching (protego) ---------------------------------------------------------------

BOT = "RagKnowledgeBot/0.1"


def allowed(text: str, path: str, user_agent: str = BOT) -> bool:
    return parse_rules(text, user_agent, 0.0, 60).allows(f"https://h.test{path}", user_agent)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/shop/a/checkout", False),
        ("/shop/a/b/checkout/step2", False),
        ("/shop/checkout", True),  # `*` needs the `/` after it to be matched too
        ("/shop/a/cart", True),
    ],
)
def test_wildcard_in_the_middle_of_a_path(path: str, expected: bool) -> None:
    assert allowed("User-agent: *\nDisallow: /shop/*/checkout\n", path) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/files/report.pdf", False),
        ("/report.pdf", False),
        ("/report.pdf?download=1", True),  # `$` anchors at the very end, query included
        ("/report.pdfx", True),
        ("/exact", False),
        ("/exact/more", True),
    ],
)
def test_dollar_anchors_the_end(path: str, expected: bool) -> None:
    assert allowed("User-agent: *\nDisallow: /*.pdf$\nDisallow: /exact$\n", path) is expected


@pytest.mark.parametrize(
    ("rules", "path", "expected"),
    [
        # The longer (more specific) rule wins, whatever the order in the file.
        ("Disallow: /docs/\nAllow: /docs/public/", "/docs/public/a.html", True),
        ("Allow: /docs/public/\nDisallow: /docs/", "/docs/public/a.html", True),
        ("Allow: /docs/\nDisallow: /docs/private/", "/docs/private/a.html", False),
        ("Disallow: /docs/private/\nAllow: /docs/", "/docs/private/a.html", False),
        ("Disallow: /docs/private/\nAllow: /docs/", "/docs/other.html", True),
        # Length counts the pattern as written, wildcards included.
        ("Allow: /*/public\nDisallow: /docs/", "/docs/public", True),
        # Equal length: Allow wins the tie.
        ("Disallow: /page\nAllow: /page", "/page", True),
        ("Allow: /page\nDisallow: /page", "/page", True),
    ],
)
def test_longest_match_wins_and_allow_wins_ties(rules: str, path: str, expected: bool) -> None:
    assert allowed(f"User-agent: *\n{rules}\n", path) is expected


def test_only_our_group_applies_and_star_is_the_fallback() -> None:
    text = (
        "User-agent: *\nDisallow: /star-only\n\n"
        "User-agent: OtherBot\nUser-agent: RAGKNOWLEDGEBOT\nDisallow: /ours\nCrawl-delay: 2.5\n"
    )
    assert not allowed(text, "/ours")
    assert allowed(text, "/star-only")  # our group replaces `*`, it does not add to it
    assert parse_rules(text, BOT, 0.0, 60).crawl_delay == 2.5
    assert not allowed(text, "/star-only", "SomeoneElse/2")
    assert parse_rules(text, "SomeoneElse/2", 0.0, 60).crawl_delay is None


def test_rules_refuse_another_user_agent() -> None:
    rules = parse_rules("User-agent: *\nDisallow: /x\n", BOT, 0.0, 60)
    with pytest.raises(ValueError, match="parsed for 'ragknowledgebot'"):
        rules.allows("https://h.test/x", "OtherBot/1")


def test_many_user_agents_keep_protego_answers() -> None:
    """Renaming the groups we are not in (the cost guard) changes no answer."""
    rng = random.Random(9309)
    agents = ["*", "ragknowledgebot", "RagKnowledgeBot", "rag*knowledgebot", "rag", "r", "**"]
    agents += ["otherbot", "knowledgebot", "ragknowledgebotx", "rag-knowledgebot", "bot"]
    spellings = ["User-agent: {}", "user-agent:{}", "User agent: {}", "User-agent {}"]
    spellings += ["useragent: {} # note", "User-agent {}:x", "User-agent:"]
    values = ["/", "/a", "/a/b", "/p/", "/p/open.html", "/x*y", "/*.pdf$", "/a$", "/index.html"]
    paths = ["/", "/a", "/a/b", "/p/x", "/p/open.html", "/x1y", "/f.pdf", "/index.html", "/z"]
    for _ in range(300):
        lines = []
        for _ in range(rng.randint(0, 14)):
            if rng.random() < 0.4:
                lines.append(rng.choice(spellings).format(rng.choice(agents)))
            elif rng.random() < 0.2:
                lines.append(f"Crawl-delay: {rng.choice(['0.5', '2', 'x'])}")
            else:
                lines.append(f"{rng.choice(['Allow', 'Disallow'])}: {rng.choice(values)}")
        text = "\n".join(lines)
        for user_agent in (BOT, "Bot/1", "rag-knowledgebot"):
            token = user_agent.split("/")[0].lower()
            plain = Protego.parse(text)
            rules = parse_rules(text, user_agent, 0.0, 60)
            assert rules.crawl_delay == plain.crawl_delay(token), text
            for path in paths:
                url = f"https://h.test{path}"
                assert rules.allows(url, user_agent) == plain.can_fetch(url, token), (text, path)


# -- the 500 KiB parsing limit (RFC 9309 §2.5) -------------------------------------------------

LIMIT = 500 * 1024


def padded(before: str, after: str, pad_to: int) -> str:
    """`before`, then one comment line ending exactly at byte `pad_to`, then `after`."""
    fill = pad_to - len(before.encode())
    return before + "#" + "x" * (fill - 2) + "\n" + after


def test_rule_after_the_first_500_kib_is_ignored() -> None:
    late = padded("User-agent: *\nDisallow: /early\n", "Disallow: /late\n", LIMIT + 100)
    assert len(late.encode()) > LIMIT
    assert not allowed(late, "/early")
    assert allowed(late, "/late")
    # The same rule just inside the limit applies (so the test above can fail).
    inside = padded("User-agent: *\nDisallow: /early\n", "Disallow: /late\n", LIMIT - 100)
    assert len(inside.encode()) <= LIMIT
    assert not allowed(inside, "/late")


def test_line_cut_by_the_limit_is_dropped() -> None:
    head = padded("User-agent: *\nDisallow: /\n", "", LIMIT - 10)
    text = head + "Allow: /public-and-long\n"  # crosses the limit: `Allow: /p` must not count
    assert len(head.encode()) == LIMIT - 10
    assert not allowed(text, "/p")
    assert allowed(head + "Allow: /p\n", "/p")  # the same line inside the limit counts


def test_limit_counts_utf8_bytes() -> None:
    text = "User-agent: *\n# " + "あ" * (LIMIT // 3) + "\nDisallow: /late\n"
    assert len(text) < LIMIT < len(text.encode())
    assert allowed(text, "/late")


@pytest.mark.parametrize(
    "shape",
    ["plain rules", "wildcard rules", "thousands of agents over thousands of rules"],
)
async def test_multi_megabyte_robots_txt_is_handled_quickly(shape: str) -> None:
    if shape == "plain rules":
        body = "".join(f"Disallow: /p{i}/\n" for i in range(300_000))
        text = f"User-agent: *\n{body}"
    elif shape == "wildcard rules":
        body = "".join(f"Disallow: /*a{i}*b*c$\n" for i in range(200_000))
        text = f"User-agent: *\n{body}"
    else:  # protego alone needs minutes and gigabytes for this one
        agents = "".join(f"User-agent: bot{i}\n" for i in range(20_000))
        body = "".join(f"Disallow: /p{i}/\n" for i in range(200_000))
        text = f"{agents}User-agent: ragknowledgebot\n{body}"
    assert len(text.encode()) > 3 * 1024 * 1024
    blocked = "/za7zbzc" if shape == "wildcard rules" else "/p7/x"

    async def fetch(_url: str) -> RobotsResponse:
        return RobotsResponse(200, text)

    cache = RobotsCache(fetch, BOT, ttl=100)
    started = time.perf_counter()
    assert await cache.allowed(f"https://h.test{blocked}") == (False, None)
    assert await cache.allowed("https://h.test/elsewhere") == (True, None)
    assert time.perf_counter() - started < 10  # the unbounded parse takes minutes


async def test_fractional_crawl_delay_reaches_the_caller() -> None:
    async def fetch(_url: str) -> RobotsResponse:
        return RobotsResponse(200, "User-agent: *\nCrawl-delay: 1.5\nDisallow: /x\n")

    cache = RobotsCache(fetch, BOT, ttl=100)
    assert await cache.allowed("https://h.test/a") == (True, 1.5)
    assert await cache.allowed("https://h.test/x") == (False, 1.5)


async def test_a_failing_robots_txt_is_retried_less_and_less_often() -> None:
    """Each failure in a row doubles the wait before the next try (60 s, 120 s, 240 s …,
    at most 900 s), counted from the end of the attempt; an answer resets it."""
    now = [0.0]
    answers: list[RobotsResponse | None] = []
    fetched: list[float] = []

    async def fetch(url: str) -> RobotsResponse:
        fetched.append(now[0])
        answer = answers.pop(0)
        if answer is None:
            now[0] += 30.0  # a timeout takes its time
            raise CrawlTimeoutError(url, 30.0)
        return answer

    cache = RobotsCache(fetch, "Bot/1", ttl=3600, clock=lambda: now[0])

    async def ask_at(t: float) -> tuple[bool, float | None]:
        now[0] = t
        return await cache.allowed("http://h.test/x")

    answers.extend([None, None, None])
    assert await ask_at(0.0) == (True, None)  # fails open; ends at 30
    await ask_at(89.0)  # within 60 s of the end: no new try
    assert fetched == [0.0]
    await ask_at(90.0)  # second failure, ends at 120: next try after 120 s more
    await ask_at(239.0)
    assert fetched == [0.0, 90.0]
    await ask_at(240.0)  # third failure, ends at 270: 240 s
    assert fetched == [0.0, 90.0, 240.0]
    answers.append(RobotsResponse(200, "User-agent: *\nDisallow: /x\n"))
    assert await ask_at(510.0) == (False, None)  # read at last: the rules apply
    answers.extend([None, None])
    await ask_at(4110.0)  # the TTL passed, and it fails again: 60 s, not 480 s
    await ask_at(4199.0)
    await ask_at(4200.0)
    assert fetched[-2:] == [4110.0, 4200.0] and not answers
    for _ in range(12):  # never more than 900 s apart, however often it fails
        answers.append(None)
        await ask_at(now[0] + MAX_FAILURE_CACHE_SEC)
    assert fetched[-1] - fetched[-2] == MAX_FAILURE_CACHE_SEC + 30.0


async def test_the_ttl_of_a_robots_txt_counts_from_its_answer() -> None:
    """A robots.txt that takes longer to answer than its TTL is not stale on arrival."""
    now = [0.0]
    fetched: list[float] = []

    async def fetch(url: str) -> RobotsResponse:
        fetched.append(now[0])
        now[0] += 30.0
        return RobotsResponse(200, "User-agent: *\nDisallow: /x\n")

    cache = RobotsCache(fetch, "Bot/1", ttl=20, clock=lambda: now[0])
    assert await cache.allowed("http://h.test/x") == (False, None)  # answered at 30
    now[0] = 49.0
    assert await cache.allowed("http://h.test/y") == (True, None)
    assert fetched == [0.0]
    now[0] = 50.0
    await cache.allowed("http://h.test/y")
    assert fetched == [0.0, 50.0]
