"""`Carry`: what other writers change while a reindex builds its new collection (a real
Chroma; the other machine is a second change-log writer on the same client)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import chromadb
from llama_index.core.schema import BaseNode, TextNode

from rag_app.index.change_log import ChangeLog
from rag_app.index.chroma_store import ChromaStore
from rag_app.index.reindex_carry import Carry
from rag_app.index.store import reindex_leftovers

DIM = 4


def vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [1.0 + b for b in digest[:DIM]]


def node(source: str, text: str) -> TextNode:
    return TextNode(
        id_=f"{source}#{text}", text=text, metadata={"source_url": source}, embedding=vector(text)
    )


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        client = chromadb.PersistentClient(path=str(tmp_path))
        self.old = ChromaStore(client, "knowledge", model_name="m", dimension=DIM)
        self.new = ChromaStore(
            client, "knowledge", model_name="m", dimension=DIM, chunk_collection="knowledge__next"
        )
        self.log = ChangeLog(client, "knowledge")  # the reindexing machine
        self.other = ChangeLog(client, "knowledge")  # another machine writing meanwhile
        self.embedded: list[str] = []

    def embed(self, nodes: Sequence[BaseNode]) -> None:
        for n in nodes:
            n.embedding = vector(n.get_content())
            self.embedded.append(n.node_id)

    def write(self, store: ChromaStore, source: str, texts: list[str]) -> None:
        """The other machine makes `store` hold `texts` for `source`, with its entries."""
        self.other.append([source], "begin", store.collection.name)
        stale = set(store.ids_for_source(source)) - {f"{source}#{t}" for t in texts}
        if texts:
            store.upsert_nodes([node(source, t) for t in texts])
        if stale:
            store.delete_ids(sorted(stale))
        self.other.append([source], "write" if texts else "delete", store.collection.name)

    def snapshot(self, carry: Carry, nodes: list[TextNode]) -> None:
        """The reindex's own pass: embedded (not counted) and written, as it was read."""
        for n in nodes:
            n.embedding = vector(n.get_content())
        self.new.upsert_nodes(nodes)
        carry.placed(nodes)

    def start(self, live: dict[str, list[str]]) -> Carry:
        """The live collection holding `live` (source → texts), then a reindex that has
        read and written all of it."""
        self.old.upsert_nodes([node(src, t) for src, texts in live.items() for t in texts])
        carry = Carry(self.log, self.old, self.new, self.embed)
        self.snapshot(carry, [n for src in live for n in self.old.source_nodes(src)])
        return carry

    def texts(self, store: ChromaStore, source: str) -> set[str]:
        return {n.get_content() for n in store.source_nodes(source)}


def test_changes_before_the_switch_are_carried_and_only_new_text_is_embedded(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    carry = s.start({"s1": ["a1", "a2"], "s2": ["b1"]})
    s.write(s.old, "s1", ["a1", "a3"])  # a2 replaced by a3
    s.write(s.old, "s3", ["c1"])  # a new source
    s.write(s.old, "s2", [])  # deleted
    carry.before_switch()
    assert s.texts(s.new, "s1") == {"a1", "a3"}
    assert s.texts(s.new, "s3") == {"c1"} and s.texts(s.new, "s2") == set()
    assert sorted(s.embedded) == ["s1#a3", "s3#c1"]  # a1 kept its vector in the new one
    assert list(carry.carried) == ["s1", "s3", "s2"]


def test_a_chunk_the_paged_snapshot_missed_is_settled_id_by_id(tmp_path: Path) -> None:
    """No change-log entry names it (a page shifted under the snapshot's offsets)."""
    s = Setup(tmp_path)
    s.old.upsert_nodes([node("s1", "a1"), node("s1", "a2"), node("s2", "b1")])
    carry = Carry(s.log, s.old, s.new, s.embed)
    s.snapshot(carry, [node("s1", "a1"), node("s2", "b1"), node("s9", "gone")])
    carry.before_switch()
    assert s.texts(s.new, "s1") == {"a1", "a2"}  # the missed chunk
    assert s.texts(s.new, "s9") == set()  # a chunk no longer in the live collection
    assert s.texts(s.new, "s2") == {"b1"}


def test_after_the_switch_a_late_write_is_carried_but_a_newer_one_stands(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    carry = s.start({"s1": ["a1"], "s2": ["b1"], "s3": ["c1"]})
    carry.before_switch()
    # the switch: the other machine had not seen it for s1, saw it before its 2nd s2 write
    s.write(s.old, "s1", ["a2"])
    s.write(s.old, "s2", ["b2"])
    s.write(s.new, "s2", ["b3"])
    s.write(s.new, "s3", ["c2"])  # written into the new collection only
    carry.after_switch()
    assert s.texts(s.new, "s1") == {"a2"}
    assert s.texts(s.new, "s2") == {"b3"}  # its later write, not the old collection's b2
    assert s.texts(s.new, "s3") == {"c2"}
    assert "s2" not in carry.carried and "s3" not in carry.carried


def test_only_this_stores_leftovers_are_dropped_never_another_stores() -> None:
    names = [
        "knowledge", "knowledge_sources", "knowledge_changes",  # the store, live
        "knowledge__1a2b3c4d",  # an interrupted reindex of it
        "knowledge-reindex",  # an early version's
        "knowledge__archive", "knowledge__archive_sources", "knowledge__archive_changes",
        "knowledge__0badf00d", "knowledge__0badf00d_sources",  # another store, hex name
        "knowledge-reindex2", "knowledgebase__1a2b3c4d",
    ]  # fmt: skip
    assert reindex_leftovers(names, "knowledge", "knowledge") == [
        "knowledge-reindex",
        "knowledge__1a2b3c4d",
    ]
    assert reindex_leftovers(names, "knowledge", "knowledge__1a2b3c4d") == ["knowledge-reindex"]


def test_after_the_switch_a_write_that_restores_the_snapshot_stands(tmp_path: Path) -> None:
    """The other machine undid, in the new collection, what it had done in the old one
    (re-added a page, changed one back, deleted a new one): its later writes stand, though
    the new collection then holds exactly what the snapshot put there."""
    s = Setup(tmp_path)
    carry = s.start({"x": ["x1"], "y": ["y1"]})
    carry.before_switch()
    s.write(s.old, "x", [])  # before it saw the switch
    s.write(s.old, "y", ["y2"])
    s.write(s.old, "z", ["z1"])
    s.write(s.new, "x", ["x1"])  # after it saw the switch
    s.write(s.new, "y", ["y1"])
    s.write(s.new, "z", [])
    carry.after_switch()
    assert s.texts(s.new, "x") == {"x1"}
    assert s.texts(s.new, "y") == {"y1"}
    assert s.texts(s.new, "z") == set()
    assert not carry.carried
