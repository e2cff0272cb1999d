"""One fetch contract for web pages and local files: fetched, not modified, or gone.

Whatever a source is, asking for it again given what was stored last time yields one
of three outcomes, and the knowledge base applies each the same way (ingest, keep,
remove): so `rag add`, a crawl, `rag index` and `rag refresh` share one path.

- web: a conditional GET (ETag / Last-Modified); 304 → `NotModified`, 404/410 → `Gone`;
- file: the modification time; unchanged → `NotModified`, missing → `Gone`.

Any other failure raises its one-line `RAGError` (the stored copy is kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from rag_app.background import in_ingest_lane
from rag_app.crawl.exceptions import RedirectNotFollowedError
from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.pages import NotModified as PageNotModified
from rag_app.crawl.scope import CrawlScope, page_key
from rag_app.crawl.url_match import same_site
from rag_app.crawl.url_safety import AddressPolicy, parse_url
from rag_app.documents import DocumentLimits
from rag_app.errors import CrawlError, RAGError, UrlRefusedError
from rag_app.index.chroma_store import SourceRecord
from rag_app.local_files import read_local_document

if TYPE_CHECKING:
    from rag_app.crawl.crawler import WebCrawler


@dataclass(frozen=True)
class Fetched:
    """New content for a source, with what its record should remember."""

    source: str
    title: str
    text: str
    kind: str
    """`web` or `file`."""
    metadata: dict[str, Any] = field(default_factory=dict)
    record_fields: dict[str, Any] = field(default_factory=dict)
    robots: frozenset[str] = frozenset()
    """A web page's `<meta name="robots">` directives (`noindex`: it asks not to be kept)."""
    canonical: str = ""
    """A web page's `<link rel="canonical">`, when it names one."""
    answered_at: str = ""
    """The URL that answered with this content (a web page asked where it was found)."""


@dataclass(frozen=True)
class NotModified:
    """The stored copy is current (HTTP 304, or the same file modification time)."""

    source: str


@dataclass(frozen=True)
class Gone:
    """The source no longer exists (HTTP 404/410, or the file was deleted)."""

    source: str
    reason: str
    error: RAGError | None = None
    """The HTTP error that said so (web pages), to re-raise where gone is a failure."""


FetchOutcome = Fetched | NotModified | Gone


def from_page(page: CrawledPage, source: str = "") -> Fetched:
    """A crawled page as fetched content (stored as `source`, else as its own URL)."""
    stored_as = source or page.url
    return Fetched(
        source=stored_as,
        title=page.title,
        text=page.text,
        kind="web",
        metadata={"crawled_at": page.crawled_at},
        record_fields={
            "etag": page.etag or "",
            "last_modified": page.last_modified or "",
            "fetched_from": page.fetched_from or (page.url if page.url != stored_as else ""),
        },
        robots=page.robots,
        canonical=page.canonical or "",
        answered_at=page.url,
    )


def new_home(outcome: Fetched, stored_as: str, policy: AddressPolicy) -> str | None:
    """Where a refreshed web page now lives, when its stored URL no longer answers and it
    answered where a crawl first met it (`SourceRecord.fetched_from`): the canonical URL
    it names now when a crawl from there would store it under that URL (same site and
    port, within that page's folder or the stored URL's), else the URL it answered at.
    None when it stays put: it names its stored URL still, or it answered there (a page
    that answers is never moved, so two pages naming each other as canonical cannot swap
    places at every refresh)."""
    here = outcome.answered_at or stored_as
    if page_key(here) == page_key(stored_as) or not same_site(here, stored_as):
        return None
    home = here
    if outcome.canonical:
        with contextlib.suppress(UrlRefusedError):
            named = parse_url(outcome.canonical, policy).url
            if _within(named, here) or _within(named, stored_as):
                home = named
    return None if page_key(home) == page_key(stored_as) else home


