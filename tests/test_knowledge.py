"""End-to-end KnowledgeBase tests with the real builtin model, Chroma and BM25."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import chromadb.api.models.Collection
import pytest
from llama_index.core.schema import NodeRelationship

from rag_app.config import RAGSettings
from rag_app.errors import EmbeddingMismatchError, EmptyQueryError, RAGError, UnknownSourceError
from rag_app.knowledge import KnowledgeBase
from rag_app.limits import MAX_CHUNKS_PER_SOURCE_DEFAULT
from tests.conftest import SAMPLES, CountingEmbedding
from tests.processes import write_steps_page


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    target = tmp_path / "docs"
    shutil.copytree(SAMPLES, target)
    return target


async def test_ryuuou_table_row_is_rank_one(kb: KnowledgeBase, docs: Path) -> None:
    summary = await kb.index_dir(docs)
    assert summary.added == 4 and not summary.errors
    result = await kb.retrieve("りゅうおう", n_results=3)
    top = result.hits[0]
    assert top.text.startswith("名前: りゅうおう\n")
    assert "HP: 90" in top.text and "MP: 75" in top.text
    assert top.content_type == "table"
    assert top.source_url.endswith("monsters.md")
    assert top.vector_distance is not None and top.bm25_score is not None


async def test_exact_proper_noun_finds_its_page(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    result = await kb.retrieve("ロトのしるし", n_results=3)
    assert result.sources[0].endswith("items.md")
    assert "ロトのしるし" in result.hits[0].text


async def test_english_semantic_query(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    result = await kb.retrieve("run several coroutines at the same time", n_results=2)
    assert result.sources[0].endswith("asyncio-guide.md")
    assert "gather" in result.hits[0].text


async def test_context_lists_each_hit_with_its_rank_and_passage(
    kb: KnowledgeBase, docs: Path
) -> None:
    await kb.index_dir(docs)
    result = await kb.retrieve("りゅうおう", n_results=5)
    ctx = result.context
    assert [h.rank for h in result.hits] == list(range(1, len(result.hits) + 1))
    starts = [ctx.index(f"## [{h.rank}] Source: {h.source_url}\n") for h in result.hits]
    assert starts == sorted(starts)
    for h in result.hits:
        assert h.text in h.passage or h.passage.startswith(h.text[:20])
        assert h.chunk_index in h.passage_chunks
    assert sum(len(h.passage) for h in result.hits) <= kb.settings.rag_answer_chars


async def test_a_hit_is_widened_to_its_section(kb: KnowledgeBase, tmp_path: Path) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    steps = "\n\n".join(
        f"手順{i}: 設定ファイルの項目{i}を確認し、値が正しいことを確かめてから次へ進みます。"
        for i in range(1, 13)
    )
    (folder / "guide.md").write_text(f"# 導入ガイド\n\n## 設定\n\n{steps}\n\n## 付録\n\n別の話題。")
    await kb.index_dir(folder)
    hit = (await kb.retrieve("手順6 項目6", n_results=1)).hits[0]
    assert "手順6" in hit.text and len(hit.text) <= kb.settings.rag_chunk_size
    assert len(hit.text) < len(hit.passage) <= kb.settings.rag_passage_chars
    assert "手順5" in hit.passage and "手順7" in hit.passage  # read on, and back
    assert "別の話題" not in hit.passage  # another section stays out
    assert hit.passage.count("手順6:") == 1  # chunk overlaps are not repeated
    assert hit.passage_chunks == sorted(hit.passage_chunks)
    narrow = await kb.retrieve("手順6 項目6", n_results=1, options={"rag_passage_chars": 0})
    assert narrow.hits[0].passage == "" and narrow.hits[0].text == hit.text


async def test_a_hit_late_in_its_section_is_shown_under_the_section_lead(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    folder = tmp_path / "api"
    folder.mkdir()
    steps = "\n\n".join(
        f"例{i}: 設定ファイルの項目{i}を確認し、値が正しいことを確かめてから次へ進みます。"
        for i in range(1, 41)
    )
    lead = "coroutine to_thread(func): 関数 func を別のスレッドで実行します。"
    (folder / "api.md").write_text(f"# API\n\n## to_thread\n\n{lead}\n\n{steps}\n")
    await kb.index_dir(folder)
    hit = (await kb.retrieve("例36 項目36", n_results=1)).hits[0]
    assert "例36" in hit.text and lead not in hit.text
    assert lead in hit.passage and "[…]" in hit.passage
    assert hit.passage.index(lead) < hit.passage.index("[…]") < hit.passage.index("例36")
    assert "例8:" not in hit.passage  # what lies between is left out, not squeezed in
    assert len(hit.passage) <= kb.settings.rag_passage_chars
    assert hit.passage_chunks == sorted(hit.passage_chunks)


async def test_passages_are_read_with_the_hits_and_follow_a_re_ingest(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    page = folder / "guide.md"
    write_steps_page(page, 1)
    await kb.index_dir(folder)
    await kb.retrieve("手順6 項目6", n_results=3)  # the page's chunk order is now known
    reads: list[int] = []
    collection = type(kb.store.chroma.collection)
    real_get = collection.get

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(len(kwargs.get("ids") or []))
        return real_get(self, *args, **kwargs)

    monkeypatch.setattr(collection, "get", counted)
    hit = (await kb.retrieve("手順6 項目6", n_results=3)).hits[0]
    assert "手順5" in hit.passage and "手順7" in hit.passage
    assert reads == []  # a small store holds its rows in memory
    held, kb.store.chroma.rows = kb.store.chroma.rows, None  # as one too big for that
    again = (await kb.retrieve("手順6 項目6", n_results=3)).hits[0]
    assert again.passage == hit.passage
    assert 1 <= len(reads) <= 2  # the hits with their neighbours, and at most one more
    kb.store.chroma.rows = held
    # the page changes: three steps fewer in front, so every chunk index moves
    write_steps_page(page, 4)
    page.touch()
    await kb.index_dir(folder)
    again = (await kb.retrieve("手順6 項目6", n_results=3)).hits
    assert "手順3" not in again[0].passage and "手順7" in again[0].passage
    kb.store.chroma.orders.clear()
    cold = (await kb.retrieve("手順6 項目6", n_results=3)).hits
    assert [h.passage for h in cold] == [h.passage for h in again]


async def test_search_options_are_validated_like_settings(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    with pytest.raises(RAGError, match="RAG_RETRIEVAL_COUNT=10000000"):
        await kb.retrieve("スライム", options={"rag_retrieval_count": 10**7})
    with pytest.raises(RAGError, match="RAG_VECTOR_WEIGHT"):
        await kb.retrieve("スライム", options={"rag_vector_weight": "lots"})
    two = await kb.retrieve("スライム", options={"rag_retrieval_count": 2, "not_a_setting": 1})
    assert len(two.hits) == 2


async def test_stats_counts_are_taken_between_writes(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await kb.ingest_text("file:///n/a.md", "# A\n\n最初のメモ。", kind="file")
    bm25 = kb.store.bm25
    real = bm25.replace_source
    in_chroma = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:  # Chroma holds the chunks, BM25 not yet
        in_chroma.set()
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(bm25, "replace_source", slow)
    writing = asyncio.ensure_future(
        kb.ingest_text("file:///n/b.md", "# B\n\n二つ目のメモ。", kind="file")
    )
    assert await asyncio.to_thread(in_chroma.wait, 10)
    stats = await kb.stats()
    assert stats.total_chunks == stats.bm25_documents
    await writing
    after = await kb.stats()
    assert after.total_chunks == after.bm25_documents
    assert after.sources == ["file:///n/a.md", "file:///n/b.md"]


async def test_modes(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    sep = await kb.retrieve("スライム", n_results=3, mode="separate")
    assert sep.hits == [] and sep.vector_hits and sep.bm25_hits
    assert all(h.bm25_score is not None for h in sep.bm25_hits)
    assert all(h.vector_distance is not None for h in sep.vector_hits)
    bm = await kb.retrieve("スライム", n_results=3, mode="bm25")
    assert "スライム" in bm.hits[0].text
    vec = await kb.retrieve("スライム", n_results=3, mode="vector")
    assert len(vec.hits) == 3
    with pytest.raises(RAGError, match="mode"):
        await kb.retrieve("x", mode="nope")


async def test_empty_query_is_refused(kb: KnowledgeBase) -> None:
    with pytest.raises(EmptyQueryError):
        await kb.retrieve("   ")


async def test_empty_knowledge_base_returns_nothing(kb: KnowledgeBase) -> None:
    result = await kb.retrieve("りゅうおう")
    assert result.hits == [] and result.context == ""


async def test_reingest_unchanged_costs_no_embedding(
    kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    text = (SAMPLES / "monsters.md").read_text()
    first = await kb.ingest_text("https://example.com/monsters", text, title="モンスター図鑑")
    assert first.embedded == first.chunks > 0
    calls = counting_embed.texts
    again = await kb.ingest_text("https://example.com/monsters", text, title="モンスター図鑑")
    assert again.unchanged and counting_embed.texts == calls


async def test_two_index_runs_of_one_folder_at_once_embed_each_chunk_once(
    kb: KnowledgeBase, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    shutil.copytree(SAMPLES, folder)
    first, second = await asyncio.gather(kb.index_dir(folder), kb.index_dir(folder))
    stats = await kb.stats()
    assert stats.total_chunks == stats.bm25_documents == first.chunks == second.chunks > 0
    assert counting_embed.texts == stats.total_chunks  # not twice: the second run waited
    assert first.added + second.added == len(list(folder.iterdir()))
    assert first.added + first.unchanged == second.added + second.unchanged


class Gate(threading.Event):
    """Set to let held writes through; `entered` is set once one is held."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()


