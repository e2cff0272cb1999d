"""`rag refresh`: re-check every stored web page and apply what changed.

Each page is asked for with a conditional request (`rag_app.fetching.fetch_web`): a
changed page is ingested again, an unchanged one costs nothing, a page that moved to a
new canonical URL is stored there, and pages that are gone are removed once every page
has been checked, each asked once more first, never a whole site at once.

With a `checkpoint` callback the refresh publishes what it did that a second pass would
not see again (`RefreshCheckpoint`: pages removed, moved, stored anew); a refresh resumed
from it after the owner was killed reports the whole job's work, not only its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rag_app.crawl.scope import page_key
from rag_app.errors import RAGError
from rag_app.fetching import Fetched, FetchOutcome, Gone, fetch_web, new_home
from rag_app.index.chroma_store import SourceRecord
from rag_app.refresh_checkpoint import RefreshCheckpoint
from rag_app.results import IngestResult, RefreshSummary

if TYPE_CHECKING:
    from rag_app.crawl.crawler import WebCrawler

logger = logging.getLogger(__name__)

SITE_GONE_MIN = 3
"""A refresh removes no page of a site where at least this many stored pages are gone
and none answered (see `Refresh._remove_gone`)."""

CHECKPOINT_EVERY_SEC = 1.0
"""How often a refresh publishes its checkpoint at most (a change it made reaches the
journal within that time; a kill in between loses that change's count, not the change)."""
CHECKPOINT_LOOP_SHARE = 100
"""A checkpoint comes at least this many times its own cost apart (1 % of the loop)."""

Apply = Callable[..., Awaitable[IngestResult]]
"""`KnowledgeBase._apply`: store what a fetch yielded."""
Locked = Callable[..., Awaitable[Any]]
"""`KnowledgeBase._locked`: run a store write under the write lock, to its end."""


class Refresh:
    """One refresh of a set of stored web pages."""

    def __init__(
        self,
        crawler: WebCrawler,
        store: Any,
        apply: Apply,
        locked: Locked,
        *,
        concurrency: int,
        summary: RefreshSummary | None = None,
        progress: Callable[[int, int], None] | None = None,
        checkpoint: Callable[[dict[str, Any]], object] | None = None,
        resume: RefreshCheckpoint | None = None,
    ) -> None:
        self.crawler = crawler
        self.store = store
        self._apply = apply
        self._locked = locked
        self._concurrency = concurrency
        self.summary = summary if summary is not None else RefreshSummary()
        self._progress = progress
        self._checkpoint = checkpoint
        self._updated: dict[str, None] = {}
        """Pages stored anew by this job, in order (a resumed pass finds them unchanged)."""
        self._created: list[str] = []
        """Pages this job's moves stored under a new URL (not among the pages it checks)."""
        self._skip: set[str] = set()
        """Pages an earlier attempt created by a move: a resumed pass does not check them."""
        self._stored_as: dict[str, str] = {}
        """Page key → the spelling a page is stored under (a move onto a stored page)."""
        self._gone: dict[str, tuple[str, SourceRecord]] = {}
        """URL → why it is gone, the record checked."""
        self._answered: set[str] = set()
        """Sites with a page that is still there."""
        self._saved_at = time.monotonic()  # a refresh shorter than that saves nothing
        self._save_every = CHECKPOINT_EVERY_SEC
        self._save_later: asyncio.TimerHandle | None = None
        self._stopped = False
        """Cancelled: what still ends (a shielded write) is recorded at once."""
        if resume is not None:
            self._resume(resume)

    def _resume(self, earlier: RefreshCheckpoint) -> None:
        s = self.summary
        s.removed_urls = list(earlier.removed_urls)
        s.removed = len(s.removed_urls)
        s.moved_pages = [dict(m) for m in earlier.moved_pages]
        s.moved = len(s.moved_pages)
        s.checked = s.removed + s.moved  # checked before, no longer stored where they were
        self._updated = dict.fromkeys(earlier.updated_urls)
        s.updated = len(self._updated)
        s.embedded, s.chunks_stored = earlier.embedded, earlier.chunks_stored
        self._created = list(earlier.created_urls)
        self._skip = set(self._created)
        logger.info(
            "Refresh resumed: %d updated, %d moved, %d removed before",
            s.updated, s.moved, s.removed,
        )  # fmt: skip

    def state(self) -> RefreshCheckpoint:
        s = self.summary
        return RefreshCheckpoint(
            removed_urls=list(s.removed_urls),
            moved_pages=[dict(m) for m in s.moved_pages],
            updated_urls=list(self._updated),
            created_urls=list(self._created),
            embedded=s.embedded,
            chunks_stored=s.chunks_stored,
        )

    async def run(self, records: list[SourceRecord]) -> RefreshSummary:
        """Check `records` (web pages) and apply what changed; then remove the gone."""
        summary = self.summary
        self._stored_as = {page_key(r.source): r.source for r in records}
        records = [r for r in records if r.source not in self._skip]
        total = len(records) + summary.checked
        queue: asyncio.Queue[SourceRecord] = asyncio.Queue()
        for record in records:
            queue.put_nowait(record)
        self._report(total)

        async def worker() -> None:
            while not queue.empty():
                await self._one(queue.get_nowait())
                summary.checked += 1
                self._report(total)

        try:
            workers = min(self._concurrency, max(len(records), 1))
            await asyncio.gather(*(worker() for _ in range(workers)))
            await self._remove_gone()
        except asyncio.CancelledError:
            self._stopped = True  # a stop to resume later keeps what was done so far
            self._save(force=True)
            raise
        finally:
            if self._save_later is not None:
                self._save_later.cancel()
        summary.removed_urls.sort()
        summary.error_details.sort(key=lambda d: d["url"])
        logger.info(
            "Refresh: %d checked, %d unchanged, %d updated, %d moved, %d removed, %d errors",
            summary.checked,
            summary.unchanged,
            summary.updated,
            summary.moved,
            summary.removed,
            summary.errors,
        )
        return summary

    def _report(self, total: int) -> None:
        if self._progress is not None:
            self._progress(self.summary.checked, total)

    async def _one(self, record: SourceRecord) -> None:
        summary, url = self.summary, record.source
        try:
            outcome = await fetch_web(self.crawler, url, record, or_where_found=True)
            if (why := why_gone(outcome)) is not None:
                self._gone[url] = (why, record)  # a whole site turned noindex is kept too
                return
            self._answered.add(site_of(url))
            home = None
            if isinstance(outcome, Fetched):
                home = new_home(outcome, url, self.crawler.policy)
            if home is not None:
                await self._move(outcome, record, home)
                return
            result = await self._apply(outcome, record, only_if_stored=True)
        except RAGError as err:
            self._error(url, str(err))
            return
        except Exception as err:  # one page must never stop the refresh
            logger.exception("Unexpected error refreshing %s", url)
            self._error(url, f"Unexpected error ({type(err).__name__}).")
            return
        if not result.unchanged:
            summary.chunks_stored += result.chunks
            summary.embedded += result.embedded
        if url in self._updated:  # stored anew by an earlier attempt of this job: counted
            return
        if result.unchanged:
            summary.unchanged += 1
            return
        summary.updated += 1
        self._updated[url] = None
        self._save()

    def _error(self, url: str, reason: str) -> None:
        self._uncount_update(url)
        self.summary.errors += 1
        self.summary.error_details.append({"url": url, "reason": reason})

    async def _move(self, outcome: Fetched, record: SourceRecord, home: str) -> None:
        """Store a refreshed page under the URL it now lives at (`new_home`; the spelling
        it is stored under, if it is) and drop the old copy, in one write that first
        checks the old copy is still the one checked (a page deleted meanwhile stays
        deleted, under both URLs). A page already stored there gets the text just fetched,
        and the URL it answered at as its fallback, as a crawl would store it (keeping the
        old copy's text there, it was lost when that URL went). Counted once the write is
        durable, even after a cancel."""
        summary = self.summary
        home = self._stored_as.get(page_key(home), home)
        existing = await asyncio.to_thread(self.store.get_source, home)

        def stored(result: IngestResult) -> None:
            if not result.unchanged:
                summary.chunks_stored += result.chunks
                summary.embedded += result.embedded
            if existing is None:
                self._created.append(home)
            self._moved(record.source, home)

        found = "" if page_key(outcome.answered_at) == page_key(home) else outcome.answered_at
        fields = {**outcome.record_fields, "fetched_from": found}
        moved = dataclasses.replace(outcome, source=home, record_fields=fields)
        await self._apply(moved, existing, on_commit=stored, moving_from=record)

    def _moved(self, source: str, home: str) -> None:
        self._uncount_update(source)
        self.summary.moved += 1
        self.summary.moved_pages.append({"from": source, "to": home})
        logger.info("Moved %s to %s (its canonical URL changed)", source, home)
        self._save()

    def _uncount_update(self, url: str) -> None:
        """A page an earlier attempt of this job stored anew, now counted otherwise
        (moved, removed, failed): each page counts once."""
        if url in self._updated:
            del self._updated[url]
            self.summary.updated -= 1

    async def _remove_gone(self) -> None:
        """Remove the pages found gone (asked once more first, several at a time as in
        the first pass), except on sites where at least `SITE_GONE_MIN` pages were gone
        and none answered: a site answering 404 (or `noindex`) to everything is more
        likely down or misconfigured than emptied, and one refresh must not wipe it (its
        pages are reported; `rag delete` removes them)."""
        gone = self._gone
        by_site: dict[str, list[str]] = {}
        for url in gone:
            by_site.setdefault(site_of(url), []).append(url)
        queue: asyncio.Queue[str] = asyncio.Queue()
        for site, urls in sorted(by_site.items()):
            if site in self._answered or len(urls) < SITE_GONE_MIN:
                for url in sorted(urls):
                    queue.put_nowait(url)
                continue
            for url in sorted(urls):
                self._error(
                    url,
                    f"{gone[url][0]} Every stored page of {site} is gone at once, so none "
                    "was removed (a site down or moved?); `rag delete` them if the site is "
                    "really gone.",
                )

        async def worker() -> None:
            while not queue.empty():
                await self._remove(queue.get_nowait())

        workers = min(self._concurrency, queue.qsize())
        await asyncio.gather(*(worker() for _ in range(workers)))

    async def _remove(self, url: str) -> None:
        """Ask a gone page once more, and remove it if it is still gone and unchanged."""
        summary, record = self.summary, self._gone[url][1]
        still, doubt = await self._still_gone(record)
        if doubt is not None:  # cannot tell: kept, the next refresh asks again
            self._error(url, doubt)
            return
        if not still:
            summary.unchanged += 1  # back since (a deploy, a page added again): kept
            return

        def counted(removed: int | None) -> None:
            """Counted once the delete is durable, even after a cancel."""
            if removed is None:  # deleted, or stored again, since it was checked
                summary.unchanged += 1
                return
            logger.info("Deleted %s: %d chunks", url, removed)
            self._uncount_update(url)
            summary.removed += 1
            summary.removed_urls.append(url)
            self._save()

        await self._locked(self._delete_if_unchanged, record, then=counted)

    async def _still_gone(self, record: SourceRecord) -> tuple[bool, str | None]:
        """Asked once more before its removal: (still gone, why it cannot tell). A page
        gone for a moment (a deploy, a flapping server) or stored again meanwhile answers
        now and is kept; any failure keeps it too."""
        try:
            outcome = await fetch_web(self.crawler, record.source, record, or_where_found=True)
        except RAGError as err:
            return False, f"{err} (it had answered 404/410; kept)"
        except Exception as err:  # one page must never stop the refresh
            logger.exception("Unexpected error re-checking %s", record.source)
            return False, f"Unexpected error ({type(err).__name__}); kept."
        return why_gone(outcome) is not None, None

    def _delete_if_unchanged(self, checked: SourceRecord) -> int | None:
        """Delete a source in the write's turn if its record is still the one checked (a
        page added again meanwhile is kept); None when it was not deleted."""
        if not checked.still(self.store.get_source(checked.source)):
            return None
        return int(self.store.delete_source(checked.source))

    def _save(self, *, force: bool = False) -> None:
        """Publish the checkpoint at most every `CHECKPOINT_EVERY_SEC` (and never more than
        1 % of the loop's time): a change made sooner is published when the time comes
        (at once when forced, or once the refresh was cancelled)."""
        if self._checkpoint is None:
            return
        now = time.monotonic()
        wait = self._saved_at + self._save_every - now
        if wait > 0 and not (force or self._stopped):
            if self._save_later is None:
                loop = asyncio.get_running_loop()
                self._save_later = loop.call_later(wait, functools.partial(self._save, force=True))
            return
        if self._save_later is not None:
            self._save_later.cancel()
            self._save_later = None
        self._saved_at = now
        try:
            self._checkpoint(self.state().to_dict())
        except Exception:  # a refresh goes on without its checkpoint
            logger.warning("Could not record the refresh's checkpoint", exc_info=True)
        took = time.monotonic() - now
        self._save_every = max(CHECKPOINT_EVERY_SEC, CHECKPOINT_LOOP_SHARE * took)


def why_gone(outcome: FetchOutcome) -> str | None:
    """Why a refresh takes a stored page for gone: 404/410, or it now asks not to be
    indexed; None when it is there."""
    if isinstance(outcome, Gone):
        return outcome.reason
    if isinstance(outcome, Fetched) and "noindex" in outcome.robots:
        return "The page now asks not to be indexed (noindex)."
    return None


def site_of(url: str) -> str:
    """The site of a URL: its host (`http` and `https` of one host are one site)."""
    return (urlsplit(url).hostname or "").lower()


__all__ = ["SITE_GONE_MIN", "Refresh", "site_of", "why_gone"]
