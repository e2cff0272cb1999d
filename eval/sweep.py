"""Parameter sweep: α (and chunking, BM25 k1/b) on one dataset → CSV and a plot.

Efficient by construction: per chunking the knowledge base is built once (vectors come
from the on-disk embedding cache after the first run), each query's vector and BM25
candidates are fetched once, and every α — plus RRF and each retriever alone — is a
re-ranking of those lists with the project's own pure `fuse`. A k1/b pair re-runs only
the BM25 side. So 11 α values cost about as much as one evaluation.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from eval.candidates import (
    CandidateSet,
    RankScores,
    bm25_ranker,
    cc_ranker,
    fetch_candidates,
    refetch_bm25,
    rrf_ranker,
    score_ranker,
    vector_ranker,
)
from eval.datasets import EvalDocument, EvalQuery
from eval.embedding_cache import CachedEmbedding
from eval.knowledge_builder import build_knowledge_base, eval_settings
from eval.progress import progress_bar
from rag_app.embeddings import get_embed_model

if TYPE_CHECKING:
    from matplotlib.axes import Axes

CSV_NAME = "sweep.csv"
PNG_NAME = "sweep.png"
METHODS = ("cc", "cc-z", "cc-dbsf", "rrf", "vector", "bm25")
"""`cc` is the shipped min–max fusion; `cc-z` / `cc-dbsf` the same with z-score / DBSF."""
CSV_FIELDS = (
    "chunk_size",
    "chunk_overlap",
    "k1",
    "b",
    "method",
    "alpha",
    "ndcg_at_10",
    "mrr_at_10",
    "recall_at_5",
    "hit_at_10",
    "queries",
)
_MAX_LABELLED_LINES = 8


@dataclass(frozen=True)
class SweepGrid:
    """The values to try; `n_results` chunks are retrieved per query (as a user would)."""

    alphas: Sequence[float]
    chunkings: Sequence[tuple[int, int]]
    k1s: Sequence[float]
    bs: Sequence[float]
    n_results: int = 10


@dataclass(frozen=True)
class SweepRow:
    """One configuration and its source-level scores; `alpha` only for `cc`."""

    chunk_size: int
    chunk_overlap: int
    k1: float
    b: float
    method: str
    alpha: float | None
    scores: RankScores

    @property
    def setting(self) -> tuple[int, int, float, float]:
        """Chunking and BM25 parameters (everything but the fusion)."""
        return (self.chunk_size, self.chunk_overlap, self.k1, self.b)

    def setting_label(self) -> str:
        """`chunks 200/30, k1 2.5, b 0.5`."""
        return f"chunks {self.chunk_size}/{self.chunk_overlap}, k1 {self.k1:g}, b {self.b:g}"

    def describe(self) -> str:
        """`CC α=0.3 (chunks 200/30, k1 2.5, b 0.5): nDCG@10 0.9400, MRR 0.9270, R@5 0.9670`."""
        method = {
            "cc": f"CC α={self.alpha:g}",
            "cc-z": f"CC z-score α={self.alpha:g}",
            "cc-dbsf": f"CC DBSF α={self.alpha:g}",
            "rrf": "RRF k=60",
        }.get(self.method, f"{self.method} only")
        s = self.scores
        return (
            f"{method} ({self.setting_label()}): nDCG@10 {s.ndcg:.4f}, MRR {s.mrr:.4f}, "
            f"R@5 {s.recall:.4f}"
        )

    def csv_row(self) -> dict[str, str]:
        """The row as written to sweep.csv."""
        s = self.scores
        return {
            "chunk_size": str(self.chunk_size),
            "chunk_overlap": str(self.chunk_overlap),
            "k1": f"{self.k1:g}",
            "b": f"{self.b:g}",
            "method": self.method,
            "alpha": "" if self.alpha is None else f"{self.alpha:g}",
            "ndcg_at_10": f"{s.ndcg:.4f}",
            "mrr_at_10": f"{s.mrr:.4f}",
            "recall_at_5": f"{s.recall:.4f}",
            "hit_at_10": f"{s.hit_rate:.4f}",
            "queries": str(s.queries),
        }


@dataclass
class SweepResult:
    """Every row of a sweep."""

    rows: list[SweepRow] = field(default_factory=list)

    def best(self) -> SweepRow:
        """The CC row with the highest nDCG@10 (then MRR, then the smaller α)."""
        cc = [r for r in self.rows if r.method == "cc"]
        if not cc:
            raise ValueError("the sweep has no fusion rows")
        return max(cc, key=lambda r: (r.scores.ndcg, r.scores.mrr, -(r.alpha or 0.0)))

    def for_setting(self, setting: tuple[int, int, float, float], method: str) -> list[SweepRow]:
        """Rows of one chunking/k1/b setting and method."""
        return [r for r in self.rows if r.setting == setting and r.method == method]

    def find(self, setting: tuple[int, int, float, float], alpha: float) -> SweepRow | None:
        """The CC row of `setting` at `alpha`, if the grid has it."""
        for row in self.for_setting(setting, "cc"):
            if row.alpha is not None and abs(row.alpha - alpha) < 1e-9:
                return row
        return None

    def reference_line(self, row: SweepRow) -> str:
        """RRF and the single retrievers for the same setting as `row`, one line."""
        parts = []
        for method, name in (("rrf", "RRF"), ("vector", "vector only"), ("bm25", "BM25 only")):
            for ref in self.for_setting(row.setting, method):
                parts.append(f"{name} nDCG@10 {ref.scores.ndcg:.4f} / MRR {ref.scores.mrr:.4f}")
        return "; ".join(parts)


def rows_for(
    candidates: CandidateSet,
    setting: tuple[int, int, float, float],
    alphas: Sequence[float],
    n_results: int,
) -> list[SweepRow]:
    """Score every method on one candidate set (the rows of one setting)."""
    size, overlap, k1, b = setting

    def row(method: str, alpha: float | None, scores: RankScores) -> SweepRow:
        return SweepRow(size, overlap, k1, b, method, alpha, scores)

    rows = [
        row("vector", None, score_ranker(candidates, vector_ranker(n_results))),
        row("bm25", None, score_ranker(candidates, bm25_ranker(n_results))),
        row("rrf", None, score_ranker(candidates, rrf_ranker(n_results))),
    ]
    rows += [
        row("cc", alpha, score_ranker(candidates, cc_ranker(n_results, alpha))) for alpha in alphas
    ]
    for method, normalization in (("cc-z", "z-score"), ("cc-dbsf", "dbsf")):
        rows += [
            row(
                method,
                alpha,
                score_ranker(candidates, cc_ranker(n_results, alpha, None, normalization)),
            )
            for alpha in alphas
        ]
    return rows


async def run_sweep(
    documents: Sequence[EvalDocument],
    queries: Sequence[EvalQuery],
    grid: SweepGrid,
    persist_dir: str | os.PathLike[str],
    embedding_cache: str | os.PathLike[str] | None = None,
) -> SweepResult:
    """Build each chunking once, fetch candidates once, re-rank for the whole grid."""
    bad = [a for a in grid.alphas if not 0.0 <= a <= 1.0]
    if bad:
        raise ValueError(f"alpha values must be within 0..1, got {bad[0]}")
    result = SweepResult()
    model = None
    for size, overlap in grid.chunkings:
        settings = eval_settings(persist_dir, size, overlap)
        if model is None:
            model = get_embed_model(settings)
            if embedding_cache is not None:
                model = CachedEmbedding(model, embedding_cache)
        with progress_bar(f"Indexing {size}/{overlap}", "doc") as update:
            kb, _ = await build_knowledge_base(
                documents, settings, embed_model=model, progress=update
            )
        try:
            with progress_bar(f"Candidates {size}/{overlap}", "query") as update:
                base = await fetch_candidates(kb, queries, grid.n_results, progress=update)
            for k1 in grid.k1s:
                for b in grid.bs:
                    same = (k1, b) == (settings.rag_bm25_k1, settings.rag_bm25_b)
                    candidates = base if same else refetch_bm25(kb, base, k1, b)
                    result.rows += rows_for(
                        candidates, (size, overlap, k1, b), grid.alphas, grid.n_results
                    )
        finally:
            await kb.aclose()
    return result


def write_sweep(
    result: SweepResult,
    output_dir: str | os.PathLike[str],
    title: str = "Retrieval sweep",
    marked: SweepRow | None = None,
    marked_label: str = "default",
) -> tuple[Path, Path]:
    """Write `sweep.csv` and `sweep.png` into `output_dir`.

    The plot stars the best α; `marked` (e.g. the configured defaults) gets a diamond
    labelled `marked_label`, and the reference lines (RRF, each retriever alone) are
    drawn for its setting.
    """
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / CSV_NAME
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(r.csv_row() for r in result.rows)
    png_path = folder / PNG_NAME
    plot_sweep(result, png_path, title, marked, marked_label)
    return csv_path, png_path


def plot_sweep(
    result: SweepResult,
    path: Path,
    title: str,
    marked: SweepRow | None = None,
    marked_label: str = "default",
) -> None:
    """nDCG@10 and MRR@10 against α, one line per chunking/k1/b setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best = result.best()
    anchor = marked or best
    settings = list(dict.fromkeys(r.setting for r in result.rows if r.method == "cc"))
    labelled = _labelled_settings(result, settings, {best.setting, anchor.setting})
    unlabelled = [s for s in settings if s not in labelled] or [None]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharex=True)
    for ax, metric, name in ((axes[0], "ndcg", "nDCG@10"), (axes[1], "mrr", "MRR@10")):
        for setting in sorted(settings, key=lambda s: s in labelled):
            rows = sorted(result.for_setting(setting, "cc"), key=lambda r: r.alpha or 0.0)
            xs = [r.alpha for r in rows]
            ys = [getattr(r.scores, metric) for r in rows]
            if setting in labelled:
                width = 2.2 if setting == anchor.setting else 1.4
                ax.plot(
                    xs, ys, marker="o", markersize=3, linewidth=width, label=rows[0].setting_label()
                )
            else:
                grey = "other chunking / k1 / b" if setting == unlabelled[0] else None
                ax.plot(xs, ys, color="0.82", linewidth=0.8, label=grey)
        styles = (("rrf", "RRF k=60", ":"), ("vector", "vector only", "--"))
        for method, label, style in (*styles, ("bm25", "BM25 only", "-.")):
            for ref in result.for_setting(anchor.setting, method):
                value = getattr(ref.scores, metric)
                ax.axhline(value, color="0.35", linestyle=style, linewidth=1, label=label)
        best_label = f"best = {marked_label}" if marked == best else "best"
        _mark(ax, best, metric, name, best_label, "*", "crimson", (-120, 16))
        if marked is not None and marked != best:
            _mark(ax, marked, metric, name, marked_label, "D", "black", (22, -48))
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.18 * (high - low))  # room for the labels above the best
        ax.set_xlabel("α (vector weight)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mark(
    ax: Axes,
    row: SweepRow,
    metric: str,
    name: str,
    label: str,
    marker: str,
    color: str,
    offset: tuple[int, int],
) -> None:
    value = getattr(row.scores, metric)
    size = 16 if marker == "*" else 8
    ax.plot([row.alpha], [value], marker=marker, markersize=size, color=color, zorder=5)
    ax.annotate(
        f"{label}: α={row.alpha:g}, {row.chunk_size}/{row.chunk_overlap}, "
        f"k1 {row.k1:g}, b {row.b:g}\n{name} {value:.4f}",
        (row.alpha or 0.0, value),
        textcoords="offset points",
        xytext=offset,
        fontsize=7,
        color=color,
        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": color, "alpha": 0.85},
        arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.8},
    )


def _labelled_settings(
    result: SweepResult,
    settings: list[tuple[int, int, float, float]],
    always: set[tuple[int, int, float, float]],
) -> set[tuple[int, int, float, float]]:
    """All settings when few, else `always` plus the best of each chunking (rest in grey)."""
    if len(settings) <= _MAX_LABELLED_LINES:
        return set(settings)
    chosen = set(always)
    for size, overlap in {(s[0], s[1]) for s in settings}:
        rows = [r for r in result.rows if r.method == "cc" and r.setting[:2] == (size, overlap)]
        chosen.add(max(rows, key=lambda r: r.scores.ndcg).setting)
    return chosen
