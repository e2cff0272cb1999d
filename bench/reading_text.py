"""Time `rag_read`'s whole-source text (`passages.reading_text`) against the way it was
built before (the text joined again at every chunk: time grows with the square of the
source), on synthetic sources of overlapping chunks; checks both give the same text.

    python bench/reading_text.py [--chunks 1000,5000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
