"""Run evaluation queries through any retrieve function and build the report.

The runner knows nothing of the knowledge base: the caller passes
`retrieve(query, n_results) -> ranked source ids`, so the CLI, notebooks and tests can
evaluate the hybrid retriever, vector-only or BM25-only search, or a fake alike.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from eval.datasets import EvalQuery
from eval.metrics import score_query, unique_sources
from eval.report import EvaluationConfig, EvaluationReport, QueryResult

Retrieve = Callable[[str, int], Awaitable[Sequence[str]]]
"""Async search: (query text, number of results) -> source ids, best first (repeats allowed)."""

Progress = Callable[[int, int], None]
"""Called after each query with (done, total)."""


async def evaluate_queries(
    retrieve: Retrieve,
    queries: Sequence[EvalQuery],
    n_results: int = 5,
    k: int | None = None,
    *,
    config: EvaluationConfig | None = None,
    progress: Progress | None = None,
) -> EvaluationReport:
    """Ask every query in turn and score the unique sources against the expected ones.

    `k` (default `n_results`) is the cut-off for every metric. `config` describes the
    run in the report (chunking, weight, dataset...); its `n_results` and `k` are set
    from the arguments. Errors raised by `retrieve` propagate unchanged.
    """
    if n_results < 1:
        raise ValueError(f"n_results must be at least 1, got {n_results}")
    if not queries:
        raise ValueError("there are no queries to evaluate")
    cutoff = n_results if k is None else k
    if cutoff < 1:
        raise ValueError(f"k must be at least 1, got {cutoff}")
    results: list[QueryResult] = []
    for done, query in enumerate(queries, 1):
        started = time.perf_counter()
        raw = await retrieve(query.query, n_results)
        latency_ms = (time.perf_counter() - started) * 1000
        ranked = unique_sources(raw)
        negative = set(query.negative_sources)
        results.append(
            QueryResult(
                id=query.id,
                query=query.query,
                expected_sources=list(query.expected_sources),
                retrieved_sources=ranked,
                metrics=score_query(ranked, query.expected_sources, cutoff),
                category=query.category,
                negative_hits=[s for s in ranked[:cutoff] if s in negative],
                latency_ms=round(latency_ms, 3),
            )
        )
        if progress is not None:
            progress(done, len(queries))
    base = config or EvaluationConfig(dataset="", n_results=n_results, k=cutoff)
    return EvaluationReport.build(replace(base, n_results=n_results, k=cutoff), results)