def hold_writes(base: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> Gate:
    """Make `base`'s source writes wait in their thread until the gate is set."""
    gate = Gate()
    real = base.store.replace_source

    def held(*args: Any, **kwargs: Any) -> Any:
        gate.entered.set()
        gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(base.store, "replace_source", held)
    return gate


async def test_a_cancelled_write_keeps_its_sources_turn_until_the_write_ends(
    kb: KnowledgeBase, counting_embed: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "https://example.com/monsters"
    text = (SAMPLES / "monsters.md").read_text()
    release = hold_writes(kb, monkeypatch)
    first = asyncio.create_task(kb.ingest_text(url, text, title="図鑑"))
    await asyncio.to_thread(release.entered.wait, 30)
    first.cancel()  # Ctrl-C, a cancelled job: the write under way goes on to its end
    done, _ = await asyncio.wait([first], timeout=2)
    assert first in done and first.cancelled()  # the caller stops at once (a job's cancel)
    embedded = counting_embed.texts
    second = asyncio.create_task(kb.ingest_text(url, text, title="図鑑"))
    await asyncio.sleep(0.5)
    assert not second.done()  # it waits for the first write, not only for its caller
    release.set()
    again = await second
    assert again.unchanged and counting_embed.texts == embedded


async def test_closing_waits_for_a_write_whose_caller_was_cancelled(
    settings: RAGSettings, counting_embed: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "https://example.com/monsters"
    text = (SAMPLES / "monsters.md").read_text()
    base = KnowledgeBase(settings, embed_model=counting_embed)
    await base.open()
    release = hold_writes(base, monkeypatch)
    write = asyncio.create_task(base.ingest_text(url, text, title="図鑑"))
    await asyncio.to_thread(release.entered.wait, 30)
    write.cancel()  # a request cut off by the stop: its write goes on
    closing = asyncio.create_task(base.aclose())
    await asyncio.sleep(0.5)
    assert not closing.done()  # the store outlives the write
    release.set()
    await asyncio.wait_for(closing, 30)
    again = KnowledgeBase(settings, embed_model=counting_embed)
    await again.open()
    try:
        stats = await again.stats()
        assert stats.source_chunks.get(url, 0) > 0 and stats.total_chunks == stats.bm25_documents
    finally:
        await again.aclose()


async def test_changed_page_embeds_only_new_chunks_and_drops_stale(
    kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    url = "https://example.com/monsters"
    text = (SAMPLES / "monsters.md").read_text()
    first = await kb.ingest_text(url, text, title="図鑑")
    calls = counting_embed.texts
    changed = text.replace("| スライム | 3 | 0 | 5 |", "| スライム | 4 | 0 | 5 |")
    second = await kb.ingest_text(url, changed, title="図鑑")
    assert second.chunks == first.chunks
    assert counting_embed.texts - calls == second.embedded == 1
    assert second.removed == 1
    stats = await kb.stats()
    assert stats.total_chunks == stats.bm25_documents == first.chunks
    hit = (await kb.retrieve("スライム", n_results=1, mode="bm25")).hits[0]
    assert "HP: 4" in hit.text


async def test_a_stored_chunk_links_its_stored_neighbours_by_id_alone(kb: KnowledgeBase) -> None:
    url = "https://example.com/monsters"
    text = (SAMPLES / "monsters.md").read_text()
    await kb.ingest_text(url, text, title="図鑑")
    changed = text.replace("| スライム | 3 | 0 | 5 |", "| スライム | 4 | 0 | 5 |")
    await kb.ingest_text(url, changed, title="図鑑")  # a neighbour of kept chunks changes
    nodes = sorted(kb.store.source_nodes(url), key=lambda n: n.metadata["chunk_index"])
    assert len(nodes) > 2
    for before, after in itertools.pairwise(nodes):
        assert before.relationships[NodeRelationship.NEXT].node_id == after.node_id
        assert after.relationships[NodeRelationship.PREVIOUS].node_id == before.node_id
    for node in nodes:
        assert node.ref_doc_id == url
        assert all(not info.metadata for info in node.relationships.values())  # type: ignore[union-attr]


async def test_failed_reingest_keeps_old_knowledge(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "https://example.com/items"
    await kb.ingest_text(url, (SAMPLES / "items.md").read_text(), title="装備")
    before = (await kb.stats()).total_chunks

    def boom(*_: Any, **__: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(kb.store.chroma, "upsert_nodes", boom)
    with pytest.raises(RuntimeError):
        await kb.ingest_text(url, "全く別の内容です。", title="装備")
    monkeypatch.undo()
    assert (await kb.stats()).total_chunks == before
    assert "ロトのつるぎ" in (await kb.retrieve("ロトのつるぎ", n_results=1)).hits[0].text


async def test_delete_source(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    target = (docs / "items.md").resolve().as_uri()
    removed = await kb.delete_source(target)
    assert removed > 0
    stats = await kb.stats()
    assert target not in stats.sources
    assert stats.total_chunks == stats.bm25_documents
    result = await kb.retrieve("ロトのしるし", n_results=5, mode="bm25")
    assert all(h.source_url != target for h in result.hits)
    with pytest.raises(UnknownSourceError, match="rag stats"):
        await kb.delete_source(target)


async def test_delete_by_plain_path(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    assert await kb.delete_source(str(docs / "kyoto.html")) > 0


async def test_index_dir_is_incremental(kb: KnowledgeBase, docs: Path) -> None:
    first = await kb.index_dir(docs)
    assert (first.added, first.updated, first.deleted, first.unchanged) == (4, 0, 0, 0)
    (docs / "items.md").write_text("# 伝説の装備\n\nロトのかぶとは勇者の兜です。\n")
    (docs / "kyoto.html").unlink()
    (docs / "new.txt").write_text("新しいメモ。メタルスライムは逃げ足が速い。\n")
    second = await kb.index_dir(docs)
    assert (second.added, second.updated, second.deleted, second.unchanged) == (1, 1, 1, 2)
    stats = await kb.stats()
    assert len(stats.sources) == 4
    assert stats.total_chunks == stats.bm25_documents
    third = await kb.index_dir(docs)
    assert (third.added, third.updated, third.deleted, third.unchanged) == (0, 0, 0, 4)


async def test_index_dir_rejects_missing_folder(kb: KnowledgeBase, tmp_path: Path) -> None:
    with pytest.raises(RAGError, match="not a directory"):
        await kb.index_dir(tmp_path / "nope")


async def test_html_file_is_extracted(kb: KnowledgeBase, docs: Path) -> None:
    await kb.index_dir(docs)
    result = await kb.retrieve("清水の舞台", n_results=1)
    hit = result.hits[0]
    assert hit.source_url.endswith("kyoto.html")
    assert "トップ | 観光" not in hit.text  # <nav> dropped
    assert "清水寺" in hit.heading_path


async def _indexed_chunks(settings: RAGSettings, embed: CountingEmbedding, docs: Path) -> int:
    """Index `docs` with a knowledge base that is then closed; its chunk count."""
    kb = KnowledgeBase(settings, embed_model=embed)
    await kb.index_dir(docs)
    total = (await kb.stats()).total_chunks
    await kb.aclose()
    return total


async def test_bm25_rebuilt_when_missing(
    settings: RAGSettings, counting_embed: CountingEmbedding, docs: Path
) -> None:
    total = await _indexed_chunks(settings, counting_embed, docs)
    shutil.rmtree(settings.bm25_persist_dir)
    reopened = KnowledgeBase(settings, embed_model=counting_embed)
    stats = await reopened.stats()
    assert stats.bm25_documents == total > 0
    hits = (await reopened.retrieve("りゅうおう", mode="bm25")).hits
    assert hits and "りゅうおう" in hits[0].text


async def test_bm25_rebuilt_when_corrupt(
    settings: RAGSettings, counting_embed: CountingEmbedding, docs: Path
) -> None:
    total = await _indexed_chunks(settings, counting_embed, docs)
    for f in Path(settings.bm25_persist_dir).rglob("*"):
        if f.is_file():
            f.write_bytes(b"\x00garbage")
    reopened = KnowledgeBase(settings, embed_model=counting_embed)
    assert (await reopened.stats()).bm25_documents == total


async def test_model_mismatch_names_reindex_and_reindex_fixes_it(
    settings: RAGSettings, counting_embed: CountingEmbedding, docs: Path
) -> None:
    total = await _indexed_chunks(settings, counting_embed, docs)
    other = settings.model_copy(update={"embedding_provider": "local"})
    with pytest.raises(EmbeddingMismatchError, match="rag reindex"):
        await KnowledgeBase(other, embed_model=counting_embed).open()
    fresh = KnowledgeBase(other, embed_model=counting_embed)
    assert await fresh.reindex() == total
    stats = await fresh.stats()
    assert stats.embedding_model == other.embedding_model_name
    assert stats.total_chunks == total and len(stats.sources) == 4
    assert (await fresh.retrieve("りゅうおう")).hits[0].text.startswith("名前: りゅうおう")


async def test_a_failed_reindex_leaves_searches_as_they_were(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    docs: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.index_dir(docs)
    before = [h.node_id for h in (await kb.retrieve("りゅうおう", mode="vector")).hits]
    assert kb.store.chroma.exact is not None  # a small store: searched exactly

    def broken(self: Any, texts: Any) -> Any:
        raise RuntimeError("the embedding server went away")

    monkeypatch.setattr(type(counting_embed), "_get_text_embeddings", broken)
    with pytest.raises(RuntimeError, match="went away"):
        await kb.reindex()
    assert kb.store.chroma.exact is not None  # still exact search, not HNSW until a restart
    after = [h.node_id for h in (await kb.retrieve("りゅうおう", mode="vector")).hits]
    assert after == before


async def test_hybrid_disabled_means_vector_only(
    settings: RAGSettings, counting_embed: CountingEmbedding, docs: Path
) -> None:
    off = settings.model_copy(update={"rag_hybrid_search_enabled": False})
    kb = KnowledgeBase(off, embed_model=counting_embed)
    await kb.index_dir(docs)
    result = await kb.retrieve("りゅうおう")
    assert result.mode == "vector"
    assert all(h.combined_score == pytest.approx(1 - h.vector_distance) for h in result.hits)


async def test_retrieval_logging_follows_debug_switch(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    docs: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    on = settings.model_copy(update={"rag_debug_log_enabled": True})
    kb = KnowledgeBase(on, embed_model=counting_embed)
    await kb.index_dir(docs)
    with caplog.at_level("DEBUG", logger="rag_app"):
        await kb.retrieve("りゅうおう")
    text = caplog.text
    assert 'RAG retrieve: query="りゅうおう"' in text
    assert "RAG result 1: combined=" in text and "monsters.md" in text
    assert "query_embedding" in text and "bm25_query" in text
    caplog.clear()
    await kb.aclose()  # one owner at a time
    off = KnowledgeBase(settings, embed_model=counting_embed)
    with caplog.at_level("DEBUG", logger="rag_app.retrieval"):
        await off.retrieve("りゅうおう")
    assert "RAG retrieve" not in caplog.text


async def test_sync_retrieve_works_inside_a_running_event_loop(
    kb: KnowledgeBase, docs: Path
) -> None:
    # what a notebook does: call the synchronous LlamaIndex API while a loop runs
    await kb.index_dir(docs)
    nodes = kb.retriever(n_results=2).retrieve("りゅうおう")
    assert nodes and "りゅうおう" in nodes[0].node.get_content()


async def test_passages_fetch_neighbours_by_id_from_the_source_record(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    steps = "\n\n".join(f"手順{i}: 項目{i}を確認してから次へ進みます。" * 2 for i in range(1, 13))
    (folder / "guide.md").write_text(f"# 導入\n\n{steps}")
    await kb.index_dir(folder)
    source = (folder / "guide.md").resolve().as_uri()
    record = kb.store.chroma.get_source(source)
    assert record is not None
    order = record.ordered_chunk_ids()
    nodes = {n.node_id: n for n in kb.store.chroma.get_nodes(order)}
    assert [nodes[i].metadata["chunk_index"] for i in order] == list(range(len(order)))

    def no_metadata_query(windows: object) -> list[object]:
        raise AssertionError("neighbours of a recorded source are fetched by id")

    monkeypatch.setattr(kb.store.chroma, "section_chunks", no_metadata_query)
    hit = (await kb.retrieve("手順6 項目6", n_results=1)).hits[0]
    assert "手順5" in hit.passage and "手順7" in hit.passage


async def test_a_source_over_the_chunk_cap_is_refused_whole_and_embeds_nothing(
    settings: RAGSettings, counting_embed: CountingEmbedding
) -> None:

    assert settings.rag_max_chunks_per_source == MAX_CHUNKS_PER_SOURCE_DEFAULT == 5000
    small = settings.model_copy(update={"rag_max_chunks_per_source": 5})
    base = KnowledgeBase(small, embed_model=counting_embed)
    await base.open()
    try:
        text = "\n\n".join(f"## Part {i}\n\n" + "kettle steam valve " * 20 for i in range(12))
        with pytest.raises(
            RAGError, match=r"makes \d+ chunks, more than RAG_MAX_CHUNKS_PER_SOURCE"
        ):
            await base.ingest_text("file:///big.md", text, title="big", kind="file")
        assert counting_embed.texts == 0 and (await base.stats()).total_chunks == 0
    finally:
        await base.aclose()


async def test_a_source_whose_chunks_hold_too_much_text_is_refused_whole(
    settings: RAGSettings, counting_embed: CountingEmbedding
) -> None:
    """Embedding costs what the chunks' text costs: a page within the chunk cap whose rows
    each hold 2,000 characters is refused above twice RAG_MAX_DOCUMENT_CHARS."""
    small = settings.model_copy(update={"rag_max_document_chars": 5000})
    base = KnowledgeBase(small, embed_model=counting_embed)
    await base.open()
    try:
        rows = "\n".join(f"| row {i} | " + "kettle " * 280 + "|" for i in range(6))
        text = "| name | text |\n| --- | --- |\n" + rows
        with pytest.raises(RAGError, match=r"characters of chunks, more than twice"):
            await base.ingest_text("file:///wide.md", text, title="wide", kind="file")
        assert counting_embed.texts == 0 and (await base.stats()).total_chunks == 0
        fits = "| name | text |\n| --- | --- |\n" + "\n".join(rows.splitlines()[:4])
        assert (await base.ingest_text("file:///fits.md", fits, kind="file")).chunks == 4
    finally:
        await base.aclose()


async def test_after_an_abnormal_stop_the_open_re_inserts_what_hnsw_lost(
    settings: RAGSettings, counting_embed: CountingEmbedding, docs: Path, monkeypatch: Any
) -> None:
    """A kill -9 can leave Chroma's HNSW without a chunk that SQLite still holds (seen once
    in 92 chunks; not reproducible on demand, so its query is made to miss one here). The
    next open re-inserts it and removes the pending-check file only when it has looked
    at every chunk."""
    first = KnowledgeBase(settings, embed_model=counting_embed)
    await first.open()
    await first.index_dir(docs)
    ids = sorted(first.store.chroma.all_ids())
    await first.aclose()
    gone = ids[len(ids) // 2]
    written: list[list[str]] = []
    real_query = chromadb.api.models.Collection.Collection.query
    real_upsert = chromadb.api.models.Collection.Collection.upsert

    def losing(self: Any, **kwargs: Any) -> Any:
        out = real_query(self, **kwargs)
        for r, row in enumerate(out["ids"]):
            keep = [k for k, i in enumerate(row) if i != gone]
            out["ids"][r] = [row[k] for k in keep]
            if out.get("distances") is not None:
                out["distances"][r] = [out["distances"][r][k] for k in keep]
        return out

    def recording(self: Any, **kwargs: Any) -> Any:
        written.append(list(kwargs["ids"]))
        return real_upsert(self, **kwargs)

    monkeypatch.setattr(chromadb.api.models.Collection.Collection, "query", losing)
    monkeypatch.setattr(chromadb.api.models.Collection.Collection, "upsert", recording)
    marker = Path(settings.chromadb_persist_dir) / ".pending"
    marker.touch()
    second = KnowledgeBase(settings, embed_model=counting_embed)
    second.heal_marker = marker
    await second.open()
    try:
        assert written == [[gone]]  # only the lost chunk's vector is written again
        assert not marker.exists()
        assert sorted(second.store.chroma.all_ids()) == ids
    finally:
        await second.aclose()
