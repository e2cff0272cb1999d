"""The evaluation report: configuration, aggregate and per-query metrics, JSON and Markdown.

`report.json` is the machine-readable record (it round-trips through `from_json`);
`report.md` is for people: an aggregate table, a per-category table, a baseline
comparison with deltas when one is given, and one row per query.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.metrics import METRIC_NAMES, QueryMetrics, aggregate

if TYPE_CHECKING:
    from eval.baseline import Comparison

REPORT_FORMAT_VERSION = 1
REPORT_JSON = "report.json"
REPORT_MARKDOWN = "report.md"


def utc_timestamp() -> str:
    """Now, as ISO 8601 in UTC with seconds (the report's `timestamp`)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def metric_label(name: str, k: int) -> str:
    """Human label of a metric name, with the cut-off where it has one."""
    labels = {
        "precision": "Precision",
        "recall": "Recall",
        "f1": "F1",
        "ndcg": f"nDCG@{k}",
        "mrr": "MRR",
        "hit_rate": f"Hit@{k}",
    }
    return labels.get(name, name)


@dataclass
class EvaluationConfig:
    """What was evaluated and how; `extra` holds free-form settings (mode, model, ...)."""

    dataset: str
    n_results: int
    k: int
    chunk_size: int | None = None
    chunk_overlap: int | None = None
    vector_weight: float | None = None
    threshold: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One line such as `chunk_size=200, chunk_overlap=30, ..., threshold=none`."""
        parts = {
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "vector_weight": self.vector_weight,
            "n_results": self.n_results,
            "k": self.k,
            "threshold": self.threshold,
            **self.extra,
        }
        return ", ".join(  # lists (the queries a rule declined) are for the JSON report
            f"{key}={'none' if v is None else v}"
            for key, v in parts.items()
            if not isinstance(v, list)
        )


@dataclass
class QueryResult:
    """One query's outcome: what came back (unique sources, best first) and its scores."""

    id: str
    query: str
    expected_sources: list[str]
    retrieved_sources: list[str]
    metrics: QueryMetrics
    category: str | None = None
    negative_hits: list[str] = field(default_factory=list)
    latency_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "id": self.id,
            "query": self.query,
            "category": self.category,
            "expected_sources": self.expected_sources,
            "retrieved_sources": self.retrieved_sources,
            "negative_hits": self.negative_hits,
            "latency_ms": self.latency_ms,
            "answerable": self.metrics.answerable,
            "metrics": self.metrics.as_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryResult:
        """Inverse of `to_dict`."""
        values = data["metrics"]
        metrics = QueryMetrics(
            **{name: float(values[name]) for name in METRIC_NAMES},
            answerable=bool(data.get("answerable", bool(data["expected_sources"]))),
        )
        return cls(
            id=str(data["id"]),
            query=str(data["query"]),
            expected_sources=[str(s) for s in data["expected_sources"]],
            retrieved_sources=[str(s) for s in data["retrieved_sources"]],
            metrics=metrics,
            category=data.get("category"),
            negative_hits=[str(s) for s in data.get("negative_hits", [])],
            latency_ms=data.get("latency_ms"),
        )


@dataclass
class EvaluationReport:
    """A whole evaluation run; `metrics` are means over the answerable queries."""

    config: EvaluationConfig
    metrics: dict[str, float]
    queries: list[QueryResult]
    timestamp: str = field(default_factory=utc_timestamp)

    @classmethod
    def build(
        cls, config: EvaluationConfig, queries: Sequence[QueryResult], timestamp: str | None = None
    ) -> EvaluationReport:
        """A report whose aggregate metrics are computed from the per-query rows."""
        return cls(
            config=config,
            metrics=aggregate(q.metrics for q in queries),
            queries=list(queries),
            timestamp=timestamp or utc_timestamp(),
        )

    @property
    def answerable_count(self) -> int:
        """Queries that have at least one expected source (the ones the means cover)."""
        return sum(1 for q in self.queries if q.metrics.answerable)

    @property
    def negative_source_violations(self) -> list[str]:
        """Ids of queries whose results contained one of their negative sources."""
        return [q.id for q in self.queries if q.negative_hits]

    @property
    def no_answer_empty_rate(self) -> float | None:
        """Share of queries without a relevant document that got no results (None if none)."""
        unanswerable = [q for q in self.queries if not q.metrics.answerable]
        if not unanswerable:
            return None
        return sum(1 for q in unanswerable if not q.retrieved_sources) / len(unanswerable)

    def by_category(self) -> dict[str, dict[str, float]]:
        """Mean metrics per query category (answerable queries only), plus a `queries` count."""
        groups: dict[str, list[QueryMetrics]] = {}
        for q in self.queries:
            if q.category and q.metrics.answerable:
                groups.setdefault(q.category, []).append(q.metrics)
        return {
            name: {"queries": float(len(group)), **aggregate(group)}
            for name, group in sorted(groups.items())
        }

    def to_dict(self, comparison: Comparison | None = None) -> dict[str, Any]:
        """JSON-ready form; the baseline comparison is included when given."""
        data: dict[str, Any] = {
            "format_version": REPORT_FORMAT_VERSION,
            "timestamp": self.timestamp,
            "config": asdict(self.config),
            "summary": {
                "queries": len(self.queries),
                "answerable": self.answerable_count,
                "negative_source_violations": self.negative_source_violations,
                "no_answer_empty_rate": self.no_answer_empty_rate,
            },
            "metrics": self.metrics,
            "by_category": self.by_category(),
            "queries": [q.to_dict() for q in self.queries],
        }
        if comparison is not None:
            data["baseline_comparison"] = comparison.to_dict()
        return data

    def to_json(self, comparison: Comparison | None = None) -> str:
        """The report as indented UTF-8 JSON (Japanese kept readable)."""
        return json.dumps(self.to_dict(comparison), ensure_ascii=False, indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluationReport:
        """Inverse of `to_dict`; raises ValueError when the shape is not a report's."""
        try:
            config = EvaluationConfig(**data["config"])
            metrics = {str(k): float(v) for k, v in data["metrics"].items()}
            queries = [QueryResult.from_dict(q) for q in data["queries"]]
            return cls(config, metrics, queries, str(data["timestamp"]))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"not an evaluation report ({type(err).__name__}: {err})") from None

    @classmethod
    def from_json(cls, text: str) -> EvaluationReport:
        """Inverse of `to_json`; raises ValueError on invalid JSON or shape."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"invalid JSON ({err.msg} at line {err.lineno})") from None
        if not isinstance(data, dict):
            raise ValueError("not an evaluation report (the top level is not an object)")
        return cls.from_dict(data)

    def to_markdown(self, comparison: Comparison | None = None) -> str:
        """The human report: aggregate, comparison, categories and per-query tables."""
        k = self.config.k
        lines = [
            "# RAG retrieval evaluation",
            "",
            f"- Dataset: `{self.config.dataset}`",
            f"- Run at: {self.timestamp}",
            f"- Queries: {len(self.queries)} ({self.answerable_count} with expected sources)",
            f"- Configuration: {self.config.describe()}",
            "",
            "## Aggregate metrics",
            "",
            f"Means over the {self.answerable_count} queries with expected sources; "
            "several chunks of one source count once.",
            "",
            "| Metric | Value |",
            "| --- | ---: |",
            *(f"| {metric_label(n, k)} | {v:.4f} |" for n, v in self.metrics.items()),
        ]
        if comparison is not None:
            lines += ["", *_comparison_section(comparison, k)]
        categories = self.by_category()
        if categories:
            lines += ["", *_category_section(categories, k)]
        lines += ["", *self._special_queries_section(), *self._query_section()]
        return "\n".join(lines).rstrip() + "\n"

    def write(self, output_dir: str | Path, comparison: Comparison | None = None) -> list[Path]:
        """Write `report.json` and `report.md` into `output_dir` (created if missing)."""
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        json_path = folder / REPORT_JSON
        md_path = folder / REPORT_MARKDOWN
        json_path.write_text(self.to_json(comparison), encoding="utf-8")
        md_path.write_text(self.to_markdown(comparison), encoding="utf-8")
        return [json_path, md_path]

    def _special_queries_section(self) -> list[str]:
        lines: list[str] = []
        unanswerable = [q for q in self.queries if not q.metrics.answerable]
        if unanswerable:
            lines += [
                "## Queries without a relevant document",
                "",
                "Ideally nothing comes back (a similarity threshold can ensure that).",
                "",
                "| ID | Query | Retrieved |",
                "| --- | --- | --- |",
                *(
                    f"| {_cell(q.id)} | {_cell(q.query)} | "
                    f"{_sources(q.retrieved_sources, set()) or '(none)'} |"
                    for q in unanswerable
                ),
                "",
            ]
        violations = [q for q in self.queries if q.negative_hits]
        if violations:
            lines += [
                "## Negative source violations",
                "",
                *(f"- {_cell(q.id)}: {', '.join(q.negative_hits)}" for q in violations),
                "",
            ]
        return lines

    def _query_section(self) -> list[str]:
        k = self.config.k
        header = ["ID", "Query", "Expected", "Retrieved", "P", "R", "F1", f"nDCG@{k}", "MRR"]
        lines = [
            "## Per-query results",
            "",
            f"Retrieved sources are unique, best first; **bold** ones are expected (top {k} "
            "scored).",
            "",
            "| " + " | ".join(header) + " |",
            "| --- | --- | --- | --- |" + " ---: |" * 5,
        ]
        for q in self.queries:
            m = q.metrics
            cells = [
                _cell(q.id),
                _cell(q.query),
                _sources(q.expected_sources, set()) or "(none)",
                _sources(q.retrieved_sources, set(q.expected_sources)) or "(none)",
                *(f"{v:.2f}" for v in (m.precision, m.recall, m.f1, m.ndcg, m.mrr)),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return lines


def _comparison_section(comparison: Comparison, k: int) -> list[str]:
    verdict = "**REGRESSION**" if comparison.regressed else "no regression"
    lines = [
        "## Baseline comparison",
        "",
        f"Baseline from {comparison.baseline_timestamp or 'an unknown date'}; allowed drop "
        f"{comparison.threshold:.2f}; result: {verdict}.",
        "",
        "| Metric | Baseline | Current | Delta |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, delta in comparison.deltas.items():
        flag = " ⚠" if name in comparison.regressed_metrics else ""
        lines.append(
            f"| {metric_label(name, k)} | {comparison.baseline_metrics[name]:.4f} | "
            f"{comparison.current_metrics[name]:.4f} | {delta:+.4f}{flag} |"
        )
    if comparison.messages:
        lines += ["", *(f"- {_cell(message)}" for message in comparison.messages)]
    return lines


def _category_section(categories: Mapping[str, Mapping[str, float]], k: int) -> list[str]:
    header = ["Category", "Queries", *(metric_label(n, k) for n in METRIC_NAMES)]
    lines = [
        "## By category",
        "",
        "| " + " | ".join(header) + " |",
        "| --- |" + " ---: |" * (len(header) - 1),
    ]
    for name, values in categories.items():
        cells = [_cell(name), str(int(values["queries"]))]
        cells += [f"{values[metric]:.4f}" for metric in METRIC_NAMES]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (no pipes, no line breaks)."""
    return " ".join(text.split()).replace("|", "\\|")


def _sources(sources: Iterable[str], relevant: set[str]) -> str:
    return "<br>".join(f"**{_cell(s)}**" if s in relevant else _cell(s) for s in sources)
