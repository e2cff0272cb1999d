"""The knowledge base against a real `chroma run` server (CHROMA_HOST)."""

from __future__ import annotations

import shutil
from pathlib import Path

from rag_app.config import RAGSettings
from rag_app.knowledge import KnowledgeBase
from tests.conftest import SAMPLES, CountingEmbedding


async def test_ingest_and_search_through_chroma_server(
    chroma_server: int, settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    remote = settings.model_copy(update={"chroma_host": "127.0.0.1", "chroma_port": chroma_server})
    kb = KnowledgeBase(remote, embed_model=counting_embed)
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    summary = await kb.index_dir(docs)
    assert summary.added == 4
    stats = await kb.stats()
    assert stats.vector_store == f"chroma://127.0.0.1:{chroma_server}"
    assert stats.total_chunks == stats.bm25_documents > 0
    hit = (await kb.retrieve("りゅうおう")).hits[0]
    assert hit.text.startswith("名前: りゅうおう")
    # nothing was written to the local Chroma directory
    assert not Path(remote.chromadb_persist_dir).exists()
