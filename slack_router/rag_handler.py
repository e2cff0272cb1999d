"""RagCommandHandler: runs a parsed `rag` command through the MCP tools and posts replies.

`post` is a callable that always answers in the user's thread (the router builds it),
so this module decides only WHAT to say: the crawl start message at once, then the
summary; numbers come from the tool's structured content when present, otherwise the
tool's own text is posted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_router import replies
from slack_router.commands import RagCommand
from slack_router.mcp_manager import (
    MCPCallError,
    MCPManager,
    MCPToolNotFoundError,
    ProgressCallback,
    ToolResult,
)

logger = logging.getLogger(__name__)

Post = Callable[[str], Awaitable[None]]

TOOL_FOR_ACTION = {
    "crawl": "rag_crawl",
    "add": "rag_add",
    "status": "rag_stats",
    "delete": "rag_delete",
}

_PAGES = ("pages_crawled", "pages", "page_count", "pages_ingested", "crawled")
_CHUNKS = ("chunks_stored", "chunks", "chunk_count", "chunks_added", "total_chunks")
_ERRORS = ("errors", "error_count", "errors_count", "failed", "failures")
_TOTAL_CHUNKS = ("total_chunks", "chunk_count", "chunks", "count")
_SOURCES = ("source_count", "sources", "source_urls", "total_sources", "url_count", "urls")
_DELETED = ("deleted", "chunks_deleted", "deleted_chunks", "deleted_count", "chunks", "count")


def _payload(structured: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The structured content, unwrapped from the SDK's `{"result": {...}}` envelope."""
    if not structured:
        return {}
    inner = structured.get("result")
    if len(structured) == 1 and isinstance(inner, Mapping):
        return inner
    return structured


def count_field(data: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    """First of `names` holding a count: an int, or a list whose length is the count."""
    for name in names:
        value = data.get(name)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, list):
            return len(value)
    return None


_TOOL_HEADER = re.compile(r"^エラー: [^\n]*?。\s*原因:\s*")
"""The tool's own `エラー: …。 原因: ` opening, which the reply writes itself."""


def _reason(result: ToolResult) -> str:
    return _TOOL_HEADER.sub("", result.text, count=1).strip() or "原因不明のエラーが発生しました"


def _call_failure(err: MCPCallError) -> str:
    if err.restarted:
        return replies.CONNECTION_LOST
    if err.connection_lost:
        return replies.SERVER_DOWN
    return str(err)


class RagCommandHandler:
    """Executes `rag crawl|add|status|delete` via MCP; `mcp=None` means MCP is off."""

    def __init__(self, mcp: MCPManager | None) -> None:
        self._mcp = mcp

    async def run(self, command: RagCommand, post: Post) -> None:
        """Answer one command in the thread; never raises for tool or MCP failures."""
        help_text = command.reply_text
        if help_text is not None:
            await post(help_text)
            return
        tool = TOOL_FOR_ACTION[command.action]
        if self._mcp is None or not self._mcp.has_tool(tool):
            await post(replies.RAG_DISABLED)
            return
        if command.action == "crawl":
            await post(replies.CRAWL_STARTED)
        try:
            result = await self._call(tool, command)
        except MCPToolNotFoundError:
            await post(replies.RAG_DISABLED)
            return
        except MCPCallError as err:
            await post(self._failure(command, _call_failure(err)))
            return
        if result.is_error:
            await post(self._failure(command, _reason(result)))
            return
        await post(self._success(command, result))

    async def _call(self, tool: str, command: RagCommand) -> ToolResult:
        assert self._mcp is not None
        if command.action == "crawl":
            args: dict[str, Any] = {"url": command.url, "pattern": command.pattern}
            definition = self._mcp.get_tool(tool)
            if definition is not None and "wait" in definition.input_schema.get("properties", {}):
                args["wait"] = True  # the thread gets the summary, as the specification says
            return await self._mcp.call_tool(
                tool, args, progress_callback=_log_progress(command.url)
            )
        if command.action == "status":
            return await self._mcp.call_tool(tool, {})
        return await self._mcp.call_tool(tool, {"url": command.url})

    @staticmethod
    def _failure(command: RagCommand, reason: str) -> str:
        if command.action == "crawl":
            return replies.crawl_failed(reason)
        if command.action == "add":
            return replies.add_failed(command.url, reason)
        if command.action == "delete":
            return replies.delete_failed(command.url, reason)
        return replies.stats_failed(reason)

    @staticmethod
    def _success(command: RagCommand, result: ToolResult) -> str:
        data = _payload(result.structured)
        fallback = result.text or "完了しました。"
        if command.action == "crawl":
            pages, chunks = count_field(data, _PAGES), count_field(data, _CHUNKS)
            if pages is None or chunks is None:
                return fallback
            return replies.crawl_done(pages, chunks, count_field(data, _ERRORS) or 0)
        if command.action == "add":
            chunks = count_field(data, _CHUNKS)
            return fallback if chunks is None else replies.page_added(command.url, chunks)
        if command.action == "delete":
            deleted = count_field(data, _DELETED)
            return fallback if deleted is None else replies.deleted(command.url, deleted)
        total, sources = count_field(data, _TOTAL_CHUNKS), count_field(data, _SOURCES)
        if total is None or sources is None:
            return fallback
        return replies.stats(total, sources)


def _log_progress(url: str) -> ProgressCallback:
    """Crawl progress goes to the log only: spec 000 posts just start and completion."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        logger.info("crawl %s: %s/%s %s", url, progress, total if total else "?", message or "")

    return on_progress
