"""How long one big write to Chroma stops every other thread of the process.

Not a test. Chroma's embedded client holds the GIL for the whole of a call, so while a
crawl writes a big page, a search thread in the same process cannot run. This writes one
page of N chunks into a 2,000-chunk collection, in one call (the baseline) and in slices
of `WRITE_SLICE` (what the store does), while a thread ticks every 1 ms; it prints the
write time and the longest gap between ticks, and their ratios to the baseline.

    python bench/write_stall.py [--chunks 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import chromadb
import numpy as np
from llama_index.core.schema import TextNode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rag_app.index.chroma_store as chroma_store


def one_write(slice_: int, chunks: int, rng: np.random.Generator) -> tuple[float, float]:
    """(write seconds, longest stall of another thread in seconds)."""
    chroma_store.WRITE_SLICE = slice_
    with tempfile.TemporaryDirectory() as tmp:
        client = chromadb.PersistentClient(path=tmp)
        store = chroma_store.ChromaStore(client, "bench_stall", model_name="m", dimension=384)

        def nodes(prefix: str, n: int, source: str) -> list[TextNode]:
            vectors = rng.standard_normal((n, 384)).astype(np.float32)
            return [
                TextNode(
                    id_=f"{prefix}{i}",
                    text="本文 " * 60,
                    embedding=vectors[i].tolist(),
                    metadata={"source_url": source},
                )
                for i in range(n)
            ]

        store.upsert_nodes(nodes("base", 2000, "base"))
        page = nodes("page", chunks, "big")
        gaps: list[float] = []
        stop = threading.Event()

        def ticker() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        thread = threading.Thread(target=ticker)
        thread.start()
        time.sleep(0.1)
        t0 = time.perf_counter()
        store.upsert_nodes(page)
        took = time.perf_counter() - t0
        stop.set()
        thread.join()
        return took, max(gaps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    sliced = chroma_store.WRITE_SLICE
    rng = np.random.default_rng(0)
    for r in range(args.rounds):
        base_t, base_stall = one_write(args.chunks, args.chunks, rng)
        t, stall = one_write(sliced, args.chunks, rng)
        print(
            f"round {r + 1}: one call {base_t:.2f} s, stall {base_stall * 1000:.0f} ms | "
            f"slices of {sliced}: {t:.2f} s, stall {stall * 1000:.0f} ms | "
            f"ratio write {t / base_t:.2f}, stall {stall / base_stall:.2f}"
        )


if __name__ == "__main__":
    main()
