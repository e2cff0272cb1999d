"""A crawl cut off goes on from its checkpoint: finished pages are not fetched again,
every page in scope is stored once, and a damaged checkpoint means a fresh start."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from rag_app import site_crawl
from rag_app.config import RAGSettings
from rag_app.crawl.pages import CrawledPage
from rag_app.crawl.scope import CrawlScope, page_key
from rag_app.crawl_checkpoint import CrawlCheckpoint
from rag_app.crawl_options import CrawlOptions
from rag_app.knowledge import KnowledgeBase
from rag_app.site_crawl import SiteCrawl
from tests.conftest import CountingEmbedding
from tests.docs_site import IN_SCOPE
from tests.static_site import StaticSite

IN_SCOPE_KEYS = {page_key("http://h" + p).removeprefix("http://h") for p in IN_SCOPE}
OPTIONS = CrawlOptions(max_depth=10, exclude="/_static/")


def keys_of(paths: list[str]) -> set[str]:
    return {page_key("http://h" + p).removeprefix("http://h") for p in paths}


def stored(sources: list[str], site: StaticSite) -> set[str]:
    return keys_of([s.removeprefix(site.base) for s in sources])


@pytest.fixture
async def kb(settings: RAGSettings, counting_embed: CountingEmbedding) -> Any:
    crawl = settings.model_copy(
        update={"rag_allow_private_network": True, "rag_crawl_delay_sec": 0.0}
    )
    base = KnowledgeBase(crawl, embed_model=counting_embed)
    await base.open()
    yield base
    await base.aclose()


async def cut_off_after(kb: KnowledgeBase, site: StaticSite, pages: int) -> dict[str, Any]:
    """Crawl until `pages` pages are finished, cancel, and return the last checkpoint."""
    states: list[dict[str, Any]] = []
    task: asyncio.Task[Any] | None = None

    def progress(done: int, _total: int) -> None:
        if done >= pages and task is not None:
            task.cancel()

    task = asyncio.create_task(
        kb.ingest_from_index(
            site.url("/docs/"), options=OPTIONS, progress=progress, checkpoint=states.append
        )
    )
    with pytest.raises(asyncio.CancelledError):
        await task
    assert states, "no checkpoint was published"
    return states[-1]


async def test_a_resumed_crawl_does_not_fetch_finished_pages_again(
    kb: KnowledgeBase, site: StaticSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    state = await cut_off_after(kb, site, 3)
    checkpoint = CrawlCheckpoint.parse(state)
    assert checkpoint is not None and checkpoint.done >= 3 and checkpoint.pending
    first = keys_of([p for p in site.paths() if p != "/robots.txt"])
    queued = keys_of([url.removeprefix(site.base) for url, _ in checkpoint.pending])
    finished = first - queued
    assert len(finished) >= 3

    site.requests.clear()
    summary = await kb.ingest_from_index(site.url("/docs/"), options=OPTIONS, resume=checkpoint)
    again = keys_of([p for p in site.paths() if p != "/robots.txt"])
    assert not again & finished, f"finished pages fetched again: {again & finished}"
    assert stored((await kb.stats()).sources, site) == IN_SCOPE_KEYS
    assert len(IN_SCOPE) <= summary.pages_crawled <= len(IN_SCOPE) + 4, summary
    assert [d["url"] for d in summary.error_details] == [site.url("/docs/missing.html")]


async def test_a_checkpoint_with_nothing_left_ends_at_once(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    states: list[dict[str, Any]] = []
    done = await kb.ingest_from_index(site.url("/docs/"), options=OPTIONS, checkpoint=states.append)
    final = {**states[-1], "pending": [], "done": states[-1]["scheduled"]}
    final["summary"] = done.to_dict()
    site.requests.clear()
    resumed = await kb.ingest_from_index(
        site.url("/docs/"), options=OPTIONS, resume=CrawlCheckpoint.parse(final)
    )
    assert site.paths() == [] and resumed.pages_crawled == done.pages_crawled


@pytest.mark.parametrize(
    "damage",
    [
        "not a mapping",
        {
            "start": "http://h/",
            "origin": "http://h/",
            "seen": "x",
            "pending": [],
            "scheduled": 0,
            "done": 0,
        },
        {
            "start": "http://h/",
            "origin": "http://h/",
            "seen": [],
            "pending": [["http://h/u", 0]],
            "scheduled": 1,
            "done": 0,
        },
        {
            "start": "http://h/",
            "origin": "http://h/",
            "seen": [],
            "pending": [["http://h/u", "1"]],
            "scheduled": 1,
            "done": 0,
        },
        {
            "start": "http://h/",
            "origin": "http://h/",
            "seen": [],
            "pending": [["http://h/u"]],
            "scheduled": 1,
            "done": 0,
        },
        {
            "start": "http://h/",
            "origin": "http://h/",
            "seen": [],
            "pending": [],
            "scheduled": 1,
            "done": 2,
        },
        {"start": "", "seen": [], "pending": [], "scheduled": 0, "done": 0},
        {
            "start": "http://h/",
            "origin": "http://h/",
            "seen": [7],
            "pending": [],
            "scheduled": 0,
            "done": 0,
        },
        {"seen": [], "pending": [], "scheduled": 0, "done": 0},
    ],
)
def test_a_damaged_checkpoint_is_ignored(damage: object, caplog: pytest.LogCaptureFixture) -> None:
    assert CrawlCheckpoint.parse(damage) is None
    assert "starts over" in caplog.text


async def test_a_damaged_checkpoint_means_a_fresh_crawl(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    summary = await kb.ingest_from_index(
        site.url("/docs/"), options=OPTIONS, resume=CrawlCheckpoint.parse({"start": 1})
    )
    assert stored((await kb.stats()).sources, site) == IN_SCOPE_KEYS
    assert summary.pages_crawled == len(IN_SCOPE)


async def test_a_checkpoint_of_another_site_is_not_followed(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    elsewhere = CrawlCheckpoint(
        start="http://elsewhere.invalid/docs/", pending=[("http://elsewhere.invalid/x", 1)]
    )
    summary = await kb.ingest_from_index(site.url("/docs/"), options=OPTIONS, resume=elsewhere)
    assert stored((await kb.stats()).sources, site) == IN_SCOPE_KEYS
    assert summary.pages_crawled == len(IN_SCOPE)


VALID = {
    "start": "http://h/docs/",
    "origin": "http://h/docs/",
    "seen": ["http://h/docs"],
    "pending": [["http://h/docs/a.html", 1]],
    "scheduled": 1,
    "done": 0,
    "summary": {"pages_crawled": 0, "error_details": []},
}


@pytest.mark.parametrize(
    "damage",
    [
        {"summary": {"errors": "x"}},
        {"summary": {"error_details": ["not a mapping"]}},
        {"summary": {"error_details": [{"url": 1}]}},
        {"pending": [["http://h:99999/a", 1]]},
        {"pending": [["file:///etc/passwd", 1]]},
        {"origin": None},
    ],
)
def test_every_part_of_a_checkpoint_is_checked(damage: dict[str, Any]) -> None:
    assert CrawlCheckpoint.parse(VALID) is not None
    assert CrawlCheckpoint.parse({**VALID, **damage}) is None


def offline_crawl() -> SiteCrawl:
    """A crawl of http://h/docs/ whose bookkeeping is driven by hand (nothing is fetched)."""
    return SiteCrawl(
        None,  # type: ignore[arg-type]
        CrawlScope.build("http://h/docs/"),
        OPTIONS,
        known={},
        ingest=None,  # type: ignore[arg-type]
        remove=None,  # type: ignore[arg-type]
    )


