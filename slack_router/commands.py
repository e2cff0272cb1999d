"""Parser for the Slack `rag` commands: `rag crawl|add|status|delete`.

Slack rewrites what the user typed: mentions become `<@U123>`, URLs become
`<https://x>` or `<https://x|label>`, and `&`, `<`, `>` are HTML-escaped. The parser
undoes that so the MCP tools get exactly the URL and pattern the user meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from slack_router import replies

RagAction = Literal["crawl", "add", "status", "delete", "help"]

# no `<` inside a match: each try stops at the next `<`, so text full of unclosed `<http:`
# costs linear time (it was quadratic: 120,000 characters took 28 s)
_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^<>]*)?>", re.IGNORECASE)
_LINK = re.compile(r"<((?:https?|ftp|mailto):[^|<>]*)(?:\|([^<>]*))?>", re.IGNORECASE)
MAX_PATTERN_CHARS = 500
"""The longest crawl pattern rag_crawl takes (the server's `rag_app.limits` value, written
here again: the bot talks to the server over MCP only and imports nothing of it)."""
_RAG_PREFIX = re.compile(r"^rag(?:\s+(?P<rest>.*))?$", re.IGNORECASE | re.DOTALL)
_FIRST_TOKEN = re.compile(r"^\s*((?:<[^<>]*>|[^\s<]|<)+)\s*(.*)$", re.DOTALL)
_SUBCOMMAND = re.compile(r"^[A-Za-z][A-Za-z_-]*$")
_ALIASES: dict[str, RagAction] = {
    "crawl": "crawl",
    "add": "add",
    "status": "status",
    "stats": "status",
    "delete": "delete",
    "help": "help",
}
_NEEDS_URL: frozenset[RagAction] = frozenset({"crawl", "add", "delete"})


@dataclass(frozen=True)
class RagCommand:
    """One parsed `rag` command; `usage_error` is set when the user needs the help text."""

    action: RagAction
    url: str = ""
    pattern: str = ""
    usage_error: str | None = None

    @property
    def reply_text(self) -> str | None:
        """The reply for a help request or a malformed command, else None."""
        if self.usage_error is not None:
            return replies.usage_error(self.usage_error)
        if self.action == "help":
            return replies.USAGE
        return None


def strip_mentions(text: str) -> str:
    """Remove `<@U123>` user mentions (the bot's own and others) and trim."""
    return _MENTION.sub(" ", text).strip()


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def unwrap_links(text: str, *, prefer_label: bool = False) -> str:
    """Turn Slack's `<url|label>` / `<url>` back into plain text and unescape entities.

    `prefer_label` keeps what the user typed (the label) when Slack auto-linked it,
    which is right for regex patterns; URLs want the link target.
    """

    def repl(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        return label if (prefer_label and label) else target

    return _unescape(_LINK.sub(repl, text))


def _split_first(text: str) -> tuple[str, str]:
    """First whitespace-separated token (a `<...>` link counts as one) and the rest."""
    match = _FIRST_TOKEN.match(text)
    if match is None:
        return "", ""
    return match.group(1), match.group(2).strip()


def _unquote(text: str) -> str:
    """Drop code quotes the user put around a URL or pattern (`...` or ```...```)."""
    for quote in ("```", "`"):
        if len(text) > 2 * len(quote) and text.startswith(quote) and text.endswith(quote):
            return text[len(quote) : -len(quote)].strip()
    return text


def _is_http_url(url: str) -> bool:
    return re.match(r"^https?://[^\s/]+", url, re.IGNORECASE) is not None


def parse_rag_command(text: str) -> RagCommand | None:
    """Parse a Slack message; None when it is not a `rag` command (an ordinary question).

    A `rag` command with a missing URL or an unknown subcommand still returns a
    `RagCommand` whose `usage_error` explains the problem, so the user gets help.
    """
    body = strip_mentions(text)
    match = _RAG_PREFIX.match(body)
    if match is None:
        return None
    rest = (match.group("rest") or "").strip()
    if not rest:
        return RagCommand(action="help")
    word, remainder = _split_first(rest)
    if _SUBCOMMAND.match(word) is None:
        return None  # e.g. "RAG とは何ですか" is a question, not a command
    action = _ALIASES.get(word.lower())
    if action is None:
        return RagCommand(
            action="help", usage_error=f"不明なサブコマンドです: {replies.echo(word)}"
        )
    if action not in _NEEDS_URL:
        return RagCommand(action=action)
    return _parse_url_command(action, remainder)


def _parse_url_command(action: RagAction, remainder: str) -> RagCommand:
    url_token, pattern_text = _split_first(remainder)
    if not url_token:
        return RagCommand(action=action, usage_error=f"URLを指定してください: rag {action} <URL>")
    url = _unquote(unwrap_links(url_token))
    if not _is_http_url(url):
        return RagCommand(
            action=action,
            usage_error=f"URLは http:// または https:// で始めてください: {replies.echo(url)}",
        )
    pattern = _unquote(unwrap_links(pattern_text, prefer_label=True).strip())
    if action != "crawl":
        if pattern:
            return RagCommand(
                action=action,
                url=url,
                usage_error=f"rag {action} に指定できるURLは1つだけです",
            )
        return RagCommand(action=action, url=url)
    if len(pattern) > MAX_PATTERN_CHARS:
        return RagCommand(
            action=action,
            url=url,
            usage_error=f"パターンは{MAX_PATTERN_CHARS}文字以内にしてください: "
            + replies.echo(pattern),
        )
    if pattern:
        try:
            re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as err:
            why = err.msg if isinstance(err, re.error) else "大きすぎるか深すぎます"
            return RagCommand(
                action=action,
                url=url,
                pattern=pattern,
                usage_error=f"パターンが正しい正規表現ではありません ({why}): "
                + replies.echo(pattern),
            )
    return RagCommand(action=action, url=url, pattern=pattern)
