"""An in-memory copy of the stored chunk rows (text and metadata exactly as Chroma holds
them), kept beside the exact-search copy of the vectors for stores small enough for it.

A search reads its hits and the chunks around them for their passages. From Chroma that
is a read of ~0.6 ms before its first row plus the rows themselves, and the hits and the
passage pieces a first read did not cover made it two reads: 9.6 of a 13.7 ms search at
10k chunks, with the query embedding excluded (`bench/search_latency.py`). From memory it
is a dictionary lookup per row.

Correctness rests on two rules. A writer updates the copy only after its Chroma write, with
the rows it wrote (or forgets the ids, when it changed only part of a row). A reader that
missed rows fills them in only when no write came in between: it passes the generation it
saw before its Chroma read, and a write since then makes the fill a no-op, so a row read
before a write cannot come back after it. Changes by other writers (a Chroma server shared
by several machines) reach this copy through the change log, which forgets the rows of
every source they touched.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Row = tuple[str | None, Mapping[str, Any]]
"""A chunk's stored document and metadata, as Chroma returns them (treat as read-only)."""


class StoredRows:
    """`{chunk id: (document, metadata)}` with a write generation (see the module doc)."""

    def __init__(self) -> None:
        self._rows: dict[str, Row] = {}
        self._lock = threading.Lock()
        self._generation = 0

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def generation(self) -> int:
        """Read before a Chroma read whose rows are then passed to `fill`."""
        return self._generation

    def get(self, ids: Iterable[str]) -> tuple[dict[str, Row], list[str]]:
        """The rows held for `ids`, and the ids not held."""
        found: dict[str, Row] = {}
        missing: list[str] = []
        with self._lock:
            for chunk_id in ids:
                row = self._rows.get(chunk_id)
                if row is None:
                    missing.append(chunk_id)
                else:
                    found[chunk_id] = row
        return found, missing

    def fill(self, rows: Mapping[str, Row], since: int) -> bool:
        """Add rows read from Chroma, unless a write came in after generation `since`."""
        with self._lock:
            if self._generation != since:
                return False
            self._rows.update(rows)
            return True

    def put(
        self, ids: Sequence[str], documents: Sequence[str | None], metadatas: Sequence[Any]
    ) -> None:
        """Rows a writer has just written to Chroma."""
        with self._lock:
            self._generation += 1
            for chunk_id, doc, meta in zip(ids, documents, metadatas, strict=True):
                self._rows[chunk_id] = (doc, meta or {})

    def forget(self, ids: Iterable[str]) -> None:
        """Drop rows a write has changed or removed (read again from Chroma when asked)."""
        with self._lock:
            self._generation += 1
            for chunk_id in ids:
                self._rows.pop(chunk_id, None)


__all__ = ["Row", "StoredRows"]
