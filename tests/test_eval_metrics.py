"""Retrieval metrics, checked against numbers computed by hand."""

from __future__ import annotations

import math

import pytest

from eval.metrics import (
    METRIC_NAMES,
    QueryMetrics,
    aggregate,
    hit_rate,
    mrr,
    ndcg_at_k,
    precision_recall_f1,
    recall_at_k,
    score_query,
    unique_sources,
)

LOG2_3 = math.log2(3)


def test_unique_sources_keeps_first_occurrence_order() -> None:
    assert unique_sources(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_precision_recall_f1_hand_computed() -> None:
    # retrieved [a, x, b, a, y] -> unique [a, x, b, y]; expected {a, b, c}
    # hits 2: precision 2/4 = 0.5, recall 2/3, F1 = 2 * 0.5 * (2/3) / (0.5 + 2/3) = 4/7
    result = precision_recall_f1(["a", "x", "b", "a", "y"], ["a", "b", "c"])
    assert result.precision == pytest.approx(0.5)
    assert result.recall == pytest.approx(2 / 3)
    assert result.f1 == pytest.approx(4 / 7)
    assert (result.true_positives, result.false_positives, result.false_negatives) == (2, 2, 1)


def test_duplicate_chunks_of_one_source_count_once() -> None:
    # three chunks of page a: one retrieved page, one hit -> precision 1.0, not 3/3 of chunks
    result = precision_recall_f1(["a", "a", "a"], ["a"])
    assert (result.precision, result.recall, result.f1) == (1.0, 1.0, 1.0)
    assert result.false_positives == 0
    # [a, a, b] with only b relevant: unique ranks are a=1, b=2, so RR is 1/2, not 1/3
    assert mrr(["a", "a", "b"], ["b"]) == pytest.approx(0.5)
    assert ndcg_at_k(["a", "a", "b"], ["b"], k=2) == pytest.approx(1 / LOG2_3)


def test_perfect_ranking_scores_one_everywhere() -> None:
    retrieved = ["a", "b", "c"]
    expected = ["c", "b", "a"]
    pr = precision_recall_f1(retrieved, expected)
    assert (pr.precision, pr.recall, pr.f1) == (1.0, 1.0, 1.0)
    assert ndcg_at_k(retrieved, expected) == pytest.approx(1.0)
    assert ndcg_at_k(retrieved, expected, k=2) == pytest.approx(1.0)
    assert mrr(retrieved, expected) == 1.0
    assert hit_rate(retrieved, expected, 1) == 1.0
    assert recall_at_k(retrieved, expected, 3) == 1.0


def test_ndcg_hand_computed() -> None:
    # unique [a, x, b, y], expected {a, b, c}
    # DCG = 1/log2(2) + 1/log2(4) = 1 + 0.5 = 1.5
    # ideal over min(all, 3) = 3 ranks: 1 + 1/log2(3) + 0.5 = 2.13093
    # nDCG = 1.5 / 2.13093 = 0.70392
    retrieved = ["a", "x", "b", "a", "y"]
    assert ndcg_at_k(retrieved, ["a", "b", "c"]) == pytest.approx(0.70392, abs=1e-5)
    # @2: top [a, x]: DCG = 1; ideal over min(2, 3) = 2 ranks: 1 + 0.63093 -> 0.61315
    assert ndcg_at_k(retrieved, ["a", "b", "c"], k=2) == pytest.approx(0.61315, abs=1e-5)


def test_ndcg_relevant_item_lower_scores_less() -> None:
    # one relevant item at rank 1, 2, 3: 1, 1/log2(3) = 0.63093, 1/log2(4) = 0.5
    assert ndcg_at_k(["b", "x", "y"], ["b"]) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "b", "y"], ["b"]) == pytest.approx(0.63093, abs=1e-5)
    assert ndcg_at_k(["x", "y", "b"], ["b"]) == pytest.approx(0.5)


def test_k_larger_than_the_list_uses_the_whole_list() -> None:
    # unique [a, x]; expected {a, b}; k = 10
    # DCG = 1; ideal over min(10, 2) = 2 ranks: 1 + 0.63093 -> nDCG 0.61315
    retrieved = ["a", "x", "a"]
    assert ndcg_at_k(retrieved, ["a", "b"], k=10) == pytest.approx(0.61315, abs=1e-5)
    assert hit_rate(retrieved, ["b", "x"], k=10) == 1.0
    assert recall_at_k(retrieved, ["a", "b"], k=10) == pytest.approx(0.5)
    assert mrr(retrieved, ["x"], k=10) == pytest.approx(0.5)


