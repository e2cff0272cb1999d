"""The MCP tools: thin wrappers over the KnowledgeBase.

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
    JOB_STATES,
    crawl_progress_message,
    delete_progress_message,
    format_add,
    format_crawl,
    format_delete,
    format_job_started,
    format_jobs,
    format_read,
    format_refresh,
    format_search,
    format_stats,
    page_progress_message,
    refresh_progress_message,
)
from mcp_server.progress import Heartbeat
from mcp_server.schemas import (
    AddOutput,
    CrawlOutput,
    DeleteOutput,
    JobsOutput,
    ReadOutput,
    RefreshOutput,
    SearchOutput,
    StatsOutput,
)
from rag_app.console import printable
from rag_app.crawl_options import MAX_DEPTH
from rag_app.jobs import outcome_of
from rag_app.results import SEARCH_MODES, CrawlSummary, check_search_mode

Ctx = Context[AppContext, Any]

Query = Annotated[
    str,
    Field(description="What to look for: a question or keywords, Japanese or English."),
]
NResults = Annotated[
    int | None,
    Field(
        description=(
            "How many hits to return, 1-100. Leave it out for the server's default "
            "(3 unless its operator changed it). Each hit comes with its passage. The "
            "answer has a character budget (the server's, 3000 by default): when the "
            "passages fill it, fewer hits come back and the answer says how many were "
            "left out (left_out)."
        ),
        json_schema_extra={"minimum": 1, "maximum": 100},
    ),
]
Mode = Annotated[
    str | None,
    Field(
        description=(
            "Leave it out for the usual search (meaning and exact words combined). "
            "'vector': by meaning only. 'bm25': by exact words only (names, codes, numbers). "
            "'separate': both lists side by side, for you to weigh."
        ),
        # Advertised, not enforced by the SDK: pydantic's enum error would be a multi-line
        # dump; `rag_search` refuses a wrong mode (also "") in the KnowledgeBase's sentence.
        json_schema_extra=lambda schema: _string_enum(schema, SEARCH_MODES),
    ),
]
Scope = Annotated[
    str | None,
    Field(
        description=(
            "Only search these sources: a site (docs.python.org), a URL and what lies under "
            "it (https://example.com/guide: not .../guide-old) or a folder path. Leave it out "
            "to search everything."
        ),
    ),
]
ReadSource = Annotated[
    str,
    Field(description="The source to read: a URL (or file path) as given in a hit's Source line."),
]
Section = Annotated[
    str,
    Field(
        description=(
            "Optional: read only this section — a heading path as shown in a hit "
            "(Guide › Install, or Guide > Install) or one heading. Empty reads the whole source."
        )
    ),
]
Offset = Annotated[
    int,
    Field(
        description="Character to start at; pass the previous answer's next offset to continue.",
        json_schema_extra={"minimum": 0},
    ),
]
MaxChars = Annotated[
    int | None,
    Field(
        description="Characters per page, 100-50000. Leave it out for the default (4000).",
        json_schema_extra={"minimum": 100, "maximum": 50000},
    ),
]
Url = Annotated[str, Field(description="An http(s) URL.")]
StatsOffset = Annotated[
    int,
    Field(
        description=(
            "Skip this many sources (to page through a long list); an offset at or past "
            "the last source is an error that says how many there are."
        ),
        ge=0,
    ),
]
StatsLimit = Annotated[
    int,
    Field(description="How many sources to list, 1-500.", ge=1, le=500),
]
Source = Annotated[
    str,
    Field(description="The source to delete: a URL as listed by rag_stats (or a file path)."),
]
Pattern = Annotated[
    str,
    Field(description="Optional regular expression; only pages whose URL matches are crawled."),
]
MaxDepth = Annotated[
    int,
    Field(
        description=(
            "Link levels to follow, 1-20. 1 (the default) adds the pages the URL links to; "
            "2 or more crawls the site recursively, within the URL's site and folder."
        ),
        ge=1,
        le=MAX_DEPTH,
    ),
]
MaxPages = Annotated[
    int | None,
    Field(
        description="Pages to fetch at most, 1-10000. Leave it out for the server's default.",
        json_schema_extra={"minimum": 1, "maximum": 10000},
    ),
]
Exclude = Annotated[
    str,
    Field(description="Optional regular expression; pages whose URL matches are left out."),
]
UseSitemap = Annotated[
    bool,
    Field(
        description=(
            "Start from the site's sitemaps (those named in robots.txt, else /sitemap.xml) "
            "instead of the URL's links; only pages within the URL's folder are taken."
        )
    ),
]
Wait = Annotated[
    bool,
    Field(
        description=(
            "false (default): start a background job and answer at once with its id; follow "
            "it with rag_jobs. true: wait for the end and answer with the summary."
        )
    ),
]
CancelJob = Annotated[
    str,
    Field(description="Optional: the id of a running job to cancel (its stored pages stay)."),
]


def _string_enum(schema: dict[str, Any], values: tuple[str, ...]) -> None:
    """Put the allowed values on the string branch of an optional argument's schema
    (null stays allowed: it means "leave it out"), not on the whole argument."""
    for branch in schema.get("anyOf", []):
        if branch.get("type") == "string":
            branch["enum"] = list(values)


def _app(ctx: Ctx) -> AppContext:
    return ctx.request_context.lifespan_context


def _ok(text: str, structured: BaseModel) -> CallToolResult:
    """The text for the client with control characters from stored pages escaped (a
    client may show it in a terminal), line breaks kept; the structured content as is."""
    return CallToolResult(
        content=[TextContent(type="text", text=printable(text, lines=True))],
        structured_content=structured.model_dump(mode="json"),
    )


def _require_url(url: str) -> str:
    url = url.strip()
    if not url:
        raise ToolInputError("No URL was given; pass the http(s) URL of the page.")
    return url


def _require_pattern(pattern: str, argument: str = "pattern") -> str:
    """The crawler's own check (linear-time RE2 engine), before any page is fetched; the
    error names `argument` (pattern or exclude)."""
    from rag_app.crawl.url_match import compile_pattern

    compile_pattern(pattern, argument)  # raises a one-sentence InvalidPatternError
    return pattern


def _require_listed(offset: int, count: int) -> None:
    """Refuse a `rag_stats` offset with no source at it, as `rag_read` refuses one past
    its text: an answer of totals alone would read as a store with nothing more to list.
    Offset 0 of an empty store is its (empty) first page."""
    if offset and offset >= count:
        if not count:
            raise ToolInputError(f"offset {offset:,} is past the end: no source is stored.")
        raise ToolInputError(
            f"offset {offset:,} is past the last source (there are {count:,}; offsets "
            f"0–{count - 1:,} list them)."
        )


async def rag_search(
    query: Query,
    ctx: Ctx,
    n_results: NResults = None,
    mode: Mode = None,
    source: Scope = None,
) -> Annotated[CallToolResult, SearchOutput]:
    """Search the knowledge base of crawled web pages and documents; returns passages.

    Use it for questions about the content that was added with rag_add / rag_crawl; skip
    it for greetings and small talk. Each hit starts with `## [rank] Source: <url>`, then
    its page title › heading path and scores, then the passage around the match (the
    matching chunk widened to its section). Cite those URLs in your answer; to read more
    of a page or a whole section or table, call rag_read with the Source URL.
    No match gives 「該当する情報が見つかりませんでした」. When nothing stored answers the
    question (it names something the store never mentions and no passage is close), the
    answer starts with that sentence and lists the nearest pages as pointers only, without
    passages; structuredContent then has confident=false.
    """
    try:
        check_search_mode(mode)  # before the store service, which reads "" as no mode
        kb = await _app(ctx).knowledge_base()
        result = await kb.retrieve(query, n_results=n_results, mode=mode, source=source)
    except Exception as exc:
        return error_result("rag_search", exc)
    return _ok(format_search(result), SearchOutput.of(result))


async def rag_add(url: Url, ctx: Ctx) -> Annotated[CallToolResult, AddOutput]:
    """Fetch one web page and add it to the knowledge base (replacing what was stored for it).

    A URL of a PDF or Word (.docx) document is read too. Re-adding a URL refreshes its
    content; an unchanged page costs nothing. Private and local addresses are refused.
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
    url: Url,
    ctx: Ctx,
    pattern: Pattern = "",
    max_depth: MaxDepth = 1,
    max_pages: MaxPages = None,
    exclude: Exclude = "",
    sitemap: UseSitemap = False,
    wait: Wait = False,
) -> Annotated[CallToolResult, CrawlOutput]:
    """Crawl a site into the knowledge base: the pages a URL links to (max_depth 1), a
    whole documentation site under the URL's folder (max_depth 2+), or its sitemap.

    By default it answers at once with a job id (the crawl runs in the background; see
    rag_jobs for progress, the summary, or to cancel). With wait=true it sends progress
    notifications and answers with 「完了: Nページ / Mチャンク / エラー: E件」. A page that
    fails is counted and does not stop the crawl; robots.txt and crawl delays are obeyed.
    """
    from rag_app.crawl_options import CrawlOptions

    try:
        target = _require_url(url)
        pattern = _require_pattern(pattern)
        _require_pattern(exclude, "exclude")
        options = CrawlOptions(
            max_depth=max_depth, max_pages=max_pages, exclude=exclude, sitemap=sitemap
        )
        app = _app(ctx)
        kb = await app.knowledge_base()
        if not wait:
            job = await kb.start_crawl(target, pattern, options=options)
            return _ok(format_job_started(job), CrawlOutput.started(target, pattern, job))
        async with Heartbeat(
            ctx.report_progress, crawl_progress_message, interval=app.heartbeat_sec
        ) as beat:
            # a job this call follows. A cancelled call leaves it running (rag_jobs shows
            # it and cancels it): clients also cancel a call when their own time limit
            # runs out, which says nothing about the crawl
            job = await kb.start_crawl(target, pattern, options=options)
            done = await kb.wait_job(job["id"], progress=beat.update)
        summary = CrawlSummary.from_dict(outcome_of(done))
    except Exception as exc:
        return error_result("rag_crawl", exc)
    return _ok(format_crawl(summary), CrawlOutput.of(target, pattern, summary))


