"""While documents are being embedded, queries run on one OpenMP thread; otherwise on
the full team. The limit is the query lane's own: the document lane keeps its team."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

from rag_app.embedding.builtin import QueryTeam, _load_model


def omp_threads() -> int:
    """The calling thread's OpenMP team size (omp_get_max_threads)."""
    libs = ThreadpoolController().select(user_api="openmp").lib_controllers
    return max(lib.num_threads for lib in libs)


def test_a_query_uses_one_thread_only_while_documents_are_embedded() -> None:
    _load_model()  # loads the engine's OpenMP runtime
    team = QueryTeam()
    lane = ThreadPoolExecutor(1)
    other = ThreadPoolExecutor(1)
    try:
        full = lane.submit(lambda: (team.fit(), omp_threads())[1]).result()
        with team.documents():
            busy = lane.submit(lambda: (team.fit(), omp_threads())[1]).result()
            elsewhere = other.submit(omp_threads).result()  # another thread is not limited
        again = lane.submit(lambda: (team.fit(), omp_threads())[1]).result()
    finally:
        lane.shutdown()
        other.shutdown()
    assert busy == 1
    assert full == again == elsewhere >= 1


async def test_the_builtin_model_marks_document_batches() -> None:
    from rag_app.embedding import builtin

    model = builtin.BuiltinE5Embedding()
    seen: list[int] = []
    real = builtin.BuiltinE5Embedding._encode

    def encode(self: builtin.BuiltinE5Embedding, texts: list[str], is_query: bool) -> list:
        seen.append(builtin.QUERY_TEAM._documents)
        return real(self, texts, is_query)

    builtin.BuiltinE5Embedding._encode = encode  # type: ignore[method-assign]
    try:
        await model.aget_text_embedding_batch(["一つ目の文書", "二つ目の文書"])
        await model.aget_query_embedding("文書")
        await asyncio.to_thread(model.get_text_embedding_batch, ["三つ目"])
    finally:
        builtin.BuiltinE5Embedding._encode = real  # type: ignore[method-assign]
    assert seen[0] == 1 and seen[1] == 0 and seen[2] == 1, seen
    assert builtin.QUERY_TEAM._documents == 0
