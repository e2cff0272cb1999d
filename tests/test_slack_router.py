"""MessageRouter end to end: real slack_sdk client → loopback Slack API, real MCP stand-in.

Checks the spec's output formats and that every reply is posted inside the thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from slack_router import replies
from slack_router.chat import ChatAnswer
from slack_router.mcp_config import parse_servers
from slack_router.mcp_manager import MCPManager
from slack_router.rag_handler import RagCommandHandler, count_field
from slack_router.router import MAX_ANSWERING, MAX_QUESTION_CHARS, MAX_WAITING, MessageRouter

pytestmark = pytest.mark.asyncio(loop_scope="module")

CHANNEL = "C0123"
TS = "1700000000.000100"


from tests.fixtures import slack_stand_ins as stand_ins  # noqa: E402


@pytest.fixture(scope="module")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.jsonl"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mcp(call_log: Path) -> AsyncIterator[MCPManager]:
    servers = parse_servers({"mcpServers": {"rag": stand_ins.stand_in_entry(call_log)}})
    async with MCPManager(servers, start_timeout=20) as manager:
        assert manager.has_tool("rag_crawl"), "stand-in MCP server did not start"
        yield manager


@pytest_asyncio.fixture(loop_scope="module")
async def slack() -> AsyncIterator[Any]:
    async with stand_ins.SlackApiStandIn() as api:
        yield api


@pytest.fixture
def mcp_calls(call_log: Path) -> Callable[[], list[dict[str, Any]]]:
    """Calls the stand-in MCP server received during this test."""
    start = len(call_log.read_text(encoding="utf-8").splitlines()) if call_log.exists() else 0

    def read() -> list[dict[str, Any]]:
        if not call_log.exists():
            return []
        lines = call_log.read_text(encoding="utf-8").splitlines()[start:]
        return [json.loads(line) for line in lines]

    return read


async def _send(router: MessageRouter, slack: Any, text: str, thread_ts: str | None = None) -> None:
    await router.handle(slack.client(), channel=CHANNEL, ts=TS, text=text, thread_ts=thread_ts)


def _assert_all_in_thread(slack: Any, thread_ts: str) -> None:
    assert slack.posts, "nothing was posted"
    for body in slack.posts:
        assert body["channel"] == CHANNEL
        assert body["thread_ts"] == thread_ts
        assert not body.get("reply_broadcast")


async def test_crawl_posts_start_then_summary_in_thread(
    mcp: MCPManager, slack: Any, mcp_calls: Callable[[], list[dict[str, Any]]]
) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag crawl <https://example.com/docs> \\.html$")
    assert slack.texts() == [
        "クロールを開始しました... (リンク収集中)",
        "└─ 完了: 15ページ / 128チャンク / エラー: 2件",
    ]
    _assert_all_in_thread(slack, TS)
    assert mcp_calls() == [
        {
            "tool": "rag_crawl",
            "args": {"url": "https://example.com/docs", "pattern": "\\.html$", "wait": True},
        }
    ]


async def test_reply_to_a_thread_message_stays_in_that_thread(mcp: MCPManager, slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    parent = "1699999999.000001"
    await _send(router, slack, "<@UBOT> rag crawl <https://example.com/docs>", thread_ts=parent)
    assert len(slack.posts) == 2
    _assert_all_in_thread(slack, parent)


async def test_crawl_without_structured_content_posts_tool_text(
    mcp: MCPManager, slack: Any
) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag crawl <https://example.com/plain>")
    assert slack.texts() == [replies.CRAWL_STARTED, "完了: 3ページ / 12チャンク / エラー: 0件"]
    _assert_all_in_thread(slack, TS)


async def test_crawl_failure_posts_spec_error_after_start(mcp: MCPManager, slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag crawl <https://example.com/timeout>")
    assert slack.texts() == [
        replies.CRAWL_STARTED,
        "エラー: クロールに失敗しました。\n     原因: 接続がタイムアウトしました (30秒)",
    ]
    _assert_all_in_thread(slack, TS)


async def test_add_success_and_failure(mcp: MCPManager, slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag add <https://example.com/page|example.com/page>")
    await router.handle(
        slack.client(),
        channel=CHANNEL,
        ts="1700000000.000200",
        text="<@UBOT> rag add <https://example.com/broken-page-404>",
    )
    assert slack.texts() == [
        "ページを取り込みました: https://example.com/page (8チャンク)",
        "エラー: ページの取り込みに失敗しました。\n"
        "     URL: https://example.com/broken-page-404\n"
        "     原因: HTTP 404 Not Found",
    ]
    assert [body["thread_ts"] for body in slack.posts] == [TS, "1700000000.000200"]


async def test_status_shows_statistics(mcp: MCPManager, slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag status")
    assert slack.texts() == ["ナレッジベース統計:\n     総チャンク数: 342\n     ソースURL数: 20"]
    _assert_all_in_thread(slack, TS)


async def test_delete_success_and_failure(mcp: MCPManager, slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag delete <https://example.com/guide/getting-started>")
    await router.handle(
        slack.client(),
        channel=CHANNEL,
        ts="1700000000.000300",
        text="rag delete https://example.com/unknown",
    )
    first, second = slack.texts()
    assert first == "削除しました: https://example.com/guide/getting-started (8チャンク)"
    assert second.startswith(
        "エラー: 削除に失敗しました。\n     URL: https://example.com/unknown\n"
    )
    assert "原因: Nothing is stored under this URL" in second


async def test_usage_error_makes_no_tool_call(
    mcp: MCPManager, slack: Any, mcp_calls: Callable[[], list[dict[str, Any]]]
) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag add")
    (text,) = slack.texts()
    assert text.startswith("エラー: URLを指定してください") and replies.USAGE in text
    _assert_all_in_thread(slack, TS)
    assert mcp_calls() == []


@pytest.mark.parametrize(
    "text",
    [
        "rag crawl <https://example.com/docs>",
        "rag add <https://example.com/page>",
        "rag status",
        "rag delete <https://example.com/page>",
    ],
)
async def test_mcp_disabled_gives_friendly_message(slack: Any, text: str) -> None:
    router = MessageRouter(RagCommandHandler(None))
    await _send(router, slack, f"<@UBOT> {text}")
    assert slack.texts() == ["エラー: RAG機能が無効です。管理者に連絡してください。"]
    _assert_all_in_thread(slack, TS)


async def test_mcp_enabled_without_rag_server_gives_friendly_message(slack: Any) -> None:
    async with MCPManager([]) as empty:
        router = MessageRouter(RagCommandHandler(empty))
        await _send(router, slack, "<@UBOT> rag crawl <https://example.com/docs>")
    assert slack.texts() == [replies.RAG_DISABLED]


async def test_question_without_chat_model_and_duplicate_delivery(slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(None), chat=None)
    await _send(router, slack, "<@UBOT> りゅうおうのHPは？")
    await _send(router, slack, "<@UBOT> りゅうおうのHPは？")  # same ts delivered again
    assert slack.texts() == [replies.CHAT_DISABLED]
    _assert_all_in_thread(slack, TS)


async def test_bare_mention_gets_usage(slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(None), chat=None)
    await _send(router, slack, "<@UBOT>")
    assert slack.texts() == [replies.USAGE]


async def test_count_field_reads_ints_and_lists() -> None:
    data = {"errors": [{"url": "a"}, {"url": "b"}], "pages": 3.0, "flag": True}
    assert count_field(data, ("errors",)) == 2
    assert count_field(data, ("pages_crawled", "pages")) == 3
    assert count_field(data, ("flag",)) is None
    assert count_field(data, ("missing",)) is None


async def test_text_from_the_user_never_becomes_live_slack_markup(
    mcp: MCPManager, slack: Any, mcp_calls: Callable[[], list[dict[str, Any]]]
) -> None:
    """What a user typed as text (Slack delivers `<` as `&lt;`) is echoed as text: no
    `<!channel>` notification, no ping, no link whose label hides where it goes."""
    router = MessageRouter(RagCommandHandler(mcp))
    for i, typed in enumerate(
        (
            "rag add &lt;!channel&gt;",
            "rag add https://example.com/a&lt;!here&gt;",
            "rag add &lt;https://evil.example|https://docs.example.com&gt;",
            "rag add https://example.com/&lt;@U0ADMIN&gt;",
        )
    ):
        await router.handle(slack.client(), channel=CHANNEL, ts=f"{TS}{i}", text=f"<@UBOT> {typed}")
    raw = slack.raw_texts()
    assert len(raw) == 4
    for text in raw:
        assert "<" not in text and ">" not in text, text  # every one escaped
    assert "<!channel>" in slack.texts()[0]  # what the user sees is what they typed


async def test_a_reply_over_slacks_limit_is_cut_and_an_echo_is_short(
    mcp: MCPManager, slack: Any, mcp_calls: Callable[[], list[dict[str, Any]]]
) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, "<@UBOT> rag crawl https://example.com/docs (" + "a" * 39_900)
    (text,) = slack.texts()
    assert text.startswith("エラー: パターンは500文字以内") and len(text) < 1_000, len(text)
    assert mcp_calls() == []
    long = replies.for_slack("答" * 50_000)
    assert len(long) == replies.MAX_REPLY_CHARS and long.endswith(replies.CUT_MARK)
    for text in ("&" * 20_000, "a" + "<" * 20_000, "ab" + ">&" * 10_000):  # escapes count
        sent = replies.for_slack(text)
        assert len(sent) <= replies.MAX_REPLY_CHARS, len(sent)
        body = sent.removesuffix(replies.CUT_MARK)
        assert body.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "").count("&") == 0
    long_url = "<@UBOT> rag add https://example.com/404/" + "p" * 3_000
    await router.handle(slack.client(), channel=CHANNEL, ts=f"{TS}9", text=long_url)
    failed = slack.texts()[-1]
    assert "原因: HTTP 404 Not Found" in failed and len(failed) < 600, len(failed)


@pytest.mark.parametrize("pattern", ["a{4294967296}", "x{1,99999999999}"])
async def test_a_pattern_python_cannot_build_is_a_usage_error(
    mcp: MCPManager, slack: Any, pattern: str
) -> None:
    router = MessageRouter(RagCommandHandler(mcp))
    await _send(router, slack, f"<@UBOT> rag crawl https://example.com/docs {pattern}")
    (text,) = slack.texts()
    assert text.startswith("エラー: パターンが正しい正規表現ではありません"), text[:200]


class HeldChat:
    """A chat model stand-in that holds every question until released; counts how many
    it was answering at once."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.running = 0
        self.most = 0
        self.release = asyncio.Event()

    async def answer(self, question: str) -> ChatAnswer:
        self.asked.append(question)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return ChatAnswer(text=f"答え: {question}")


