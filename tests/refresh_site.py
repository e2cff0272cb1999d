"""A small documentation site for refresh tests (an index and numbered pages, each with
its own words), and what a knowledge base has stored of it."""

from __future__ import annotations

from rag_app.crawl_options import CrawlOptions
from rag_app.knowledge import KnowledgeBase
from tests.programmable_site import html

DEEP = CrawlOptions(max_depth=3)


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
