"""Chroma's HNSW files on disk, for tests that damage them (a real store, no mocks)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest


def persist_hnsw_then_drop_the_filler(chroma_dir: Path) -> Path:
    """Past Chroma's sync threshold (1,000 writes) its HNSW files hold the vectors; add
    and delete that many filler chunks so they do, and return the chunk index's folder."""
    import chromadb
    import numpy as np
    from chromadb.api.shared_system_client import SharedSystemClient

    client = chromadb.PersistentClient(path=str(chroma_dir))
    chunks = client.get_collection("knowledge")
    rng = np.random.default_rng(3)
    ids = [f"filler-{i}" for i in range(1100)]
    for start in range(0, len(ids), 100):
        vectors = rng.normal(size=(100, 384))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        chunks.upsert(ids=ids[start : start + 100], embeddings=vectors.tolist())
    chunks.delete(ids=ids)
    del chunks, client
    SharedSystemClient.clear_system_cache()
    with sqlite3.connect(chroma_dir / "chroma.sqlite3") as db:
        (segment,) = db.execute(
            "SELECT s.id FROM segments s JOIN collections c ON s.collection = c.id "
            "WHERE c.name = 'knowledge' AND s.scope = 'VECTOR'"
        ).fetchone()
    folder = chroma_dir / segment
    assert (folder / "index_metadata.pickle").exists()  # the vectors live in these files now
    return folder


def hold_the_first_restored_write(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event]:
    """Make the first write into a new (restored) chunk collection wait for `release`;
    `held` is set while it waits."""
    from rag_app.index.chroma_store import ChromaStore

    held, release = threading.Event(), threading.Event()
    real = ChromaStore.upsert_nodes

    def paused(self: ChromaStore, nodes: Any, *args: Any, **kwargs: Any) -> Any:
        if "__" in self.collection.name and not held.is_set():  # knowledge__<id>
            held.set()
            release.wait(60)
        return real(self, nodes, *args, **kwargs)

    monkeypatch.setattr(ChromaStore, "upsert_nodes", paused)
    return held, release
