"""End to end: the real `rag-mcp` process over stdio, driven by the SDK's real client.

Each test spawns `python -m mcp_server` (what the `rag-mcp` script runs) with its stores
in tmp_path and loopback crawling allowed, and serves pages from a local HTTP server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent
from pytest_httpserver import HTTPServer

pytestmark = pytest.mark.slow

MONSTERS_MD = """# モンスター一覧

| 名前 | HP | MP | 出現場所 |
| --- | --- | --- | --- |
| スライム | 3 | 0 | フィールド |
| ドラキー | 8 | 0 | フィールド |
| りゅうおう | 90 | 75 | りゅうおうのしろ |
"""
MONSTERS_HTML = """<!doctype html><html lang="ja"><head><meta charset="utf-8">
<title>モンスター一覧</title></head><body><h1>モンスター一覧</h1>
<table><thead><tr><th>名前</th><th>HP</th><th>MP</th><th>出現場所</th></tr></thead>
<tbody><tr><td>スライム</td><td>3</td><td>0</td><td>フィールド</td></tr>
<tr><td>ドラキー</td><td>8</td><td>0</td><td>フィールド</td></tr>
<tr><td>りゅうおう</td><td>90</td><td>75</td><td>りゅうおうのしろ</td></tr></tbody></table>
</body></html>"""
CASTLE_HTML = """<!doctype html><html lang="ja"><head><meta charset="utf-8">
<title>しれんのしろ</title></head><body><h1>しれんのしろ</h1>
<p>しれんのしろ には ふしぎなかぎ と たいまつ が あります。</p></body></html>"""
ABOUT_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>About</title></head>
<body><p>This page is not matched by the crawl pattern.</p></body></html>"""
INDEX_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>攻略リンク集</title></head>
<body><ul><li><a href="/guide/monsters.html">モンスター</a></li>
<li><a href="/guide/castle.html">しれんのしろ</a></li>
<li><a href="/about.html">about</a></li></ul></body></html>"""


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@asynccontextmanager
async def rag_mcp(tmp_path: Path) -> AsyncIterator[tuple[Client, float, Path]]:
    """Spawn the server; yield the client, seconds from spawn to `initialize`, stderr log."""
    env = {
        "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma_db"),
        "BM25_PERSIST_DIR": str(tmp_path / "bm25_index"),
        "RAG_ALLOW_PRIVATE_NETWORK": "true",
        "RAG_CRAWL_DELAY_SEC": "0",
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server"], env=env, cwd=str(tmp_path)
    )
    log = tmp_path / "server-stderr.log"
    with log.open("w") as errlog:
        start = time.perf_counter()
        # legacy = the `initialize` handshake that Claude Desktop / Claude Code use
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, mode="legacy", read_timeout_seconds=120) as client:
            yield client, time.perf_counter() - start, log


async def test_stdio_end_to_end(tmp_path: Path, httpserver: HTTPServer) -> None:
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    for path, html in (
        ("/links.html", INDEX_HTML),
        ("/guide/monsters.html", MONSTERS_HTML),
        ("/guide/castle.html", CASTLE_HTML),
        ("/about.html", ABOUT_HTML),
    ):
        httpserver.expect_request(path).respond_with_data(
            html, content_type="text/html; charset=utf-8"
        )
    monsters = httpserver.url_for("/guide/monsters.html")
    castle = httpserver.url_for("/guide/castle.html")
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with rag_mcp(tmp_path) as (client, init_seconds, log):
        opened_before_handshake = "Knowledge base is open." in log.read_text()
        print(f"\ninitialize answered {init_seconds:.2f} s after spawn")
        tools = (await client.list_tools()).tools
        assert sorted(t.name for t in tools) == [
            "rag_add",
            "rag_crawl",
            "rag_delete",
            "rag_jobs",
            "rag_read",
            "rag_refresh",
            "rag_search",
            "rag_stats",
        ]
        described = subprocess.run(  # `rag-mcp --help` names every tool it serves
            [sys.executable, "-m", "mcp_server", "--help"], capture_output=True, text=True
        ).stdout
        assert all(t.name in described for t in tools), described
        assert all(t.input_schema["type"] == "object" and t.output_schema for t in tools)

        added = await client.call_tool("rag_add", {"url": castle})
        assert not added.is_error, text_of(added)
        assert re.fullmatch(
            rf"ページを取り込みました: {re.escape(castle)} \(\d+チャンク\)", text_of(added)
        )

        crawled = await client.call_tool(
            "rag_crawl",
            {"url": httpserver.url_for("/links.html"), "pattern": "/guide/", "wait": True},
            progress_callback=on_progress,
        )
        assert not crawled.is_error, text_of(crawled)
        summary = crawled.structured_content
        assert summary is not None and summary["pages_crawled"] == 2, summary
        assert summary["unchanged"] == 1, "castle was added just before"
        assert text_of(crawled).splitlines()[0] == (
            f"完了: 2ページ / {summary['chunks_stored']}チャンク / エラー: 0件"
        )
        assert progress, "no progress notification reached the client"
        values = [v for v, _, _ in progress]
        assert values == sorted(set(values)), progress
        assert progress[-1][:2] == (2.0, 2.0), progress

        found = await client.call_tool("rag_search", {"query": "りゅうおう の HP"})
        assert not found.is_error, text_of(found)
        assert text_of(found).startswith(f"## [1] Source: {monsters}\n"), text_of(found)
        assert "りゅうおう" in text_of(found) and "90" in text_of(found)
        assert found.structured_content is not None
        top = found.structured_content["hits"][0]
        assert top["source_url"] == monsters and top["content_type"] == "table", top

        both = await client.call_tool("rag_search", {"query": "ふしぎなかぎ", "mode": "separate"})
        assert "# ベクトル検索の結果" in text_of(both) and "# BM25" in text_of(both)
        assert both.structured_content is not None
        assert both.structured_content["bm25_hits"][0]["source_url"] == castle

        scoped = await client.call_tool("rag_search", {"query": "りゅうおう", "source": castle})
        assert not scoped.is_error, text_of(scoped)
        assert scoped.structured_content is not None
        assert {h["source_url"] for h in scoped.structured_content["hits"]} == {castle}
        table = await client.call_tool("rag_read", {"source": monsters})
        assert not table.is_error, text_of(table)
        assert text_of(table).startswith(f"## Source: {monsters}\n")
        assert "りゅうおう" in text_of(table) and "スライム" in text_of(table)
        paged = await client.call_tool("rag_read", {"source": monsters, "max_chars": 100})
        assert paged.structured_content is not None and paged.structured_content["next_offset"]

        stats = await client.call_tool("rag_stats", {})
        assert not stats.is_error, text_of(stats)
        assert "ソースURL数: 2" in text_of(stats)
        assert stats.structured_content is not None
        assert sorted(stats.structured_content["sources"]) == sorted([castle, monsters])

        errors = {
            "query is empty": await client.call_tool("rag_search", {"query": ""}),
            "Nothing is stored": await client.call_tool(
                "rag_delete", {"url": httpserver.url_for("/never-added")}
            ),
            "0.0.0.0": await client.call_tool("rag_add", {"url": "http://0.0.0.0/"}),
            "ftp": await client.call_tool("rag_add", {"url": "ftp://ex.test/file.txt"}),
        }
        for expected, result in errors.items():
            message = text_of(result)
            assert result.is_error and expected in message and "\n" not in message, message
            assert "internal error" not in message

        before = stats.structured_content["total_chunks"]
        deleted = await client.call_tool("rag_delete", {"url": monsters})
        assert deleted.structured_content is not None
        n = deleted.structured_content["chunks_deleted"]
        assert text_of(deleted) == f"削除しました: {monsters} ({n}チャンク)"
        after = await client.call_tool("rag_stats", {})
        assert after.structured_content is not None
        assert after.structured_content["total_chunks"] == before - n
        gone = await client.call_tool("rag_search", {"query": "りゅうおう", "mode": "bm25"})
        assert monsters not in text_of(gone)
    assert init_seconds < 10, f"initialize took {init_seconds:.2f} s"
    assert not opened_before_handshake, "initialize must not wait for the knowledge base"
    assert "Traceback" not in log.read_text()


async def test_stray_stdout_writes_cannot_break_the_protocol(tmp_path: Path) -> None:
    """Libraries that print (tqdm bars, print(), raw fd 1) while the KB opens hit stderr."""
    script = tmp_path / "noisy_server.py"
    script.write_text(
        "import os, sys, types\n"
        "import mcp_server.app_context as app_context\n"
        "class StatsOnly:\n"
        "    async def stats(self, *_args):\n"
        "        from rag_app.results import KBStats\n"
        "        return KBStats(total_chunks=0, sources=[], embedding_model='m',\n"
        "            embedding_dimension=1, bm25_documents=0, vector_store='v', bm25_dir='b')\n"
        "    async def aclose(self):\n"
        "        pass\n"
        "async def noisy_open(settings):\n"
        "    print('noise from print()')\n"
        "    os.write(1, b'noise on fd 1\\n')\n"
        "    from tqdm import tqdm\n"
        "    for _ in tqdm(range(3), file=sys.stdout, disable=False):\n"
        "        pass\n"
        "    sys.stdout.flush()\n"
        "    return StatsOnly()\n"
        "app_context.open_knowledge_base = noisy_open\n"
        "from mcp_server.__main__ import main\n"
        "main([])\n"
    )
    params = StdioServerParameters(command=sys.executable, args=[str(script)], cwd=str(tmp_path))
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, mode="legacy", read_timeout_seconds=60) as client:
            result = await client.call_tool("rag_stats", {})
            tools = await client.list_tools()
    assert not result.is_error, text_of(result)
    assert "総チャンク数: 0" in text_of(result)
    assert len(tools.tools) == 8
    stderr = log.read_text()
    assert "noise from print()" in stderr and "noise on fd 1" in stderr


def test_invalid_setting_stops_start_up_with_one_line(tmp_path: Path) -> None:
    env = {"RAG_CHUNK_SIZE": "100", "RAG_CHUNK_OVERLAP": "100", "PATH": os.environ["PATH"]}
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "RAG_CHUNK_OVERLAP" in lines[0], done.stderr


@pytest.mark.parametrize("port", ["99999", "0", "http"])
def test_a_port_that_is_not_one_is_a_usage_error(port: str) -> None:
    from mcp_server.__main__ import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["--transport", "streamable-http", "--port", port])
    assert stop.value.code == 2
    assert parse_args(["--port", "65535"]).port == 65535


class RawStdio:
    """A real `rag-mcp` spoken to line by line, so that a test can send JSON the `mcp`
    client would not: initialised on entry."""

    def __init__(self, tmp_path: Path) -> None:
        import queue
        import threading

        env = {
            **os.environ,
            "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma_db"),
            "BM25_PERSIST_DIR": str(tmp_path / "bm25_index"),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mcp_server"],
            cwd=tmp_path, env=env, text=True, encoding="utf-8",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None and self.proc.stdin is not None
        out = self.proc.stdout
        threading.Thread(target=lambda: [self.lines.put(ln) for ln in out], daemon=True).start()

    def __enter__(self) -> RawStdio:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "test", "version": "1"}}  # fmt: skip
        self.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}))
        assert "result" in self.answer(1)
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self, request_id: int, timeout: float = 30.0) -> dict[str, Any]:
        import queue

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = json.loads(self.lines.get(timeout=deadline - time.monotonic()))
            except queue.Empty:
                break
            if message.get("id") == request_id:
                return dict(message)
        raise AssertionError(f"no answer to request {request_id} within {timeout:.0f} s")


def test_a_request_with_a_lone_surrogate_is_answered(tmp_path: Path) -> None:
    """A client that cut a string inside an emoji sends `\\ud83d` alone: valid JSON that
    the SDK's parser refuses. The request is answered (the query searched with U+FFFD in
    its place) instead of leaving the client waiting."""
    call = (
        '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": '
        '"rag_search", "arguments": {"query": "スライム\\ud83d"}}}'
    )
    with RawStdio(tmp_path) as mcp:
        mcp.send(call)
        reply = mcp.answer(2)
    assert "result" in reply, reply
    assert reply["result"]["isError"] is False, reply
    assert reply["result"]["structuredContent"]["query"] == "スライム\ufffd"


def test_a_request_the_sdk_cannot_read_is_answered_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    """Arguments nested 250 deep, or a number of 5,000 digits: the SDK's parser refuses
    the line and dropped it unanswered. Each now gets the tool's one-line failure (or
    "Method not found" for another method), and the next search is answered."""
    deep: Any = "x"
    for _ in range(250):
        deep = [deep]
    search = {"name": "rag_search", "arguments": {"query": "a", "mode": deep}}
    nested = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": search}
    long_number = (
        '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "rag_stats", '
        '"arguments": {"limit": ' + "9" * 5000 + "}}}"
    )
    other = '{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"x": ' + "[" * 300
    with RawStdio(tmp_path) as mcp:
        mcp.send(json.dumps(nested))
        mcp.send(long_number)
        mcp.send(other + "]" * 300 + "}}")
        search = {"name": "rag_search", "arguments": {"query": "a"}}
        mcp.send(json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": search}))
        replies = [mcp.answer(i) for i in (2, 3, 4, 5)]
    for reply in replies[:2]:
        assert reply["result"]["isError"] is True, reply
        text = reply["result"]["content"][0]["text"]
        assert "nests too deep or holds a number too long" in text and "\n" not in text, text
    assert replies[2]["error"]["code"] == -32601, replies[2]  # method not found
    assert replies[3]["result"]["isError"] is False, replies[3]
