"""What `rag-eval`'s commands do: load the data, build the knowledge base, run, report.

Kept apart from the argument parser (`eval.cli`) because it imports LlamaIndex and the
knowledge base, which `rag-eval --help` must not wait for.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from eval.answer_eval import CUTOFF_GRID
from eval.baseline import Comparison, compare, load_baseline, save_baseline
from eval.data import DOCUMENTS, QUESTIONS, data_path
from eval.datasets import (
    EvalDocument,
    EvalQuery,
    find_jsquad_dir,
    load_jsquad,
    load_spec_dataset,
    load_spec_documents,
    unknown_sources,
)
from eval.defaults import BASELINE_NAME, DEFAULT_CACHE_FILE
from eval.embedding_cache import CachedEmbedding
from eval.knowledge_builder import build_knowledge_base, eval_settings
from eval.progress import progress_bar
from eval.report import EvaluationConfig, EvaluationReport, metric_label
from eval.runner import evaluate_queries
from rag_app.config import RAGSettings, load_settings
from rag_app.embeddings import get_embed_model
from rag_app.errors import RAGError
from rag_app.index.no_match import Evidence
from rag_app.knowledge import KnowledgeBase

EXIT_OK, EXIT_REGRESSION = 0, 1
_REPO_ROOT = Path(__file__).resolve().parent.parent


class UsageError(RAGError):
    """An option value or combination the user has to change."""


@dataclass
class EvalData:
    """What is indexed and what is asked, plus a stable label for reports."""

    documents: list[EvalDocument]
    queries: list[EvalQuery]
    label: str
    documents_label: str


# --- shared helpers -------------------------------------------------------------
def _label(path: str | Path) -> str:
    """A path as reports show it: relative to the repository (or, installed, to the
    folder holding the packages, so a bundled file reads `eval/data/…` either way), else
    to the working folder when inside it."""
    resolved = Path(path).resolve()
    for root in (_REPO_ROOT, Path.cwd().resolve()):
        if resolved.is_relative_to(root):
            return resolved.relative_to(root).as_posix()
    return str(path)


def load_data(args: argparse.Namespace) -> EvalData:
    """Documents and queries chosen by --jsquad, or --dataset and --fixture."""
    if args.jsquad is not None:
        if args.dataset or args.fixture:
            raise UsageError(
                "--jsquad brings its own documents and queries; drop --dataset/--fixture."
            )
        folder = Path(args.jsquad) if args.jsquad else find_jsquad_dir()
        if folder is None:
            raise UsageError(
                "No JSQuAD folder was given or found; pass --jsquad DIR or set RAG_EVAL_DATA_DIR."
            )
        documents, queries = load_jsquad(folder, args.limit)
        name = f"jsquad:{folder.name}" + (f" ({args.limit} queries)" if args.limit else "")
        return EvalData(documents, queries, name, f"{folder.name}/corpus.jsonl")
    if args.limit is not None:
        raise UsageError("--limit applies to --jsquad runs only; remove it or add --jsquad.")
    dataset = args.dataset or data_path(QUESTIONS)
    fixture = args.fixture or data_path(DOCUMENTS)
    queries = load_spec_dataset(dataset)
    documents = load_spec_documents(fixture)
    missing = unknown_sources(queries, documents)
    if missing:
        print(
            f"warning: {len(missing)} expected source(s) are not in {fixture}, e.g. {missing[0]}; "
            "those queries cannot score.",
            file=sys.stderr,
        )
    return EvalData(documents, queries, _label(dataset), _label(fixture))


def _check_chunking(size: int, overlap: int) -> None:
    if overlap >= size:
        raise UsageError(f"--chunk-overlap ({overlap}) must be smaller than --chunk-size ({size}).")


def embed_model_for(settings: RAGSettings, cache: str | Path | None) -> BaseEmbedding:
    """The configured embedding model, wrapped in the on-disk cache when asked."""
    model = get_embed_model(settings)
    return CachedEmbedding(model, cache) if cache else model


@contextlib.contextmanager
def persist_folder(path: str | None) -> Iterator[Path]:
    """The given folder, or a temporary one removed afterwards."""
    if path:
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="rag-eval-") as tmp:
        yield Path(tmp)


async def open_knowledge_base(
    data: EvalData, settings: RAGSettings, cache: str | Path | None, verbose: bool = True
) -> KnowledgeBase:
    """Build or reuse the knowledge base holding `data.documents`; prints a summary."""
    model = embed_model_for(settings, cache)
    with progress_bar("Indexing", "doc") as update:
        kb, summary = await build_knowledge_base(
            data.documents,
            settings,
            embed_model=model,
            progress=update,
        )
    if verbose:
        print(f"Knowledge base: {summary.describe()}.", file=sys.stderr)
    return kb


# --- evaluate -------------------------------------------------------------------
async def evaluate(args: argparse.Namespace) -> int:
    _check_chunking(args.chunk_size, args.chunk_overlap)
    data = load_data(args)
    baseline_path = Path(args.baseline_file) if args.baseline_file else None
    baseline = None
    if baseline_path is not None and (baseline_path.exists() or not args.save_baseline):
        baseline = load_baseline(baseline_path)
    with persist_folder(args.persist_dir) as folder:
        settings = eval_settings(
            folder,
            args.chunk_size,
            args.chunk_overlap,
            rag_vector_weight=args.vector_weight,
            rag_similarity_threshold=args.threshold,
        )
        cache = args.embedding_cache or (DEFAULT_CACHE_FILE if args.jsquad is not None else None)
        kb = await open_knowledge_base(data, settings, cache)
        try:
            report = await _run_queries(kb, data, args)
        finally:
            await kb.aclose()
    comparison = compare(report, baseline, args.regression_threshold) if baseline else None
    written = report.write(args.output_dir, comparison)
    _print_summary(report, comparison)
    print(f"Reports: {', '.join(str(p) for p in written)}")
    regressed = comparison is not None and comparison.regressed
    if args.save_baseline:
        if regressed and args.fail_on_regression:
            print("Baseline not saved: this run regressed.", file=sys.stderr)
        else:
            target = baseline_path or Path(args.output_dir) / BASELINE_NAME
            print(f"Baseline saved: {save_baseline(report, target)}")
    return EXIT_REGRESSION if regressed and args.fail_on_regression else EXIT_OK


async def _run_queries(
    kb: KnowledgeBase, data: EvalData, args: argparse.Namespace
) -> EvaluationReport:
    verdicts: dict[str, tuple[Evidence, list[str]]] = {}  # the rule's evidence, ranking

    async def retrieve(query: str, n_results: int) -> list[str]:
        result = await kb.retrieve(query, n_results)
        ranked = [hit.source_url for hit in result.hits]
        verdicts[query] = (Evidence(**result.evidence), ranked)
        return ranked

    s = kb.settings
    config = EvaluationConfig(
        dataset=data.label,
        n_results=args.n_results,
        k=args.n_results,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        vector_weight=args.vector_weight,
        threshold=args.threshold,
        extra={
            "documents": data.documents_label,
            "mode": "fused" if s.rag_hybrid_search_enabled else "vector",
            "embedding_model": s.embedding_model_name,
            "bm25_k1": s.rag_bm25_k1,
            "bm25_b": s.rag_bm25_b,
        },
    )
    with progress_bar("Evaluating", "query") as update:
        report = await evaluate_queries(
            retrieve, data.queries, args.n_results, config=config, progress=update
        )
    config.extra["no_match_cost"] = no_match_cost(data.queries, verdicts, s.rag_no_match_cutoff)
    declined = no_match_declined(data.queries, verdicts, s.rag_no_match_cutoff)
    config.extra["no_match_declined"] = declined
    return report


def no_match_cost(
    queries: Sequence[EvalQuery],
    verdicts: dict[str, tuple[Evidence, list[str]]],
    cutoff: float | None,
) -> dict[str, Any]:
    """What the no-match rule cost on this run's answerable queries: how many it declined
    at the configured cut-off and at each lower cut-off of `CUTOFF_GRID` (run with
    RAG_NO_MATCH_CUTOFF=10 to get every row), with how many of those had a relevant
    source first anyway."""
    answerable = _answerable(queries, verdicts)
    out: dict[str, Any] = {"answerable": len(answerable)}
    if cutoff is None:
        return out
    for t in (cutoff, *(t for t in CUTOFF_GRID if t < cutoff)):
        lost = _declined(answerable, verdicts, t)
        first = [q for q in lost if verdicts[q.query][1][:1] in ([s] for s in q.expected_sources)]
        out[f"cutoff {t:g}"] = {"declined": len(lost), "relevant_first": len(first)}
    return out


def no_match_declined(
    queries: Sequence[EvalQuery],
    verdicts: dict[str, tuple[Evidence, list[str]]],
    cutoff: float | None,
) -> list[dict[str, Any]]:
    """The answerable queries the no-match rule declined at `cutoff`, with the evidence
    that decided each (the first 50): what a change of the rule costs, by name."""
    answerable = _answerable(queries, verdicts)
    lost = _declined(answerable, verdicts, cutoff)
    return [{"query": q.query, **verdicts[q.query][0].to_dict()} for q in lost[:50]]


def _answerable(
    queries: Sequence[EvalQuery], verdicts: dict[str, tuple[Evidence, list[str]]]
) -> list[EvalQuery]:
    return [q for q in queries if q.expected_sources and q.query in verdicts]


def _declined(
    queries: Sequence[EvalQuery],
    verdicts: dict[str, tuple[Evidence, list[str]]],
    cutoff: float | None,
) -> list[EvalQuery]:
    return [q for q in queries if verdicts[q.query][0].declines(cutoff)]


def _print_summary(report: EvaluationReport, comparison: Comparison | None) -> None:
    k = report.config.k
    print(
        f"Evaluated {len(report.queries)} queries ({report.answerable_count} with expected "
        f"sources) on {report.config.dataset}: {report.config.describe()}"
    )
    print("  " + "  ".join(f"{metric_label(n, k)} {v:.4f}" for n, v in report.metrics.items()))
    if comparison is not None:
        verdict = "REGRESSION" if comparison.regressed else "no regression"
        print(f"Baseline comparison: {verdict}")
        for message in comparison.messages:
            print(f"  {message}")


# --- init-test-db ---------------------------------------------------------------
async def init_test_db(args: argparse.Namespace) -> int:
    _check_chunking(args.chunk_size, args.chunk_overlap)
    fixture = args.fixture or data_path(DOCUMENTS)
    documents = load_spec_documents(fixture)
    data = EvalData(documents, [], "", _label(fixture))
    settings = eval_settings(args.persist_dir, args.chunk_size, args.chunk_overlap)
    kb = await open_knowledge_base(data, settings, args.embedding_cache, verbose=False)
    try:
        stats = await kb.stats()
    finally:
        await kb.aclose()
    print(
        f"Test knowledge base ready in {args.persist_dir} (collection "
        f"{settings.rag_collection_name}): {len(stats.sources)} documents, "
        f"{stats.total_chunks} chunks."
    )
    return EXIT_OK


# --- sweep ----------------------------------------------------------------------
async def sweep(args: argparse.Namespace) -> int:
    from eval.sweep import SweepGrid, run_sweep, write_sweep

    data = load_data(args)
    defaults = load_settings()
    grid = SweepGrid(
        alphas=args.alphas,
        chunkings=args.chunkings or [(defaults.rag_chunk_size, defaults.rag_chunk_overlap)],
        k1s=args.k1 or [defaults.rag_bm25_k1],
        bs=args.b or [defaults.rag_bm25_b],
        n_results=args.n_results,
    )
    cache = args.embedding_cache or str(DEFAULT_CACHE_FILE)
    with persist_folder(args.persist_dir) as folder:
        result = await run_sweep(data.documents, data.queries, grid, folder, cache)
    default = result.find(
        (
            defaults.rag_chunk_size,
            defaults.rag_chunk_overlap,
            defaults.rag_bm25_k1,
            defaults.rag_bm25_b,
        ),
        defaults.rag_vector_weight,
    )
    csv_path, png_path = write_sweep(
        result,
        args.output_dir,
        title=args.title or f"Retrieval sweep on {data.label}",
        marked=default,
    )
    best = result.best()
    print(
        f"Best: {best.describe()} on {data.label} ({best.scores.queries} queries); "
        f"{result.reference_line(best)}"
    )
    if default is not None and default != best:
        print(f"Configured default: {default.describe()}")
    print(f"Sweep: {csv_path}, {png_path}")
    return EXIT_OK


COMMANDS = {"evaluate": evaluate, "init-test-db": init_test_db, "sweep": sweep}
