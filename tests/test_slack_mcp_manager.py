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
from typing import Any

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


FLAKY = Path(__file__).parent / "fixtures" / "mcp_flaky_server.py"


def _flaky(tmp_path: Path, mode: str) -> list[Any]:
    env = {"FLAKY_STARTS": str(tmp_path / "starts"), "FLAKY_MODE": mode}
    return parse_servers(
        {"mcpServers": {"rag": {"command": sys.executable, "args": [str(FLAKY)], "env": env}}}
    )


async def test_one_cut_http_response_does_not_restart_a_session_others_are_using(
    tmp_path: Path,
) -> None:
    """A proxy that cuts one call's stream ends that call only: another user's crawl on
    the same session finishes (a restart there would have cut it too)."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(FLAKY), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _wait_for_port(port)
        url = f"http://127.0.0.1:{port}/mcp"
        servers = parse_servers(
            {"mcpServers": {"rag": {"transport": "streamable-http", "url": url}}}
        )
        async with MCPManager(servers, start_timeout=10, tool_timeout=30) as manager:
            crawl = asyncio.create_task(manager.call_tool("rag_crawl", {"url": "https://a/"}))
            await asyncio.sleep(0.5)
            with pytest.raises(MCPCallError) as cut:
                await manager.call_tool("rag_search", {"query": "cutme"})
            assert not cut.value.connection_lost and not cut.value.restarted
            assert (await crawl).text == "crawled https://a/"
            assert (await manager.call_tool("rag_search", {"query": "x"})).text == "found x"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_a_server_that_cannot_start_again_fails_every_caller_at_once(
    tmp_path: Path,
) -> None:
    async with MCPManager(_flaky(tmp_path, "no_start"), start_timeout=2) as manager:
        with pytest.raises(MCPCallError) as died:
            await manager.call_tool("rag_search", {"query": "x"})  # the server dies in it
        assert died.value.connection_lost and not died.value.restarted  # its start hung
        start = time.monotonic()
        calls = [manager.call_tool("rag_stats", {}) for _ in range(4)]
        failed = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(f, MCPCallError) and not f.restarted for f in failed), failed
        assert time.monotonic() - start < 1.5  # no caller waits for another start
        assert (tmp_path / "starts").read_text() == "2"  # one start tried, not one a caller


async def test_a_calls_time_limit_holds_through_a_restart(tmp_path: Path) -> None:
    async with MCPManager(_flaky(tmp_path, "hang_search"), start_timeout=20) as manager:
        start = time.monotonic()
        with pytest.raises(MCPCallError):  # dies at 1 s, starts again, then hangs
            await manager.call_tool("rag_search", {"query": "x"}, timeout=4)
        assert time.monotonic() - start < 5.5
        assert (tmp_path / "starts").read_text() == "2"
