"""HybridRetriever: vector (Chroma) + BM25 candidates fused by min–max + convex combination.

A LlamaIndex `BaseRetriever`, so evaluators and query engines can use it; `search()`
gives the richer outcome (separate lists, raw scores, step timings).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from rag_app.index.bm25_index import FieldWeights
from rag_app.index.exact_vectors import VectorMatches
from rag_app.index.fusion import fetch_count, fuse
from rag_app.index.no_match import Evidence, bm25_lead, excess_of, named_code
from rag_app.index.store import KnowledgeStore, Neighbourhood
from rag_app.parsing.metadata_modes import hide_keys
from rag_app.results import SCORE_KEYS, SEARCH_MODES
from rag_app.timing import timer

logger = logging.getLogger(__name__)

SearchMode = Literal["fused", "vector", "bm25", "separate"]
__all__ = ["SEARCH_MODES", "HybridRetriever", "SearchMode", "SearchOutcome"]


@dataclass
class SearchOutcome:
    """Ranked nodes (`fused`) plus the raw per-side lists, step timings in ms and whether
    the hits answer the query at all (`rag_app.index.no_match`)."""

    mode: str
    fused: list[NodeWithScore] = field(default_factory=list)
    vector: list[NodeWithScore] = field(default_factory=list)
    bm25: list[NodeWithScore] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    evidence: Evidence = field(default_factory=Evidence)
    confident: bool = True
    neighbourhood: Neighbourhood = field(default_factory=Neighbourhood)
    """Chunks around the best hits, read with them when `search` was asked to (`near`)."""


async def _done() -> int:
    return 0


def _scored(
    node: TextNode,
    score: float,
    *,
    vector_distance: float | None,
    bm25_score: float | None,
    combined_score: float | None,
) -> NodeWithScore:
    """A fresh node copy carrying its scores in metadata (sub-results stay untouched)."""
    copy = node.model_copy(deep=False)
    meta = dict(node.metadata)
    meta.update(zip(SCORE_KEYS, (vector_distance, bm25_score, combined_score), strict=True))
    copy.metadata = meta
    hide_keys(copy, SCORE_KEYS)
    return NodeWithScore(node=copy, score=score)


class HybridRetriever(BaseRetriever):
    """Fusion retriever of spec 000: `alpha * vector + (1 - alpha) * bm25` after min–max."""

    def __init__(
        self,
        store: KnowledgeStore,
        embed_model: BaseEmbedding,
        *,
        similarity_top_k: int = 3,
        vector_weight: float = 0.5,
        similarity_threshold: float | None = None,
        min_combined_score: float | None = None,
        bm25_k1: float | None = None,
        bm25_b: float | None = None,
        bm25_fields: FieldWeights | None = None,
        normalization: str = "min-max",
        mode: SearchMode = "fused",
        no_match_cutoff: float | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.bm25 = store.bm25
        self.embed_model = embed_model
        self.similarity_top_k = similarity_top_k
        self.vector_weight = vector_weight
        self.similarity_threshold = similarity_threshold
        self.min_combined_score = min_combined_score
        self.bm25_k1 = bm25_k1
        self.bm25_b = bm25_b
        self.bm25_fields = bm25_fields
        self.normalization = normalization
        self.mode: SearchMode = mode
        self.no_match_cutoff = no_match_cutoff

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Synchronous `retrieve()`; inside a running event loop (Jupyter) the search runs
        on its own loop in a worker thread, since `asyncio.run` cannot nest."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._aretrieve(query_bundle))
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self._aretrieve(query_bundle)).result()

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        outcome = await self.search(query_bundle.query_str)
        return outcome.fused

    async def search(
        self,
        query: str,
        n_results: int | None = None,
        mode: SearchMode | None = None,
        sources: Sequence[str] | None = None,
        near: Sequence[int] = (),
    ) -> SearchOutcome:
        """Run one query; `mode` picks fused / vector / bm25 / separate; `sources`, when
        given, are the only sources searched. `near[i]`: how many chunks on each side of
        the i-th result to read with the results, for its passage."""
        n = n_results or self.similarity_top_k
        mode = mode or self.mode
        outcome = SearchOutcome(mode=mode)
        t = outcome.timings
        k = fetch_count(n)
        with timer("total", t, logger):
            vec = VectorMatches()
            bm_raw: list[tuple[str, float]] = []
            want_vec = mode in ("fused", "vector", "separate")
            want_bm = mode in ("fused", "bm25", "separate")
            # with a Chroma server: other machines' writes are applied once per search,
            # beside the query embedding, before either side reads (BM25 and the vector copy)
            caught_up = asyncio.ensure_future(
                asyncio.to_thread(self.store.catch_up) if self.store.poll_changes else _done()
            )

            async def vector_side() -> VectorMatches:
                with timer("query_embedding", t, logger):
                    emb = await self.embed_model.aget_query_embedding(query)
                await caught_up
                with timer("vector_query", t, logger):
                    return await asyncio.to_thread(self.store.query_vectors, emb, k, sources)

            async def bm25_side() -> list[tuple[str, float]]:
                await caught_up
                with timer("bm25_query", t, logger):
                    return await self._bm25(query, k, sources)

            if want_vec and want_bm:
                vec, bm_raw = await asyncio.gather(vector_side(), bm25_side())
            elif want_vec:
                vec = await vector_side()
            elif want_bm:
                bm_raw = await bm25_side()

            with timer("fusion", t, logger):
                distances = dict(vec.hits)
                bm25_scores = dict(bm_raw)
                ranked = self._rank(mode, n, distances, bm25_scores)
                needed = list(dict.fromkeys(i for rows in ranked.values() for i, *_ in rows))
            nodes: dict[str, TextNode] = {}
            if needed:
                first = [i for i, *_ in next(iter(ranked.values()), [])]
                order = list(dict.fromkeys([*first[: len(near)], *needed]))  # results first
                with timer("fetch_nodes", t, logger):
                    fetched, outcome.neighbourhood = await asyncio.to_thread(
                        self.store.nodes_near, order, near[: len(first)]
                    )
                nodes = {node.node_id: node for node in fetched}
            with timer("fusion", t, logger):
                for side, rows in ranked.items():
                    scored = [
                        _scored(nodes[i], score, vector_distance=d, bm25_score=b, combined_score=c)
                        for i, score, d, b, c in rows
                        if i in nodes
                    ]
                    setattr(outcome, side, scored)
                if mode == "vector":
                    outcome.fused = outcome.vector
                elif mode == "bm25":
                    outcome.fused = outcome.bm25
                await self._judge(query, vec, bm_raw, outcome, sources)
        return outcome

    async def _bm25(
        self, query: str, k: int, sources: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """The `k` best BM25 (id, score) pairs, with this retriever's BM25 settings."""
        return await asyncio.to_thread(
            self.store.bm25_search,
            query,
            k,
            k1=self.bm25_k1,
            b=self.bm25_b,
            fields=self.bm25_fields,
            sources=sources,
        )

    async def _judge(
        self,
        query: str,
        vec: VectorMatches,
        bm_raw: list[tuple[str, float]],
        outcome: SearchOutcome,
        sources: Sequence[str] | None,
    ) -> None:
        """The no-match rule's evidence and verdict. Code the query names is looked up
        first; the lexical evidence only when the vector side alone would decline and that
        code does not decide it, in a worker thread (BM25's lock and the tokenizer may be
        busy with an ingest), and the same way in every mode: a vector-only search asks
        BM25 for its two best scores too."""
        best = min((d for _, d in vec.hits), default=None)
        evidence = Evidence(excess=excess_of(best, vec.spread))
        cutoff = self.no_match_cutoff
        code = named_code(query) if cutoff is not None and evidence.excess is not None else []
        if code:
            evidence.code = code
            evidence.unseen_code = await asyncio.to_thread(self.store.unknown_code, code)
        if not evidence.names_unknown_code() and evidence.declines(cutoff):
            top = outcome.fused or outcome.vector or outcome.bm25
            ids = [n.node.node_id for n in top[:1]]
            if not bm_raw:
                bm_raw = await self._bm25(query, 2, sources)
            evidence.unseen, evidence.rarest_match = await asyncio.to_thread(
                self.store.lexical_evidence, query, ids
            )
            evidence.bm25_lead = bm25_lead([score for _, score in bm_raw])
        outcome.evidence = evidence
        outcome.confident = not evidence.declines(cutoff)

    def _rank(
        self,
        mode: str,
        n: int,
        distances: dict[str, float],
        bm25_scores: dict[str, float],
    ) -> dict[str, list[tuple[str, float, float | None, float | None, float | None]]]:
        """Ranked ids per output list: (id, score, distance, bm25, combined)."""
        thr = self.similarity_threshold
        out: dict[str, list[tuple[str, float, float | None, float | None, float | None]]] = {}
        if mode in ("vector", "separate"):
            vec = sorted(distances.items(), key=lambda kv: kv[1])
            out["vector"] = [
                (i, 1.0 - d, d, bm25_scores.get(i), None) for i, d in vec if thr is None or d <= thr
            ][:n]
        if mode in ("bm25", "separate"):
            bm = sorted(bm25_scores.items(), key=lambda kv: -kv[1])[:n]
            out["bm25"] = [(i, s, distances.get(i), s, None) for i, s in bm]
        if mode == "fused":
            fused = fuse(
                distances,
                bm25_scores,
                vector_weight=self.vector_weight,
                n_results=n,
                similarity_threshold=thr,
                min_combined_score=self.min_combined_score,
                normalization=self.normalization,
            )
            out["fused"] = [
                (f.node_id, f.combined_score, f.vector_distance, f.bm25_score, f.combined_score)
                for f in fused
            ]
        return out
