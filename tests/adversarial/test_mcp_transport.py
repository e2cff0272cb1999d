"""Hostile HTTP clients of `rag-mcp --transport streamable-http`: wrong Host or Origin
(DNS rebinding), no token, wrong token, a public bind without a token."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_mcp_http import free_port, wait_for_port

pytestmark = pytest.mark.slow

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}


def post(port: int, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    conn.request("POST", "/mcp", body=json.dumps(INIT), headers={**base, **headers})
    status = conn.getresponse().status
    conn.close()
    return status


def start(tmp_path: Path, host: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    full = {
        "HOME": str(tmp_path),
        "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma_db"),
        "BM25_PERSIST_DIR": str(tmp_path / "bm25_index"),
        **env,
    }
    cmd = [sys.executable, "-m", "mcp_server", "--transport", "streamable-http"]
    return subprocess.Popen(
        [*cmd, "--host", host, "--port", str(port)],
        cwd=tmp_path,
        env=full,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    host, env = request.param
    port = free_port()
    proc = start(tmp_path, host, port, **env)
    try:
        wait_for_port(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("served", [("127.0.0.1", {})], indirect=True)
def test_loopback_bind_refuses_foreign_host_and_origin(served: int) -> None:
    port = served
    assert post(port, {"Host": f"127.0.0.1:{port}"}) == 200
    assert post(port, {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}) == 200
    assert post(port, {"Host": "evil.example"}) in (400, 421)
    assert post(port, {"Host": f"127.0.0.1:{port}", "Origin": "http://evil.example"}) == 403


@pytest.mark.parametrize(
    "served", [("0.0.0.0", {"RAG_MCP_TOKEN": "s3cret-token-0123456789"})], indirect=True
)
def test_public_bind_needs_the_token_and_still_checks_host(served: int) -> None:
    port = served
    good_host = {"Host": f"0.0.0.0:{port}"}
    assert post(port, good_host) == 401
    assert post(port, {**good_host, "Authorization": "Bearer wrong"}) == 401
    assert post(port, {**good_host, "Authorization": "Bearer s3cret-token-0123456789"}) == 200
    # the scheme's name is case-insensitive; a prefix of the token is not the token
    assert post(port, {**good_host, "Authorization": "bearer s3cret-token-0123456789"}) == 200
    assert post(port, {**good_host, "Authorization": "Bearer s3cret-token"}) == 401
    evil = {"Host": "evil.example", "Authorization": "Bearer s3cret-token-0123456789"}
    assert post(port, evil) in (400, 421)


def test_public_bind_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    proc = start(tmp_path, "0.0.0.0", free_port())
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = out.decode().strip().splitlines()
    assert lines[-1].startswith("rag-mcp: binding 0.0.0.0") and "RAG_MCP_TOKEN" in lines[-1]


@pytest.mark.parametrize("token", ["  ", "x", "short-token", "has a space in it 123"])
def test_a_token_too_weak_to_be_one_refuses_to_start(tmp_path: Path, token: str) -> None:
    """A blank or one-character RAG_MCP_TOKEN satisfied "a token is required off loopback"."""
    proc = start(tmp_path, "0.0.0.0", free_port(), RAG_MCP_TOKEN=token)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out.decode().strip().splitlines()[-1].startswith("rag-mcp: RAG_MCP_TOKEN must be")
