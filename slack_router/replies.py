"""Every text the bot posts to Slack, in one place (formats from spec 000 "出力例").

Errors are short and friendly; no traceback or exception class ever reaches Slack.
"""

from __future__ import annotations

from collections.abc import Sequence

INDENT = "     "

RAG_DISABLED = "エラー: RAG機能が無効です。管理者に連絡してください。"
CRAWL_STARTED = "クロールを開始しました... (リンク収集中)"
INTERNAL_ERROR = "エラー: 処理中に問題が発生しました。時間をおいて再度お試しください。"
CHAT_DISABLED = "エラー: チャット用のLLMが設定されていません。管理者に連絡してください。"
CHAT_FAILED = "エラー: 応答の生成に失敗しました。時間をおいて再度お試しください。"
EMPTY_ANSWER = "回答を生成できませんでした。質問を言い換えて、もう一度お試しください。"
CONNECTION_LOST = "MCPサーバーとの接続が切れていたため、起動し直しました。もう一度お試しください。"
SERVER_DOWN = "MCPサーバーに接続できません。時間をおいて再度お試しください。"
POST_FAILED = "エラー: 返信を投稿できませんでした。時間をおいて再度お試しください。"
BUSY = "エラー: 質問が立て込んでいます。少し時間をおいてから、もう一度お試しください。"


def question_too_long(chars: int, limit: int) -> str:
    """A question over the length the chat model is given."""
    return f"エラー: 質問が長すぎます（{chars:,}文字）。{limit:,}文字以内にしてください。"


MAX_REPLY_CHARS = 12_000
"""Longer replies are cut here (Slack refuses a message over 40,000 characters and
advises at most 4,000; a cut answer still reads)."""
CUT_MARK = "\n…（長すぎるため以降を省略しました）"
MAX_ECHO_CHARS = 200
"""What the user typed is echoed back at most this long (a pattern, a URL)."""


def for_slack(text: str) -> str:
    """A reply as Slack must receive it: `&`, `<`, `>` escaped, so that text from a
    user, a page or the model never becomes a mention (`<!channel>`), a ping or a link
    whose label hides where it goes; at most `MAX_REPLY_CHARS` as sent, escapes counted."""
    sent = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if len(sent) <= MAX_REPLY_CHARS:
        return sent
    cut = sent[: MAX_REPLY_CHARS - len(CUT_MARK)]
    amp = cut.rfind("&", len(cut) - 4)  # never half an escape
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + CUT_MARK


def echo(text: str) -> str:
    """What the user typed, cut for quoting in a reply."""
    return text if len(text) <= MAX_ECHO_CHARS else text[: MAX_ECHO_CHARS - 1] + "…"


USAGE = (
    "使い方:\n"
    "  rag crawl <URL> [パターン]  — リンク集ページからクロール＆取り込み\n"
    "  rag add <URL>               — 単一ページ取り込み\n"
    "  rag status                  — ナレッジベース統計表示\n"
    "  rag delete <URL>            — ソースURL指定で削除\n"
    "それ以外のメッセージは質問として回答します。"
)


def usage_error(problem: str) -> str:
    """A malformed `rag` command: what was wrong, then the usage text."""
    return f"エラー: {problem}\n{USAGE}"


def crawl_done(pages: int, chunks: int, errors: int) -> str:
    """Crawl completion summary, posted in the thread under the start message."""
    return f"└─ 完了: {pages}ページ / {chunks}チャンク / エラー: {errors}件"


def crawl_failed(reason: str) -> str:
    return f"エラー: クロールに失敗しました。\n{INDENT}原因: {reason}"


def page_added(url: str, chunks: int) -> str:
    return f"ページを取り込みました: {echo(url)} ({chunks}チャンク)"


def add_failed(url: str, reason: str) -> str:
    where = f"{INDENT}URL: {echo(url)}"
    return f"エラー: ページの取り込みに失敗しました。\n{where}\n{INDENT}原因: {reason}"


def stats(total_chunks: int, source_count: int) -> str:
    return (
        f"ナレッジベース統計:\n{INDENT}総チャンク数: {total_chunks}\n"
        f"{INDENT}ソースURL数: {source_count}"
    )


def stats_failed(reason: str) -> str:
    return f"エラー: 統計の取得に失敗しました。\n{INDENT}原因: {reason}"


def deleted(url: str, chunks: int) -> str:
    return f"削除しました: {echo(url)} ({chunks}チャンク)"


def delete_failed(url: str, reason: str) -> str:
    return f"エラー: 削除に失敗しました。\n{INDENT}URL: {echo(url)}\n{INDENT}原因: {reason}"


def with_sources(answer: str, sources: Sequence[str]) -> str:
    """The chat answer followed by the source URLs rag_search actually returned."""
    if not sources:
        return answer
    lines = "\n".join(f"• {url}" for url in sources)
    return f"{answer}\n\n参照元:\n{lines}"
