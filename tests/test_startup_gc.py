"""The store service and `rag-mcp` start with the cyclic GC off and serve with it on,
start-up's objects frozen (rag_app/startup_gc.py); a failed start turns it back on too."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

SERVICE = """
import gc, json
from rag_app.service import server

real = server.StoreService._open

async def _open(self):
    seen = {"while_starting": gc.isenabled()}
    try:
        await real(self)
    finally:
        seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())
        print(json.dumps(seen), flush=True)
        self.stop.set()

server.StoreService._open = _open
ENTRY
"""
ENTRIES = {
    "python -m rag_app.service.server": "server.main()",
    "rag service run": "from rag_app.cli import main; raise SystemExit(main(['service', 'run']))",
}

MCP = """
import gc, json
import mcp_server.server
from mcp_server import __main__ as entry
from mcp_server.server import RagServer

seen = {}
real_build = mcp_server.server.build_server

def build_server(*args, **kwargs):
    seen["while_starting"] = gc.isenabled()
    return real_build(*args, **kwargs)

def run(self, *args, **kwargs):
    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())
    print(json.dumps(seen), flush=True)

mcp_server.server.build_server = build_server
RagServer.run = run
entry.main([])
"""


def _run(script: str, tmp_path: Path, **env: str) -> tuple[int, dict[str, object]]:
    import os

    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    assert lines, done.stderr[-1500:]
    return done.returncode, json.loads(lines[-1])


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_the_store_service_opens_with_the_gc_off_and_serves_with_it_on(
    tmp_path: Path, entry: str
) -> None:
    code, seen = _run(
        SERVICE.replace("ENTRY", ENTRIES[entry]),
        tmp_path,
        CHROMADB_PERSIST_DIR=str(tmp_path / "chroma"),
        BM25_PERSIST_DIR=str(tmp_path / "bm25"),
    )
    assert code == 0
    assert seen["while_starting"] is False
    assert seen["enabled"] is True
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000


def test_a_store_service_whose_open_fails_turns_the_gc_back_on(tmp_path: Path) -> None:
    (tmp_path / "chroma").mkdir()
    (tmp_path / "chroma" / "chroma.sqlite3").write_bytes(b"not a database" * 100)
    code, seen = _run(
        SERVICE.replace("ENTRY", ENTRIES["python -m rag_app.service.server"]),
        tmp_path,
        CHROMADB_PERSIST_DIR=str(tmp_path / "chroma"),
        BM25_PERSIST_DIR=str(tmp_path / "bm25"),
    )
    assert code != 0
    assert seen == {"while_starting": False, "enabled": True, "frozen": seen["frozen"]}


def test_rag_mcp_starts_with_the_gc_off_and_serves_with_it_on(tmp_path: Path) -> None:
    code, seen = _run(MCP, tmp_path)
    assert code == 0
    assert seen["while_starting"] is False
    assert seen["enabled"] is True
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 10_000


def test_rag_mcp_with_a_bad_setting_leaves_the_gc_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_server.__main__ import _serve, parse_args

    monkeypatch.setenv("RAG_CHUNK_SIZE", "many")
    try:
        with pytest.raises(SystemExit) as stop:
            _serve(parse_args([]))
        assert stop.value.code == 2
        assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
