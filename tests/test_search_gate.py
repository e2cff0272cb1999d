"""Searches first: store writes wait for running searches, for a bounded time."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from pydantic import PrivateAttr

import rag_app.index.search_gate as search_gate
from rag_app.config import RAGSettings
from rag_app.index.search_gate import SEARCHES, SearchGate
from tests.conftest import CountingEmbedding


def _timed_wait(gate: SearchGate, limit: float | None = None) -> threading.Thread:
    """A writer thread that waits on `gate`; its start and end land in `thread.times`."""

    def run() -> None:
        thread.times.append(time.monotonic())  # type: ignore[attr-defined]
        gate.wait_idle(limit)
        thread.times.append(time.monotonic())  # type: ignore[attr-defined]

    thread = threading.Thread(target=run)
    thread.times = []  # type: ignore[attr-defined]
    thread.start()
    return thread


def _search_held_elsewhere(gate: SearchGate) -> tuple[threading.Thread, threading.Event]:
    """A search running on another thread until the returned event is set."""
    started, end = threading.Event(), threading.Event()

    def search() -> None:
        with gate.searching():
            started.set()
            end.wait(30)

    thread = threading.Thread(target=search)
    thread.start()
    started.wait(10)
    return thread, end


def test_a_writer_waits_until_the_running_search_ends() -> None:
    gate = SearchGate()
    with gate.searching():
        writer = _timed_wait(gate, limit=30)
        time.sleep(0.3)
        assert writer.is_alive()  # still waiting
        ended = time.monotonic()
    writer.join(10)
    assert not writer.is_alive()
    assert writer.times[1] >= ended  # type: ignore[attr-defined]
    assert gate.waited_sec >= 0.25


def test_a_writer_waits_no_longer_than_its_limit() -> None:
    gate = SearchGate()
    with gate.searching():
        writer = _timed_wait(gate, limit=0.2)
        writer.join(10)
        start, end = writer.times  # type: ignore[attr-defined]
        assert 0.15 <= end - start < 5


def test_no_search_running_means_no_wait_and_nested_searches_count() -> None:
    gate = SearchGate()
    start = time.monotonic()
    gate.wait_idle(30)
    assert time.monotonic() - start < 1
    with gate.searching():
        with gate.searching():
            pass
        writer = _timed_wait(gate, limit=30)
        time.sleep(0.2)
        assert writer.is_alive()  # one search is still running
    writer.join(10)
    assert not writer.is_alive()


def test_one_write_waits_no_longer_than_its_budget_in_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Searches that never stop hold each slice up to its limit, until the write's
    budget is spent; then the remaining slices go at once (a huge page's write must not
    outlast the store's stall watchdog)."""
    monkeypatch.setattr(search_gate, "MAX_WAIT_SEC", 0.1)
    monkeypatch.setattr(search_gate, "MAX_WAIT_PER_WRITE_SEC", 0.35)
    gate = SearchGate()
    waits = search_gate.WriteWaits(gate)
    other, end = _search_held_elsewhere(gate)
    start = time.monotonic()
    slices = []
    for _ in range(20):
        before = time.monotonic()
        waits.before_slice()
        slices.append(time.monotonic() - before)
    total = time.monotonic() - start
    end.set()
    other.join(10)
    assert 0.3 <= total < 3
    assert all(s >= 0.05 for s in slices[:3])
    assert all(s < 0.05 for s in slices[5:])


async def test_a_writer_on_the_event_loop_thread_never_waits() -> None:
    """Waiting there would stop the very searches it waits for."""
    gate = SearchGate()
    other, end = _search_held_elsewhere(gate)
    start = time.monotonic()
    gate.wait_idle(30)
    assert time.monotonic() - start < 1
    assert await asyncio.to_thread(gate.wait_idle, 0.2) >= 0.15  # off the loop it waits
    end.set()
    other.join(10)


class PausedQueries(CountingEmbedding):
    """Query embeddings wait for `_go` (set from the test) after setting `_entered`."""

    _entered: asyncio.Event = PrivateAttr(default_factory=asyncio.Event)
    _go: asyncio.Event = PrivateAttr(default_factory=asyncio.Event)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self._entered.set()
        await self._go.wait()
        return await super()._aget_query_embedding(query)


