"""`rag check` finds a source holding chunks its record does not list (two machines
wrote it at the same moment) and `--repair` has the next index store it whole again."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.schema import TextNode

from rag_app.config import RAGSettings
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
    stopped = ChangeLog(kb.store.client, settings.rag_collection_name)  # a writer's run
    stopped.append([source], "begin")
    half = TextNode(
        id_="e" * 32,
        text="the second version about otters.",
        metadata={"source_url": source, "title": "Page"},
        embedding=counting_embed.get_text_embedding("the second version about otters."),
    )
    kb.store.chroma.upsert_nodes([half])  # its chunks written, then it stopped
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
