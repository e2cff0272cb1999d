"""The evidence behind the retrieval defaults, on JSQuAD (`python -m eval.evidence`).

Runs the real pipeline — our chunking, tokenizer, builtin embeddings, Chroma, BM25 and
the project's fusion — on every JSQuAD query for two variants of what is embedded,
chosen with the `RAG_EMBED_CONTEXT` setting (LlamaIndex's `MetadataMode.EMBED` text):

- `chunk-text`: a chunk is embedded as its text alone (`RAG_EMBED_CONTEXT=false`);
- `title-embedding`: page title and heading path in front of the chunk text, the
  context BM25 indexes as a field of its own; table rows stay alone (the default).

For each variant and chunking, candidates are fetched once per query and every BM25
k1/b pair and fusion (BM25 only, vector only, RRF, CC at each α) is scored from them,
like `rag-eval sweep`. Writes `evidence.csv` (every row), `evidence.md` (the table for
the docs) and, per variant, `sweep.csv` + `sweep.png`. Vectors are cached in
`.tmp/embedding-cache.sqlite` and the knowledge bases kept in `.tmp/jsquad-evidence/`,
so a rerun costs minutes, not the first run's embedding time.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import math
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.candidates import (
    CandidateSet,
    Ranker,
    bm25_ranker,
    cc_ranker,
    fetch_candidates,
    refetch_bm25,
    rrf_ranker,
    vector_ranker,
)
from eval.datasets import EvalDocument, EvalQuery, find_jsquad_dir, load_jsquad
from eval.embedding_cache import DEFAULT_CACHE_FILE, CachedEmbedding
from eval.knowledge_builder import build_knowledge_base, eval_settings
from eval.metrics import mrr, ndcg_at_k, recall_at_k
from eval.progress import progress_bar
from eval.sweep import SweepResult, rows_for, write_sweep
from rag_app.config import load_settings
from rag_app.embeddings import get_embed_model

VARIANTS = ("chunk-text", "title-embedding")
DEFAULT_ALPHAS = tuple(round(i / 10, 1) for i in range(11))
DEFAULT_CHUNKINGS = ((200, 30), (400, 50))
DEFAULT_BM25 = ((2.5, 0.5), (1.2, 0.75), (1.2, 0.5), (0.9, 0.4), (0.5, 0.5))
Setting = tuple[int, int, float, float]
SPEC_DEFAULTS: Setting = (200, 30, 2.5, 0.5)
"""Chunking and BM25 parameters of spec 000 (with α = 0.9)."""
SPEC_ALPHA = 0.9


_EMBED_CONTEXT = {"chunk-text": False, "title-embedding": True}
_TITLES = {
    "chunk-text": "chunk text embedded (before)",
    "title-embedding": "title + heading + chunk embedded (shipped)",
}


def variant_settings(name: str) -> dict[str, bool]:
    """The setting that makes chunks embedded the way variant `name` does."""
    if name not in _EMBED_CONTEXT:
        raise ValueError(f"unknown variant {name!r}; use one of {', '.join(VARIANTS)}")
    return {"rag_embed_context": _EMBED_CONTEXT[name]}


@dataclass(frozen=True)
class Scored:
    """Per-query source-level scores of one ranker (for means and paired comparisons)."""

    ndcg: list[float]
    mrr: list[float]
    recall: list[float]

    @staticmethod
    def of(candidates: CandidateSet, ranker: Ranker) -> Scored:
        ndcg: list[float] = []
        rr: list[float] = []
        recall: list[float] = []
        for item in candidates.items:
            expected = item.query.expected_sources
            if not expected:
                continue
            ranked = list(dict.fromkeys(candidates.source_of[i] for i in ranker(item)))
            ndcg.append(ndcg_at_k(ranked, expected, 10))
            rr.append(mrr(ranked, expected, 10))
            recall.append(recall_at_k(ranked, expected, 5))
        return Scored(ndcg, rr, recall)

    def means(self) -> tuple[float, float, float]:
        n = len(self.ndcg) or 1
        return sum(self.ndcg) / n, sum(self.mrr) / n, sum(self.recall) / n


def paired_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of a - b and the half-width of its 95% confidence interval (normal approx.)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return mean, 1.96 * math.sqrt(var / n)


@dataclass
class VariantRun:
    """Candidate sets of one variant, per chunking and BM25 setting."""

    name: str
    candidates: dict[Setting, CandidateSet]


async def collect(
    name: str,
    documents: Sequence[EvalDocument],
    queries: Sequence[EvalQuery],
    chunkings: Sequence[tuple[int, int]],
    bm25_settings: Sequence[tuple[float, float]],
    work_dir: Path,
    cache: Path,
) -> VariantRun:
    """Build each chunking under `name` and fetch every query's candidates once."""
    run = VariantRun(name, {})
    model = CachedEmbedding(get_embed_model(load_settings()), cache)
    overrides = variant_settings(name)
    for size, overlap in chunkings:
        settings = eval_settings(work_dir / name, size, overlap, **overrides)
        with progress_bar(f"{name} {size}/{overlap} indexing", "doc") as update:
            kb, summary = await build_knowledge_base(
                documents, settings, embed_model=model, progress=update
            )
        print(f"{name} {size}/{overlap}: {summary.describe()}", file=sys.stderr)
        try:
            with progress_bar(f"{name} {size}/{overlap} queries", "query") as update:
                base = await fetch_candidates(kb, queries, 10, progress=update)
            for k1, b in bm25_settings:
                same = (k1, b) == (settings.rag_bm25_k1, settings.rag_bm25_b)
                cands = base if same else refetch_bm25(kb, base, k1, b)
                run.candidates[(size, overlap, k1, b)] = cands
        finally:
            await kb.aclose()
    model.close()
    return run


