"""The in-memory copy of stored rows: a search reads what Chroma holds, never an older row."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import chromadb
import pytest
from llama_index.core.schema import TextNode

from rag_app.config import RAGSettings
from rag_app.index import store as store_module
from rag_app.index.bm25_index import BM25Index
from rag_app.index.chroma_store import ChromaStore, SourceRecord
from rag_app.index.store import KnowledgeStore
from rag_app.index.stored_rows import NODE_JSON, StoredRows
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding


def test_a_fill_read_before_a_write_keeps_only_the_rows_no_write_touched() -> None:
    rows = StoredRows()
    since = rows.generation  # a reader starts its Chroma read ...
    rows.forget(["a"])  # ... a writer changes "a" meanwhile ...
    dropped = rows.fill({"a": ("old", {}), "b": ("bee", {})}, since)
    assert dropped == 1  # ... so its "a" is not kept; "b", untouched, is
    assert rows.get(["a", "b"]) == ({"b": ("bee", {})}, ["a"])
    since = rows.generation
    assert rows.fill({"a": ("new", {"k": 1})}, since) == 0
    rows.put(["c"], ["sea"], [{"heading_path": None, "k": 2}])  # Chroma keeps no None value
    assert rows.get(["a", "c"])[0] == {"a": ("new", {"k": 1}), "c": ("sea", {"k": 2})}


def test_fills_older_than_a_reset_of_the_write_record_are_dropped_whole() -> None:
    rows = StoredRows()
    since = rows.generation
    for i in range(10_010):  # churn: ids written and gone, more than the record keeps
        rows.forget([f"gone{i}"])
    assert rows.fill({"x": ("old", {})}, since) == 1  # "x" may have been written: unknown
    assert rows.fill({"x": ("now", {})}, rows.generation) == 0


def test_held_rows_read_back_as_chroma_gave_them_and_cost_the_collector_nothing() -> None:
    node_json = json.dumps({"metadata": {"title": "Python 3.11 — argparse"}, "text": "x" * 900})
    meta = {"source_url": "https://docs.example/a", "chunk_index": 3, "none": None}
    rows = StoredRows()
    rows.fill({f"c{i}": (f"text {i}", {**meta, NODE_JSON: node_json}) for i in range(500)}, 0)
    rows.put(["p"], ["put"], [{**meta, NODE_JSON: node_json}])
    got, missing = rows.get(["c7", "p", "gone"])
    assert missing == ["gone"]
    want = {"source_url": "https://docs.example/a", "chunk_index": 3, NODE_JSON: node_json}
    assert got["c7"] == ("text 7", want) and dict(got["p"][1]) == want  # None: not kept
    assert got["c7"][1]["chunk_index"] == 3 and got["c7"][1].get("none") is None
    held = list(rows._rows.values())
    assert all(len(h[-1]) < len(node_json) // 4 for h in held)  # the node JSON, packed
    gc.collect()
    gc.collect()
    assert not any(gc.is_tracked(h) for h in held)  # full collections never walk them


def _node(i: str, source: str, text: str, title: str = "") -> TextNode:
    meta = {"source_url": source, "chunk_index": int(i[-1]), "title": title}
    return TextNode(id_=i, text=text, embedding=[1.0, float(i[-1]), 0.5], metadata=meta)


LIMITS = [
    pytest.param({"exact_max_chunks": 100}, id="beside-exact-vectors"),
    pytest.param({"exact_max_chunks": 0, "rows_max_chunks": 100}, id="rows-only"),
]
"""Rows kept beside the exact-search copy (a small store), and on their own (a store past
`RAG_EXACT_SEARCH_MAX_CHUNKS`, within `RAG_ROWS_IN_MEMORY_MAX_CHUNKS`)."""


@pytest.mark.parametrize("limits", LIMITS)
def test_reads_match_chroma_through_writes_deletes_and_another_writer(
    tmp_path: Path, limits: dict[str, int]
) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = KnowledgeStore(
        client, "kb_rows", BM25Index(tmp_path / "bm25"), model_name="m", dimension=3,
        poll_changes=False, **limits,
    )  # fmt: skip
    chroma = store.chroma
    assert chroma.rows is not None and chroma.rows.complete  # empty: every row is held
    store.replace_source("s", [_node("a1", "s", "日本語のテキスト"), _node("a2", "s", "two")], None)
    assert len(chroma.rows) == 2  # what was written, as written
    [got] = chroma.get_nodes(["a1"])
    assert got.get_content() == "日本語のテキスト" and got.metadata["chunk_index"] == 1

    retitled = _node("a1", "s", "日本語のテキスト", title="new title")
    chroma.upsert_nodes([retitled], stored={"a1"})  # metadata only: read again in full
    assert chroma.get_nodes(["a1"])[0].metadata["title"] == "new title"
    chroma.upsert_nodes([_node("a1", "s", "日本語のテキスト", title="upserted")])  # merged
    assert chroma.rows.get(["a1"])[1] == ["a1"]  # stored already: read again, not guessed
    assert chroma.get_nodes(["a1"])[0].metadata["title"] == "upserted"
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
    assert rows is not None and len(rows) == 10 and rows.complete
    assert rows.get(["c3"])[0]["c3"][0] == "text 3"
    store.chroma.upsert_nodes([_node(f"n{i}", "big", "x") for i in range(91)])
    assert store.chroma.rows is None and store.chroma.exact is None  # past the limit: off
    assert len(store.chroma.get_nodes(["c3", "n5"])) == 2  # read from Chroma


def test_a_write_that_fails_after_chroma_applied_it_leaves_no_stale_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chroma = ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_fail", model_name="m", dimension=3,
        exact_max_chunks=100,
    )  # fmt: skip
    chroma.upsert_nodes([_node("a1", "s", "one"), _node("a2", "s", "two")])
    collection = type(chroma.collection)

    def applied_then_lost(real: Any) -> Any:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            real(self, *args, **kwargs)  # a server applied it, then the answer was lost
            raise TimeoutError("timed out")

        return call

    chroma.put_sources([SourceRecord("s", chunk_ids="a1 a2"), SourceRecord("t", chunk_ids="b")])
    assert chroma.chunk_orders(["s", "t"])["s"].ids == ("a1", "a2")  # now held in memory
    for name in ("update", "delete", "upsert"):
        monkeypatch.setattr(collection, name, applied_then_lost(getattr(collection, name)))
    with pytest.raises(TimeoutError):
        chroma.upsert_nodes([_node("a1", "s", "one", title="new")], stored={"a1"})
    with pytest.raises(TimeoutError):
        chroma.delete_ids(["a2"])
    with pytest.raises(TimeoutError):
        chroma.put_sources([SourceRecord("s", chunk_ids="a1")])
    with pytest.raises(TimeoutError):
        chroma.delete_source_record("t")
    monkeypatch.undo()
    assert [n.metadata["title"] for n in chroma.get_nodes(["a1", "a2"])] == ["new"]
    orders = chroma.chunk_orders(["s", "t"])  # the records as Chroma holds them
    assert orders["s"].ids == ("a1",) and orders["t"].ids == ()


def _machines(
    tmp_path: Path, limits: dict[str, int] | None = None
) -> tuple[KnowledgeStore, KnowledgeStore]:
    """Two stores on one Chroma, each with its own BM25 (two machines), the second opened
    on a store that is not empty (so it reads its copies in the background) and caught up."""
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))

    def machine(name: str) -> KnowledgeStore:
        return KnowledgeStore(
            client, "kb_two", BM25Index(tmp_path / name), model_name="m", dimension=3,
            poll_changes=True, **(limits or {"exact_max_chunks": 100}),
        )  # fmt: skip

    other = machine("bm25-other")
    other.replace_source("seed", [_node("z0", "seed", "seed")], None)
    this = machine("bm25-this")
    this.recover()
    return other, this


def _rows_gone_from_chroma(chroma: ChromaStore) -> set[str]:
    assert chroma.rows is not None
    held = set(chroma.rows._rows)
    return held - set(chroma.collection.get(ids=sorted(held), include=[])["ids"])


@pytest.mark.parametrize("limits", LIMITS)
def test_a_row_read_before_catching_up_is_not_kept_after_its_chunk_is_gone(
    tmp_path: Path, limits: dict[str, int]
) -> None:
    other, this = _machines(tmp_path, limits)
    other.replace_source("s", [_node("x0", "s", "first version")], None)  # not caught up
    this.load_exact_vectors()  # vectors, then rows (x0 is in Chroma by now)
    other.replace_source("s", [_node("y0", "s", "second version")], None)  # x0 deleted
    this.catch_up()
    assert _rows_gone_from_chroma(this.chroma) == set()
    [node] = this.chroma.get_nodes(["y0"])
    assert node.get_content() == "second version"


def test_rows_another_machine_writes_during_the_load_stay_within_the_limit(
    tmp_path: Path,
) -> None:
    other, this = _machines(tmp_path)
    exact = this.chroma.read_exact(this.bm25.source_of)
    assert exact is not None and this.chroma.adopt_exact(exact)
    big = [_node(f"n{i:03d}0", "big", f"text {i}") for i in range(150)]
    other.replace_source("big", big, None)  # past the limit of 100, while rows are read
    this.chroma.load_rows()
    assert this.chroma.rows is not None and len(this.chroma.rows) <= 100
    other.replace_source("s", [_node("x0", "s", "first version")], None)
    this.chroma.load_rows()
    other.replace_source("s", [_node("y0", "s", "second version")], None)
    this.catch_up()  # the store is past the limit: the copies are dropped
    assert this.chroma.rows is None and this.chroma.exact is None


def test_rows_of_a_store_past_the_exact_limit_stay_in_memory_and_come_back_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    limits = {"exact_max_chunks": 5, "rows_max_chunks": 30}

    def open_store() -> KnowledgeStore:
        return KnowledgeStore(
            client, "kb_big", BM25Index(tmp_path / "bm25"), model_name="m", dimension=3,
            poll_changes=False, **limits,
        )  # fmt: skip

    store = open_store()
    for page in range(4):
        nodes = [_node(f"p{page}c{i}", f"s{page}", f"page {page} chunk {i}") for i in range(5)]
        record = SourceRecord(f"s{page}", chunk_ids=" ".join(n.node_id for n in nodes))
        store.replace_source(f"s{page}", nodes, record)
    assert store.chroma.exact is None  # 20 chunks: past the exact limit, HNSW answers
    rows = store.chroma.rows
    assert rows is not None and rows.complete and len(rows) == 20

    def no_reads(*args: object, **kwargs: object) -> None:
        raise AssertionError("read from Chroma")

    store.chroma.chunk_orders(["s2"])  # the page's chunk order, as a search reads it first
    with monkeypatch.context() as m:  # every row comes from memory
        m.setattr(type(store.chroma.collection), "get", no_reads)
        nodes, pieces = store.nodes_near(["p2c3"], [1])
        assert [n.get_content() for n in nodes] == ["page 2 chunk 3"]
        assert sorted(p.text for p in pieces.chunks) == [f"page 2 chunk {i}" for i in (2, 3, 4)]

    reopened = open_store()
    assert reopened.chroma.rows is None  # not empty: read in the background
    reopened.load_exact_vectors()
    rows = reopened.chroma.rows
    assert reopened.chroma.exact is None and rows is not None and rows.complete
    assert len(rows) == 20 and rows.get(["p1c1"])[0]["p1c1"][0] == "page 1 chunk 1"

    big = [_node(f"b{i:02d}0", "big", f"big {i}") for i in range(11)]
    reopened.replace_source("big", big, None)  # 31 chunks: past the rows limit too
    assert reopened.chroma.rows is None
    assert len(reopened.chroma.get_nodes(["p1c1", "b050"])) == 2  # read from Chroma


@pytest.mark.parametrize("rows_max", [0, 1_000])
async def test_a_reindex_keeps_the_rows_setting(
    settings: RAGSettings, counting_embed: CountingEmbedding, rows_max: int
) -> None:
    """The re-embedded collection holds its rows as the setting says: in memory above the
    vector copy's limit, or (0) never."""
    limits = {"rag_exact_search_max_chunks": 5, "rag_rows_in_memory_max_chunks": rows_max}
    kb = KnowledgeBase(settings.model_copy(update=limits), embed_model=counting_embed)
    await kb.open()
    try:
        await kb.ingest_text("https://docs.example/p", "\n\n".join(
            f"## 節{i}\n\n節{i}の本文。スライムの攻撃力は{i}。" for i in range(12)
        ))  # fmt: skip
        await kb.reindex()
        chroma = kb.store.chroma
        assert chroma.exact is None and chroma.count() > 5  # past the vector copy's limit
        assert chroma.rows_max_chunks == rows_max
        assert (chroma.rows is not None) == (rows_max > 0)
        if chroma.rows is not None:
            chroma.rows.forget(chroma.rows.ids())  # read again through the rule reads follow
            hits = (await kb.retrieve("スライムの攻撃力", mode="bm25")).hits
            assert hits and set(chroma.rows.ids()) >= {h.node_id for h in hits}
    finally:
        await kb.aclose()