def test_keys_taken_by_a_page_in_flight_are_not_recorded_as_seen() -> None:
    """A page redirected to b-final and stopped before its write: resumed, it is stored."""
    crawl = offline_crawl()
    own = page_key("http://h/docs/b")
    crawl._seen.add(own)
    crawl._pending[own] = ("http://h/docs/b", 1)
    page = CrawledPage(
        url="http://h/docs/b", title="", text="b", crawled_at="", content_hash="hb",
        final_url="http://h/docs/b-final",
    )  # fmt: skip
    assert crawl._deduplicated(page, own) is not None
    state = crawl.state()
    assert page_key("http://h/docs/b-final") not in state.seen and own in state.seen

    again = offline_crawl()
    again._restore(state)
    assert again._deduplicated(page, own) is not None  # not taken for a duplicate of itself


def test_a_checkpoint_never_takes_a_crawl_out_of_its_scope() -> None:
    crawl = offline_crawl()
    checkpoint = CrawlCheckpoint.parse(
        {**VALID, "pending": [["http://other.test/secret", 1], ["http://h/docs/a.html", 1]]}
    )
    assert checkpoint is not None
    crawl._restore(checkpoint)
    assert [url for url, _ in crawl._pending.values()] == ["http://h/docs/a.html"]


def test_a_costly_checkpoint_is_taken_less_often() -> None:
    """A checkpoint runs on the owner's event loop: one that takes 20 ms is not taken
    again for 2 s (1 % of the loop), a cheap one every second."""
    saved: list[float] = []

    def slow(_state: dict[str, Any]) -> None:
        saved.append(time.monotonic())
        time.sleep(0.02)

    crawl = offline_crawl()
    crawl._checkpoint = slow
    crawl._save()
    assert len(saved) == 1 and crawl._save_every >= 2.0
    every = crawl._save_every  # 100 x what it took, more on a loaded machine
    crawl._saved_at -= max(1.5, every / 2)  # a 1 s interval would save again
    crawl._save()
    assert len(saved) == 1
    crawl._saved_at -= every
    crawl._save()
    assert len(saved) == 2
    crawl._checkpoint = saved.append  # cheap again: back to every second
    crawl._saved_at -= crawl._save_every + 0.5
    crawl._save()
    assert crawl._save_every == 1.0


async def test_a_resumed_job_is_listed_with_its_earlier_counts_from_the_start(
    kb: KnowledgeBase, site: StaticSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(site_crawl, "CHECKPOINT_EVERY_SEC", 0.0)
    checkpoint = CrawlCheckpoint.parse(await cut_off_after(kb, site, 3))
    assert checkpoint is not None and checkpoint.summary["pages_crawled"] > 0
    job = await kb.start_crawl(site.url("/docs/"), options=OPTIONS, resume=checkpoint)
    # listed before its task has run at all: the earlier attempt's counts, not zeros
    assert (job["done"], job["total"]) == (checkpoint.done, checkpoint.scheduled)
    assert job["result"]["pages_crawled"] == checkpoint.summary["pages_crawled"]
    done = await kb.wait_job(job["id"])
    assert done["state"] == "done" and done["result"]["pages_crawled"] >= len(IN_SCOPE)
