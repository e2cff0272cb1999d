"""How far one crawl goes: depth, page limit, exclusions, sitemaps (light to import:
clients build these before talking to the store's owner)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rag_app.errors import RAGError

MAX_DEPTH = 20
"""Deepest link level a crawl may follow."""


@dataclass(frozen=True)
class CrawlOptions:
    """How far a crawl goes; `max_pages` None means `RAG_MAX_CRAWL_PAGES`."""

    max_depth: int = 1
    max_pages: int | None = None
    exclude: str = ""
    sitemap: bool = False
    prune: bool = False

    def validated(self, default_pages: int, page_limit: int) -> CrawlOptions:
        """These options with the page limit filled in, or a one-line `RAGError`."""
        if not 1 <= self.max_depth <= MAX_DEPTH:
            raise RAGError(f"max_depth must be between 1 and {MAX_DEPTH}, got {self.max_depth}.")
        pages = default_pages if self.max_pages is None else self.max_pages
        if not 1 <= pages <= page_limit:
            raise RAGError(f"max_pages must be between 1 and {page_limit:,}, got {pages}.")
        return dataclasses.replace(self, max_pages=pages)

    @property
    def recursive(self) -> bool:
        """True when pages are visited by following links or sitemaps (not one index)."""
        return self.max_depth > 1 or self.sitemap


__all__ = ["MAX_DEPTH", "CrawlOptions"]
