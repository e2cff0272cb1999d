"""`rag check` finds a source holding chunks its record does not list (two machines
wrote it at the same moment) and `--repair` has the next index store it whole again."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import TextNode

from rag_app.config import RAGSettings
from rag_app.errors import StoreUnavailableError
from rag_app.index.change_log import ChangeLog
from rag_app.index.store import bm25_doc
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding


async def test_a_source_mixing_two_versions_is_found_and_stored_whole_again(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    page = notes / "page.md"
    page.write_text("# Page\n\nversion two text about walruses.\n", encoding="utf-8")
    (notes / "other.md").write_text("# Other\n\nan unrelated note.\n", encoding="utf-8")
    await kb.index_dir(notes)
    source = page.absolute().as_uri()
    stale = TextNode(
        id_="f" * 32,
        text="version one text about walruses.",
        metadata={"source_url": source, "title": "Page"},
        embedding=kb.embed_model.get_text_embedding("version one text about walruses."),
    )  # the other machine's version, left beside this one's (Chroma and BM25 agree)
    kb.store.chroma.upsert_nodes([stale])
    kb.store.bm25.add([bm25_doc(stale)])

    found = await kb.check()
    assert not found.ok and found.mixed_sources == [source]
    assert found.missing_in_bm25 == found.extra_in_bm25 == 0
    repaired = await kb.check(repair=True)
    assert repaired.repaired and repaired.to_index_again == [source]
    marked = await kb.check()  # known and pending: no longer an inconsistency
    assert marked.ok and marked.to_index_again == [source]
    summary = await kb.index_dir(notes)
    assert summary.updated == 1 and summary.unchanged == 1  # only the mixed one again
    after = await kb.check()
    assert after.ok and not after.mixed_sources and not after.to_index_again
    assert stale.node_id not in kb.store.chroma.ids_for_source(source)


def _stop_mid_write(
    kb: KnowledgeBase, settings: RAGSettings, embed: CountingEmbedding, source: str, text: str
) -> TextNode:
    """Another writer's run that logged `begin` for `source` and wrote a chunk of `text`,
    then stopped before the record (no closing entry)."""
    stopped = ChangeLog(kb.store.client, settings.rag_collection_name)
    stopped.append([source], "begin")
    half = TextNode(
        id_=hashlib.md5(text.encode()).hexdigest(),
        text=text,
        metadata={"source_url": source, "title": "Page"},
        embedding=embed.get_text_embedding(text),
    )
    kb.store.chroma.upsert_nodes([half])
    return half


async def test_a_write_cut_off_before_its_record_is_stored_again(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    """A writer stopped between a source's chunks and its record (its `begin` entry has no
    closing one): the next open marks the record, and the next index stores it whole."""
    notes = tmp_path / "notes"
    notes.mkdir()
    page = notes / "page.md"
    page.write_text("# Page\n\nthe first version about otters.\n", encoding="utf-8")
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    await kb.index_dir(notes)
    source = page.absolute().as_uri()
    half = _stop_mid_write(kb, settings, counting_embed, source, "the second version about otters.")
    await kb.aclose()

    again = KnowledgeBase(settings, embed_model=counting_embed)
    await again.open()  # closes the open write: BM25 follows Chroma, the record is marked
    try:
        report = await again.check()
        assert report.ok and report.to_index_again == [source], report
        await again.index_dir(notes)
        after = await again.check()
        assert after.ok and not after.to_index_again
        assert half.node_id not in again.store.chroma.ids_for_source(source)
    finally:
        await again.aclose()


async def _two_notes(kb: KnowledgeBase, tmp_path: Path) -> tuple[Path, str]:
    """A folder of two indexed notes, and the stored name of the first."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for name in ("a", "b"):
        (notes / f"{name}.md").write_text(f"# {name}\n\nnotes about {name} kettles.\n")
    await kb.index_dir(notes)
    return notes, (notes / "a.md").absolute().as_uri()


