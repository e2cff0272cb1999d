"""ChatResponder: answers ordinary questions with an OpenAI-compatible model in a tool loop.

The model is offered the MCP server's `rag_search` (schema from `list_tools`) and decides
itself whether to search ("semi-agentic search", spec 003). Tool results are fed back
until it answers (at most `max_rounds` tool rounds). The source URLs that `rag_search`
actually returned are collected here, so the reply's `参照元:` list never depends on
the model. With MCP off (or no `rag_search`) it is a plain chat without tools.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from openai import AsyncOpenAI

from slack_router.mcp_manager import MCPCallError, MCPManager, MCPToolNotFoundError
from slack_router.search_sources import sources_of, unique

logger = logging.getLogger(__name__)

SEARCH_TOOL = "rag_search"

BASE_PROMPT = (
    "あなたはSlackで質問に答えるアシスタントです。"
    "簡潔に、Slackで読みやすい形で日本語で答えてください（質問が英語なら英語で）。"
)
SEARCH_PROMPT = (
    "ナレッジベース（取り込み済みのWebページ）に関係しそうな質問では rag_search ツールで"
    "検索し、その結果に基づいて答えてください。挨拶や雑談では検索しないでください。"
    "検索結果に答えがなければ、そう伝えてください。"
    "参照元URLはアプリケーションが回答の末尾に自動で付けるので、本文に列挙しないでください。"
)


@dataclass
class ChatAnswer:
    """The model's final text and the distinct source URLs of its searches."""

    text: str
    sources: list[str] = field(default_factory=list)
    searches: int = 0


def _tool_spec(tool: types.Tool) -> dict[str, Any]:
    schema = tool.input_schema or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or "Search the knowledge base.",
            "parameters": schema,
        },
    }


class ChatResponder:
    """One question in, one answer out; `mcp=None` disables the search tool."""

    def __init__(
        self,
        client: AsyncOpenAI,
        model: str,
        mcp: MCPManager | None = None,
        *,
        max_rounds: int = 4,
        max_tool_chars: int = 16000,
        system_prompt: str = BASE_PROMPT,
        search_timeout: float = 60.0,
    ) -> None:
        self._client = client
        self._model = model
        self._mcp = mcp
        self._max_rounds = max_rounds
        self._max_tool_chars = max_tool_chars
        self._system_prompt = system_prompt
        self._search_timeout = search_timeout
        """All of one question's searches together take at most this long (a hung server
        held a question for the crawl timeout, once per search)."""

    def _tools(self) -> list[dict[str, Any]]:
        if self._mcp is None:
            return []
        tool = self._mcp.get_tool(SEARCH_TOOL)
        return [_tool_spec(tool)] if tool is not None else []

    def _system(self, with_tools: bool) -> str:
        if not with_tools or self._mcp is None:
            return self._system_prompt
        parts = [self._system_prompt, SEARCH_PROMPT, *self._mcp.instructions]
        return "\n\n".join(part for part in parts if part)

    async def answer(self, question: str) -> ChatAnswer:
        """Run the tool loop; raises the client's error when the model is unreachable."""
        tools = self._tools()
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self._system(bool(tools))},
            {"role": "user", "content": question},
        ]
        sources: list[str] = []
        searches = 0
        deadline = time.monotonic() + self._search_timeout
        for round_no in range(self._max_rounds + 1):
            final_round = round_no == self._max_rounds
            kwargs: dict[str, Any] = {"model": self._model, "messages": messages}
            if tools:
                kwargs["tools"] = tools
                if final_round:
                    kwargs["tool_choice"] = "none"
            response = await self._client.chat.completions.create(**kwargs)
            message = response.choices[0].message
            calls = [c for c in (message.tool_calls or []) if c.type == "function"]
            if not calls or not tools or final_round:
                return ChatAnswer((message.content or "").strip(), unique(sources), searches)
            messages.append(
                {
                    "role": "assistant",
                    "content": message.content or "",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                        for call in calls
                    ],
                }
            )
            for call in calls:
                content, found = await self._run_tool(
                    call.function.name, call.function.arguments, deadline
                )
                searches += 1
                sources.extend(found)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        raise AssertionError("unreachable: the final round always returns")  # pragma: no cover

    async def _run_tool(self, name: str, raw_args: str, deadline: float) -> tuple[str, list[str]]:
        """Execute one tool call; errors become text for the model, never exceptions."""
        if name != SEARCH_TOOL or self._mcp is None:
            return f"Error: unknown tool {name!r}; only {SEARCH_TOOL} is available.", []
        try:
            args = json.loads(raw_args or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as err:
            return f"Error: invalid arguments for {name} ({err}); pass a JSON object.", []
        logger.info("chat tool call %s %s", name, json.dumps(args, ensure_ascii=False))
        left = deadline - time.monotonic()
        if left <= 0:
            return "Error: no time is left for searching; answer with what you have.", []
        try:
            result = await self._mcp.call_tool(name, args, timeout=left)
        except (MCPToolNotFoundError, MCPCallError) as err:
            logger.warning("chat tool call %s failed: %s", name, err)
            return "Error: the knowledge base is unavailable right now.", []
        text = result.text or "(no results)"
        if len(text) > self._max_tool_chars:
            text = text[: self._max_tool_chars] + "\n…(truncated)"
        if result.is_error:
            return f"Error: {text}", []
        return text, sources_of(result)
