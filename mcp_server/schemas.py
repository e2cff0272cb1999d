"""Structured-output models of the tools (published as each tool's `outputSchema`).

The text content is for the LLM; these are for programs (the Slack router, scripts) that
want the numbers without parsing Japanese sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from mcp_server.formatting import crawl_error_pairs

if TYPE_CHECKING:
    from rag_app.results import (
        CrawlSummary,
        Hit,
        IngestResult,
        KBStats,
        ReadResult,
        RefreshSummary,
        RetrievalResult,
    )


class HitOut(BaseModel):
    """One retrieved chunk with where it came from and every score."""

    rank: int = Field(description="1-based rank within its list.")
    node_id: str
    source_url: str
    title: str
    heading_path: str = Field(description="Parent headings, e.g. `Guide > Install`.")
    page: int | None = Field(None, description="Page of a PDF (1-based); null otherwise.")
    content_type: str = Field(description="prose, heading or table.")
    chunk_index: int
    text: str = Field(description="The chunk that matched.")
    passage: str = Field(
        description="The chunk widened to its passage (neighbouring chunks of its section)."
    )
    vector_distance: float | None = Field(description="Cosine distance; null if BM25 only.")
    bm25_score: float | None = Field(description="Raw BM25 score; null if vector only.")
    combined_score: float = Field(description="Fused score in 0..1 (or the side's own score).")

    @classmethod
    def ranked(cls, hits: Sequence[Hit]) -> list[HitOut]:
        return [
            cls(
                rank=h.rank or rank,
                node_id=h.node_id,
                source_url=h.source_url,
                title=h.title,
                heading_path=h.heading_path,
                page=h.page,
                content_type=h.content_type,
                chunk_index=h.chunk_index,
                text=h.text,
                passage=h.passage or h.text,
                vector_distance=h.vector_distance,
                bm25_score=h.bm25_score,
                combined_score=h.combined_score,
            )
            for rank, h in enumerate(hits, start=1)
        ]


class SearchOutput(BaseModel):
    """`rag_search`: fused hits, or the raw vector and BM25 lists side by side (separate)."""

    query: str
    mode: str = Field(description="fused, vector, bm25 or separate.")
    hits: list[HitOut] = Field(description="Ranked hits (empty in separate mode).")
    vector_hits: list[HitOut] = Field(
        description="Raw vector-search list in separate mode; empty in the other modes."
    )
    bm25_hits: list[HitOut] = Field(
        description="Raw BM25 list in separate mode; empty in the other modes."
    )
    sources: list[str] = Field(description="Source URLs in rank order, each once.")
    timings_ms: dict[str, float]
    confident: bool = Field(
        True,
        description="False when nothing answers the query: the hits are only the nearest "
        "chunks (the text answer says no match was found).",
    )
    left_out: int = Field(
        0,
        description="How many of the n_results hits asked for were left out to keep the "
        "answer within the server's character budget (0 when none were).",
    )

    @classmethod
    def of(cls, result: RetrievalResult) -> SearchOutput:
        """The result as the schema describes it. Only separate mode returns the per-side
        lists: in vector and bm25 mode the retriever's lists are its raw candidates (more
        than the hits, none of them in the text), which `hits` already answers."""
        separate = result.mode == "separate"
        return cls(
            query=result.query,
            mode=result.mode,
            hits=HitOut.ranked(result.hits),
            vector_hits=HitOut.ranked(result.vector_hits) if separate else [],
            bm25_hits=HitOut.ranked(result.bm25_hits) if separate else [],
            sources=result.sources,
            timings_ms={k: round(v, 2) for k, v in result.timings.items()},
            confident=result.confident,
            left_out=result.left_out,
        )


MAX_OUTPUT_SECTIONS = 200
"""Heading paths listed in `rag_read`'s structured output."""


class ReadOutput(BaseModel):
    """`rag_read`: one page of a source's text in reading order."""

    source: str
    title: str
    section: str = Field(description="The section read; empty for the whole source.")
    text: str
    offset: int = Field(description="First character of this page.")
    next_offset: int | None = Field(description="Where the next page starts; null at the end.")
    total_chars: int
    sections: list[str] = Field(
        description="Heading paths of the source (of the section read, when one was), in "
        f"reading order: what `section` can name (the first {MAX_OUTPUT_SECTIONS})."
    )
    sections_total: int = Field(0, description="How many heading paths there are in all.")
    code_fence: str = Field(
        "",
        description="The opening fence line of a code block this page starts inside (the "
        "text before `offset` opened it); empty when none is.",
    )

    @classmethod
    def of(cls, page: ReadResult) -> ReadOutput:
        data = page.to_dict()
        # a 5,000-chunk source may have thousands: not repeated in full on every page
        data["sections"] = page.sections[:MAX_OUTPUT_SECTIONS]
        return cls(**data, sections_total=len(page.sections))


class AddOutput(BaseModel):
    """`rag_add`: what was stored for the page."""

    url: str = Field(description="The URL that was asked for.")
    source: str = Field(description="The normalised source URL the chunks are stored under.")
    chunks: int
    unchanged: bool = Field(description="True when the page had not changed (no re-embedding).")

    @classmethod
    def of(cls, url: str, result: IngestResult) -> AddOutput:
        return cls(url=url, source=result.source, chunks=result.chunks, unchanged=result.unchanged)


class CrawlErrorOut(BaseModel):
    """One page of a crawl that failed, with its reason."""

    url: str
    error: str


