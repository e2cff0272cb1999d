"""One crawl of a site: from an index page, recursively within a scope, or from sitemaps.

Depth 1 is the specification's index crawl: the start page's same-site links are
ingested and not followed further. From depth 2 on, the start page is a page of its
own and links are followed breadth-first within the start page's site and directory
(`CrawlScope`), up to a depth and a page limit; `--sitemap` seeds the crawl with the
site's sitemap pages instead. No page is fetched twice (URL keys fold fragments, dot
segments and trailing slashes; redirects and `<link rel=canonical>` are followed by
key), and a crawl stores one text under one URL (a page stored before always gets what
it serves now; a new page whose text a stored page holds is a duplicate only while that
page still holds it, see `_held_elsewhere`). One failing page never fails the crawl.
Politeness (robots.txt, delays, concurrency) is the shared crawler's.
With a `checkpoint` callback the crawl publishes where it stands (`CrawlCheckpoint`) at
most every `CHECKPOINT_EVERY_SEC` and when it stops; `run(start, resume=...)` goes on
from such a checkpoint instead of starting over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.pages import NotModified as PageNotModified
from rag_app.crawl.scope import CrawlScope, OutOfScope, page_key
from rag_app.crawl.sitemap import MAX_LOC_CHARS
from rag_app.crawl.url_match import same_site
from rag_app.crawl.url_safety import parse_url
from rag_app.crawl_checkpoint import CrawlCheckpoint
from rag_app.crawl_copies import StoredCopies
from rag_app.crawl_options import CrawlOptions
from rag_app.errors import CrawlError, RAGError, UrlRefusedError
from rag_app.fetching import Fetched, NotModified, from_page
from rag_app.index.chroma_store import SourceRecord
from rag_app.results import CrawlSummary, IngestResult

if TYPE_CHECKING:
    from rag_app.crawl.crawler import WebCrawler

logger = logging.getLogger(__name__)

MAX_SITEMAP_FILES = 100
"""Sitemap files read per crawl (sitemap indexes included)."""
MAX_SITEMAP_NESTING = 3
MAX_SITEMAP_PAGES = 200_000
"""Listed pages a crawl reads from sitemaps at most (no further sitemap file is read)."""
SITEMAP_SECONDS = 300.0
"""Reading a site's sitemaps stops after this long (a file still being read is given up,
no further one is read): a site naming 100 sitemaps that each answer just within the
request timeout, or redirect five times, would hold the crawl's start for most of an
hour."""
SCHEDULE_SLICE = 1000
"""Listed pages queued between two turns of the event loop."""
OVER_CAP_CHECKED = 5_000
"""Links met after the page limit that are still checked, to count the pages left out."""
MAX_ANSWERS_KEPT = 1_000
MAX_ANSWER_CHARS_KEPT = 20_000_000
"""Waiting pages' answers kept in memory at most (beyond, a new page is stored at once:
two copies of a text until a refresh, rather than a second request that may fail)."""
CHECKPOINT_EVERY_SEC = 1.0
"""How often a crawl publishes its checkpoint at most (a resume repeats at most the pages
finished since: they cost a request each and, unchanged, no embedding)."""
CHECKPOINT_LOOP_SHARE = 100
"""A checkpoint comes at least this many times its own cost apart (1 % of the loop)."""

Committed = Callable[[IngestResult], object]
Ingest = Callable[[Fetched | NotModified, SourceRecord | None, Committed], Awaitable[IngestResult]]
Remove = Callable[[str], Awaitable[int]]
Progress = Callable[[int, int], object]
Checkpoint = Callable[[dict[str, Any]], object]


class SiteCrawl:
    """Breadth-first crawl state: the frontier, the keys seen, the running summary."""

    def __init__(
        self,
        crawler: WebCrawler,
        scope: CrawlScope,
        options: CrawlOptions,
        *,
        known: dict[str, SourceRecord],
        ingest: Ingest,
        remove: Remove,
        progress: Progress | None = None,
        workers: int = 4,
        summary: CrawlSummary | None = None,
        digest: Callable[[CrawledPage], str] | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        self.crawler = crawler
        self.scope = scope
        self.options = options
        self.known = known
        self._ingest = ingest
        self._remove = remove
        self._progress = progress
        self._workers = max(1, workers)
        self.summary = summary if summary is not None else CrawlSummary()
        self._seen: set[str] = set()
        self._left: set[str] = set()
        """Keys of in-scope pages met after the page limit (the first `OVER_CAP_CHECKED`)."""
        self._over_cap_checked = 0
        self._spelling = {page_key(source): source for source in known}
        """A stored page's key → the URL it is stored under, so a re-crawl that meets it
        spelled another way (`/guide/` vs `/guide/index.html`) updates it in place."""
        self._digest = digest or (lambda page: page.content_hash)
        self._hashes: dict[str, str] = {}
        """Text taken in this crawl: digest → its URL (the same text under a second URL is a
        duplicate)."""
        self._copies = StoredCopies(known if digest is not None else {}, scope)
        """Text an earlier crawl stored, and the new pages waiting on it (`_held_elsewhere`)."""
        self._queue: asyncio.Queue[tuple[str, str, int]] = asyncio.Queue()
        self._pending: dict[str, tuple[str, int]] = {}
        """Queued pages not finished yet (key → URL, depth), in queueing order."""
        self._scheduled = 0
        self._done = 0
        self._checkpoint = checkpoint
        self._saved_at = 0.0
        self._save_every = CHECKPOINT_EVERY_SEC
        self._origin = ""
        self._again: set[str] = set()
        """Keys of pages queued again by `_revisit`."""
        self._answers: dict[str, CrawledPage] = {}
        """What a waiting page answered (key → page, `_keep`): stored as it was if its
        stored copy turns out not to hold the text, with no second request (one that
        fails would leave the text stored nowhere). Not in the checkpoint: after a stop
        the page is asked again."""
        self._answer_chars = 0
        self._taken: dict[str, list[str]] = {}
        """Keys a page in flight took besides its own (redirect target, canonical URL)."""

    @property
    def _cap(self) -> int:
        return self.options.max_pages or 1

    # -- seeds -----------------------------------------------------------------------------

    async def run(self, start: str, resume: CrawlCheckpoint | None = None) -> CrawlSummary:
        """Crawl from `start` (already normalised), or go on from `resume`; errors of
        single pages are counted."""
        self._origin = start
        if resume is not None and page_key(resume.origin) == page_key(start):
            self._restore(resume)
        else:
            await self._seed(start)
        self._notify()
        self._save(force=True)
        tasks = [asyncio.create_task(self._worker()) for _ in range(self._workers)]
        stopped = False
        try:
            await self._queue.join()
        except BaseException:
            stopped = True
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if stopped:  # cancelled: publish what is left, for a resume
                self._save(force=True)
        self.summary.error_details.sort(key=lambda d: d["url"])
        return self.summary

    async def _seed(self, start: str) -> None:
        """Queue the first pages: the sitemaps' pages, the index's links, or the start
        page's links (the start page itself is visited here)."""
        if self.options.sitemap:
            for at, url in enumerate(await self._sitemap_pages(start)):
                self._schedule(url, 1)
                if at % SCHEDULE_SLICE == SCHEDULE_SLICE - 1:
                    await asyncio.sleep(0)  # the service answers other calls meanwhile
        elif self.options.max_depth == 1:
            links = await self.crawler.crawl_index(start, "", max_pages=10_000)
            self._seen.add(page_key(links.index_url))
            self.summary.out_of_scope += links.skipped_external
            for url in links.urls:
                self._schedule(url, 1)
        else:
            self._seen.add(page_key(start))
            self._scheduled = 1
            self._notify()
            await self._visit(self._spelling.get(page_key(start), start), 0)
            self._done = 1

    # -- checkpoints -----------------------------------------------------------------------

    def state(self) -> CrawlCheckpoint:
        """Where the crawl stands now. Keys taken by pages still in flight (their redirect
        target, their canonical URL) are left out: those pages are visited again."""
        taken = {key for keys in self._taken.values() for key in keys}
        return CrawlCheckpoint(
            start=self.scope.start,
            origin=self._origin,
            seen=[key for key in self._seen if key not in taken],
            pending=list(self._pending.values()),
            scheduled=self._scheduled,
            done=self._done,
            summary=self.summary.to_dict(),
            waiting=self._copies.waiters(),
            again=[key for key in self._again if key in self._pending],
        )

    def _restore(self, resume: CrawlCheckpoint) -> None:
        """Go on from a checkpoint: the same keys seen, the same pages queued, the same
        counts (pages finished before are not fetched again)."""
        if same_site(resume.start, self.scope.start):
            self.scope = self.scope.rebased(resume.start)
        self._seen.update(resume.seen)
        queued = min(resume.scheduled - resume.done, self._cap)  # never more than it had
        for url, depth in resume.pending:
            key = page_key(url)
            if key in self._pending or self._out_of_scope(url):
                continue  # a checkpoint never takes a crawl out of its scope
            if len(self._pending) >= queued:
                break
            self._seen.add(key)
            self._pending[key] = (url, depth)
            self._queue.put_nowait((key, url, depth))
        self._scheduled, self._done = resume.scheduled, resume.done
        saved = CrawlSummary.from_dict(resume.summary)
        for name, value in dataclasses.asdict(saved).items():
            setattr(self.summary, name, value)
        self._again.update(key for key in resume.again if key in self._pending)
        # a checkpoint never widens the crawl: each waiter was a page visited (done), in
        # scope (or the start page), under the page limit
        room = min(self._done, self._cap)
        for waiter in resume.waiting[:room]:
            holder, url, depth, _digest = waiter
            if not (self.scope.admits(url) or page_key(url) == page_key(self._origin)):
                continue
            if page_key(holder) in self._pending and self._copies.still_holding(waiter):
                self._copies.wait(waiter)
            else:  # its stored page answered (and was stored anew) before the stop
                self._revisit(url, depth)
        logger.info(
            "Crawl of %s resumed: %d pages done, %d queued",
            resume.start, resume.done, len(self._pending),
        )  # fmt: skip

    def _save(self, *, force: bool = False) -> None:
        """Publish the checkpoint (at most every `CHECKPOINT_EVERY_SEC` unless forced)."""
        if self._checkpoint is None:
            return
        now = time.monotonic()
        if not force and now - self._saved_at < self._save_every:
            return
        self._saved_at = now
        try:
            self._checkpoint(self.state().to_dict())
        except Exception:  # a crawl goes on without its checkpoint
            logger.warning("Could not record the crawl's checkpoint", exc_info=True)
        # it runs on the owner's event loop: a big crawl's checkpoint (~14 ms at 10,000
        # pages) is taken less often, so it never costs more than 1 % of the loop's time
        took = time.monotonic() - now
        self._save_every = max(CHECKPOINT_EVERY_SEC, CHECKPOINT_LOOP_SHARE * took)

    async def _sitemap_pages(self, start: str) -> list[str]:
        """In-scope page URLs of the site's sitemaps (indexes followed, gzip inflated)."""
        named = list(dict.fromkeys(await self.crawler.sitemap_urls(start)))
        pending = [(url, 0) for url in named[:MAX_SITEMAP_FILES]]
        queued = {url for url, _ in pending}  # read or waiting: each file queued once
        not_queued = len(named) - len(pending)  # entries past what can be read
        too_long = 0  # listed URLs no crawl takes (`MAX_LOC_CHARS`)
        pages: list[str] = []
        failures: list[str] = []
        parsed = 0
        began = time.monotonic()
        while pending:  # at most MAX_SITEMAP_FILES, each once (`queued`)
            url, level = pending.pop(0)
            left = SITEMAP_SECONDS - (time.monotonic() - began)
            if left <= 0:
                skipped = len(pending) + 1
                self._fail(url, f"{skipped} sitemap file(s) not read: {self._sitemaps_took()}")
                break
            try:
                async with asyncio.timeout(left):  # a file still read then is given up
                    entries = await self.crawler.fetch_sitemap(url)
            except TimeoutError:
                failures.append(f"{url} not read: {self._sitemaps_took()}")
                self._fail(url, failures[-1])
                continue
            except RAGError as err:
                failures.append(str(err))
                self._fail(url, str(err))
                continue
            parsed += 1
            pages.extend(entries.pages)
            self.summary.over_cap += entries.truncated
            too_long += entries.too_long
            if level < MAX_SITEMAP_NESTING:  # only the site's own: a sitemap sends nowhere
                for nested in entries.sitemaps:
                    if nested in queued or not same_site(nested, start):
                        continue
                    if len(queued) >= MAX_SITEMAP_FILES:  # never read: not kept either
                        not_queued += 1  # (50,000 names a file, ~1 KB each, 100 files)
                        continue
                    queued.add(nested)
                    pending.append((nested, level + 1))
            if len(pages) >= MAX_SITEMAP_PAGES:
                break
        if not_queued:
            self._fail(
                start,
                f"{not_queued:,} more sitemap entries not followed: a crawl reads at most "
                f"{MAX_SITEMAP_FILES} sitemap files",
            )
        if too_long:
            self._fail(
                start,
                f"{too_long:,} listed URL(s) longer than {MAX_LOC_CHARS:,} characters not crawled",
            )
        if not pages and not failures:
            raise CrawlError(
                f"The sitemaps of {start} list no page that can be crawled ({parsed} sitemap "
                "file(s) read"
                + (f", {too_long:,} URL(s) too long" if too_long else "")
                + (f", {not_queued:,} more entries not followed" if not_queued else "")
                + ")."
            )
        if not pages and failures:
            if parsed:  # an index was read, the files it names were not
                raise CrawlError(
                    f"No page was found in the sitemaps of {start} "
                    f"({parsed} read, {len(failures)} not): {failures[0]}"
                )
            raise CrawlError(f"No sitemap could be read for {start}: {failures[0]}")
        return pages

    @staticmethod
    def _sitemaps_took() -> str:
        return f"reading the site's sitemaps took over {SITEMAP_SECONDS:.0f} s"

    # -- frontier --------------------------------------------------------------------------

    def _schedule(self, raw: str, depth: int) -> None:
        """Queue a page once, if it is in scope and under the page limit (once the limit
        is reached, further links and listed pages are only counted, and past the first
        `OVER_CAP_CHECKED` of them not even checked: a page of 100,000 links or a sitemap
        of millions costs nothing more)."""
        if self._scheduled >= self._cap:
            self._count_left(raw, depth)
            return
        url = self._in_scope(raw, depth, count=True)
        if url is None:
            return
        key = page_key(url)
        if key in self._seen:
            return
        self._seen.add(key)
        self._scheduled += 1
        queued = self._spelling.get(key, url)
        self._pending[key] = (queued, depth)
        self._queue.put_nowait((key, queued, depth))

    def _count_left(self, raw: str, depth: int) -> None:
        """Count a page the limit leaves out: once per page, in scope only, among the first
        `OVER_CAP_CHECKED` links met after the limit; past them each link counts one,
        unchecked (it costs nothing more)."""
        if self._over_cap_checked >= OVER_CAP_CHECKED:
            self.summary.over_cap += 1
            return
        self._over_cap_checked += 1
        url = self._in_scope(raw, depth, count=False)
        if url is None:
            return
        key = page_key(url)
        if key not in self._seen and key not in self._left:
            self._left.add(key)
            self.summary.over_cap += 1

    def _in_scope(self, raw: str, depth: int, *, count: bool) -> str | None:
        """A link's normalised URL when a crawl may take it (the start page and listed
        pages of a depth-1 crawl are not scope-checked); with `count`, why not is counted."""
        try:
            url = parse_url(raw, self.crawler.policy).url
        except UrlRefusedError:
            self.summary.out_of_scope += count
            return None
        if depth > 0 or self.options.sitemap:
            outside = self._out_of_scope(url) if count else self.scope.check(url) is not None
            if outside:
                return None
        return url

    def _out_of_scope(self, url: str) -> bool:
        reason = self.scope.check(url)
        if reason is None:
            return False
        if reason in (OutOfScope.PATTERN, OutOfScope.EXCLUDED):
            self.summary.filtered += 1
        else:
            self.summary.out_of_scope += 1
        return True

    async def _worker(self) -> None:
        while True:
            key, url, depth = await self._queue.get()
            finished = False
            try:
                try:
                    await self._visit(url, depth)
                except Exception as err:  # one page must never fail the crawl
                    logger.exception("Unexpected error crawling %s", url)
                    self._fail(url, f"Unexpected error ({type(err).__name__}); see the log.")
                    if url in self.known:  # what it holds now is unknown: its waiters go on
                        self._settle(url, False)
                finished = True  # not when cancelled: the page stays queued for a resume
            except Exception:  # the bookkeeping itself failed: the worker goes on
                logger.exception("Crawl bookkeeping failed for %s", url)
                finished = True
            finally:
                if finished:
                    self._pending.pop(key, None)
                    self._copies.finished(key)
                    self._taken.pop(key, None)
                    self._done += 1
                self._queue.task_done()
            self._notify()
            self._save()

    async def _visit(self, url: str, depth: int) -> None:
        old = self.known.get(url)
        follow = depth < self.options.max_depth
        # A page whose links are needed is fetched whole (its content hash still spares
        # the embedding when unchanged); a leaf is asked conditionally.
        etag = old.etag if old is not None and not follow else None
        modified = old.last_modified if old is not None and not follow else None
        again = page_key(url) in self._again  # links followed at its first visit
        answer = self._take_answer(url)
        try:
            outcome = answer or await self.crawler.crawl_page(url, etag or None, modified or None)
        except RAGError as err:
            if depth == 0:
                raise  # the start page itself: the crawl cannot begin
            await self._fetch_failed(url, old, err)
            return
        if old is not None:  # whether it still holds its text decides who waits on it
            self._settle(url, self._still_holds(outcome, old))
        if isinstance(outcome, PageNotModified):
            fetched: Fetched | NotModified = NotModified(url)
        else:
            if depth == 0:
                self.scope = self.scope.rebased(outcome.final_url or url)
            elif outcome.final_url not in ("", url) and self._out_of_scope(outcome.final_url):
                return  # redirected out of the scope (or to an excluded page): not stored
            page = self._deduplicated(outcome, page_key(url))
            if page is None and old is not None and old.content_hash != self._digest(outcome):
                # stored before with other text: it holds what the site serves now, even
                # if another page has that text too (as a refresh stores it); a text stored
                # elsewhere earlier may have changed there since, so nothing is removed
                page = outcome
            if follow and not again and "nofollow" not in outcome.robots:  # a duplicate's too
                for link in outcome.links:
                    self._schedule(link, depth + 1)
            if page is not None and "noindex" not in page.robots:
                old = self.known.get(page.url, old)
                if old is None and self._held_elsewhere(page, url, depth, outcome):
                    page = None
            if page is None:
                self.summary.duplicates += 1
                return
            if "noindex" in page.robots:
                self.summary.filtered += 1
                return
            fetched = from_page(page)
        try:
            await self._ingest(fetched, old, self._committed)
        except RAGError as err:
            self._fail(url, str(err))

    def _still_holds(self, outcome: CrawledPage | PageNotModified, old: SourceRecord) -> bool:
        """A stored page answered with its stored text, to be stored again (not `noindex`:
        a refresh would remove it)."""
        if isinstance(outcome, PageNotModified):
            return True
        return self._digest(outcome) == old.content_hash and "noindex" not in outcome.robots

    def _committed(self, result: IngestResult) -> None:
        """Count a stored page (called when its write is durable, even after a cancel)."""
        self.summary.pages_crawled += 1
        self.summary.chunks_stored += result.chunks
        self.summary.unchanged += int(result.unchanged)

    def _held_elsewhere(self, page: CrawledPage, url: str, depth: int, answer: CrawledPage) -> bool:
        """Whether a new page's text is one an earlier crawl stored under another URL that
        still holds it. Until this crawl knows, it is taken for one: that URL is asked
        (queued like a link, within the page limit) and this page visited again if it
        turns out not to hold it (gone, changed, `noindex`, failing: a renamed page, text
        moved to a new page). When this crawl cannot learn it (no room under the limit,
        the URL out of scope, or met without being visited: taken by a redirect or
        canonical URL, the index of a depth-1 crawl, another stored spelling of a page),
        the page is stored: two copies of a text are better than none once a refresh
        removes the old URL."""
        digest = self._digest(page)
        holders = self._copies.holders(digest, {page_key(page.url), page_key(url)})
        if not holders:
            return False
        if any(self._copies.holds(there) for there in holders):
            return True
        there = holders[0]
        key = page_key(there)
        if self._spelling.get(key, there) != there:
            return False  # the page is asked under another stored spelling
        if key not in self._seen and self._scheduled < self._cap and self.scope.admits(there):
            self._schedule(there, max(depth, 1))
        if key not in self._pending or not self._keep_answer(url, answer):
            return False  # no room to keep its answer: stored now rather than asked again
        self._copies.wait((there, url, max(depth, 1), digest))
        return True

    def _keep_answer(self, url: str, answer: CrawledPage) -> bool:
        """Keep a waiting page's answer (its links, followed already, left out), within
        `MAX_ANSWERS_KEPT` and `MAX_ANSWER_CHARS_KEPT`."""
        size = _answer_size(answer)
        if (
            len(self._answers) >= MAX_ANSWERS_KEPT
            or self._answer_chars + size > MAX_ANSWER_CHARS_KEPT
        ):
            return False
        self._answers[page_key(url)] = dataclasses.replace(answer, links=())
        self._answer_chars += size
        return True

    def _take_answer(self, url: str) -> CrawledPage | None:
        answer = self._answers.pop(page_key(url), None)
        if answer is not None:
            self._answer_chars -= _answer_size(answer)
        return answer

    def _settle(self, url: str, holds: bool) -> None:
        """Record whether a stored page answered with its stored text; the new pages that
        waited on it are visited again unless it does (then it owns the text here)."""
        holding, again = self._copies.settle(url, holds)
        for page in holding:  # duplicates for good: their answers are not needed
            self._take_answer(page)
        record = self.known.get(url)
        if holds and record is not None:
            owner = self._hashes.get(record.content_hash)
            if owner is None or owner not in self.known:  # not a page stored before
                self._hashes[record.content_hash] = url
        for page, depth in again:
            self._revisit(page, depth)

    def _revisit(self, url: str, depth: int) -> None:
        """Queue again a page taken for a duplicate of a stored page's text that the stored
        page turned out not to hold: stored from its kept answer (`_keep_answer`), or,
        after a stop, asked again; at most once per stored copy."""
        key = page_key(url)
        if key in self._pending:
            return
        self._again.add(key)
        self._done = max(0, self._done - 1)
        self._pending[key] = (url, depth)
        self._queue.put_nowait((key, url, depth))
        self.summary.duplicates = max(0, self.summary.duplicates - 1)

    def _deduplicated(self, page: CrawledPage, own: str) -> CrawledPage | None:
        """The page to store (under its canonical URL when the site names one in scope),
        or None when the same page or the same text was already taken in this crawl. A
        page visited again (`_revisit`) keeps the keys its first visit took."""
        again = own in self._again
        if page.final_url and page.final_url != page.url:
            final_key = page_key(page.final_url)
            if final_key != page_key(page.url):
                if final_key in self._seen and not again:
                    return None
                self._seen.add(final_key)
                self._taken.setdefault(own, []).append(final_key)
        if page.canonical:
            try:
                canonical = parse_url(page.canonical, self.crawler.policy).url
            except UrlRefusedError:
                canonical = ""
            key = page_key(canonical) if canonical else ""
            if key and key != page_key(page.url) and self.scope.admits(canonical):
                if key in self._seen and not again:
                    return None
                self._seen.add(key)
                self._taken.setdefault(own, []).append(key)
                page = dataclasses.replace(
                    page, url=self._spelling.get(key, canonical), fetched_from=page.url
                )
        digest = self._digest(page)
        owner = self._hashes.setdefault(digest, page.url)
        if page_key(owner) != page_key(page.url):
            return None
        return page

    async def _fetch_failed(self, url: str, old: SourceRecord | None, err: RAGError) -> None:
        detail = {"url": url, "reason": str(err)}
        if old is not None:  # whatever it holds, this crawl cannot tell: not the text
            self._settle(url, False)
        if getattr(err, "status", None) in (404, 410) and old is not None:
            detail["gone"] = "true"
            if self.options.prune:
                await self._remove(url)
                detail["pruned"] = "true"
                self.summary.removed += 1
        self.summary.errors += 1
        self.summary.error_details.append(detail)

    def _fail(self, url: str, reason: str) -> None:
        self.summary.errors += 1
        self.summary.error_details.append({"url": url, "reason": reason})

    def _notify(self) -> None:
        if self._progress is None:
            return
        try:
            self._progress(self._done, self._scheduled)
        except Exception:
            logger.warning("Progress callback failed", exc_info=True)


__all__ = ["SiteCrawl"]


def _answer_size(answer: CrawledPage) -> int:
    """What a kept answer counts against `MAX_ANSWER_CHARS_KEPT`."""
    return len(answer.text) + len(answer.title)
