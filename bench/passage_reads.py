"""How many Chroma reads a search with passages costs, and how long they take, on a real
documentation store: the shipped way (the hits' neighbours read with the hits, the rest
found by dry runs and read in batches) against reading each passage window as it is met.

Not a test. Uses the store an answer evaluation built (run it first, e.g.
`python -m eval.answer_eval eval/sets/docs-py --persist-dir .tmp/ae-py`), copied to a
temporary folder. Every question of the set is asked with the shipped defaults, both
ways in turn, `--rounds` times; the answers must be identical. Prints reads and chunks
read per search, and the p50 of the hit fetch + passage steps, each way and their
ratio; a third way drops the kept chunk orders before every search (a store whose pages
are all new to it).

    python bench/passage_reads.py eval/sets/docs-py .tmp/ae-py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eval.answer_eval import _settings  # noqa: E402
from mcp_server.formatting import format_search  # noqa: E402
from rag_app import passages  # noqa: E402
from rag_app.index.chroma_store import ChromaStore  # noqa: E402
from rag_app.knowledge import KnowledgeBase  # noqa: E402

COUNTED = ("get_nodes", "nodes_and_sections", "section_chunks", "get_sources")


@contextmanager
def counting(reads: Counter[str]) -> Iterator[None]:
    """Count Chroma reads (chunks and source records) and the chunks they return."""
    originals = {name: getattr(ChromaStore, name) for name in COUNTED}

    def wrap(name: str) -> Any:
        def counted(self: ChromaStore, *args: Any, **kwargs: Any) -> Any:
            out = originals[name](self, *args, **kwargs)
            reads["reads"] += 1
            reads["chunks"] += (
                len(out[0]) + len(out[1]) if name == "nodes_and_sections" else len(out)
            )
            return out

        return counted

    for name in COUNTED:
        setattr(ChromaStore, name, wrap(name))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(ChromaStore, name, fn)


@contextmanager
def read_as_met(kb: KnowledgeBase) -> Iterator[None]:
    """The baseline: nothing read with the hits, no dry runs, each hit's window asked
    `FIRST_REACH` wide first."""
    dry_runs = passages.DRY_RUNS
    passages.DRY_RUNS = 0
    kb._first_reaches = lambda settings, limit: [passages.FIRST_REACH] * limit  # type: ignore[method-assign]
    store = type(kb.store)
    nodes_near = store.nodes_near
    store.nodes_near = lambda self, ids, reaches=(): nodes_near(self, ids, ())  # type: ignore[method-assign]
    try:
        yield
    finally:
        passages.DRY_RUNS = dry_runs
        store.nodes_near = nodes_near  # type: ignore[method-assign]
        del kb._first_reaches


async def run(set_dir: Path, store: Path, rounds: int) -> None:
    site = json.loads((set_dir / "site.json").read_text(encoding="utf-8"))
    questions = [
        json.loads(line)["query"]
        for line in (set_dir / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        shutil.copytree(store, work)
        kb = KnowledgeBase(_settings(work, set_dir.name, site.get("settings", {})))
        await kb.open()
        for q in questions:  # warm: model, caches, the chunk orders of every page
            await kb.retrieve(q)
        ways = ("shipped", "shipped, chunk orders not kept", "read as met")
        stats: dict[str, dict[str, list[float]]] = {way: {} for way in ways}
        answers: dict[str, list[str]] = {way: [] for way in ways}
        for _ in range(rounds):
            for way in stats:
                reads: Counter[str] = Counter()
                with counting(reads), read_as_met(kb) if way == "read as met" else _nothing():
                    for q in questions:
                        if way == "shipped, chunk orders not kept":
                            kb.store.chroma.orders.clear()
                        result = await kb.retrieve(q)
                        ms = result.timings.get("fetch_nodes", 0) + result.timings.get(
                            "passages", 0
                        )
                        stats[way].setdefault("ms", []).append(ms)
                        answers[way].append(format_search(result))
                stats[way].setdefault("reads", []).append(reads["reads"] / len(questions))
                stats[way].setdefault("chunks", []).append(reads["chunks"] / len(questions))
        await kb.aclose()
    same = all(answers[way] == answers["shipped"] for way in ways)
    print(
        f"{set_dir.name}: {len(questions)} questions × {rounds} rounds; answers identical: {same}"
    )
    print("| way | reads / search | chunks read / search | fetch + passages p50 (ms) |")
    print("|---|---|---|---|")
    for way, s in stats.items():
        print(
            f"| {way} | {statistics.mean(s['reads']):.2f} | {statistics.mean(s['chunks']):.1f} "
            f"| {statistics.median(s['ms']):.2f} |"
        )
    base = statistics.median(stats["read as met"]["ms"])
    for way in ways[:2]:
        print(f"{way} / read as met, p50: {statistics.median(stats[way]['ms']) / base:.2f}")
    if not same:
        sys.exit(1)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("set_dir", type=Path)
    ap.add_argument("store", type=Path, help="an answer evaluation's --persist-dir")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    asyncio.run(run(args.set_dir, args.store, args.rounds))


if __name__ == "__main__":
    main()
