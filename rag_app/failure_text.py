"""The one-line failure text of what speaks Japanese (the MCP tools and the `rag`
commands that print the specification's bot texts), in the spec's form
`エラー: クロールに失敗しました。 原因: …`.

One table of actions for both, so a tool and its command name a failure alike. Imports
nothing: the CLI reads it before its arguments are parsed.
"""

from __future__ import annotations

ACTIONS = {
    "search": "検索",
    "read": "ソースの読み込み",
    "add": "ページの取り込み",
    "crawl": "クロール",
    "refresh": "更新確認",
    "jobs": "ジョブの操作",
    "delete": "削除",
    "stats": "統計の取得",
}
"""What each tool (`rag_<name>`) or command does, as its failure line names it."""


def failed(name: str) -> str:
    """`エラー: <action>に失敗しました。` for a tool (`rag_crawl`) or command (`crawl`)."""
    action = ACTIONS.get(name.removeprefix("rag_"), name)
    return f"エラー: {action}に失敗しました。"


def failure_line(name: str, cause: object, url: str = "") -> str:
    """The whole line: what failed, the URL it was about when given, and the cause quoted
    as it is (a check's own sentence, an HTTP status)."""
    where = f" URL: {url}" if url else ""
    return f"{failed(name)}{where} 原因: {cause}"
