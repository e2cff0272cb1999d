"""Storage faults: the Chroma server goes down and comes back; the disk fills up.

Each ends in one sentence that names the fix, keeps what was stored, leaves no
orphan source record, and the store works again as soon as the cause is gone.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from tests.hnsw_files import persist_hnsw_then_drop_the_filler
from tests.processes import (
    RAG,
    full_env,
    rag,
    rag_async,
    rag_json,
    rag_mcp,
    store_env,
    text_of,
    wait_serving,
    write_notes,
)

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_chroma(data: Path, port: int) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "chroma"
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_serving(proc, f"http://127.0.0.1:{port}/api/v2/heartbeat", "chroma server")
    return proc


def test_chroma_server_down_then_back(tmp_path: Path) -> None:
    port = _free_port()
    server = _start_chroma(tmp_path / "server", port)
    env = store_env(tmp_path, CHROMA_HOST="127.0.0.1", CHROMA_PORT=str(port))
    try:
        notes = write_notes(tmp_path / "notes", "kappa", 2)
        assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
        server.send_signal(signal.SIGKILL)
        server.wait()
        down = rag(env, "search", "kappa1tok0")
        assert down.returncode == 1
        line = down.stderr.strip()
        assert len(line.splitlines()) == 1, line
        assert "Chroma server at 127.0.0.1" in line and "CHROMA_HOST" in line, line
        server = _start_chroma(tmp_path / "server", port)  # the same data comes back
        found = rag_json(env, "search", "kappa1tok0")
        assert notes[1].as_uri() in {h["source_url"] for h in found["hits"]}
        assert rag_json(env, "check")["ok"]
    finally:
        server.kill()
        server.wait()


def test_a_chroma_server_that_stops_answering_is_one_sentence_within_the_limit(
    tmp_path: Path,
) -> None:
    """A server that accepts connections and answers nothing (stopped with SIGSTOP): a
    search and a write fail within RAG_CHROMA_TIMEOUT_SEC instead of waiting for good,
    and work again once it answers."""
    port = _free_port()
    server = _start_chroma(tmp_path / "server", port)
    env = store_env(
        tmp_path, CHROMA_HOST="127.0.0.1", CHROMA_PORT=str(port), RAG_CHROMA_TIMEOUT_SEC="2"
    )
    try:
        notes = write_notes(tmp_path / "notes", "sigma", 2)
        assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
        server.send_signal(signal.SIGSTOP)
        for args in (("search", "sigma1tok0"), ("index", str(tmp_path / "more"))):
            write_notes(tmp_path / "more", "tau", 1)
            start = time.monotonic()
            hung = rag(env, *args, timeout=60)
            assert time.monotonic() - start < 30, args
            assert hung.returncode == 1, (args, hung.stdout)
            line = hung.stderr.strip().splitlines()[-1]
            assert "did not answer within 2 s" in line and "RAG_CHROMA_TIMEOUT_SEC" in line, line
        server.send_signal(signal.SIGCONT)
        found = rag_json(env, "search", "sigma1tok0")
        assert notes[1].as_uri() in {h["source_url"] for h in found["hits"]}
        assert rag(env, "index", str(tmp_path / "more")).returncode == 0
        assert rag_json(env, "check")["ok"]
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait()


def test_a_full_disk_is_one_sentence_and_loses_nothing(tmp_path: Path) -> None:
    env = store_env(tmp_path, RAG_STORE_STALL_SEC="10")
    write_notes(tmp_path / "base", "lam", 3)
    assert rag(env, "index", str(tmp_path / "base")).returncode == 0
    before = rag_json(env, "stats")
    assert rag(env, "service", "stop").returncode == 0
    sqlite = tmp_path / "chroma_db" / "chroma.sqlite3"
    limit = sqlite.stat().st_size + 64 * 1024  # the next write past this size fails
    launcher = (
        "import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
        f"os.execv({RAG!r}, [{RAG!r}, 'service', 'run'])"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", launcher],
        env=full_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            if rag(env, "service", "status").stdout.startswith("ready"):
                break
            time.sleep(0.1)
        write_notes(tmp_path / "big", "mu", 30, words=8)
        full = rag(env, "index", str(tmp_path / "big"))
        assert full.returncode != 0
        errors = [ln for ln in full.stderr.splitlines() if "error" in ln]
        assert errors, full.stderr
        for line in errors:  # each one sentence naming the cause or what to do
            assert "disk" in line or "Run the command again" in line, line
    finally:
        owner.terminate()
        owner.wait(timeout=30)
    during = rag_json(env, "stats")  # a new owner without the limit: nothing was lost
    assert set(before["sources"]) <= set(during["sources"])
    # space again (a service without the limit): the same command now works
    again = rag(env, "index", str(tmp_path / "big"))
    assert again.returncode == 0, again.stderr
    report = rag_json(env, "check")
    assert report["ok"] and not report["orphan_records"], report
    stats = rag_json(env, "stats")
    assert len(stats["sources"]) == 33 and stats["total_chunks"] == stats["bm25_documents"]


def _vector_hits(env: dict[str, str], query: str) -> list[tuple[str, str, float]]:
    found = rag_json(env, "search", query, "--mode", "vector")
    return [(h["node_id"], h["source_url"], round(h["vector_distance"], 6)) for h in found["hits"]]


def test_a_damaged_vector_index_is_set_aside_and_restored_from_the_copy(tmp_path: Path) -> None:
    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "xi", 4)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    before = rag_json(env, "stats")
    asked = _vector_hits(env, "xi2の説明 その1")
    assert rag(env, "service", "stop").returncode == 0
    folder = persist_hnsw_then_drop_the_filler(tmp_path / "chroma_db")
    (folder / "header.bin").write_bytes(b"\x00garbage" * 12)  # Chroma cannot load it now

    stats = rag_json(env, "stats")  # opens: the damaged folder is set aside, nothing lost
    assert stats["total_chunks"] == before["total_chunks"]
    assert set(stats["sources"]) == set(before["sources"])
    found = rag_json(env, "search", "xi2tok1", "--mode", "bm25")
    assert found["hits"][0]["source_url"] == notes[2].as_uri()
    aside = list((tmp_path / "chroma_db" / "damaged-vector-index").glob("*/*"))
    assert [p.name for p in aside] == [folder.name]
    report = rag_json(env, "check")  # the restore may not have taken the write lock yet
    assert report["ok"] and report["chunks"] == before["total_chunks"], report
    for _ in range(120):  # a few vectors: the restore ends within seconds
        restoring = rag_json(env, "service", "status")["restoring"]
        if restoring is None:
            break
        time.sleep(0.5)
    assert restoring is None  # done: none shown
    assert report["vector_checked"] == report["chunks"] and report["unfindable_by_vector"] == 0
    assert _vector_hits(env, "xi2の説明 その1") == asked  # the very same vectors
    aside_root = tmp_path / "chroma_db" / "damaged-vector-index"
    assert not (aside_root / "reembed-pending.json").exists()  # done: nothing pending
    assert rag(env, "service", "stop").returncode == 0
    # a stop before the end leaves the work pending: the next start resumes it
    with sqlite3.connect(tmp_path / "chroma_db" / "chroma.sqlite3") as db:
        (current,) = db.execute(
            "SELECT name FROM collections WHERE name LIKE 'knowledge\\_\\_%' ESCAPE '\\'"
        ).fetchone()
    (aside_root / "reembed-pending.json").write_text(json.dumps([current]), encoding="utf-8")
    with sqlite3.connect(tmp_path / "chroma_db" / "rag-vectors.sqlite3") as db:
        ids = [i for (i,) in db.execute("SELECT id FROM vectors ORDER BY id LIMIT 2")]
        db.executemany("DELETE FROM vectors WHERE id = ?", [(i,) for i in ids])
        assert (
            db.execute("SELECT count(*) FROM vectors").fetchone()[0] == before["total_chunks"] - 2
        )
    again = rag_json(env, "check")
    assert again["unfindable_by_vector"] == 0 and again["chunks"] == before["total_chunks"]
    assert not (aside_root / "reembed-pending.json").exists()
    # `check` returns once the re-embedding lets go of the write lock; its closing log
    # line follows the model's warm-up, a moment later
    log_file = tmp_path / "chroma_db" / ".rag-service.log"
    deadline = time.monotonic() + 30
    while log_file.read_text().count("Restored the vectors") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    log = log_file.read_text()
    total = before["total_chunks"]
    assert "set aside" in log and log.count("Restored the vectors") == 2, log[-2000:]
    assert f"{total} from the vector copy, 0 embedded again" in log, log[-2000:]
    assert f"{total - 2} from the vector copy, 2 embedded again" in log, log[-2000:]
    assert _vector_hits(env, "xi2の説明 その1") == asked


def test_a_garbage_vector_copy_is_set_aside_and_filled_again(tmp_path: Path) -> None:
    """A vector copy overwritten with junk: the real service still answers, sets the file
    aside, and its background fill makes the copy whole again from Chroma."""
    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "vc", 3)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    chunks = rag_json(env, "stats")["total_chunks"]
    assert rag(env, "service", "stop").returncode == 0
    chroma_dir = tmp_path / "chroma_db"
    for suffix in ("-wal", "-shm"):
        (chroma_dir / f"rag-vectors.sqlite3{suffix}").unlink(missing_ok=True)
    (chroma_dir / "rag-vectors.sqlite3").write_bytes(b"\x00not a database" * 600)
    found = rag_json(env, "search", "vc1tok0", "--mode", "bm25")
    assert found["hits"][0]["source_url"] == notes[1].as_uri()
    deadline = time.monotonic() + 30
    report = rag_json(env, "check")
    while report["missing_in_vector_copy"] != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        report = rag_json(env, "check")
    assert report["vector_copy"] == "on" and report["missing_in_vector_copy"] == 0, report
    assert report["chunks"] == chunks and report["ok"], report
    aside = list(chroma_dir.glob("rag-vectors.sqlite3.damaged-*"))
    assert aside and aside[0].read_bytes().startswith(b"\x00not a database")
    log = (chroma_dir / ".rag-service.log").read_text(encoding="utf-8")
    assert "set aside" in log, log[-1500:]
    assert rag(env, "service", "stop").returncode == 0


class _RandomUnit(BaseEmbedding):
    """Random unit vectors of the builtin model's size: fills a store of thousands of
    chunks in seconds (the real service searches it with the real model)."""

    def _vector(self) -> list[float]:
        v = np.random.default_rng().normal(size=384)
        return (v / np.linalg.norm(v)).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [self._vector() for _ in texts]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector()


def test_vector_search_answers_from_the_copy_while_the_real_service_restores(
    tmp_path: Path,
) -> None:
    """A store of 4,000 chunks whose HNSW files are damaged: the real service sets them
    aside and restores the vectors in the background (several seconds). Meanwhile a real
    `rag search --mode vector` gets hits (from the vector copy; the emptied index gave
    none), `rag service status` shows the restore's progress, a `rag index` says on
    stderr that its write waits for the restore, then stores its file, and a real
    `rag-mcp`'s `rag_delete` over stdio says so in its progress messages, then deletes."""
    import asyncio
    import threading

    from rag_app.config import load_settings
    from rag_app.knowledge import KnowledgeBase

    env = store_env(tmp_path)
    write_notes(tmp_path / "notes", "om", 20, words=200, sections=True)
    settings = load_settings(
        chromadb_persist_dir=str(tmp_path / "chroma_db"),
        bm25_persist_dir=str(tmp_path / "bm25_index"),
    )

    async def fill() -> int:
        kb = KnowledgeBase(settings, embed_model=_RandomUnit())
        await kb.open()
        await kb.index_dir(tmp_path / "notes")
        count = kb.store.count()
        await kb.aclose()
        return count

    chunks = asyncio.run(fill())
    assert chunks >= 4000, chunks
    folder = persist_hnsw_then_drop_the_filler(tmp_path / "chroma_db")
    (folder / "header.bin").write_bytes(b"\x00garbage" * 12)  # Chroma cannot load it now

    (tmp_path / "late").mkdir()
    (tmp_path / "late" / "late.md").write_text("# 追記\n\n復元中に書いた一行。\n", encoding="utf-8")
    assert rag_json(env, "stats")["total_chunks"] == chunks  # opens: set aside, restoring
    write = rag_async(env, "index", str(tmp_path / "late"))  # waits behind the restore
    messages: list[str] = []
    deleted: list[Any] = []

    async def delete_over_mcp() -> None:
        async def on_progress(_done: float, _total: float | None, message: str | None) -> None:
            messages.append(message or "")

        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            deleted.append(
                await client.call_tool(
                    "rag_delete",
                    {"url": (tmp_path / "notes" / "om000.md").as_uri()},
                    progress_callback=on_progress,
                )
            )

    mcp = threading.Thread(target=lambda: asyncio.run(delete_over_mcp()))
    mcp.start()
    status = rag_json(env, "service", "status")
    found = rag_json(env, "search", "om3語3の説明", "--mode", "vector")
    later = rag_json(env, "service", "status")
    assert status["restoring"] is not None and later["restoring"] is not None, later
    assert len(found["hits"]) >= 1, found
    out, err = write.communicate(timeout=180)
    assert write.returncode == 0 and "added=1" in out, (out, err)
    assert "waiting: the store is restoring its vector index after damage" in err, err
    mcp.join(180)
    assert deleted and not deleted[0].is_error, deleted
    assert text_of(deleted[0]).startswith("削除しました"), text_of(deleted[0])
    assert any(m.startswith("待機中: 損傷したベクトル索引を復元中") for m in messages), messages
    report = rag_json(env, "check")  # waits for the restore (it holds the write lock)
    assert report["ok"] and report["unfindable_by_vector"] == 0, report
    assert rag_json(env, "service", "status")["restoring"] is None
    assert rag(env, "service", "stop").returncode == 0
