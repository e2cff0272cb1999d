"""What an embedded Chroma upsert costs per chunk, by what the chunk carries.

Not a test. Upserts the same 2,000 random unit vectors, 20 per call (a page's worth),
into fresh embedded collections: vectors only, then with the chunk text as a document,
with metadata only, with both, with the text in metadata instead of a document, with
Chroma's default HNSW settings instead of ours, with the full-text index on documents
switched off in the collection's schema, with the Japanese text written as ASCII escapes
(`rag_app.index.stored_text`, as chunks are stored now) and with English text of the same
length. Prints wall and CPU time per chunk and each row's ratio to "vectors only"
measured in the same run.

    python bench/chroma_write_cost.py [--chunks 2000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
from chromadb import Schema
from chromadb.api.types import FtsIndexConfig, HnswIndexConfig, VectorIndexConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rag_app.index import stored_text
from rag_app.index.chroma_store import HNSW_BUILD

TEXT = "これはテストの文章です。チャンクの本文はおよそ二百文字程度になります。" * 4
ENGLISH = ("This is a test sentence; a chunk's text is about two hundred characters. " * 3)[
    : len(TEXT)
]
PER_CALL = 20


def metadata(j: int, text: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "source_url": f"https://example.test/p{j // PER_CALL}",
        "title": "タイトル",
        "heading": "見出し > 小見出し",
        "chunk_index": j % PER_CALL,
    }
    if text:
        meta["text"] = f"{TEXT}{j}"
    return meta


def run(
    vectors: np.ndarray,
    *,
    docs: bool,
    meta: bool,
    text_in_meta: bool = False,
    hnsw: dict[str, Any] | None = None,
    schema: Schema | None = None,
    text: str = TEXT,
    escaped: bool = False,
) -> tuple[float, float]:
    client = chromadb.PersistentClient(path=tempfile.mkdtemp(prefix="chroma-cost-"))
    if schema is not None:
        col = client.get_or_create_collection("cost", schema=schema, embedding_function=None)
    else:
        config = {"hnsw": hnsw if hnsw is not None else dict(HNSW_BUILD)}
        col = client.get_or_create_collection("cost", configuration=config, embedding_function=None)  # type: ignore[arg-type]
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for i in range(0, len(vectors), PER_CALL):
        ids = [str(j) for j in range(i, i + PER_CALL)]
        kwargs: dict[str, Any] = {"ids": ids, "embeddings": vectors[i : i + PER_CALL]}
        if docs:
            docs_ = [f"{text}{j}" for j in range(i, i + PER_CALL)]
            kwargs["documents"] = [stored_text.encode(d) for d in docs_] if escaped else docs_
        if meta or text_in_meta:
            kwargs["metadatas"] = [metadata(j, text_in_meta) for j in range(i, i + PER_CALL)]
        col.upsert(**kwargs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall * 1000 / len(vectors), cpu * 1000 / len(vectors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.chunks // PER_CALL * PER_CALL, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    no_fts = Schema()
    no_fts.delete_index(FtsIndexConfig(), key="#document")
    no_fts.create_index(
        VectorIndexConfig(
            space="cosine",
            hnsw=HnswIndexConfig(
                ef_construction=HNSW_BUILD["ef_construction"],
                max_neighbors=HNSW_BUILD["max_neighbors"],
            ),
        )
    )
    stored = {"docs": True, "meta": True}
    rows: list[tuple[str, dict[str, Any]]] = [
        ("vectors only", {"docs": False, "meta": False}),
        ("+ text as document", {"docs": True, "meta": False}),
        ("+ metadata", {"docs": False, "meta": True}),
        ("+ document + metadata (as stored)", stored),
        ("+ text in metadata, no document", {"docs": False, "meta": True, "text_in_meta": True}),
        ("as stored, Chroma's default HNSW", {**stored, "hnsw": {"space": "cosine"}}),
        ("as stored, FTS index off in the schema", {**stored, "schema": no_fts}),
        ("as stored now: Japanese text escaped", {**stored, "escaped": True}),
        ("as stored, English text of the same length", {**stored, "text": ENGLISH}),
    ]
    base = None
    for label, kwargs in rows:
        wall, cpu = run(vectors, **kwargs)
        base = base or wall
        print(f"{label:42s} wall {wall:5.2f} ms/chunk, CPU {cpu:5.2f} ms/chunk, "
              f"× vectors only {wall / base:4.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
