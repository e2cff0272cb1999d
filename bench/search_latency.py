"""Search latency at 1k / 10k / 100k chunks, ours vs stock LlamaIndex fusion.

Not a test. The corpus text is synthetic Japanese/English so BM25 has real work; every
query is embedded with the real builtin model in a warm process. Corpus vectors are not
embeddings of that text (embedding 100k chunks takes hours here), one of two kinds:

- `random` (default): random unit vectors. In 384 dimensions they are all about equally
  far apart, the worst case for Chroma's HNSW graph: a query visits far more of it than
  on real embeddings.
- `model`: real builtin-model embeddings of `MODEL_BASE` synthetic texts, each size
  reached with near-duplicates of them (base + Gaussian noise, renormalised, cosine
  0.96-0.995 to the base: near-identical rows such as table lines), as
  `bench/vector_recall.py` builds its corpus; a query then meets the clustered
  neighbourhoods real chunks form.

    python bench/search_latency.py [--sizes 1000,10000,100000] [--queries 60]
                                   [--vectors random|model]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core import Settings as LISettings
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.retrievers.bm25 import BM25Retriever
from pydantic import PrivateAttr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vector_recall import grow  # bench/ is on the path when run as a script

from rag_app.blas_threads import single_blas_thread
from rag_app.config import load_settings
from rag_app.embeddings import get_embed_model
from rag_app.index.chroma_store import SourceRecord
from rag_app.index.store import bm25_doc
from rag_app.index.tokenizer import get_tokenizer
from rag_app.knowledge import KnowledgeBase, bm25_text

WORDS_JA = [
    "りゅうおう",
    "スライム",
    "ドラキー",
    "ゴーレム",
    "勇者",
    "王様",
    "城",
    "洞窟",
    "町",
    "村",
    "剣",
    "鎧",
    "盾",
    "呪文",
    "回復",
    "攻撃",
    "守備",
    "経験値",
    "ゴールド",
    "宝箱",
    "地図",
    "東京",
    "京都",
    "大阪",
    "寺院",
    "神社",
    "歴史",
    "文化",
    "経済",
    "政治",
    "科学",
    "技術",
    "研究",
    "大学",
    "学生",
    "先生",
    "会社",
    "社員",
    "製品",
    "価格",
    "市場",
    "天気",
    "季節",
    "料理",
    "野菜",
    "果物",
    "音楽",
    "映画",
    "小説",
    "作家",
]
WORDS_EN = [
    "python",
    "asyncio",
    "coroutine",
    "task",
    "event",
    "loop",
    "server",
    "client",
    "request",
    "response",
    "database",
    "index",
    "vector",
    "search",
    "query",
    "token",
    "embedding",
    "model",
    "cache",
    "memory",
    "disk",
    "network",
    "timeout",
    "retry",
    "error",
]
QUERIES = [
    "りゅうおう",
    "スライムの攻撃力",
    "京都の寺院の歴史",
    "勇者の剣と鎧",
    "how do I retry a request after a timeout",
    "asyncio event loop",
    "大学の研究と技術",
    "ゴールドと経験値",
    "vector search with an embedding model",
    "料理と野菜の季節",
]


class RandomEmbedding(BaseEmbedding):
    """Instant random unit vectors: used only to exclude embedding time from add-page."""

    _dim: int = PrivateAttr(default=384)
    _rng: Any = PrivateAttr()

    def __init__(self, dim: int = 384, seed: int = 0) -> None:
        super().__init__(model_name="multilingual-e5-small")
        self._dim = dim
        self._rng = np.random.default_rng(seed)

    @property
    def dimension(self) -> int:
        return self._dim

    def _vec(self) -> list[float]:
        v = self._rng.standard_normal(self._dim).astype(np.float32)
        return (v / np.linalg.norm(v)).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vec()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vec()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vec()


class PrecomputedEmbedding(BaseEmbedding):
    """Query vectors worked out beforehand, so a search costs only its non-embedding part."""

    _vectors: dict[str, list[float]] = PrivateAttr()

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__(model_name="precomputed")
        self._vectors = vectors

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vectors[query]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vectors[query]

    def _get_text_embedding(self, text: str) -> list[float]:
        raise NotImplementedError("queries only")


def synthetic_text(rng: random.Random) -> str:
    words = [rng.choice(WORDS_JA) for _ in range(rng.randint(12, 30))]
    words += [rng.choice(WORDS_EN) for _ in range(rng.randint(0, 6))]
    rng.shuffle(words)
    out, line = [], []
    for w in words:
        line.append(w)
        if len(line) >= rng.randint(4, 8):
            out.append("、".join(line) + "。")
            line = []
    out.append("、".join(line) + "。" if line else "")
    return "".join(out)


MODEL_BASE = 2000
"""Texts embedded by the real model for `--vectors model`; the rest are near-duplicates."""


def random_vectors(n: int, seed: int = 1) -> np.ndarray:
    """`n` random unit vectors (HNSW's worst case: no neighbourhoods)."""
    vecs = np.random.default_rng(seed).standard_normal((n, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs


def model_vectors(n: int, embed: BaseEmbedding, seed: int = 1) -> np.ndarray:
    """`n` vectors: real embeddings of up to `MODEL_BASE` synthetic texts, then
    near-duplicates of them (cosine 0.96-0.995 to their base, `vector_recall.grow`)."""
    rng = random.Random(seed + 1)
    texts = [synthetic_text(rng) for _ in range(min(n, MODEL_BASE))]
    base = np.array(embed.get_text_embedding_batch(texts), dtype=np.float32)
    matrix, _ids, _stats = grow(base, n, 0.96, 0.995, seed)
    return matrix[np.random.default_rng(seed).permutation(n)]  # bases spread over pages


def make_nodes(n: int, seed: int = 1, vecs: np.ndarray | None = None) -> list[TextNode]:
    rng = random.Random(seed)
    if vecs is None:
        vecs = random_vectors(n, seed)
    nodes = []
    for i in range(n):
        src = f"https://bench.example/page/{i // 20}"
        node = TextNode(
            id_=f"n{i:07d}",
            text=synthetic_text(rng),
            metadata={
                "source_url": src,
                "title": f"page {i // 20}",
                "chunk_index": i % 20,
                "content_type": "prose",
                "heading_path": "",
                "heading_level": 0,
            },
            embedding=vecs[i].tolist(),
        )
        node.excluded_embed_metadata_keys = list(node.metadata)
        node.excluded_llm_metadata_keys = list(node.metadata)
        nodes.append(node)
    return nodes


def put_records(kb: KnowledgeBase, nodes: list[TextNode]) -> None:
    """One source record per page listing its chunks in order, as an ingest leaves them
    (a hit's passage is then fetched by id, not by a metadata query)."""
    pages: dict[str, list[str]] = {}
    for nd in nodes:
        pages.setdefault(str(nd.metadata["source_url"]), []).append(nd.node_id)
    kb.store.chroma.put_sources(
        [
            SourceRecord(source=src, title=src, chunk_count=len(ids), chunk_ids=" ".join(ids))
            for src, ids in pages.items()
        ]
    )


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


async def bench_size(
    n: int, n_queries: int, embed: BaseEmbedding, vectors: str = "random"
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            chromadb_persist_dir=f"{tmp}/chroma", bm25_persist_dir=f"{tmp}/bm25"
        )
        kb = KnowledgeBase(settings, embed_model=embed)
        await kb.open()
        vecs = model_vectors(n, embed) if vectors == "model" else random_vectors(n)
        nodes = make_nodes(n, vecs=vecs)
        t0 = time.perf_counter()
        kb.store.chroma.upsert_nodes(nodes)
        put_records(kb, nodes)
        t_vec = time.perf_counter() - t0
        t0 = time.perf_counter()
        kb.bm25.add([bm25_doc(nd) for nd in nodes])
        t_bm = time.perf_counter() - t0
        print(f"  built {n} chunks: chroma {t_vec:.1f}s, bm25 {t_bm:.1f}s", flush=True)

        queries = [QUERIES[i % len(QUERIES)] for i in range(n_queries)]
        for q in QUERIES[:3]:  # warm up
            await kb.retrieve(q, n_results=5)
        totals: list[float] = []
        parts: dict[str, list[float]] = {}
        for q in queries:
            t0 = time.perf_counter()
            res = await kb.retrieve(q, n_results=5)
            totals.append((time.perf_counter() - t0) * 1000)
            for k, v in res.timings.items():
                parts.setdefault(k, []).append(v)
        row: dict[str, Any] = {
            "n": n,
            "p50": pct(totals, 50),
            "p95": pct(totals, 95),
            **{f"{k}_p50": pct(v, 50) for k, v in parts.items()},
        }
        # p50 of the whole search less p50 of its embedding step (the embedding's load on
        # the cores and caches counts here; the precomputed figure below leaves it out)
        row["non_embedding_p50"] = row["p50"] - row.get("query_embedding_p50", 0.0)

        # stock LlamaIndex: QueryFusionRetriever(relative_score) over BM25Retriever + Chroma
        LISettings.embed_model = embed
        vindex = VectorStoreIndex.from_vector_store(kb.store.chroma.vector_store, embed_model=embed)
        tok = get_tokenizer()
        bm25_nodes = [TextNode(id_=nd.node_id, text=bm25_text(nd)) for nd in nodes]
        t0 = time.perf_counter()
        stock_bm25 = BM25Retriever.from_defaults(
            nodes=bm25_nodes, similarity_top_k=30, tokenizer=tok
        )
        row["stock_bm25_build_s"] = time.perf_counter() - t0
        stock = QueryFusionRetriever(
            [vindex.as_retriever(similarity_top_k=30), stock_bm25],
            mode="relative_score",
            num_queries=1,
            similarity_top_k=5,
            use_async=False,
            llm=MockLLM(),  # num_queries=1: the LLM is never called
        )
        for q in QUERIES[:3]:
            await stock.aretrieve(q)
        stock_t: list[float] = []
        for q in queries:
            t0 = time.perf_counter()
            await stock.aretrieve(q)
            stock_t.append((time.perf_counter() - t0) * 1000)
        row["stock_p50"] = pct(stock_t, 50)
        # the same queries with the embedding precomputed, ours and stock alternating:
        # each side's non-embedding cost, measured the same way
        vectors = {q: embed.get_query_embedding(q) for q in set(queries)}
        kb.embed_model = PrecomputedEmbedding(vectors)
        ours_ne: list[float] = []
        stock_ne: list[float] = []
        for q in queries:
            t0 = time.perf_counter()
            await kb.retrieve(q, n_results=5)
            ours_ne.append((time.perf_counter() - t0) * 1000)
            bundle = QueryBundle(query_str=q, embedding=vectors[q])
            t0 = time.perf_counter()
            await stock.aretrieve(bundle)
            stock_ne.append((time.perf_counter() - t0) * 1000)
        kb.embed_model = embed
        row["precomputed_p50"] = pct(ours_ne, 50)
        row["precomputed_p95"] = pct(ours_ne, 95)
        row["stock_non_embedding_p50"] = pct(stock_ne, 50)
        row["ratio"] = row["p50"] / row["stock_p50"]
        # add one 20-chunk page, embedding excluded (random vectors)
        await kb.aclose()  # one owner at a time
        rnd = RandomEmbedding()
        page_kb = KnowledgeBase(settings, embed_model=rnd)
        await page_kb.open()
        rng = random.Random(99)
        page = "\n\n".join(synthetic_text(rng) * 3 for _ in range(20))
        t0 = time.perf_counter()
        res = await page_kb.ingest_text("https://bench.example/new-page", page, title="new")
        row["add_page_s"] = time.perf_counter() - t0
        row["add_page_chunks"] = res.chunks

        row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        await page_kb.aclose()
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--vectors", choices=("random", "model"), default="random")
    args = ap.parse_args()
    single_blas_thread()  # as the store service runs (rag_app/blas_threads.py)
    embed = get_embed_model(load_settings())
    rows = []
    for n in [int(x) for x in args.sizes.split(",")]:
        print(f"size {n}, {args.vectors} vectors ...", flush=True)
        rows.append(asyncio.run(bench_size(n, args.queries, embed, args.vectors)))
    print()
    print(
        "| chunks | p50 ms | p95 ms | embed | vector | bm25 | fusion | non-embed | "
        "add 20-chunk page s | stock p50 ms | stock non-embed | ours/stock | "
        "non-embed ours/stock | peak RSS MB |"
    )
    print("|" + "---|" * 14)
    for r in rows:
        print(
            f"| {r['n']:,} | {r['p50']:.1f} | {r['p95']:.1f} | "
            f"{r.get('query_embedding_p50', 0):.1f} | {r.get('vector_query_p50', 0):.1f} | "
            f"{r.get('bm25_query_p50', 0):.1f} | {r.get('fusion_p50', 0):.2f} | "
            f"{r['non_embedding_p50']:.1f} | {r['add_page_s']:.2f} | {r['stock_p50']:.1f} | "
            f"{r['stock_non_embedding_p50']:.1f} | {r['ratio']:.2f} | "
            f"{r['non_embedding_p50'] / r['stock_non_embedding_p50']:.2f} | "
            f"{r['peak_rss_mb']:.0f} |"
        )
    print()
    for r in rows:  # every step the retriever timed, p50 ms
        steps = {k[: -len("_p50")]: v for k, v in r.items() if k.endswith("_p50")}
        print(f"{r['n']:,} steps p50 ms: " + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()))
    print()
    for r in rows:  # both sides with the query embedding worked out beforehand, alternating
        print(
            f"{r['n']:,} non-embedding part, query vectors precomputed, p50 ms: ours "
            f"{r['precomputed_p50']:.2f} (p95 {r['precomputed_p95']:.2f}), stock "
            f"{r['stock_non_embedding_p50']:.2f}, ours/stock "
            f"{r['precomputed_p50'] / r['stock_non_embedding_p50']:.2f}"
        )


if __name__ == "__main__":
    main()
