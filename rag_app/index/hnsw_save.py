"""Save Chroma's HNSW files when the store service stops, so the next start is quick.

Chroma saves a collection's HNSW files every `HNSW_SYNC_THRESHOLD` (1,000) new vectors and
at every load inserts the ones written since into the graph again; a load that writes
nothing never saves, so each start of the same store pays that again (1.7–2.1 s for 520
vectors at 100k chunks). A lower threshold for good made a kill during writes damage the
index more often (README "Cold start"). Instead, at a clean stop with many vectors
unsaved, the service loads the collection once more with a threshold of 1, which makes
that load's catch-up save the files, then sets the threshold back. Only the embedded
store: a Chroma server keeps its own files.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import chromadb
from chromadb.api.shared_system_client import SharedSystemClient

from rag_app.index.chroma_catalog import read_only, segments
from rag_app.index.chroma_store import DIM_KEY, HNSW_SYNC_THRESHOLD

logger = logging.getLogger(__name__)

SAVE_AT_STOP_MIN = 100
"""Writes since the last save from which a stop saves the files (~0.3 s of every start at
100k chunks)."""
SAVE_AT_STOP_LATE_SEC = 5.0
"""A stop whose closing took longer saves nothing: a supervisor may kill it soon (Docker
waits 10 s), and a kill during a save can damage the files (the save: ~2 s at 100k)."""


def unsaved_vectors(persist_dir: str | Path, collection: str) -> int | None:
    """Writes to `collection` (adds, updates, deletes) since Chroma last saved its HNSW
    files, what its next load applies again, read from Chroma's own SQLite tables (None
    when they do not read as expected)."""
    try:
        with read_only(persist_dir) as db:
            found = segments(db, [collection], vector_only=True)
            if not found:
                return None
            collection_id, segment_id = found[0]
            saved = db.execute(
                "SELECT seq_id FROM max_seq_id WHERE segment_id = ?", (segment_id,)
            ).fetchone()
            return int(
                db.execute(
                    "SELECT count(*) FROM embeddings_queue WHERE topic LIKE ? AND seq_id > ?",
                    (f"%/{collection_id}", saved[0] if saved else 0),
                ).fetchone()[0]
            )
    except (sqlite3.Error, TypeError, ValueError):
        return None


def save_at_stop(persist_dir: str | Path, collection: str) -> int:
    """Save `collection`'s HNSW files if `SAVE_AT_STOP_MIN` or more vectors are unsaved;
    returns how many were. Call with the store closed and still owned (it resets Chroma's
    clients in this process). Never raises: the next start catches up as before."""
    pending = unsaved_vectors(persist_dir, collection)
    if pending is None or pending < SAVE_AT_STOP_MIN:
        return 0
    start = time.perf_counter()
    try:
        SharedSystemClient.clear_system_cache()
        chunks = chromadb.PersistentClient(path=str(persist_dir)).get_collection(collection)
        chunks.modify(configuration={"hnsw": {"sync_threshold": 1}})
        try:
            SharedSystemClient.clear_system_cache()  # the next load reads the threshold
            chunks = chromadb.PersistentClient(path=str(persist_dir)).get_collection(collection)
            dim = int((chunks.metadata or {}).get(DIM_KEY) or 0)
            if dim > 0:  # any query loads the index: its catch-up now ends in a save
                chunks.query(query_embeddings=[[1.0] + [0.0] * (dim - 1)], n_results=1)
        finally:
            chunks.modify(configuration={"hnsw": {"sync_threshold": HNSW_SYNC_THRESHOLD}})
            SharedSystemClient.clear_system_cache()
    except Exception as err:  # chromadb raises many types; nothing is lost either way
        logger.warning("Chroma's vector index was not saved at the stop: %s", err)
        return 0
    left = unsaved_vectors(persist_dir, collection)
    logger.info(
        "Saved Chroma's vector index at the stop (%d writes since its last save, %s left) "
        "in %.2f s; the next start need not insert them again.",
        pending,
        left,
        time.perf_counter() - start,
    )
    return pending
