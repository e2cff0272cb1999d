"""The shared store at 10k and 100k chunks, end to end, beside stock LlamaIndex.

Not a test. For each size it builds a store on disk (corpus vectors are random unit
vectors so 100k chunks build in minutes; the text is synthetic Japanese/English so
BM25 has real work), then measures with real processes:

- cold start: a `rag search` with no store service running (service start + first
  answer; the service log's open timings split out the model load);
- warm `rag search` from a new process: wall time and peak RSS of that process;
- three `rag-mcp` servers (real MCP clients over stdio) on one store: total RSS of the
  servers plus the one store service, beside one process that opens the whole
  knowledge base in-process (what each server held before);
- search through the service (p50/p95, step timings), and BM25 and source lookups;
- stock LlamaIndex on the same Chroma data (VectorStoreIndex + BM25Retriever +
  QueryFusionRetriever, built in a fresh process): time to first answer, RSS, p50/p95,
  and what "catching up" with one new page costs it (rebuilding its BM25).

    python bench/shared_store.py [--sizes 10000,100000] [--queries 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from search_latency import QUERIES, RandomEmbedding, make_nodes, put_records  # noqa: E402

from rag_app.config import load_settings  # noqa: E402

BIN = Path(sys.executable).parent


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


def env_for(folder: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "CHROMA"))}
    return {
        **base,
        "CHROMADB_PERSIST_DIR": str(folder / "chroma"),
        "BM25_PERSIST_DIR": str(folder / "bm25"),
        "RAG_SERVICE_IDLE_SEC": "600",
    }


async def build(folder: Path, n: int) -> None:
    """n chunks with random vectors, written through the store (Chroma + BM25), with a
    source record per page as an ingest writes."""
    from rag_app.index.store import bm25_doc
    from rag_app.knowledge import KnowledgeBase

    settings = load_settings(
        chromadb_persist_dir=str(folder / "chroma"), bm25_persist_dir=str(folder / "bm25")
    )
    kb = KnowledgeBase(settings, embed_model=RandomEmbedding())
    await kb.open()
    nodes = make_nodes(n)
    t0 = time.perf_counter()
    for start in range(0, n, 5000):
        kb.store.chroma.upsert_nodes(nodes[start : start + 5000])
    put_records(kb, nodes)  # as an ingest leaves them: passages read neighbours by id
    kb.bm25.rebuild(bm25_doc(nd) for nd in nodes)
    print(f"  built {n:,} chunks in {time.perf_counter() - t0:.0f} s", flush=True)
    await kb.aclose()


def timed_run(env: dict[str, str], *args: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MB, stdout) of one command in a new process."""
    t0 = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *args], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed: {done.stderr[-500:]}")
    rss_kb = int(done.stderr.strip().splitlines()[-1])
    return wall, rss_kb / 1024, done.stdout


def owner_pid(folder: Path) -> int:
    return int(json.loads((folder / "chroma" / ".rag-owner.json").read_text())["pid"])


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


