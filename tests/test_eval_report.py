"""Evaluation reports (JSON + Markdown) and baseline comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.baseline import (
    Baseline,
    BaselineError,
    compare,
    load_baseline,
    save_baseline,
)
from eval.metrics import QueryMetrics, score_query
from eval.report import EvaluationConfig, EvaluationReport, QueryResult
from rag_app.errors import RAGError

STATS = "https://example.com/docs/game/monster-stats"
ITEMS = "https://example.com/docs/game/items"
CURRY = "https://example.com/docs/food/curry-rice"


def _row(
    qid: str,
    retrieved: list[str],
    expected: list[str],
    category: str | None = "table",
    query: str = "りゅうおう",
    negative: list[str] | None = None,
) -> QueryResult:
    return QueryResult(
        id=qid,
        query=query,
        expected_sources=expected,
        retrieved_sources=retrieved,
        metrics=score_query(retrieved, expected, k=3),
        category=category,
        negative_hits=negative or [],
        latency_ms=12.5,
    )


def _config(**overrides: object) -> EvaluationConfig:
    values: dict[str, object] = {
        "dataset": "eval/data/rag_evaluation_dataset.json",
        "n_results": 3,
        "k": 3,
        "chunk_size": 200,
        "chunk_overlap": 30,
        "vector_weight": 0.9,
        "threshold": None,
    }
    values.update(overrides)
    return EvaluationConfig(**values)  # type: ignore[arg-type]


def _report(rows: list[QueryResult] | None = None, **config: object) -> EvaluationReport:
    rows = rows or [
        # perfect: P 1, R 1, F1 1, nDCG 1, RR 1
        _row("q1", [STATS], [STATS]),
        # unique [items, stats]: P 1/2, R 1, F1 2/3, nDCG 1/log2(3) = 0.63093, RR 1/2
        _row("q2", [ITEMS, STATS], [STATS], category="semantic", query="スライム | 攻撃力"),
        # nothing relevant exists
        _row("q3", [CURRY], [], category="no_answer", query="量子コンピュータ"),
    ]
    return EvaluationReport.build(_config(**config), rows, timestamp="2026-01-02T03:04:05+00:00")


def _with_metrics(f1: float, ndcg: float, mrr: float, **config: object) -> EvaluationReport:
    metrics = QueryMetrics(f1, f1, f1, ndcg, mrr, 1.0)
    row = QueryResult("q1", "りゅうおう", [STATS], [STATS], metrics, "table")
    return EvaluationReport.build(_config(**config), [row], timestamp="2026-01-01T00:00:00+00:00")


# --- the report -------------------------------------------------------------------------


def test_build_aggregates_answerable_queries() -> None:
    report = _report()
    # means over q1 and q2: F1 (1 + 2/3) / 2 = 0.83333, nDCG (1 + 0.63093) / 2 = 0.81546
    assert report.metrics["f1"] == pytest.approx(5 / 6)
    assert report.metrics["ndcg"] == pytest.approx(0.81546, abs=1e-5)
    assert report.metrics["mrr"] == pytest.approx(0.75)
    assert report.answerable_count == 2
    assert report.no_answer_empty_rate == 0.0
    assert set(report.by_category()) == {"table", "semantic"}


def test_json_round_trip() -> None:
    report = _report()
    report.config.extra["mode"] = "hybrid"
    report.queries[1].negative_hits = [ITEMS]
    restored = EvaluationReport.from_json(report.to_json())
    assert restored == report
    assert restored.queries[1].negative_hits == [ITEMS]
    report.queries[1].negative_hits = []
    data = json.loads(report.to_json())
    assert data["summary"] == {
        "queries": 3,
        "answerable": 2,
        "negative_source_violations": [],
        "no_answer_empty_rate": 0.0,
    }
    assert data["queries"][2]["answerable"] is False
    assert "りゅうおう" in report.to_json()  # not \u-escaped


@pytest.mark.parametrize("text", ["{", "[]", '{"config": {}}', '{"metrics": 1}'])
def test_from_json_rejects_other_shapes(text: str) -> None:
    with pytest.raises(ValueError):
        EvaluationReport.from_json(text)


def test_write_creates_json_and_markdown(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "eval"
    paths = _report().write(out)
    assert paths == [out / "report.json", out / "report.md"]
    assert EvaluationReport.from_json(paths[0].read_text(encoding="utf-8")) == _report()
    markdown = paths[1].read_text(encoding="utf-8")
    assert "| Metric | Value |" in markdown
    assert "| F1 | 0.8333 |" in markdown
    assert "| nDCG@3 | 0.8155 |" in markdown
    assert "| MRR | 0.7500 |" in markdown
    assert "Baseline comparison" not in markdown


def test_markdown_per_query_and_category_tables() -> None:
    markdown = _report().to_markdown()
    assert "chunk_size=200, chunk_overlap=30, vector_weight=0.9" in markdown
    assert "threshold=none" in markdown
    assert "| ID | Query | Expected | Retrieved | P | R | F1 | nDCG@3 | MRR |" in markdown
    # the pipe in the query is escaped; expected sources are bold among the retrieved
    assert (
        f"| q2 | スライム \\| 攻撃力 | {STATS} | {ITEMS}<br>**{STATS}** "
        "| 0.50 | 1.00 | 0.67 | 0.63 | 0.50 |"
    ) in markdown
    assert "| Category | Queries | Precision |" in markdown
    assert "| semantic | 1 | 0.5000 | 1.0000 | 0.6667 | 0.6309 | 0.5000 | 1.0000 |" in markdown
    assert "## Queries without a relevant document" in markdown
    assert f"| q3 | 量子コンピュータ | {CURRY} |" in markdown


def test_markdown_lists_negative_source_violations() -> None:
    rows = [_row("q1", [STATS, CURRY], [STATS], negative=[CURRY])]
    report = _report(rows)
    assert report.negative_source_violations == ["q1"]
    assert f"- q1: {CURRY}" in report.to_markdown()
    assert json.loads(report.to_json())["summary"]["negative_source_violations"] == ["q1"]


# --- baselines and regressions ----------------------------------------------------------


def test_regression_when_f1_drops_more_than_threshold(tmp_path: Path) -> None:
    baseline = Baseline.from_report(_with_metrics(0.80, 0.80, 0.80))
    result = compare(_with_metrics(0.65, 0.80, 0.80), baseline, threshold=0.1)
    assert result.regressed
    assert result.regressed_metrics == ["f1"]
    assert result.deltas["f1"] == pytest.approx(-0.15)
    assert "F1 dropped by 0.1500 (0.8000 → 0.6500)" in result.messages[0]


def test_no_regression_on_improvement_or_small_drop() -> None:
    baseline = Baseline.from_report(_with_metrics(0.80, 0.80, 0.80))
    better = compare(_with_metrics(0.95, 0.90, 0.85), baseline, threshold=0.1)
    assert not better.regressed
    assert better.deltas["f1"] == pytest.approx(0.15)
    assert better.messages[0].startswith("No regression (F1 +0.1500")
    slightly_worse = compare(_with_metrics(0.75, 0.75, 0.75), baseline, threshold=0.1)
    assert not slightly_worse.regressed


def test_a_drop_equal_to_the_threshold_is_not_a_regression() -> None:
    # 0.8 - 0.7 is 0.10000000000000009 in floating point: still "not larger than 0.1"
    baseline = Baseline.from_report(_with_metrics(0.8, 0.8, 0.8))
    assert not compare(_with_metrics(0.7, 0.7, 0.7), baseline, threshold=0.1).regressed
    assert compare(_with_metrics(0.69, 0.8, 0.8), baseline, threshold=0.1).regressed


@pytest.mark.parametrize(("ndcg", "mrr", "flagged"), [(0.5, 0.8, "ndcg"), (0.8, 0.5, "mrr")])
def test_ndcg_and_mrr_drops_are_regressions_too(ndcg: float, mrr: float, flagged: str) -> None:
    baseline = Baseline.from_report(_with_metrics(0.8, 0.8, 0.8))
    result = compare(_with_metrics(0.8, ndcg, mrr), baseline)
    assert result.regressed
    assert result.regressed_metrics == [flagged]


def test_negative_threshold_is_refused() -> None:
    report = _with_metrics(0.8, 0.8, 0.8)
    with pytest.raises(ValueError, match="threshold"):
        compare(report, Baseline.from_report(report), threshold=-0.1)


def test_config_difference_is_warned() -> None:
    baseline = Baseline.from_report(_with_metrics(0.8, 0.8, 0.8, n_results=5, k=5))
    result = compare(_with_metrics(0.8, 0.8, 0.8), baseline)
    assert not result.regressed
    assert any("n_results=5 but this run used n_results=3" in m for m in result.messages)
    unnamed = Baseline.from_report(_with_metrics(0.8, 0.8, 0.8, dataset=""))
    assert not any("may not be comparable" in m for m in compare(_report(), unnamed).messages)


def test_lost_queries_are_named() -> None:
    before = _report([_row("q1", [STATS], [STATS]), _row("q2", [ITEMS], [ITEMS])])
    after = _report([_row("q1", [CURRY], [STATS]), _row("q2", [ITEMS], [ITEMS])])
    result = compare(after, Baseline.from_report(before))
    assert result.regressed
    assert result.lost_queries == ["q1"]
    assert "Queries that lost their hit in the top 3: q1." in result.messages


def test_save_and_load_baseline(tmp_path: Path) -> None:
    report = _report()
    path = save_baseline(report, tmp_path / "rag" / "baseline.json")
    loaded = load_baseline(path)
    assert loaded == Baseline.from_report(report)
    assert loaded.hits == ["q1", "q2"]
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == "rag-eval-baseline"
    assert not compare(report, loaded).regressed


def test_a_report_json_is_accepted_as_baseline(tmp_path: Path) -> None:
    report = _report()
    json_path, _ = report.write(tmp_path)
    assert load_baseline(json_path) == Baseline.from_report(report)


@pytest.mark.parametrize(
    ("content", "words"),
    [(None, "does not exist"), ("{oops", "not valid JSON"), ('{"a": 1}', "not a baseline")],
)
def test_bad_baseline_files(tmp_path: Path, content: str | None, words: str) -> None:
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(BaselineError) as err:
        load_baseline(path)
    assert isinstance(err.value, RAGError)
    assert str(path) in str(err.value)
    assert words in str(err.value)


def test_markdown_and_json_include_the_comparison(tmp_path: Path) -> None:
    baseline = Baseline.from_report(_with_metrics(0.9, 0.9, 0.9))
    current = _report()
    comparison = compare(current, baseline)
    json_path, md_path = current.write(tmp_path, comparison)
    markdown = md_path.read_text(encoding="utf-8")
    assert "## Baseline comparison" in markdown
    assert "result: **REGRESSION**" in markdown
    assert "| Metric | Baseline | Current | Delta |" in markdown
    # F1 0.9 -> 0.83333: delta -0.0667, within 0.1, not flagged
    assert "| F1 | 0.9000 | 0.8333 | -0.0667 |" in markdown
    # MRR 0.9 -> 0.75: delta -0.15, flagged
    assert "| MRR | 0.9000 | 0.7500 | -0.1500 ⚠ |" in markdown
    saved = json.loads(json_path.read_text(encoding="utf-8"))
    assert saved["baseline_comparison"]["regressed"] is True
    assert saved["baseline_comparison"]["regressed_metrics"] == ["mrr"]
    assert EvaluationReport.from_json(json_path.read_text(encoding="utf-8")) == current
