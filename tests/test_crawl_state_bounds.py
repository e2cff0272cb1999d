"""A long-lived crawler's per-host state stays bounded: locks only while in use, the
throttle forgets hosts whose times no longer matter, robots.txt rules are an LRU cache
bounded by their size."""

from __future__ import annotations

import asyncio
import time

import pytest

import rag_app.crawl.robots as robots
import rag_app.crawl.throttle as throttle_module
from rag_app.crawl.robots import RobotsCache, RobotsResponse
from rag_app.crawl.throttle import DomainThrottle
from rag_app.keyed_locks import KeyedLocks

BOT = "RagKnowledgeBot/0.1"


async def test_a_keys_lock_serialises_its_tasks_and_is_dropped_when_unused() -> None:
    locks = KeyedLocks()
    inside: list[int] = []
    most = [0]

    async def task(key: str) -> None:
        async with locks.hold(key):
            inside.append(1)
            most[0] = max(most[0], len(inside))
            await asyncio.sleep(0.01)
            inside.pop()

    await asyncio.gather(*(task("a") for _ in range(5)))
    assert most[0] == 1  # one at a time
    assert len(locks) == 0
    await asyncio.gather(*(task(f"k{i}") for i in range(50)))
    assert len(locks) == 0


async def test_a_cancelled_waiter_leaves_no_lock_behind() -> None:
    locks = KeyedLocks()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold("a"):
            await release.wait()

    async def waiter() -> None:
        async with locks.hold("a"):
            pass

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    second = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    assert locks.in_use("a")
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    release.set()
    await first
    assert len(locks) == 0


async def test_the_throttle_forgets_hosts_whose_times_no_longer_matter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """10,000 hosts met over a long run: only those of the last `forget_after` seconds
    are remembered, and a remembered host still waits its turn."""
    monkeypatch.setattr(throttle_module, "SWEEP_MIN_HOSTS", 64)
    now = [0.0]

    async def advance(seconds: float) -> None:
        now[0] += seconds

    throttle = DomainThrottle(clock=lambda: now[0], sleep=advance, forget_after=100.0)
    for i in range(10_000):
        await throttle.wait_turn(f"h{i}", 1.0)
        assert throttle.try_start(f"h{i}", 1.0)
        now[0] += 0.1  # 10 hosts a second: 1,000 within 100 s
    assert len(throttle) <= 2 * 1_000 + 64
    # the host just started still waits its delay; one forgotten long ago does not
    start = now[0]
    await throttle.wait_turn("h9999", 1.0)
    assert now[0] - start == pytest.approx(0.9)
    start = now[0]
    await throttle.wait_turn("h0", 1.0)
    assert now[0] == start


async def test_the_throttle_never_forgets_a_host_a_request_waits_for() -> None:
    now = [0.0]
    slept = asyncio.Event()

    async def sleep(seconds: float) -> None:
        slept.set()
        await asyncio.sleep(0.05)
        now[0] += seconds

    throttle = DomainThrottle(clock=lambda: now[0], sleep=sleep, forget_after=10.0)
    await throttle.wait_turn("busy", 10.0)
    assert throttle.try_start("busy", 10.0)
    waiting = asyncio.create_task(throttle.wait_turn("busy", 10.0))
    await slept.wait()
    throttle._sweep(now[0] + 1000)  # everything is old, but "busy" has a request waiting
    assert len(throttle) == 1
    await waiting


async def test_robots_rules_are_bounded_by_their_size_and_evicted_ones_fetched_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(robots, "MAX_CACHED_RULE_CHARS", 60_000)
    fetched: list[str] = []
    body = "User-agent: *\n" + "".join(f"Disallow: /private{i}/\n" for i in range(500))

    async def fetch(url: str) -> RobotsResponse:
        fetched.append(url)
        return RobotsResponse(200, body)

    cache = RobotsCache(fetch, BOT, ttl=3600)
    for i in range(40):
        assert await cache.allowed(f"https://h{i}.test/private3/x") == (False, None)
        assert await cache.allowed(f"https://h{i}.test/public") == (True, None)
    assert cache.cached_chars <= 60_000
    assert 1 <= len(cache) < 40
    assert len(fetched) == 40  # one fetch each while cached
    await cache.allowed("https://h39.test/public")  # the most recent is still cached
    assert len(fetched) == 40
    await cache.allowed("https://h0.test/public")  # the oldest was dropped: fetched again
    assert fetched[-1] == "https://h0.test/robots.txt"
    assert len(cache._locks) == 0


async def test_big_rules_are_matched_without_stopping_the_event_loop() -> None:
    """10k wildcard rules take milliseconds a URL; a ticker on the loop keeps ticking
    (matched on the loop, 40 URLs in a row would stop it for all of their time)."""
    body = "User-agent: *\n" + "".join(f"Disallow: /p{i}/*x{i}$\n" for i in range(10_000))

    async def fetch(url: str) -> RobotsResponse:
        return RobotsResponse(200, body)

    cache = RobotsCache(fetch, BOT, ttl=3600)
    await cache.rules_for("https://big.test/")
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    start = time.perf_counter()
    for i in range(20):
        assert await cache.allowed(f"https://big.test/p{i}/ax{i}") == (False, None)
        assert await cache.allowed(f"https://big.test/q{i}") == (True, None)
    spent = time.perf_counter() - start
    done.set()
    await tick
    assert max(gaps) < spent / 4


async def test_a_long_user_agent_does_not_blow_up_a_hostile_robots_txt() -> None:
    """500 KiB of other agents' `User-agent` lines, read for a 38-character product
    token: the renamed lines used to grow as long as the token (14 MB of rules, more than
    the whole cache: every page failed and fetched robots.txt again). They stay short,
    and the rules are cached after one fetch."""
    agent = "ExampleCorporationDocumentationCrawler/1.0"
    body = "useragent:a\n" * (robots.PARSE_LIMIT_BYTES // 12)
    fetched: list[str] = []

    async def fetch(url: str) -> RobotsResponse:
        fetched.append(url)
        return RobotsResponse(200, body)

    cache = RobotsCache(fetch, agent, ttl=3600)
    for _ in range(3):
        assert await cache.allowed("http://evil.test/page") == (True, None)
    assert fetched == ["http://evil.test/robots.txt"]
    assert cache.cached_chars <= 1.5 * robots.PARSE_LIMIT_BYTES


def test_the_renamed_agent_is_short_and_never_in_the_token() -> None:
    assert robots._absent_name("ragknowledgebot") == "c"
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    name = robots._absent_name(alphabet)
    assert len(name) == 2 and name not in alphabet
