"""Build (or reuse) the knowledge base an evaluation searches.

Each chunking gets its own Chroma collection and BM25 folder inside the persist
directory (`eval-c200-o30`, `bm25-c200-o30`), because ingest is keyed by the content
hash: the same document re-chunked differently would otherwise count as unchanged. A
second run with the same chunking re-ingests nothing (hash match, no embedding call);
sources that left the document set are deleted, so the index mirrors the documents.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from eval.datasets import EvalDocument
from rag_app.config import RAGSettings, load_settings
from rag_app.knowledge import KnowledgeBase

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class BuildSummary:
    """What a build did: documents ingested anew, reused unchanged, deleted; chunks."""

    added: int
    unchanged: int
    deleted: int
    chunks: int

    def describe(self) -> str:
        """One line for the terminal."""
        return (
            f"{self.chunks} chunks ({self.added} documents ingested, {self.unchanged} reused, "
            f"{self.deleted} removed)"
        )


def collection_name(chunk_size: int, chunk_overlap: int) -> str:
    """The Chroma collection that holds the documents chunked this way."""
    return f"eval-c{chunk_size}-o{chunk_overlap}"


def eval_settings(
    persist_dir: str | os.PathLike[str],
    chunk_size: int,
    chunk_overlap: int,
    **overrides: Any,
) -> RAGSettings:
    """Settings (env and `.env` included) with the evaluation's storage and chunking.

    `overrides` win over the derived values. Raises `SettingsError` (one sentence) for
    invalid values such as overlap >= size.
    """
    folder = Path(persist_dir)
    values: dict[str, Any] = {
        "chromadb_persist_dir": str(folder),
        "bm25_persist_dir": str(folder / f"bm25-c{chunk_size}-o{chunk_overlap}"),
        "rag_collection_name": collection_name(chunk_size, chunk_overlap),
        "rag_chunk_size": chunk_size,
        "rag_chunk_overlap": chunk_overlap,
    }
    return load_settings(**{**values, **overrides})


async def build_knowledge_base(
    documents: Sequence[EvalDocument],
    settings: RAGSettings,
    *,
    embed_model: BaseEmbedding | None = None,
    client: Any | None = None,
    progress: Progress | None = None,
) -> tuple[KnowledgeBase, BuildSummary]:
    """An opened knowledge base holding exactly `documents` (ingested or reused)."""
    kb = KnowledgeBase(settings, embed_model=embed_model, client=client)
    await kb.open()
    wanted = {doc.source for doc in documents}
    stale = [s for s in (await kb.stats()).sources if s not in wanted]
    added = unchanged = chunks = 0
    for done, doc in enumerate(documents, 1):
        result = await kb.ingest_text(doc.source, doc.text, title=doc.title, kind="eval")
        chunks += result.chunks
        if result.unchanged:
            unchanged += 1
        else:
            added += 1
        if progress is not None:
            progress(done, len(documents))
    for source in stale:
        await kb.delete_source(source)
    return kb, BuildSummary(added=added, unchanged=unchanged, deleted=len(stale), chunks=chunks)
