"""The chat tool loop: a scripted OpenAI-compatible server asks for rag_search over MCP.

Real `openai` client → loopback chat stand-in; real MCP stand-in over stdio; replies go
through the router to a loopback Slack API.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from openai import AsyncOpenAI

from slack_router import replies
from slack_router.chat import ChatResponder
from slack_router.mcp_config import parse_servers
from slack_router.mcp_manager import MCPManager, ToolResult
from slack_router.rag_handler import RagCommandHandler
from slack_router.router import MessageRouter
from slack_router.search_sources import sources_of

pytestmark = pytest.mark.asyncio(loop_scope="module")

SOURCES = ["https://example.com/dq/monsters", "https://example.com/dq/spells"]


from tests.fixtures import slack_stand_ins as stand_ins  # noqa: E402


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mcp() -> AsyncIterator[MCPManager]:
    servers = parse_servers({"mcpServers": {"rag": stand_ins.stand_in_entry()}})
    async with MCPManager(servers, start_timeout=20) as manager:
        assert manager.has_tool("rag_search"), "stand-in MCP server did not start"
        yield manager


def _openai(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="test-key", base_url=base_url, max_retries=0, timeout=10)


async def test_model_searches_then_answers_with_sources(mcp: MCPManager) -> None:
    script = [
        stand_ins.tool_call_reply("rag_search", {"query": "りゅうおう HP"}),
        stand_ins.text_reply("りゅうおうのHPは90です。"),
    ]
    async with stand_ins.ChatApiStandIn(script) as llm:
        answer = await ChatResponder(_openai(llm.base_url), "stand-in", mcp).answer(
            "りゅうおうのHPは？"
        )
    assert answer.text == "りゅうおうのHPは90です。"
    assert answer.sources == SOURCES
    assert answer.searches == 1

    first, second = llm.requests
    assert first["model"] == "stand-in"
    (tool,) = first["tools"]
    assert tool["function"]["name"] == "rag_search"
    assert "query" in tool["function"]["parameters"]["properties"]
    system = first["messages"][0]
    assert system["role"] == "system" and "rag_search" in system["content"]
    assert first["messages"][1] == {"role": "user", "content": "りゅうおうのHPは？"}

    assistant, tool_msg = second["messages"][2], second["messages"][3]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["function"]["name"] == "rag_search"
    assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "call_1"
    assert "## Source: https://example.com/dq/monsters" in tool_msg["content"]
    assert "りゅうおう: HP 90" in tool_msg["content"]


async def test_router_posts_answer_with_source_list_in_thread(mcp: MCPManager) -> None:
    script = [
        stand_ins.tool_call_reply("rag_search", {"query": "りゅうおう", "n_results": 3}),
        stand_ins.text_reply("りゅうおうのHPは90、MPは75です。"),
    ]
    async with stand_ins.ChatApiStandIn(script) as llm, stand_ins.SlackApiStandIn() as slack:
        chat = ChatResponder(_openai(llm.base_url), "stand-in", mcp)
        router = MessageRouter(RagCommandHandler(mcp), chat)
        await router.handle(
            slack.client(), channel="C1", ts="171.000001", text="<@UBOT> りゅうおうのHPは？"
        )
    assert slack.texts() == [
        "りゅうおうのHPは90、MPは75です。\n\n参照元:\n"
        "• https://example.com/dq/monsters\n"
        "• https://example.com/dq/spells"
    ]
    assert slack.posts[0]["thread_ts"] == "171.000001"
    assert llm.requests[0]["messages"][1]["content"] == "りゅうおうのHPは？"


async def test_small_talk_without_search_has_no_sources(mcp: MCPManager) -> None:
    async with stand_ins.ChatApiStandIn([stand_ins.text_reply("こんにちは！")]) as llm:
        answer = await ChatResponder(_openai(llm.base_url), "m", mcp).answer("こんにちは")
    assert (answer.text, answer.sources, answer.searches) == ("こんにちは！", [], 0)
    assert replies.with_sources(answer.text, answer.sources) == "こんにちは！"
    assert len(llm.requests) == 1


async def test_search_with_no_hits_lists_no_sources(mcp: MCPManager) -> None:
    script = [
        stand_ins.tool_call_reply("rag_search", {"query": "nothing"}),
        stand_ins.text_reply("ナレッジベースには見つかりませんでした。"),
    ]
    async with stand_ins.ChatApiStandIn(script) as llm:
        answer = await ChatResponder(_openai(llm.base_url), "m", mcp).answer("nothing?")
    assert answer.sources == [] and answer.searches == 1
    assert "該当する情報が見つかりませんでした" in llm.requests[1]["messages"][-1]["content"]


async def test_without_mcp_no_tools_are_offered() -> None:
    async with stand_ins.ChatApiStandIn(
        [stand_ins.text_reply("学習済みの知識で答えます。")]
    ) as llm:
        answer = await ChatResponder(_openai(llm.base_url), "m", None).answer("async/awaitとは？")
    assert answer.text == "学習済みの知識で答えます。"
    assert "tools" not in llm.requests[0]
    assert "rag_search" not in llm.requests[0]["messages"][0]["content"]


async def test_tool_rounds_are_capped_then_answer_is_forced(mcp: MCPManager) -> None:
    script = [
        stand_ins.tool_call_reply("rag_search", {"query": "a"}, "call_a"),
        stand_ins.tool_call_reply("rag_search", {"query": "b"}, "call_b"),
        stand_ins.text_reply("これで答えます。"),
    ]
    async with stand_ins.ChatApiStandIn(script) as llm:
        chat = ChatResponder(_openai(llm.base_url), "m", mcp, max_rounds=2)
        answer = await chat.answer("q")
    assert answer.text == "これで答えます。" and answer.searches == 2
    assert [r.get("tool_choice") for r in llm.requests] == [None, None, "none"]


async def test_bad_tool_calls_are_reported_to_the_model(mcp: MCPManager) -> None:
    broken = stand_ins.tool_call_reply("rag_search", {}, "call_bad")
    broken["tool_calls"][0]["function"]["arguments"] = "{not json"
    script = [
        broken,
        stand_ins.tool_call_reply("rag_delete", {"url": "https://example.com/x"}, "call_evil"),
        stand_ins.text_reply("ok"),
    ]
    async with stand_ins.ChatApiStandIn(script) as llm:
        answer = await ChatResponder(_openai(llm.base_url), "m", mcp).answer("q")
    assert answer.text == "ok" and answer.sources == []
    tool_messages = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"].startswith("Error: invalid arguments")
    assert tool_messages[1]["content"].startswith("Error: unknown tool 'rag_delete'")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_unreachable_model_gives_friendly_error_in_thread() -> None:
    chat = ChatResponder(_openai(f"http://127.0.0.1:{_closed_port()}/v1"), "m", None)
    router = MessageRouter(RagCommandHandler(None), chat)
    async with stand_ins.SlackApiStandIn() as slack:
        await router.handle(slack.client(), channel="C1", ts="1.2", text="<@UBOT> hello")
    assert slack.texts() == [replies.CHAT_FAILED]
    assert slack.posts[0]["thread_ts"] == "1.2"


async def test_sources_from_structured_content_and_labelled_text() -> None:
    structured = ToolResult(
        text="ignored https://example.com/in-body",
        is_error=False,
        structured={
            "vector": [{"source": "https://a.example/1"}],
            "bm25": [{"url": "https://b.example/2"}],
        },
    )
    assert sources_of(structured) == ["https://a.example/1", "https://b.example/2"]
    listed = ToolResult(
        text="",
        is_error=False,
        structured={
            "hits": [{"source_url": "https://x.example/2"}],
            "sources": ["https://x.example/1", "https://x.example/2", "https://x.example/1"],
        },
    )
    assert sources_of(listed) == ["https://x.example/1", "https://x.example/2"]
    text = ToolResult(
        text="--- 参考情報 1 ---\n出典: https://c.example/3\nsee https://not-a-source.example\n"
        "source_url: https://d.example/4.",
        is_error=False,
    )
    assert sources_of(text) == ["https://c.example/3", "https://d.example/4"]
    ranked = ToolResult(
        text="## [1] Source: https://f.example/5\nTitle › Section · スコア 0.9\n\nbody\n\n"
        "## [2] Source: https://g.example/6\nbody",
        is_error=False,
    )
    assert sources_of(ranked) == ["https://f.example/5", "https://g.example/6"]
    assert sources_of(ToolResult(text="出典: https://e.example", is_error=True)) == []
    declined = ToolResult(
        text="該当する情報が見つかりませんでした。\n- [1] T — https://h.example/7",
        is_error=False,
        structured={"sources": ["https://h.example/7"], "confident": False},
    )
    assert sources_of(declined) == []  # nearest pages of a declined search are no references


async def test_a_hung_search_holds_a_question_for_the_search_limit_only(mcp: MCPManager) -> None:
    """Each of the model's searches waited the crawl timeout (30 min by default) when the
    server hung; all of one question's searches now share `search_timeout`."""
    script = [
        stand_ins.tool_call_reply("rag_search", {"query": "hang"}),
        stand_ins.tool_call_reply("rag_search", {"query": "hang"}, call_id="call_2"),
        stand_ins.text_reply("検索できなかったので一般的な回答です。"),
    ]
    async with stand_ins.ChatApiStandIn(script) as llm:
        chat = ChatResponder(_openai(llm.base_url), "stand-in", mcp, search_timeout=1.5)
        start = time.monotonic()
        answer = await chat.answer("りゅうおうのHPは？")
        took = time.monotonic() - start
    assert answer.text == "検索できなかったので一般的な回答です。"
    assert 1.4 < took < 10, took  # one search waited the limit; the second had no time left
    told = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert told[0].startswith("Error: the knowledge base is unavailable")
    assert told[1].startswith("Error: no time is left for searching")
