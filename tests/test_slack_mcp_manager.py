"""MCPManager against a real stand-in MCP server (stdio and streamable HTTP)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_app.pids import alive
from slack_router.mcp_config import (
    MCPConfigError,
    example_config_path,
    load_servers,
    parse_servers,
)
from slack_router.mcp_manager import MCPCallError, MCPManager, MCPToolNotFoundError, ToolResult
from slack_router.rag_handler import RagCommandHandler
from slack_router.router import MessageRouter
from tests.processes import full_env, rag, store_env

RAG_TOOLS = {"rag_search", "rag_add", "rag_crawl", "rag_delete", "rag_stats"}


from tests.fixtures import slack_stand_ins as stand_ins  # noqa: E402


def _write_config(path: Path, servers: dict[str, object]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def test_example_config_registers_rag_over_stdio() -> None:
    (server,) = load_servers(example_config_path())
    assert (server.name, server.transport, server.command) == ("rag", "stdio", "rag-mcp")
    assert server.args == [] and server.env == {}


def test_broken_config_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MCPConfigError, match="not found; create it or point MCP_SERVERS_CONFIG"):
        load_servers(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {', encoding="utf-8")
    with pytest.raises(MCPConfigError, match="not valid JSON"):
        load_servers(bad)
    with pytest.raises(MCPConfigError, match="'mcpServers' object"):
        parse_servers(["not", "an", "object"])


def test_invalid_entries_are_skipped_with_a_log(caplog: pytest.LogCaptureFixture) -> None:
    data = {
        "mcpServers": {
            "no-command": {"transport": "stdio"},
            "no-url": {"transport": "streamable-http"},
            "odd": "text",
            "ok": {"transport": "streamable-http", "url": "http://127.0.0.1:1/mcp"},
        }
    }
    with caplog.at_level(logging.ERROR):
        servers = parse_servers(data)
    assert [s.name for s in servers] == ["ok"]
    assert "needs a 'command'" in caplog.text and "needs a 'url'" in caplog.text


async def test_stdio_server_lists_and_calls_tools(tmp_path: Path) -> None:
    call_log = tmp_path / "calls.jsonl"
    config = _write_config(
        tmp_path / "mcp.json",
        {
            "rag": stand_ins.stand_in_entry(call_log),
            "missing": {"command": str(tmp_path / "no-such-server")},
            "crashes": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]},
        },
    )
    manager = MCPManager.from_config_file(config, start_timeout=10)
    async with manager:
        assert manager.server_names == ["rag"]
        assert {tool.name for tool in manager.list_tools()} == RAG_TOOLS
        search = manager.get_tool("rag_search")
        assert search is not None and "query" in search.input_schema["properties"]
        assert any("rag_search" in text for text in manager.instructions)

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        crawl = await manager.call_tool(
            "rag_crawl",
            {"url": "https://example.com/docs", "pattern": r"\.html$"},
            progress_callback=on_progress,
        )
        assert crawl == ToolResult(
            text="15 pages, 128 chunks, 2 errors",
            is_error=False,
            structured={"pages_crawled": 15, "chunks_stored": 128, "errors": 2},
        )
        assert [p[0] for p in progress] == [1, 2, 3] and progress[-1][1] == 3

        failed = await manager.call_tool("rag_add", {"url": "https://example.com/404"})
        assert failed.is_error and failed.text == "HTTP 404 Not Found"

        with pytest.raises(MCPToolNotFoundError):
            await manager.call_tool("weather", {})

    assert manager.server_names == [] and not manager.has_tool("rag_add")
    logged = [json.loads(line) for line in call_log.read_text(encoding="utf-8").splitlines()]
    assert logged[0] == {
        "tool": "rag_crawl",
        "args": {"url": "https://example.com/docs", "pattern": r"\.html$", "wait": False},
    }


async def test_server_that_never_answers_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    silent = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}
    manager = MCPManager(parse_servers({"mcpServers": {"silent": silent}}), start_timeout=0.5)
    with caplog.at_level(logging.ERROR):
        async with manager:
            assert manager.server_names == []
            with pytest.raises(MCPToolNotFoundError):
                await manager.call_tool("rag_stats", {})
    assert "silent" in caplog.text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_for_port(port: int, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)
        else:
            writer.close()
            return


async def test_streamable_http_server(tmp_path: Path) -> None:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(stand_ins.MCP_STAND_IN), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _wait_for_port(port)
        config = _write_config(
            tmp_path / "mcp.json",
            {"rag": {"transport": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp"}},
        )
        async with MCPManager.from_config_file(config, start_timeout=10) as manager:
            assert {tool.name for tool in manager.list_tools()} == RAG_TOOLS
            stats = await manager.call_tool("rag_stats")
            assert stats.structured == {"total_chunks": 342, "source_count": 20}
    finally:
        process.terminate()
        process.wait(timeout=10)


def _children_named(name: str) -> list[int]:
    """This process's child processes whose command line holds `name`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_bytes().rpartition(b")")[2].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and name.encode() in cmdline:
            found.append(int(entry.name))
    return found


def _kill_rag_mcp() -> None:
    (pid,) = _children_named("rag-mcp")
    os.kill(pid, signal.SIGKILL)
    while alive(pid):
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the server's process in /proc")
async def test_a_lone_surrogate_or_a_dead_server_costs_one_answer_not_the_connection(
    tmp_path: Path,
) -> None:
    """The real `rag-mcp`: half an emoji in an argument used to close the connection for
    every later call, and a server that died stayed dead until the bot restarted."""
    env = full_env(store_env(tmp_path))
    command = str(Path(sys.executable).parent / "rag-mcp")
    servers = parse_servers({"mcpServers": {"rag": {"command": command, "env": env}}})
    async with MCPManager(servers, start_timeout=60, tool_timeout=120) as manager:
        searched = await manager.call_tool("rag_search", {"query": "りゅうおう\ud83d"})
        assert not searched.is_error, searched.text
        assert not (await manager.call_tool("rag_stats", {})).is_error  # still connected

        _kill_rag_mcp()  # a read-only call: started again and sent once more
        stats = await manager.call_tool("rag_stats", {})
        assert not stats.is_error and manager.server_names == ["rag"]

        _kill_rag_mcp()  # a call not safe to repeat: this one fails, the next one works
        gone = "https://example.com/never-stored"
        with pytest.raises(MCPCallError) as lost:
            await manager.call_tool("rag_delete", {"url": gone})
        assert lost.value.connection_lost
        again = await manager.call_tool("rag_delete", {"url": gone})
        assert again.is_error and "never-stored" in again.text  # the tool's own answer

        # the tool's own "エラー: …。 原因: " opening is not written twice in the reply
        router = MessageRouter(RagCommandHandler(manager))
        async with stand_ins.SlackApiStandIn() as slack:
            text = "<@UBOT> rag add http://127.0.0.1:9/"
            await router.handle(slack.client(), channel="C1", ts="1.1", text=text)
            (reply,) = slack.texts()
        assert reply.count("エラー:") == 1 and reply.count("原因:") == 1, reply
        assert reply.startswith("エラー: ページの取り込みに失敗しました。"), reply
    assert not _children_named("rag-mcp")  # every server it started has ended
    rag(store_env(tmp_path), "service", "stop")
