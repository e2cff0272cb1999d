"""The tools through the SDK's in-process client, over a real KnowledgeBase.

Fast: no subprocess. `rag_add` / `rag_crawl` use stand-ins for the KnowledgeBase's page
fetching where a test needs to control timing (a slow page, a blocked crawl); the real
crawl is exercised end to end in test_mcp_stdio.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from mcp_server.formatting import NO_HITS
from mcp_server.server import build_server
from rag_app.config import RAGSettings, load_settings
from rag_app.errors import EmbeddingUnavailableError
from rag_app.knowledge import KnowledgeBase
from rag_app.results import CrawlSummary, IngestResult

MONSTERS_URL = "https://ex.test/monsters"
MONSTERS = """# モンスター一覧

| 名前 | HP | MP | 出現場所 |
| --- | --- | --- | --- |
| スライム | 3 | 0 | フィールド |
| ドラキー | 8 | 0 | フィールド |
| りゅうおう | 90 | 75 | りゅうおうのしろ |
"""
CASTLE_URL = "https://ex.test/castle"
CASTLE = "# しれんのしろ\n\nしれんのしろ には ふしぎなかぎ と たいまつ が あります。"
PAGES = {MONSTERS_URL: ("モンスター一覧", MONSTERS), CASTLE_URL: ("しれんのしろ", CASTLE)}


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@asynccontextmanager
async def connect(
    kb: Any, settings: RAGSettings, *, heartbeat_sec: float = 2.0, mode: str = "auto"
) -> AsyncIterator[Client]:
    async def factory() -> Any:
        return kb

    server = build_server(settings, kb_factory=factory, heartbeat_sec=heartbeat_sec)
    async with Client(server, mode=mode) as client:  # type: ignore[arg-type]
        yield client


async def ingest(kb: KnowledgeBase, *urls: str) -> None:
    for url in urls or tuple(PAGES):
        title, text = PAGES[url]
        await kb.ingest_text(url, text, title=title)


def stand_in_fetching(
    kb: KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
    *,
    slow_page: str | None = None,
    delay: float = 0.0,
    gate: asyncio.Event | None = None,
) -> None:
    """`ingest_page` / `ingest_from_index` that store PAGES via the real `ingest_text`."""

    async def ingest_page(url: str) -> IngestResult:
        title, text = PAGES[url]
        return await kb.ingest_text(url, text, title=title)

    async def ingest_from_index(
        url: str,
        pattern: str = "",
        progress: Callable[[int, int], None] | None = None,
        **_options: object,
    ) -> CrawlSummary:
        if gate is not None:
            await gate.wait()
        links = [u for u in PAGES if pattern in u] + ["https://ex.test/missing"]
        summary = _options.get("summary") or CrawlSummary()  # a job's, filled as it goes
        assert isinstance(summary, CrawlSummary)
        for done, link in enumerate(links, start=1):
            if link == slow_page:
                await asyncio.sleep(delay)
            if link in PAGES:
                result = await ingest_page(link)
                summary.pages_crawled += 1
                summary.chunks_stored += result.chunks
            else:
                summary.errors += 1
                summary.error_details.append(
                    {"url": link, "reason": f"HTTP 404 Not Found for {link}."}
                )
            if progress:
                progress(done, len(links))
        return summary

    monkeypatch.setattr(kb, "ingest_page", ingest_page, raising=False)
    monkeypatch.setattr(kb, "ingest_from_index", ingest_from_index, raising=False)


async def test_lists_six_tools_with_schemas(kb: KnowledgeBase, settings: RAGSettings) -> None:
    async with connect(kb, settings) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == [
        "rag_add",
        "rag_crawl",
        "rag_delete",
        "rag_jobs",
        "rag_read",
        "rag_refresh",
        "rag_search",
        "rag_stats",
    ]
    required = {name: t.input_schema.get("required", []) for name, t in tools.items()}
    assert required == {
        "rag_search": ["query"],
        "rag_add": ["url"],
        "rag_crawl": ["url"],
        "rag_delete": ["url"],
        "rag_stats": [],
        "rag_read": ["source"],
        "rag_jobs": [],
        "rag_refresh": [],
    }
    search_props = tools["rag_search"].input_schema["properties"]
    assert set(search_props) == {"query", "n_results", "mode", "source"}
    mode_types = {b.get("type"): b for b in search_props["mode"]["anyOf"]}
    assert mode_types["string"]["enum"] == ["fused", "vector", "bm25", "separate"]
    assert "enum" not in search_props["mode"] and "enum" not in mode_types["null"]
    assert "RAG_" not in search_props["n_results"]["description"]  # says what it does
    read_props = tools["rag_read"].input_schema["properties"]
    assert set(read_props) == {"source", "section", "offset", "max_chars"}
    crawl_props = tools["rag_crawl"].input_schema["properties"]
    assert {"pattern", "max_depth", "max_pages", "exclude", "sitemap", "wait"} <= set(crawl_props)
    for tool in tools.values():
        assert tool.description and tool.output_schema, tool.name
    assert tools["rag_search"].annotations and tools["rag_search"].annotations.read_only_hint
    assert tools["rag_delete"].annotations and tools["rag_delete"].annotations.destructive_hint


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_search_finds_the_table_row(
    kb: KnowledgeBase, settings: RAGSettings, mode: str
) -> None:
    await ingest(kb)
    async with connect(kb, settings, mode=mode) as client:
        result = await client.call_tool("rag_search", {"query": "りゅうおう の HP", "n_results": 3})
    assert not result.is_error, text_of(result)
    text = text_of(result)
    assert text.startswith(f"## [1] Source: {MONSTERS_URL}\nモンスター一覧")
    assert "りゅうおう" in text and "90" in text
    assert "## [4]" not in text  # rows next to the hit are in its passage, not repeated
    assert text.count("名前: りゅうおう") == 1
    data = result.structured_content
    assert data is not None and data["query"] == "りゅうおう の HP"
    top = data["hits"][0]
    assert top["source_url"] == MONSTERS_URL and "りゅうおう" in top["text"]
    assert top["title"] == "モンスター一覧" and top["rank"] == 1
    assert {"vector_distance", "bm25_score", "combined_score", "heading_path"} <= set(top)
    assert data["sources"][0] == MONSTERS_URL


async def test_separate_mode_returns_both_lists(kb: KnowledgeBase, settings: RAGSettings) -> None:
    await ingest(kb)
    async with connect(kb, settings) as client:
        result = await client.call_tool("rag_search", {"query": "ふしぎなかぎ", "mode": "separate"})
    assert not result.is_error, text_of(result)
    text = text_of(result)
    assert text.startswith("# ベクトル検索の結果 (")
    assert "# BM25 キーワード検索の結果 (" in text
    data = result.structured_content
    assert data is not None and data["mode"] == "separate" and data["hits"] == []
    assert data["vector_hits"] and data["bm25_hits"]
    assert data["bm25_hits"][0]["source_url"] == CASTLE_URL
    assert data["bm25_hits"][0]["bm25_score"] > 0


async def test_only_separate_mode_returns_the_per_side_lists(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    """vector_hits / bm25_hits are separate mode's lists; a vector or bm25 search answers
    in `hits` only (its retriever's raw candidates, never shown in the text, stay out)."""
    await ingest(kb)
    async with connect(kb, settings) as client:
        for mode in ("vector", "bm25", "fused"):
            result = await client.call_tool(
                "rag_search", {"query": "りゅうおう の HP", "n_results": 1, "mode": mode}
            )
            assert not result.is_error, text_of(result)
            data = result.structured_content
            assert data is not None and len(data["hits"]) == 1, (mode, data)
            assert data["vector_hits"] == [] and data["bm25_hits"] == [], mode


async def test_an_empty_mode_is_refused_like_any_other_unknown_mode(
    kb: KnowledgeBase, settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schema's enum has no "": it is refused in the same line as "nope", before the
    knowledge base is asked (the store service reads an empty field as no mode)."""
    asked: list[object] = []

    async def retrieve(*args: object, **kwargs: object) -> object:
        asked.append(kwargs.get("mode"))
        raise AssertionError("a wrong mode reached the knowledge base")

    monkeypatch.setattr(kb, "retrieve", retrieve, raising=False)
    async with connect(kb, settings) as client:
        empty = await client.call_tool("rag_search", {"query": "りゅうおう", "mode": ""})
        wrong = await client.call_tool("rag_search", {"query": "りゅうおう", "mode": "nope"})
    assert empty.is_error and wrong.is_error and asked == []
    assert text_of(empty) == (
        "エラー: 検索に失敗しました。 原因: Unknown search mode ''; use one of fused, vector, "
        "bm25, separate."
    )
    assert text_of(wrong) == text_of(empty).replace("''", "'nope'")


async def test_a_stats_offset_past_the_last_source_is_refused_as_read_refuses_one(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    """Totals alone for an offset with no source at it read as nothing more to list;
    like rag_read's offset past the end, it is a one-line error saying how many there are."""
    async with connect(kb, settings) as client:
        empty = await client.call_tool("rag_stats", {})
        await ingest(kb)
        answers = {
            offset: await client.call_tool("rag_stats", {"offset": offset})
            for offset in (1, 2, 100_000)
        }
    assert not empty.is_error and "ソースURL数: 0" in text_of(empty)
    assert not answers[1].is_error and "(2–2件目 / 2件)" in text_of(answers[1])
    for offset in (2, 100_000):
        assert answers[offset].is_error
        assert text_of(answers[offset]) == (
            f"エラー: 統計の取得に失敗しました。 原因: offset {offset:,} is past the last "
            "source (there are 2; offsets 0–1 list them)."
        )


async def test_no_hit_is_the_spec_sentence_not_an_error(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    async with connect(kb, settings) as client:
        result = await client.call_tool("rag_search", {"query": "りゅうおう"})
    assert not result.is_error
    assert text_of(result) == NO_HITS
    assert result.structured_content is not None and result.structured_content["hits"] == []


async def test_default_count_is_rag_retrieval_count(tmp_path: Path, builtin_embed: Any) -> None:
    settings = load_settings(
        chromadb_persist_dir=str(tmp_path / "c"),
        bm25_persist_dir=str(tmp_path / "b"),
        rag_retrieval_count=1,
        rag_passage_chars=0,  # chunks alone: with passages, rows of one table merge
    )
    kb = await KnowledgeBase(settings, embed_model=builtin_embed).open()
    await ingest(kb)
    async with connect(kb, settings) as client:
        default = await client.call_tool("rag_search", {"query": "りゅうおう スライム ドラキー"})
        three = await client.call_tool(
            "rag_search", {"query": "りゅうおう スライム ドラキー", "n_results": 3}
        )
    assert default.structured_content is not None and three.structured_content is not None
    assert len(default.structured_content["hits"]) == 1
    assert len(three.structured_content["hits"]) == 3


async def test_hits_the_answer_budget_leaves_out_are_counted(
    tmp_path: Path, builtin_embed: Any
) -> None:
    """n_results past what the answer's character budget holds: the answer says how many
    hits were left out, in the text and in structuredContent.left_out."""
    settings = load_settings(
        chromadb_persist_dir=str(tmp_path / "c"),
        bm25_persist_dir=str(tmp_path / "b"),
        rag_answer_chars=400,
    )
    kb = await KnowledgeBase(settings, embed_model=builtin_embed).open()
    for i in range(8):
        await kb.ingest_text(
            f"https://ex.test/town{i}", f"# まち{i}\n\nまち{i} の やどや は {i + 5} ゴールド です。"
        )
    async with connect(kb, settings) as client:
        many = await client.call_tool("rag_search", {"query": "やどや ゴールド", "n_results": 8})
        one = await client.call_tool("rag_search", {"query": "やどや ゴールド", "n_results": 1})
    assert not many.is_error, text_of(many)
    data = many.structured_content
    assert data is not None and 0 < len(data["hits"]) < 8
    assert data["left_out"] == 8 - len(data["hits"])
    assert text_of(many).endswith(
        f"（回答の文字数の上限に達したため、残りの {data['left_out']} 件は省略しました。"
        "n_results を減らすと各結果の本文が長くなります）"
    )
    assert one.structured_content is not None and one.structured_content["left_out"] == 0
    assert "省略" not in text_of(one)


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("rag_search", {"query": "   "}, "query is empty"),
        ("rag_search", {"query": "x", "n_results": 0}, "between 1 and 100"),
        ("rag_search", {"query": "x", "mode": "magic"}, "Unknown search mode"),
        ("rag_delete", {"url": "https://ex.test/never-added"}, "Nothing is stored"),
        ("rag_add", {"url": "  "}, "No URL was given"),
        ("rag_add", {"url": "not a url"}, "原因: 'not a url' is not an http(s) URL: it has no"),
        ("rag_add", {"url": "ftp://ex.test/"}, "Only http and https URLs are accepted, not"),
        ("rag_crawl", {"url": "https://ex.test/", "pattern": "("}, "The URL pattern is not a"),
        ("rag_crawl", {"url": "https://ex.test/", "exclude": "["}, "The exclude pattern is not"),
    ],
)
async def test_user_errors_are_one_sentence_tool_errors(
    kb: KnowledgeBase, settings: RAGSettings, tool: str, args: dict[str, Any], expected: str
) -> None:
    async with connect(kb, settings) as client:
        result = await client.call_tool(tool, args)
    assert result.is_error
    message = text_of(result)
    assert expected in message
    assert "\n" not in message and "Traceback" not in message
    assert not message.startswith("Error executing tool")


async def test_unexpected_exception_gives_a_generic_error_and_logs_the_traceback(
    kb: KnowledgeBase,
    settings: RAGSettings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken_stats(*_args: object) -> None:
        raise ZeroDivisionError("secret internal detail")

    monkeypatch.setattr(kb, "stats", broken_stats)
    with caplog.at_level(logging.ERROR, logger="mcp_server"):
        async with connect(kb, settings) as client:
            result = await client.call_tool("rag_stats", {})
    assert result.is_error
    message = text_of(result)
    assert message == (
        "エラー: 統計の取得に失敗しました。 原因: 内部エラーです (rag_stats)。"
        "詳細はサーバーのログにあります。"
    )
    logged = [r for r in caplog.records if r.exc_info]
    assert logged and isinstance(logged[0].exc_info[1], ZeroDivisionError)  # type: ignore[index]


async def test_add_crawl_stats_delete_round_trip(
    kb: KnowledgeBase, settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_fetching(kb, monkeypatch)
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with connect(kb, settings, mode="legacy") as client:
        added = await client.call_tool(
            "rag_add", {"url": CASTLE_URL}, progress_callback=on_progress
        )
        assert not added.is_error, text_of(added)
        assert progress == [(0.0, 1.0, "ページを取得中..."), (1.0, 1.0, "ページを取り込みました")]
        progress.clear()
        chunks = added.structured_content and added.structured_content["chunks"]
        assert text_of(added) == f"ページを取り込みました: {CASTLE_URL} ({chunks}チャンク)"
        assert added.structured_content == {
            "url": CASTLE_URL,
            "source": CASTLE_URL,
            "chunks": chunks,
            "unchanged": False,
        }

        crawled = await client.call_tool(
            "rag_crawl", {"url": "https://ex.test/", "wait": True}, progress_callback=on_progress
        )
        assert not crawled.is_error, text_of(crawled)
        summary = crawled.structured_content
        assert summary is not None
        assert text_of(crawled).splitlines()[0] == (
            f"完了: 2ページ / {summary['chunks_stored']}チャンク / エラー: 1件"
        )
        assert summary["error_details"] == [
            {
                "url": "https://ex.test/missing",
                "error": "HTTP 404 Not Found for https://ex.test/missing.",
            }
        ]
        values = [v for v, _, _ in progress]
        assert values == sorted(set(values)) and values[-1] == 3.0, progress
        assert progress[-1][1:] == (3.0, "3/3ページ取得中...")

        stats = await client.call_tool("rag_stats", {})
        assert stats.structured_content is not None
        assert stats.structured_content["source_count"] == 2
        assert sorted(stats.structured_content["sources"]) == sorted(PAGES)
        one = await client.call_tool("rag_stats", {"limit": 1, "offset": 1})
        assert one.structured_content is not None  # a page, however many sources there are
        assert one.structured_content["sources"] == sorted(PAGES)[1:2]
        assert one.structured_content["source_count"] == 2
        total = stats.structured_content["total_chunks"]
        assert f"総チャンク数: {total}" in text_of(stats)

        deleted = await client.call_tool("rag_delete", {"url": MONSTERS_URL})
        assert not deleted.is_error, text_of(deleted)
        assert deleted.structured_content is not None
        n = deleted.structured_content["chunks_deleted"]
        assert n > 0 and text_of(deleted) == f"削除しました: {MONSTERS_URL} ({n}チャンク)"
        after = await client.call_tool("rag_stats", {})
        assert after.structured_content is not None
        assert after.structured_content["sources"] == [CASTLE_URL]
        assert after.structured_content["total_chunks"] == total - n


async def test_crawl_sends_heartbeats_while_a_page_is_slow(
    kb: KnowledgeBase, settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_fetching(kb, monkeypatch, slow_page=CASTLE_URL, delay=0.8)
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with connect(kb, settings, heartbeat_sec=0.1) as client:
        result = await client.call_tool(
            "rag_crawl", {"url": "https://ex.test/", "wait": True}, progress_callback=on_progress
        )
    assert not result.is_error, text_of(result)
    during_slow_page = [v for v in progress if 1 < v < 2]
    assert len(during_slow_page) >= 3, progress
    assert progress == sorted(set(progress))


async def test_search_is_answered_while_a_crawl_runs(
    kb: KnowledgeBase, settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ingest(kb, CASTLE_URL)
    gate = asyncio.Event()
    stand_in_fetching(kb, monkeypatch, gate=gate)
    async with connect(kb, settings) as client:
        crawl = asyncio.create_task(
            client.call_tool("rag_crawl", {"url": "https://ex.test/", "wait": True})
        )
        await asyncio.sleep(0.1)
        search = await asyncio.wait_for(
            client.call_tool("rag_search", {"query": "ふしぎなかぎ"}), timeout=10
        )
        assert not crawl.done(), "the crawl was meant to be still running"
        gate.set()
        crawled = await crawl
    assert not search.is_error and CASTLE_URL in text_of(search)
    assert not crawled.is_error


async def test_handshake_does_not_wait_for_the_knowledge_base(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    opened = asyncio.Event()

    async def slow_factory() -> KnowledgeBase:
        await opened.wait()
        return kb

    server = build_server(settings, kb_factory=slow_factory)
    async with Client(server, mode="legacy") as client:
        tools = await asyncio.wait_for(client.list_tools(), timeout=5)
        assert len(tools.tools) == 8
        stats = asyncio.create_task(client.call_tool("rag_stats", {}))
        await asyncio.sleep(0.05)
        assert not stats.done(), "a tool call waits for the knowledge base"
        opened.set()
        result = await stats
    assert not result.is_error, text_of(result)


async def test_failed_open_is_a_tool_error_and_the_next_call_retries(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    embedding_server_up = False
    attempts = 0

    async def factory() -> KnowledgeBase:
        nonlocal attempts
        attempts += 1
        if not embedding_server_up:
            raise EmbeddingUnavailableError(
                "The embedding server at http://localhost:1234/v1 is not reachable; start it."
            )
        return kb

    server = build_server(settings, kb_factory=factory)
    async with Client(server) as client:
        first = await client.call_tool("rag_stats", {})
        embedding_server_up = True
        second = await client.call_tool("rag_stats", {})
    assert first.is_error
    assert text_of(first) == (
        "エラー: 統計の取得に失敗しました。 原因: "
        "The embedding server at http://localhost:1234/v1 is not reachable; start it."
    )
    assert not second.is_error, text_of(second)
    assert attempts >= 2


async def test_private_address_is_refused_by_default(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    assert not settings.rag_allow_private_network
    async with connect(kb, settings) as client:
        result = await client.call_tool("rag_add", {"url": "http://127.0.0.1:9/page"})
    assert result.is_error
    message = text_of(result)
    assert "127.0.0.1" in message and "\n" not in message


async def test_terminal_commands_in_stored_text_reach_the_client_as_escapes(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    """A client may show a tool's text in a terminal: an ESC sequence a crawled page held
    is written as an escape there (the structured content keeps the stored text)."""
    url = "https://ex.test/escapes"
    await kb.ingest_text(url, "# Zebrakettle \x1b]0;owned\x07\n\nzebrakettle \x1b[2J boils.\n")
    async with connect(kb, settings) as client:
        found = await client.call_tool("rag_search", {"query": "zebrakettle"})
        read = await client.call_tool("rag_read", {"source": url})
    for result in (found, read):
        assert not result.is_error, text_of(result)
        text = text_of(result)
        assert "zebrakettle" in text and "\x1b" not in text and "\x07" not in text
        assert "\\x1b[2J" in text
    assert "\x1b[2J" in found.structured_content["hits"][0]["text"]


async def test_search_scoped_to_a_source_and_read_a_whole_source(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    await ingest(kb)
    async with connect(kb, settings) as client:
        scoped = await client.call_tool(
            "rag_search", {"query": "りゅうおう", "source": "https://ex.test/castle"}
        )
        everywhere = await client.call_tool("rag_search", {"query": "りゅうおう"})
        nowhere = await client.call_tool("rag_search", {"query": "x", "source": "nope.test"})
        whole = await client.call_tool("rag_read", {"source": MONSTERS_URL})
        paged = await client.call_tool("rag_read", {"source": MONSTERS_URL, "max_chars": 100})
        missing = await client.call_tool("rag_read", {"source": "https://ex.test/none"})
    assert not scoped.is_error, text_of(scoped)
    data = scoped.structured_content
    assert data is not None and {h["source_url"] for h in data["hits"]} == {CASTLE_URL}
    assert everywhere.structured_content["hits"][0]["source_url"] == MONSTERS_URL
    assert nowhere.is_error and "nope.test" in text_of(nowhere)
    assert not whole.is_error, text_of(whole)
    text = text_of(whole)
    assert text.startswith(f"## Source: {MONSTERS_URL}\nモンスター一覧")
    rows = [line for line in text.splitlines() if line.startswith("名前: ")]
    assert [r.split()[1] for r in rows] == ["スライム", "ドラキー", "りゅうおう"]  # reading order
    read = whole.structured_content
    assert read is not None and read["next_offset"] is None and read["total_chars"] > 100
    page = paged.structured_content
    assert page is not None and page["next_offset"] and len(page["text"]) <= 100
    assert "offset=" in text_of(paged)
    assert missing.is_error and "rag_stats" in text_of(missing)


def test_read_output_lists_at_most_200_heading_paths_and_counts_them_all() -> None:
    """A source of thousands of sections does not repeat them all on every page."""
    from mcp_server.schemas import MAX_OUTPUT_SECTIONS, ReadOutput
    from rag_app.results import ReadResult

    paths = [f"Guide > Part {i}" for i in range(MAX_OUTPUT_SECTIONS + 300)]
    page = ReadResult(
        source="https://ex.test/g",
        title="Guide",
        section="",
        text="x",
        offset=0,
        next_offset=None,
        total_chars=1,
        sections=paths,
    )
    out = ReadOutput.of(page)
    assert out.sections == paths[:MAX_OUTPUT_SECTIONS]
    assert out.sections_total == len(paths)


async def test_a_cancelled_waited_crawl_call_leaves_the_crawl_to_its_job(
    kb: KnowledgeBase, settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client cancels `rag_crawl` with wait=true when its own time limit runs out too
    (the Slack bot's after 30 min, others' sooner): the crawl goes on as the job it is,
    which rag_jobs lists and can cancel, and the server goes on answering."""
    gate = asyncio.Event()  # the crawl holds here until released: still running
    stand_in_fetching(kb, monkeypatch, gate=gate)
    async with connect(kb, settings) as client:
        call = asyncio.create_task(
            client.call_tool("rag_crawl", {"url": "https://ex.test/", "wait": True})
        )
        for _ in range(200):
            if [j for j in await kb.jobs() if j["state"] == "running"]:
                break
            await asyncio.sleep(0.05)
        (job,) = await kb.jobs()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.3)
        assert [j["state"] for j in await kb.jobs()] == ["running"]
        listed = await client.call_tool("rag_jobs", {})
        assert job["id"] in text_of(listed)
        gate.set()
        ended = await asyncio.wait_for(kb.wait_job(job["id"]), 10)
        assert ended["state"] == "done", ended


async def test_an_integer_sent_as_a_float_is_taken(
    kb: KnowledgeBase, settings: RAGSettings
) -> None:
    await ingest(kb)
    async with connect(kb, settings) as client:
        found = await client.call_tool("rag_search", {"query": "りゅうおう", "n_results": 2.0})
        assert not found.is_error, text_of(found)
        assert found.structured_content and len(found.structured_content["hits"]) <= 2


async def test_cancelling_a_job_that_already_ended_says_so(
    kb: KnowledgeBase, settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_fetching(kb, monkeypatch)
    async with connect(kb, settings) as client:
        started = await client.call_tool("rag_crawl", {"url": "https://ex.test/"})
        job_id = started.structured_content and started.structured_content["job_id"]
        await kb.wait_job(str(job_id))
        answer = await client.call_tool("rag_jobs", {"cancel": job_id})
        assert not answer.is_error
        assert text_of(answer).startswith(f"ジョブ {job_id} は既に終了しています（完了）。")
