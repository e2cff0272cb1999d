"""Text and structured output of the MCP tools, and the progress heartbeat (no server)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from mcp_server.formatting import (
    NO_HITS,
    crawl_progress_message,
    format_add,
    format_crawl,
    format_delete,
    format_jobs,
    format_search,
    format_stats,
)
from mcp_server.progress import Heartbeat
from mcp_server.schemas import CrawlOutput, SearchOutput, StatsOutput
from rag_app.markdown_fences import Fences
from rag_app.results import CrawlSummary, Hit, IngestResult, KBStats, RetrievalResult


def hit(node_id: str, url: str, text: str, **scores: float | None) -> Hit:
    return Hit(
        node_id=node_id,
        text=text,
        source_url=url,
        title="モンスター一覧",
        heading_path="モンスター > ボス",
        content_type="table",
        chunk_index=0,
        vector_distance=scores.get("vector_distance"),
        bm25_score=scores.get("bm25_score"),
        combined_score=float(scores.get("combined_score") or 0.0),
    )


A1 = hit("a1", "https://ex.test/a", "名前: りゅうおう / HP: 90", vector_distance=0.2)
A2 = hit("a2", "https://ex.test/a", "名前: スライム / HP: 3", vector_distance=0.4)
B1 = hit("b1", "https://ex.test/b", "しれんのしろ", bm25_score=4.5, combined_score=0.7)


def test_fused_text_has_one_ranked_heading_per_hit_in_rank_order() -> None:
    result = RetrievalResult(query="りゅうおう", mode="fused", hits=[A1, B1, A2])
    text = format_search(result)
    assert text.startswith(
        "## [1] Source: https://ex.test/a\n"
        "モンスター一覧 › モンスター › ボス · スコア 0.000 / ベクトル距離 0.200\n\n"
        "名前: りゅうおう / HP: 90"
    )
    assert "## [2] Source: https://ex.test/b\n" in text and "BM25 4.50" in text
    assert (
        text.index("[2]") < text.index("しれんのしろ") < text.index("[3]") < text.index("スライム")
    )
    assert [line[:6] for line in text.splitlines() if line.startswith("## ")] == [
        "## [1]",
        "## [2]",
        "## [3]",
    ]


def test_a_passage_replaces_the_chunk_and_its_headings_sit_below_the_hit() -> None:
    passage = "# ボス\n## りゅうおう\n名前: りゅうおう / HP: 90\n```sh\n# not a heading\n```"
    wide = replace(A1, rank=1, passage=passage)
    text = format_search(RetrievalResult(query="q", mode="fused", hits=[wide]))
    assert "### ボス\n### りゅうおう\n名前: りゅうおう / HP: 90" in text
    assert "```sh\n# not a heading\n```" in text
    assert sum(line.startswith("## ") for line in text.splitlines()) == 1
    out = SearchOutput.of(RetrievalResult(query="q", mode="fused", hits=[wide]))
    assert out.hits[0].passage == passage and out.hits[0].text == A1.text


def test_no_hits_message_in_every_mode() -> None:
    for mode in ("fused", "vector", "bm25", "separate"):
        assert format_search(RetrievalResult(query="x", mode=mode, hits=[])) == NO_HITS


def test_separate_mode_has_two_labelled_sections_and_skips_repeats() -> None:
    result = RetrievalResult(
        query="りゅうおう",
        mode="separate",
        hits=[],
        vector_hits=[A1, A2],
        bm25_hits=[A1, B1],
    )
    text = format_search(result)
    vector_part, bm25_part = text.split("# BM25 キーワード検索の結果 (2件)")
    assert vector_part.startswith("# ベクトル検索の結果 (2件)\n\n## [1] Source: https://ex.test/a")
    assert "りゅうおう" in vector_part and "スライム" in vector_part
    assert "りゅうおう" not in bm25_part, "a chunk already shown above is not repeated"
    assert "## [2] Source: https://ex.test/b\n" in bm25_part and "しれんのしろ" in bm25_part
    assert "同じチャンク 1 件は省略" in bm25_part


def test_separate_mode_numbers_each_hit_by_its_rank_in_its_list() -> None:
    """The BM25 section leaves out chunks the vector section shows, but the hits it shows
    keep their BM25 rank: the text's numbers are the structured content's `rank`s."""
    b2 = hit("b2", "https://ex.test/c", "たいまつ", bm25_score=2.0)
    result = RetrievalResult(
        query="q", mode="separate", hits=[], vector_hits=[A1, A2], bm25_hits=[A2, A1, B1, b2]
    )
    text = format_search(result)
    bm25_part = text.split("# BM25 キーワード検索の結果 (4件)")[1]
    heads = [line[:6] for line in bm25_part.splitlines() if line.startswith("## ")]
    assert heads == ["## [3]", "## [4]"]
    vector_part = text.split("# BM25")[0]
    assert [line[:6] for line in vector_part.splitlines() if line.startswith("## ")] == [
        "## [1]",
        "## [2]",
    ]
    out = SearchOutput.of(result)
    assert [h.rank for h in out.bm25_hits if h.node_id in ("b1", "b2")] == [3, 4]


def test_separate_mode_with_one_empty_side() -> None:
    result = RetrievalResult(query="q", mode="separate", hits=[], vector_hits=[], bm25_hits=[B1])
    text = format_search(result)
    assert "# ベクトル検索の結果 (0件)\n\n（該当なし）" in text
    assert "しれんのしろ" in text


def test_search_structured_content_keeps_every_score_and_rank() -> None:
    result = RetrievalResult(
        query="q", mode="separate", hits=[], vector_hits=[A1, A2], bm25_hits=[B1]
    )
    out = SearchOutput.of(result).model_dump(mode="json")
    assert [h["rank"] for h in out["vector_hits"]] == [1, 2]
    assert out["vector_hits"][0]["vector_distance"] == 0.2
    assert out["vector_hits"][0]["bm25_score"] is None
    assert out["bm25_hits"][0] | {"text": "", "passage": ""} == {
        "rank": 1,
        "node_id": "b1",
        "source_url": "https://ex.test/b",
        "title": "モンスター一覧",
        "heading_path": "モンスター > ボス",
        "page": None,
        "content_type": "table",
        "chunk_index": 0,
        "text": "",
        "passage": "",
        "vector_distance": None,
        "bm25_score": 4.5,
        "combined_score": 0.7,
    }
    assert out["sources"] == ["https://ex.test/a", "https://ex.test/b"]


def test_add_delete_texts_follow_spec_002() -> None:
    assert (
        format_add(IngestResult(source="https://ex.test/p", chunks=8))
        == "ページを取り込みました: https://ex.test/p (8チャンク)"
    )
    assert "変更なし" in format_add(IngestResult(source="u", chunks=8, unchanged=True))
    assert format_delete("https://ex.test/p", 8) == "削除しました: https://ex.test/p (8チャンク)"


def test_crawl_summary_text_and_structured_errors() -> None:
    summary = CrawlSummary(
        pages_crawled=15,
        chunks_stored=128,
        errors=2,
        unchanged=3,
        error_details=[
            {"url": "https://ex.test/x", "error": "HTTP 404 Not Found for https://ex.test/x."},
            {"url": "https://ex.test/y", "reason": "timed out"},
        ],
    )
    text = format_crawl(summary)
    assert text.splitlines()[0] == "完了: 15ページ / 128チャンク / エラー: 2件"
    assert "変更なし (再埋め込みなし): 3" in text
    assert "- https://ex.test/x: HTTP 404 Not Found" in text
    assert "- https://ex.test/y: timed out" in text
    out = CrawlOutput.of("https://ex.test/", "", summary).model_dump()
    assert out["error_details"][1] == {"url": "https://ex.test/y", "error": "timed out"}
    assert format_crawl(CrawlSummary()) == "完了: 0ページ / 0チャンク / エラー: 0件"


def test_stats_text_and_structured() -> None:
    sources = [f"https://ex.test/{i:02d}" for i in range(25)]
    stats = KBStats(
        total_chunks=342,
        sources=sources,
        embedding_model="multilingual-e5-small",
        embedding_dimension=384,
        bm25_documents=342,
        vector_store="./chroma_db",
        bm25_dir="./bm25_index",
        source_chunks={s: 10 + i for i, s in enumerate(sources)},
        source_dates={s: "2026-11-23T10:00:00+00:00" for s in sources},
    )
    text = format_stats(stats)
    assert text.startswith("ナレッジベース統計:\n     総チャンク数: 342\n     ソースURL数: 25\n")
    assert "multilingual-e5-small (384次元)" in text
    assert "- https://ex.test/00 (10チャンク, 2026-11-23 10:00:00)" in text
    assert "https://ex.test/19" in text and "https://ex.test/20" not in text
    assert "他 5件 (offset=20 で続きを表示)" in text
    second = format_stats(stats, offset=20)
    assert "https://ex.test/24 (34チャンク" in second and "https://ex.test/19" not in second
    out = StatsOutput.of(stats, offset=20, limit=3).model_dump()
    assert out["source_count"] == 25 and out["offset"] == 20
    assert out["sources"] == sources[20:23]  # the page asked for (its details too)
    assert [d["source"] for d in out["source_details"]] == sources[20:23]
    assert out["source_details"][0] == {
        "source": "https://ex.test/20",
        "chunks": 30,
        "indexed_at": "2026-11-23T10:00:00+00:00",
    }


def test_progress_messages() -> None:
    assert "リンク収集中" in crawl_progress_message(0, None)
    assert crawl_progress_message(5, 50) == "5/50ページ取得中..."


async def test_heartbeat_values_always_increase_and_keep_coming_while_stuck() -> None:
    sent: list[tuple[float, float | None, str | None]] = []

    async def sink(progress: float, total: float | None, message: str | None) -> None:
        sent.append((progress, total, message))

    async with Heartbeat(sink, crawl_progress_message, interval=0.05, tick=0.01) as beat:
        await asyncio.sleep(0.2)  # the index page is slow: heartbeats, no total yet
        beat.update(0, 3)
        await asyncio.sleep(0.05)
        beat.update(1, 3)
        await asyncio.sleep(0.25)  # one slow page: heartbeats between 1 and 2
        beat.update(3, 3)
    values = [v for v, _, _ in sent]
    assert values == sorted(set(values)), f"not strictly increasing: {values}"
    assert values[0] == 0.0 and values[-1] == 3.0
    stuck = [v for v in values if 1 < v < 2]
    assert len(stuck) >= 2, f"expected heartbeats while page 2 was slow: {values}"
    assert all(total == 3.0 for v, total, _ in sent if v >= 1)
    assert sent[-1][2] == "3/3ページ取得中..."


async def test_heartbeat_survives_a_failing_sink() -> None:
    async def broken(progress: float, total: float | None, message: str | None) -> None:
        raise ConnectionError("client went away")

    async with Heartbeat(broken, crawl_progress_message, interval=0.01, tick=0.01) as beat:
        beat.update(1, 2)
        await asyncio.sleep(0.05)
    assert beat.sent == 0


def test_a_resumed_job_says_so_in_its_line() -> None:
    job = {
        "id": "1a2b3c4d",
        "kind": "crawl",
        "target": "https://docs.test/",
        "state": "running",
        "done": 3,
        "total": 0,
        "error": "",
        "result": {},
    }
    assert "再開" not in format_jobs([job])
    assert "(再起動後に再開, 2回目)" in format_jobs([{**job, "attempt": 2}])


def test_a_jobs_counts_are_labelled_by_its_state() -> None:
    """Only a finished job's counts are 完了; a running one's are 途中経過, a cancelled
    one's 中止時点, and a failed one's 失敗時点 without an `エラー: 0件` that would read as
    a clean run (its own failure is the 原因 after them)."""
    counts = {"pages_crawled": 1, "chunks_stored": 4, "errors": 0}
    job = {
        "id": "1a2b3c4d", "kind": "crawl", "target": "https://docs.test/", "done": 1,
        "total": 4, "error": "", "result": counts,
    }  # fmt: skip
    lines = {
        state: format_jobs([{**job, "state": state}])
        for state in ("running", "done", "cancelled", "failed")
    }
    assert lines["running"].endswith(" — 途中経過: 1ページ / 4チャンク / エラー: 0件")
    assert lines["done"].endswith(" — 完了: 1ページ / 4チャンク / エラー: 0件")
    assert lines["cancelled"].endswith(" — 中止時点: 1ページ / 4チャンク / エラー: 0件")
    failed = format_jobs([{**job, "state": "failed", "error": "The disk is full."}])
    assert failed.endswith(" — 失敗時点: 1ページ / 4チャンク (原因: The disk is full.)")
    with_errors = format_jobs([{**job, "state": "failed", "result": {**counts, "errors": 2}}])
    assert with_errors.endswith(" — 失敗時点: 1ページ / 4チャンク / エラー: 2件")
    refresh = {**job, "kind": "refresh", "result": {"unchanged": 3, "updated": 1, "errors": 0}}
    assert format_jobs([{**refresh, "state": "running"}]).endswith(
        " — 途中経過: 変更なし: 3 / 更新: 1 / 削除: 0 / エラー: 0件"
    )
    assert "完了" not in format_jobs([{**refresh, "state": "cancelled"}])


def test_a_refresh_jobs_target_is_japanese_in_the_text_and_kept_in_the_structure() -> None:
    """The Japanese text does not show the record's English `stored web pages`; the
    structured `target` stays as clients already read it."""
    from mcp_server.formatting import format_job_started
    from mcp_server.schemas import JobsOutput
    from rag_app.jobs import REFRESH_TARGET

    job = {
        "id": "1a2b3c4d", "kind": "refresh", "target": REFRESH_TARGET, "state": "running",
        "done": 0, "total": 0, "error": "", "result": {},
    }  # fmt: skip
    started, listed = format_job_started(job), format_jobs([job])
    assert "(ジョブID: 1a2b3c4d, 対象: 保存済みのWebページ全体)" in started
    assert listed.endswith("ページ: 保存済みのWebページ全体")
    assert "stored web pages" not in started + listed
    assert JobsOutput.of([job]).jobs[0].target == "stored web pages"
    crawl = {**job, "kind": "crawl", "target": "https://docs.test/"}
    assert "対象: https://docs.test/)" in format_job_started(crawl)


def test_the_first_page_of_a_long_source_lists_its_sections() -> None:
    """An unknown section's error says the sections are listed when the source is read
    without one: so they are, on its first page, however long the source."""
    from mcp_server.formatting import MAX_LISTED_SECTIONS, format_read
    from rag_app.results import ReadResult

    sections = [f"Guide > Part {i}" for i in range(MAX_LISTED_SECTIONS + 5)]
    first = ReadResult(
        source="https://ex.test/guide", title="Guide", section="", text="x" * 100,
        offset=0, next_offset=100, total_chars=5000, sections=sections,
    )  # fmt: skip
    text = format_read(first)
    assert "見出し:\n- Guide > Part 0\n- Guide > Part 1\n" in text and "\n- …他 5件" in text
    assert text.rstrip().endswith("（続きあり: offset=100 で続きを読めます）")
    later = ReadResult(
        source="https://ex.test/guide", title="Guide", section="", text="x" * 100,
        offset=100, next_offset=200, total_chars=5000, sections=sections,
    )  # fmt: skip
    assert "見出し" not in format_read(later)


def test_a_passage_that_leaves_a_code_block_open_is_closed_before_the_next_hit() -> None:
    open_code = replace(A1, passage="```python\nx = 1\n## [9] Source: http://spoof/")
    text = format_search(RetrievalResult(query="q", mode="fused", hits=[open_code, B1]))
    fences = Fences()
    hits = [line for line in text.split("\n") if not fences.step(line) and line.startswith("#")]
    assert [line.split("]")[0] for line in hits] == ["## [1", "## [2"], hits
    assert "```python\nx = 1\n## [9] Source: http://spoof/\n```" in text


def test_hits_left_out_by_the_budget_travel_and_are_said() -> None:
    """`left_out` survives the store service's JSON and ends the text and the structured
    content alike."""
    result = RetrievalResult(query="q", mode="fused", hits=[A1], left_out=2)
    again = RetrievalResult.from_dict(result.to_dict())
    assert again.left_out == 2
    assert format_search(again).endswith(
        "残りの 2 件は省略しました。n_results を減らすと各結果の本文が長くなります）"
    )
    assert SearchOutput.of(again).left_out == 2


def test_read_names_its_section_once_and_lists_headings_holding_a_slash_unambiguously() -> None:
    from mcp_server.formatting import format_read
    from rag_app.results import ReadResult

    page = ReadResult(
        source="https://ex.test/s", title="Slash Doc", section="Slash Doc > Input / Output",
        text="x", offset=0, next_offset=None, total_chars=1,
    )  # fmt: skip
    assert "\nSlash Doc › Input / Output · 0–1 / 1 文字" in format_read(page)
    whole = replace(page, section="", sections=["Slash Doc > Input / Output", "Slash Doc > B"])
    assert "見出し:\n- Slash Doc > Input / Output\n- Slash Doc > B" in format_read(whole)


def test_declined_pointers_to_one_place_say_which_chunk() -> None:
    same = [replace(A1, node_id=f"c{i}", chunk_index=i) for i in (938, 932)]
    text = format_search(
        RetrievalResult(query="q", mode="fused", hits=[*same, B1], confident=False)
    )
    assert "- [1] モンスター一覧 › モンスター › ボス (チャンク 938) — https://ex.test/a" in text
    assert "- [2] モンスター一覧 › モンスター › ボス (チャンク 932) — https://ex.test/a" in text
    assert "- [3] モンスター一覧 › モンスター › ボス — https://ex.test/b" in text
