"""MessageRouter: one Slack message in, replies out — always in the message's thread.

`rag ...` commands go to `RagCommandHandler` (MCP tools), anything else to the chat
model. Every post carries `thread_ts` (the message's thread, or the message itself),
so nothing is ever posted at channel level. Unexpected failures are logged and answered
with one friendly line; no traceback reaches Slack.

Questions cost model calls, so they are bounded: at most `MAX_QUESTION_CHARS` each, at
most `MAX_ANSWERING` answered at a time and `MAX_WAITING` more waiting their turn; past
that a question is answered "busy" at once (a burst of messages, a bot replying to
itself in a loop, would otherwise start as many model calls and searches as it sends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict

from slack_sdk.web.async_client import AsyncWebClient

from slack_router import replies
from slack_router.chat import ChatResponder
from slack_router.commands import parse_rag_command, strip_mentions, unwrap_links
from slack_router.rag_handler import RagCommandHandler

logger = logging.getLogger(__name__)

_SEEN_LIMIT = 1000
MAX_QUESTION_CHARS = 4000
"""Slack's own advice for a message's length; the chat model gets the question whole."""
MAX_ANSWERING = 4
"""Questions answered at once (each a model call and its searches)."""
MAX_WAITING = 16
"""Questions waiting for their turn; one more is answered `replies.BUSY`."""


class MessageRouter:
    """Routes one message; `chat=None` means no chat model is configured."""

    def __init__(self, rag: RagCommandHandler, chat: ChatResponder | None = None) -> None:
        self._rag = rag
        self._chat = chat
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._answering = asyncio.Semaphore(MAX_ANSWERING)
        self._waiting = 0  # questions waiting for a turn

    def _first_time(self, channel: str, ts: str) -> bool:
        """Slack may deliver one message twice (app_mention + message.im); answer once."""
        key = (channel, ts)
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.popitem(last=False)
        return True

    async def handle(
        self,
        client: AsyncWebClient,
        *,
        channel: str,
        ts: str,
        text: str,
        thread_ts: str | None = None,
    ) -> None:
        """Answer the message at `ts` in `channel` inside its thread."""
        if not self._first_time(channel, ts):
            return
        reply_ts = thread_ts or ts

        async def send(message: str) -> None:
            await client.chat_postMessage(
                channel=channel,
                thread_ts=reply_ts,
                text=replies.for_slack(message),
                unfurl_links=False,
                unfurl_media=False,
            )

        async def post(message: str) -> None:
            try:
                await send(message)
            except Exception:
                logger.exception("posting to Slack channel %s failed", channel)
                with contextlib.suppress(Exception):  # say so, rather than stay silent
                    await send(replies.POST_FAILED)

        try:
            command = parse_rag_command(text)
            if command is not None:
                logger.info("rag command %s %s", command.action, command.url)
                await self._rag.run(command, post)
            else:
                await post(await self._answer(unwrap_links(strip_mentions(text))))
        except Exception:
            logger.exception("handling Slack message %s/%s failed", channel, ts)
            await post(replies.INTERNAL_ERROR)

    async def _answer(self, question: str) -> str:
        if not question:
            return replies.USAGE
        if self._chat is None:
            return replies.CHAT_DISABLED
        if len(question) > MAX_QUESTION_CHARS:
            return replies.question_too_long(len(question), MAX_QUESTION_CHARS)
        if self._answering.locked() and self._waiting >= MAX_WAITING:
            logger.warning("%d questions waiting; one more answered busy", self._waiting)
            return replies.BUSY
        self._waiting += 1
        try:
            await self._answering.acquire()
        finally:
            self._waiting -= 1
        try:
            answer = await self._chat.answer(question)
        except Exception as err:
            logger.warning("chat model failed: %s", err)
            return replies.CHAT_FAILED
        finally:
            self._answering.release()
        return replies.with_sources(answer.text or replies.EMPTY_ANSWER, answer.sources)
