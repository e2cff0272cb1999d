"""What code names and English stems cost the BM25 tokenizer, against it without them.

Not a test. Cuts text files into chunk-sized pieces and tokenizes every piece, rounds
interleaved in one process, with the shipped tokenizer and with `code_names` and `stem`
switched off (the tokenizer before they came in). Prints µs per piece and the ratio.
Defaults to the evaluation sets' table pages and the bundled samples; give any folders
or files (a documentation site's HTML, say) to measure on them:

    python bench/tokenizer_cost.py [PATH ...] [--rounds 5] [--chars 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_app.index import tokenizer  # noqa: E402

DEFAULT_PATHS = [
    ROOT / "eval" / "sets" / "ja-tables" / "pages",
    ROOT / "eval" / "sets" / "en-tables" / "pages",
    ROOT / "rag_app" / "data" / "samples",
]


BLOCK = 20
"""Pieces timed together before switching tokenizers."""


def pieces_of(paths: list[Path], chars: int) -> list[str]:
    files = [f for p in paths for f in (sorted(p.rglob("*")) if p.is_dir() else [p])]
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files if f.is_file()]
    return [t[i : i + chars] for t in texts for i in range(0, len(t), chars)]


def run(tok: Callable[[str], list[str]], pieces: list[str]) -> float:
    start = time.perf_counter()
    for piece in pieces:
        tok(piece)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chars", type=int, default=200)
    args = ap.parse_args()
    pieces = pieces_of(args.paths or DEFAULT_PATHS, args.chars)
    tok = tokenizer.JapaneseTokenizer()
    shipped_code_names, shipped_stem = tokenizer.code_names, tokenizer.stem

    def without(text: str) -> list[str]:
        tokenizer.code_names, tokenizer.stem = (lambda _t: []), (lambda w: w)
        try:
            return tok(text)
        finally:
            tokenizer.code_names, tokenizer.stem = shipped_code_names, shipped_stem

    run(tok, pieces[:200])
    times: dict[str, list[float]] = {"shipped": [], "without": []}
    blocks = [pieces[i : i + BLOCK] for i in range(0, len(pieces), BLOCK)]
    for r in range(args.rounds):
        spent = {"shipped": 0.0, "without": 0.0}
        for k, block in enumerate(blocks):  # alternated block by block: drifts cancel
            order = [("shipped", tok), ("without", without)]
            for name, fn in order if (k + r) % 2 else order[::-1]:
                spent[name] += run(fn, block)
        for name, total in spent.items():
            times[name].append(total)
    us = {k: 1e6 * statistics.median(v) / len(pieces) for k, v in times.items()}
    print(f"{len(pieces)} pieces of ≤ {args.chars} characters, {args.rounds} rounds")
    print(f"without code names and stems: {us['without']:.1f} µs per piece (median)")
    print(f"shipped:                      {us['shipped']:.1f} µs per piece (median)")
    print(f"ratio shipped / without = {us['shipped'] / us['without']:.3f}")


if __name__ == "__main__":
    main()
