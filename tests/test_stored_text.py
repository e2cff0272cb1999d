"""Chunk text goes to Chroma as ASCII (non-ASCII escaped) and comes back exactly."""

from __future__ import annotations

import random
from pathlib import Path

import chromadb
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict

from rag_app.index import stored_text
from rag_app.index.chroma_store import ChromaStore

SAMPLES = [
    "",
    "plain ASCII text",
    "りゅうおうのHPは412",
    "back\\slash \\u3042 and \\n literally",
    stored_text.PREFIX + "looks encoded but is not",
    "tab\there\nnew line\r\x00nul \x7f",
    "emoji 😀, combining é, wide ｱ, surrogate-free 𠮷",
    "\ud800 lone surrogate",
]


MARKED = {stored_text.ENCODED_KEY: 1}


def test_every_text_round_trips_and_is_stored_as_ascii() -> None:
    rng = random.Random(3)
    alphabet = "aZ\\u{}:\n\t\x00あア漢😀é" + stored_text.PREFIX
    randoms = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(500)]
    for text in SAMPLES + randoms:
        stored = stored_text.encode(text)
        assert stored.isascii()
        assert stored_text.decode(stored, MARKED) == text
    assert stored_text.encode("plain ASCII text") == "plain ASCII text"  # readable as before
    assert stored_text.decode(None, MARKED) == ""


def test_a_chunk_written_before_the_encoding_reads_as_it_was(tmp_path: Path) -> None:
    store = ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_text", model_name="m", dimension=3
    )
    # written raw, as older versions did, one of them looking like the encoded form
    olds = {"old": "スライムの攻撃力は5", "old2": stored_text.PREFIX + "C:\\new 設定"}
    for i, text in olds.items():
        meta = node_to_metadata_dict(
            TextNode(id_=i, text=text, metadata={"source_url": "s", "heading_path": text}),
            remove_text=True,
            flat_metadata=True,
        )
        store.collection.upsert(
            ids=[i], embeddings=[[1.0, 0.0, 0.0]], documents=[text], metadatas=[meta]
        )
    nodes = [
        TextNode(id_=f"n{i}", text=t, embedding=[1.0, float(i), 0.0], metadata={"source_url": "s"})
        for i, t in enumerate(SAMPLES[1:])
    ]
    store.upsert_nodes(nodes)
    raw = store.collection.get(ids=["n1"], include=["documents"])["documents"][0]
    assert raw.isascii() and raw.startswith(stored_text.PREFIX)
    ids = [*olds, *(n.node_id for n in nodes)]
    got = {n.node_id: n.get_content() for n in store.get_nodes(ids)}
    assert got == {**olds, **{n.node_id: n.get_content() for n in nodes}}
    pieces = store.nodes_and_sections([], ["old", "old2", "n1"])[1]
    assert sorted(p.text for p in pieces) == sorted([*olds.values(), SAMPLES[2]])
    assert {p.heading_path for p in pieces} >= set(olds.values())


def test_a_heading_that_looks_encoded_comes_back_as_written(tmp_path: Path) -> None:
    store = ChromaStore(
        chromadb.PersistentClient(path=str(tmp_path)), "kb_head", model_name="m", dimension=3
    )
    paths = [stored_text.PREFIX + "\\Notes", stored_text.PREFIX * 2 + "x", "章 > 節", "Plain"]
    nodes = [
        TextNode(
            id_=f"h{i}",
            text=f"text {i}",
            embedding=[1.0, float(i), 0.0],
            metadata={"source_url": "s", "chunk_index": i, "heading_path": p},
        )
        for i, p in enumerate(paths)
    ]
    store.upsert_nodes(nodes)
    pieces = store.nodes_and_sections([], [n.node_id for n in nodes])[1]
    assert sorted(p.heading_path for p in pieces) == sorted(paths)
    assert {n.node_id: n.metadata["heading_path"] for n in store.get_nodes(["h0", "h1"])} == {
        "h0": paths[0],
        "h1": paths[1],
    }


def test_node_json_is_ascii_and_llamaindex_reads_the_same_node() -> None:
    node = TextNode(
        id_="j1",
        text="本文",
        metadata={"source_url": "https://例え.jp/", "title": "表題", "heading_path": "章 > 節"},
    )
    meta = stored_text.ascii_metadata(node)
    assert meta["_node_content"].isascii()
    back = metadata_dict_to_node(meta, text="本文")
    assert back.metadata == node.metadata and back.node_id == "j1"
    assert all(v.isascii() for v in meta.values() if isinstance(v, str) and v != meta["source_url"])
    assert stored_text.decode(meta["heading_path"], meta) == "章 > 節"
    assert meta["source_url"] == "https://例え.jp/"  # what `where` filters match stays as it is
    # the title lives in the node JSON only: each flat key costs Chroma time on every read
    assert "title" not in meta and set(meta) == {
        "_node_content", "_node_type", "source_url", "heading_path", "document_id",
        stored_text.ENCODED_KEY,
    }  # fmt: skip
