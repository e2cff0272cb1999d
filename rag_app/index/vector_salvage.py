"""Salvage an embedded store whose vector index (Chroma's HNSW files) cannot be loaded.

Chroma keeps a collection's vectors in its HNSW segment folder and only the most recent
writes in its log; the chunk text and metadata live in SQLite. When the HNSW files are
damaged (a crash at the wrong moment, a bad disk, a hand edit), every operation on
that collection fails — stats, BM25 search and deletes included. Setting the damaged
folder aside lets Chroma open the collection again from SQLite: text, metadata and BM25
are intact, only the vectors are gone, and `KnowledgeBase.reindex` takes them back from
the vector copy (`rag_app.index.vector_copy`), embedding again from the stored text only
those it lacks. The folder is moved, never deleted, so nothing is lost for good.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import chromadb
from chromadb.api import ClientAPI
from chromadb.api.shared_system_client import SharedSystemClient

from rag_app.index.chroma_catalog import read_only, segments

logger = logging.getLogger(__name__)

ASIDE_DIR = "damaged-vector-index"
PENDING = "reembed-pending.json"  # collections whose vectors are still to be embedded again


def is_damaged_vector_index(err: BaseException) -> bool:
    """Chroma's own words for an HNSW segment it cannot load or replay its log into."""
    text = str(err).lower()
    return "hnsw" in text and any(
        words in text for words in ("loading hnsw", "hnsw segment reader", "apply logs")
    )


def damaged_collections(client: ClientAPI) -> list[str]:
    """Names of the collections whose vector index fails to load."""
    damaged = []
    for collection in client.list_collections():
        try:
            collection.count()
        except Exception as err:  # chromadb raises InternalError and others alike
            if is_damaged_vector_index(err):
                damaged.append(collection.name)
    return damaged


def set_aside(persist_dir: str | Path, names: list[str]) -> list[Path]:
    """Move the HNSW folders of collections `names` to `<persist_dir>/damaged-vector-index/
    <time>/`; returns where they went. Call with no client open on `persist_dir`."""
    root = Path(persist_dir)
    with read_only(root) as db:
        rows = segments(db, names, vector_only=True)
    target = root / ASIDE_DIR / time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for _collection, segment_id in rows:
        folder = root / str(segment_id)
        if folder.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            folder.rename(target / folder.name)
            moved.append(target / folder.name)
    return moved


def salvage(persist_dir: str | Path) -> tuple[ClientAPI, list[str]]:
    """Set aside every collection's damaged vector index; a fresh client on the store and
    the names of the collections whose vectors must be embedded again."""
    SharedSystemClient.clear_system_cache()
    names = damaged_collections(chromadb.PersistentClient(path=str(persist_dir)))
    SharedSystemClient.clear_system_cache()
    if names:
        moved = set_aside(persist_dir, names)
        logger.error(
            "The vector index of %s could not be loaded; set aside in %s. Text, metadata "
            "and BM25 are intact; the vectors are restored from the vector copy (those it "
            "lacks embedded again from the stored text).",
            ", ".join(names),
            ", ".join(str(p) for p in moved) or "(nothing to move)",
        )
    return chromadb.PersistentClient(path=str(persist_dir)), names


def mark_pending(persist_dir: str | Path, names: list[str]) -> None:
    """Remember (or, with no names, forget) which collections still need their vectors
    embedded again, so a stop before the end resumes the work at the next start."""
    path = Path(persist_dir) / ASIDE_DIR / PENDING
    if not names:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(set(names) | set(pending(persist_dir)))), encoding="utf-8")
    tmp.replace(path)


def pending(persist_dir: str | Path) -> list[str]:
    """The collections `mark_pending` recorded (none when unreadable)."""
    try:
        names = json.loads((Path(persist_dir) / ASIDE_DIR / PENDING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
