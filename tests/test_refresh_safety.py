"""`rag refresh` removes what is really gone and nothing else: a page stored under a
canonical URL that does not answer is asked for where it was found, a site answering
404/410 (or `noindex`) to everything keeps its pages, a page now `noindex` is removed, a
page deleted while the refresh runs stays deleted, and one that comes back before the end
stays stored."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from mcp_server.formatting import format_refresh
from mcp_server.schemas import RefreshOutput
from rag_app.config import RAGSettings
from rag_app.knowledge import KnowledgeBase
from rag_app.refresh import SITE_GONE_MIN
from rag_app.results import RefreshSummary
from tests.conftest import CountingEmbedding
from tests.programmable_site import Site, html, running
from tests.refresh_site import DEEP, docs, loopback_settings, opened, stored


@pytest.fixture
def crawl_settings(settings: RAGSettings) -> RAGSettings:
    return loopback_settings(settings)


@pytest.fixture
async def kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    async with opened(crawl_settings, counting_embed) as base:
        yield base


@pytest.fixture
async def serial_kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    """A knowledge base that refreshes one page at a time (in store order)."""
    one_at_a_time = crawl_settings.model_copy(update={"rag_crawl_concurrency": 1})
    base = KnowledgeBase(one_at_a_time, embed_model=counting_embed)
    await base.open()
    yield base
    await base.aclose()


async def test_a_page_stored_under_a_canonical_url_that_404s_is_kept_and_updated(
    kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    """p0.html names /docs/p0 as canonical, which the server does not serve: it is stored
    under /docs/p0, and a refresh that gets 404 there asks p0.html, where it was found
    (it used to remove a live page, which the next crawl embedded again, round after
    round)."""
    site = Site(pages=docs(2, {0: '<link rel="canonical" href="/docs/p0">'}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        before = await stored(kb)
        assert site.url("/docs/p0") in before
        result = await kb.refresh()
        assert (result.removed, result.errors) == (0, 0), result
        assert await stored(kb) == before
        asked = site.statuses[site.statuses.index(("/docs/p0", 404)) + 1 :]
        assert ("/docs/p0.html", 304) in asked  # where it was found, conditionally
        embedded = counting_embed.texts
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert counting_embed.texts == embedded  # nothing to embed again
        site.pages["/docs/p0.html"] = html(
            "Page 0", "Brand new text about zebras.", head='<link rel="canonical" href="/docs/p0">'
        )
        result = await kb.refresh()
        assert result.updated == 1, result
        hits = (await kb.retrieve("zebras", mode="bm25")).hits
        assert hits and hits[0].source_url == site.url("/docs/p0")
        del site.pages["/docs/p0.html"]
        result = await kb.refresh()
        assert result.removed_urls == [site.url("/docs/p0")], result


async def test_a_site_answering_gone_to_everything_keeps_its_pages(kb: KnowledgeBase) -> None:
    site = Site(pages=docs(SITE_GONE_MIN))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        before = await stored(kb)
        site.everything = lambda _r: web.Response(status=410, text="gone")
        result = await kb.refresh()
        assert await stored(kb) == before
        assert result.removed == 0 and result.errors == len(before), result
        assert all("none was removed" in d["reason"] for d in result.error_details)
        site.everything = None  # the site is back, two pages really gone
        del site.pages["/docs/p0.html"], site.pages["/docs/p1.html"]
        result = await kb.refresh()
        assert sorted(result.removed_urls) == [site.url("/docs/p0.html"), site.url("/docs/p1.html")]


async def test_a_page_that_now_asks_not_to_be_indexed_is_removed(kb: KnowledgeBase) -> None:
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        site.pages["/docs/p0.html"] = html(
            "Page 0", "Now a secret draft.", head='<meta name="robots" content="noindex">'
        )
        result = await kb.refresh()
        assert result.removed_urls == [site.url("/docs/p0.html")], result
        assert not (await kb.retrieve("secret draft", mode="bm25")).hits


async def test_a_page_deleted_while_the_refresh_runs_stays_deleted(
    serial_kb: KnowledgeBase,
) -> None:
    kb, site = serial_kb, Site(pages=docs(3))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        go = asyncio.Event()
        for path, body in list(site.pages.items()):
            changed = body.replace("Distinct text", "Changed text")

            async def held(_r: web.Request, body: str = changed) -> web.Response:
                await go.wait()  # changed pages, no validators: all would be stored
                return web.Response(text=body, content_type="text/html")

            site.override[path] = held
        job = await kb.start_refresh()
        await asyncio.sleep(0.3)
        victim = site.url("/docs/p2.html")
        await kb.delete_source(victim)
        go.set()
        done = await kb.wait_job(job["id"])
        assert victim not in await stored(kb), done
        reasons = [d["reason"] for d in done["result"]["error_details"]]
        assert any("deleted while it was being refreshed" in r for r in reasons), done


CANON = '<link rel="canonical" href="/docs/p0">'


def canon_site() -> Site:
    """p0.html names /docs/p0 as canonical, and /docs/p0 answers too (the usual case)."""
    pages = docs(3, {0: CANON})
    pages["/docs/p0"] = pages["/docs/p0.html"]
    return Site(pages=pages)


async def test_a_canonical_page_that_answers_is_asked_first(kb: KnowledgeBase) -> None:
    """The alias turning into a redirect to the canonical URL, or going away, changes
    nothing for a canonical page that answers; `rag add` of it asks it, not the alias."""
    site = canon_site()
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert site.url("/docs/p0") in await stored(kb)
        site.pages["/docs/p0"] = html("Page 0", "Updated text about giraffes.", head=CANON)
        site.override["/docs/p0.html"] = lambda _r: web.Response(
            status=301, headers={"Location": "/docs/p0"}
        )
        result = await kb.refresh()
        assert (result.errors, result.updated) == (0, 1), result
        assert (await kb.retrieve("giraffes", mode="bm25")).hits
        del site.override["/docs/p0.html"], site.pages["/docs/p0.html"]  # the alias: 404
        result = await kb.refresh()
        assert result.removed == 0 and site.url("/docs/p0") in await stored(kb), result
        site.statuses.clear()
        site.pages["/docs/p0"] = html("Page 0", "The canonical page now speaks of okapis.")
        await kb.ingest_page(site.url("/docs/p0"))
        assert [p for p, _ in site.statuses if p != "/robots.txt"] == ["/docs/p0"]
        assert (await kb.retrieve("okapis", mode="bm25")).hits


async def test_a_site_that_turned_noindex_everywhere_keeps_its_pages(kb: KnowledgeBase) -> None:
    """A CMS's "discourage search engines" switch puts noindex on every page at once."""
    site = Site(pages=docs(SITE_GONE_MIN))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        before = await stored(kb)
        for path, body in list(site.pages.items()):
            site.pages[path] = body.replace(
                "</title>", '</title><meta name="robots" content="noindex">'
            )
        result = await kb.refresh()
        assert await stored(kb) == before and result.removed == 0, result


