"""The one fetch contract, run the same way on a web page (a real static server on
loopback) and on a local file: fetched, not modified, fetched again after a change, gone."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rag_app.config import RAGSettings
from rag_app.fetching import Fetched, FetchOutcome, Gone, NotModified, fetch_file, fetch_web
from rag_app.index.chroma_store import SourceRecord
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.static_site import page, serve_folder

FIRST = page("Kettle", "The kettle boils water in three minutes.")
SECOND = page("Kettle", "The kettle boils water in ninety seconds.")


@dataclass
class Source:
    """One source of either kind, with the file behind it."""

    kind: str
    file: Path
    fetch: Callable[[SourceRecord | None], Awaitable[FetchOutcome]]
    id: str


@pytest.fixture(params=["web", "file"])
async def kb_and_source(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
) -> AsyncIterator[tuple[KnowledgeBase, Source]]:
    local = settings.model_copy(
        update={"rag_allow_private_network": True, "rag_crawl_delay_sec": 0.0}
    )
    kb = KnowledgeBase(local, embed_model=counting_embed)
    await kb.open()
    root = tmp_path / "site"
    root.mkdir()
    file = root / "kettle.html"
    file.write_text(FIRST, encoding="utf-8")
    try:
        if request.param == "file":
            yield kb, Source("file", file, lambda old: fetch_file(file, old), file.as_uri())
        else:
            with serve_folder(root) as site:
                url = site.url("/kettle.html")
                crawler = kb.crawler()
                yield kb, Source("web", file, lambda old: fetch_web(crawler, url, old), url)
    finally:
        await kb.aclose()


def touch_later(file: Path, text: str) -> None:
    file.write_text(text, encoding="utf-8")
    later = time.time() + 10  # a newer modification time (and Last-Modified) than stored
    os.utime(file, (later, later))


async def test_fetched_not_modified_changed_and_gone(
    kb_and_source: tuple[KnowledgeBase, Source], counting_embed: CountingEmbedding
) -> None:
    kb, source = kb_and_source
    first = await source.fetch(None)
    assert isinstance(first, Fetched) and first.kind == source.kind
    assert first.source == source.id and "three minutes" in first.text
    assert first.title == "Kettle"
    stored = await kb._apply(first, None)
    assert stored.chunks >= 1 and not stored.unchanged
    record = await asyncio.to_thread(kb.store.get_source, source.id)
    assert record is not None and record.kind == source.kind

    embedded = counting_embed.texts
    again = await source.fetch(record)
    assert isinstance(again, NotModified) and again.source == source.id
    kept = await kb._apply(again, record)
    assert kept.unchanged and kept.chunks == stored.chunks
    assert counting_embed.texts == embedded  # not modified costs no embedding

    touch_later(source.file, SECOND)
    changed = await source.fetch(record)
    assert isinstance(changed, Fetched) and "ninety seconds" in changed.text
    await kb._apply(changed, record)
    hits = (await kb.retrieve("ninety seconds", mode="bm25")).hits
    assert hits and hits[0].source_url == source.id

    source.file.unlink()
    gone = await source.fetch(await asyncio.to_thread(kb.store.get_source, source.id))
    assert isinstance(gone, Gone) and gone.source == source.id and gone.reason


async def test_a_stored_mtime_rounded_to_the_microsecond_is_the_same_time(tmp_path: Path) -> None:
    """Chroma reads 1795657331.6852627 back as 1795657331.685263: still not modified."""
    file = tmp_path / "page.html"
    file.write_text(FIRST, encoding="utf-8")
    os.utime(file, ns=(1795657331685262700, 1795657331685262700))
    mtime = file.stat().st_mtime
    rounded = float(f"{mtime:.6f}")
    assert rounded != mtime  # the case that was read again every time
    same = SourceRecord(source=file.as_uri(), mtime=rounded, kind="file")
    assert isinstance(await fetch_file(file, same), NotModified)
    older = SourceRecord(source=file.as_uri(), mtime=mtime - 0.001, kind="file")
    assert isinstance(await fetch_file(file, older), Fetched)
