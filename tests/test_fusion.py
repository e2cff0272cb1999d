"""Fusion maths of spec 000: min–max + convex combination, thresholds, edge cases."""

from __future__ import annotations

import pytest

from rag_app.index.fusion import (
    convex_combination,
    dbsf_normalize,
    distance_to_similarity,
    fetch_count,
    fuse,
    margins,
    min_max_normalize,
    normalize_map,
    z_normalize,
)


def test_fetch_count_has_a_floor_of_30() -> None:
    assert fetch_count(1) == 30
    assert fetch_count(10) == 30
    assert fetch_count(11) == 33


def test_min_max_basic_and_edge_cases() -> None:
    assert min_max_normalize([]) == []
    assert min_max_normalize([5.0]) == [1.0]
    assert min_max_normalize([2.0, 2.0, 2.0]) == [1.0, 1.0, 1.0]
    assert min_max_normalize([1.0, 3.0, 2.0]) == [0.0, 1.0, 0.5]


def test_convex_combination_missing_side_scores_zero() -> None:
    combined = convex_combination({"a": 1.0, "b": 0.0}, {"b": 1.0, "c": 0.5}, 0.75)
    assert combined["a"] == pytest.approx(0.75)
    assert combined["b"] == pytest.approx(0.25)
    assert combined["c"] == pytest.approx(0.125)


@pytest.mark.parametrize("weight", [-0.1, 1.1])
def test_convex_combination_rejects_weight_outside_unit_interval(weight: float) -> None:
    with pytest.raises(ValueError, match="vector_weight"):
        convex_combination({"a": 1.0}, {}, weight)


VEC = {"a": 0.10, "b": 0.30, "c": 0.50}  # cosine distances: a best
BM = {"c": 12.0, "d": 6.0, "a": 3.0}  # raw BM25: c best


def test_alpha_one_is_vector_order() -> None:
    ids = [f.node_id for f in fuse(VEC, BM, vector_weight=1.0, n_results=3)]
    assert ids == ["a", "b", "c"]


def test_alpha_zero_is_bm25_order() -> None:
    ids = [f.node_id for f in fuse(VEC, BM, vector_weight=0.0, n_results=3)]
    assert ids == ["c", "d", "a"]


def test_fused_scores_and_raw_values_are_carried() -> None:
    fused = {f.node_id: f for f in fuse(VEC, BM, vector_weight=0.5, n_results=10)}
    # vector sim: a=.9 b=.7 c=.5 -> norm a=1 b=.5 c=0 ; bm25 norm c=1 d=(6-3)/9 a=0
    assert fused["a"].combined_score == pytest.approx(0.5)
    assert fused["b"].combined_score == pytest.approx(0.25)
    assert fused["c"].combined_score == pytest.approx(0.5)
    assert fused["d"].combined_score == pytest.approx(0.5 * (3 / 9))
    assert fused["d"].vector_distance is None and fused["d"].bm25_score == 6.0
    assert fused["b"].bm25_score is None and fused["b"].vector_distance == 0.30


def test_one_side_empty_caps_scores_at_its_weight() -> None:
    only_vec = fuse(VEC, {}, vector_weight=0.9, n_results=3)
    assert [f.node_id for f in only_vec] == ["a", "b", "c"]
    assert max(f.combined_score for f in only_vec) == pytest.approx(0.9)
    only_bm = fuse({}, BM, vector_weight=0.9, n_results=3)
    assert max(f.combined_score for f in only_bm) == pytest.approx(0.1)


def test_both_sides_empty() -> None:
    assert fuse({}, {}, vector_weight=0.5, n_results=3) == []


def test_single_candidate_per_side_normalises_to_one() -> None:
    fused = fuse({"a": 0.8}, {"a": 2.0}, vector_weight=0.3, n_results=3)
    assert fused[0].combined_score == pytest.approx(1.0)


def test_similarity_threshold_drops_far_vector_hits_but_keeps_bm25() -> None:
    fused = fuse(VEC, BM, vector_weight=0.5, n_results=10, similarity_threshold=0.2)
    ids = {f.node_id for f in fused}
    assert "b" not in ids  # only found by vector, too far
    assert {"a", "c", "d"} <= ids  # c and d still come from BM25
    c = next(f for f in fused if f.node_id == "c")
    assert c.vector_distance is None


def test_min_combined_score_filters() -> None:
    fused = fuse(VEC, BM, vector_weight=0.5, n_results=10, min_combined_score=0.4)
    assert {f.node_id for f in fused} == {"a", "c"}


def test_n_results_truncates_and_inputs_are_not_mutated() -> None:
    vec, bm = dict(VEC), dict(BM)
    fused = fuse(vec, bm, vector_weight=0.5, n_results=2)
    assert len(fused) == 2
    assert vec == VEC and bm == BM


def test_normalize_map_keeps_keys() -> None:
    assert normalize_map({"x": 1.0, "y": 3.0}) == {"x": 0.0, "y": 1.0}


def test_a_tie_between_the_two_tops_is_decided_by_evidence() -> None:
    # "v" tops the vector list only, "k" tops BM25 only: both fuse to exactly 0.5.
    vec = {"v": 0.10, "x": 0.20, "y": 0.30}
    bm = {"k": 9.0, "x": 2.0, "y": 1.0}
    plain = convex_combination(
        normalize_map(distance_to_similarity(vec)), normalize_map(bm), vector_weight=0.5
    )
    assert plain["v"] == plain["k"] == pytest.approx(0.5)

    # k stands 7/8 of BM25's range above the next candidate; v only half the vector range
    fused = fuse(vec, bm, vector_weight=0.5, n_results=2)
    assert [f.node_id for f in fused] == ["k", "v"]
    assert fused[0].vector_distance is None  # reported scores stay what the lists said
    apart = {"v": 0.1, "w": 0.2, "z": 0.3}
    close = {"k": 2.1, "m": 2.0, "n": 0.1}
    assert [f.node_id for f in fuse(apart, close, vector_weight=0.5, n_results=2)] == [
        "v",
        "k",
    ]  # a BM25 top barely above its runner-up loses to a clear vector top


def test_equal_margins_keep_the_vector_order() -> None:
    vec = {"v": 0.10, "w": 0.20, "z": 0.30}
    bm = {"k": 3.0, "m": 2.0, "n": 1.0}  # margins: v 0.1/0.2, k 1/2 — equal
    fused = fuse(vec, bm, vector_weight=0.5, n_results=2)
    assert [f.node_id for f in fused] == ["v", "k"]


def test_margins_and_alternative_normalisations() -> None:
    assert margins({"a": 10.0, "b": 6.0, "c": 2.0}) == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert z_normalize([1.0, 2.0, 3.0]) == pytest.approx([0.0, 1.2247, 2.4495], abs=1e-4)
    assert dbsf_normalize([1.0, 2.0, 3.0]) == pytest.approx([0.2959, 0.5, 0.7041], abs=1e-4)
    assert z_normalize([4.0, 4.0]) == dbsf_normalize([4.0, 4.0]) == [1.0, 1.0]
    fused = fuse(VEC, BM, vector_weight=0.5, n_results=4, normalization="z-score")
    assert {f.node_id for f in fused} == {"a", "b", "c", "d"}
