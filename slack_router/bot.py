"""Assembles the bot from settings: MCP manager, chat model, router, Socket Mode loop."""

from __future__ import annotations

import logging

from openai import AsyncOpenAI
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.web.async_client import AsyncWebClient

from slack_router.app import build_app
from slack_router.chat import SEARCH_TOOL, ChatResponder
from slack_router.mcp_config import config_path
from slack_router.mcp_manager import MCPManager
from slack_router.rag_handler import RagCommandHandler
from slack_router.router import MessageRouter
from slack_router.settings import SlackSettings, SlackSettingsError

logger = logging.getLogger(__name__)


def check_tokens(settings: SlackSettings) -> tuple[str, str]:
    """The bot and app tokens, or `SlackSettingsError` saying which one is missing or swapped."""
    bot = settings.slack_bot_token.get_secret_value().strip()
    app = settings.slack_app_token.get_secret_value().strip()
    if not bot or not app:
        raise SlackSettingsError(
            "SLACK_BOT_TOKEN (xoxb-...) and SLACK_APP_TOKEN (xapp-..., Socket Mode) are "
            "required; set both in the environment or .env."
        )
    if not bot.startswith("xoxb-"):
        raise SlackSettingsError("SLACK_BOT_TOKEN must be the bot token that starts with xoxb-.")
    if not app.startswith("xapp-"):
        raise SlackSettingsError(
            "SLACK_APP_TOKEN must be the app-level token (connections:write) that starts "
            "with xapp-."
        )
    return bot, app


def build_mcp(settings: SlackSettings) -> MCPManager | None:
    """The MCP manager when `MCP_ENABLED=true` (raises `MCPConfigError` on a broken file)."""
    if not settings.mcp_enabled:
        logger.info("MCP_ENABLED is false: rag commands are disabled, chat runs without search")
        return None
    return MCPManager.from_config_file(
        config_path(settings.mcp_servers_config),
        start_timeout=settings.mcp_start_timeout_sec,
        tool_timeout=settings.mcp_tool_timeout_sec,
    )


def build_chat(settings: SlackSettings, mcp: MCPManager | None) -> ChatResponder | None:
    """The chat responder, or None when no model is configured (LLM_BASE_URL / LLM_API_KEY)."""
    if not settings.chat_enabled:
        logger.warning(
            "no chat model configured (LLM_BASE_URL / LLM_API_KEY): questions are declined"
        )
        return None
    client = AsyncOpenAI(
        api_key=settings.llm_api_key.get_secret_value() or "not-needed",
        base_url=settings.llm_base_url or None,
        timeout=settings.llm_timeout_sec,
    )
    return ChatResponder(
        client, settings.llm_model, mcp, search_timeout=settings.mcp_search_timeout_sec
    )


def build_router(settings: SlackSettings, mcp: MCPManager | None) -> MessageRouter:
    return MessageRouter(RagCommandHandler(mcp), build_chat(settings, mcp))


async def run_bot(settings: SlackSettings, mcp: MCPManager | None) -> None:
    """Start MCP servers, then serve Slack over Socket Mode until cancelled."""
    bot_token, app_token = check_tokens(settings)
    if mcp is not None:
        await mcp.start()
        if not mcp.has_tool("rag_add"):
            logger.warning("no MCP server offers the rag tools: rag commands will say it is off")
        if not mcp.has_tool(SEARCH_TOOL):
            logger.warning("no MCP server offers %s: chat runs without search", SEARCH_TOOL)
    try:
        app = build_app(build_router(settings, mcp), AsyncWebClient(token=bot_token))
        handler = AsyncSocketModeHandler(app, app_token)
        await handler.start_async()
    finally:
        if mcp is not None:
            await mcp.close()
