"""Slack wiring: a slack-bolt `AsyncApp` whose listeners hand messages to the router.

`app_mention` covers channels (and threads); `message` covers direct messages only
(channel messages without a mention are not for the bot). Edits, joins and the bot's
own posts (message subtypes, `bot_id`) are ignored.
"""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from slack_router.router import MessageRouter


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
        await router.handle(
            client,
            channel=event["channel"],
            ts=event["ts"],
            text=event.get("text", ""),
            thread_ts=event.get("thread_ts"),
        )

    async def on_message(event: dict[str, Any], client: AsyncWebClient) -> None:
        if event.get("channel_type") != "im" or event.get("subtype") or event.get("bot_id"):
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