async def test_a_page_back_before_the_refresh_ends_is_kept(serial_kb: KnowledgeBase) -> None:
    """index.html answers 404 when it is checked, then is back (and added again by the
    user) before the refresh ends: it is asked once more before its removal, and kept."""
    kb, site = serial_kb, Site(pages=docs(3))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        victim = site.url("/docs/index.html")
        body = site.pages.pop("/docs/index.html")  # 404 for now
        go = asyncio.Event()
        for path in ("/docs/p0.html", "/docs/p1.html", "/docs/p2.html"):

            async def held(_r: web.Request, path: str = path) -> web.Response:
                await go.wait()
                return web.Response(text=site.pages[path], content_type="text/html")

            site.override[path] = held
        job = await kb.start_refresh()
        for _ in range(100):
            await asyncio.sleep(0.05)
            if ("/docs/index.html", 404) in site.statuses:
                break
        assert ("/docs/index.html", 404) in site.statuses
        site.pages["/docs/index.html"] = body  # back
        await kb.ingest_page(victim)
        go.set()
        done = await kb.wait_job(job["id"])
        assert victim in await stored(kb), done
        assert done["result"]["removed"] == 0, done


def redirect(to: str) -> Any:
    return lambda _r: web.Response(status=301, headers={"Location": to})


