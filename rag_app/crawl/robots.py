"""robots.txt: fetch once per origin, cache with a TTL, answer `allowed?` and `crawl delay`.

Parsing and matching are `protego` (RFC 9309: `*` and `$` wildcards, longest match wins,
Allow wins a tie; fractional `Crawl-delay`). Only the first 500 KiB are parsed (§2.5).
Fetch failures (5xx, timeouts, connection errors) fail OPEN with a WARNING; a 4xx
means "no robots.txt" and allows everything.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from cachetools import LRUCache
from protego import Protego

from rag_app.errors import RAGError
from rag_app.keyed_locks import KeyedLocks

log = logging.getLogger(__name__)

FAILURE_CACHE_SEC = 60.0
"""A failed robots.txt fetch is retried after this long (not the full TTL), counted from
the end of the attempt; each further failure in a row doubles it, up to
`MAX_FAILURE_CACHE_SEC` (a host whose robots.txt times out would otherwise make the
crawl wait out the timeout again every minute)."""
MAX_FAILURE_CACHE_SEC = 900.0

PARSE_LIMIT_BYTES = 500 * 1024
"""Only this much of a robots.txt body is parsed; the rest is ignored (RFC 9309 §2.5)."""

_USER_AGENT_FIELDS = frozenset({"user-agent", "useragent", "user agent"})
"""The spellings protego reads as a `User-agent` line."""


@dataclass(frozen=True)
class RobotsResponse:
    """What fetching `/robots.txt` returned."""

    status: int
    text: str


RobotsFetch = Callable[[str], Awaitable[RobotsResponse]]
"""Fetch a robots.txt URL; may raise `RAGError` (timeouts, refused, connection errors)."""


def _product_token(user_agent: str) -> str:
    return user_agent.split("/", 1)[0].strip().lower()


def _head(text: str, limit: int = PARSE_LIMIT_BYTES) -> str:
    """The first `limit` UTF-8 bytes of `text`, cut back to the last complete line.

    A line cut in half by the limit is dropped: `Allow: /private/page` cut to `Allow: /`
    would otherwise open the whole site.
    """
    text = text.removeprefix("\ufeff")
    if len(text) * 4 <= limit:  # at most 4 UTF-8 bytes per character: surely short enough
        return text
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    head = data[:limit].decode("utf-8", errors="ignore")
    end = max(head.rfind("\n"), head.rfind("\r"))
    return head[: end + 1]


def _user_agent_value(line: str) -> str | None:
    """The agent a `User-agent` line names (lower case), or None for any other line.

    Follows protego's reading: `field: value`, or `field value` when the colon does not
    separate a field (`User-agent foo:bar`).
    """
    line = line.split("#", 1)[0].strip()
    field, colon, value = line.partition(":")
    if colon and field.strip().lower() in _USER_AGENT_FIELDS:
        return value.strip().lower() or None
    if colon and (not value or value[0].isspace()):
        return None
    words = line.split()
    if words and words[0].lower() in _USER_AGENT_FIELDS:
        value = " ".join(words[1:])
    elif len(words) > 1 and f"{words[0]} {words[1]}".lower() == "user agent":
        value = " ".join(words[2:])
    else:
        return None
    return value.strip().lower() or None


def _absent_name(token: str) -> str:
    """The shortest lower-case name not found in `token`, so it never matches it. Short,
    so renamed lines do not grow the text (a long user agent made every renamed line as
    long as it)."""
    for size in range(1, len(token) + 2):
        for letters in itertools.product(string.ascii_lowercase, repeat=size):
            if (name := "".join(letters)) not in token:
                return name
    raise AssertionError("unreachable: a name longer than the token is not in it")


def _keep_only_our_group(text: str, token: str) -> str:
    """Rename every `User-agent` line protego would not pick for `token` to one dummy name.

    protego attaches each rule to every agent named above it, so a file with thousands of
    agents over thousands of rules costs their product (a minute and gigabytes for 200 KiB).
    Which name wins is decided by protego itself, on a skeleton of one group per name; then
    the winner's lines keep its name and all others get a name that matches nothing, so a
    group holds at most two agents and the answer for `token` is unchanged.
    """
    if "*" in token:
        return text
    lines = text.splitlines()
    agents: dict[int, str] = {}
    for i, line in enumerate(lines):
        name = _user_agent_value(line)
        if name is not None:
            # protego also matches a name with its `*`s removed (and never the raw name).
            agents[i] = name if name == "*" else name.replace("*", "")
    if not agents:
        return text
    names = [name for name in dict.fromkeys(agents.values()) if name]
    skeleton = Protego.parse(
        "".join(f"User-agent: {name}\nDisallow: /{n}/\n" for n, name in enumerate(names))
    )
    winner = next(
        (name for n, name in enumerate(names) if not skeleton.can_fetch(f"/{n}/", token)), None
    )
    dummy = _absent_name(token)
    for i, name in agents.items():
        lines[i] = f"User-agent: {name if name == winner else dummy}"
    return "\n".join(lines)


def parse_crawl_delays(text: str) -> dict[str, float]:
    """Map each user-agent token (lower case, `*` included) to its `Crawl-delay` seconds.

    A diagnostic view of a whole file; the crawler uses `parse_rules`.
    """
    text = _head(text)
    parser = Protego.parse(text)
    delays: dict[str, float] = {}
    for line in text.splitlines():
        name = _user_agent_value(line)
        if name is not None and name not in delays:
            delay = parser.crawl_delay(name)
            if delay is not None:
                delays[name] = delay
    return delays


@dataclass(frozen=True)
class RobotsRules:
    """Parsed rules of one origin for one user agent."""

    parser: Protego | None
    """None means "allow everything" (no robots.txt, or fail-open)."""
    crawl_delay: float | None
    fetched_at: float
    ttl: float
    agent: str = ""
    """The product token the rules were parsed for (`parse_rules` keeps only its group)."""
    sitemaps: tuple[str, ...] = ()
    """`Sitemap:` lines of the file (they belong to no group)."""
    size: int = 0
    """Characters of rules parsed (what the parsed rules' memory grows with)."""

    def allows(self, url: str, user_agent: str) -> bool:
        """True when `user_agent` may fetch `url`."""
        if self.parser is None:
            return True
        token = _product_token(user_agent)
        if token != self.agent:
            raise ValueError(f"These rules were parsed for {self.agent!r}, not {token!r}.")
        return self.parser.can_fetch(url, token)

    def fresh(self, now: float) -> bool:
        """Still within its cache lifetime."""
        return now - self.fetched_at < self.ttl


def parse_rules(text: str, user_agent: str, fetched_at: float, ttl: float) -> RobotsRules:
    """Build the rules of `user_agent` from robots.txt text (first 500 KiB only)."""
    token = _product_token(user_agent)
    ours = _keep_only_our_group(_head(text), token)
    parser = Protego.parse(ours)
    return RobotsRules(
        parser=parser,
        crawl_delay=parser.crawl_delay(token),
        fetched_at=fetched_at,
        ttl=ttl,
        agent=token,
        sitemaps=tuple(parser.sitemaps)[:MAX_SITEMAP_LINES],
        size=len(ours),
    )


MAX_SITEMAP_LINES = 50
"""`Sitemap:` lines kept from one robots.txt."""


def robots_url(url: str) -> str:
    """The robots.txt URL of the origin of `url`."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


MAX_CACHED_RULE_CHARS = 1_000_000
"""Characters of parsed rules the cache keeps, all origins together (least recently used
go first). Parsed rules take 50–100 bytes a character (a 500 KiB file of wildcard rules:
26 MB; short `$` rules, stored twice: ~100 bytes), so this bounds the cache near 100 MB
however many sites a long-lived crawler meets; an origin dropped while fresh only has its
robots.txt fetched again."""
ENTRY_CHARS = 1000
"""What one cached origin counts for besides its rules (at most 1,000 origins)."""
MAX_REMEMBERED_FAILURES = 2000
"""Origins whose failed fetches in a row are counted (least recently failed forgotten)."""
INLINE_MATCH_CHARS = 20_000
"""Rules larger than this are matched in a thread: 19k wildcard rules take ~15 ms a URL,
which the event loop (and every search in the store's owner) would otherwise wait."""


def _cost(rules: RobotsRules) -> int:
    """Never more than the whole cache: a bigger entry would be refused (every page of
    its site would fetch robots.txt again); it displaces all others instead."""
    return min(rules.size + ENTRY_CHARS, MAX_CACHED_RULE_CHARS)


class RobotsCache:
    """Per-origin robots.txt rules with a TTL; one fetch per origin at a time. Bounded:
    `MAX_CACHED_RULE_CHARS` of rules (LRU), locks only while in use."""

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
        self._rules: LRUCache[str, RobotsRules] = LRUCache(MAX_CACHED_RULE_CHARS, _cost)
        self._locks = KeyedLocks()
        self._failures: LRUCache[str, int] = LRUCache(MAX_REMEMBERED_FAILURES)
        """Failed fetches in a row per robots.txt URL (cleared by an answer)."""
        self.fetch_count = 0

    async def rules_for(self, url: str) -> RobotsRules:
        """Rules for the origin of `url` (cached, fetched when missing or stale)."""
        key = robots_url(url)
        async with self._locks.hold(key):
            cached = self._rules.get(key)
            if cached is not None and cached.fresh(self._clock()):
                return cached
            rules = await self._load(key)
            self._rules[key] = rules
            return rules

    async def allowed(self, url: str) -> tuple[bool, float | None]:
        """`(may_fetch, crawl_delay_seconds)` for `url`."""
        rules = await self.rules_for(url)
        if rules.size > INLINE_MATCH_CHARS:
            allowed = await asyncio.to_thread(rules.allows, url, self._user_agent)
        else:
            allowed = rules.allows(url, self._user_agent)
        return allowed, rules.crawl_delay

    @property
    def cached_chars(self) -> int:
        """What the cached rules count for (`MAX_CACHED_RULE_CHARS` at most)."""
        return int(self._rules.currsize)

    def __len__(self) -> int:
        """Origins whose rules are cached."""
        return len(self._rules)

    async def _load(self, url: str) -> RobotsRules:
        self.fetch_count += 1
        try:
            response = await self._fetch(url)
        except RAGError as err:
            return self._fail_open(url, str(err))
        now = self._clock()  # the TTL counts from the answer, not from the request
        if 200 <= response.status < 300:
            self._failures.pop(url, None)
            # Off the event loop: a 500 KiB file full of wildcards takes a noticeable moment.
            return await asyncio.to_thread(
                parse_rules, response.text, self._user_agent, now, self._ttl
            )
        if 400 <= response.status < 500:
            self._failures.pop(url, None)
            log.debug("No robots.txt at %s (HTTP %s): everything allowed", url, response.status)
            return RobotsRules(parser=None, crawl_delay=None, fetched_at=now, ttl=self._ttl)
        return self._fail_open(url, f"HTTP {response.status}")

    def _fail_open(self, url: str, reason: str) -> RobotsRules:
        failures = self._failures[url] = self._failures.get(url, 0) + 1
        retry = min(FAILURE_CACHE_SEC * 2 ** min(failures - 1, 20), MAX_FAILURE_CACHE_SEC)
        ttl = min(self._ttl, retry)
        log.warning(
            "Could not read %s (%s); crawling as if it allowed everything, next try in %.0f s",
            url,
            reason,
            ttl,
        )
        return RobotsRules(parser=None, crawl_delay=None, fetched_at=self._clock(), ttl=ttl)
