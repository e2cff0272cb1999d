"""A refresh's moves, joins and checkpoints under pressure: a page moves only where a
crawl would store it and never comes back once deleted, a client that joined a refresh
never cancels or loses it, and a resumed refresh's counts add up.

Real parts: the programmable aiohttp site on loopback, a real KnowledgeBase with the
builtin embedding. Method patches only add timing (a held chunking, a slow store write)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import posixpath
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from aiohttp import web

from rag_app import cli
from rag_app import refresh as refresh_module
from rag_app.config import RAGSettings
from rag_app.errors import RAGError
from rag_app.job_journal import JOURNAL_FILE
from rag_app.knowledge import KnowledgeBase
from rag_app.refresh_checkpoint import RefreshCheckpoint
from tests.conftest import CountingEmbedding
from tests.programmable_site import Site, html, running
from tests.refresh_site import DEEP, docs, loopback_settings, opened, stored

CANON0 = '<link rel="canonical" href="/docs/p0">'
SECRET = html("Private notes", "Payroll figures and the admin password hint.")


@pytest.fixture
def crawl_settings(settings: RAGSettings) -> RAGSettings:
    return loopback_settings(settings, rag_crawl_concurrency=1)


@pytest.fixture
async def kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    async with opened(crawl_settings, counting_embed) as base:
        yield base


def titles(kb: KnowledgeBase) -> dict[str, str]:
    return {r.source: r.title for r in kb.store.list_sources()}


def like_nginx(site: Site) -> None:
    """Serve `site.pages` as nginx does by default: `%2e` decoded, dot segments resolved,
    `//` merged (merge_slashes on) before the path is looked up."""

    async def handler(request: web.Request) -> web.Response:
        raw = request.raw_path.split("?", 1)[0]
        path = posixpath.normpath(re.sub("/+", "/", unquote(raw)))
        for candidate in (path, path + "/index.html"):
            if candidate in site.pages:
                return web.Response(text=site.pages[candidate], content_type="text/html")
        return web.Response(status=404, text="not found")

    site.everything = handler


def names_canonical(site: Site, path: str, href: str) -> None:
    """The page at `path` now names `href` as its canonical URL."""
    body = site.pages[path]
    head_end = body.index("</head>")
    start = body.find('<link rel="canonical"')
    if start >= 0:
        body = body[:start] + body[body.index(">", start) + 1 :]
        head_end = body.index("</head>")
    site.pages[path] = body[:head_end] + f'<link rel="canonical" href="{href}">' + body[head_end:]


# --------------------------------------------------------------------------- moves


async def test_a_move_never_goes_to_another_port_of_the_host(kb: KnowledgeBase) -> None:
    """p0.html (stored under its canonical /docs/p0, which answers 404) now names a URL on
    another port of the same host (an internal service) as canonical: the page is not
    stored there, and no refresh ever asks that URL (a move compared host names only)."""
    site = Site(pages=docs(2, {0: CANON0}))
    internal = Site(pages={"/internal/admin": html("Admin", "Internal admin console secrets.")})
    async with running(site), running(internal):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert site.url("/docs/p0") in await stored(kb)
        names_canonical(site, "/docs/p0.html", internal.url("/internal/admin"))
        first = await kb.refresh()
        second = await kb.refresh()
        asked = [p for p, _ in internal.statuses]
        sources = await stored(kb)
        assert internal.url("/internal/admin") not in sources, (first, sources)
        assert asked == [], (asked, second)


async def test_a_move_stays_within_what_a_crawl_of_the_site_would_store(
    kb: KnowledgeBase,
) -> None:
    """p0.html now names /private/notes, outside the /docs/ folder where it was found: a
    crawl would not store it there, and neither does a refresh's move."""
    site = Site(pages=docs(2, {0: CANON0}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        names_canonical(site, "/docs/p0.html", "/private/notes")
        result = await kb.refresh()
        sources = await stored(kb)
        assert site.url("/private/notes") not in sources, (result, sources)


async def test_a_move_onto_another_spelling_of_a_stored_page_does_not_store_it_twice(
    kb: KnowledgeBase,
) -> None:
    """p0.html now names /docs/ as canonical, the page stored as /docs/index.html (one page,
    two spellings): the move finds it, instead of storing a second record beside it."""
    site = Site(pages=docs(2, {0: CANON0}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        names_canonical(site, "/docs/p0.html", "/docs/")
        result = await kb.refresh()
        sources = await stored(kb)
        assert not (site.url("/docs/") in sources and site.url("/docs/index.html") in sources), (
            result,
            sources,
        )


async def test_a_page_deleted_while_it_is_being_moved_stays_deleted(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rag delete /docs/p0` lands while the refresh is storing the page under its new URL:
    the write checks, in its turn, that the old copy is still there, so the page stays
    deleted under both URLs."""
    site = Site(pages=docs(2, {0: CANON0}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        old, new = site.url("/docs/p0"), site.url("/docs/zero")
        names_canonical(site, "/docs/p0.html", "/docs/zero")
        real_chunk = kb._chunk
        started, go = asyncio.Event(), asyncio.Event()

        async def held_chunk(doc: Any) -> Any:
            if doc.doc_id == new:
                started.set()
                await go.wait()
            return await real_chunk(doc)

        monkeypatch.setattr(kb, "_chunk", held_chunk)
        job = await kb.start_refresh()
        await asyncio.wait_for(started.wait(), 20)
        await kb.delete_source(old)  # the user's `rag delete`
        go.set()
        done = await kb.wait_job(job["id"])
        sources = await stored(kb)
        assert new not in sources and old not in sources, (done["result"], sources)


async def test_a_refresh_cancelled_during_a_move_leaves_one_copy(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job is cancelled while the moved page is being written: the write (new copy
    stored, old one dropped) finishes as one, so the page is never stored twice."""
    site = Site(pages=docs(2, {0: CANON0}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        old, new = site.url("/docs/p0"), site.url("/docs/zero")
        names_canonical(site, "/docs/p0.html", "/docs/zero")
        real = kb.store.replace_source
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def slow_replace(source: str, *args: Any, **kwargs: Any) -> Any:
            if source == new:
                loop.call_soon_threadsafe(started.set)
                time.sleep(0.5)  # a big page's chunks (instrumentation only)
            return real(source, *args, **kwargs)

        monkeypatch.setattr(kb.store, "replace_source", slow_replace)
        job = await kb.start_refresh()
        await asyncio.wait_for(started.wait(), 20)
        done = await kb.cancel_job(job["id"])
        await asyncio.sleep(1.0)
        sources = await stored(kb)
        assert not (old in sources and new in sources), (done, sources)


async def test_an_update_at_the_canonical_url_keeps_where_the_page_was_found(
    kb: KnowledgeBase,
) -> None:
    """The canonical URL answers once with new text, and later goes: the page is still asked
    where the crawl found it (an update there used to forget that URL, and the live page
    was removed)."""
    pages = docs(2, {0: CANON0})
    pages["/docs/p0"] = pages["/docs/p0.html"]
    site = Site(pages=pages)
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        canon = site.url("/docs/p0")
        record = kb.store.get_source(canon)
        assert record is not None and record.fetched_from == site.url("/docs/p0.html")
        site.pages["/docs/p0"] = html("Page 0", "Updated text about giraffes.", head=CANON0)
        await kb.refresh()
        del site.pages["/docs/p0"]  # the canonical URL goes; p0.html still answers
        result = await kb.refresh()
        assert result.removed == 0, result
        now = await stored(kb)
        assert any(s in now for s in (canon, site.url("/docs/p0.html"))), now


# --------------------------------------------------------------------------- joins


def hold(site: Site, path: str = "/docs/p1.html") -> asyncio.Event:
    """From now on, requests for `path` wait until the returned event is set."""
    go = asyncio.Event()

    async def held(_r: web.Request) -> web.Response:
        await go.wait()
        return web.Response(text=site.pages[path], content_type="text/html")

    site.override[path] = held
    return go


async def test_ctrl_c_in_rag_jobs_wait_leaves_the_job_running(kb: KnowledgeBase) -> None:
    """`rag jobs --wait ID` follows a job; its Ctrl-C stops the wait, not the job (someone
    else's refresh or crawl)."""
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert len(await stored(kb)) == 3
        go = hold(site)
        job = await kb.start_refresh()
        await asyncio.sleep(0.3)
        args = argparse.Namespace(cancel=None, wait=job["id"], json=True)
        follow = asyncio.ensure_future(cli._cmd_jobs(kb, args))
        await asyncio.sleep(0.3)
        follow.cancel()  # what asyncio.run does on Ctrl-C
        with pytest.raises(asyncio.CancelledError):
            await follow
        state = (await kb.jobs())[0]["state"]
        go.set()
        await kb.wait_job(job["id"])
        assert state == "running", state


async def test_a_joined_client_is_not_cancelled_by_the_starters_ctrl_c(
    kb: KnowledgeBase,
) -> None:
    """An MCP `rag_refresh wait=true` joins the refresh a `rag refresh` started; the
    starter's Ctrl-C cancels that job, and the joined client then gets a refresh of its
    own, not "cancelled"."""
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert len(await stored(kb)) == 3
        go = hold(site)
        first = await cli._start_job(kb, kb.start_refresh())
        second = await kb.start_refresh()
        assert second["joined"] and second["id"] == first["id"]
        joiner = asyncio.ensure_future(kb.refresh_in_job())  # the service's `_refresh`
        follow = asyncio.ensure_future(cli._follow_job(kb, first, "Refreshing", "page"))
        await asyncio.sleep(0.3)
        follow.cancel()  # Ctrl-C in the starter's terminal
        with pytest.raises(asyncio.CancelledError):
            await follow
        go.set()
        try:
            result: Any = await asyncio.wait_for(joiner, 30)
        except RAGError as err:
            result = err
        assert isinstance(result, dict), f"the joined client got: {result}"


async def test_a_refresh_started_while_one_is_being_cancelled_is_not_a_join(
    kb: KnowledgeBase,
) -> None:
    """A refresh started while the running one is being cancelled starts anew instead of
    joining the job that is ending."""
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert len(await stored(kb)) == 3
        go = hold(site)
        first = await kb.start_refresh()
        await asyncio.sleep(0.3)
        cancelling = asyncio.ensure_future(kb.cancel_job(first["id"]))
        await asyncio.sleep(0)  # the cancel is under way (task.cancel() called)
        second = await kb.start_refresh()
        await cancelling
        go.set()
        done = await kb.wait_job(second["id"])
        assert done["state"] == "done", (second.get("joined"), done["state"])


# --------------------------------------------------------------------------- checkpoints


async def test_a_removal_finished_after_a_clean_stop_is_counted_by_the_resumed_job(
    crawl_settings: RAGSettings,
    counting_embed: CountingEmbedding,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The owner stops cleanly (`rag service stop`) while a removal is being written: the
    write ends after the job was cancelled, and its count still reaches the journal, so
    the resumed job reports the page it removed."""
    site = Site(pages=docs(3))
    async with running(site):
        kb = KnowledgeBase(crawl_settings, embed_model=counting_embed)
        await kb.open()
        await kb.resume_jobs()  # keeps a journal, as the store service does
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        del site.pages["/docs/p0.html"]
        real = kb.store.delete_source
        started = asyncio.Event()
        loop = asyncio.get_running_loop()

        def slow_delete(source: str) -> int:
            loop.call_soon_threadsafe(started.set)
            time.sleep(0.5)
            return real(source)

        monkeypatch.setattr(kb.store, "delete_source", slow_delete)
        job = await kb.start_refresh()
        await asyncio.wait_for(started.wait(), 20)
        await kb.aclose()  # the owner stops cleanly: jobs cancelled to be resumed
        journal = json.loads(
            (Path(crawl_settings.chromadb_persist_dir).resolve() / JOURNAL_FILE).read_text()
        )

        again = KnowledgeBase(crawl_settings, embed_model=counting_embed)
        await again.open()
        try:
            assert await again.resume_jobs() == [job["id"]], journal
            assert site.url("/docs/p0.html") not in await stored(again)
            done = await again.wait_job(job["id"])
        finally:
            await again.aclose()
        result = done["result"]
        assert result["removed_urls"] == [site.url("/docs/p0.html")], (journal, result)


async def test_two_moves_into_one_page_add_up_after_a_resume(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """p0.html and p1.html (stored under /docs/p0 and /docs/p1, both now 404) both name
    /docs/merged: two moves, one new record. A job resumed after them still has
    checked = unchanged + updated + moved + removed + errors."""
    canon1 = '<link rel="canonical" href="/docs/p1">'
    site = Site(pages=docs(3, {0: CANON0, 1: canon1}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert {site.url("/docs/p0"), site.url("/docs/p1")} <= set(await stored(kb))
        names_canonical(site, "/docs/p0.html", "/docs/merged")
        names_canonical(site, "/docs/p1.html", "/docs/merged")
        saved: list[dict[str, Any]] = []
        monkeypatch.setattr(refresh_module, "CHECKPOINT_EVERY_SEC", 0.0)  # every change
        first = await kb.refresh(checkpoint=saved.append)
        assert first.moved == 2, first
        resume = RefreshCheckpoint.parse(saved[-1])  # as a new owner reads it after kill -9
        r = await kb.refresh(resume=resume)
        parts = r.unchanged + r.updated + r.moved + r.removed + r.errors
        assert r.checked == parts, r


async def test_a_big_refresh_checkpoint_is_not_rewritten_after_every_removal(
    kb: KnowledgeBase,
) -> None:
    """The checkpoint holds every URL removed so far: written after each removal, N
    removals cost O(N^2) on the owner's event loop (60,000 earlier removals: 45-90 ms a
    write). It is written at most once a second (and 1 % of the loop), never per change."""
    site = Site(pages=docs(8))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        for i in range(6):
            del site.pages[f"/docs/p{i}.html"]
        earlier = [f"{site.base}/old/section{i // 100}/page-{i}.html" for i in range(60_000)]
        saved: list[dict[str, Any]] = []
        started = time.monotonic()
        done = await kb.refresh(checkpoint=saved.append, resume=RefreshCheckpoint(earlier))
        took = time.monotonic() - started
    assert done.removed == 60_006, done.removed
    assert len(saved) <= 1 + took / refresh_module.CHECKPOINT_EVERY_SEC, (len(saved), took)


@pytest.mark.parametrize(
    "canonical",
    [
        "{base}//private/docs/notes",  # page_key reads `//private` as a host: /docs/notes
        "/docs/%2e%2e/private/notes",  # a percent-encoded dot segment is not resolved
    ],
    ids=["double-slash", "encoded-dot-segment"],
)
async def test_a_move_cannot_leave_the_folder_by_another_spelling(
    kb: KnowledgeBase, canonical: str
) -> None:
    """p0.html (stored as /docs/p0, which now 404s) names a canonical URL that looks
    inside /docs/ but that a web server serves from /private/: the page is not moved
    there, and no refresh stores the private page's text."""
    pages = docs(2, {0: CANON0})
    pages["/private/docs/notes"] = pages["/private/notes"] = SECRET
    site = Site(pages=pages)
    like_nginx(site)
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        assert site.url("/docs/p0") in await stored(kb)
        names_canonical(site, "/docs/p0.html", canonical.format(base=site.base))
        first = await kb.refresh()
        second = await kb.refresh()
        now = titles(kb)
        assert "Private notes" not in now.values(), (first.moved_pages, second, now)


async def test_a_move_onto_a_stored_page_that_is_gone_does_not_lose_the_page(
    kb: KnowledgeBase,
) -> None:
    """p0.html (stored as /docs/p0, now 404) names /docs/merged, which is stored but gone
    itself (a stale canonical tag): the move stores p0's text there with p0.html as its
    fallback, so the page is not lost when /docs/merged is found gone."""
    pages = docs(2, {0: CANON0})
    pages["/docs/merged"] = html("Merged", "An older merged page.")
    site = Site(pages=pages)
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        await kb.ingest_page(site.url("/docs/merged"))
        del site.pages["/docs/merged"]
        names_canonical(site, "/docs/p0.html", "/docs/merged")
        result = await kb.refresh()
        now = titles(kb)
        assert "Page 0" in now.values(), (result.moved_pages, result.removed_urls, now)


# --------------------------------------------------------------------------- counts


async def test_a_page_updated_before_a_resume_and_moved_after_it_is_counted_once(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page stored anew before the owner was killed and moved after the resume counts
    once (moved), so checked = unchanged + updated + moved + removed + errors."""
    pages = docs(2, {0: CANON0})
    pages["/docs/p0"] = pages["/docs/p0.html"]
    site = Site(pages=pages)
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        site.pages["/docs/p0"] = html("Page 0", "Updated text about giraffes.", head=CANON0)
        saved: list[dict[str, Any]] = []
        monkeypatch.setattr(refresh_module, "CHECKPOINT_EVERY_SEC", 0.0)
        first = await kb.refresh(checkpoint=saved.append)
        assert first.updated == 1, first
        del site.pages["/docs/p0"]
        names_canonical(site, "/docs/p0.html", "/docs/zero")
        r = await kb.refresh(resume=RefreshCheckpoint.parse(saved[-1]))
        assert r.moved == 1, r
        parts = r.unchanged + r.updated + r.moved + r.removed + r.errors
        assert r.checked == parts, r


# --------------------------------------------------------------------------- joins


async def test_rag_refresh_does_not_leave_a_refresh_it_started_unfollowed(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rag refresh` joins another client's refresh three times, and each time that client's
    Ctrl-C interrupts it: `rag refresh` starts its own at most twice and follows it; it
    never leaves a refresh it started running with no one following it."""
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        go = hold(site)
        loop = asyncio.get_running_loop()
        real_start = kb.start_refresh
        calls = 0

        async def start_refresh(**kwargs: Any) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            if calls <= 3:  # another client's refresh lands first; its owner cancels it
                other = await real_start()
                loop.call_later(
                    0.3,
                    lambda: asyncio.ensure_future(kb.cancel_job(other["id"], interrupted=True)),
                )
            return await real_start(**kwargs)

        monkeypatch.setattr(kb, "start_refresh", start_refresh)
        code = await asyncio.wait_for(
            cli._cmd_refresh(kb, argparse.Namespace(background=False)), 30
        )
        left = [j["id"] for j in await kb.jobs() if j["state"] == "running"]
        go.set()
        for job_id in left:
            await kb.wait_job(job_id)
        assert not left, (code, calls, left)


async def test_a_users_cancel_is_not_undone_by_a_client_waiting_on_the_refresh(
    kb: KnowledgeBase,
) -> None:
    """A user's `rag jobs --cancel ID` stops the refresh: a client waiting on it (an MCP
    `rag_refresh wait=true` that joined) does not start a new one (it does after its
    starter's Ctrl-C only)."""
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        go = hold(site)
        job = await kb.start_refresh()
        waiter = asyncio.ensure_future(kb.refresh_in_job())  # the service's `_refresh`
        await asyncio.sleep(0.3)
        await kb.cancel_job(job["id"])  # the user's `rag jobs --cancel ID`
        await asyncio.sleep(0.5)
        left = [j["id"] for j in await kb.jobs() if j["state"] == "running"]
        go.set()
        with contextlib.suppress(Exception):  # only the jobs left running matter here
            await asyncio.wait_for(waiter, 30)
        assert not left, left
