"""Score fusion maths (spec 000): min–max normalisation + convex combination.

Pure functions over plain dicts so they are easy to test and reuse. Two alternative
normalisations are kept for comparison (`RAG_FUSION_NORMALIZATION`; measured in
docs/evaluation.md): z-score (`(x − min) / σ`, so a side's spread, not its range, sets
the scale) and distribution-based score fusion (DBSF: `μ ± 3σ` mapped to 0..1, clipped).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TIE = 1e-9
"""Fused scores closer than this are a tie, decided by evidence (`break_ties`)."""


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


NORMALIZATIONS: tuple[str, ...] = ("min-max", "z-score", "dbsf")


def z_normalize(scores: Sequence[float]) -> list[float]:
    """`(x − min) / σ`: 0 for the last candidate like min–max, scaled by the spread."""
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    sigma = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
    if sigma == 0:
        return [1.0] * len(scores)
    lo = min(scores)
    return [(s - lo) / sigma for s in scores]


def dbsf_normalize(scores: Sequence[float]) -> list[float]:
    """Distribution-based: `μ − 3σ` → 0, `μ + 3σ` → 1, clipped to 0..1."""
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    sigma = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
    if sigma == 0:
        return [1.0] * len(scores)
    lo = mean - 3 * sigma
    return [min(1.0, max(0.0, (s - lo) / (6 * sigma))) for s in scores]


_NORMALIZE = {"min-max": min_max_normalize, "z-score": z_normalize, "dbsf": dbsf_normalize}


def normalize_map(scores: Mapping[str, float], method: str = "min-max") -> dict[str, float]:
    """Normalised scores keyed by id (higher input = better)."""
    keys = list(scores)
    values = _NORMALIZE[method]([scores[k] for k in keys])
    return dict(zip(keys, values, strict=True))


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


def _span(values: Sequence[float]) -> tuple[float, float]:
    """(low, span) of a candidate list for extrapolated min–max; span 1 when flat."""
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    return lo, (hi - lo) or 1.0


def margins(scores: Mapping[str, float]) -> dict[str, float]:
    """Per listed id (higher score = better): how far its min–max value stands above the
    next lower value in the same list (0 for the last)."""
    _, span = _span(list(scores.values()))
    ordered = sorted(scores.items(), key=lambda kv: -kv[1])
    out: dict[str, float] = {}
    for k, (node_id, value) in enumerate(ordered):
        below = ordered[k + 1][1] if k + 1 < len(ordered) else value
        out[node_id] = (value - below) / span
    return out


def break_ties(
    ranked: list[tuple[str, float]],
    vector_distances: Mapping[str, float],
    bm25_scores: Mapping[str, float],
    vector_weight: float,
    limit: int,
) -> list[tuple[str, float]]:
    """Reorder tied fused scores by evidence instead of list order.

    With min–max, the vector top that BM25 never listed and the BM25 top that the vector
    side never listed both fuse to exactly α·1 = (1−α)·1. The evidence that decides is
    how clearly each stood out in its own list — its margin over the next candidate,
    weighted like the fusion: an exact name or number that BM25 ranks far above everything
    else beats a vector top that is barely closer than its neighbours (and the reverse).
    Equal margins keep the previous order (vector distance, then BM25 score).
    """
    groups: list[list[tuple[str, float]]] = []
    for item in ranked:
        if groups and abs(groups[-1][0][1] - item[1]) <= TIE:
            groups[-1].append(item)
        elif sum(map(len, groups)) >= limit:
            break
        else:
            groups.append([item])
    if all(len(g) == 1 for g in groups):
        return ranked
    alpha = vector_weight
    m_vec = margins({k: 1.0 - d for k, d in vector_distances.items()})
    m_bm = margins(dict(bm25_scores))

    def margin(node_id: str) -> float:
        return round(alpha * m_vec.get(node_id, 0.0) + (1 - alpha) * m_bm.get(node_id, 0.0), 9)

    out: list[tuple[str, float]] = []
    for group in groups:  # sorted() is stable: equal margins keep their order
        out.extend(sorted(group, key=lambda kv: -margin(kv[0])) if len(group) > 1 else group)
    done = {i for i, _ in out}
    out.extend(kv for kv in ranked if kv[0] not in done)
    return out


def fuse(
    vector_distances: Mapping[str, float],
    bm25_scores: Mapping[str, float],
    *,
    vector_weight: float,
    n_results: int,
    similarity_threshold: float | None = None,
    min_combined_score: float | None = None,
    normalization: str = "min-max",
) -> list[FusedScore]:
    """Fuse raw vector distances and BM25 scores into the top `n_results`.

    The distance threshold drops vector candidates before normalisation (a
    document found only by BM25 still competes with its BM25 share). Ties are decided by
    evidence (`break_ties`).
    """
    if similarity_threshold is not None:
        vector_distances = {k: d for k, d in vector_distances.items() if d <= similarity_threshold}
    norm_v = normalize_map(distance_to_similarity(vector_distances), normalization)
    norm_b = normalize_map(dict(bm25_scores), normalization)
    combined = convex_combination(norm_v, norm_b, vector_weight)
    if min_combined_score is not None:
        combined = {k: s for k, s in combined.items() if s >= min_combined_score}
    ranked = sorted(
        combined.items(),
        key=lambda kv: (-kv[1], vector_distances.get(kv[0], 3.0), -bm25_scores.get(kv[0], 0.0)),
    )
    ranked = break_ties(ranked, vector_distances, bm25_scores, vector_weight, n_results)
    return [
        FusedScore(
            node_id=k,
            combined_score=s,
            vector_distance=vector_distances.get(k),
            bm25_score=bm25_scores.get(k),
        )
        for k, s in ranked[:n_results]
    ]