async def rag_refresh(ctx: Ctx, wait: Wait = False) -> Annotated[CallToolResult, RefreshOutput]:
    """Re-check every stored web page with conditional requests: re-ingest the pages that
    changed, remove those that are gone (404/410, or now noindex; never every page of a
    site at once: a site that answers 404 to everything keeps its pages and they are
    reported), leave the rest untouched (an unchanged page costs no embedding). Runs as a
    background job unless wait=true; while a refresh is running, answers with that job
    (joined=true) instead of starting a second one."""
    try:
        app = _app(ctx)
        kb = await app.knowledge_base()
        if not wait:
            job = await kb.start_refresh()
            return _ok(format_job_started(job), RefreshOutput.started(job))
        async with Heartbeat(
            ctx.report_progress, refresh_progress_message, interval=app.heartbeat_sec
        ) as beat:
            summary = await kb.refresh(progress=beat.update)
    except Exception as exc:
        return error_result("rag_refresh", exc)
    return _ok(format_refresh(summary), RefreshOutput.of(summary))


async def rag_jobs(ctx: Ctx, cancel: CancelJob = "") -> Annotated[CallToolResult, JobsOutput]:
    """List the background crawl and refresh jobs (running first) with their progress and
    summaries, or cancel one by id: it stops within about 2 s and keeps what it stored."""
    note = ""
    try:
        kb = await _app(ctx).knowledge_base()
        if cancel.strip():
            before = {j["id"]: j["state"] for j in await kb.jobs()}
            stopped = await kb.cancel_job(cancel.strip())
            if before.get(stopped["id"], "running") != "running":  # nothing was stopped
                note = (
                    f"ジョブ {stopped['id']} は既に終了しています"
                    f"（{JOB_STATES.get(stopped['state'], stopped['state'])}）。\n"
                )
        jobs = await kb.jobs()
    except Exception as exc:
        return error_result("rag_jobs", exc)
    return _ok(note + format_jobs(jobs), JobsOutput.of(jobs))