async def three_mcp_servers(env: dict[str, str], folder: Path) -> tuple[float, float]:
    """(total RSS of three rag-mcp + the store service, of the servers alone) in MB."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def one(log: Path, ready: asyncio.Event, done: asyncio.Event) -> None:
        params = StdioServerParameters(command=str(BIN / "rag-mcp"), args=[], env=env)
        with log.open("w") as err:
            async with Client(stdio_client(params, errlog=err), mode="legacy") as client:
                result = await client.call_tool("rag_search", {"query": QUERIES[0]})
                assert not result.is_error
                ready.set()
                await done.wait()

    done = asyncio.Event()
    readies = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(one(folder / f"mcp{i}.log", readies[i], done)) for i in range(3)]
    await asyncio.gather(*(r.wait() for r in readies))
    servers = [
        p
        for p in psutil.Process().children(recursive=True)
        if any("rag-mcp" in part for part in p.cmdline())
    ]
    servers_mb = sum(p.memory_info().rss for p in servers) / 1e6
    total = servers_mb + rss_mb(owner_pid(folder))
    done.set()
    await asyncio.gather(*tasks)
    return total, servers_mb


STOCK = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import chromadb
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever
    from llama_index.vector_stores.chroma import ChromaVectorStore
    from rag_app.config import load_settings
    from rag_app.embeddings import get_embed_model
    from rag_app.index.store import bm25_text
    from rag_app.index.tokenizer import get_tokenizer
    from rag_app.index.chroma_store import ChromaStore
    folder, queries = sys.argv[1], json.loads(sys.argv[2])
    embed = get_embed_model(load_settings())
    embed.get_query_embedding("warm up")
    t_model = time.perf_counter()
    client = chromadb.PersistentClient(path=folder + "/chroma")
    store = ChromaStore(client, "knowledge", model_name="multilingual-e5-small", dimension=384)
    nodes = list(store.iter_nodes())
    def build():
        return BM25Retriever.from_defaults(
            nodes=[TextNode(id_=n.node_id, text=bm25_text(n)) for n in nodes],
            similarity_top_k=30, tokenizer=get_tokenizer())
    bm25 = build()
    vindex = VectorStoreIndex.from_vector_store(store.vector_store, embed_model=embed)
    stock = QueryFusionRetriever([vindex.as_retriever(similarity_top_k=30), bm25],
        mode="relative_score", num_queries=1, similarity_top_k=5, use_async=False,
        llm=MockLLM())
    stock.retrieve(queries[0])
    first = time.perf_counter() - t0 - (t_model - t0)
    times = []
    for q in queries:
        s = time.perf_counter(); stock.retrieve(q); times.append((time.perf_counter() - s) * 1000)
    s = time.perf_counter(); build(); rebuild = time.perf_counter() - s
    times.sort()
    print(json.dumps({"first_s": first, "p50": times[len(times) // 2],
        "p95": times[int(len(times) * 0.95)], "rebuild_s": rebuild}))
    """
)

