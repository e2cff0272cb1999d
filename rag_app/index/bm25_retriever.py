"""BM25IndexRetriever: a LlamaIndex retriever over a shared `BM25Index`."""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from rag_app.index.bm25_index import BM25Index

DEFAULT_TOP_K = 10


class BM25IndexRetriever(BaseRetriever):
    """Keyword retrieval: `NodeWithScore(TextNode, raw BM25 score)`, best first.

    Every call builds fresh nodes, so callers may change them freely; the index is
    only read.
    """

    def __init__(
        self, index: BM25Index, similarity_top_k: int = DEFAULT_TOP_K, **kwargs: Any
    ) -> None:
        if similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be at least 1, got {similarity_top_k}.")
        self._index = index
        self.similarity_top_k = similarity_top_k
        super().__init__(**kwargs)

    @property
    def index(self) -> BM25Index:
        """The index searched."""
        return self._index

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self._index.search_documents(query_bundle.query_str, self.similarity_top_k)
        return [
            NodeWithScore(
                node=TextNode(id_=doc.id, text=doc.text, metadata=doc.metadata), score=score
            )
            for doc, score in hits
        ]
