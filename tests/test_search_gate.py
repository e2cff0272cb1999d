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
    with gate.searching():
        start = time.monotonic()
        slices = []
        for _ in range(20):
            before = time.monotonic()
            waits.before_slice()
            slices.append(time.monotonic() - before)
        total = time.monotonic() - start
    assert 0.3 <= total < 3
    assert all(s >= 0.05 for s in slices[:3])
    assert all(s < 0.05 for s in slices[5:])


async def test_a_writer_on_the_event_loop_thread_never_waits() -> None:
    """Waiting there would stop the very searches it waits for."""
    gate = SearchGate()
    with gate.searching():
        start = time.monotonic()
        gate.wait_idle(30)
        assert time.monotonic() - start < 1


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
