"""An in-memory copy of the stored chunk rows (text and metadata exactly as Chroma holds
them), kept beside the exact-search copy of the vectors for stores small enough for it.

A search reads its hits and the chunks around them for their passages. From Chroma that
is a read of ~0.6 ms before its first row plus the rows themselves, and the hits and the
passage pieces a first read did not cover made it two reads: 9.6 of a 13.7 ms search at
10k chunks, with the query embedding excluded (`bench/search_latency.py`). From memory it
is a dictionary lookup per row.

Correctness rests on two rules. A writer updates the copy only after its Chroma write, with
the rows it wrote (or forgets the ids, when it changed only part of a row or the write
failed part-way). A reader that missed rows fills them in only for ids no write touched
since it began: it passes the generation it saw before its Chroma read, and a row of an id
written since then is dropped, so a row read before a write cannot come back after it.
Changes by other writers (a Chroma server shared by several machines) reach this copy
through the change log, which forgets the rows of every source they touched: the copy is
as fresh as BM25 and the exact-search copy of the vectors, no fresher.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Row = tuple[str | None, Mapping[str, Any]]
"""A chunk's stored document and metadata, as Chroma returns them (treat as read-only)."""


class StoredRows:
    """`{chunk id: (document, metadata)}` with a write generation (see the module doc)."""

    def __init__(self, complete: bool = False) -> None:
        self._rows: dict[str, Row] = {}
        self._lock = threading.Lock()
        self._generation = 0
        self._touched: dict[str, int] = {}
        """The generation of each id's last write (fills older than it are dropped)."""
        self._floor = 0
        """Fills that began before this generation are dropped whole (`_touched` reset)."""
        self.complete = complete
        """Every stored row was read in (a store empty at the start, or `load_rows` done)."""

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

    def fill(self, rows: Mapping[str, Row], since: int) -> int:
        """Add rows read from Chroma, except those of ids written after generation `since`;
        returns how many were dropped."""
        with self._lock:
            if since < self._floor:
                return len(rows)
            dropped = 0
            for chunk_id, row in rows.items():
                if self._touched.get(chunk_id, -1) > since:
                    dropped += 1
                else:
                    self._rows[chunk_id] = row
            return dropped

    def put(
        self, ids: Sequence[str], documents: Sequence[str | None], metadatas: Sequence[Any]
    ) -> None:
        """Rows a writer has just written to Chroma as new rows (Chroma keeps no key whose
        value is None, so neither does the copy)."""
        with self._lock:
            self._bump(ids)
            for chunk_id, doc, meta in zip(ids, documents, metadatas, strict=True):
                kept = {k: v for k, v in (meta or {}).items() if v is not None}
                self._rows[chunk_id] = (doc, kept)

    def forget(self, ids: Iterable[str]) -> None:
        """Drop rows a write has changed or removed (read again from Chroma when asked)."""
        with self._lock:
            ids = list(ids)
            self._bump(ids)
            for chunk_id in ids:
                self._rows.pop(chunk_id, None)

    def _bump(self, ids: Sequence[str]) -> None:
        self._generation += 1
        if len(self._touched) > 2 * len(self._rows) + 10_000:  # bounded under churn
            self._touched.clear()
            self._floor = self._generation
        for chunk_id in ids:
            self._touched[chunk_id] = self._generation


__all__ = ["Row", "StoredRows"]