IN_PROCESS = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from rag_app.config import load_settings
    from rag_app.knowledge import KnowledgeBase
    async def main():
        kb = KnowledgeBase(load_settings())
        await kb.open()
        await kb.retrieve(sys.argv[1])
        print(json.dumps({"open": kb.open_timings}))
    asyncio.run(main())
    """
)


async def bench_size(n: int, n_queries: int, work: Path) -> dict[str, Any]:
    from rag_app.service import connect
    from rag_app.service.launcher import stop_service

    folder = work / f"n{n}"
    folder.mkdir()
    await build(folder, n)
    env = env_for(folder)
    os.environ.update({k: v for k, v in env.items() if k.startswith(("RAG_", "CHROMA"))})
    os.environ["BM25_PERSIST_DIR"] = env["BM25_PERSIST_DIR"]
    settings = load_settings()
    row: dict[str, Any] = {"n": n}

    # cold: no service running
    cold_wall, _, _ = timed_run(env, str(BIN / "rag"), "search", QUERIES[0])
    log = (folder / "chroma" / ".rag-service.log").read_text()
    opened = [ln for ln in log.splitlines() if "Opened" in ln][-1]
    row["cold_first_search_s"] = cold_wall
    row["service_open"] = opened.split("Opened", 1)[1].strip()
    # warm: a new CLI process against the running service
    walls, rsss = [], []
    for q in QUERIES[:5]:
        wall, rss, _ = timed_run(env, str(BIN / "rag"), "search", q)
        walls.append(wall)
        rsss.append(rss)
    row["cli_search_s"] = pct(walls, 50)
    row["cli_search_rss_mb"] = max(rsss)

    # searches through the service
    client = await connect(settings)
    totals, parts = [], {}
    for i in range(n_queries):
        t0 = time.perf_counter()
        res = await client.retrieve(QUERIES[i % len(QUERIES)], n_results=5)
        totals.append((time.perf_counter() - t0) * 1000)
        for k, v in res.timings.items():
            parts.setdefault(k, []).append(v)
    await client.aclose()
    row["p50"], row["p95"] = pct(totals, 50), pct(totals, 95)
    for k in ("query_embedding", "vector_query", "bm25_query", "fetch_nodes", "total"):
        row[f"{k}_p50"] = pct(parts.get(k, []), 50)
        row[f"{k}_p95"] = pct(parts.get(k, []), 95)
    row["service_rss_mb"] = rss_mb(owner_pid(folder))

    row["three_mcp_total_mb"], row["three_mcp_servers_mb"] = await three_mcp_servers(env, folder)
    await stop_service(settings)

    # what each rag-mcp held before: the whole knowledge base in its own process
    _, row["in_process_rss_mb"], _ = timed_run(env, sys.executable, "-c", IN_PROCESS, QUERIES[0])

    # source lookup: the in-memory map vs a Chroma metadata query
    from rag_app.index.bm25_index import BM25Index
    from rag_app.index.chroma_store import ChromaStore, make_client

    bm25 = BM25Index(env["BM25_PERSIST_DIR"])
    chroma = ChromaStore(
        make_client(settings), "knowledge", model_name="multilingual-e5-small", dimension=384
    )
    srcs = [f"https://bench.example/page/{i}" for i in range(0, n // 20, max(1, n // 2000))]
    t0 = time.perf_counter()
    for s in srcs:
        bm25.ids_for_source(s)
    row["lookup_memory_ms"] = (time.perf_counter() - t0) * 1000 / len(srcs)
    t0 = time.perf_counter()
    for s in srcs[:50]:
        chroma.ids_for_source(s)
    row["lookup_chroma_ms"] = (time.perf_counter() - t0) * 1000 / min(50, len(srcs))
    del chroma

    queries = json.dumps(QUERIES * (n_queries // 10))
    _, stock_rss, out = timed_run(env, sys.executable, "-c", STOCK, str(folder), queries)
    stock = json.loads(out.strip().splitlines()[-1])
    row.update({f"stock_{k}": v for k, v in stock.items()})
    row["stock_rss_mb"] = stock_rss  # measured from outside (ru_maxrss survives exec)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in args.sizes.split(",")]:
            print(f"size {n:,} ...", flush=True)
            rows.append(asyncio.run(bench_size(n, args.queries, Path(tmp))))
            print(json.dumps(rows[-1], indent=1), flush=True)
    print()
    print("| measure | " + " | ".join(f"{r['n']:,} chunks" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    lines = [
        ("cold `rag search`, no service running (s)", "cold_first_search_s", "{:.2f}"),
        ("  service open timings", "service_open", "{}"),
        ("warm `rag search`, new process (s)", "cli_search_s", "{:.2f}"),
        ("  its peak RSS (MB)", "cli_search_rss_mb", "{:.0f}"),
        ("stock: new process to first answer, model load excluded (s)", "stock_first_s", "{:.2f}"),
        ("search via the service p50 / p95, client side (ms)", ("p50", "p95"), "{:.1f} / {:.1f}"),
        ("  inside the service p50 / p95 (ms)", ("total_p50", "total_p95"), "{:.1f} / {:.1f}"),
        ("  non-embedding steps p50 (ms)", None, None),
        ("  BM25 query p50 / p95 (ms)", ("bm25_query_p50", "bm25_query_p95"), "{:.2f} / {:.2f}"),
        ("stock search p50 / p95 (ms)", ("stock_p50", "stock_p95"), "{:.1f} / {:.1f}"),
        ("store service RSS (MB)", "service_rss_mb", "{:.0f}"),
        ("three rag-mcp + the service, total RSS (MB)", "three_mcp_total_mb", "{:.0f}"),
        ("  the three rag-mcp alone (MB)", "three_mcp_servers_mb", "{:.0f}"),
        ("one process with the whole KB in-process (MB)", "in_process_rss_mb", "{:.0f}"),
        ("stock process RSS (MB)", "stock_rss_mb", "{:.0f}"),
        ("source lookup: in-memory / Chroma metadata query (ms)",
         ("lookup_memory_ms", "lookup_chroma_ms"), "{:.3f} / {:.1f}"),
        ("stock: catch up one new page = rebuild its BM25 (s)", "stock_rebuild_s", "{:.2f}"),
    ]  # fmt: skip
    for label, key, fmt in lines:
        if key is None:
            cells = [  # inside the service, minus the query embedding
                f"{r['total_p50'] - r['query_embedding_p50']:.1f}" for r in rows
            ]
        elif isinstance(key, tuple):
            cells = [fmt.format(*(r[k] for k in key)) for r in rows]
        else:
            cells = [fmt.format(r[key]) for r in rows]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
