"""The `rag-eval` command: evaluate, init-test-db and sweep.

Exit codes: 0 success; 1 a regression against the baseline with `--fail-on-regression`;
2 anything the user has to fix (bad dataset, baseline or option, store unavailable).
Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from llama_index.core.base.embeddings.base import BaseEmbedding

from eval.baseline import (
    DEFAULT_REGRESSION_THRESHOLD,
    Comparison,
    compare,
    load_baseline,
    save_baseline,
)
from eval.datasets import (
    EvalDocument,
    EvalQuery,
    find_jsquad_dir,
    load_jsquad,
    load_spec_dataset,
    load_spec_documents,
    unknown_sources,
)
from eval.embedding_cache import DEFAULT_CACHE_FILE, CachedEmbedding
from eval.knowledge_builder import build_knowledge_base, eval_settings
from eval.progress import progress_bar
from eval.report import EvaluationConfig, EvaluationReport, metric_label
from eval.runner import evaluate_queries
from rag_app.config import RAGSettings, SettingsError, load_settings
from rag_app.embeddings import get_embed_model
from rag_app.errors import RAGError
from rag_app.knowledge import KnowledgeBase

DEFAULT_DATASET = "tests/fixtures/rag_evaluation_dataset.json"
DEFAULT_FIXTURE = "tests/fixtures/rag_test_documents.json"
DEFAULT_OUTPUT_DIR = ".tmp/rag-evaluation"
DEFAULT_TEST_DB = ".tmp/test_chroma_db"
DEFAULT_SWEEP_DIR = ".tmp/rag-sweep"
BASELINE_NAME = "baseline.json"
EXIT_OK, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2
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


# --- argument types -----------------------------------------------------------
def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _weight(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0.0 and 1.0, got {text}")
    return value


def _distance(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError(f"must be a cosine distance between 0 and 2, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _float_list(text: str) -> list[float]:
    """`0,0.5,1` or a range `0:1:0.1` (start:stop:step, stop included)."""
    try:
        if ":" in text:
            start, stop, step = (float(p) for p in text.split(":"))
            if step <= 0:
                raise ValueError
            count = round((stop - start) / step) + 1
            return [round(start + i * step, 6) for i in range(max(count, 0))]
        return [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a comma list (0.3,0.5) nor a range start:stop:step (0:1:0.1)"
        ) from None


def _alphas(text: str) -> list[float]:
    values = _float_list(text)
    bad = [v for v in values if not 0.0 <= v <= 1.0]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"alpha values must lie within 0..1, got {text!r}")
    return values


def _k1_values(text: str) -> list[float]:
    values = _float_list(text)
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"k1 values must be 0 or more, got {text!r}")
    return values


def _b_values(text: str) -> list[float]:
    values = _float_list(text)
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError(f"b values must lie within 0..1, got {text!r}")
    return values


def _chunkings(text: str) -> list[tuple[int, int]]:
    """`200:30,400:50`: chunk size and overlap pairs."""
    pairs: list[tuple[int, int]] = []
    for part in text.split(","):
        try:
            size, overlap = (int(p) for p in part.split(":"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not SIZE:OVERLAP (e.g. 200:30,400:50)"
            ) from None
        if size < 1 or not 0 <= overlap < size:
            raise argparse.ArgumentTypeError(
                f"{part!r}: the overlap must be at least 0 and smaller than the size"
            )
        pairs.append((size, overlap))
    return pairs


# --- parser -------------------------------------------------------------------
def _add_data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        default=None,
        help=f"evaluation queries JSON (default {DEFAULT_DATASET})",
    )
    p.add_argument(
        "--fixture",
        default=None,
        help=f"documents to index, JSON (default {DEFAULT_FIXTURE})",
    )
    p.add_argument(
        "--jsquad",
        metavar="DIR",
        nargs="?",
        const="",
        default=None,
        help="use a corpus.jsonl + queries.jsonl folder instead (JSQuAD); without DIR, "
        "RAG_EVAL_DATA_DIR or ../shared/eval-data/jsquad-valid",
    )
    p.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        help="with --jsquad: evaluate this many queries spread over the file",
    )
    p.add_argument(
        "--embedding-cache",
        metavar="FILE",
        default=None,
        help="keep passage and query vectors in this SQLite file between runs "
        f"(default with --jsquad and for sweep: {DEFAULT_CACHE_FILE})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `rag-eval` argument parser."""
    parser = argparse.ArgumentParser(
        prog="rag-eval", description="Evaluate retrieval quality of the knowledge base."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("evaluate", help="run the dataset's queries and write a report")
    p.add_argument("--chunk-size", type=_positive_int, required=True)
    p.add_argument("--chunk-overlap", type=_non_negative_int, required=True)
    p.add_argument("--vector-weight", type=_weight, required=True, help="alpha, 0.0..1.0")
    _add_data_options(p)
    p.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR)
    p.add_argument("--baseline-file", default=None, help="baseline JSON to compare with")
    p.add_argument("--n-results", type=_positive_int, default=5)
    p.add_argument("--threshold", type=_distance, default=None, help="cosine distance cut")
    p.add_argument("--persist-dir", default=None, help="Chroma/BM25 folder (default: a temp dir)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 on regression")
    p.add_argument(
        "--regression-threshold",
        type=_non_negative_float,
        default=DEFAULT_REGRESSION_THRESHOLD,
        help="allowed drop of F1, nDCG or MRR",
    )
    p.add_argument(
        "--save-baseline",
        action="store_true",
        help=f"save this run as the baseline (--baseline-file, else OUTPUT_DIR/{BASELINE_NAME})",
    )

    p = sub.add_parser("init-test-db", help="build the test knowledge base from the fixture")
    p.add_argument("--chunk-size", type=_positive_int, required=True)
    p.add_argument("--chunk-overlap", type=_non_negative_int, required=True)
    p.add_argument("--persist-dir", default=DEFAULT_TEST_DB)
    p.add_argument("--fixture", default=DEFAULT_FIXTURE)
    p.add_argument("--embedding-cache", metavar="FILE", default=None)

    p = sub.add_parser("sweep", help="grid over alpha (and chunking, k1, b): CSV + plot")
    _add_data_options(p)
    p.add_argument("--alphas", type=_alphas, default=_alphas("0:1:0.1"), help="default 0:1:0.1")
    p.add_argument(
        "--chunkings",
        type=_chunkings,
        default=None,
        help="SIZE:OVERLAP list (default RAG_CHUNK_SIZE:RAG_CHUNK_OVERLAP)",
    )
    p.add_argument("--k1", type=_k1_values, default=None, help="BM25 k1 values (RAG_BM25_K1)")
    p.add_argument("--b", type=_b_values, default=None, help="BM25 b values (RAG_BM25_B)")
    p.add_argument("--n-results", type=_positive_int, default=10, help="chunks per query")
    p.add_argument("--output-dir", default=DEFAULT_SWEEP_DIR)
    p.add_argument("--persist-dir", default=None, help="Chroma/BM25 folder (default: temp)")
    p.add_argument("--title", default=None, help="plot title")
    return parser


