"""`rag check` finds a source holding chunks its record does not list (two machines
wrote it at the same moment) and `--repair` has the next index store it whole again."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.schema import TextNode

from rag_app.index.store import bm25_doc
from rag_app.knowledge import KnowledgeBase


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
    summary = await kb.index_dir(notes)
    assert summary.updated == 1 and summary.unchanged == 1  # only the mixed one again
    after = await kb.check()
    assert after.ok and not after.mixed_sources
    assert stale.node_id not in kb.store.chroma.ids_for_source(source)
