"""Baselines: a saved run's metrics, and the comparison that detects regressions.

A baseline file holds the configuration, the aggregate metrics and the ids of the queries
that had a hit, so a comparison can say both *that* quality dropped and *which* queries
lost their hit, while staying small enough to commit. A full `report.json` is accepted as
a baseline too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval.defaults import DEFAULT_REGRESSION_THRESHOLD
from eval.metrics import METRIC_NAMES
from eval.report import EvaluationReport, metric_label
from rag_app.errors import RAGError

BASELINE_FORMAT = "rag-eval-baseline"
BASELINE_FORMAT_VERSION = 1
GUARDED_METRICS: tuple[str, ...] = ("f1", "ndcg", "mrr")
"""A drop in any of these larger than the threshold is a regression (F1 first, per spec)."""

_COMPARABLE_CONFIG = ("dataset", "n_results", "k")
_EPSILON = 1e-9
_MAX_LISTED_QUERIES = 10


class BaselineError(RAGError):
    """A baseline file is missing, unreadable or not a baseline."""


@dataclass
class Baseline:
    """Aggregate metrics of a reference run, and the ids of queries with a hit in the top k."""

    config: dict[str, Any]
    metrics: dict[str, float]
    timestamp: str
    hits: list[str] = field(default_factory=list)

    @classmethod
    def from_report(cls, report: EvaluationReport) -> Baseline:
        """The baseline that `report` would become if saved."""
        return cls(
            config=asdict(report.config),
            metrics=dict(report.metrics),
            timestamp=report.timestamp,
            hits=[q.id for q in report.queries if q.metrics.answerable and q.metrics.hit_rate],
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "format": BASELINE_FORMAT,
            "format_version": BASELINE_FORMAT_VERSION,
            "timestamp": self.timestamp,
            "config": self.config,
            "metrics": self.metrics,
            "hits": self.hits,
        }


@dataclass
class Comparison:
    """Current versus baseline: deltas (current - baseline) and what regressed."""

    regressed: bool
    deltas: dict[str, float]
    messages: list[str]
    regressed_metrics: list[str] = field(default_factory=list)
    baseline_metrics: dict[str, float] = field(default_factory=dict)
    current_metrics: dict[str, float] = field(default_factory=dict)
    threshold: float = DEFAULT_REGRESSION_THRESHOLD
    baseline_timestamp: str = ""
    lost_queries: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (included in report.json)."""
        return asdict(self)


def save_baseline(report: EvaluationReport, path: str | os.PathLike[str]) -> Path:
    """Write `report` as a baseline file (parent folders are created)."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(Baseline.from_report(report).to_dict(), ensure_ascii=False, indent=2)
    file.write_text(text + "\n", encoding="utf-8")
    return file


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read a baseline file (or a report.json); every problem is a `BaselineError`."""
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(
            f"The baseline file {file} does not exist; save one first or check the path."
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise BaselineError(f"The baseline file {file} cannot be read ({err}).") from None
    except json.JSONDecodeError as err:
        raise BaselineError(
            f"The baseline file {file} is not valid JSON ({err.msg} at line {err.lineno}); "
            "fix it or save a new baseline."
        ) from None
    try:
        return _parse(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise BaselineError(
            f"The baseline file {file} is not a baseline or evaluation report; save a new baseline."
        ) from None


def _parse(data: Any) -> Baseline:
    if isinstance(data, dict) and data.get("format") == BASELINE_FORMAT:
        return Baseline(
            config=dict(data["config"]),
            metrics={str(k): float(v) for k, v in data["metrics"].items()},
            timestamp=str(data.get("timestamp", "")),
            hits=[str(qid) for qid in data.get("hits", [])],
        )
    if isinstance(data, dict) and isinstance(data.get("queries"), list):
        return Baseline.from_report(EvaluationReport.from_dict(data))
    raise ValueError("unknown format")


def compare(
    current: EvaluationReport,
    baseline: Baseline,
    threshold: float = DEFAULT_REGRESSION_THRESHOLD,
) -> Comparison:
    """Compare a run with a baseline; a guarded metric falling by more than `threshold`
    (absolute, e.g. F1 0.80 → 0.65 with 0.1) is a regression."""
    if threshold < 0:
        raise ValueError(f"the regression threshold must be 0 or more, got {threshold}")
    k = current.config.k
    names = [n for n in METRIC_NAMES if n in current.metrics and n in baseline.metrics]
    deltas = {n: current.metrics[n] - baseline.metrics[n] for n in names}
    regressed = [n for n in GUARDED_METRICS if n in deltas and -deltas[n] > threshold + _EPSILON]
    messages = [
        f"{metric_label(n, k)} dropped by {-deltas[n]:.4f} ({baseline.metrics[n]:.4f} → "
        f"{current.metrics[n]:.4f}), more than the allowed {threshold:.2f}."
        for n in regressed
    ]
    if not regressed:
        changes = ", ".join(
            f"{metric_label(n, k)} {deltas[n]:+.4f}" for n in GUARDED_METRICS if n in deltas
        )
        messages.append(f"No regression ({changes}; allowed drop {threshold:.2f}).")
    messages += _config_warnings(current, baseline.config)
    lost = _lost_queries(current, baseline)
    if lost:
        listed = ", ".join(lost[:_MAX_LISTED_QUERIES])
        more = len(lost) - _MAX_LISTED_QUERIES
        suffix = f" and {more} more" if more > 0 else ""
        messages.append(f"Queries that lost their hit in the top {k}: {listed}{suffix}.")
    return Comparison(
        regressed=bool(regressed),
        deltas=deltas,
        messages=messages,
        regressed_metrics=regressed,
        baseline_metrics={n: baseline.metrics[n] for n in names},
        current_metrics={n: current.metrics[n] for n in names},
        threshold=threshold,
        baseline_timestamp=baseline.timestamp,
        lost_queries=lost,
    )


def _config_warnings(current: EvaluationReport, config: Mapping[str, Any]) -> list[str]:
    now = asdict(current.config)
    return [
        f"The baseline used {key}={config[key]!r} but this run used {key}={now[key]!r}, "
        "so the numbers may not be comparable."
        for key in _COMPARABLE_CONFIG
        if config.get(key) not in (None, "")
        and now[key] not in (None, "")
        and config[key] != now[key]
    ]


def _lost_queries(current: EvaluationReport, baseline: Baseline) -> list[str]:
    had_hit = set(baseline.hits)
    return [
        q.id
        for q in current.queries
        if q.metrics.answerable and not q.metrics.hit_rate and q.id in had_hit
    ]