# --- the table ----------------------------------------------------------------------
def _method_label(method: str, alpha: float | None) -> str:
    names = {"bm25": "BM25 only", "vector": "vector only", "rrf": "RRF (k=60)"}
    return names.get(method, f"CC α={alpha or 0.0:g}")


def _ranker(method: str, alpha: float | None) -> Ranker:
    if method == "bm25":
        return bm25_ranker(10)
    if method == "vector":
        return vector_ranker(10)
    if method == "rrf":
        return rrf_ranker(10)
    return cc_ranker(10, alpha if alpha is not None else 0.5)


@dataclass(frozen=True)
class TableRow:
    """One line of the evidence table."""

    group: str
    variant: str
    setting: Setting
    method: str
    alpha: float | None
    note: str = ""


def _best_alpha(cands: CandidateSet, alphas: Sequence[float]) -> float:
    scored = {a: Scored.of(cands, cc_ranker(10, a)).means() for a in alphas}
    return max(alphas, key=lambda a: (scored[a][0], scored[a][1], -a))


def evidence_rows(
    runs: dict[str, VariantRun],
    alphas: Sequence[float],
    shipped: TableRow,
) -> list[TableRow]:
    """The curated rows: spec defaults, BM25 tuning, the embedding variant, chunkings."""
    rows: list[TableRow] = []
    plain = runs.get("chunk-text")
    base = SPEC_DEFAULTS
    if plain and base in plain.candidates:
        cands = plain.candidates[base]
        group = "Spec defaults: chunk text embedded, chunks 200/30, k1 2.5, b 0.5"
        for method in ("bm25", "vector", "rrf"):
            rows.append(TableRow(group, plain.name, base, method, None))
        rows.append(TableRow(group, plain.name, base, "cc", SPEC_ALPHA, "spec default α"))
        best = _best_alpha(cands, alphas)
        rows.append(TableRow(group, plain.name, base, "cc", best, "best α"))
        group = "BM25 k1 / b with the chunk text embedded (chunks 200/30, best α each)"
        for setting in plain.candidates:
            if setting[:2] == (200, 30) and setting != base:
                best = _best_alpha(plain.candidates[setting], alphas)
                rows.append(TableRow(group, plain.name, setting, "cc", best))
    titled = runs.get("title-embedding")
    if titled:
        rec = shipped.setting
        group = (
            f"Title + heading embedded with the chunk (chunks {rec[0]}/{rec[1]}, "
            f"k1 {rec[2]:g}, b {rec[3]:g})"
        )
        if rec in titled.candidates:
            for method in ("bm25", "vector", "rrf"):
                rows.append(TableRow(group, titled.name, rec, method, None))
            for alpha in (0.3, 0.4, 0.5, 0.6, 0.7, 0.9):
                note = "shipped" if alpha == shipped.alpha else ""
                rows.append(TableRow(group, titled.name, rec, "cc", alpha, note))
        group = "Title embedding, other BM25 settings and chunkings (best α each)"
        ordered = sorted(titled.candidates, key=lambda s: (s[:2] != rec[:2], s[0], -s[2], -s[3]))
        for setting in ordered:
            if setting != rec:
                best = _best_alpha(titled.candidates[setting], alphas)
                rows.append(TableRow(group, titled.name, setting, "cc", best))
    return rows


