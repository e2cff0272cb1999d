"""A reindex leaves no folder of the collection it replaced (Chroma keeps them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_app.index.segment_files import remove_left_behind, segment_ids
from rag_app.knowledge import KnowledgeBase


async def test_a_reindex_removes_the_replaced_collections_vector_folder(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(3):
        (notes / f"n{i}.md").write_text(f"# N{i}\n\nsegword{i} text here.\n", encoding="utf-8")
    await kb.index_dir(notes)
    root = Path(kb.settings.chromadb_persist_dir)
    old = kb.store.chroma.collection.name
    folders = [root / s for s in segment_ids(root, old) if (root / s).is_dir()]
    assert folders  # Chroma made the vector segment's folder
    await kb.reindex()
    new = kb.store.chroma.collection.name
    assert new != old and not [f for f in folders if f.exists()]
    assert [s for s in segment_ids(root, new) if (root / s).is_dir()]  # the live one stays
    hits = (await kb.retrieve("segword1 text here", mode="vector")).hits
    assert hits and "segword1" in hits[0].text


def test_only_folders_chroma_no_longer_lists_are_removed(tmp_path: Path) -> None:
    import chromadb

    client = chromadb.PersistentClient(path=str(tmp_path))
    client.create_collection("keep-me").add(ids=["a"], embeddings=[[1.0, 0.0]])
    live = segment_ids(tmp_path, "keep-me")
    for segment in live:
        (tmp_path / segment).mkdir(exist_ok=True)
    gone = "00000000-0000-4000-8000-000000000000"  # a segment id Chroma no longer lists
    for name in (gone, "not-a-segment"):
        (tmp_path / name).mkdir()
    removed = remove_left_behind(tmp_path, live | {gone, "not-a-segment", "", ".."})
    assert removed == 1 and not (tmp_path / gone).exists()
    assert (tmp_path / "not-a-segment").is_dir()  # only names that are segment ids
    assert all((tmp_path / s).is_dir() for s in live)
    assert remove_left_behind(None, {"x"}) == 0 and segment_ids(tmp_path / "none", "x") == set()


async def test_a_reindex_removes_the_folder_of_a_collection_an_earlier_one_left(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nleftword text.\n", encoding="utf-8")
    await kb.index_dir(notes)
    root = Path(kb.settings.chromadb_persist_dir)
    kb.store.client.create_collection("knowledge__dead0000").add(ids=["x"], embeddings=[[1.0]])
    left = [root / s for s in segment_ids(root, "knowledge__dead0000") if (root / s).is_dir()]
    assert left
    await kb.reindex()
    assert not [f for f in left if f.exists()]
    names = {c.name for c in kb.store.client.list_collections()}
    assert "knowledge__dead0000" not in names


def test_the_catalogue_names_each_collections_segments(tmp_path: Path) -> None:
    """`chroma_catalog.segments`: by name, vector segments only, or every one listed."""
    import sqlite3

    import chromadb
    from chromadb.api.shared_system_client import SharedSystemClient

    from rag_app.index.chroma_catalog import read_only, segments

    client = chromadb.PersistentClient(path=str(tmp_path))
    a = client.create_collection("aaa")
    client.create_collection("bbb")
    a.add(ids=["x"], embeddings=[[1.0, 0.0]])
    with read_only(tmp_path) as db:
        of_a = segments(db, ["aaa"])
        vector_a = segments(db, ["aaa"], vector_only=True)
        every = segments(db)
        assert segments(db, []) == [] and segments(db, ["missing"]) == []
    assert {c for c, _s in of_a} == {str(a.id)} and len(of_a) >= 2  # metadata + vector
    assert len(vector_a) == 1 and vector_a[0] in of_a
    assert set(of_a) < set(every)  # b's segments too
    del a, client
    SharedSystemClient.clear_system_cache()
    with read_only(tmp_path) as db, pytest.raises(sqlite3.OperationalError):
        db.execute("DELETE FROM segments")  # read-only: nothing here can change the store