async def test_a_canonical_url_that_redirects_with_its_alias_gone_is_reported(
    kb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    """/docs/p0 (canonical, stored) now 301s elsewhere and p0.html (where it was found) is
    404: the page is reported gone or redirected, never as an unexpected error."""
    site = canon_site()
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert site.url("/docs/p0") in await stored(kb)
        site.override["/docs/p0"] = redirect("/docs/new/p0")
        del site.pages["/docs/p0.html"]  # 404
        with caplog.at_level(logging.ERROR):
            result = await kb.refresh()
        reasons = [d["reason"] for d in result.error_details]
        assert not any("Unexpected error" in r for r in reasons), reasons


async def test_a_failing_second_check_keeps_the_page_and_the_refresh_goes_on(
    serial_kb: KnowledgeBase,
) -> None:
    """Both URLs 404 when checked; asked once more, the canonical URL answers a redirect
    and the alias still 404: the refresh finishes and p1.html, really gone, is removed
    (an exception there used to fail the whole job and lose every later removal)."""
    kb, site = serial_kb, canon_site()
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        del site.pages["/docs/p0.html"]  # alias 404
        calls = {"n": 0}

        def canonical(_r: web.Request) -> web.Response:
            calls["n"] += 1
            if calls["n"] == 1:
                return web.Response(status=404, text="not found")
            return web.Response(status=301, headers={"Location": "/docs/moved/p0"})

        site.override["/docs/p0"] = canonical
        del site.pages["/docs/p1.html"]  # really gone too: removed after /docs/p0 in order
        job = await kb.start_refresh()
        done = await kb.wait_job(job["id"])
        assert done["state"] == "done", done
        assert site.url("/docs/p1.html") not in await stored(kb)


async def test_the_counts_add_up_when_a_page_is_back_or_its_second_check_fails(
    serial_kb: KnowledgeBase,
) -> None:
    """A page 404 when checked and back when asked again is kept and counted unchanged;
    one whose second check fails (503) is kept and reported."""
    kb, site = serial_kb, Site(pages=docs(3))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        seen = {"p0": 0, "p1": 0}

        def flapping(_r: web.Request) -> web.Response:
            seen["p0"] += 1
            if seen["p0"] == 1:
                return web.Response(status=404, text="deploying")
            return web.Response(text=site.pages["/docs/p0.html"], content_type="text/html")

        def erroring(_r: web.Request) -> web.Response:
            seen["p1"] += 1
            return web.Response(status=404 if seen["p1"] == 1 else 503, text="x")

        site.override["/docs/p0.html"] = flapping
        site.override["/docs/p1.html"] = erroring
        r = await kb.refresh()
        assert r.removed == 0 and r.errors == 1, r
        assert r.checked == r.unchanged + r.updated + r.removed + r.errors, r


async def test_a_removal_under_way_when_the_refresh_is_cancelled_is_counted(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refresh job is cancelled while a removal is being written: the write runs to
    its end (the page is deleted) and the cancelled job's summary counts it."""
    site = Site(pages=docs(3))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        del site.pages["/docs/p0.html"]
        real = kb.store.delete_source
        started = asyncio.Event()
        loop = asyncio.get_running_loop()

        def slow_delete(source: str) -> int:
            loop.call_soon_threadsafe(started.set)
            time.sleep(0.5)  # a big page's chunks (instrumentation only)
            return real(source)

        monkeypatch.setattr(kb.store, "delete_source", slow_delete)
        job = await kb.start_refresh()
        await asyncio.wait_for(started.wait(), 20)
        done = await kb.cancel_job(job["id"])
        await asyncio.sleep(1.0)
        gone_now = site.url("/docs/p0.html") not in await stored(kb)
        live = done.get("result") or done.get("live") or {}
        assert gone_now and live.get("removed") == 1, done


async def test_a_304_for_a_page_never_stored_is_an_error_not_a_stored_page(
    kb: KnowledgeBase,
) -> None:
    """A server that answers 304 to a request naming no copy: the page is not counted as
    crawled (nothing is stored for it) and the crawl says why."""
    site = Site(pages=docs(2))
    site.override["/docs/p1.html"] = lambda _r: web.Response(status=304)
    async with running(site):
        summary = await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert summary.pages_crawled == len(await stored(kb)) == 2, summary
        assert summary.errors == 1 and "304" in summary.error_details[0]["reason"], summary


async def test_a_second_refresh_joins_the_running_one(serial_kb: KnowledgeBase) -> None:
    """Two refreshes started together are one job: each page is asked once and a removed
    page is counted once (two jobs fetched everything twice)."""
    kb, site = serial_kb, Site(pages=docs(3))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        del site.pages["/docs/p1.html"]  # gone
        site.statuses.clear()
        first = await kb.start_refresh()
        second = await kb.start_refresh()
        assert second["id"] == first["id"] and second["joined"] and not first.get("joined")
        done = await kb.wait_job(first["id"])
        asked = Counter(p for p, _ in site.statuses if p != "/robots.txt")
        assert asked == {"/docs/index.html": 1, "/docs/p0.html": 1, "/docs/p2.html": 1,
                         "/docs/p1.html": 2}, asked  # fmt: skip  # p1: asked again before removal
        assert done["result"]["removed"] == 1, done
        third = await kb.start_refresh()  # none running any more: a new job
        assert third["id"] != first["id"] and not third.get("joined")
        await kb.wait_job(third["id"])


async def test_a_refresh_waited_for_says_it_joined_the_running_one(
    serial_kb: KnowledgeBase,
) -> None:
    """`rag_refresh wait=true` while a refresh runs answers with that job's summary and
    says so (it read like a refresh of its own)."""
    kb, site = serial_kb, Site(pages=docs(3))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        first = await kb.start_refresh()
        waited = RefreshSummary.from_dict(await kb.refresh_in_job())
        own = RefreshSummary.from_dict(await kb.refresh_in_job())  # none running: its own
    assert waited.joined and waited.checked == 4, waited
    assert not first.get("joined") and not own.joined, own
    assert format_refresh(waited).startswith("実行中の更新確認に合流しました")
    assert RefreshOutput.of(waited).joined and not RefreshOutput.of(own).joined
    assert "合流" not in format_refresh(own)


async def test_a_page_whose_canonical_url_changed_moves_to_it(
    kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    """p0.html named /docs/p0 (not served) as canonical and now names /docs/zero: the
    refresh, which finds it at p0.html, stores it under /docs/zero and drops /docs/p0 (it
    stayed under the dead URL forever, a new crawl taking /docs/zero for a duplicate of
    it). The next refresh leaves it there."""
    site = Site(pages=docs(2, {0: '<link rel="canonical" href="/docs/p0">'}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        old, new = site.url("/docs/p0"), site.url("/docs/zero")
        assert old in await stored(kb)
        site.pages["/docs/p0.html"] = site.pages["/docs/p0.html"].replace("/docs/p0", "/docs/zero")
        result = await kb.refresh()
        assert (result.moved, result.removed, result.errors) == (1, 0, 0), result
        assert result.moved_pages == [{"from": old, "to": new}], result
        assert result.checked == result.unchanged + result.updated + result.moved
        sources = await stored(kb)
        assert new in sources and old not in sources, sources
        hits = (await kb.retrieve("topic0", mode="bm25")).hits
        assert hits and hits[0].source_url == new, hits
        record = kb.store.get_source(new)
        assert record is not None and record.fetched_from == site.url("/docs/p0.html")
        texts = counting_embed.texts
        again = await kb.refresh()
        assert (again.moved, again.removed, again.errors) == (0, 0, 0), again
        assert new in await stored(kb) and counting_embed.texts == texts


async def test_a_page_that_answers_where_it_is_stored_is_not_moved(kb: KnowledgeBase) -> None:
    """Two pages naming each other as canonical must not swap places at every refresh: a
    page that answers at its stored URL stays there, whatever canonical URL it names."""
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        before = await stored(kb)
        site.pages["/docs/p0.html"] = html(
            "Page 0", "Other text about topic0.", head='<link rel="canonical" href="p1.html">'
        )
        result = await kb.refresh()
        assert (result.moved, result.updated) == (0, 1) and await stored(kb) == before, result


async def test_the_gone_pages_are_asked_again_several_at_a_time(kb: KnowledgeBase) -> None:
    """The second check before a removal runs beside the others (as the first pass
    does): a gone page whose second answer is slow does not hold up the rest."""
    site = Site(pages=docs(4))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        go = asyncio.Event()
        asked: list[str] = []

        def gone_page(path: str) -> Any:
            async def handler(_r: web.Request) -> web.Response:
                asked.append(path)
                if path == "/docs/p1.html" and asked.count(path) == 2:
                    await asyncio.wait_for(go.wait(), 10)  # its second check hangs
                return web.Response(status=404, text="gone")

            return handler

        for path in ("/docs/p1.html", "/docs/p2.html"):
            site.override[path] = gone_page(path)
        job = await kb.start_refresh()
        for _ in range(40):  # 2 s: below the fetch timeout, which would end p1's check
            if asked.count("/docs/p1.html") == 2 and asked.count("/docs/p2.html") == 2:
                break
            await asyncio.sleep(0.05)
        both = asked.count("/docs/p2.html") == 2
        go.set()
        done = await kb.wait_job(job["id"])
        assert both, asked  # p2's second check did not wait for p1's
        assert done["result"]["removed_urls"] == [
            site.url("/docs/p1.html"),
            site.url("/docs/p2.html"),
        ]