def _within(url: str, of: str) -> bool:
    """`url` is what a crawl from `of` would take: same site and port, and inside its
    folder as a server resolves the path (`/docs/%2e%2e/admin` and `//admin/docs/` are
    not in `/docs/`)."""
    return CrawlScope.build(of).admits(url)


async def fetch_web(
    crawler: WebCrawler, url: str, old: SourceRecord | None, *, or_where_found: bool = False
) -> FetchOutcome:
    """Fetch a web page, conditionally when a copy is stored. With `or_where_found` (a
    refresh), a page stored under its canonical URL that no longer answers there (gone,
    or a redirect not followed) is asked for where the crawl found it
    (`SourceRecord.fetched_from`), the outcome being the stored source's."""
    alt = ""
    if or_where_found and old is not None and old.fetched_from not in ("", url):
        alt = old.fetched_from
    try:
        outcome = await _fetch_web(crawler, url, url, old)
    except RedirectNotFollowedError:
        if not alt:
            raise
        return await _fetch_web(crawler, alt, url, old)
    if isinstance(outcome, Gone) and alt:
        found = await _fetch_web(crawler, alt, url, old)
        return outcome if isinstance(found, Gone) else found
    if isinstance(outcome, Fetched) and alt:  # it answered at its URL: where it was found
        fields = {**outcome.record_fields, "fetched_from": alt}  # stays the fallback
        outcome = dataclasses.replace(outcome, record_fields=fields)
    return outcome


async def _fetch_web(
    crawler: WebCrawler, where: str, source: str, old: SourceRecord | None
) -> FetchOutcome:
    """Fetch `where` for the stored `source` (404/410: `Gone`)."""
    try:
        outcome = await crawler.crawl_page(
            where,
            etag=(old.etag or None) if old else None,
            last_modified=(old.last_modified or None) if old else None,
        )
    except CrawlError as err:
        if getattr(err, "status", None) in (404, 410):
            return Gone(source, str(err), err)
        raise
    if isinstance(outcome, PageNotModified):
        return NotModified(source)
    return from_page(outcome, source)


def file_path(source: str) -> Path:
    """The local path of a `file://` source."""
    return Path(unquote(urlsplit(source).path))


MTIME_TOLERANCE_SEC = 1e-6
"""Modification times as stored come back rounded to the microsecond (Chroma's float
metadata: 1795657331.6852627 reads back as 1795657331.685263), so two times this close
are the same time."""


async def fetch_file(
    path: Path,
    old: SourceRecord | None,
    limits: DocumentLimits | None = None,
    within: Path | None = None,
) -> FetchOutcome:
    """Read a local file unless its modification time is the one stored; with `within`
    (the folder being indexed), only a file inside it. A file deleted, or replaced by a
    folder, since it was listed is `Gone` (its stored copy is pruned, not kept)."""
    source = path.as_uri()
    gone = Gone(source, f"The file {path} no longer exists.")
    try:
        mtime = (await asyncio.to_thread(path.stat)).st_mtime
    except FileNotFoundError:
        return gone
    if old is not None and old.mtime and abs(old.mtime - mtime) < MTIME_TOLERANCE_SEC:
        return NotModified(source)
    try:
        title, text = await in_ingest_lane(read_local_document, path, limits=limits, within=within)
    except (FileNotFoundError, IsADirectoryError):  # deleted or replaced since its stat
        return gone
    return Fetched(source, title, text, kind="file", record_fields={"mtime": mtime})


async def fetch_source(
    record: SourceRecord, crawler: WebCrawler, limits: DocumentLimits | None = None
) -> FetchOutcome:
    """Ask again for a stored source, whichever kind it is."""
    if record.kind == "file":
        return await fetch_file(file_path(record.source), record, limits)
    return await fetch_web(crawler, record.source, record)


__all__ = [
    "FetchOutcome",
    "Fetched",
    "Gone",
    "NotModified",
    "fetch_file",
    "fetch_source",
    "fetch_web",
    "file_path",
    "from_page",
]
