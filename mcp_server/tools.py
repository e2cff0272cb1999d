"""The five MCP tools: thin wrappers over the KnowledgeBase.

Each tool returns the spec's text for the LLM plus structured content (its output schema
is in `schemas`). Every failure becomes an `isError` result with one sentence
(`failures`). No tool takes a lock: the KnowledgeBase serialises its own writes, so a
search is answered while a crawl runs.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from mcp_server.app_context import AppContext
from mcp_server.failures import ToolInputError, error_result
from mcp_server.formatting import (
    crawl_progress_message,
    format_add,
    format_crawl,
    format_delete,
    format_search,
    format_stats,
    page_progress_message,
)
from mcp_server.progress import Heartbeat
from mcp_server.schemas import AddOutput, CrawlOutput, DeleteOutput, SearchOutput, StatsOutput

SEARCH_MODES = ("fused", "vector", "bm25", "separate")
Ctx = Context[AppContext, Any]

Query = Annotated[
    str,
    Field(description="What to look for: a question or keywords, Japanese or English."),
]
NResults = Annotated[
    int | None,
    Field(
        description="How many chunks to return (1-100); default RAG_RETRIEVAL_COUNT.",
        json_schema_extra={"minimum": 1, "maximum": 100},
    ),
]
Mode = Annotated[
    str | None,
    Field(
        description=(
            "fused (vector + BM25 combined, the default when hybrid search is on), vector, "
            "bm25, or separate: the raw vector and BM25 lists side by side, for you to weigh."
        ),
        # Advertised, not enforced here: the KnowledgeBase answers a wrong mode in one
        # sentence, where pydantic's enum error would be a multi-line dump.
        json_schema_extra={"enum": [*SEARCH_MODES, None]},
    ),
]
Url = Annotated[str, Field(description="An http(s) URL.")]
Source = Annotated[
    str,
    Field(description="The source to delete: a URL as listed by rag_stats (or a file path)."),
]
Pattern = Annotated[
    str,
    Field(description="Optional regular expression; only links whose URL matches are crawled."),
]


def _app(ctx: Ctx) -> AppContext:
    return ctx.request_context.lifespan_context


def _ok(text: str, structured: BaseModel) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured.model_dump(mode="json"),
    )


def _require_url(url: str) -> str:
    url = url.strip()
    if not url:
        raise ToolInputError("No URL was given; pass the http(s) URL of the page.")
    return url


def _require_pattern(pattern: str) -> str:
    """The crawler's own check (linear-time RE2 engine), before any page is fetched."""
    from rag_app.crawl.links import compile_pattern

    compile_pattern(pattern)  # raises a one-sentence InvalidPatternError
    return pattern


async def rag_search(
    query: Query,
    ctx: Ctx,
    n_results: NResults = None,
    mode: Mode = None,
) -> Annotated[CallToolResult, SearchOutput]:
    """Search the knowledge base of crawled web pages and return the matching passages.

    Use it for questions about the content that was added with rag_add / rag_crawl; skip
    it for greetings and small talk. The text result lists each passage under
    `## Source: <url>` (passages of one page grouped): cite those URLs in your answer.
    With mode="separate" you get two sections, vector-search and BM25 keyword results,
    side by side. No match gives 「該当する情報が見つかりませんでした」.
    """
    try:
        kb = await _app(ctx).knowledge_base()
        result = await kb.retrieve(query, n_results=n_results, mode=mode)
    except Exception as exc:
        return error_result("rag_search", exc)
    return _ok(format_search(result), SearchOutput.of(result))


async def rag_add(url: Url, ctx: Ctx) -> Annotated[CallToolResult, AddOutput]:
    """Fetch one web page and add it to the knowledge base (replacing what was stored for it).

    Re-adding a URL refreshes its content; an unchanged page costs nothing. Private and
    local addresses are refused.
    """
    try:
        target = _require_url(url)
        app = _app(ctx)
        kb = await app.knowledge_base()
        async with Heartbeat(
            ctx.report_progress, page_progress_message, interval=app.heartbeat_sec, total=1
        ) as beat:
            result = await kb.ingest_page(target)
            beat.update(1, 1)
    except Exception as exc:
        return error_result("rag_add", exc)
    return _ok(format_add(result), AddOutput.of(target, result))


async def rag_crawl(
    url: Url, ctx: Ctx, pattern: Pattern = ""
) -> Annotated[CallToolResult, CrawlOutput]:
    """Crawl a link-index page: add every same-site page it links to (one level deep).

    `pattern` (a regular expression) keeps only matching links. Sends progress
    notifications while it runs; a page that fails is counted in the summary
    「完了: Nページ / Mチャンク / エラー: E件」 and does not stop the crawl.
    """
    try:
        target = _require_url(url)
        pattern = _require_pattern(pattern)
        app = _app(ctx)
        kb = await app.knowledge_base()
        async with Heartbeat(
            ctx.report_progress, crawl_progress_message, interval=app.heartbeat_sec
        ) as beat:
            summary = await kb.ingest_from_index(target, pattern, progress=beat.update)
    except Exception as exc:
        return error_result("rag_crawl", exc)
    return _ok(format_crawl(summary), CrawlOutput.of(target, pattern, summary))


async def rag_delete(url: Source, ctx: Ctx) -> Annotated[CallToolResult, DeleteOutput]:
    """Delete everything stored for one source URL (see rag_stats for the stored URLs)."""
    try:
        target = _require_url(url)
        kb = await _app(ctx).knowledge_base()
        deleted = await kb.delete_source(target)
    except Exception as exc:
        return error_result("rag_delete", exc)
    return _ok(format_delete(target, deleted), DeleteOutput(source=target, chunks_deleted=deleted))


async def rag_stats(ctx: Ctx) -> Annotated[CallToolResult, StatsOutput]:
    """Show what the knowledge base holds: chunk and source counts, model, stored URLs."""
    try:
        kb = await _app(ctx).knowledge_base()
        stats = await kb.stats()
    except Exception as exc:
        return error_result("rag_stats", exc)
    return _ok(format_stats(stats), StatsOutput.of(stats))


TOOLS = (
    (rag_search, "Search the knowledge base", ToolAnnotations(read_only_hint=True)),
    (rag_add, "Add a web page", ToolAnnotations(open_world_hint=True, idempotent_hint=True)),
    (rag_crawl, "Crawl a link-index page", ToolAnnotations(open_world_hint=True)),
    (rag_delete, "Delete a source", ToolAnnotations(destructive_hint=True)),
    (rag_stats, "Knowledge base statistics", ToolAnnotations(read_only_hint=True)),
)
"""(function, title, annotations) for each tool, in the order they are listed."""
