"""A re-crawl that meets, under a new URL, text an earlier crawl stored under another:
a renamed page, text moved to a new page, a second copy of a live page. The new page is
a duplicate only while the stored URL still holds the text, so a refresh removing the old
URL never leaves the text stored nowhere. Edges: the old URL asking not to be indexed,
taken by a canonical URL, answered before a resume, out of a rebased scope or past the
page limit; tampered checkpoints (never widening a crawl); several workers, sitemaps, a
renamed start page, a 301. Against a real programmable site and a real knowledge base."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from rag_app import site_crawl
from rag_app.config import RAGSettings
from rag_app.crawl_checkpoint import CrawlCheckpoint
from rag_app.crawl_options import CrawlOptions
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.programmable_site import Site, html, running
from tests.refresh_site import DEEP, loopback_settings, opened, stored

OLD = "/docs/a.html"
NEW = "/docs/b.html"
TEXT = html("Alpha", "The alpha page alphaword.")


@pytest.fixture
async def kb(
    settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    crawl = loopback_settings(settings, rag_crawl_concurrency=1)  # pages in link order
    async with opened(crawl, counting_embed) as base:
        yield base


def first_site() -> Site:
    return Site(
        pages={
            "/docs/index.html": html("Home", "Welcome.", ("a.html", "c.html")),
            OLD: TEXT,
            "/docs/c.html": html("C", "The gamma page gammaword."),
        }
    )


async def holding(kb: KnowledgeBase, word: str) -> list[str]:
    """The stored sources whose text holds `word`."""
    out = []
    for source in await stored(kb):
        if word in (await kb.read_source(source, max_chars=10_000)).text:
            out.append(source)
    return sorted(out)


async def first_crawl(kb: KnowledgeBase, site: Site) -> str:
    """The crawl that stores the site as it was; its start URL."""
    start = site.url("/docs/index.html")
    await kb.ingest_from_index(start, options=DEEP)
    return start


def asked(site: Site, path: str) -> int:
    return sum(1 for p, _ in site.statuses if p == path)


class Hold:
    """A page that hangs at its `at`-th request until released, then answers `TEXT`
    (or 404 with `gone`): a crawl stopped at a chosen moment."""

    def __init__(self, at: int = 1, *, gone: bool = False) -> None:
        self.at, self.gone, self.served = at, gone, 0
        self.reached, self.released = asyncio.Event(), asyncio.Event()

    async def __call__(self, _request: Any) -> web.Response:
        self.served += 1
        if self.served == self.at:
            self.reached.set()
            await self.released.wait()
        if self.gone:
            raise web.HTTPNotFound()
        return web.Response(text=TEXT, content_type="text/html")


def store_held(kb: KnowledgeBase, source: str) -> Hold:
    """Hold the store of `source` (a page stored from its kept answer makes no request);
    `del kb._apply` restores it."""
    hold, apply = Hold(), kb._apply

    async def held(outcome: Any, old: Any, *args: Any, **kwargs: Any) -> Any:
        if outcome.source == source:
            hold.reached.set()
            await hold.released.wait()
        return await apply(outcome, old, *args, **kwargs)

    kb._apply = held  # type: ignore[method-assign]
    return hold


async def stopped(
    kb: KnowledgeBase, start: str, options: CrawlOptions, hold: Hold
) -> list[dict[str, Any]]:
    """Run a crawl, cancel it once `hold` is reached, release it; the checkpoints it
    published, in order (the last one journalled is what a kill would leave)."""
    states: list[dict[str, Any]] = []
    task = asyncio.create_task(
        kb.ingest_from_index(start, options=options, checkpoint=states.append)
    )
    await asyncio.wait_for(hold.reached.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    hold.released.set()
    return states


@pytest.mark.parametrize("links", [("b.html", "c.html"), ("b.html", "a.html", "c.html")])
async def test_a_renamed_page_is_stored_under_its_new_url_and_survives_the_refresh(
    kb: KnowledgeBase, links: tuple[str, ...]
) -> None:
    """The old URL gone (unlinked, or still linked after the new one): the new page is
    stored, and the refresh that removes the old URL leaves the text stored (it was
    skipped as a duplicate of the old URL's record, then stored nowhere)."""
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", links)
        site.pages[NEW] = site.pages.pop(OLD)
        site.statuses.clear()
        second = await kb.ingest_from_index(start, options=DEEP)
        assert site.url(NEW) in await holding(kb, "alphaword"), second
        assert second.duplicates == 0 and asked(site, OLD) == 1, (second, site.statuses)
        assert second.pages_crawled == 3, second  # index, c and b; each counted once
        refreshed = await kb.refresh()
    assert refreshed.removed == 1, refreshed
    assert await holding(kb, "alphaword") == [site.url(NEW)]


async def test_an_old_url_gone_before_the_new_page_is_met_costs_no_second_fetch(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("a.html", "b.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        site.statuses.clear()
        second = await kb.ingest_from_index(start, options=DEEP)
    assert site.url(NEW) in await holding(kb, "alphaword"), second
    assert asked(site, NEW) == 1 and asked(site, OLD) == 1, site.statuses


async def test_text_moved_to_a_new_page_is_stored_there(kb: KnowledgeBase) -> None:
    """The old page now says something else and the new one holds its old text: both
    are stored with what they serve."""
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "a.html"))
        site.pages[NEW] = TEXT
        site.pages[OLD] = html("Alpha", "Rewritten page deltaword.")
        second = await kb.ingest_from_index(start, options=DEEP)
    assert await holding(kb, "alphaword") == [site.url(NEW)], second
    assert await holding(kb, "deltaword") == [site.url(OLD)], second
    assert second.duplicates == 0, second


@pytest.mark.parametrize("linked", [False, True])
async def test_a_copy_of_a_page_that_still_holds_its_text_stays_a_duplicate(
    kb: KnowledgeBase, counting_embed: CountingEmbedding, linked: bool
) -> None:
    """One URL per text: the stored page is asked once and keeps the text; the copy is
    counted once as a duplicate and costs no embedding."""
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        links = ("b.html", "a.html", "c.html") if linked else ("b.html", "c.html")
        site.pages["/docs/index.html"] = html("Home", "Welcome.", links)
        site.pages[NEW] = TEXT
        site.statuses.clear()
        embedded = counting_embed.texts
        second = await kb.ingest_from_index(start, options=DEEP)
    assert await holding(kb, "alphaword") == [site.url(OLD)], second
    assert second.duplicates == 1 and second.unchanged == 3, second
    assert asked(site, OLD) == 1 and asked(site, NEW) == 1, site.statuses
    assert counting_embed.texts == embedded  # the index's text is the same (links aside)


async def test_a_crawl_stopped_while_the_old_url_is_asked_finishes_the_rename_on_resume(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages waiting on a stored page's answer are in the checkpoint: cancelled while
    the old URL is being asked, the resumed crawl stores the new page."""
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    monkeypatch.setattr(site_crawl, "CHECKPOINT_LOOP_SHARE", 0)  # a checkpoint per page
    site = first_site()
    hold = Hold(gone=True)
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        site.override[OLD] = hold
        states = await stopped(kb, start, DEEP, hold)
        state = CrawlCheckpoint.parse(states[-1])
        assert state is not None and state.waiting, states[-1]
        assert [url for _, url, *_ in state.waiting] == [site.url(NEW)]
        del site.override[OLD]  # now a plain 404
        resumed = await kb.ingest_from_index(start, options=DEEP, resume=state)
    assert await holding(kb, "alphaword") == sorted([site.url(NEW), site.url(OLD)]), resumed
    assert resumed.duplicates == 0, resumed


def test_a_checkpoint_keeps_its_waiting_pages_and_refuses_bad_ones() -> None:
    base = {"start": "http://h/d/", "origin": "http://h/d/", "seen": [], "pending": []}
    base |= {"scheduled": 0, "done": 0}
    waiter = ("http://h/d/a.html", "http://h/d/b.html", 2, "d1g")
    parsed = CrawlCheckpoint.parse({**base, "waiting": [list(waiter)], "again": []})
    assert parsed is not None and parsed.waiting == [waiter]
    assert CrawlCheckpoint.parse(parsed.to_dict()) == parsed
    for bad in (
        [["http://h/a", "file:///etc/passwd", 1, "d"]],
        [["http://h/a", "http://h/b", 0, "d"]],
        [["http://h/a", "http://h/b", 1, ""]],
        [["http://h/a", "http://h/b", 1]],  # which text it waited for is part of it
        "x",
    ):
        assert CrawlCheckpoint.parse({**base, "waiting": bad}) is None
    assert CrawlCheckpoint.parse({**base, "again": ["javascript:x"]}) is None


NOINDEX = '<meta name="robots" content="noindex">'


async def test_an_old_url_now_noindex_does_not_hold_the_text(kb: KnowledgeBase) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = TEXT
        site.pages[OLD] = html("Alpha", "The alpha page alphaword.", head=NOINDEX)
        second = await kb.ingest_from_index(start, options=DEEP)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") == [site.url(NEW)], (second, refreshed)


async def test_an_old_url_taken_by_a_canonical_url_does_not_keep_the_new_page_waiting(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    rewritten = html(
        "Alpha", "Rewritten page deltaword.", head='<link rel="canonical" href="a.html">'
    )
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("a", "b.html", "c.html"))
        site.pages["/docs/a"] = rewritten
        site.pages[OLD] = rewritten
        site.pages[NEW] = TEXT
        second = await kb.ingest_from_index(start, options=DEEP)
    assert await holding(kb, "deltaword") == [site.url(OLD)], second
    assert await holding(kb, "alphaword") == [site.url(NEW)], second


async def test_a_resume_after_the_old_url_answered_404_stores_the_new_page(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    monkeypatch.setattr(site_crawl, "CHECKPOINT_LOOP_SHARE", 0)  # a checkpoint per page
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        del site.pages[OLD]  # 404
        site.pages[NEW] = TEXT
        hold = store_held(kb, site.url(NEW))  # its store from the kept answer
        states = await stopped(kb, start, DEEP, hold)
        del kb._apply
        state = CrawlCheckpoint.parse(states[-1])
        assert state is not None and [u for u, _ in state.pending] == [site.url(NEW)], states[-1]
        resumed = await kb.ingest_from_index(start, options=DEEP, resume=state)
        after = await holding(kb, "alphaword")
        refreshed = await kb.refresh()
    assert site.url(NEW) in after, resumed
    assert await holding(kb, "alphaword") == [site.url(NEW)], refreshed


async def test_a_depth_1_crawl_stores_text_moved_off_its_index_page(
    kb: KnowledgeBase,
) -> None:
    old_index = html("Home", "Welcome homeword.", ("a.html", "c.html"))
    site = first_site()
    site.pages["/docs/index.html"] = old_index
    async with running(site):
        start = await first_crawl(kb, site)
        assert await holding(kb, "homeword") == [start]
        site.pages["/docs/index.html"] = html("Home", "New landing.", ("intro.html", "c.html"))
        site.pages["/docs/intro.html"] = old_index
        second = await kb.ingest_from_index(start)  # the default: depth 1
        refreshed = await kb.refresh()
    assert await holding(kb, "homeword") == [site.url("/docs/intro.html")], (second, refreshed)


@pytest.fixture
async def kb_follow(kb: KnowledgeBase) -> KnowledgeBase:
    kb.settings = kb.settings.model_copy(update={"rag_follow_redirects": True})
    kb._crawler = None  # the crawler reads the setting
    return kb


async def test_an_old_url_outside_the_rebased_scope_does_not_hold_the_text(
    kb_follow: KnowledgeBase,
) -> None:
    kb = kb_follow
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        del site.pages[OLD]
        del site.pages["/docs/index.html"]

        async def moved(_request: Any) -> Any:
            raise web.HTTPMovedPermanently(location="/docs/v2/index.html")

        site.override["/docs/index.html"] = moved
        site.pages["/docs/v2/index.html"] = html("Home", "Welcome.", ("a.html",))
        site.pages["/docs/v2/a.html"] = TEXT
        second = await kb.ingest_from_index(start, options=DEEP)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") == [site.url("/docs/v2/a.html")], (second, refreshed)


@pytest.mark.parametrize("follow", [False, True])
async def test_a_301_rename_keeps_the_text_stored(kb: KnowledgeBase, follow: bool) -> None:
    if follow:
        kb.settings = kb.settings.model_copy(update={"rag_follow_redirects": True})
        kb._crawler = None
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)

        async def moved(_request: Any) -> Any:
            raise web.HTTPMovedPermanently(location=NEW)

        site.override[OLD] = moved
        second = await kb.ingest_from_index(start, options=DEEP)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword"), (second, refreshed)  # under one URL or the other


async def test_past_the_page_limit_the_new_page_is_stored_and_survives_the_refresh(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        capped = dataclasses.replace(DEEP, max_pages=3)
        second = await kb.ingest_from_index(start, options=capped)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") != [], (refreshed, second, refreshed)


async def test_a_renamed_start_page_is_stored_and_counted_once(kb: KnowledgeBase) -> None:
    site = first_site()
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        site.pages["/docs/start.html"] = site.pages.pop("/docs/index.html")
        progress: list[tuple[int, int]] = []
        second = await kb.ingest_from_index(
            site.url("/docs/start.html"),
            options=DEEP,
            progress=lambda d, s: progress.append((d, s)),
        )
    assert site.url("/docs/start.html") in await holding(kb, "Welcome"), second
    assert second.duplicates == 0 and second.pages_crawled == 3, second
    assert progress[-1][0] == progress[-1][1] and all(d <= s for d, s in progress), progress


@pytest.mark.parametrize("workers", [2, 4])
async def test_renames_and_live_copies_with_several_workers(
    kb: KnowledgeBase, workers: int
) -> None:
    kb.settings = kb.settings.model_copy(update={"rag_crawl_concurrency": workers})
    site = first_site()
    for i in range(6):
        site.pages[f"/docs/p{i}.html"] = html(f"P{i}", f"Page {i} word{i}.")
    links = ("a.html", "c.html", *(f"p{i}.html" for i in range(6)))
    site.pages["/docs/index.html"] = html("Home", "Welcome.", links)
    async with running(site):
        start = await first_crawl(kb, site)
        for i in range(3):  # three renames, three copies of live pages
            site.pages[f"/docs/n{i}.html"] = site.pages.pop(f"/docs/p{i}.html")
            site.pages[f"/docs/k{i}.html"] = site.pages[f"/docs/p{i + 3}.html"]
        renamed = (f"n{i}.html" for i in range(3))
        copies = (f"k{i}.html" for i in range(3))
        links = ("b.html", "c.html", *renamed, *copies, *(f"p{i}.html" for i in range(3, 6)))
        site.pages["/docs/index.html"] = html("Home", "Welcome.", links)
        site.pages[NEW] = site.pages.pop(OLD)
        progress: list[tuple[int, int]] = []
        second = await kb.ingest_from_index(
            start, options=DEEP, progress=lambda d, s: progress.append((d, s))
        )
        refreshed = await kb.refresh()
    for i in range(3):
        assert await holding(kb, f"word{i}") == [site.url(f"/docs/n{i}.html")], (second, refreshed)
        assert await holding(kb, f"word{i + 3}") == [site.url(f"/docs/p{i + 3}.html")]
    assert second.duplicates == 3, second
    assert progress[-1][0] == progress[-1][1] and all(d <= s for d, s in progress), progress


async def test_a_sitemap_crawl_stores_a_renamed_page(kb: KnowledgeBase) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages[NEW] = site.pages.pop(OLD)

        def sitemap(_request: Any) -> Any:
            urls = "".join(f"<url><loc>{site.url(p)}</loc></url>" for p in (NEW, "/docs/c.html"))
            body = f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
            return web.Response(text=body, content_type="application/xml")

        site.override["/sitemap.xml"] = sitemap
        opts = dataclasses.replace(DEEP, sitemap=True)
        second = await kb.ingest_from_index(start, options=opts)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") == [site.url(NEW)], (second, refreshed)
    assert second.duplicates == 0, second


async def test_a_renamed_page_stays_within_the_page_limit(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html",))
        site.pages[NEW] = site.pages.pop(OLD)
        site.statuses.clear()
        progress: list[tuple[int, int]] = []
        second = await kb.ingest_from_index(
            start,
            options=dataclasses.replace(DEEP, max_pages=3),
            progress=lambda d, s: progress.append((d, s)),
        )
    requests = [p for p, _ in site.statuses if p != "/robots.txt"]
    assert sorted(requests) == sorted(["/docs/index.html", NEW, OLD]), (requests, second)
    assert progress[-1] == (3, 3) and all(d <= s for d, s in progress), progress
    assert await holding(kb, "alphaword") == sorted([site.url(NEW), site.url(OLD)])


@pytest.mark.parametrize("change", ["rewritten", "gone_pruned"])
async def test_a_stop_after_the_old_url_answered_still_stores_the_waiting_page(
    kb: KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
    change: str,
) -> None:
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    monkeypatch.setattr(site_crawl, "CHECKPOINT_LOOP_SHARE", 0)  # a checkpoint per page
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html", "a.html"))
        site.pages[NEW] = TEXT
        hold = store_held(kb, site.url(NEW))  # its store from the kept answer
        if change == "rewritten":  # text moved: OLD says something else now
            site.pages[OLD] = html("Alpha", "Rewritten page deltaword.")
        else:
            del site.pages[OLD]  # 404
        opts = dataclasses.replace(DEEP, prune=change == "gone_pruned")
        states = await stopped(kb, start, opts, hold)
        del kb._apply
        # a kill: the last checkpoint journalled is the last one with NEW waiting
        last = [s for s in states if s.get("waiting")][-1]
        state = CrawlCheckpoint.parse(last)
        assert state is not None and [u for _, u, *_ in state.waiting] == [site.url(NEW)]
        resumed = await kb.ingest_from_index(start, options=opts, resume=state)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") == [site.url(NEW)], (resumed, refreshed)


async def test_a_page_waiting_on_a_live_copy_costs_no_link_the_limit_has_room_for(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = TEXT  # a copy; OLD still holds it
        site.pages["/docs/c.html"] = html("C", "The gamma page gammaword.", ("d.html", "e.html"))
        site.pages["/docs/d.html"] = html("D", "The delta page deltaword.")
        site.pages["/docs/e.html"] = html("E", "The epsilon page epsilonword.")
        progress: list[tuple[int, int]] = []
        second = await kb.ingest_from_index(
            start,
            options=dataclasses.replace(DEEP, max_pages=5),
            progress=lambda d, s: progress.append((d, s)),
        )
    assert progress[-1][1] == 5 or second.over_cap == 0, (progress[-1], second)
    assert asked(site, "/docs/d.html") == 1, (site.statuses, second)


async def test_another_stored_spelling_of_a_page_does_not_hold_a_moved_text(
    kb: KnowledgeBase,
) -> None:
    old_landing = html("Home", "Old landing homeword.", ("c.html",))
    site = first_site()
    site.pages["/docs/"] = old_landing
    async with running(site):
        await kb.ingest_page(site.url("/docs/"))
        new_landing = html("Home", "New landing.", ("intro.html", "c.html"))
        site.pages["/docs/"] = new_landing
        site.pages["/docs/index.html"] = new_landing
        await kb.ingest_page(site.url("/docs/index.html"))
        site.pages["/docs/intro.html"] = old_landing
        second = await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        refreshed = await kb.refresh()
    assert await holding(kb, "homeword") == [site.url("/docs/intro.html")], (second, refreshed)


async def test_a_start_page_outside_its_rebased_scope_is_visited_again(
    kb: KnowledgeBase,
) -> None:
    kb.settings = kb.settings.model_copy(update={"rag_follow_redirects": True})
    kb._crawler = None
    site = first_site()
    site.pages["/docs/index.html"] = html("Home", "Welcome.", ("v2/intro.html", "c.html"))
    site.pages["/docs/v2/intro.html"] = TEXT
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert await holding(kb, "alphaword") == [site.url("/docs/v2/intro.html")]
        del site.pages["/docs/v2/intro.html"]

        async def moved(_request: Any) -> Any:
            raise web.HTTPMovedPermanently(location="/docs/v2/index.html")

        site.override["/docs/home.html"] = moved
        site.pages["/docs/v2/index.html"] = TEXT
        second = await kb.ingest_from_index(site.url("/docs/home.html"), options=DEEP)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") != [], (
        refreshed,
        second.error_details,
        second.duplicates,
        site.statuses[-4:],
    )


async def test_a_resume_keeps_a_waiting_start_page_outside_its_rebased_scope(
    kb: KnowledgeBase,
) -> None:
    kb.settings = kb.settings.model_copy(update={"rag_follow_redirects": True})
    kb._crawler = None  # the crawler reads the setting
    site = first_site()
    site.pages["/docs/index.html"] = html("Home", "Welcome.", ("v2/intro.html", "c.html"))
    site.pages["/docs/v2/intro.html"] = TEXT
    hold = Hold(gone=True)

    async def moved(_request: Any) -> Any:
        raise web.HTTPMovedPermanently(location="/docs/v2/index.html")

    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        del site.pages["/docs/v2/intro.html"]
        site.override["/docs/v2/intro.html"] = hold
        site.override["/docs/home.html"] = moved
        site.pages["/docs/v2/index.html"] = TEXT
        start = site.url("/docs/home.html")
        states = await stopped(kb, start, DEEP, hold)
        state = CrawlCheckpoint.parse(states[-1])
        assert state is not None and [u for _, u, *_ in state.waiting] == [start]
        del site.override["/docs/v2/intro.html"]  # a plain 404
        resumed = await kb.ingest_from_index(start, options=DEEP, resume=state)
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") != [], (resumed, refreshed)


async def test_an_old_url_failing_during_the_crawl_does_not_hold_the_text(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        site.override[OLD] = lambda _r: web.Response(status=403, text="forbidden")
        second = await kb.ingest_from_index(start, options=DEEP)
        del site.override[OLD]  # now 404
        refreshed = await kb.refresh()
    assert await holding(kb, "alphaword") == [site.url(NEW)], (second, refreshed)


async def test_a_page_visited_again_at_a_resume_is_counted_once(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    monkeypatch.setattr(site_crawl, "CHECKPOINT_LOOP_SHARE", 0)  # a checkpoint per page
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html", "a.html"))
        site.pages[NEW] = TEXT
        hold = store_held(kb, site.url(NEW))  # its store from the kept answer
        site.pages[OLD] = html("Alpha", "Rewritten page deltaword.")
        states = await stopped(kb, start, DEEP, hold)
        del kb._apply
        last = [s for s in states if s.get("waiting")][-1]  # a kill: the last one journalled
        state = CrawlCheckpoint.parse(last)
        assert state is not None and state.summary["duplicates"] == 1
        resumed = await kb.ingest_from_index(start, options=DEEP, resume=state)
    assert await holding(kb, "alphaword") == [site.url(NEW)], resumed
    assert resumed.duplicates == 0, resumed


async def test_a_stored_copy_met_after_a_canonical_new_page_is_counted_unchanged(
    kb: KnowledgeBase,
) -> None:
    site = first_site()
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        canonical = '<link rel="canonical" href="b2.html">'
        site.pages[NEW] = html("Alpha", "The alpha page alphaword.", head=canonical)
        second = await kb.ingest_from_index(start, options=DEEP)
    assert await holding(kb, "alphaword") == [site.url(OLD)], second
    assert second.duplicates == 1 and second.unchanged == 3, second


@pytest.mark.parametrize(
    "fields",
    [
        {"waiting": [["OLD", "/private/secret.html", 1, "d1g"]]},  # out of scope
        {"waiting": [["OLD", f"/docs/x{i}.html", 1, "d1g"] for i in range(50)]},  # too many
        {"pending": [[f"/docs/x{i}.html", 1] for i in range(6)], "done": 0},  # more than it had
    ],
)
async def test_a_tampered_checkpoint_never_widens_the_crawl(
    kb: KnowledgeBase, fields: dict[str, Any]
) -> None:
    """A journalled checkpoint is read back as a stranger's input: its waiting and queued
    pages stay in scope, within what it had visited and queued, under the page limit."""
    site = first_site()
    site.pages["/private/secret.html"] = html("Secret", "Private secretword.")
    for i in range(50):
        site.pages[f"/docs/x{i}.html"] = html(f"X{i}", f"Page x{i} xword.")

    def url(path: str) -> str:
        return site.url(OLD if path == "OLD" else path)

    async with running(site):
        start = await first_crawl(kb, site)
        del site.pages[OLD]  # 404: its waiters are visited again
        site.statuses.clear()
        raw: dict[str, Any] = {"start": start, "origin": start, "seen": [], "again": []}
        raw |= {"scheduled": 2, "done": 1, "pending": [["OLD", 1]], **fields}
        raw["waiting"] = [[url(h), url(p), d, g] for h, p, d, g in raw.get("waiting", [])]
        raw["pending"] = [[url(p), d] for p, d in raw["pending"]]
        state = CrawlCheckpoint.parse(raw)
        assert state is not None, raw
        progress: list[tuple[int, int]] = []
        resumed = await kb.ingest_from_index(
            start,
            options=dataclasses.replace(DEEP, max_pages=2),
            resume=state,
            progress=lambda d, s: progress.append((d, s)),
        )
        assert progress[0][1] >= 2, progress  # it went on from the checkpoint
    fetched = [p for p, _ in site.statuses if p != "/robots.txt"]
    assert "/private/secret.html" not in fetched, (resumed, fetched)
    assert len(fetched) <= 2 and all(d <= s for d, s in progress), (fetched, progress)


@pytest.mark.parametrize("copies", [1, 2])
async def test_a_new_page_is_stored_from_its_first_answer(kb: KnowledgeBase, copies: int) -> None:
    """Its second answer could fail (a busy server): the text would be stored nowhere,
    and a second new copy, taken for a duplicate of the first, with it."""
    site = first_site()
    served = 0

    def busy_after_one(_request: Any) -> web.Response:
        nonlocal served
        served += 1
        if served == 1:
            return web.Response(text=TEXT, content_type="text/html")
        return web.Response(status=503, text="busy")

    async with running(site):
        start = await first_crawl(kb, site)
        links = ("b.html", "b2.html", "c.html") if copies == 2 else ("b.html", "c.html")
        site.pages["/docs/index.html"] = html("Home", "Welcome.", links)
        del site.pages[OLD]  # 404
        site.override[NEW] = busy_after_one
        site.pages["/docs/b2.html"] = TEXT
        second = await kb.ingest_from_index(start, options=DEEP)
        asked_once = served == 1
        refreshed = await kb.refresh()  # NEW answers 503 to it: kept, reported
    assert await holding(kb, "alphaword") == [site.url(NEW)], (second, refreshed)
    assert asked_once and second.duplicates == copies - 1, second


async def test_a_stop_while_the_old_url_is_stored_again_keeps_the_waiting_page(
    kb: KnowledgeBase,
) -> None:
    """The stored page held the text, and the stop came before its visit ended: the
    resume asks it again, and the new page waits for that answer again."""
    site = first_site()
    reached, release = asyncio.Event(), asyncio.Event()
    apply = kb._apply

    async def blocking(outcome: Any, old: Any, *args: Any, **kwargs: Any) -> Any:
        if outcome.source == site.url(OLD):
            reached.set()
            await release.wait()
        return await apply(outcome, old, *args, **kwargs)

    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = TEXT
        opts = dataclasses.replace(DEEP, prune=True)
        kb._apply = blocking  # type: ignore[method-assign]
        states: list[dict[str, Any]] = []
        task = asyncio.create_task(
            kb.ingest_from_index(start, options=opts, checkpoint=states.append)
        )
        await asyncio.wait_for(reached.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        del kb._apply
        state = CrawlCheckpoint.parse(states[-1])
        assert state is not None and [u for u, _ in state.pending] == [site.url(OLD)]
        assert [u for _, u, *_ in state.waiting] == [site.url(NEW)]
        del site.pages[OLD]  # the rename finished meanwhile
        resumed = await kb.ingest_from_index(start, options=opts, resume=state)
    assert resumed.removed == 1, resumed
    assert await holding(kb, "alphaword") == [site.url(NEW)], resumed


async def test_a_page_stored_after_waiting_counts_its_links_once(kb: KnowledgeBase) -> None:
    site = first_site()
    site.pages[OLD] = html("Alpha", "The alpha page alphaword.", ("http://example.org/x.html",))
    async with running(site):
        start = await first_crawl(kb, site)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        second = await kb.ingest_from_index(start, options=DEEP)
    assert site.url(NEW) in await holding(kb, "alphaword"), second
    assert second.out_of_scope == 1, second


async def test_a_site_wide_rename_past_the_kept_answers_loses_nothing(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond the answers kept in memory a renamed page is stored at once (two copies
    until the refresh) instead of being asked again, which a busy server may refuse."""
    monkeypatch.setattr(site_crawl, "MAX_ANSWERS_KEPT", 2)
    renamed = 5
    site = first_site()
    for i in range(renamed):
        site.pages[f"/docs/old{i}.html"] = html(f"P{i}", f"Page pageword{i}x.")
    site.pages["/docs/index.html"] = html("Home", "Welcome.", ("old0.html",))
    served: set[str] = set()

    def once(path: str) -> Any:
        def answer(_request: Any) -> web.Response:
            if path in served:
                return web.Response(status=503, text="busy")
            served.add(path)
            return web.Response(text=site.pages[path], content_type="text/html")

        return answer

    async with running(site):
        site.pages["/docs/index.html"] = html(
            "Home", "Welcome.", tuple(f"old{i}.html" for i in range(renamed))
        )
        start = await first_crawl(kb, site)
        for i in range(renamed):
            site.pages[f"/docs/new{i}.html"] = site.pages.pop(f"/docs/old{i}.html")
            site.override[f"/docs/new{i}.html"] = once(f"/docs/new{i}.html")
        links = tuple(f"new{i}.html" for i in range(renamed))
        site.pages["/docs/index.html"] = html("Home", "Welcome.", links)
        second = await kb.ingest_from_index(start, options=DEEP)
        site.override.clear()
        refreshed = await kb.refresh()
        for i in range(renamed):
            held = await holding(kb, f"pageword{i}x")
            assert held == [site.url(f"/docs/new{i}.html")], (i, second, refreshed)
    assert len(served) == renamed and second.duplicates == 0, second
