"""Read-only look-ups in an embedded Chroma store's own SQLite catalogue.

Chroma's client answers nothing about its files: which folder holds a collection's HNSW
index, how many writes wait for its next save. Those questions are read here from
`chroma.sqlite3`, read-only, with no Chroma client open (`vector_salvage`, `hnsw_save`,
`segment_files`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

CATALOGUE = "chroma.sqlite3"


@contextmanager
def read_only(persist_dir: str | Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the store's catalogue (`sqlite3.Error` when unreadable)."""
    uri = (Path(persist_dir) / CATALOGUE).resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        yield db


def segments(
    db: sqlite3.Connection, names: Sequence[str] | None = None, *, vector_only: bool = False
) -> list[tuple[str, str]]:
    """(collection id, segment id) of the collections `names`, or of every segment Chroma
    lists with None (one whose collection is gone too); only vector (HNSW) segments with
    `vector_only`."""
    if names is None:
        query, params = "SELECT s.collection, s.id FROM segments s WHERE 1", []
    else:
        marks = ",".join("?" * len(names)) or "NULL"
        query = (
            "SELECT c.id, s.id FROM segments s JOIN collections c ON s.collection = c.id "
            f"WHERE c.name IN ({marks})"
        )
        params = list(names)
    if vector_only:
        query += " AND s.scope = 'VECTOR'"
    return [(str(c), str(s)) for c, s in db.execute(query, params).fetchall()]
