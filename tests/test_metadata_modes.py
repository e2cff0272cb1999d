"""Metadata modes: LlamaIndex's EMBED and LLM text decide what is embedded and what BM25
indexes as context; stored chunks round-trip their modes."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.schema import Document, MetadataMode, TextNode

from rag_app.index.store import bm25_doc
from rag_app.ingest_transforms import embed_text
from rag_app.parsing.metadata_modes import (
    ApplyMetadataModes,
    context_text,
    follows_modes,
    hide_keys,
    set_metadata_modes,
)
from rag_app.parsing.router import StructuredNodeParser


def _node(content_type: str = "prose", **meta: str) -> TextNode:
    base = {
        "source_url": "https://docs.test/a",
        "title": "題名",
        "heading_path": "章 > 節",
        "content_type": content_type,
        "indexed_at": "2026-01-01T00:00:00Z",
    }
    node = TextNode(text="本文です。", metadata={**base, **meta})
    set_metadata_modes([node])
    return node


def test_embed_mode_puts_title_and_heading_before_the_text() -> None:
    node = _node()
    assert embed_text(node) == "題名\n章 > 節\n本文です。"
    assert node.get_content(MetadataMode.EMBED) == embed_text(node)
    assert "docs.test" not in embed_text(node) and "2026" not in embed_text(node)


def test_table_rows_are_embedded_alone_but_keep_their_context_for_bm25() -> None:
    row = _node("table")
    assert embed_text(row) == "本文です。"
    assert context_text(row) == "題名\n章 > 節"
    doc = bm25_doc(row)
    assert doc.text == "本文です。" and doc.context == "題名\n章 > 節"


def test_text_only_variant_and_empty_context() -> None:
    node = _node()
    set_metadata_modes([node], embed_context=False)
    assert embed_text(node) == "本文です。"
    bare = TextNode(text="x", metadata={"title": "", "heading_path": ""})
    set_metadata_modes([bare])
    assert embed_text(bare) == "x"


def test_keys_added_later_can_be_hidden() -> None:
    node = _node()
    node.metadata["combined_score"] = 0.75
    assert "0.75" in node.get_content(MetadataMode.LLM)
    hide_keys(node, ["combined_score"])
    assert "0.75" not in node.get_content(MetadataMode.LLM)
    assert "0.75" not in embed_text(node)


def test_the_parser_and_the_ingest_step_set_the_modes() -> None:
    doc = Document(
        text="# 見出し\n\n本文の段落です。", metadata={"title": "ページ", "source_url": "u"}
    )
    nodes = StructuredNodeParser().get_nodes_from_documents([doc])
    assert nodes and all(follows_modes(n) for n in nodes)
    assert embed_text(nodes[0]).startswith("ページ\n見出し\n")
    step = ApplyMetadataModes(embed_context=False)
    assert embed_text(step(nodes)[0]) == nodes[0].get_content(MetadataMode.NONE)


def test_modes_survive_the_store_and_old_chunks_get_them(tmp_path: Path) -> None:
    import chromadb

    from rag_app.index.chroma_store import ChromaStore

    client = chromadb.PersistentClient(path=str(tmp_path))
    coll = client.get_or_create_collection("modes", metadata={"hnsw:space": "cosine"})
    node = _node("table")
    node.embedding = [1.0, 0.0, 0.0]
    old = TextNode(id_="old", text="昔の本文", metadata={"title": "T", "heading_path": "H"})
    old.excluded_embed_metadata_keys = list(old.metadata)  # how older versions stored chunks
    old.excluded_llm_metadata_keys = list(old.metadata)
    old.embedding = [0.0, 1.0, 0.0]
    store = ChromaStore.__new__(ChromaStore)
    store.collection = coll
    store.exact, store.rows, store.known = None, None, None  # built without __init__
    store.gate, store.vector_copy = None, None
    store.upsert_nodes([node, old])
    got = {n.node_id: n for n in store.get_nodes([node.node_id, "old"])}
    assert embed_text(got[node.node_id]) == embed_text(node)
    assert embed_text(got["old"]) == "T\nH\n昔の本文"
    assert context_text(got["old"]) == "T\nH"