async def rag_delete(url: Source, ctx: Ctx) -> Annotated[CallToolResult, DeleteOutput]:
    """Delete everything stored for one source URL (see rag_stats for the stored URLs)."""
    try:
        target = _require_url(url)
        app = _app(ctx)
        kb = await app.knowledge_base()
        async with Heartbeat(
            ctx.report_progress, delete_progress_message, interval=app.heartbeat_sec, total=1
        ) as beat:
            deleted = await kb.delete_source(target)
            beat.update(1, 1)
    except Exception as exc:
        return error_result("rag_delete", exc)
    return _ok(format_delete(target, deleted), DeleteOutput(source=target, chunks_deleted=deleted))


async def rag_read(
    source: ReadSource,
    ctx: Ctx,
    section: Section = "",
    offset: Offset = 0,
    max_chars: MaxChars = None,
) -> Annotated[CallToolResult, ReadOutput]:
    """Read a stored source (or one section of it) in reading order, page by page.

    Use it after rag_search when a hit is not enough: to see the rest of its section,
    a whole table (e.g. to find the highest value) or a whole page. The text is the
    stored chunks joined in order with their headings; when more remains, the answer
    ends with the offset to pass next.
    """
    try:
        kb = await _app(ctx).knowledge_base()
        page = await kb.read_source(source, section=section, offset=offset, max_chars=max_chars)
    except Exception as exc:
        return error_result("rag_read", exc)
    return _ok(format_read(page), ReadOutput.of(page))


async def rag_stats(
    ctx: Ctx, offset: StatsOffset = 0, limit: StatsLimit = 20
) -> Annotated[CallToolResult, StatsOutput]:
    """Show what the knowledge base holds: chunk and source counts, the model, and the
    stored sources with their chunk counts and indexing dates, a page at a time."""
    try:
        kb = await _app(ctx).knowledge_base()
        stats = await kb.stats(offset, limit)  # one page travels, not every source
        _require_listed(offset, stats.source_count)
    except Exception as exc:
        return error_result("rag_stats", exc)
    return _ok(format_stats(stats, offset, limit), StatsOutput.of(stats, offset, limit))


TOOLS = (
    (rag_search, "Search the knowledge base", ToolAnnotations(read_only_hint=True)),
    (rag_add, "Add a web page", ToolAnnotations(open_world_hint=True, idempotent_hint=True)),
    (rag_crawl, "Crawl a site or a link-index page", ToolAnnotations(open_world_hint=True)),
    (rag_delete, "Delete a source", ToolAnnotations(destructive_hint=True)),
    (rag_stats, "Knowledge base statistics", ToolAnnotations(read_only_hint=True)),
    (rag_read, "Read a stored source", ToolAnnotations(read_only_hint=True)),
    (rag_jobs, "List or cancel crawl jobs", ToolAnnotations(destructive_hint=False)),
    (rag_refresh, "Refresh stored web pages", ToolAnnotations(open_world_hint=True)),
)
"""(function, title, annotations) for each tool, in the order they are listed."""
