"""The in-memory chunk orders that let a search read a hit's neighbours with the hit."""

from __future__ import annotations

import threading
from pathlib import Path

import chromadb
from llama_index.core.schema import TextNode

from rag_app.index.bm25_index import BM25Index
from rag_app.index.chroma_store import ChromaStore, SourceRecord
from rag_app.index.chunk_orders import ChunkOrder, ChunkOrders
from rag_app.index.store import KnowledgeStore


def test_orders_are_read_once_and_forgotten_on_a_write() -> None:
    reads: list[list[str]] = []

    def load(missing: list[str]) -> dict[str, list[str]]:
        reads.append(missing)
        return {s: [f"{s}-{i}" for i in range(3)] for s in missing if s != "norecord"}

    orders = ChunkOrders()
    got = orders.get(["a", "b", "a", "norecord"], load)
    assert got["a"].ids == ("a-0", "a-1", "a-2") and got["norecord"].ids == ()
    assert reads == [["a", "b", "norecord"]]
    orders.get(["b", "a"], load)
    assert len(reads) == 1  # from memory
    orders.forget(["a"])
    orders.get(["a", "b"], load)
    assert reads[-1] == ["a"]


def test_a_load_that_raced_a_write_is_used_once_and_not_kept() -> None:
    orders = ChunkOrders()
    entered, release = threading.Event(), threading.Event()

    def slow_old(missing: list[str]) -> dict[str, list[str]]:
        entered.set()
        release.wait(5)
        return {"a": ["old-0", "old-1"]}

    result: dict[str, ChunkOrder] = {}
    reader = threading.Thread(target=lambda: result.update(orders.get(["a"], slow_old)))
    reader.start()
    assert entered.wait(5)
    orders.forget(["a"])  # a writer replaced the record while the old one was being read
    release.set()
    reader.join(5)
    assert result["a"].ids == ("old-0", "old-1")
    again = orders.get(["a"], lambda missing: {"a": ["new-0"]})
    assert again["a"].ids == ("new-0",)


def test_memory_is_bounded_by_the_ids_held() -> None:
    orders = ChunkOrders(maxsize=20)
    orders.get([f"s{i}" for i in range(50)], lambda m: {s: [s] for s in m})
    asked: list[str] = []
    orders.get(["s0", "s49"], lambda m: asked.extend(m) or {s: [s] for s in m})
    assert asked == ["s0"]  # the oldest went, the newest stayed
    huge = {"big": [f"b{i}" for i in range(100)]}
    assert len(orders.get(["big"], lambda m: huge)["big"].ids) == 100  # used, not kept
    asked.clear()
    orders.get(["big", "s49"], lambda m: asked.extend(m) or huge)
    assert asked == ["big"]


def test_window_clips_at_the_start_and_knows_unknown_ids() -> None:
    order = ChunkOrder.of([f"c{i}" for i in range(6)])
    assert order.window("c1", 2) == (range(0, 4), ["c0", "c1", "c2", "c3"])
    assert order.window("c5", 1) == (range(4, 7), ["c4", "c5"])
    assert order.window("zz", 1) is None


def test_a_source_re_synced_from_another_writer_is_read_in_its_new_order(
    tmp_path: Path,
) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = KnowledgeStore(
        client, "kb_orders", BM25Index(tmp_path / "bm25"), model_name="m", dimension=3,
        poll_changes=False,
    )  # fmt: skip
    other = ChromaStore(client, "kb_orders", model_name="m", dimension=3)  # another writer

    def write(texts: list[str]) -> None:
        nodes = [
            TextNode(id_=t, text=t, embedding=[1.0, i, 0.5], metadata=_meta(i))
            for i, t in enumerate(texts)
        ]
        stale = sorted(set(other.ids_for_source("src")) - set(texts))
        if stale:
            other.delete_ids(stale)
        other.upsert_nodes(nodes)
        other.put_source(SourceRecord("src", chunk_count=len(texts), chunk_ids=" ".join(texts)))
        store.sync_source("src")

    write(["a", "b", "c"])
    _, near = store.nodes_near(["a"], [1])
    assert sorted((c.chunk_index, c.text) for c in near.chunks) == [(0, "a"), (1, "b")]
    write(["x", "a", "c"])  # one chunk put in front, one removed
    _, near = store.nodes_near(["a"], [1])
    assert sorted((c.chunk_index, c.text) for c in near.chunks) == [(0, "x"), (1, "a"), (2, "c")]
    assert near.asked == {"src": {0, 1, 2}}


def _meta(index: int) -> dict[str, object]:
    return {"source_url": "src", "chunk_index": index, "heading_path": ""}
