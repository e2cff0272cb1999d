"""Turn any exception a tool meets into an MCP tool error (`isError: true`), never a traceback.

Anticipated failures (`RAGError`, `SettingsError`) carry one clear sentence, quoted as the
cause. Anything else is a bug: its traceback goes to the server log (stderr) and the
client gets one generic line.
"""

from __future__ import annotations

import logging

from mcp.types import CallToolResult, TextContent

from rag_app.config import SettingsError
from rag_app.console import printable
from rag_app.errors import RAGError
from rag_app.failure_text import failed, failure_line

logger = logging.getLogger("mcp_server.tools")


class ToolInputError(RAGError, ValueError):
    """An argument the tool checks itself before calling the knowledge base."""


def error_message(tool: str, exc: BaseException) -> str:
    """The one line the client sees for `exc` (and the log line it leaves): the tools
    answer in Japanese (the specification's texts), so their errors do too."""
    if isinstance(exc, RAGError | SettingsError):
        message = " ".join(str(exc).strip().split("\n"))
        logger.info("%s refused: %s", tool, message)
        if not message:
            return f"{failed(tool)} もう一度お試しください。"
        return failure_line(tool, message)
    logger.error("%s failed with an unexpected error", tool, exc_info=exc)
    return failure_line(tool, f"内部エラーです ({tool})。詳細はサーバーのログにあります。")


def error_result(tool: str, exc: BaseException) -> CallToolResult:
    """An `isError` result for the client; the structured content is left out on errors."""
    return CallToolResult(
        content=[TextContent(type="text", text=printable(error_message(tool, exc)))],
        is_error=True,
    )
