"""What matching row keys at one edit costs a BM25 search, against exact keys only.

Not a test. Opens a BM25 folder built by `python -m eval.row_lookup` (or any store's
`BM25_PERSIST_DIR`) and times every question of a set, interleaved, with the one-edit key
match (`rag_app/index/key_typos.py`) and with exact keys only, in the same process:

    python -m eval.row_lookup eval/sets/ja-tables --persist-dir .tmp/rl-ja
    python bench/key_typos.py .tmp/rl-ja/bm25-rows-ja-tables eval/sets/ja-tables/queries.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_app.index import key_typos  # noqa: E402
from rag_app.index.bm25_index import BM25Index  # noqa: E402


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[int(share * (len(ordered) - 1))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bm25_dir")
    parser.add_argument("queries", help="a JSONL file with a `query` per line")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    index = BM25Index(args.bm25_dir)
    lines = Path(args.queries).read_text(encoding="utf-8").splitlines()
    queries = [json.loads(line)["query"] for line in lines if line.strip()]
    one_edit = key_typos.KeyVariants.matches

    def exact_only(
        self: key_typos.KeyVariants,
        query: str,
        terms: Sequence[str],
        exact: Sequence[str],
        known: object = None,
    ) -> list[str]:
        return list(exact)

    for query in queries:  # warm: the variants are built on the first search
        index.search(query, 10)
    index._keys.join()  # a large vocabulary is indexed in the background
    timed: dict[str, list[float]] = {"one-edit keys": [], "exact keys only": []}
    for _ in range(args.rounds):
        for query in queries:
            for label, rule in (("one-edit keys", one_edit), ("exact keys only", exact_only)):
                key_typos.KeyVariants.matches = rule  # type: ignore[method-assign]
                start = time.perf_counter()
                index.search(query, 10)
                timed[label].append(time.perf_counter() - start)
    key_typos.KeyVariants.matches = one_edit  # type: ignore[method-assign]
    on, off = timed["one-edit keys"], timed["exact keys only"]
    print(
        f"{len(index)} chunks, {len(queries)} questions × {args.rounds}: BM25 search p50 / p95 "
        f"{percentile(on, 0.5):.3f} / {percentile(on, 0.95):.3f} ms with one-edit keys, "
        f"{percentile(off, 0.5):.3f} / {percentile(off, 0.95):.3f} ms with exact keys only; "
        f"ratio p50 {percentile(on, 0.5) / percentile(off, 0.5):.2f}"
    )


if __name__ == "__main__":
    main()
