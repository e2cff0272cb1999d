"""What a chunk's metadata costs Chroma: reads, queries and writes of the same chunks
with LlamaIndex's full flat layout, with the flat keys this project keeps, and with those
keys and a node JSON whose relationships carry no copy of the related node's metadata.

Not a test. Copies the chunks (text, metadata, embeddings) of an existing store into
collections of a temporary embedded Chroma, one per layout: every flat key LlamaIndex
writes (15 for this project's chunks; only when the store was written with them),
`stored_text.ascii_metadata`'s keys only, and those keys with each relationship in the
node JSON (`_node_content`) kept to the related node's id, type and hash, as
`ingest_transforms.AssignStableIds` writes them now. Then times, alternating the layouts
and in the same run: reads of 10 / 50 / 100 chunks by id, a 30-hit vector query, and
writes of 64 chunks at a time.

    python bench/chunk_metadata_cost.py STORE_DIR COLLECTION [--chunks 6000] [--rounds 2]

e.g. the answer set's store: `python -m eval.answer_eval eval/sets/docs-py
--persist-dir .tmp/ae-py`, then `python bench/chunk_metadata_cost.py .tmp/ae-py/store
answers-docs-py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chromadb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rag_app.index.stored_text import FLAT_KEYS

Layout = Callable[[dict[str, Any]], dict[str, Any]]


def _kept(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k in FLAT_KEYS or k.startswith(("_node_", "rag_"))}


def _full(meta: dict[str, Any]) -> dict[str, Any]:
    return meta


def _links_by_id(meta: dict[str, Any]) -> dict[str, Any]:
    kept = _kept(meta)
    if "_node_content" in kept:
        node = json.loads(kept["_node_content"])
        for kind, info in node.get("relationships", {}).items():
            for one in info if isinstance(info, list) else [info]:
                one["metadata"] = {}
            node["relationships"][kind] = info
        kept["_node_content"] = json.dumps(node)
    return kept


def _median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("collection")
    parser.add_argument("--chunks", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    source = chromadb.PersistentClient(args.store).get_collection(args.collection)
    got = source.get(limit=args.chunks, include=["documents", "metadatas", "embeddings"])
    full_meta = [dict(m or {}) for m in got["metadatas"]]
    layouts: dict[str, Layout] = {"LlamaIndex full layout": _full}
    if not any(len(m) > len(_kept(m)) for m in full_meta):
        print("(these chunks carry no more keys than the kept layout: no full layout)")
        layouts = {}
    layouts |= {"kept keys": _kept, "kept keys, links by id": _links_by_id}
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        client = chromadb.PersistentClient(tmp)
        write_ms: dict[str, list[float]] = {name: [] for name in layouts}
        for i, (name, layout) in enumerate(layouts.items()):
            col = client.create_collection(f"layout-{i}", metadata={"hnsw:space": "cosine"})
            for start in range(0, len(got["ids"]), 64):
                part = slice(start, start + 64)
                metas = [layout(m) for m in full_meta[part]]
                t = time.perf_counter()
                col.upsert(
                    ids=got["ids"][part],
                    embeddings=got["embeddings"][part],
                    documents=got["documents"][part],
                    metadatas=metas,  # type: ignore[arg-type]
                )
                write_ms[name].append((time.perf_counter() - t) / len(metas))
        keys = {
            name: statistics.mean(len(layout(m)) for m in full_meta)
            for name, layout in layouts.items()
        }
        json_chars = {
            name: statistics.mean(len(layout(m).get("_node_content", "")) for m in full_meta)
            for name, layout in layouts.items()
        }
        print(f"{len(got['ids'])} chunks of {args.collection}")
        for rnd in range(args.rounds):
            for i, name in enumerate(layouts):
                col = client.get_collection(f"layout-{i}")
                ids = col.get(include=[])["ids"]
                cells = [f"{keys[name]:.1f} keys, node JSON {json_chars[name]:,.0f} chars"]
                for n in (10, 50, 100):
                    times = []
                    for _ in range(40):
                        pick = [ids[j] for j in rng.choice(len(ids), n, replace=False)]
                        t = time.perf_counter()
                        col.get(ids=pick, include=["documents", "metadatas"])
                        times.append(time.perf_counter() - t)
                    cells.append(f"read {n}: {_median_ms(times):.2f}")
                times = []
                for q in rng.standard_normal((40, len(got["embeddings"][0]))).astype(np.float32):
                    t = time.perf_counter()
                    col.query(
                        query_embeddings=[q],
                        n_results=30,
                        include=["documents", "metadatas", "distances"],
                    )
                    times.append(time.perf_counter() - t)
                cells.append(f"query k=30: {_median_ms(times):.2f}")
                if rnd == 0:
                    cells.append(f"write: {_median_ms(write_ms[name]):.3f} / chunk")
                print(f"round {rnd + 1} {name}: " + " | ".join(cells) + " (median ms)")


if __name__ == "__main__":
    main()
