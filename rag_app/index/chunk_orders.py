"""Each source's chunk ids in reading order, kept in memory for the sources searched
recently, so a hit's neighbours are found by id without asking Chroma for the source's
record first.

The order comes from the source record (`SourceRecord.chunk_ids`). A cached order is
forgotten whenever this process writes or deletes that record or re-syncs the source
from another writer's change (`KnowledgeStore`): a later search reads the record again.
Bounded by the chunk ids it holds (LRU, ~150 bytes an id), so memory stays the same
however large the corpus or its sources grow; a source longer than the whole bound is
read each time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from cachetools import LRUCache

ORDER_CACHE_IDS = 100_000
"""Chunk ids kept over all cached orders (~15 MB)."""


@dataclass(frozen=True)
class ChunkOrder:
    """One source's chunk ids by `chunk_index`, and the index of each id."""

    ids: tuple[str, ...] = ()
    index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, ids: Sequence[str]) -> ChunkOrder:
        return cls(tuple(ids), {chunk_id: i for i, chunk_id in enumerate(ids)})

    def window(self, chunk_id: str, reach: int) -> tuple[range, list[str]] | None:
        """The positions within `reach` of `chunk_id` (from 0, past the last chunk if it
        is that near; a position is the chunk's `chunk_index`, as ingest numbers chunks
        0..n-1) and the ids of those that exist; None for an unknown id."""
        at = self.index.get(chunk_id)
        if at is None:
            return None
        first = max(0, at - reach)
        return range(first, at + reach + 1), list(self.ids[first : at + reach + 1])


class ChunkOrders:
    """Thread-safe LRU of `ChunkOrder` per source (searches run in worker threads)."""

    def __init__(self, maxsize: int = ORDER_CACHE_IDS) -> None:
        self._cache: LRUCache[str, ChunkOrder] = LRUCache(
            maxsize=maxsize, getsizeof=lambda order: len(order.ids) + 1
        )
        self._lock = threading.Lock()
        self._forgotten = 0  # bumped by every `forget`: a load that raced one is not kept

    def get(
        self,
        sources: Iterable[str],
        load: Callable[[list[str]], dict[str, list[str]]],
    ) -> dict[str, ChunkOrder]:
        """The order of each source; those not cached are read with one `load` call
        (source → ordered ids; a source it leaves out has no known order: empty)."""
        wanted = list(dict.fromkeys(sources))
        out: dict[str, ChunkOrder] = {}
        with self._lock:
            for source in wanted:
                order = self._cache.get(source)
                if order is not None:
                    out[source] = order
            generation = self._forgotten
        missing = [s for s in wanted if s not in out]
        if missing:
            loaded = load(missing)
            with self._lock:
                keep = generation == self._forgotten  # no write since the load began
                for source in missing:
                    out[source] = order = ChunkOrder.of(loaded.get(source, []))
                    if keep and len(order.ids) < self._cache.maxsize:
                        self._cache[source] = order
        return out

    def forget(self, sources: Iterable[str]) -> None:
        with self._lock:
            self._forgotten += 1
            for source in sources:
                self._cache.pop(source, None)

    def clear(self) -> None:
        with self._lock:
            self._forgotten += 1
            self._cache.clear()