def test_k_cuts_after_deduplication() -> None:
    # [a, a, a, b]: the unique list is [a, b], so b is inside the top 2
    assert hit_rate(["a", "a", "a", "b"], ["b"], k=2) == 1.0
    assert hit_rate(["a", "c", "a", "b"], ["b"], k=2) == 0.0
    assert recall_at_k(["a", "c", "b", "d"], ["b", "d"], k=3) == pytest.approx(0.5)


def test_mrr_values() -> None:
    assert mrr(["a", "b", "c"], ["a"]) == 1.0
    assert mrr(["x", "a", "c"], ["a"]) == pytest.approx(0.5)
    assert mrr(["x", "y", "a"], ["a", "y"]) == pytest.approx(0.5)
    assert mrr(["x", "y", "a"], ["a"]) == pytest.approx(1 / 3)
    assert mrr(["x", "y", "a"], ["a"], k=2) == 0.0


def test_no_relevant_item_retrieved_scores_zero() -> None:
    retrieved = ["x", "y", "z"]
    expected = ["a"]
    pr = precision_recall_f1(retrieved, expected)
    assert (pr.precision, pr.recall, pr.f1) == (0.0, 0.0, 0.0)
    assert ndcg_at_k(retrieved, expected) == 0.0
    assert mrr(retrieved, expected) == 0.0
    assert hit_rate(retrieved, expected, 3) == 0.0


def test_no_expected_sources_convention() -> None:
    # nothing is relevant: every metric is 0.0 and score_query marks it unanswerable
    for retrieved in (["x", "y"], []):
        pr = precision_recall_f1(retrieved, [])
        assert (pr.precision, pr.recall, pr.f1) == (0.0, 0.0, 0.0)
        assert ndcg_at_k(retrieved, []) == 0.0
        assert mrr(retrieved, []) == 0.0
        assert recall_at_k(retrieved, [], 3) == 0.0
    assert precision_recall_f1(["x"], []).false_positives == 1
    assert score_query(["x"], [], k=3).answerable is False


def test_empty_retrieved_scores_zero() -> None:
    pr = precision_recall_f1([], ["a"])
    assert (pr.precision, pr.recall, pr.f1) == (0.0, 0.0, 0.0)
    assert pr.false_negatives == 1
    assert ndcg_at_k([], ["a"], k=5) == 0.0
    assert mrr([], ["a"]) == 0.0
    assert hit_rate([], ["a"], 5) == 0.0


def test_k_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ndcg_at_k(["a"], ["a"], k=0)
    with pytest.raises(ValueError, match="at least 1"):
        hit_rate(["a"], ["a"], k=-1)


def test_score_query_applies_k_to_precision_and_recall() -> None:
    # unique [a, x, y, b], expected {a, b}, k = 2: top [a, x]
    # precision 1/2, recall 1/2, F1 1/2, nDCG = 1 / (1 + 1/log2(3)) = 0.61315, RR 1, hit 1
    m = score_query(["a", "x", "y", "b"], ["a", "b"], k=2)
    assert (m.precision, m.recall, m.f1) == pytest.approx((0.5, 0.5, 0.5))
    assert m.ndcg == pytest.approx(0.61315, abs=1e-5)
    assert (m.mrr, m.hit_rate, m.answerable) == (1.0, 1.0, True)


def test_aggregate_means_over_answerable_queries_only() -> None:
    first = QueryMetrics(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    second = QueryMetrics(0.5, 0.0, 0.0, 0.25, 0.5, 0.0)
    unanswerable = QueryMetrics(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, answerable=False)
    means = aggregate([first, unanswerable, second])
    assert list(means) == list(METRIC_NAMES)
    assert means == pytest.approx(
        {"precision": 0.75, "recall": 0.5, "f1": 0.5, "ndcg": 0.625, "mrr": 0.75, "hit_rate": 0.5}
    )


def test_aggregate_of_nothing_is_zeros() -> None:
    assert aggregate([]) == dict.fromkeys(METRIC_NAMES, 0.0)
    assert aggregate([QueryMetrics(0, 0, 0, 0, 0, 0, answerable=False)])["f1"] == 0.0
