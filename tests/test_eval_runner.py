"""The evaluation runner with a fake retrieve function (a pure orchestrator)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from eval.data import QUESTIONS, data_path
from eval.datasets import EvalQuery, load_spec_dataset
from eval.report import EvaluationConfig
from eval.runner import evaluate_queries
from rag_app.errors import EmptyQueryError


class FakeRetriever:
    """Returns canned source lists and records what it was asked."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, query: str, n_results: int) -> Sequence[str]:
        self.calls.append((query, n_results))
        return self.answers.get(query, [])[:n_results]


async def test_runner_scores_unique_sources_per_query() -> None:
    queries = [
        EvalQuery("q1", "りゅうおう", ["stats"], category="table"),
        EvalQuery("q2", "スライム", ["stats", "items"], negative_sources=["curry"]),
        EvalQuery("q3", "量子", [], category="no_answer"),
    ]
    fake = FakeRetriever(
        {
            # three chunks of one page: one unique source, a perfect answer
            "りゅうおう": ["stats", "stats", "stats"],
            # unique [curry, stats]; top 2: P 1/2, R 1/2, RR 1/2, negative hit
            "スライム": ["curry", "stats", "stats", "items"],
            "量子": [],
        }
    )
    progress: list[tuple[int, int]] = []
    report = await evaluate_queries(
        fake,
        queries,
        n_results=4,
        k=2,
        config=EvaluationConfig(dataset="inline", n_results=0, k=0, vector_weight=0.5),
        progress=lambda done, total: progress.append((done, total)),
    )
    assert fake.calls == [("りゅうおう", 4), ("スライム", 4), ("量子", 4)]
    assert progress == [(1, 3), (2, 3), (3, 3)]
    assert (report.config.n_results, report.config.k, report.config.vector_weight) == (4, 2, 0.5)
    q1, q2, q3 = report.queries
    assert q1.retrieved_sources == ["stats"]
    assert (q1.metrics.precision, q1.metrics.f1, q1.metrics.mrr) == (1.0, 1.0, 1.0)
    assert q2.retrieved_sources == ["curry", "stats", "items"]
    assert (q2.metrics.precision, q2.metrics.recall, q2.metrics.mrr) == (0.5, 0.5, 0.5)
    assert q2.negative_hits == ["curry"]
    assert q3.metrics.answerable is False
    assert report.no_answer_empty_rate == 1.0
    assert report.metrics["mrr"] == pytest.approx(0.75)
    assert report.negative_source_violations == ["q2"]
    assert all(q.latency_ms is not None and q.latency_ms >= 0 for q in report.queries)


async def test_runner_defaults_k_to_n_results() -> None:
    fake = FakeRetriever({"q": ["x", "y", "z", "a"]})
    report = await evaluate_queries(fake, [EvalQuery("1", "q", ["a"])], n_results=3)
    assert report.config.k == 3
    assert report.queries[0].metrics.hit_rate == 0.0  # "a" would be fourth


async def test_runner_over_the_fixture_dataset_with_an_oracle() -> None:
    queries = load_spec_dataset(data_path(QUESTIONS))
    oracle = FakeRetriever({q.query: q.expected_sources for q in queries})
    report = await evaluate_queries(oracle, queries, n_results=5)
    assert report.metrics["f1"] == 1.0
    assert report.metrics["ndcg"] == 1.0
    assert report.no_answer_empty_rate == 1.0


async def test_runner_propagates_retrieval_errors() -> None:
    async def failing(query: str, n_results: int) -> list[str]:
        raise EmptyQueryError("The query is empty; type a question.")

    with pytest.raises(EmptyQueryError):
        await evaluate_queries(failing, [EvalQuery("1", "q", ["a"])])


@pytest.mark.parametrize(("n_results", "k"), [(0, None), (3, 0)])
async def test_runner_refuses_bad_cutoffs(n_results: int, k: int | None) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        await evaluate_queries(FakeRetriever({}), [EvalQuery("1", "q", [])], n_results, k)


async def test_runner_refuses_no_queries() -> None:
    with pytest.raises(ValueError, match="no queries"):
        await evaluate_queries(FakeRetriever({}), [])
