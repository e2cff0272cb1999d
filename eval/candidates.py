"""Candidate lists fetched once per query, then ranked offline by any fusion method.

The hybrid retriever asks both sides for `fetch_count(n)` candidates and fuses them;
fusion itself is pure (`rag_app.index.fusion.fuse`). A sweep over α therefore needs
the two candidate lists only once per query: every α (and RRF, and each side alone)
is a cheap re-ranking of the same lists, exactly as the retriever would rank them.
Changing BM25's k1/b only re-runs the BM25 side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from eval.datasets import EvalQuery
from eval.metrics import mrr, ndcg_at_k, recall_at_k
from rag_app.index.bm25_index import BM25Index
from rag_app.index.fusion import fetch_count, fuse
from rag_app.knowledge import KnowledgeBase

Progress = Callable[[int, int], None]
RRF_K = 60
"""The usual reciprocal-rank-fusion constant (Cormack et al. 2009)."""


@dataclass(frozen=True)
class QueryCandidates:
    """One query's raw candidates: chunk id → cosine distance, and → BM25 score, best first."""

    query: EvalQuery
    vector: dict[str, float]
    bm25: dict[str, float]


@dataclass(frozen=True)
class CandidateSet:
    """Candidates of every query plus the source of each chunk id seen."""

    items: list[QueryCandidates]
    source_of: dict[str, str]
    fetch: int


@dataclass(frozen=True)
class RankScores:
    """Source-level means over the answerable queries (several chunks of a source count once)."""

    ndcg: float
    mrr: float
    recall: float
    hit_rate: float
    queries: int


Ranker = Callable[[QueryCandidates], list[str]]
"""Ranks one query's candidates: chunk ids, best first."""


async def fetch_candidates(
    kb: KnowledgeBase,
    queries: Sequence[EvalQuery],
    n_results: int = 10,
    *,
    progress: Progress | None = None,
) -> CandidateSet:
    """Ask both retrievers of `kb` for the candidates the hybrid retriever would fuse."""
    await kb.open()
    retriever = kb.retriever(n_results=n_results)
    fetch = fetch_count(n_results)
    source_of = _sources(kb.bm25)
    items: list[QueryCandidates] = []
    for done, query in enumerate(queries, 1):
        text = query.query.strip()
        embedding = await retriever.embed_model.aget_query_embedding(text)
        vector = dict(retriever.store.query_ids(embedding, fetch))
        bm25 = dict(retriever.bm25.search(text, fetch))
        items.append(QueryCandidates(query, vector, bm25))
        if progress is not None:
            progress(done, len(queries))
    return CandidateSet(items, source_of, fetch)


def refetch_bm25(kb: KnowledgeBase, candidates: CandidateSet, k1: float, b: float) -> CandidateSet:
    """The same vector lists with BM25 lists re-scored under another k1 and b."""
    index = kb.bm25
    items = [
        replace(
            c,
            bm25=dict(index.search(c.query.query.strip(), candidates.fetch, k1=k1, b=b)),
        )
        for c in candidates.items
    ]
    return replace(candidates, items=items)


def _sources(index: BM25Index) -> dict[str, str]:
    return {i: source for source in index.sources() for i in index.ids_for_source(source)}


# --- rankers ----------------------------------------------------------------
def vector_ranker(n_results: int, threshold: float | None = None) -> Ranker:
    """Vector search alone (cosine distance, optional distance threshold)."""

    def rank(c: QueryCandidates) -> list[str]:
        ranked = sorted(c.vector.items(), key=lambda kv: kv[1])
        return [i for i, d in ranked if threshold is None or d <= threshold][:n_results]

    return rank


def bm25_ranker(n_results: int) -> Ranker:
    """BM25 alone."""

    def rank(c: QueryCandidates) -> list[str]:
        return [i for i, _ in sorted(c.bm25.items(), key=lambda kv: -kv[1])][:n_results]

    return rank


def cc_ranker(
    n_results: int,
    alpha: float,
    threshold: float | None = None,
    normalization: str = "min-max",
) -> Ranker:
    """The project's fusion: normalised per side (min–max by default),
    `alpha * vector + (1 - alpha) * bm25`, ties decided by the lists' margins."""

    def rank(c: QueryCandidates) -> list[str]:
        fused = fuse(
            c.vector,
            c.bm25,
            vector_weight=alpha,
            n_results=n_results,
            similarity_threshold=threshold,
            normalization=normalization,
        )
        return [f.node_id for f in fused]

    return rank


def rrf_ranker(n_results: int, k: int = RRF_K) -> Ranker:
    """Reciprocal rank fusion: Σ 1 / (k + rank) over the two lists (for comparison)."""

    def rank(c: QueryCandidates) -> list[str]:
        scores: dict[str, float] = {}
        best: dict[str, int] = {}
        lists = (
            [i for i, _ in sorted(c.vector.items(), key=lambda kv: kv[1])],
            [i for i, _ in sorted(c.bm25.items(), key=lambda kv: -kv[1])],
        )
        for ranked in lists:
            for position, chunk in enumerate(ranked, 1):
                scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (k + position)
                best[chunk] = min(best.get(chunk, position), position)
        order = sorted(scores, key=lambda i: (-scores[i], best[i], i))
        return order[:n_results]

    return rank


def score_ranker(
    candidates: CandidateSet, ranker: Ranker, k: int = 10, recall_k: int = 5
) -> RankScores:
    """nDCG@k, MRR (top k), Recall@recall_k and Hit@k at source level, over answerable queries."""
    totals = [0.0, 0.0, 0.0, 0.0]
    count = 0
    for c in candidates.items:
        expected = c.query.expected_sources
        if not expected:
            continue
        sources = list(dict.fromkeys(candidates.source_of.get(i, i) for i in ranker(c)))
        totals[0] += ndcg_at_k(sources, expected, k)
        totals[1] += mrr(sources, expected, k)
        totals[2] += recall_at_k(sources, expected, recall_k)
        totals[3] += 1.0 if any(s in expected for s in sources[:k]) else 0.0
        count += 1
    if count == 0:
        return RankScores(0.0, 0.0, 0.0, 0.0, 0)
    ndcg, rr, recall, hit = (t / count for t in totals)
    return RankScores(ndcg=ndcg, mrr=rr, recall=recall, hit_rate=hit, queries=count)
