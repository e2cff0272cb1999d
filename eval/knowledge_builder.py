"""Build (or reuse) the knowledge base an evaluation searches.

Ingest is keyed by the content hash, so a document whose text did not change is never
re-chunked or re-embedded. That is what makes reruns cheap, but it would also make an
evaluation silently reuse chunks built another way. So every way of building gets its
own Chroma collection and BM25 folder inside the persist directory, named after the
chunking and a fingerprint of the pipeline (embedding model and the text `embed_text`
makes of a probe chunk): `eval-c200-o30-1a2b3c4d`, `bm25-c200-o30-1a2b3c4d`. A second
run with the same build re-ingests nothing; sources that left the document set are
deleted, so the index mirrors the documents.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import TextNode

import rag_app.ingest_transforms as ingest_transforms
from eval.datasets import EvalDocument
from rag_app.config import RAGSettings, load_settings
from rag_app.knowledge import KnowledgeBase
from rag_app.parsing.metadata_modes import set_metadata_modes

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


def pipeline_fingerprint(embedding_model: str, embed_context: bool = True) -> str:
    """8 hex digits that change when what gets embedded changes (model or EMBED text)."""
    probe = TextNode(
        text="本文 body text",
        metadata={
            "title": "題名 title",
            "heading_path": "見出し > heading",
            "content_type": "prose",
        },
    )
    set_metadata_modes([probe], embed_context)
    text = ingest_transforms.embed_text(probe)
    return hashlib.sha256(f"{embedding_model}\x00{text}".encode()).hexdigest()[:8]


def collection_name(chunk_size: int, chunk_overlap: int, fingerprint: str = "") -> str:
    """The Chroma collection that holds the documents chunked (and embedded) this way."""
    name = f"eval-c{chunk_size}-o{chunk_overlap}"
    return f"{name}-{fingerprint}" if fingerprint else name


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
    base = {"rag_chunk_size": chunk_size, "rag_chunk_overlap": chunk_overlap}
    derived = load_settings(**{**base, **overrides})
    fingerprint = pipeline_fingerprint(derived.embedding_model_name, derived.rag_embed_context)
    name = collection_name(chunk_size, chunk_overlap, fingerprint)
    storage = {
        "chromadb_persist_dir": str(folder),
        "bm25_persist_dir": str(folder / name.replace("eval-", "bm25-", 1)),
        "rag_collection_name": name,
    }
    # rankings are evaluated chunk by chunk: hits are not widened to passages (which would
    # merge neighbouring hits and pull in further candidates)
    ranking = {"rag_passage_chars": 0}
    return load_settings(**{**base, **storage, **ranking, **overrides})


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
