"""Re-crawls of a site whose pages share text (a stored copy, a followed redirect), `rag
read` racing the first crawl, and `rag delete -r` edge cases, against a real
programmable site and a real knowledge base."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from rag_app.config import RAGSettings
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.programmable_site import Site, html, running
from tests.refresh_site import DEEP, loopback_settings, opened, stored


@pytest.fixture
def crawl_settings(settings: RAGSettings) -> RAGSettings:
    return loopback_settings(settings, rag_crawl_concurrency=1)  # pages in link order


@pytest.fixture
async def kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    async with opened(crawl_settings, counting_embed) as base:
        yield base


@pytest.fixture
async def redirect_kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    follows = crawl_settings.model_copy(update={"rag_follow_redirects": True})
    async with opened(follows, counting_embed) as base:
        yield base


async def _holding(kb: KnowledgeBase, word: str) -> list[str]:
    """The stored sources whose text holds `word`."""
    out = []
    for source in await stored(kb):
        read = await kb.read_source(source, max_chars=10_000)
        if word in read.text:
            out.append(source)
    return out


def redirect(to: str) -> Any:
    return lambda _r: web.Response(status=301, headers={"Location": to})


async def test_a_start_page_whose_text_a_stored_copy_also_has_still_leads_the_crawl(
    kb: KnowledgeBase,
) -> None:
    """A stored copy of the start page's text under another URL does not stop the crawl: a
    page taken for a duplicate still has its links followed (the third crawl stored
    nothing and missed a new page)."""
    site = Site(
        pages={
            "/docs/index.html": html("Home", "Welcome home.", ("about.html", "guide.html")),
            "/docs/about.html": html("About", "About us aboutword."),
            "/docs/guide.html": html("Guide", "The guide guideword."),
        }
    )
    async with running(site):
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
        site.pages["/docs/about.html"] = site.pages["/docs/index.html"]  # fallback copy
        await kb.ingest_from_index(start, options=DEEP)
        assert await _holding(kb, "aboutword") == []  # about.html now holds the copy
        site.pages["/docs/guide.html"] = html("Guide", "The guide guideword.", ("new.html",))
        site.pages["/docs/new.html"] = html("New", "A brand new page newpageword.")
        third = await kb.ingest_from_index(start, options=DEEP)
        assert site.url("/docs/new.html") in await stored(kb), third


async def test_a_stored_page_now_redirecting_to_a_seen_page_keeps_no_stale_text(
    redirect_kb: KnowledgeBase,
) -> None:
    """A stored page that now redirects to a page already met holds what it serves now, as
    a refresh would store it (it kept its stale text)."""
    kb = redirect_kb
    site = Site(
        pages={
            "/docs/index.html": html("Home", "Welcome.", ("b.html", "a.html")),
            "/docs/a.html": html("A", "Old page alphaword."),
            "/docs/b.html": html("B", "The page betaword."),
        }
    )
    async with running(site):
        start = site.url("/docs/index.html")
        await kb.ingest_from_index(start, options=DEEP)
        assert await _holding(kb, "alphaword") == [site.url("/docs/a.html")]
        del site.pages["/docs/a.html"]
        site.override["/docs/a.html"] = redirect("/docs/b.html")
        second = await kb.ingest_from_index(start, options=DEEP)
        holding = await _holding(kb, "alphaword")
    assert holding == [], (second, holding)


async def test_rag_read_off_the_loop_does_not_make_a_second_crawler(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> None:
    """`rag read` racing the first crawl makes no second crawler (the URL's normal form was
    worked out in a thread, which built a crawler of its own)."""
    import time

    from rag_app.crawl.crawler import WebCrawler
    from rag_app.errors import UnknownSourceError

    made: list[WebCrawler] = []

    def slow_factory(settings: RAGSettings) -> WebCrawler:
        time.sleep(0.3)
        made.append(WebCrawler(settings))
        return made[-1]

    kb = KnowledgeBase(crawl_settings, embed_model=counting_embed, crawler_factory=slow_factory)
    await kb.open()
    try:

        async def read() -> None:
            with pytest.raises(UnknownSourceError):
                await kb.read_source("http://example.com/page")

        async def crawl_side() -> WebCrawler:
            await asyncio.sleep(0.1)  # the read's thread is inside the factory
            return kb.crawler()

        _, first = await asyncio.gather(read(), crawl_side())
        assert kb.crawler() is first and len(made) == 1, made
    finally:
        await kb.aclose()
        for crawler in made:
            await crawler.close()


async def test_rag_delete_r_of_a_folder_whose_own_name_is_stored_removes_its_files(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """`rag delete -r` of a folder whose own name is also stored (a file that became a
    folder) removes that record and the folder's files."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "guide.md").write_text("# Guide\n\nThe old single file oldfileword.\n")
    await kb.index_dir(root)
    (root / "guide.md").unlink()
    (root / "guide.md").mkdir()
    (root / "guide.md" / "a.md").write_text("# A\n\nPart a partaword.\n")
    (root / "guide.md" / "b.md").write_text("# B\n\nPart b partbword.\n")
    await kb.index_dir(root / "guide.md")
    assert len(await stored(kb)) == 3
    await kb.delete_source(str(root / "guide.md"), folder=True)
    left = await stored(kb)
    assert not [s for s in left if "/guide.md/" in s], left


async def test_the_delete_command_named_for_a_removed_folder_can_be_pasted(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """The `rag delete -r` command named for a removed folder is quoted for the shell (a
    path with a space)."""
    import re
    import shlex

    from rag_app.errors import RAGError

    notes = tmp_path / "old notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nSome text here.\n")
    await kb.index_dir(notes)
    for file in notes.iterdir():
        file.unlink()
    notes.rmdir()
    with pytest.raises(RAGError) as err:
        await kb.index_dir(str(notes))
    command = re.search(r"`(rag delete[^`]*)`", str(err.value))
    assert command is not None, str(err.value)
    assert shlex.split(command.group(1)) == ["rag", "delete", "-r", str(notes)], command.group(1)
