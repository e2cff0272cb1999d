"""`rag refresh` removes what is really gone and nothing else: a page stored under a
canonical URL is asked for where it was found, a site answering 404/410 to everything
keeps its pages, a page now `noindex` is removed, a redirect to another site stores
nothing, and a page deleted while the refresh runs stays deleted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from rag_app.config import RAGSettings
from rag_app.crawl_options import CrawlOptions
from rag_app.knowledge import SITE_GONE_MIN, KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.programmable_site import Site, html, running

DEEP = CrawlOptions(max_depth=3)


@pytest.fixture
def crawl_settings(settings: RAGSettings) -> RAGSettings:
    return settings.model_copy(
        update={
            "rag_allow_private_network": True,
            "rag_crawl_delay_sec": 0.0,
            "rag_crawl_timeout_sec": 3.0,
        }
    )


@pytest.fixture
async def kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    base = KnowledgeBase(crawl_settings, embed_model=counting_embed)
    await base.open()
    yield base
    await base.aclose()


def docs(n: int, heads: dict[int, str] | None = None) -> dict[str, str]:
    pages = {"/docs/index.html": html("Home", "Welcome.", tuple(f"p{i}.html" for i in range(n)))}
    for i in range(n):
        pages[f"/docs/p{i}.html"] = html(
            f"Page {i}", f"Distinct text number {i} about topic{i}.", head=(heads or {}).get(i, "")
        )
    return pages


async def stored(kb: KnowledgeBase) -> list[str]:
    return sorted((await kb.stats()).sources)


async def test_a_page_stored_under_a_canonical_url_that_404s_is_kept_and_updated(
    kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    """p0.html names /docs/p0 as canonical, which the server does not serve: it is stored
    under /docs/p0, and a refresh asks p0.html again (it used to ask /docs/p0, get 404
    and remove a live page, which the next crawl embedded again, round after round)."""
    site = Site(pages=docs(2, {0: '<link rel="canonical" href="/docs/p0">'}))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        before = await stored(kb)
        assert site.url("/docs/p0") in before
        result = await kb.refresh()
        assert (result.removed, result.errors) == (0, 0), result
        assert await stored(kb) == before
        assert ("/docs/p0", 404) not in site.statuses
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


async def test_a_page_redirected_to_another_site_stores_nothing(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> None:
    site = Site(pages=docs(2))
    other = Site(pages={"/evil.html": html("Evil", "Completely foreign content elsewhere.")})
    follow = crawl_settings.model_copy(update={"rag_follow_redirects": True})
    kb = KnowledgeBase(follow, embed_model=counting_embed)
    await kb.open()
    try:
        async with running(site), running(other):
            other.base = other.base.replace("127.0.0.1", "localhost")  # another host
            await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
            site.override["/docs/p0.html"] = lambda _r: web.Response(
                status=301, headers={"Location": other.url("/evil.html")}
            )
            result = await kb.refresh()
            assert result.errors == 1 and "another site" in result.error_details[0]["reason"]
            assert not (await kb.retrieve("foreign content elsewhere", mode="bm25")).hits
            assert site.url("/docs/p0.html") in await stored(kb)
    finally:
        await kb.aclose()


async def test_a_page_deleted_while_the_refresh_runs_stays_deleted(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> None:
    one_at_a_time = crawl_settings.model_copy(update={"rag_crawl_concurrency": 1})
    kb = KnowledgeBase(one_at_a_time, embed_model=counting_embed)
    await kb.open()
    site = Site(pages=docs(3))
    try:
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
    finally:
        await kb.aclose()


async def test_a_second_refresh_while_one_runs_is_the_same_job(kb: KnowledgeBase) -> None:
    site = Site(pages=docs(2))
    async with running(site):
        await kb.ingest_from_index(site.url("/docs/index.html"), options=DEEP)
        go = asyncio.Event()

        async def held(_r: web.Request) -> web.Response:
            await go.wait()
            return web.Response(status=404)

        site.everything = held
        first = await kb.start_refresh()
        second = await kb.start_refresh()
        assert second["id"] == first["id"]
        go.set()
        done = await kb.wait_job(first["id"])
        assert done["state"] == "done"
        third = await kb.start_refresh()
        assert third["id"] != first["id"]
        await kb.wait_job(third["id"])
