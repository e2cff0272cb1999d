"""The in-memory copy of stored rows: a search reads what Chroma holds, never an older row."""

from __future__ import annotations

from pathlib import Path

import chromadb
from llama_index.core.schema import TextNode

from rag_app.index.bm25_index import BM25Index
from rag_app.index.chroma_store import ChromaStore
from rag_app.index.store import KnowledgeStore
from rag_app.index.stored_rows import StoredRows


def test_a_fill_read_before_a_write_is_dropped() -> None:
    rows = StoredRows()
    since = rows.generation  # a reader starts its Chroma read ...
    rows.forget(["a"])  # ... a writer changes "a" meanwhile ...
    assert not rows.fill({"a": ("old", {})}, since)  # ... so what it read is not kept
    assert rows.get(["a"]) == ({}, ["a"])
    since = rows.generation
    assert rows.fill({"a": ("new", {"k": 1})}, since)
    rows.put(["b"], ["bee"], [None])
    assert rows.get(["a", "b", "c"]) == ({"a": ("new", {"k": 1}), "b": ("bee", {})}, ["c"])


def _node(i: str, source: str, text: str, title: str = "") -> TextNode:
    meta = {"source_url": source, "chunk_index": int(i[-1]), "title": title}
    return TextNode(id_=i, text=text, embedding=[1.0, float(i[-1]), 0.5], metadata=meta)


def test_reads_match_chroma_through_writes_deletes_and_another_writer(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = KnowledgeStore(
        client, "kb_rows", BM25Index(tmp_path / "bm25"), model_name="m", dimension=3,
        poll_changes=False, exact_max_chunks=100,
    )  # fmt: skip
    chroma = store.chroma
    assert chroma.rows is not None  # an empty store holds its rows from the start
    chroma.upsert_nodes([_node("a1", "s", "日本語のテキスト"), _node("a2", "s", "two")])
    assert len(chroma.rows) == 2  # what was written, as written
    [got] = chroma.get_nodes(["a1"])
    assert got.get_content() == "日本語のテキスト" and got.metadata["chunk_index"] == 1

    retitled = _node("a1", "s", "日本語のテキスト", title="new title")
    chroma.upsert_nodes([retitled], stored={"a1"})  # metadata only: read again in full
    assert chroma.get_nodes(["a1"])[0].metadata["title"] == "new title"
    nodes, pieces = chroma.nodes_and_sections(["a2", "a1"], ["a1"])
    assert [n.node_id for n in nodes] == ["a2", "a1"] and pieces[0].text == "日本語のテキスト"

    chroma.delete_ids(["a2"])
    assert chroma.get_nodes(["a2"]) == [] and chroma.rows.get(["a2"])[1] == ["a2"]

    other = ChromaStore(client, "kb_rows", model_name="m", dimension=3)  # another machine
    other.upsert_nodes([_node("a1", "s", "日本語のテキスト", title="other's title")], {"a1"})
    store.sync_source("s")  # what the change log does for a source another writer changed
    assert chroma.get_nodes(["a1"])[0].metadata["title"] == "other's title"


def test_a_reopened_store_reads_its_rows_into_memory(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    first = ChromaStore(client, "kb_load", model_name="m", dimension=3, exact_max_chunks=100)
    first.upsert_nodes([_node(f"c{i}", f"s{i % 2}", f"text {i}") for i in range(10)])
    store = KnowledgeStore(
        client, "kb_load", BM25Index(tmp_path / "bm25"), model_name="m", dimension=3,
        poll_changes=False, exact_max_chunks=100,
    )  # fmt: skip
    assert store.chroma.rows is None  # not empty: read in the background
    store.load_exact_vectors()
    rows = store.chroma.rows
    assert rows is not None and len(rows) == 10
    assert rows.get(["c3"])[0]["c3"][0] == "text 3"
    store.chroma.upsert_nodes([_node(f"n{i}", "big", "x") for i in range(91)])
    assert store.chroma.rows is None and store.chroma.exact is None  # past the limit: off
    assert len(store.chroma.get_nodes(["c3", "n5"])) == 2  # read from Chroma
