"""robots.txt: fetch once per origin, cache with a TTL, answer `allowed?` and `crawl delay`.

Allow/Disallow matching is `urllib.robotparser` (our user agent, `*` fallback).
`Crawl-delay` is read here with fractional values (the stdlib keeps only integers).
Fetch failures (5xx, timeouts, connection errors) fail OPEN with a WARNING; a 4xx
means "no robots.txt" and allows everything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit
from urllib.robotparser import RobotFileParser

from rag_app.errors import RAGError

log = logging.getLogger(__name__)

FAILURE_CACHE_SEC = 60.0
"""A failed robots.txt fetch is retried after at most this long (not the full TTL)."""


@dataclass(frozen=True)
class RobotsResponse:
    """What fetching `/robots.txt` returned."""

    status: int
    text: str


RobotsFetch = Callable[[str], Awaitable[RobotsResponse]]
"""Fetch a robots.txt URL; may raise `RAGError` (timeouts, refused, connection errors)."""


def _product_token(user_agent: str) -> str:
    return user_agent.split("/", 1)[0].strip().lower()


def parse_crawl_delays(text: str) -> dict[str, float]:
    """Map each user-agent token (lower case, `*` included) to its `Crawl-delay` seconds."""
    delays: dict[str, float] = {}
    agents: list[str] = []
    in_rules = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        key = key.lower()
        if key == "user-agent":
            if in_rules:
                agents, in_rules = [], False
            agents.append(value.lower())
        elif key in ("allow", "disallow", "crawl-delay", "request-rate"):
            in_rules = True
            if key == "crawl-delay":
                try:
                    seconds = float(value)
                except ValueError:
                    continue
                if seconds >= 0:
                    for agent in agents:
                        delays.setdefault(agent, seconds)
    return delays


@dataclass(frozen=True)
class RobotsRules:
    """Parsed rules of one origin for one user agent."""

    parser: RobotFileParser | None
    """None means "allow everything" (no robots.txt, or fail-open)."""
    crawl_delay: float | None
    fetched_at: float
    ttl: float

    def allows(self, url: str, user_agent: str) -> bool:
        """True when `user_agent` may fetch `url`."""
        return self.parser is None or self.parser.can_fetch(user_agent, url)

    def fresh(self, now: float) -> bool:
        """Still within its cache lifetime."""
        return now - self.fetched_at < self.ttl


def _longest_match_first(parser: RobotFileParser) -> None:
    """Make the stdlib's first-match behave like RFC 9309 longest-match (Allow wins ties).

    `urllib.robotparser` applies the first matching rule in file order, so
    `Disallow: /docs/` before `Allow: /docs/public.html` would block the allowed page.
    """
    for entry in [*parser.entries, parser.default_entry]:
        if entry is not None:
            entry.rulelines.sort(key=lambda rule: (-len(rule.path), not rule.allowance))


def parse_rules(text: str, user_agent: str, fetched_at: float, ttl: float) -> RobotsRules:
    """Build rules from robots.txt text: stdlib parser + our fractional `Crawl-delay`."""
    parser = RobotFileParser()
    parser.parse(text.splitlines())
    _longest_match_first(parser)
    delays = parse_crawl_delays(text)
    token = _product_token(user_agent)
    delay = next((d for agent, d in delays.items() if agent != "*" and agent in token), None)
    if delay is None:
        delay = delays.get("*")
    return RobotsRules(parser=parser, crawl_delay=delay, fetched_at=fetched_at, ttl=ttl)


def robots_url(url: str) -> str:
    """The robots.txt URL of the origin of `url`."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


class RobotsCache:
    """Per-origin robots.txt rules with a TTL; one fetch per origin at a time."""

    def __init__(
        self,
        fetch: RobotsFetch,
        user_agent: str,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._user_agent = user_agent
        self._ttl = ttl
        self._clock = clock
        self._rules: dict[str, RobotsRules] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.fetch_count = 0

    async def rules_for(self, url: str) -> RobotsRules:
        """Rules for the origin of `url` (cached, fetched when missing or stale)."""
        key = robots_url(url)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._rules.get(key)
            if cached is not None and cached.fresh(self._clock()):
                return cached
            rules = await self._load(key)
            self._rules[key] = rules
            return rules

    async def allowed(self, url: str) -> tuple[bool, float | None]:
        """`(may_fetch, crawl_delay_seconds)` for `url`."""
        rules = await self.rules_for(url)
        return rules.allows(url, self._user_agent), rules.crawl_delay

    async def _load(self, url: str) -> RobotsRules:
        self.fetch_count += 1
        now = self._clock()
        try:
            response = await self._fetch(url)
        except RAGError as err:
            return self._fail_open(url, str(err), now)
        if 200 <= response.status < 300:
            return parse_rules(response.text, self._user_agent, now, self._ttl)
        if 400 <= response.status < 500:
            log.debug("No robots.txt at %s (HTTP %s): everything allowed", url, response.status)
            return RobotsRules(parser=None, crawl_delay=None, fetched_at=now, ttl=self._ttl)
        return self._fail_open(url, f"HTTP {response.status}", now)

    def _fail_open(self, url: str, reason: str, now: float) -> RobotsRules:
        log.warning("Could not read %s (%s); crawling as if it allowed everything", url, reason)
        ttl = min(self._ttl, FAILURE_CACHE_SEC)
        return RobotsRules(parser=None, crawl_delay=None, fetched_at=now, ttl=ttl)
