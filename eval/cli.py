"""The `rag-eval` command: evaluate, init-test-db and sweep.

Exit codes: 0 success; 1 a regression against the baseline with `--fail-on-regression`;
2 anything the user has to fix (bad dataset, baseline or option, store unavailable);
130 interrupted. Errors are one line on stderr, never a traceback. Only the parser
lives here; the commands (`eval.commands`) and their heavy imports load after it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from eval.data import DOCUMENTS, QUESTIONS
from eval.defaults import (
    BASELINE_NAME,
    DEFAULT_CACHE_FILE,
    DEFAULT_OUTPUT_DIR,
    DEFAULT_REGRESSION_THRESHOLD,
    DEFAULT_SWEEP_DIR,
    DEFAULT_TEST_DB,
)
from rag_app.console import VersionAction, guarded

EXIT_ERROR = 2  # anything the user has to fix


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
        help=f"evaluation queries JSON (default: the bundled {QUESTIONS})",
    )
    p.add_argument(
        "--fixture",
        default=None,
        help=f"documents to index, JSON (default: the bundled {DOCUMENTS})",
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
    parser.add_argument("--version", action=VersionAction)
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
    p.add_argument(
        "--fixture", default=None, help=f"documents to index (default: the bundled {DOCUMENTS})"
    )
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


# --- entry points -----------------------------------------------------------------
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
    return guarded(lambda: _execute(args))


def _execute(args: argparse.Namespace) -> int:
    """Import the commands (LlamaIndex, the knowledge base) and run the chosen one."""
    import asyncio

    from eval.commands import COMMANDS
    from rag_app.config import SettingsError
    from rag_app.errors import RAGError

    try:
        return asyncio.run(COMMANDS[args.command](args))
    except (RAGError, SettingsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> None:
    """Console script `rag-eval`: exits with `run`'s code."""
    raise SystemExit(run(argv))


if __name__ == "__main__":
    main()