async def test_a_delete_cut_off_after_its_first_step_is_finished_by_running_it_again(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: Any
) -> None:
    """A stop between deleting a source's chunks and its record (kill -9) leaves the
    record, so the source is still listed and `rag delete -r` of its folder finishes it.
    With the record deleted first, the chunks stayed with no record: the folder delete,
    refresh and check never found them again."""
    notes, source = await _two_notes(kb, tmp_path)
    chroma = kb.store.chroma
    steps: list[str] = []

    def step(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            steps.append(name)
            if len(steps) == 2:
                raise OSError("stopped")  # the process died here
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(chroma, "delete_ids", step("chunks", chroma.delete_ids))
    monkeypatch.setattr(chroma, "delete_source_record", step("record", chroma.delete_source_record))
    with pytest.raises(Exception, match="stopped"):
        await kb.delete_source(str(notes / "a.md"))
    monkeypatch.undo()
    await kb.delete_source(str(notes), folder=True)
    assert not kb.store.chroma.ids_for_source(source)
    assert (await kb.stats()).sources == []
    assert (await kb.check()).ok


async def test_chunks_no_record_names_are_found_and_recorded_for_the_next_index(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """Chunks left without a record (a delete or a first write cut off, by an older
    version too) were invisible to `rag check`; now they are reported, and a repair
    records them as changed, so the next index removes a file that is gone."""
    notes, source = await _two_notes(kb, tmp_path)
    kb.store.chroma.delete_source_record(source)
    found = await kb.check()
    assert not found.ok and found.unrecorded_sources == [source], found
    repaired = await kb.check(repair=True)
    assert repaired.repaired and source in repaired.to_index_again
    assert (await kb.check()).ok
    (notes / "a.md").unlink()
    summary = await kb.index_dir(notes)
    assert summary.deleted == 1 and summary.unchanged == 1
    assert not kb.store.chroma.ids_for_source(source)


async def test_a_first_write_cut_off_before_its_record_is_recorded_at_the_next_open(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    """A writer stopped between a new source's chunks and its record (kill -9 of `rag
    index`'s owner): the next open records the source as changed, so `rag check` is not
    left INCONSISTENT by an ordinary crash, and the next index stores it whole."""
    notes = tmp_path / "notes"
    notes.mkdir()
    page = notes / "new.md"
    page.write_text("# New\n\nnotes about herons.\n", encoding="utf-8")
    source = page.absolute().as_uri()
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    _stop_mid_write(kb, settings, counting_embed, source, "notes about herons.")
    await kb.aclose()

    again = KnowledgeBase(settings, embed_model=counting_embed)
    await again.open()
    try:
        report = await again.check()
        assert report.ok and report.to_index_again == [source], report
        summary = await again.index_dir(notes)
        assert summary.updated == 1, summary
        after = await again.check()
        assert after.ok and not after.to_index_again and not after.unrecorded_sources
    finally:
        await again.aclose()


async def test_a_write_that_fails_part_way_is_settled_by_the_next_search(
    chroma_server: int,
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A write cut off inside a Chroma server (the server gone mid-write) left part of the
    new version there and none in this process's BM25, and nothing settled it until a
    restart or `rag check --repair`: searches here and on other machines disagreed."""
    remote = settings.model_copy(update={"chroma_host": "127.0.0.1", "chroma_port": chroma_server})
    kb = KnowledgeBase(remote, embed_model=counting_embed)
    try:
        await _settled_after_a_cut_off_write(kb, tmp_path, monkeypatch)
    finally:
        await kb.aclose()


async def _settled_after_a_cut_off_write(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    page = notes / "page.md"
    page.write_text("# Page\n\nthe first version about otters.\n", encoding="utf-8")
    await kb.index_dir(notes)
    source = page.absolute().as_uri()
    parts = [f"## Part {i}\n\nsection {i} tells of marker{i}word and more.\n" for i in range(8)]
    page.write_text("# Page\n\n" + "\n".join(parts), encoding="utf-8")
    real = kb.store.chroma.upsert_nodes

    def cut_off(nodes: Any, *args: Any) -> None:
        real(nodes[:3], *args)  # part of the write lands, then Chroma goes away
        raise ConnectionError("the Chroma server went away")

    monkeypatch.setattr(kb.store.chroma, "upsert_nodes", cut_off)
    with pytest.raises(StoreUnavailableError, match="cannot be reached"):
        await kb.index_dir(notes)
    monkeypatch.setattr(kb.store.chroma, "upsert_nodes", real)

    landed = [i for i in range(8) if f"marker{i}word" in "".join(
        n.get_content() for n in kb.store.source_nodes(source)
    )]  # fmt: skip
    assert landed, "nothing of the cut-off write reached Chroma"
    hits = (await kb.retrieve(f"marker{landed[0]}word", mode="bm25")).hits
    assert hits and hits[0].source_url == source  # BM25 follows Chroma at once
    report = await kb.check()
    assert report.ok and report.to_index_again == [source], report
    again = await kb.index_dir(notes)
    assert again.updated == 1 and again.failed == 0, again
    after = await kb.check()
    assert after.ok and not after.to_index_again
    text = "".join(n.get_content() for n in kb.store.source_nodes(source))
    assert all(f"marker{i}word" in text for i in range(8)) and "otters" not in text
