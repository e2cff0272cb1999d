"""Retrieval metrics over ranked lists of source ids (URLs, paths or passage ids).

All functions are pure. The retrieved list is ranked best first and is de-duplicated
before scoring, keeping each source's first occurrence: several chunks of one page count
as one retrieved page at the rank of its best chunk. Cut-offs (`k`) apply to that
de-duplicated list, and a `k` larger than the list simply uses the whole list.

Conventions for the edge cases:

- A query with no expected sources has no relevant item, so every metric is 0.0 for it;
  `aggregate` leaves such queries out of the means (they would only drag every
  configuration down by the same amount) and they are judged separately by whether
  retrieval returned nothing (`QueryMetrics.answerable` is False for them).
- An empty retrieved list scores 0.0 everywhere.
- Binary relevance: a source is relevant when it is one of the expected sources.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

METRIC_NAMES: tuple[str, ...] = ("precision", "recall", "f1", "ndcg", "mrr", "hit_rate")
"""Per-query metric names, in report order; `aggregate` returns their means."""


@dataclass(frozen=True)
class PrecisionRecall:
    """Set-based precision, recall and their harmonic mean (F1) for one query."""

    precision: float
    recall: float
    f1: float
    true_positives: int
    false_positives: int
    false_negatives: int


@dataclass(frozen=True)
class QueryMetrics:
    """Every metric for one query; `answerable` is False when nothing was expected."""

    precision: float
    recall: float
    f1: float
    ndcg: float
    mrr: float
    hit_rate: float
    answerable: bool = True

    def as_dict(self) -> dict[str, float]:
        """The metric values by name (without the `answerable` flag)."""
        values = asdict(self)
        return {name: float(values[name]) for name in METRIC_NAMES}


def unique_sources(retrieved: Iterable[str]) -> list[str]:
    """The retrieved sources without repeats, keeping the first (best) occurrence."""
    return list(dict.fromkeys(retrieved))


def _cut(retrieved: Sequence[str], k: int | None) -> list[str]:
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    ranked = unique_sources(retrieved)
    return ranked if k is None else ranked[:k]


def precision_recall_f1(retrieved: Sequence[str], expected: Iterable[str]) -> PrecisionRecall:
    """Precision = hits / unique retrieved, recall = hits / expected, F1 their harmonic mean."""
    ranked = unique_sources(retrieved)
    relevant = set(expected)
    hits = sum(1 for source in ranked if source in relevant)
    precision = hits / len(ranked) if ranked else 0.0
    recall = hits / len(relevant) if relevant else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return PrecisionRecall(
        precision=precision,
        recall=recall,
        f1=f1,
        true_positives=hits,
        false_positives=len(ranked) - hits,
        false_negatives=len(relevant) - hits,
    )


def ndcg_at_k(retrieved: Sequence[str], expected: Iterable[str], k: int | None = None) -> float:
    """Normalised DCG with binary relevance and a log2 discount (rank 1 counts fully).

    DCG sums 1 / log2(rank + 1) over relevant sources in the top k; the ideal DCG puts
    all relevant sources first, over min(k, |expected|) ranks. `k=None` means all ranks.
    """
    ranked = _cut(retrieved, k)
    relevant = set(expected)
    if not relevant or not ranked:
        return 0.0
    dcg = sum(1.0 / math.log2(rank + 1) for rank, s in enumerate(ranked, 1) if s in relevant)
    ideal_ranks = len(relevant) if k is None else min(k, len(relevant))
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, ideal_ranks + 1))
    return dcg / ideal


def mrr(retrieved: Sequence[str], expected: Iterable[str], k: int | None = None) -> float:
    """Reciprocal rank of the first relevant source (1.0 at rank 1, 0.5 at 2, 0.0 if none)."""
    relevant = set(expected)
    for rank, source in enumerate(_cut(retrieved, k), 1):
        if source in relevant:
            return 1.0 / rank
    return 0.0


def hit_rate(retrieved: Sequence[str], expected: Iterable[str], k: int) -> float:
    """1.0 when at least one relevant source is in the top k, else 0.0."""
    relevant = set(expected)
    return 1.0 if any(source in relevant for source in _cut(retrieved, k)) else 0.0


def recall_at_k(retrieved: Sequence[str], expected: Iterable[str], k: int) -> float:
    """Share of the expected sources found in the top k."""
    relevant = set(expected)
    if not relevant:
        return 0.0
    return sum(1 for source in _cut(retrieved, k) if source in relevant) / len(relevant)


def score_query(retrieved: Sequence[str], expected: Sequence[str], k: int) -> QueryMetrics:
    """All metrics for one query; precision/recall/F1 use the top k like nDCG and MRR."""
    top = _cut(retrieved, k)
    pr = precision_recall_f1(top, expected)
    return QueryMetrics(
        precision=pr.precision,
        recall=pr.recall,
        f1=pr.f1,
        ndcg=ndcg_at_k(top, expected, k),
        mrr=mrr(top, expected),
        hit_rate=hit_rate(top, expected, k),
        answerable=bool(expected),
    )


def aggregate(per_query: Iterable[QueryMetrics]) -> dict[str, float]:
    """Mean of each metric over the answerable queries (all zeros when there are none)."""
    answerable = [m for m in per_query if m.answerable]
    if not answerable:
        return dict.fromkeys(METRIC_NAMES, 0.0)
    return {
        name: sum(m.as_dict()[name] for m in answerable) / len(answerable) for name in METRIC_NAMES
    }
