"""The chunk collection's HNSW settings: set on new collections, and the ones Chroma lets
change brought up to date on collections made with others."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import chromadb

from rag_app.index.chroma_store import (
    HNSW_BUILD,
    HNSW_EF_SEARCH,
    HNSW_SYNC_THRESHOLD,
    ChromaStore,
)


def _hnsw_from_another_process(path: Path, name: str) -> dict[str, object]:
    """The collection's HNSW configuration as a new process reads it from disk."""
    script = (
        "import json, sys, chromadb; print(json.dumps(chromadb.PersistentClient("
        "path=sys.argv[1]).get_collection(sys.argv[2]).configuration['hnsw']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(path), name],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return dict(json.loads(out))


def test_a_new_chunk_collection_gets_the_projects_hnsw_settings(tmp_path: Path) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path))
    ChromaStore(client, "kbase", model_name="m", dimension=8)
    config = _hnsw_from_another_process(tmp_path, "kbase")
    assert config["ef_search"] == HNSW_EF_SEARCH
    assert {k: config[k] for k in HNSW_BUILD} == HNSW_BUILD
    assert config["sync_threshold"] == HNSW_SYNC_THRESHOLD


def test_a_collection_made_with_other_settings_gets_ours_when_opened(tmp_path: Path) -> None:
    chromadb.PersistentClient(path=str(tmp_path)).create_collection(
        "kbase",
        configuration={"hnsw": {"space": "cosine", "ef_search": 100, "sync_threshold": 100}},
        embedding_function=None,
    )  # fmt: skip
    subprocess.run(  # a new version opens it
        [sys.executable, "-c", "import sys, chromadb; from rag_app.index.chroma_store import "
         "ChromaStore; ChromaStore(chromadb.PersistentClient(path=sys.argv[1]), 'kbase', "
         "model_name='m', dimension=8)", str(tmp_path)],
        check=True, timeout=60,
    )  # fmt: skip
    config = _hnsw_from_another_process(tmp_path, "kbase")
    assert config["ef_search"] == HNSW_EF_SEARCH
    assert config["sync_threshold"] == HNSW_SYNC_THRESHOLD


def test_a_collection_on_a_chroma_server_gets_our_settings_when_opened(
    chroma_server: int,
) -> None:
    """The same update through a real `chroma run` server (saved by the server)."""
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma_server)
    name = "kbase-server-old"
    client.create_collection(
        name,
        configuration={"hnsw": {"space": "cosine", "ef_search": 100, "sync_threshold": 100}},
        embedding_function=None,
    )
    ChromaStore(client, name, model_name="m", dimension=8)
    again = chromadb.HttpClient(host="127.0.0.1", port=chroma_server).get_collection(name)
    hnsw = (again.configuration or {}).get("hnsw") or {}
    assert hnsw["ef_search"] == HNSW_EF_SEARCH
    assert hnsw["sync_threshold"] == HNSW_SYNC_THRESHOLD


def _long_notes(folder: Path, files: int) -> None:
    """`files` notes of 4 chunks each."""
    folder.mkdir(parents=True, exist_ok=True)
    para = (
        "は段落の本文で、ここには長めの説明が書かれている。チャンクに分かれるだけの長さがある。" * 3
    )
    for i in range(files):
        body = "\n\n".join(f"hs{i}x{k} {para}" for k in range(4))
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")


def test_a_clean_stop_saves_the_vectors_chroma_would_insert_again(tmp_path: Path) -> None:
    """The store service's stop saves Chroma's HNSW files when 100 or more vectors wait
    for its next save, and leaves the save interval as it was; the next start then has
    nothing to insert again and finds them all."""
    from rag_app.index.hnsw_save import SAVE_AT_STOP_MIN, unsaved_vectors
    from tests.processes import rag, rag_json, store_env

    env = store_env(tmp_path)
    chroma = tmp_path / "chroma_db"
    _long_notes(tmp_path / "many", 25)
    assert rag(env, "index", str(tmp_path / "many")).returncode == 0
    assert unsaved_vectors(chroma, "knowledge") == 100 == SAVE_AT_STOP_MIN
    assert not list(chroma.glob("*/index_metadata.pickle"))
    assert rag(env, "service", "stop").returncode == 0
    assert unsaved_vectors(chroma, "knowledge") == 0
    assert len(list(chroma.glob("*/index_metadata.pickle"))) == 1
    assert _hnsw_from_another_process(chroma, "knowledge")["sync_threshold"] == HNSW_SYNC_THRESHOLD
    log = (chroma / ".rag-service.log").read_text(encoding="utf-8")
    assert "Saved Chroma's vector index at the stop (100 writes" in log, log[-1500:]
    report = rag_json(env, "check")
    assert report["chunks"] == 100 and report["unfindable_by_vector"] == 0, report
    found = rag_json(env, "search", "hs17x2", "--mode", "vector")
    assert any(h["source_url"].endswith("/many/n17.md") for h in found["hits"]), found
    assert rag(env, "service", "stop").returncode == 0


async def test_a_late_stop_or_a_thread_still_running_saves_nothing(tmp_path: Path) -> None:
    """The save is skipped when a background thread may still use Chroma, when the stop
    already took so long that a supervisor may kill it mid-save, and below the minimum."""
    from types import SimpleNamespace

    import numpy as np

    from rag_app.config import load_settings
    from rag_app.index.hnsw_save import SAVE_AT_STOP_LATE_SEC, unsaved_vectors
    from rag_app.service.server import StoreService

    client = chromadb.PersistentClient(path=str(tmp_path))
    store = ChromaStore(client, "knowledge", model_name="m", dimension=8)
    vectors = np.random.default_rng(5).normal(size=(150, 8)).tolist()
    store.collection.upsert(ids=[f"c{i}" for i in range(99)], embeddings=vectors[:99])
    service = StoreService(load_settings(chromadb_persist_dir=str(tmp_path)))
    service.kb = SimpleNamespace(threads_left=[])
    await service._save_vector_index("knowledge", 0.1)  # 99 writes: left to Chroma
    assert unsaved_vectors(tmp_path, "knowledge") == 99
    client = chromadb.PersistentClient(path=str(tmp_path))
    client.get_collection("knowledge").upsert(
        ids=[f"c{i}" for i in range(99, 150)], embeddings=vectors[99:]
    )
    del store, client
    service.kb = SimpleNamespace(threads_left=["vector-copy"])
    await service._save_vector_index("knowledge", 0.1)
    assert unsaved_vectors(tmp_path, "knowledge") == 150
    service.kb = SimpleNamespace(threads_left=[])
    await service._save_vector_index("knowledge", SAVE_AT_STOP_LATE_SEC + 1)
    assert unsaved_vectors(tmp_path, "knowledge") == 150
    await service._save_vector_index("knowledge", 0.1)
    assert unsaved_vectors(tmp_path, "knowledge") == 0
