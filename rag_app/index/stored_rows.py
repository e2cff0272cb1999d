"""An in-memory copy of the stored chunk rows (text and metadata exactly as Chroma holds
them), kept for stores of up to `RAG_ROWS_IN_MEMORY_MAX_CHUNKS` chunks.

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
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

Row = tuple[str | None, Mapping[str, Any]]
"""A chunk's stored document and metadata, as Chroma returns them (treat as read-only)."""

NODE_JSON = "_node_content"


_Held = tuple[str | None, tuple[str, ...], tuple[Any, ...], bytes | None]
"""A row as held: document, metadata keys (one tuple shared by every row with those keys),
their values, packed node JSON. Tuples of strings and numbers only, which the cyclic
garbage collector stops tracking (a tuple holding a dict it never stops tracking): 100k
held rows with a dict each made every full collection stall all threads for 120–150 ms."""

_KEY_SETS: dict[tuple[str, ...], tuple[str, ...]] = {}
_KEY_SETS_MAX = 1_000


def _pack(document: str | None, meta: Mapping[str, Any], shared: dict[str, str]) -> _Held:
    """A row to hold: LlamaIndex's node JSON (`NODE_JSON`, about two thirds of a row of
    real documentation, ~3 KB) zlib-compressed to a quarter, and a page's URL, title and
    headings one string for all its rows read or written together (`shared`: one batch;
    `sys.intern` would make them immortal on Python 3.12). ~4.4 → ~1.4 KB a row. Values
    Chroma does not keep (None) are left out, as Chroma leaves them out."""
    raw = meta.get(NODE_JSON)
    packed = isinstance(raw, str)
    items = [(k, v) for k, v in meta.items() if v is not None and not (packed and k == NODE_JSON)]
    keys = tuple(k for k, _ in items)
    if len(_KEY_SETS) < _KEY_SETS_MAX:
        keys = _KEY_SETS.setdefault(keys, keys)
    values = tuple(shared.setdefault(v, v) if isinstance(v, str) else v for _, v in items)
    return document, keys, values, zlib.compress(raw.encode(), 1) if packed else None


class PackedMetadata(Mapping[str, Any]):
    """A held row's metadata, read as Chroma returned it: the node JSON is unpacked when
    read (~7 µs)."""

    __slots__ = ("_flat", "_packed")

    def __init__(self, keys: tuple[str, ...], values: tuple[Any, ...], packed: bytes | None):
        self._flat = dict(zip(keys, values, strict=True))
        self._packed = packed

    def __getitem__(self, key: str) -> Any:
        if key == NODE_JSON and self._packed is not None:
            return zlib.decompress(self._packed).decode()
        return self._flat[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._flat
        if self._packed is not None:
            yield NODE_JSON

    def __len__(self) -> int:
        return len(self._flat) + (self._packed is not None)


class StoredRows:
    """`{chunk id: (document, metadata)}` with a write generation (see the module doc)."""

    def __init__(self, complete: bool = False) -> None:
        self._rows: dict[str, _Held] = {}
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
                    found[chunk_id] = (row[0], PackedMetadata(*row[1:]))
        return found, missing

    def fill(self, rows: Mapping[str, Row], since: int) -> int:
        """Add rows read from Chroma, except those of ids written after generation `since`;
        returns how many were dropped."""
        with self._lock:
            if since < self._floor:
                return len(rows)
            dropped = 0
            shared: dict[str, str] = {}
            for chunk_id, row in rows.items():
                if self._touched.get(chunk_id, -1) > since:
                    dropped += 1
                else:
                    self._rows[chunk_id] = _pack(*row, shared)
            return dropped

    def put(
        self, ids: Sequence[str], documents: Sequence[str | None], metadatas: Sequence[Any]
    ) -> None:
        """Rows a writer has just written to Chroma as new rows (Chroma keeps no key whose
        value is None, so neither does the copy)."""
        with self._lock:
            self._bump(ids)
            shared: dict[str, str] = {}
            for chunk_id, doc, meta in zip(ids, documents, metadatas, strict=True):
                self._rows[chunk_id] = _pack(doc, meta or {}, shared)

    def restart_fills(self) -> None:
        """Drop whole every fill that began before now (the rule for which rows to keep
        changed while it read)."""
        with self._lock:
            self._generation += 1
            self._floor = self._generation

    def ids(self) -> set[str]:
        """The ids of the rows held."""
        with self._lock:
            return set(self._rows)

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


__all__ = ["NODE_JSON", "PackedMetadata", "Row", "StoredRows"]
