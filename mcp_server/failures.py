"""Turn any exception a tool meets into an MCP tool error (`isError: true`), never a traceback.

Anticipated failures (`RAGError`, `SettingsError`) carry one clear sentence, quoted as the
cause. Anything else is a bug: its traceback goes to the server log (stderr) and the
client gets one generic line.
"""

from __future__ import annotations

import logging

from mcp.types import CallToolResult, TextContent

from rag_app.config import SettingsError
from rag_app.errors import RAGError

logger = logging.getLogger("mcp_server.tools")


class ToolInputError(RAGError, ValueError):
    """An argument the tool checks itself before calling the knowledge base."""


ACTIONS = {
    "rag_search": "検索",
    "rag_read": "ソースの読み込み",
    "rag_add": "ページの取り込み",
    "rag_crawl": "クロール",
    "rag_refresh": "更新確認",
    "rag_jobs": "ジョブの操作",
    "rag_delete": "削除",
    "rag_stats": "統計の取得",
}
"""What each tool does, for its error line: the tools answer in Japanese (the
specification's texts), so their errors do too, in the spec's form
`エラー: クロールに失敗しました。 原因: …`; the cause is the check's own sentence."""


def error_message(tool: str, exc: BaseException) -> str:
    """The one line the client sees for `exc` (and the log line it leaves)."""
    failed = f"エラー: {ACTIONS.get(tool, tool)}に失敗しました。"
    if isinstance(exc, RAGError | SettingsError):
        message = " ".join(str(exc).strip().split("\n"))
        logger.info("%s refused: %s", tool, message)
        return f"{failed} 原因: {message}" if message else f"{failed} もう一度お試しください。"
    logger.error("%s failed with an unexpected error", tool, exc_info=exc)
    return f"{failed} 原因: 内部エラーです ({tool})。詳細はサーバーのログにあります。"


def error_result(tool: str, exc: BaseException) -> CallToolResult:
    """An `isError` result for the client; the structured content is left out on errors."""
    return CallToolResult(
        content=[TextContent(type="text", text=error_message(tool, exc))], is_error=True
    )
