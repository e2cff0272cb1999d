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
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from rag_app.crawl.crawler import WebCrawler
from rag_app.crawl.scope import page_key
from rag_app.errors import RAGError
from rag_app.fetching import Fetched, FetchOutcome, Gone, fetch_web, new_home
from rag_app.index.chroma_store import SourceRecord
from rag_app.refresh_checkpoint import RefreshCheckpoint
from rag_app.results import IngestResult, RefreshSummary

logger = logging.getLogger(__name__)

SITE_GONE_MIN = 3
"""A refresh removes no page of a site where at least this many stored pages are gone
and none answered (see `Refresh._remove_gone`)."""

CHECKPOINT_EVERY_SEC = 1.0
"""How often a refresh publishes its checkpoint after storing a changed page, at most
(a removal or a move publishes it at once: they are not seen again by a resumed pass)."""
CHECKPOINT_LOOP_SHARE = 100
"""A spaced checkpoint comes at least this many times its own cost apart."""

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
        self._updated: list[str] = []
        """Pages stored anew by this job (a resumed pass finds them unchanged)."""
        self._counted: set[str] = set()
        """Pages an earlier attempt of this job counted already (updated, or moved there)."""
        self._gone: dict[str, tuple[str, SourceRecord]] = {}
        """URL → why it is gone, the record checked."""
        self._answered: set[str] = set()
        """Sites with a page that is still there."""
        self._saved_at = 0.0
        self._save_every = CHECKPOINT_EVERY_SEC
        if resume is not None:
            self._resume(resume)

    def _resume(self, earlier: RefreshCheckpoint) -> None:
        s = self.summary
        s.removed_urls = list(earlier.removed_urls)
        s.removed = len(s.removed_urls)
        s.checked = s.removed  # checked by an earlier attempt, not stored any more
        s.moved_pages = [dict(m) for m in earlier.moved_pages]
        s.moved = len(s.moved_pages)
        self._updated = list(earlier.updated_urls)
        s.updated = len(self._updated)
        s.embedded, s.chunks_stored = earlier.embedded, earlier.chunks_stored
        self._counted = set(self._updated) | {m["to"] for m in s.moved_pages}
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
            embedded=s.embedded,
            chunks_stored=s.chunks_stored,
        )

    async def run(self, records: list[SourceRecord]) -> RefreshSummary:
        """Check `records` (web pages) and apply what changed; then remove the gone."""
        summary = self.summary
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

        workers = min(self._concurrency, max(len(records), 1))
        await asyncio.gather(*(worker() for _ in range(workers)))
        await self._remove_gone()
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
            if home is not None and await self._move(outcome, record, home):
                return
            result = await self._apply(outcome, record, only_if_stored=True)
        except RAGError as err:
            summary.errors += 1
            summary.error_details.append({"url": url, "reason": str(err)})
            return
        except Exception as err:  # one page must never stop the refresh
            logger.exception("Unexpected error refreshing %s", url)
            summary.errors += 1
            summary.error_details.append(
                {"url": url, "reason": f"Unexpected error ({type(err).__name__})."}
            )
            return
        if not result.unchanged:
            summary.chunks_stored += result.chunks
            summary.embedded += result.embedded
        if url in self._counted:  # counted by an earlier attempt of this job
            return
        if result.unchanged:
            summary.unchanged += 1
            return
        summary.updated += 1
        self._updated.append(url)
        self._save()

    async def _move(self, outcome: Fetched, record: SourceRecord, home: str) -> bool:
        """Store a refreshed page under the URL it now lives at (`new_home`: its canonical
        URL changed) and drop the old copy, as a new crawl would have it; False (nothing
        done) when the old copy was deleted or stored anew meanwhile. A page already
        stored at its new home only loses the old copy."""
        summary = self.summary
        if not await asyncio.to_thread(self._still_stored, record):
            return False
        if await asyncio.to_thread(self.store.get_source, home) is None:
            here = outcome.record_fields.get("fetched_from") or record.source
            found = "" if page_key(here) == page_key(home) else here
            fields = {**outcome.record_fields, "fetched_from": found}
            moved = dataclasses.replace(outcome, source=home, record_fields=fields)
            result = await self._apply(moved, None)
            summary.chunks_stored += result.chunks
            summary.embedded += result.embedded
        summary.moved += 1
        summary.moved_pages.append({"from": record.source, "to": home})
        logger.info("Moved %s to %s (its canonical URL changed)", record.source, home)
        await self._locked(self._delete_if_unchanged, record)
        self._save(force=True)
        return True

    async def _remove_gone(self) -> None:
        """Remove the pages found gone (asked once more first, several at a time as in
        the first pass), except on sites where at least `SITE_GONE_MIN` pages were gone
        and none answered: a site answering 404 (or `noindex`) to everything is more
        likely down or misconfigured than emptied, and one refresh must not wipe it (its
        pages are reported; `rag delete` removes them)."""
        summary, gone = self.summary, self._gone
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
                summary.errors += 1
                summary.error_details.append(
                    {
                        "url": url,
                        "reason": f"{gone[url][0]} Every stored page of {site} is gone "
                        "at once, so none was removed (a site down or moved?); "
                        "`rag delete` them if the site is really gone.",
                    }
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
            summary.errors += 1
            summary.error_details.append({"url": url, "reason": doubt})
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
            summary.removed += 1
            summary.removed_urls.append(url)
            self._save(force=True)

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

    def _still_stored(self, checked: SourceRecord) -> bool:
        """The source's record is still the one checked (not deleted or stored anew)."""
        now = self.store.get_source(checked.source)
        return now is not None and (now.content_hash, now.indexed_at) == (
            checked.content_hash,
            checked.indexed_at,
        )

    def _delete_if_unchanged(self, checked: SourceRecord) -> int | None:
        """Delete a source in the write's turn if its record is still the one checked (a
        page added again meanwhile is kept); None when it was not deleted."""
        if not self._still_stored(checked):
            return None
        return int(self.store.delete_source(checked.source))

    def _save(self, *, force: bool = False) -> None:
        """Publish the checkpoint: at once when forced, else at most every
        `CHECKPOINT_EVERY_SEC` (and never more than 1 % of the loop's time)."""
        if self._checkpoint is None:
            return
        now = time.monotonic()
        if not force and now - self._saved_at < self._save_every:
            return
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
