"""Chroma writes go in slices, so one big page cannot hold the GIL for its whole write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import chromadb
import pytest
from llama_index.core.schema import TextNode

import rag_app.index.chroma_store as chroma_store


def _sliced_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> chroma_store.ChromaStore:
    """A store writing in slices of 4."""
    monkeypatch.setattr(chroma_store, "WRITE_SLICE", 4)
    return chroma_store.ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), name, model_name="m", dimension=3
    )


def _upsert_sizes(collection: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every upsert into `collection` from now on."""
    sizes: list[int] = []
    upsert = collection.upsert

    def counting(**kwargs: Any) -> None:
        sizes.append(len(kwargs["ids"]))
        upsert(**kwargs)

    monkeypatch.setattr(collection, "upsert", counting)
    return sizes


def test_a_big_write_is_split_into_slices_and_all_of_it_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _sliced_store(tmp_path, monkeypatch, "kb_slices")
    sizes = _upsert_sizes(store.collection, monkeypatch)
    nodes = [
        TextNode(
            id_=f"c{i}", text=f"t{i}", embedding=[1.0, float(i), 0.0], metadata={"source_url": "s"}
        )
        for i in range(10)
    ]
    store.upsert_nodes(nodes)
    assert sizes == [4, 4, 2]
    assert store.all_ids() == {f"c{i}" for i in range(10)}
    store.delete_ids([f"c{i}" for i in range(9)])
    assert store.all_ids() == {"c9"}


def test_unfindable_looks_wider_before_calling_a_crowded_chunk_lost(tmp_path: Path) -> None:
    """30 chunks with one vector: a top 10 cannot hold them all, yet none is lost."""
    store = chroma_store.ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_crowd", model_name="m", dimension=3
    )
    nodes = [
        TextNode(
            id_=f"d{i:02d}", text=f"t{i}", embedding=[1.0, 0.0, 0.0], metadata={"source_url": "s"}
        )
        for i in range(30)
    ]
    store.upsert_nodes(nodes)
    ids = [n.node_id for n in nodes]
    top = store.collection.query(query_embeddings=[[1.0, 0.0, 0.0]], n_results=10, include=[])
    assert len(set(ids) - set(top["ids"][0])) == 20  # the first look misses most of them
    assert store.unfindable(ids) == []
    store.collection.delete(ids=["d05"])  # gone from the index: its own vector is lost
    assert store.unfindable(["d05", "d06"]) == []  # a chunk Chroma no longer has is skipped


def test_source_records_are_written_in_slices_and_all_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _sliced_store(tmp_path, monkeypatch, "kb_records")
    sizes = _upsert_sizes(store.sources_collection, monkeypatch)
    records = [
        chroma_store.SourceRecord(source=f"s{i}", title=f"表題{i}", chunk_ids=f"a{i} b{i}")
        for i in range(10)
    ]
    store.put_sources(records)
    assert sizes == [4, 4, 2]
    store.put_source(chroma_store.SourceRecord(source="s3", title="new"))
    got = store.get_sources([r.source for r in records])
    assert sorted(got) == sorted(r.source for r in records)
    assert got["s3"].title == "new" and got["s7"].ordered_chunk_ids() == ["a7", "b7"]


def test_a_window_full_of_the_same_vector_is_not_called_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More copies of one vector than the wider look holds (a footer kept on hundreds of
    pages): no query can tell them apart, so none is re-inserted."""
    monkeypatch.setattr(chroma_store, "UNFINDABLE_RECHECK", 12)
    store = chroma_store.ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_same", model_name="m", dimension=3
    )
    same = [TextNode(id_=f"s{i:02d}", text="footer", embedding=[0.0, 1.0, 0.0]) for i in range(30)]
    other = TextNode(id_="x", text="x", embedding=[1.0, 0.0, 0.0])
    store.upsert_nodes([*same, other])
    assert store.unfindable([n.node_id for n in same] + ["x"]) == []


def test_a_chunk_already_stored_gets_only_its_metadata_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids come from the embedded text: a stored id's vector is already there, and Chroma's
    HNSW has lost live records after rewrites (chroma-core/chroma#7758)."""
    store = _sliced_store(tmp_path, monkeypatch, "kb_kept")
    nodes = [
        TextNode(id_=f"k{i}", text=f"t{i}", embedding=[1.0, float(i), 0.0], metadata={"i": i})
        for i in range(6)
    ]
    store.upsert_nodes(nodes)
    sizes = _upsert_sizes(store.collection, monkeypatch)
    moved = [
        TextNode(id_=n.node_id, text=n.text, embedding=n.embedding, metadata={"i": 10 + k})
        for k, n in enumerate(nodes)
    ]
    fresh = TextNode(id_="k9", text="t9", embedding=[0.0, 0.0, 1.0], metadata={"i": 9})
    store.upsert_nodes([*moved, fresh], stored={n.node_id for n in nodes})
    assert sizes == [1]  # only the new chunk's vector is written
    got = {n.node_id: n.metadata["i"] for n in store.get_nodes(["k0", "k5", "k9"])}
    assert got == {"k0": 10, "k5": 15, "k9": 9}
    assert store.unfindable(["k0", "k5", "k9"]) == []


def test_a_search_scoped_to_the_most_sources_a_filter_may_name_runs_in_chroma(
    tmp_path: Path,
) -> None:
    """A scope of `MAX_SCOPED_SOURCES` names goes to Chroma as one `$in` filter (no exact
    copy here) and finds only chunks of those sources; SQLite refuses such a statement
    above 32,766 names, so the cap must stay below that."""
    from rag_app.source_scope import MAX_SCOPED_SOURCES

    store = chroma_store.ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_scope", model_name="m", dimension=3
    )
    store.upsert_nodes(
        [
            TextNode(
                id_=f"c{i}",
                text=f"t{i}",
                embedding=[1.0, float(i), 0.0],
                metadata={"source_url": f"https://s.test/{i}"},
            )
            for i in range(6)
        ]
    )
    scope = [f"https://s.test/{i}" for i in (1, 4)]
    scope += [f"https://other.test/{i}" for i in range(MAX_SCOPED_SOURCES - len(scope))]
    found = store.query_vectors([1.0, 0.0, 0.0], 5, scope)
    assert sorted(i for i, _ in found.hits) == ["c1", "c4"]