# --- shared helpers -------------------------------------------------------------
def _label(path: str) -> str:
    """A path as reports show it: relative to the repository when inside it."""
    resolved = Path(path).resolve()
    for root in (Path.cwd().resolve(), _REPO_ROOT):
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
    dataset = args.dataset or DEFAULT_DATASET
    fixture = args.fixture or DEFAULT_FIXTURE
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
async def _evaluate(args: argparse.Namespace) -> int:
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
    async def retrieve(query: str, n_results: int) -> list[str]:
        result = await kb.retrieve(query, n_results)
        return [hit.source_url for hit in result.hits]

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
        return await evaluate_queries(
            retrieve, data.queries, args.n_results, config=config, progress=update
        )


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
async def _init_test_db(args: argparse.Namespace) -> int:
    _check_chunking(args.chunk_size, args.chunk_overlap)
    documents = load_spec_documents(args.fixture)
    data = EvalData(documents, [], "", _label(args.fixture))
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
async def _sweep(args: argparse.Namespace) -> int:
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


# --- entry points -----------------------------------------------------------------
COMMANDS = {"evaluate": _evaluate, "init-test-db": _init_test_db, "sweep": _sweep}


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("rag_app").setLevel(logging.INFO if verbose else logging.WARNING)


def run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the command, return the exit code (errors: one line on stderr)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    _configure_logging(args.verbose)
    try:
        return asyncio.run(COMMANDS[args.command](args))
    except (RAGError, SettingsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> None:
    """Console script `rag-eval`: exits with `run`'s code."""
    raise SystemExit(run(argv))
