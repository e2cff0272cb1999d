"""Score fusion maths (spec 000): min–max normalisation + convex combination.

Pure functions over plain dicts so they are easy to test and reuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def fetch_count(n_results: int) -> int:
    """Candidates to fetch per side: enough for a stable min–max."""
    return max(3 * n_results, 30)


def min_max_normalize(scores: Sequence[float]) -> list[float]:
    """Scale to 0..1; all-equal scores become 1.0, an empty list stays empty."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi == lo:
        return [1.0] * len(scores)
    span = hi - lo
    return [(s - lo) / span for s in scores]


def normalize_map(scores: Mapping[str, float]) -> dict[str, float]:
    """`min_max_normalize` keyed by id (higher input = better)."""
    keys = list(scores)
    return dict(zip(keys, min_max_normalize([scores[k] for k in keys]), strict=True))


def distance_to_similarity(distances: Mapping[str, float]) -> dict[str, float]:
    """Cosine distance (0 best, 2 worst) → similarity (higher better)."""
    return {k: 1.0 - d for k, d in distances.items()}


def convex_combination(
    norm_vector: Mapping[str, float],
    norm_bm25: Mapping[str, float],
    vector_weight: float,
) -> dict[str, float]:
    """`alpha * vector + (1 - alpha) * bm25`; a side that missed a document scores 0."""
    if not 0.0 <= vector_weight <= 1.0:
        raise ValueError(f"vector_weight must be within 0..1, got {vector_weight}")
    ids = list(dict.fromkeys([*norm_vector, *norm_bm25]))
    alpha = vector_weight
    return {i: alpha * norm_vector.get(i, 0.0) + (1.0 - alpha) * norm_bm25.get(i, 0.0) for i in ids}


@dataclass(frozen=True)
class FusedScore:
    """One fused candidate with the raw scores it came from."""

    node_id: str
    combined_score: float
    vector_distance: float | None
    bm25_score: float | None


def fuse(
    vector_distances: Mapping[str, float],
    bm25_scores: Mapping[str, float],
    *,
    vector_weight: float,
    n_results: int,
    similarity_threshold: float | None = None,
    min_combined_score: float | None = None,
) -> list[FusedScore]:
    """Fuse raw vector distances and BM25 scores into the top `n_results`.

    The distance threshold drops vector candidates before normalisation (a
    document found only by BM25 still competes with its BM25 share).
    """
    if similarity_threshold is not None:
        vector_distances = {k: d for k, d in vector_distances.items() if d <= similarity_threshold}
    norm_v = normalize_map(distance_to_similarity(vector_distances))
    norm_b = normalize_map({k: s for k, s in bm25_scores.items()})
    combined = convex_combination(norm_v, norm_b, vector_weight)
    if min_combined_score is not None:
        combined = {k: s for k, s in combined.items() if s >= min_combined_score}
    ranked = sorted(
        combined.items(),
        key=lambda kv: (-kv[1], vector_distances.get(kv[0], 3.0), -bm25_scores.get(kv[0], 0.0)),
    )
    return [
        FusedScore(
            node_id=k,
            combined_score=s,
            vector_distance=vector_distances.get(k),
            bm25_score=bm25_scores.get(k),
        )
        for k, s in ranked[:n_results]
    ]
