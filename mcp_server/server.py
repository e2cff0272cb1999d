"""Build the `rag` MCPServer: six tools over one KnowledgeBase held by the lifespan."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from mcp_server.app_context import DEFAULT_HEARTBEAT_SEC, AppContext, make_lifespan
from mcp_server.arguments import check_arguments
from mcp_server.loader import KnowledgeBaseFactory
from mcp_server.stdio_lines import REFUSED
from mcp_server.tools import TOOLS
from rag_app.config import RAGSettings, get_settings
from rag_app.failure_text import failure_line

SERVER_NAME = "rag"

INSTRUCTIONS = """\
This server is a knowledge base of web pages and documents that the user has added.
When a question may be answered by that content, call rag_search first and base the
answer on the passages it returns, citing their `Source:` URLs; do not search for
greetings or small talk. Narrow a search to one site or folder with `source`. When a
passage is not enough (the rest of a section, a whole table), call rag_read with the
hit's Source URL and, optionally, its heading path. rag_add / rag_crawl add pages (a
crawl runs as a job: follow or cancel it with rag_jobs), rag_refresh re-checks stored
pages, rag_delete removes a source, rag_stats lists what is stored."""


class RagServer(MCPServer[AppContext]):
    """MCPServer whose tools answer bad arguments with one sentence naming the argument,
    in the tools' failure frame (`エラー: 検索に失敗しました。 原因: …`)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        refused = (arguments or {}).get(REFUSED)
        if isinstance(refused, str):  # a request the SDK could not read (`stdio_lines`)
            raise ToolError(failure_line(name, refused[:300]))
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            problem = check_arguments(name, tool.parameters, arguments or {})
            if problem is not None:  # framed as every other failure of the tool
                raise ToolError(failure_line(name, problem))
        return await super().call_tool(name, arguments, context)


def build_server(
    settings: RAGSettings | None = None,
    *,
    kb_factory: KnowledgeBaseFactory | None = None,
    heartbeat_sec: float = DEFAULT_HEARTBEAT_SEC,
    log_level: str = "INFO",
) -> RagServer:
    """The server; `kb_factory` replaces how the KnowledgeBase is opened (tests)."""
    settings = settings or get_settings()
    server = RagServer(
        SERVER_NAME,
        title="RAG knowledge base",
        instructions=INSTRUCTIONS,
        version=_version(),
        lifespan=make_lifespan(settings, kb_factory, heartbeat_sec=heartbeat_sec),
        log_level=log_level,  # type: ignore[arg-type]
    )
    for fn, title, hints in TOOLS:
        server.add_tool(fn, title=title, annotations=hints)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-knowledge")
    except PackageNotFoundError:
        return "0"
