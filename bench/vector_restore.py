"""Restoring a damaged vector index from the vector copy, against embedding it again.

Not a test. Works on a copy of a store (`bench/shared_store.py`'s or `bench/cold_start.py
--build N --keep DIR`'s builder, or any real one), through the real `KnowledgeBase`:

1. open it without its vector copy (removed from the bench's copy of the store, as a
   store made before the copy was): the copy is filled from Chroma in the background
   (timed; its size on disk);
2. what the copy adds to a write: 64 vectors kept in the copy against the same 64 chunks
   upserted into Chroma (medians);
3. damage the HNSW files (a store of 1,000 chunks or more: Chroma writes them first at
   its 1,000th write), open again: the index is set aside and every vector restored
   from the copy (timed to the end, with how many were embedded again), then 20 stored
   vectors searched before and after: the same top 10; they are also searched every
   0.5 s during the restore (answered from the vector copy meanwhile);
4. the builtin model's rate on a sample of the stored texts, which is what embedding every
   chunk again would run at; `--full` embeds them all (a small store only: hours at 100k).

    python bench/vector_restore.py --store DIR [--sample 512] [--full]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from chromadb.api.shared_system_client import SharedSystemClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rag_app.config import load_settings
from rag_app.index.vector_copy import FILE, VectorCopy, model_key
from rag_app.knowledge import KnowledgeBase, embed_text


def _hnsw_folder(chroma: Path, collection: str) -> Path:
    with sqlite3.connect(chroma / "chroma.sqlite3") as db:
        (segment,) = db.execute(
            "SELECT s.id FROM segments s JOIN collections c ON s.collection = c.id "
            "WHERE c.name = ? AND s.scope = 'VECTOR'",
            (collection,),
        ).fetchone()
    return chroma / segment


async def _opened(settings: object) -> KnowledgeBase:
    kb = KnowledgeBase(settings)  # type: ignore[arg-type]
    await kb.open()
    return kb


def _top10(kb: KnowledgeBase, probes: dict[str, list[float]]) -> dict[str, list[str]]:
    return {i: [h for h, _ in kb.store.query_ids(v, 10)] for i, v in probes.items()}


async def _searched_meanwhile(
    kb: KnowledgeBase,
    probes: dict[str, list[float]],
    t0: float,
) -> tuple[str, dict[str, list[str]]]:
    """Search the probes by vector every 0.5 s until the restore ends: when the copy
    began to answer (seen every 10 ms) and how long a query took (the restore writes
    beside it); and the top 10s of the first round the copy answered throughout."""
    assert kb._reembedding is not None
    seen: dict[str, list[str]] = {}
    first: float | None = None
    attached: list[float] = []
    per_query: list[float] = []
    damaged = kb.store.chroma.collection.name

    async def watch() -> None:
        while not attached and not kb._reembedding.done():  # type: ignore[union-attr]
            if kb.store.chroma.exact is not None:
                attached.append(time.perf_counter() - t0)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    while not kb._reembedding.done():
        chroma = kb.store.chroma
        ready = chroma.exact is not None  # the copy answers from the round's start
        t = time.perf_counter()
        got = await asyncio.to_thread(_top10, kb, probes)
        per_query.append((time.perf_counter() - t) * 1000 / len(probes))
        from_copy = ready and chroma.collection.name == damaged
        if first is None and from_copy and kb.store.chroma is chroma:
            first = time.perf_counter() - t0  # the copy answered the whole round
            seen.update(got)
        await asyncio.sleep(0.5)
    await kb._reembedding
    await watcher
    if not per_query:
        return "no search ran during the restore", seen
    q = sorted(per_query)
    found = f"after {attached[0]:.2f} s" if attached and first is not None else "never"
    return (
        f"vector search during the restore: answered from the copy {found}; "
        f"{len(per_query)} rounds; per query p50 {statistics.median(q):.1f} ms, "
        f"p95 {q[int(0.95 * (len(q) - 1))]:.1f} ms"
    ), seen


def _true_top10(copy_file: Path, key: str, probes: dict[str, list[float]]) -> dict[str, list[str]]:
    """The exact top 10 of each probe, brute force over the copy's vectors of `key`."""
    with sqlite3.connect(copy_file) as db:
        rows = db.execute(
            "SELECT v.id, v.vector FROM vectors v JOIN models m ON v.model = m.id WHERE m.name = ?",
            (key,),
        ).fetchall()
    ids = [i for i, _ in rows]
    matrix = np.frombuffer(b"".join(v for _, v in rows), dtype="<f4").reshape(len(ids), -1)
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    out = {}
    for name, vector in probes.items():
        q = np.asarray(vector, dtype=np.float32)
        scores = matrix @ (q / np.linalg.norm(q))
        out[name] = [ids[j] for j in np.argsort(-scores)[:10]]
    return out


def _overlap(a: dict[str, list[str]], b: dict[str, list[str]]) -> str:
    if not a:
        return "n/a"
    return f"{statistics.mean(len(set(a[i]) & set(b.get(i, []))) / 10 for i in a):.3f}"