async def test_a_page_written_while_a_search_runs_lands_after_it(
    settings: RAGSettings, builtin_embed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real knowledge base: the write of a page embedded while a search is between its
    steps reaches Chroma only when the search has ended (the write waits for it)."""
    from rag_app.knowledge import KnowledgeBase

    monkeypatch.setattr(search_gate, "MAX_WAIT_SEC", 30.0)
    embed = PausedQueries(builtin_embed)
    kb = KnowledgeBase(settings, embed_model=embed)
    await kb.open()
    try:
        await kb.ingest_text("file:///n/a.md", "# A\n\nりんごの話。", kind="file")
        before = kb.store.chroma.count()
        search = asyncio.create_task(kb.retrieve("りんご"))
        await asyncio.wait_for(embed._entered.wait(), 30)
        waited = SEARCHES.waited_sec
        write = asyncio.create_task(
            kb.ingest_text("file:///n/b.md", "# B\n\nみかんの話。", kind="file")
        )
        deadline = time.monotonic() + 30
        while SEARCHES.waiting == 0 and not write.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # B is embedded, then its write waits
        assert SEARCHES.waiting == 1
        assert kb.store.chroma.count() == before
        embed._go.set()
        result = await asyncio.wait_for(search, 30)
        await asyncio.wait_for(write, 30)
        assert kb.store.chroma.count() > before
        assert SEARCHES.waited_sec > waited
        assert all("b.md" not in h.source_url for h in result.hits)
    finally:
        embed._go.set()
        await kb.aclose()


def test_inside_a_search_nothing_waits_for_searches_and_stepping_aside_lets_writers_go() -> None:
    gate = SearchGate()
    with gate.searching():
        start = time.monotonic()
        assert gate.wait_idle(30) == 0.0  # a search's own thread never waits for itself
        assert time.monotonic() - start < 1
        with gate.stepping_aside():
            writer = _timed_wait(gate, limit=30)
            writer.join(10)
            assert not writer.is_alive()  # nothing counted as running meanwhile
        writer = _timed_wait(gate, limit=30)
        time.sleep(0.2)
        assert writer.is_alive()  # running again after stepping aside
    writer.join(10)


def test_stepping_aside_outside_a_search_changes_nothing() -> None:
    gate = SearchGate()
    other, end = _search_held_elsewhere(gate)
    with gate.stepping_aside():  # this thread runs no search
        writer = _timed_wait(gate, limit=30)
        time.sleep(0.2)
        assert writer.is_alive()
    end.set()
    writer.join(10)
    other.join(10)


async def test_a_search_catching_up_does_not_wait_for_a_writer_that_waits_for_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two machines on one Chroma. Here a page is being written (the store's write lock
    held, its first slice waiting for the running search), and the search catches up with
    the other machine's change, which needs the write lock: the search steps aside, so the
    writer goes on at once instead of waiting out its limit, and then the search."""
    from tests.test_stored_rows import _machines, _node

    monkeypatch.setattr(search_gate, "MAX_WAIT_SEC", 5.0)
    monkeypatch.setattr(search_gate, "MAX_WAIT_PER_WRITE_SEC", 30.0)
    other, this = _machines(tmp_path)
    other.replace_source("theirs", [_node("t0", "theirs", "their page")], None)
    writer = threading.Thread(
        target=this.replace_source, args=("mine", [_node("m0", "mine", "my page")], None)
    )
    with SEARCHES.searching():
        writer.start()
        deadline = time.monotonic() + 10
        while SEARCHES.waiting == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert SEARCHES.waiting == 1  # holding the write lock, waiting for the search
        start = time.monotonic()
        assert await asyncio.to_thread(this.catch_up) == 1
        took = time.monotonic() - start
    writer.join(10)
    assert took < 3.0  # 5 s and more when the two wait for each other
    assert this.chunk_ids("theirs") and this.chunk_ids("mine")


async def test_one_page_write_waits_one_budget_in_all(
    kb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewriting a page is one write: its upserts and its deletes of stale chunks share
    one budget of waits (the stall watchdog times the write as a whole)."""
    import rag_app.index.chroma_store as chroma_store

    old = "\n\n".join(f"## 節{i}\n\n段落{i}。" + f"みかん{i}の話 " * 40 for i in range(20))
    new = "\n\n".join(f"## 章{i}\n\n別の段落{i}。" + f"りんご{i}の話 " * 40 for i in range(20))
    monkeypatch.setattr(chroma_store, "WRITE_SLICE", 1)
    monkeypatch.setattr(search_gate, "MAX_WAIT_SEC", 0.05)
    monkeypatch.setattr(search_gate, "MAX_WAIT_PER_WRITE_SEC", 0.5)
    await kb.ingest_text("file:///n/big.md", old, kind="file")
    waited = SEARCHES.waited_sec
    thread, end = _search_held_elsewhere(SEARCHES)
    try:
        result = await kb.ingest_text("file:///n/big.md", new, kind="file")
    finally:
        end.set()
        thread.join(10)
    assert result.chunks >= 20  # about as many slices to write as to delete
    assert 0.4 <= SEARCHES.waited_sec - waited <= 0.56


def test_only_an_embedded_chroma_waits_for_searches(tmp_path: Any, chroma_server: int) -> None:
    """An HTTP client's calls hold no lock of this process: its writes never wait."""
    import chromadb

    from rag_app.index.chroma_store import ChromaStore

    embedded = ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_gate", model_name="m", dimension=3
    )
    remote = ChromaStore(
        chromadb.HttpClient(host="127.0.0.1", port=chroma_server),
        "kb_gate",
        model_name="m",
        dimension=3,
    )
    assert embedded.gate is SEARCHES
    assert remote.gate is None
    thread, end = _search_held_elsewhere(SEARCHES)
    try:
        start = time.monotonic()
        waits = remote.write_waits()
        for _ in range(5):
            waits.before_slice()
        assert time.monotonic() - start < 0.05
    finally:
        end.set()
        thread.join(10)
