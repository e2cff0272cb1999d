"""Turn any exception a tool meets into an MCP tool error (`isError: true`), never a traceback.

Anticipated failures (`RAGError`, `SettingsError`) carry one clear sentence and are passed
through as they are. Anything else is a bug: its traceback goes to the server log (stderr)
and the client gets one generic sentence.
"""

from __future__ import annotations

import logging

from mcp.types import CallToolResult, TextContent

from rag_app.config import SettingsError
from rag_app.errors import RAGError

logger = logging.getLogger("mcp_server.tools")


class ToolInputError(RAGError, ValueError):
    """An argument the tool checks itself before calling the knowledge base."""


def error_message(tool: str, exc: BaseException) -> str:
    """The one sentence the client sees for `exc` (and the log line it leaves)."""
    if isinstance(exc, RAGError | SettingsError):
        message = str(exc).strip() or f"{tool} failed without a reason; please try again."
        logger.info("%s refused: %s", tool, message)
        return " ".join(message.split("\n"))
    logger.error("%s failed with an unexpected error", tool, exc_info=exc)
    return f"{tool} failed because of an internal error; the server log has the details."


def error_result(tool: str, exc: BaseException) -> CallToolResult:
    """An `isError` result for the client; the structured content is left out on errors."""
    return CallToolResult(
        content=[TextContent(type="text", text=error_message(tool, exc))], is_error=True
    )
