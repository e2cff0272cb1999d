"""Crawl results: the dataclasses the knowledge base consumes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime


def utc_now_iso() -> str:
    """Current time as ISO-8601 UTC, e.g. `2026-05-09T07:35:25+00:00`."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def content_hash(text: str) -> str:
    """SHA-256 hex digest of the extracted text (unchanged text → same hash → no re-embed)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CrawledPage:
    """One fetched page, reduced to structured text (Markdown headings/tables/lists)."""

    url: str
    """The requested URL, normalised (fragment removed): use it as the source id."""
    title: str
    text: str
    crawled_at: str
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str = ""
    final_url: str = ""
    """Where the content came from (differs from `url` only when redirects are followed)."""
    content_type: str = "text/html"
    encoding: str = "utf-8"
    links: tuple[str, ...] = ()
    """Absolute link targets of an HTML page (resolved against its final URL)."""
    canonical: str | None = None
    """`<link rel="canonical">`, when the page names one."""
    robots: frozenset[str] = frozenset()
    """`<meta name="robots">` directives (`noindex`, `nofollow`, ...)."""
    fetched_from: str = ""
    """Where the page was fetched, when it is stored under another URL (its canonical
    one): a refresh asks this URL again, since the canonical one may not answer."""


@dataclass(frozen=True)
class NotModified:
    """The server answered 304: the stored copy is current (conditional request)."""

    url: str
    etag: str | None
    last_modified: str | None
    checked_at: str


@dataclass(frozen=True)
class PageResult:
    """Outcome of one page in `crawl_pages`: a page, not-modified, or an error reason."""

    url: str
    page: CrawledPage | None = None
    error: str | None = None
    not_modified: bool = False
    status: int | None = None
    """HTTP status for HTTP errors (e.g. 404/410 = gone), else None."""

    @property
    def ok(self) -> bool:
        """True when a page was fetched or confirmed unchanged."""
        return self.error is None

    @property
    def gone(self) -> bool:
        """True when the server says the page no longer exists (404/410)."""
        return self.status in (404, 410)


@dataclass(frozen=True)
class IndexLinks:
    """What an index page yielded: the URLs to crawl and what was skipped (for reports)."""

    index_url: str
    urls: list[str]
    found: int
    """Distinct same-site page links before the pattern filter and the page cap."""
    skipped_external: int
    skipped_by_pattern: int
    skipped_invalid: int
    truncated: int
    """How many matching links were left out because of the page cap."""
