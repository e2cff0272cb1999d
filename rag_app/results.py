"""Plain result types returned by the KnowledgeBase (easy to print, serialise, test)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from llama_index.core.schema import NodeWithScore

_SCORE_KEYS = ("vector_distance", "bm25_score", "combined_score")


@dataclass
class Hit:
    """One retrieved chunk with where it came from and every score."""

    node_id: str
    text: str
    source_url: str
    title: str
    heading_path: str
    content_type: str
    chunk_index: int
    vector_distance: float | None
    bm25_score: float | None
    combined_score: float
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_node(cls, nws: NodeWithScore) -> Hit:
        meta = dict(nws.node.metadata)
        combined = meta.get("combined_score")
        return cls(
            node_id=nws.node.node_id,
            text=nws.node.get_content(),
            source_url=str(meta.get("source_url", "")),
            title=str(meta.get("title", "")),
            heading_path=str(meta.get("heading_path", "")),
            content_type=str(meta.get("content_type", "")),
            chunk_index=int(meta.get("chunk_index", 0) or 0),
            vector_distance=meta.get("vector_distance"),
            bm25_score=meta.get("bm25_score"),
            combined_score=float(combined if combined is not None else (nws.score or 0.0)),
            metadata={k: v for k, v in meta.items() if k not in _SCORE_KEYS},
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unique_sources(hits: list[Hit]) -> list[str]:
    """Source URLs in rank order, each once."""
    return list(dict.fromkeys(h.source_url for h in hits if h.source_url))


def format_context(hits: list[Hit]) -> str:
    """`## Source: <url>` then the text; hits of one source grouped so a page appears once."""
    groups: dict[str, list[str]] = {}
    for h in hits:
        groups.setdefault(h.source_url, []).append(h.text)
    return "\n\n".join(f"## Source: {src}\n" + "\n\n".join(texts) for src, texts in groups.items())


@dataclass
class RetrievalResult:
    """A search: ranked hits, the raw per-side lists (separate mode) and timings (ms)."""

    query: str
    mode: str
    hits: list[Hit]
    vector_hits: list[Hit] = field(default_factory=list)
    bm25_hits: list[Hit] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def context(self) -> str:
        """Formatted text for an LLM; empty string when nothing matched (AC19)."""
        return format_context(self.hits)

    @property
    def sources(self) -> list[str]:
        return unique_sources(self.hits or [*self.vector_hits, *self.bm25_hits])

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "hits": [h.to_dict() for h in self.hits],
            "vector_hits": [h.to_dict() for h in self.vector_hits],
            "bm25_hits": [h.to_dict() for h in self.bm25_hits],
            "sources": self.sources,
            "timings_ms": {k: round(v, 2) for k, v in self.timings.items()},
        }


@dataclass
class IngestResult:
    """Outcome of ingesting one source."""

    source: str
    chunks: int
    embedded: int = 0
    removed: int = 0
    unchanged: bool = False


@dataclass
class DirIndexSummary:
    """Outcome of `index_dir` (spec 001 §3.2)."""

    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    chunks: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class CrawlSummary:
    """Outcome of an index-page crawl (spec 000 format)."""

    pages_crawled: int = 0
    chunks_stored: int = 0
    errors: int = 0
    unchanged: int = 0
    error_details: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KBStats:
    """What is in the knowledge base."""

    total_chunks: int
    sources: list[str]
    embedding_model: str
    embedding_dimension: int
    bm25_documents: int
    vector_store: str
    bm25_dir: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "source_count": len(self.sources)}