def _held_but_gone(chroma: ChromaStore) -> set[str]:
    assert chroma.rows is not None
    held = chroma.rows.ids()
    return held - set(chroma.collection.get(ids=sorted(held), include=[])["ids"])


def test_rows_kept_under_the_vector_copy_follow_bm25_once_the_copy_is_dropped(
    tmp_path: Path,
) -> None:
    """The vector copy read another machine's chunk this process had not caught up with,
    so its row was kept; when one catch-up both grows the store past the copy's limit and
    applies that chunk's deletion, the row must not outlive the chunk."""
    other, this = _machines(tmp_path, {"exact_max_chunks": 3, "rows_max_chunks": 100})
    other.replace_source("t", [_node("t0", "t", "t zero")], None)  # not caught up here
    other.replace_source("s", [_node("x0", "s", "first version")], None)
    this.load_exact_vectors()
    assert this.chroma.rows is not None and "x0" in this.chroma.rows.ids()
    other.replace_source("t", [_node(f"t{i}", "t", f"t {i}") for i in range(4)], None)
    other.delete_source("s")
    this.catch_up()
    assert this.chroma.exact is None and this.chroma.rows is not None
    assert _held_but_gone(this.chroma) == set()
    assert this.chroma.get_nodes(["x0"]) == []


def test_a_chunk_re_inserted_before_catching_up_is_not_kept_in_memory(tmp_path: Path) -> None:
    """`reinsert` (the vector check after a crash, `check --repair`) keeps rows by the rule
    reads follow: a chunk another machine wrote, not caught up with here, is not kept."""
    other, this = _machines(tmp_path, {"exact_max_chunks": 0, "rows_max_chunks": 100})
    this.load_exact_vectors()
    other.replace_source("s", [_node("x0", "s", "first version")], None)
    this.chroma.reinsert(["x0"])
    other.replace_source("s", [_node("y0", "s", "second version")], None)  # x0 deleted
    this.catch_up()
    assert _held_but_gone(this.chroma) == set()
    assert this.chroma.get_nodes(["x0"]) == []


