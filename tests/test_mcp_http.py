"""Smoke test: `rag-mcp --transport streamable-http` answers the SDK's streamable HTTP client."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import TextContent

from tests.processes import free_port, stop_process

pytestmark = pytest.mark.slow


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"rag-mcp exited early with code {proc.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"rag-mcp did not listen on port {port} within {timeout} s")


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = tmp_path / "server.log"
    env = {
        "HOME": str(tmp_path),
        "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma_db"),
        "BM25_PERSIST_DIR": str(tmp_path / "bm25_index"),
    }
    command = [sys.executable, "-m", "mcp_server", "--transport", "streamable-http"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, proc)
            yield f"http://127.0.0.1:{port}/mcp", log
        finally:
            stop_process(proc, grace=10)


async def test_streamable_http_lists_tools_and_answers_stats(
    http_server: tuple[str, Path],
) -> None:
    url, log = http_server
    async with Client(url, read_timeout_seconds=120) as client:
        tools = await client.list_tools()
        stats = await client.call_tool("rag_stats", {})
    assert sorted(t.name for t in tools.tools) == [
        "rag_add",
        "rag_crawl",
        "rag_delete",
        "rag_jobs",
        "rag_read",
        "rag_refresh",
        "rag_search",
        "rag_stats",
    ]
    assert not stats.is_error
    block = stats.content[0]
    assert isinstance(block, TextContent)
    assert block.text.startswith("ナレッジベース統計:\n     総チャンク数: 0\n"), block.text
    assert stats.structured_content is not None
    assert stats.structured_content["total_chunks"] == 0
    assert "Traceback" not in log.read_text()
