"""Slack wiring: a slack-bolt `AsyncApp` whose listeners hand messages to the router.

`app_mention` covers channels (and threads); `message` covers direct messages only
(channel messages without a mention are not for the bot). Edits, joins and every bot's
posts (`bot_id`: two bots mentioning each other would answer each other for ever) are
ignored; a direct message with a file attached or also sent to the channel is a message
like any other.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from slack_router.router import MessageRouter

_USER_MESSAGES = (None, "file_share", "thread_broadcast")
"""Message subtypes a person writes (None: plain text); edits, joins and the like are not."""


def build_app(
    router: MessageRouter,
    client: AsyncWebClient,
    *,
    process_before_response: bool = False,
) -> AsyncApp:
    """An `AsyncApp` that posts with `client` (which carries the bot token)."""
    app = AsyncApp(
        client=client,
        process_before_response=process_before_response,
        request_verification_enabled=False,  # Socket Mode: no HTTP signatures
    )

    async def on_mention(event: dict[str, Any], client: AsyncWebClient) -> None:
        if event.get("bot_id") or event.get("subtype") == "bot_message":
            return
        await router.handle(
            client,
            channel=event["channel"],
            ts=event["ts"],
            text=event.get("text", ""),
            thread_ts=event.get("thread_ts"),
        )

    async def on_message(event: dict[str, Any], client: AsyncWebClient) -> None:
        if event.get("channel_type") != "im" or event.get("bot_id"):
            return
        if event.get("subtype") not in _USER_MESSAGES:
            return
        await router.handle(
            client,
            channel=event["channel"],
            ts=event["ts"],
            text=event.get("text", ""),
            thread_ts=event.get("thread_ts"),
        )

    app.event("app_mention")(on_mention)
    app.event("message")(on_message)
    return app
