"""A small documentation site for refresh tests (an index and numbered pages, each with
its own words), and what a knowledge base has stored of it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from rag_app.config import RAGSettings
from rag_app.crawl_options import CrawlOptions
from rag_app.knowledge import KnowledgeBase
from tests.programmable_site import html

DEEP = CrawlOptions(max_depth=3)
LOOPBACK = {
    "rag_allow_private_network": True,
    "rag_crawl_delay_sec": 0.0,
    "rag_crawl_timeout_sec": 3.0,
}
"""Settings that let a knowledge base crawl a test site on loopback without waiting."""


def loopback_settings(settings: RAGSettings, **update: Any) -> RAGSettings:
    return settings.model_copy(update={**LOOPBACK, **update})


@contextlib.asynccontextmanager
async def opened(settings: RAGSettings, embed: BaseEmbedding) -> AsyncIterator[KnowledgeBase]:
    """An open knowledge base, closed at the end of the block."""
    base = KnowledgeBase(settings, embed_model=embed)
    await base.open()
    try:
        yield base
    finally:
        await base.aclose()


def docs(n: int, heads: dict[int, str] | None = None) -> dict[str, str]:
    """`/docs/index.html` linking `p0.html` … `p{n-1}.html`; `heads` adds to a page's head."""
    pages = {"/docs/index.html": html("Home", "Welcome.", tuple(f"p{i}.html" for i in range(n)))}
    for i in range(n):
        pages[f"/docs/p{i}.html"] = html(
            f"Page {i}", f"Distinct text number {i} about topic{i}.", head=(heads or {}).get(i, "")
        )
    return pages


async def stored(kb: KnowledgeBase) -> list[str]:
    return sorted((await kb.stats()).sources)
