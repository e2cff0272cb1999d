"""Time `rag_read`'s whole-source text (`passages.reading_text`) against the way it was
built before (the text joined again at every chunk: time grows with the square of the
source), on synthetic sources of overlapping chunks; checks both give the same text.

    python bench/reading_text.py [--chunks 1000,5000] [--rounds 3]

With `--store CHROMA_DIR --bm25 BM25_DIR [--collection NAME]` it also pages through the
store's largest source with `read_source` (a copy of the store: opening it may repair
it): the first page reads the chunks from Chroma, the next ones reuse them.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Sequence

from rag_app.passages import join_chunks, last_heading, reading_text, section_heading

Piece = tuple[int, str, str, int]


def quadratic(pieces: Sequence[Piece]) -> str:
    """The text as it was built before: every join copies all of it."""
    text, last_path, heading_line = "", None, ""
    for _, chunk, path, level in sorted(pieces, key=lambda p: p[0]):
        if path != last_path:
            heading = last_heading(path)
            block = chunk
            if heading and not chunk.lstrip().startswith("#"):
                block = f"{'#' * max(1, min(level, 6))} {heading}\n{chunk}"
            text = f"{text}\n\n{block}" if text else block
            last_path, heading_line = path, section_heading(block)
        else:
            text = join_chunks(text, chunk, heading_line)
    return text


def source(chunks: int, seed: int = 7) -> list[Piece]:
    """Chunks of ~420 characters repeating the last 50 of the one before, a new section
    every 20 chunks (as the chunker cuts prose)."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)] + ["設定", "手順", "表示", "ファイル"]
    pieces: list[Piece] = []
    previous = ""
    for i in range(chunks):
        section = i // 20
        body = " ".join(rng.choice(words) for _ in range(70))
        text = (previous[-50:] + " " + body) if i % 20 else body
        pieces.append((i, text, f"Guide > Part {section // 10} > Section {section}", 3))
        previous = text
    return pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="1000,5000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store", help="a Chroma folder (a copy) to page through")
    parser.add_argument("--bm25", help="its BM25 folder")
    parser.add_argument("--collection", default="knowledge")
    args = parser.parse_args()
    if args.store:
        asyncio.run(pages(args.store, args.bm25, args.collection))
    print("| chunks | characters | before (s) | now (s) | now ÷ before |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in (int(x) for x in args.chunks.split(",")):
        pieces = source(n)
        before = now = float("inf")
        for _ in range(args.rounds):
            t = time.perf_counter()
            old = quadratic(pieces)
            before = min(before, time.perf_counter() - t)
            t = time.perf_counter()
            new, _paths = reading_text(pieces)
            now = min(now, time.perf_counter() - t)
            assert new == old, "the text changed"
        print(f"| {n:,} | {len(new):,} | {before:.3f} | {now:.3f} | {now / before:.3f} |")


async def pages(store: str, bm25: str, collection: str, count: int = 6) -> None:
    """Time `read_source` page by page on the store's largest source."""
    from rag_app.config import load_settings
    from rag_app.knowledge import KnowledgeBase

    settings = load_settings(
        chromadb_persist_dir=store,
        bm25_persist_dir=bm25,
        rag_collection_name=collection,
        rag_max_chunks_per_source=5000,
    )
    kb = KnowledgeBase(settings)
    await kb.open()
    try:
        stats = await kb.stats()
        source = max(stats.source_chunks, key=stats.source_chunks.__getitem__)
        times = []
        for i in range(count):
            t = time.perf_counter()
            await kb.read_source(source, offset=i * 4000)
            times.append(time.perf_counter() - t)
        later = statistics.median(times[1:])
        print(
            f"{source} ({stats.source_chunks[source]:,} chunks): first page "
            f"{times[0] * 1000:.1f} ms, the next {count - 1} median {later * 1000:.1f} ms "
            f"(next ÷ first {later / times[0]:.3f})"
        )
    finally:
        await kb.aclose()


if __name__ == "__main__":
    main()
