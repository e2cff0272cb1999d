"""Exact vector search: the in-memory copy equals Chroma's chunks and exact ranking."""

from __future__ import annotations

import shutil
from pathlib import Path

import chromadb
import numpy as np
import pytest
from chromadb.api.shared_system_client import SharedSystemClient
from llama_index.core.schema import TextNode

from rag_app.config import RAGSettings
from rag_app.index.bm25_index import BM25Index
from rag_app.index.chroma_store import ChromaStore
from rag_app.index.exact_vectors import ExactVectors
from rag_app.index.store import KnowledgeStore
from rag_app.knowledge import KnowledgeBase
from tests.conftest import SAMPLES, CountingEmbedding


def _brute(matrix: np.ndarray, ids: list[str], q: np.ndarray, k: int) -> list[str]:
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    d = 1.0 - unit.astype(np.float64) @ (q / np.linalg.norm(q)).astype(np.float64)
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (round(d[i], 9), ids[i]))[:k]]


def test_search_equals_brute_force_after_upserts_and_deletes() -> None:
    rng = np.random.default_rng(1)
    exact = ExactVectors(8, capacity=4)  # grows several times
    vectors = rng.standard_normal((300, 8)).astype(np.float32)
    ids = [f"c{i:03d}" for i in range(300)]
    exact.upsert(ids, vectors, [f"s{i % 7}" for i in range(300)])
    gone = set(ids[::3])
    exact.delete([*sorted(gone), "never-there"])
    vectors[5] = rng.standard_normal(8)  # replaced in place
    exact.upsert([ids[5]], [vectors[5]], ["s5"])
    keep = [i for i, c in enumerate(ids) if c not in gone]
    assert len(exact) == len(keep) and exact.ids() == {ids[i] for i in keep}
    for _ in range(20):
        q = rng.standard_normal(8).astype(np.float32)
        got = exact.search(q, 10)
        assert [c for c, _ in got] == _brute(vectors[keep], [ids[i] for i in keep], q, 10)
        assert all(0.0 <= d <= 2.0 for _, d in got)


def test_source_filter_ties_and_identical_rows() -> None:
    exact = ExactVectors(3)
    exact.upsert(["b", "a", "c"], [[1, 0, 0], [1, 0, 0], [0, 1, 0]], ["x", "x", "y"])
    assert [c for c, _ in exact.search([1, 0, 0], 3)] == ["a", "b", "c"]  # a tie goes by id
    assert exact.search([1, 0, 0], 3, sources=["y"]) == [("c", pytest.approx(1.0))]
    assert exact.search([1, 0, 0], 3, sources=["nowhere"]) == []
    assert exact.ids_of_source("x") == {"a", "b"}
    with pytest.raises(ValueError, match="dims"):
        exact.upsert(["d"], [[1.0, 0.0]], ["x"])


async def test_store_searches_exactly_and_stays_in_step_with_chroma(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    try:
        await kb.index_dir(docs)
        chroma = kb.store.chroma
        assert chroma.exact is not None
        assert chroma.exact.ids() == chroma.all_ids()
        q = counting_embed.get_query_embedding("スライムの攻撃力")
        hnsw = chroma.collection.query(query_embeddings=[q], n_results=5, include=["distances"])
        exact = kb.store.query_ids(q, 5)
        assert [c for c, _ in exact] == hnsw["ids"][0]  # a small store: HNSW is exact too
        assert [d for _, d in exact] == pytest.approx(hnsw["distances"][0], abs=1e-5)
        victim = next(iter(kb.bm25.sources()))
        await kb.delete_source(victim)
        assert chroma.exact.ids() == chroma.all_ids()
        assert not chroma.exact.ids_of_source(victim)
        await kb.reindex()  # a new collection, filled through upserts: its copy follows
        renewed = kb.store.chroma
        assert renewed is not chroma and renewed.exact is not None
        assert renewed.exact.ids() == renewed.all_ids() == chroma.exact.ids()
    finally:
        await kb.aclose()
    # a new owner loads the copy from Chroma at open
    SharedSystemClient.clear_system_cache()
    again = KnowledgeBase(settings, embed_model=counting_embed)
    await again.open()
    try:
        assert again.store.chroma.exact is not None
        assert again.store.chroma.exact.ids() == again.store.chroma.all_ids()
        assert (await again.retrieve("りゅうおう", mode="vector")).hits
    finally:
        await again.aclose()


def test_a_store_past_the_size_switches_to_hnsw_and_other_writers_are_mirrored(
    tmp_path: Path,
) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    bm25 = BM25Index(tmp_path / "bm25")
    store = KnowledgeStore(
        client, "kb_test", bm25, model_name="m", dimension=4, poll_changes=False,
        exact_max_chunks=5,
    )  # fmt: skip
    chroma = store.chroma
    assert chroma.exact is not None  # empty: ready at once
    # another writer (no copy of its own), seen through sync_source (the change-log path)
    other = ChromaStore(client, "kb_test", model_name="m", dimension=4)

    def node(i: str, source: str, vec: list[float]) -> TextNode:
        return TextNode(id_=i, text=i, embedding=vec, metadata={"source_url": source})

    other.upsert_nodes([node("o1", "other", [1, 0, 0, 0]), node("o2", "other", [0, 1, 0, 0])])
    store.sync_source("other")
    assert chroma.exact.ids_of_source("other") == {"o1", "o2"}
    other.delete_ids(["o2"])
    store.sync_source("other")
    assert chroma.exact.ids() == {"o1"}
    chroma.exact.delete(["o1"])  # drift (a bug, a lost update): check puts it back
    store.check(repair=False)
    assert chroma.exact.ids() == {"o1"}
    other.upsert_nodes([node(f"n{i}", "new", [1, 1, 0, i]) for i in range(6)])
    store.sync_source("new")
    assert chroma.exact is None  # 7 chunks > 5: Chroma's HNSW answers from now on
    assert len(store.query_ids([1, 1, 0, 0], 3)) == 3


def test_writes_made_while_the_copy_is_read_are_settled_when_it_is_adopted(
    tmp_path: Path,
) -> None:
    store = ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_load", model_name="m", dimension=3,
        exact_max_chunks=100,
    )  # fmt: skip

    def node(i: int) -> TextNode:
        return TextNode(id_=f"c{i}", text=f"t{i}", embedding=[1.0, float(i), 0.5],
                        metadata={"source_url": f"s{i % 3}"})  # fmt: skip

    store.upsert_nodes([node(i) for i in range(10)])
    store.exact = None  # as a store opened with chunks in it: the copy is read in the background
    copy = store.read_exact()
    assert copy is not None and copy.ids() == {f"c{i}" for i in range(10)}
    store.upsert_nodes([node(10), node(11)])  # written while the copy was being read
    store.delete_ids(["c0", "c1", "c2"])
    store.adopt_exact(copy)
    assert store.exact is copy and copy.ids() == store.all_ids()
    assert store.query_ids([1.0, 11.0, 0.5], 1)[0][0] == "c11"
    store.delete_ids(["c11"])  # adopted: writes update it again
    assert "c11" not in copy.ids()