class CrawlOutput(BaseModel):
    """`rag_crawl`: the started job, or (wait=true) the crawl's summary."""

    url: str
    pattern: str
    job_id: str = Field("", description="The background job (empty when the call waited).")
    state: str = Field("done", description="running (a job was started) or done.")
    pages_crawled: int = 0
    chunks_stored: int = 0
    errors: int = 0
    unchanged: int = 0
    duplicates: int = Field(0, description="Pages already taken under another URL.")
    over_cap: int = Field(
        0,
        description="Pages in scope not fetched because the page limit was reached "
        "(each distinct page among the first 5,000 links met after it, then one per link).",
    )
    out_of_scope: int = Field(0, description="Links to other sites or folders, not followed.")
    filtered: int = Field(0, description="Pages left out by pattern, exclude or noindex.")
    error_details: list[CrawlErrorOut] = Field(default_factory=list)

    @classmethod
    def of(cls, url: str, pattern: str, summary: CrawlSummary) -> CrawlOutput:
        return cls(
            url=url,
            pattern=pattern,
            pages_crawled=summary.pages_crawled,
            chunks_stored=summary.chunks_stored,
            errors=summary.errors,
            unchanged=summary.unchanged,
            duplicates=summary.duplicates,
            over_cap=summary.over_cap,
            out_of_scope=summary.out_of_scope,
            filtered=summary.filtered,
            error_details=[CrawlErrorOut(url=u, error=e) for u, e in crawl_error_pairs(summary)],
        )

    @classmethod
    def started(cls, url: str, pattern: str, job: dict[str, Any]) -> CrawlOutput:
        return cls(url=url, pattern=pattern, job_id=job["id"], state=job["state"])


class RefreshOutput(BaseModel):
    """`rag_refresh`: the started job, or (wait=true) what the refresh found."""

    job_id: str = ""
    state: str = "done"
    checked: int = 0
    unchanged: int = 0
    updated: int = 0
    removed: int = 0
    errors: int = 0
    embedded: int = Field(0, description="Chunks embedded anew (0 when nothing changed).")
    removed_urls: list[str] = Field(default_factory=list)
    moved: int = Field(0, description="Pages stored again under their new canonical URL.")
    moved_pages: list[dict[str, str]] = Field(
        default_factory=list, description='{"from": old URL, "to": new URL} per moved page.'
    )
    joined: bool = Field(
        False, description="True when a refresh was already running: this is that job."
    )

    @classmethod
    def of(cls, summary: RefreshSummary) -> RefreshOutput:
        return cls(
            checked=summary.checked,
            unchanged=summary.unchanged,
            updated=summary.updated,
            removed=summary.removed,
            errors=summary.errors,
            embedded=summary.embedded,
            removed_urls=list(summary.removed_urls),
            moved=summary.moved,
            moved_pages=list(summary.moved_pages),
            joined=summary.joined,
        )

    @classmethod
    def started(cls, job: dict[str, Any]) -> RefreshOutput:
        return cls(job_id=job["id"], state=job["state"], joined=bool(job.get("joined")))


class JobOut(BaseModel):
    """One background job."""

    id: str
    kind: str = Field(description="crawl or refresh.")
    target: str
    state: str = Field(description="running, done, failed or cancelled.")
    done: int
    total: int
    error: str
    result: dict[str, Any] = Field(description="The summary (partial while running).")
    attempt: int = Field(
        1, description="1, or 2+ when a restarted store service runs an unfinished job again."
    )
    waiting: dict[str, Any] | None = Field(
        None,
        description="While the job's write waits behind a restore of the vector index or a "
        "reindex: {kind: restore|reindex, done, total} (chunks); null otherwise.",
    )


class JobsOutput(BaseModel):
    """`rag_jobs`: running jobs first, then recent ones."""

    jobs: list[JobOut]

    @classmethod
    def of(cls, jobs: Sequence[dict[str, Any]]) -> JobsOutput:
        return cls(jobs=[JobOut.model_validate(job) for job in jobs])


class DeleteOutput(BaseModel):
    """`rag_delete`: how many chunks were removed."""

    source: str
    chunks_deleted: int


class SourceOut(BaseModel):
    """One stored source."""

    source: str
    chunks: int
    indexed_at: str = Field(description="When it was last indexed (ISO 8601, UTC).")


class StatsOutput(BaseModel):
    """`rag_stats`: what is in the knowledge base."""

    total_chunks: int
    source_count: int
    sources: list[str] = Field(
        description="The stored sources of this page (from `offset`, sorted); "
        "`source_count` is how many there are in all."
    )
    source_details: list[SourceOut] = Field(
        description="One page of the sources (from `offset`) with chunk counts and dates."
    )
    offset: int = Field(description="Position of the first source in `source_details`.")
    embedding_model: str
    embedding_dimension: int
    bm25_documents: int
    vector_store: str
    bm25_dir: str

    @classmethod
    def of(cls, stats: KBStats, offset: int = 0, limit: int = 100) -> StatsOutput:
        page = stats.page(offset, limit)
        return cls(
            total_chunks=stats.total_chunks,
            source_count=stats.source_count,
            sources=list(page),
            source_details=[
                SourceOut(
                    source=src,
                    chunks=stats.source_chunks.get(src, 0),
                    indexed_at=stats.source_dates.get(src, ""),
                )
                for src in page
            ],
            offset=offset,
            embedding_model=stats.embedding_model,
            embedding_dimension=stats.embedding_dimension,
            bm25_documents=stats.bm25_documents,
            vector_store=stats.vector_store,
            bm25_dir=stats.bm25_dir,
        )
