"""The chunk collection's HNSW settings: set on new collections, brought up to date on old
ones, and Chroma's on-disk index kept close to its log so an open replays little."""

from __future__ import annotations

import json
import sqlite3
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

WRITE = """
import sys
import chromadb, numpy as np
from rag_app.index.chroma_store import ChromaStore
client = chromadb.PersistentClient(path=sys.argv[1])
store = ChromaStore(client, "kbase", model_name="m", dimension=8)
vectors = np.random.default_rng(7).normal(size=(int(sys.argv[2]), 8)).tolist()
for start in range(0, len(vectors), 64):
    part = vectors[start : start + 64]
    store.collection.upsert(ids=[f"c{start + i}" for i in range(len(part))], embeddings=part)
"""


def _hnsw(path: Path, name: str) -> dict[str, object]:
    """The collection's HNSW configuration as a new client reads it."""
    col = chromadb.PersistentClient(path=str(path)).get_collection(name)
    return dict((col.configuration or {}).get("hnsw") or {})


def test_a_new_chunk_collection_gets_the_projects_hnsw_settings(tmp_path: Path) -> None:
    ChromaStore(chromadb.PersistentClient(path=str(tmp_path)), "kbase", model_name="m", dimension=8)
    hnsw = subprocess.run(  # read back by another process, from disk
        [sys.executable, "-c", f"import json, chromadb; print(json.dumps(chromadb.PersistentClient("
         f"path={str(tmp_path)!r}).get_collection('kbase').configuration['hnsw']))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    config = json.loads(hnsw)
    assert config["sync_threshold"] == HNSW_SYNC_THRESHOLD
    assert config["ef_search"] == HNSW_EF_SEARCH
    assert {k: config[k] for k in HNSW_BUILD} == HNSW_BUILD


def test_an_older_collection_is_brought_up_to_date_when_opened(tmp_path: Path) -> None:
    old = tmp_path / "old"
    chromadb.PersistentClient(path=str(old)).create_collection(
        "kbase",
        configuration={"hnsw": {"space": "cosine", "ef_search": 100, "sync_threshold": 1000}},
        embedding_function=None,
    )
    subprocess.run(  # a new version opens it
        [sys.executable, "-c", "import sys, chromadb; from rag_app.index.chroma_store import "
         "ChromaStore; ChromaStore(chromadb.PersistentClient(path=sys.argv[1]), 'kbase', "
         "model_name='m', dimension=8)", str(old)],
        check=True, timeout=60,
    )  # fmt: skip
    hnsw = _hnsw(old, "kbase")
    assert hnsw["sync_threshold"] == HNSW_SYNC_THRESHOLD
    assert hnsw["ef_search"] == HNSW_EF_SEARCH


def test_the_index_on_disk_stays_within_the_threshold_of_the_log(tmp_path: Path) -> None:
    """What an open must insert again: the vectors written since the index was last
    saved. 250 written: with Chroma's default (1,000) all 250, here at most 100."""
    subprocess.run([sys.executable, "-c", WRITE, str(tmp_path), "250"], check=True, timeout=120)
    db = sqlite3.connect(f"file:{tmp_path / 'chroma.sqlite3'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT s.scope, m.seq_id FROM segments s JOIN max_seq_id m ON m.segment_id = s.id"
            " JOIN collections c ON c.id = s.collection WHERE c.name = 'kbase'"
        ).fetchall()
    finally:
        db.close()
    seen = dict(rows)
    logged, saved = seen["METADATA"], seen.get("VECTOR", 0)
    assert logged >= 250
    assert logged - saved <= HNSW_SYNC_THRESHOLD, seen
