"""The `rag` command parser: Slack's mention/link markup, patterns, usage errors."""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slack_router import replies
from slack_router.commands import RagCommand, parse_rag_command, strip_mentions, unwrap_links

PACKAGE = Path(__file__).resolve().parent.parent / "slack_router"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rag status", RagCommand("status")),
        ("<@U123ABC> rag status", RagCommand("status")),
        ("<@U123ABC>   RAG   Status  ", RagCommand("status")),
        ("Rag stats", RagCommand("status")),
        (
            "<@U123ABC> rag add <https://example.com/guide/getting-started>",
            RagCommand("add", url="https://example.com/guide/getting-started"),
        ),
        (
            "<@U123ABC> rag add <https://example.com/page|example.com/page>",
            RagCommand("add", url="https://example.com/page"),
        ),
        (
            "rag add <https://example.com/page|my page title>",
            RagCommand("add", url="https://example.com/page"),
        ),
        ("rag add https://example.com/plain", RagCommand("add", url="https://example.com/plain")),
        (
            "rag add <https://example.com/q?a=1&amp;b=2>",
            RagCommand("add", url="https://example.com/q?a=1&b=2"),
        ),
        (
            "<@U123ABC> rag crawl <https://example.com/articles>",
            RagCommand("crawl", url="https://example.com/articles"),
        ),
        (
            "<@U123ABC> rag crawl <https://example.com/docs> \\.html$",
            RagCommand("crawl", url="https://example.com/docs", pattern="\\.html$"),
        ),
        (
            "rag crawl\n<https://example.com/docs>\t /guide/(intro|setup)\\.html$ ",
            RagCommand(
                "crawl", url="https://example.com/docs", pattern="/guide/(intro|setup)\\.html$"
            ),
        ),
        (
            "rag crawl <https://example.com/docs> <http://example.com/docs/a|example.com/docs/a>",
            RagCommand("crawl", url="https://example.com/docs", pattern="example.com/docs/a"),
        ),
        (
            "rag crawl <https://example.com/docs> ^[^&lt;&gt;]+$",
            RagCommand("crawl", url="https://example.com/docs", pattern="^[^<>]+$"),
        ),
        (
            "rag crawl `https://example.com/docs` `^/docs/.*\\.html$`",
            RagCommand("crawl", url="https://example.com/docs", pattern="^/docs/.*\\.html$"),
        ),
        (
            "<@U123ABC> rag delete <https://example.com/guide/getting-started>",
            RagCommand("delete", url="https://example.com/guide/getting-started"),
        ),
        ("<@U123ABC> rag", RagCommand("help")),
        ("rag help", RagCommand("help")),
    ],
)
def test_parses_commands(text: str, expected: RagCommand) -> None:
    assert parse_rag_command(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<@U123ABC> rag add", "URLを指定してください"),
        ("rag crawl", "URLを指定してください"),
        ("rag delete   ", "URLを指定してください"),
        ("rag add example.com/page", "http:// または https://"),
        ("rag add ftp://example.com/file", "http:// または https://"),
        ("rag frobnicate https://example.com", "不明なサブコマンドです: frobnicate"),
        ("rag add <https://a.example/x> <https://b.example/y>", "URLは1つだけ"),
        ("rag crawl <https://example.com/docs> ([unclosed", "正しい正規表現ではありません"),
    ],
)
def test_malformed_commands_get_usage_help(text: str, problem: str) -> None:
    command = parse_rag_command(text)
    assert command is not None
    assert command.usage_error is not None and problem in command.usage_error
    reply = command.reply_text
    assert reply is not None
    assert reply.startswith("エラー: ") and problem in reply and replies.USAGE in reply


def test_help_reply_is_usage_text() -> None:
    command = parse_rag_command("rag help")
    assert command is not None and command.reply_text == replies.USAGE
    valid = parse_rag_command("rag status")
    assert valid is not None and valid.reply_text is None


@pytest.mark.parametrize(
    "text",
    [
        "<@U123ABC> Pythonのasync/awaitについて教えて",
        "りゅうおうのHPは？",
        "RAG とは何ですか",
        "ragについて教えて",
        "ragtime status",
        "please rag status",
        "",
        "<@U123ABC>",
    ],
)
def test_ordinary_text_is_not_a_command(text: str) -> None:
    assert parse_rag_command(text) is None


def test_markup_helpers() -> None:
    assert strip_mentions("<@U123ABC> hello <@W9|bob> there") == "hello   there"
    assert unwrap_links("see <https://x.example/a|label> &amp; <https://y.example>") == (
        "see https://x.example/a & https://y.example"
    )
    assert unwrap_links("<https://x.example/a|label>", prefer_label=True) == "label"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_package_never_imports_rag_app_or_mcp_server_source() -> None:
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 8
    for file in files:
        for name in _imported_modules(file):
            top = name.split(".")[0]
            assert top not in {"rag_app", "mcp_server"}, f"{file.name} imports {name}"


def test_loading_the_bot_does_not_load_rag_app() -> None:
    code = (
        "import sys, slack_router.__main__, slack_router.bot;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('rag_app', 'mcp_server'));"
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_unclosed_links_and_mentions_cost_linear_time() -> None:
    for text in ("<http:" * 20_000, "<@U1|" * 20_000):  # 120,000 characters: was 28 s
        start = time.monotonic()
        assert unwrap_links(strip_mentions(text))
        assert time.monotonic() - start < 2.0
