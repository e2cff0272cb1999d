"""Remove the HNSW folder Chroma leaves behind when a collection is deleted.

Chroma's embedded store deletes a collection's rows but keeps its vector segment folder
on disk (chroma-core/chroma#5520, still so in 1.5.9), so every `rag reindex` left a copy
of the whole vector index behind (~1.7 KB per chunk). After the deletion, a folder named
by one of that collection's segment ids that Chroma no longer lists is removed.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import uuid
from pathlib import Path

from rag_app.index.chroma_catalog import read_only, segments

logger = logging.getLogger(__name__)


def _segments(persist_dir: Path, collection: str | None = None) -> set[str]:
    with read_only(persist_dir) as db:
        return {s for _c, s in segments(db, None if collection is None else [collection])}


def segment_ids(persist_dir: str | Path | None, collection: str) -> set[str]:
    """The segment ids of `collection` in an embedded store (none when unreadable)."""
    if not persist_dir:
        return set()
    try:
        return _segments(Path(persist_dir), collection)
    except sqlite3.Error:
        return set()


def remove_left_behind(persist_dir: str | Path | None, ids: set[str]) -> int:
    """Remove the folders of those `ids` Chroma no longer lists; how many were removed."""
    if not persist_dir or not ids:
        return 0
    root = Path(persist_dir)
    try:
        gone = ids - _segments(root)
    except sqlite3.Error as err:
        logger.info("Left-behind vector folders not checked: %s", err)
        return 0
    removed = 0
    for segment in sorted(gone):
        try:
            name = str(uuid.UUID(segment))  # a segment id, never "", ".." or a path
        except ValueError:
            continue
        folder = root / name
        if folder.is_dir() and not folder.is_symlink():
            try:
                shutil.rmtree(folder)
                removed += 1
            except OSError as err:  # e.g. a file still open elsewhere: harmless, logged
                logger.warning("The deleted collection's folder %s stays: %s", folder, err)
    return removed
