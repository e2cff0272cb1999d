"""A re-crawl that meets, under a new URL, text an earlier crawl stored under another:
a renamed page, text moved to a new page, a second copy of a live page. The new page is
a duplicate only while the stored URL still holds the text, so a refresh removing the old
URL never leaves the text stored nowhere. Against a real programmable site and a real
knowledge base."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rag_app import site_crawl
from rag_app.config import RAGSettings
from rag_app.crawl_checkpoint import CrawlCheckpoint
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.programmable_site import Site, html, running
from tests.refresh_site import DEEP, stored

OLD = "/docs/a.html"
NEW = "/docs/b.html"
TEXT = html("Alpha", "The alpha page alphaword.")


@pytest.fixture
async def kb(
    settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    crawl = settings.model_copy(
        update={
            "rag_allow_private_network": True,
            "rag_crawl_delay_sec": 0.0,
            "rag_crawl_timeout_sec": 3.0,
            "rag_crawl_concurrency": 1,  # pages in link order: the outcome is not racy
        }
    )
    base = KnowledgeBase(crawl, embed_model=counting_embed)
    await base.open()
    yield base
    await base.aclose()


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


def asked(site: Site, path: str) -> int:
    return sum(1 for p, _ in site.statuses if p == path)


@pytest.mark.parametrize("links", [("b.html", "c.html"), ("b.html", "a.html", "c.html")])
async def test_a_renamed_page_is_stored_under_its_new_url_and_survives_the_refresh(
    kb: KnowledgeBase, links: tuple[str, ...]
) -> None:
    """The old URL gone (unlinked, or still linked after the new one): the new page is
    stored, and the refresh that removes the old URL leaves the text stored (it was
    skipped as a duplicate of the old URL's record, then stored nowhere)."""
    site = first_site()
    async with running(site):
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
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
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
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
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
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
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
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


async def test_past_the_page_limit_the_stored_copy_keeps_the_text(kb: KnowledgeBase) -> None:
    """The old URL is not asked beyond `max_pages`: the new page stays a duplicate and the
    stored copy keeps the text (nothing is removed by a crawl)."""
    site = first_site()
    async with running(site):
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        site.statuses.clear()
        capped = dataclasses.replace(DEEP, max_pages=3)
        second = await kb.ingest_from_index(start, options=capped)
    assert asked(site, OLD) == 0 and len({p for p, _ in site.statuses} - {"/robots.txt"}) == 3
    assert await holding(kb, "alphaword") == [site.url(OLD)], second


async def test_a_crawl_stopped_while_the_old_url_is_asked_finishes_the_rename_on_resume(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages waiting on a stored page's answer are in the checkpoint: cancelled while
    the old URL is being asked, the resumed crawl stores the new page."""
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    site = first_site()
    asking = asyncio.Event()
    held = asyncio.Event()

    async def slow_gone(_request: Any) -> Any:
        asking.set()
        await held.wait()
        raise AssertionError("never answered")

    async with running(site):
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
        site.pages["/docs/index.html"] = html("Home", "Welcome.", ("b.html", "c.html"))
        site.pages[NEW] = site.pages.pop(OLD)
        site.override[OLD] = slow_gone
        states: list[dict[str, Any]] = []
        task = asyncio.create_task(
            kb.ingest_from_index(start, options=DEEP, checkpoint=states.append)
        )
        await asyncio.wait_for(asking.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        held.set()
        state = CrawlCheckpoint.parse(states[-1])
        assert state is not None and state.waiting, states[-1]
        assert [url for _, url, _ in state.waiting] == [site.url(NEW)]
        del site.override[OLD]  # now a plain 404
        resumed = await kb.ingest_from_index(start, options=DEEP, resume=state)
    assert await holding(kb, "alphaword") == sorted([site.url(NEW), site.url(OLD)]), resumed
    assert resumed.duplicates == 0, resumed


def test_a_checkpoint_keeps_its_waiting_pages_and_refuses_bad_ones() -> None:
    base = {"start": "http://h/d/", "origin": "http://h/d/", "seen": [], "pending": []}
    base |= {"scheduled": 0, "done": 0}
    good = {**base, "waiting": [["http://h/d/a.html", "http://h/d/b.html", 2]], "again": []}
    parsed = CrawlCheckpoint.parse(good)
    assert parsed is not None and parsed.waiting == [("http://h/d/a.html", "http://h/d/b.html", 2)]
    assert CrawlCheckpoint.parse(parsed.to_dict()) == parsed
    for bad in ([["http://h/a", "file:///etc/passwd", 1]], [["http://h/a", "http://h/b", 0]], "x"):
        assert CrawlCheckpoint.parse({**base, "waiting": bad}) is None
    assert CrawlCheckpoint.parse({**base, "again": ["javascript:x"]}) is None
