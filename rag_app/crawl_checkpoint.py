"""Where an unfinished site crawl stands, so that a restarted owner goes on from there.

A crawl job keeps its checkpoint in its journal record (`rag_app.job_journal`): the page
keys it has seen, the pages queued and not yet finished (in order, with their depth), its
counters and its summary so far. A page leaves the queue only once its visit ended (its
write durable, or its error counted), so a page in flight at a kill is visited again (its
unchanged text costs no embedding) and nothing reported stored is skipped. A checkpoint
that does not parse is ignored with a warning: the crawl then starts over, as it would
without one.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rag_app.crawl_options import MAX_DEPTH
from rag_app.limits import MAX_CRAWL_PAGES
from rag_app.results import CrawlSummary

logger = logging.getLogger(__name__)

MAX_SEEN = 4 * MAX_CRAWL_PAGES
"""Keys one crawl can see: its pages plus their redirect targets and canonical URLs."""
MAX_URL_CHARS = 8192
MAX_DIGEST_CHARS = 128


@dataclass
class CrawlCheckpoint:
    """A crawl's frontier and progress, as JSON-safe values."""

    start: str
    """The scope's start URL (the start page's URL after redirects)."""
    origin: str = ""
    """The start URL the crawl was asked for: a resume must be asked for the same."""
    seen: list[str] = field(default_factory=list)
    pending: list[tuple[str, int]] = field(default_factory=list)
    """Queued pages not finished yet, in visiting order: (URL, depth)."""
    scheduled: int = 0
    done: int = 0
    summary: dict[str, Any] = field(default_factory=dict)
    waiting: list[tuple[str, str, int, str]] = field(default_factory=list)
    """New pages taken for duplicates of a stored page's text until this crawl knows
    whether that page still holds it: (the stored page's URL, the page's URL, depth, the
    text's digest)."""
    again: list[str] = field(default_factory=list)
    """Keys of queued pages that are such pages visited again (their first visit's
    redirect and canonical keys are their own)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "origin": self.origin,
            "seen": self.seen,
            "pending": [[url, depth] for url, depth in self.pending],
            "scheduled": self.scheduled,
            "done": self.done,
            "summary": self.summary,
            "waiting": [list(waiter) for waiter in self.waiting],
            "again": self.again,
        }

    @classmethod
    def parse(cls, raw: object) -> CrawlCheckpoint | None:
        """The checkpoint in `raw`, or None (with a warning) when it is absent or damaged."""
        if raw is None:
            return None
        try:
            return cls._parse(raw)
        except (TypeError, ValueError, KeyError) as err:
            logger.warning("The crawl's checkpoint is unusable (%s); it starts over.", err)
            return None

    @classmethod
    def _parse(cls, raw: object) -> CrawlCheckpoint:
        if not isinstance(raw, dict):
            raise TypeError("not a mapping")
        start = web_url(raw["start"])
        seen = raw["seen"]
        pending = raw["pending"]
        if not isinstance(seen, list) or len(seen) > MAX_SEEN:
            raise ValueError("bad seen list")
        if not isinstance(pending, list) or len(pending) > MAX_CRAWL_PAGES:
            raise ValueError("bad pending list")
        queued = [(web_url(url), _depth(depth)) for url, depth in pending]
        waiting, again = raw.get("waiting", []), raw.get("again", [])
        if not isinstance(waiting, list) or len(waiting) > MAX_CRAWL_PAGES:
            raise ValueError("bad waiting list")
        if not isinstance(again, list) or len(again) > MAX_CRAWL_PAGES:
            raise ValueError("bad again list")
        scheduled, done = raw["scheduled"], raw["done"]
        if not (type(scheduled) is int and type(done) is int and 0 <= done <= scheduled):
            raise ValueError("bad counters")
        return cls(
            start=start,
            origin=web_url(raw["origin"]),
            seen=[web_url(key) for key in seen],
            pending=queued,
            scheduled=scheduled,
            done=done,
            summary=_summary(raw.get("summary", {})),
            waiting=[
                (web_url(holder), web_url(url), _depth(depth), _digest(digest))
                for holder, url, depth, digest in waiting
            ],
            again=[web_url(key) for key in again],
        )


def _digest(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_DIGEST_CHARS:
        raise ValueError("bad digest")
    return value


def _depth(value: object) -> int:
    if type(value) is not int or not 0 < value <= MAX_DEPTH:
        raise ValueError(f"bad depth {value!r}")
    return value


def web_url(value: object) -> str:
    """`value` if it is a web URL of sane length, else ValueError."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_URL_CHARS:
        raise ValueError("bad URL")
    parts = urlsplit(value)  # raises ValueError for a bad port or a broken IPv6 host
    _ = parts.port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not a web URL: {value[:80]!r}")
    return value


def _summary(raw: object) -> dict[str, Any]:
    """The summary so far: counts that are counts, error details that are string maps."""
    if not isinstance(raw, dict):
        raise TypeError("summary is not a mapping")
    summary = CrawlSummary()
    for spec in dataclasses.fields(CrawlSummary):
        if spec.name not in raw:
            continue
        value = raw[spec.name]
        if spec.name == "error_details":
            if not isinstance(value, list) or len(value) > MAX_CRAWL_PAGES:
                raise ValueError("bad error details")
            for detail in value:
                if (
                    not isinstance(detail, dict)
                    or not all(isinstance(k, str) and isinstance(v, str) for k, v in detail.items())
                    or not isinstance(detail.get("url"), str)
                ):
                    raise ValueError("bad error detail")
        elif type(value) is not int or value < 0:
            raise ValueError(f"bad count {spec.name}")
        setattr(summary, spec.name, value)
    return summary.to_dict()


__all__ = ["CrawlCheckpoint", "web_url"]
