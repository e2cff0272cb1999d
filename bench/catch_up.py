"""Two machines on one Chroma server: how fast one sees the other's new page in BM25.

Not a test. Starts `chroma run` on loopback, opens two knowledge bases on it with
separate BM25 folders (two machines), builds N chunks through the first (random
vectors, synthetic text), opens the second (its BM25 is built from Chroma: the cost
of a machine joining), then 10 times adds one 20-chunk page on the first and times
the second's catch-up (the step its next search runs first), checking that BM25 on
the second then finds the page. Stock LlamaIndex has no catch-up: it rebuilds its
BM25Retriever, timed on the same chunks.

    python bench/catch_up.py [--chunks 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from search_latency import RandomEmbedding, make_nodes, synthetic_text  # noqa: E402

from rag_app.config import load_settings  # noqa: E402
from rag_app.index.store import bm25_doc, bm25_text  # noqa: E402
from rag_app.index.tokenizer import get_tokenizer  # noqa: E402
from rag_app.knowledge import KnowledgeBase  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_chroma(data: Path) -> tuple[subprocess.Popen[bytes], int]:
    exe = Path(sys.executable).parent / "chroma"
    port = free_port()
    cmd = [str(exe if exe.exists() else shutil.which("chroma")), "run", "--path", str(data)]
    proc = subprocess.Popen(
        [*cmd, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(150):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1)
            return proc, port
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("chroma did not start")


async def main_async(n: int) -> None:
    import random

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc, port = start_chroma(root / "server")
        try:
            common = {"chroma_host": "127.0.0.1", "chroma_port": port}
            a = KnowledgeBase(
                load_settings(bm25_persist_dir=str(root / "a"), **common),
                embed_model=RandomEmbedding(seed=1),
            )
            await a.open()
            nodes = make_nodes(n)
            t0 = time.perf_counter()
            for start in range(0, n, 2000):
                a.store.chroma.upsert_nodes(nodes[start : start + 2000])
            a.bm25.rebuild(bm25_doc(x) for x in nodes)
            print(f"built {n:,} chunks through machine A in {time.perf_counter() - t0:.0f} s")
            t0 = time.perf_counter()
            b = KnowledgeBase(
                load_settings(bm25_persist_dir=str(root / "b"), **common),
                embed_model=RandomEmbedding(seed=2),
            )
            await b.open()
            print(f"machine B joined (BM25 built from Chroma) in {time.perf_counter() - t0:.1f} s")
            rng = random.Random(5)
            times = []
            for k in range(10):
                word = f"きゃっちあっぷ{k}ばん"
                text = "\n\n".join(f"{word} {synthetic_text(rng)}" for _ in range(20))
                await a.ingest_text(f"https://bench.example/new/{k}", text, title=f"new {k}")
                t0 = time.perf_counter()
                synced = await asyncio.to_thread(b.store.catch_up)
                times.append(time.perf_counter() - t0)
                hits = b.bm25.search(word, 5)
                assert synced == 1 and hits, (synced, hits)
            print(
                f"B catches up one new 20-chunk page at {n:,} chunks: p50 "
                f"{np.percentile(times, 50) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
                "(target ≤ 500 ms)"
            )
            t0 = time.perf_counter()
            from llama_index.core.schema import TextNode
            from llama_index.retrievers.bm25 import BM25Retriever

            BM25Retriever.from_defaults(
                nodes=[TextNode(id_=x.node_id, text=bm25_text(x)) for x in nodes],
                similarity_top_k=30,
                tokenizer=get_tokenizer(),
            )
            print(f"stock: rebuild BM25Retriever to see the page: {time.perf_counter() - t0:.1f} s")
            await a.aclose()
            await b.aclose()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    args = ap.parse_args()
    asyncio.run(main_async(args.chunks))


if __name__ == "__main__":
    main()
