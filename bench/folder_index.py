"""Index a folder of real files with the builtin model, against the embedder's own
throughput on the same chunks.

Not a test. Copies the files under a folder whose size is at most `--max-bytes` (e.g.
the small pages of a Debian package's manual sources: a folder of notes) to a temporary
folder, indexes it into a fresh store with `KnowledgeBase.index_dir` and times it, summing
each stage's busy time as `bench/site_crawl.py` does (parse, embed, store); then embeds
the very texts the index embedded, alone, in full batches, and prints index ÷ embedder
and the share of embedding calls per batch size.

    python bench/folder_index.py /usr/share/doc/python3.11/html/_sources --max-bytes 4096

`--load N` runs N busy processes beside it (a loaded machine), as `bench/site_crawl.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from site_crawl import BUSY, EMBEDDED, ROOT, busy_processes, embed_alone, instrument

sys.path.insert(0, str(ROOT))

from rag_app.config import load_settings
from rag_app.embedding import builtin
from rag_app.knowledge import KnowledgeBase

SUFFIXES = {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx"}
CALL_SIZES: Counter[int] = Counter()


def copy_small(source: Path, target: Path, max_bytes: int, limit: int) -> int:
    """Copy up to `limit` files of at most `max_bytes` (in name order); returns how many."""
    files = sorted(
        p
        for p in source.rglob("*")
        if p.is_file() and p.suffix in SUFFIXES and p.stat().st_size <= max_bytes
    )[:limit]
    for at, path in enumerate(files):
        shutil.copyfile(path, target / f"{at:05d}-{path.name}")
    return len(files)


def count_calls() -> None:
    real = builtin.BuiltinE5Embedding._encode

    def encode(self: Any, texts: Any, is_query: bool) -> Any:
        if not is_query:
            CALL_SIZES[len(texts)] += 1
        return real(self, texts, is_query)

    builtin.BuiltinE5Embedding._encode = encode  # type: ignore[method-assign]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="folder-index-"))
    folder = work / "notes"
    folder.mkdir()
    files = copy_small(Path(args.folder), folder, args.max_bytes, args.max_files)
    settings = load_settings(
        _env_file=None,
        chromadb_persist_dir=str(work / "chroma"),
        bm25_persist_dir=str(work / "bm25"),
    )
    kb = KnowledgeBase(settings)
    await kb.open()
    begin = time.perf_counter()
    summary = await kb.index_dir(folder)
    wall = time.perf_counter() - begin
    busy = dict(BUSY)
    texts = list(EMBEDDED)
    await kb.aclose()
    shutil.rmtree(work, ignore_errors=True)
    alone = embed_alone(texts) if texts else 0.0
    calls = sum(CALL_SIZES.values())
    return {
        "folder": args.folder,
        "files": files,
        "added": summary.added,
        "failed": summary.failed,
        "chunks_embedded": len(texts),
        "index_wall_s": round(wall, 1),
        "files_per_s": round(files / wall, 2),
        "busy_s": {k: round(v, 1) for k, v in busy.items()},
        "embedder_alone_s": round(alone, 1),
        "index_vs_embedder": round(alone / wall, 3) if alone else None,
        "embedding_calls": calls,
        "texts_per_call": round(len(texts) / calls, 1) if calls else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder of documents (searched recursively)")
    parser.add_argument("--max-bytes", type=int, default=4096, help="largest file taken")
    parser.add_argument("--max-files", type=int, default=500)
    parser.add_argument("--load", type=int, default=0, help="busy processes beside it")
    args = parser.parse_args()
    instrument()
    count_calls()
    with busy_processes(args.load):
        report = asyncio.run(run(args))
    print(json.dumps({**report, "load_processes": args.load}, indent=2))


if __name__ == "__main__":
    main()