async def test_questions_are_answered_a_few_at_a_time_and_a_flood_is_told_busy(
    slack: Any,
) -> None:
    chat = HeldChat()
    router = MessageRouter(RagCommandHandler(None), chat)  # type: ignore[arg-type]
    flood = MAX_ANSWERING + MAX_WAITING + 5
    tasks = [
        asyncio.create_task(
            router.handle(slack.client(), channel=CHANNEL, ts=f"{TS}{i:03d}", text=f"質問{i}")
        )
        for i in range(flood)
    ]
    for _ in range(200):  # the 5 past the queue are answered at once, the rest wait
        if len(slack.posts) == 5 and len(chat.asked) == MAX_ANSWERING:
            break
        await asyncio.sleep(0.02)
    assert slack.texts() == [replies.BUSY] * 5
    assert len(chat.asked) == MAX_ANSWERING  # no more model calls than that at once
    chat.release.set()
    await asyncio.gather(*tasks)
    assert chat.most == MAX_ANSWERING and len(chat.asked) == flood - 5
    assert sorted(t for t in slack.texts() if t.startswith("答え")) == sorted(
        f"答え: 質問{i}" for i in range(flood) if f"質問{i}" in chat.asked
    )
    long = "長" * (MAX_QUESTION_CHARS + 1)
    await router.handle(slack.client(), channel=CHANNEL, ts=f"{TS}999", text=long)
    assert slack.texts()[-1] == replies.question_too_long(
        MAX_QUESTION_CHARS + 1, MAX_QUESTION_CHARS
    )
    assert long not in chat.asked
