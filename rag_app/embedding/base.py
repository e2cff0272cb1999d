"""ProviderEmbedding: the LlamaIndex `BaseEmbedding` every provider here implements.

On top of LlamaIndex's interface it adds what the knowledge base needs before it
writes anything: an availability probe (`is_available` / `ais_available`) and the
vector dimension (recorded in the Chroma collection).
"""

from __future__ import annotations

from abc import abstractmethod

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding

DIMENSION_PROBE_TEXT = "dimension probe"


class ProviderEmbedding(BaseEmbedding):
    """A `BaseEmbedding` that can be probed and knows (or learns) its dimension."""

    @property
    @abstractmethod
    def dimension(self) -> int | None:
        """Vector length, or None while a remote model has not answered yet."""

    @abstractmethod
    def is_available(self) -> bool:
        """True when the provider can embed right now (quick check, never raises)."""

    @abstractmethod
    async def ais_available(self) -> bool:
        """Async `is_available`; never blocks the event loop."""

    def resolve_dimension(self) -> int:
        """The vector length, embedding a tiny probe text once if still unknown."""
        if self.dimension is None:
            return len(self.get_query_embedding(DIMENSION_PROBE_TEXT))
        return self.dimension

    async def aresolve_dimension(self) -> int:
        """Async `resolve_dimension`."""
        if self.dimension is None:
            return len(await self.aget_query_embedding(DIMENSION_PROBE_TEXT))
        return self.dimension

    # Single texts go through the batch path so prefixes and retries live in one place.
    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._aget_text_embeddings([text]))[0]
