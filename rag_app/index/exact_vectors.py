"""Exact nearest-neighbour search over an in-memory copy of the stored vectors.

Below a size where one matrix–vector product is cheap, a search scores every chunk:

- results equal exact search by construction, in any process (HNSW's recall on
  near-identical table rows was ~0.97, and its top 10 could differ between processes);
- a search never touches Chroma, whose upserts block its queries for up to ~40 ms while
  an ingest runs;
- at 10k chunks it is faster: the vector step of a search took 3.7 ms against HNSW's
  7.8 ms (`bench/search_latency.py`, one BLAS thread as the service runs; the product
  alone takes 2.4 ms at 10k, 5 ms at 20k, 11.5 ms at 50k, hence the default limit of
  20,000 chunks; HNSW on real embeddings takes ~2 ms even at 100k).

The owner keeps it in step with Chroma: every upsert and delete of chunks goes through
`ChromaStore`, which updates both; changes by other machines arrive through the change log.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

_MARGIN = 16  # extra candidates re-scored exactly, so ties near the cut cannot flip


@dataclass(frozen=True)
class Spread:
    """Mean and standard deviation of one query's cosine similarity over every chunk
    searched: how far the best hit stands out from the store as a whole (the no-match
    rule, `rag_app.index.no_match`, compares it with them)."""

    mean: float
    std: float
    count: int

    def z(self, distance: float) -> float | None:
        """Standard score of a hit at cosine `distance` (None when the spread is flat or
        not a number: a NaN vector must not decide anything)."""
        if not (math.isfinite(self.std) and math.isfinite(self.mean)) or self.std <= 0:
            return None
        z = (1.0 - distance - self.mean) / self.std
        return z if math.isfinite(z) else None

    def excess(self, distance: float) -> float | None:
        """How far the best hit stands out beyond chance: its standard score minus
        sqrt(2 ln n), where the best of n unrelated similarities is expected to lie, so the
        same cut-off holds for a store of 1,000 chunks and one of 20,000."""
        z = self.z(distance)
        if z is None or self.count < 2:
            return None
        return z - math.sqrt(2.0 * math.log(self.count))


@dataclass
class VectorMatches:
    """Nearest ids with cosine distances, best first, and the similarity spread (None
    when Chroma's HNSW answered: it scores only the candidates it visits)."""

    hits: list[tuple[str, float]] = field(default_factory=list)
    spread: Spread | None = None


class ExactVectors:
    """Unit vectors of every chunk with their ids and sources; cosine distances like Chroma's."""

    def __init__(self, dimension: int, capacity: int = 1024) -> None:
        self.dimension = dimension
        self._lock = threading.Lock()
        self._matrix = np.zeros((max(capacity, 16), dimension), dtype=np.float32)
        self._codes = np.zeros(max(capacity, 16), dtype=np.int32)
        self._ids: list[str] = []
        self._row: dict[str, int] = {}
        self._source_code: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._row

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._ids)

    def ids_of_source(self, source: str) -> set[str]:
        with self._lock:
            code = self._source_code.get(source)
            if code is None:
                return set()
            rows = np.flatnonzero(self._codes[: len(self._ids)] == code)
            return {self._ids[r] for r in rows}

    def upsert(
        self, ids: Sequence[str], vectors: Iterable[Sequence[float]], sources: Sequence[str]
    ) -> None:
        """Add or replace rows (vectors are normalised here, as Chroma's cosine space does)."""
        if not ids:
            return
        block = np.asarray(list(vectors), dtype=np.float32).reshape(len(ids), -1)
        if block.shape[1] != self.dimension:
            raise ValueError(f"vectors of {block.shape[1]} dims, the store holds {self.dimension}")
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        block = block / np.where(norms > 0, norms, 1.0)
        with self._lock:
            for chunk_id, vec, source in zip(ids, block, sources, strict=True):
                row = self._row.get(chunk_id)
                if row is None:
                    row = len(self._ids)
                    self._grow(row + 1)
                    self._ids.append(chunk_id)
                    self._row[chunk_id] = row
                self._matrix[row] = vec
                self._codes[row] = self._source_code.setdefault(source, len(self._source_code))

    def delete(self, ids: Iterable[str]) -> None:
        """Remove rows (the last row moves into each hole: no gaps, no copies)."""
        with self._lock:
            for chunk_id in ids:
                row = self._row.pop(chunk_id, None)
                if row is None:
                    continue
                last = len(self._ids) - 1
                if row != last:
                    moved = self._ids[last]
                    self._matrix[row] = self._matrix[last]
                    self._codes[row] = self._codes[last]
                    self._ids[row] = moved
                    self._row[moved] = row
                self._ids.pop()

    def search(
        self, vector: Sequence[float], top_k: int, sources: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """The `top_k` nearest ids with cosine distances, best first; ties by id."""
        return self.query(vector, top_k, sources).hits

    def query(
        self, vector: Sequence[float], top_k: int, sources: Sequence[str] | None = None
    ) -> VectorMatches:
        """`search` plus the spread of the similarity over every chunk searched."""
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if norm > 0:
            query = query / norm
        with self._lock:
            n = len(self._ids)
            if n == 0 or top_k <= 0:
                return VectorMatches()
            scores = self._matrix[:n] @ query
            searched = scores
            if sources is not None:
                codes = [self._source_code[s] for s in sources if s in self._source_code]
                inside = np.isin(self._codes[:n], codes)
                searched = scores[inside]
                scores[~inside] = -np.inf
            spread = None
            if len(searched):
                spread = Spread(
                    float(searched.mean(dtype=np.float64)),
                    float(searched.std(dtype=np.float64)),
                    len(searched),
                )
            want = min(top_k + _MARGIN, n)
            rows = np.argpartition(-scores, want - 1)[:want] if want < n else np.arange(n)
            rows = rows[np.isfinite(scores[rows])]
            exact = self._matrix[rows].astype(np.float64) @ query.astype(np.float64)
            found = [(self._ids[r], 1.0 - float(s)) for r, s in zip(rows, exact, strict=True)]
        found.sort(key=lambda hit: (round(hit[1], 9), hit[0]))
        return VectorMatches(found[:top_k], spread)

    def _grow(self, size: int) -> None:
        if size <= len(self._matrix):
            return
        capacity = max(size, len(self._matrix) * 2)
        matrix = np.zeros((capacity, self.dimension), dtype=np.float32)
        matrix[: len(self._ids)] = self._matrix[: len(self._ids)]
        codes = np.zeros(capacity, dtype=np.int32)
        codes[: len(self._ids)] = self._codes[: len(self._ids)]
        self._matrix, self._codes = matrix, codes