def test_after_another_machines_reindex_the_copies_are_read_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store above `EXACT_COPY_INLINE` chunks gets its rows (and vectors) back after
    another machine switched collections, without waiting for a restart."""
    monkeypatch.setattr(store_module, "EXACT_COPY_INLINE", 2)
    other, this = _machines(tmp_path, {"exact_max_chunks": 100})
    other.replace_source("s", [_node(f"a{i}", "s", f"text {i}") for i in range(5)], None)
    this.catch_up()
    old = other.chroma.collection.name
    new = ChromaStore(
        other.client, "kb_two", model_name="m", dimension=3, chunk_collection="kb_two__new",
        exact_max_chunks=100,
    )  # fmt: skip
    nodes = list(other.chroma.iter_nodes())
    for node in nodes:  # "re-embedded"
        node.embedding = [0.5, 1.0, float(node.metadata["chunk_index"])]
    new.upsert_nodes(nodes)
    other.switch_chunks(new, old, grace_sec=0)
    this.catch_up()  # follows the switch
    assert this.chroma.collection.name == "kb_two__new"
    for loader in this.loaders:
        loader.join(10)
    rows = this.chroma.rows
    assert this.chroma.exact is not None and rows is not None and rows.complete
    assert len(rows) == this.chroma.count() == 6