async def run(folder: Path, sample: int, full: bool) -> None:
    settings = load_settings(
        chromadb_persist_dir=str(folder / "chroma"), bm25_persist_dir=str(folder / "bm25")
    )
    (folder / "chroma" / FILE).unlink(missing_ok=True)
    t0 = time.perf_counter()
    kb = await _opened(settings)
    opened = time.perf_counter() - t0
    for thread in kb._background:  # the exact-search copy's loader too (up to 20k chunks)
        thread.join()
    filled = time.perf_counter() - t0
    chunks = kb.store.count()
    print(f"{chunks:,} chunks; open {opened:.2f} s, background work done after {filled:.1f} s")
    if chunks < 1000:
        raise SystemExit("fewer than 1,000 chunks: Chroma has no HNSW files to damage yet")
    store_copy = kb.store.vector_copy
    assert store_copy is not None and store_copy.count(kb.store.chroma.copy_key) == chunks
    store_copy.drop(kb.store.chroma.copy_key)  # the fill alone, nothing running beside it
    t = time.perf_counter()
    added = kb.store.fill_vector_copy()
    print(f"  filling an empty copy from Chroma: {time.perf_counter() - t:.1f} s ({added:,})")

    # 2. a write's cost: the copy's part against Chroma's, same 64 chunks
    chroma = kb.store.chroma
    ids = sorted(chroma.all_ids())[:64]
    got = chroma.collection.get(ids=ids, include=["embeddings", "documents", "metadatas"])
    copy = VectorCopy(folder / "chroma" / FILE)
    key = model_key(settings.embedding_model_name, chroma.dimension)
    copy_ms, chroma_ms = [], []
    for _ in range(20):
        t = time.perf_counter()
        copy.put(key, got["ids"], got["embeddings"])
        copy_ms.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        chroma.collection.upsert(
            ids=got["ids"],
            embeddings=got["embeddings"],
            documents=got["documents"],
            metadatas=got["metadatas"],
        )
        chroma_ms.append((time.perf_counter() - t) * 1000)
    copy.close()
    c, h = statistics.median(copy_ms), statistics.median(chroma_ms)
    print(f"  64 vectors: copy {c:.2f} ms, Chroma upsert {h:.2f} ms (copy ÷ Chroma {c / h:.3f})")

    rng = np.random.default_rng(7)
    probe_ids = [str(i) for i in rng.choice(sorted(chroma.all_ids()), size=20, replace=False)]
    probes = {i: list(v) for i, v in chroma.existing_embeddings(probe_ids).items()}
    before = _top10(kb, probes)
    texts = [embed_text(n) for n in chroma.get_nodes(probe_ids[:1])]
    sample_nodes = list(chroma.get_nodes(sorted(chroma.all_ids())[:sample]))
    collection = chroma.collection.name
    await kb.aclose()
    SharedSystemClient.clear_system_cache()  # a new process's view: nothing loaded
    size = (folder / "chroma" / FILE).stat().st_size
    print(f"  copy on disk: {size / 2**20:.1f} MB ({size / max(chunks, 1):.0f} bytes per chunk)")

    # 3. damage, open, restore
    folder_hnsw = _hnsw_folder(folder / "chroma", collection)
    (folder_hnsw / "header.bin").write_bytes(b"\x00garbage" * 12)
    t0 = time.perf_counter()
    kb = await _opened(settings)
    serving = time.perf_counter() - t0
    if kb._reembedding is None:
        raise SystemExit("the damaged index was not set aside")
    during, during_top = await _searched_meanwhile(kb, probes, t0)
    restored = time.perf_counter() - t0
    after = _top10(kb, probes)
    same = sum(before[i] == after[i] for i in probes)
    overlap = statistics.mean(len(set(before[i]) & set(after[i])) / 10 for i in probes)
    print(
        f"restore: serving (BM25) after {serving:.2f} s, every vector back after "
        f"{restored:.1f} s; embedded again: {kb.reembedded}; same top 10 for "
        f"{same} of {len(probes)} probes (overlap {overlap:.3f}; a rebuilt HNSW graph "
        "is another approximation)"
    )

    print(f"  {during}")
    truth = _true_top10(folder / "chroma" / FILE, key, probes)
    print(
        "  top-10 overlap with brute force over the copy: "
        f"intact HNSW {_overlap(before, truth)}, "
        f"during the restore {_overlap(during_top, truth)}, "
        f"restored HNSW {_overlap(after, truth)}"
    )

    # 4. what embedding them again runs at
    model = kb.embed_model
    model.get_text_embedding_batch(texts)  # loaded
    t = time.perf_counter()
    model.get_text_embedding_batch([embed_text(n) for n in sample_nodes])
    rate = len(sample_nodes) / (time.perf_counter() - t)
    print(
        f"builtin model on {len(sample_nodes)} stored texts: {rate:.1f} chunks/s; "
        f"restore from the copy {chunks / restored:.0f} chunks/s "
        f"({chunks / restored / rate:.0f}× the model's rate)"
    )
    if full:
        t = time.perf_counter()
        await kb.reindex()
        print(f"embedding every chunk again (`rag reindex`): {time.perf_counter() - t:.1f} s")
    await kb.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store folder (chroma/, bm25/)")
    parser.add_argument("--sample", type=int, default=512, help="stored texts to time the model on")
    parser.add_argument("--full", action="store_true", help="also embed every chunk again")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vector-restore-") as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        for part in ("chroma", "bm25"):
            shutil.copytree(args.store / part, folder / part)
        print(f"copied the store in {time.perf_counter() - t:.0f} s")
        asyncio.run(run(folder, args.sample, args.full))


if __name__ == "__main__":
    main()