def render_table(rows: Sequence[TableRow], runs: dict[str, VariantRun], reference: TableRow) -> str:
    """Markdown table; Δ nDCG is paired against `reference` with a 95% interval."""
    ref_scores = Scored.of(
        runs[reference.variant].candidates[reference.setting],
        _ranker(reference.method, reference.alpha),
    )
    lines: list[str] = []
    group = None
    header = (
        "| Configuration | Chunks | k1 / b | nDCG@10 | MRR@10 | Recall@5 | "
        "Δ nDCG vs shipped (95% CI) |"
    )
    for row in rows:
        if row.group != group:
            group = row.group
            lines += [
                "",
                f"**{group}**",
                "",
                header,
                "| --- | --- | --- | ---: | ---: | ---: | ---: |",
            ]
        scores = Scored.of(
            runs[row.variant].candidates[row.setting], _ranker(row.method, row.alpha)
        )
        ndcg, rr, recall = scores.means()
        delta, half = paired_ci(scores.ndcg, ref_scores.ndcg)
        size, overlap, k1, b = row.setting
        label = _method_label(row.method, row.alpha) + (f" ({row.note})" if row.note else "")
        same = row == reference or (
            row.variant == reference.variant
            and row.setting == reference.setting
            and (row.method, row.alpha) == (reference.method, reference.alpha)
        )
        diff = "—" if same else f"{delta:+.4f} ± {half:.4f}"
        lines.append(
            f"| {label} | {size}/{overlap} | {k1:g} / {b:g} | {ndcg:.4f} | {rr:.4f} | "
            f"{recall:.4f} | {diff} |"
        )
    return "\n".join(lines).strip() + "\n"


def write_csv(runs: dict[str, VariantRun], alphas: Sequence[float], path: Path) -> None:
    """Every scored row of every variant (the sweep.csv columns plus `variant`)."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer: csv.DictWriter[str] | None = None
        for run in runs.values():
            for setting, cands in run.candidates.items():
                for row in rows_for(cands, setting, alphas, 10):
                    record = {"variant": run.name, **row.csv_row()}
                    if writer is None:
                        writer = csv.DictWriter(fh, fieldnames=list(record))
                        writer.writeheader()
                    writer.writerow(record)


def sweep_of(run: VariantRun, alphas: Sequence[float]) -> SweepResult:
    """The variant's rows as a `SweepResult` (for sweep.csv / sweep.png)."""
    result = SweepResult()
    for setting, cands in run.candidates.items():
        result.rows += rows_for(cands, setting, alphas, 10)
    return result


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m eval.evidence", description=__doc__.split("\n")[0])
    p.add_argument("--jsquad", default=None, help="folder with corpus.jsonl + queries.jsonl")
    p.add_argument("--limit", type=int, default=None, help="fewer queries (quick look)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--output-dir", default=".tmp/jsquad-evidence/out")
    p.add_argument("--work-dir", default=".tmp/jsquad-evidence")
    p.add_argument("--embedding-cache", default=str(DEFAULT_CACHE_FILE))
    p.add_argument(
        "--candidates-file",
        default=None,
        help="pickle of the fetched candidates: loaded when it exists, else written "
        "(re-render the table without querying again)",
    )
    p.add_argument("--shipped", default="200:30:0.5:0.5:0.5", help="SIZE:OVERLAP:K1:B:ALPHA")
    return p.parse_args(argv)


async def _main(args: argparse.Namespace) -> int:
    folder = Path(args.jsquad) if args.jsquad else find_jsquad_dir()
    if folder is None:
        print("error: no JSQuAD folder found; pass --jsquad DIR.", file=sys.stderr)
        return 2
    documents, queries = load_jsquad(folder, args.limit)
    size, overlap, k1, b, alpha = args.shipped.split(":")
    rec_setting: Setting = (int(size), int(overlap), float(k1), float(b))
    shipped = TableRow("", "title-embedding", rec_setting, "cc", float(alpha))
    bm25_settings = list(dict.fromkeys([*DEFAULT_BM25, rec_setting[2:]]))
    chunkings = list(dict.fromkeys([*DEFAULT_CHUNKINGS, rec_setting[:2]]))
    saved = Path(args.candidates_file) if args.candidates_file else None
    if saved is not None and saved.exists():
        runs: dict[str, VariantRun] = pickle.loads(saved.read_bytes())
    else:
        runs = {}
        for name in args.variants.split(","):
            sizes = chunkings if name == "title-embedding" else [(200, 30)]  # the spec's
            runs[name] = await collect(
                name,
                documents,
                queries,
                sizes,
                bm25_settings,
                Path(args.work_dir),
                Path(args.embedding_cache),
            )
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_bytes(pickle.dumps(runs))
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(runs, DEFAULT_ALPHAS, out / "evidence.csv")
    for run in runs.values():
        result = sweep_of(run, DEFAULT_ALPHAS)
        if run.name == shipped.variant:
            marked, label = result.find(rec_setting, float(alpha)), "shipped"
        else:
            marked, label = result.find(SPEC_DEFAULTS, SPEC_ALPHA), "spec default"
        write_sweep(
            result,
            out / run.name,
            title=f"JSQuAD v1.3 validation, {len(queries):,} questions — {_TITLES[run.name]}",
            marked=marked,
            marked_label=label,
        )
    if shipped.variant in runs:
        table = render_table(evidence_rows(runs, DEFAULT_ALPHAS, shipped), runs, shipped)
        (out / "evidence.md").write_text(table, encoding="utf-8")
        print(table)
    print(f"Written to {out}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m eval.evidence`."""
    raise SystemExit(asyncio.run(_main(_parse(argv))))


if __name__ == "__main__":
    main()
