"""SlackSettings: the Slack bot's own settings (tokens, MCP client, chat model).

Kept apart from `rag_app.config` on purpose: the bot talks to the knowledge base only
through MCP and must not import `rag_app`. Read from env > `.env` > defaults; invalid
values fail at start-up with one sentence (`SlackSettingsError`).
"""

from __future__ import annotations

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MCP_SERVERS_CONFIG = "config/mcp_servers.json"


class SlackSettingsError(ValueError):
    """A Slack-side setting is invalid; the message is one sentence naming the variable."""


class SlackSettings(BaseSettings):
    """Settings of `rag-slack`; names follow the environment variables."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
    )

    # MCP client: RAG is available only when enabled AND the config registers a server.
    mcp_enabled: bool = False
    mcp_servers_config: str = DEFAULT_MCP_SERVERS_CONFIG
    mcp_start_timeout_sec: float = Field(30.0, gt=0)
    mcp_tool_timeout_sec: float = Field(1800.0, gt=0)
    mcp_search_timeout_sec: float = Field(60.0, gt=0)
    """All of one question's rag_search calls together (crawls may take the above)."""

    # Slack (Socket Mode)
    slack_bot_token: SecretStr = SecretStr("")
    slack_app_token: SecretStr = SecretStr("")

    # Chat model (any OpenAI-compatible server; unset base URL means OpenAI's API)
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr = SecretStr("")
    llm_timeout_sec: float = Field(120.0, gt=0)

    @property
    def chat_enabled(self) -> bool:
        """A chat model is usable when a local server URL or an API key is configured."""
        return bool(self.llm_base_url) or bool(self.llm_api_key.get_secret_value())


def load_slack_settings(**overrides: object) -> SlackSettings:
    """Build settings or raise `SlackSettingsError` with one clear sentence."""
    try:
        return SlackSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as err:
        first = err.errors()[0]
        loc = [str(part) for part in first.get("loc", ())]
        msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        name = loc[0].upper() if loc else "setting"
        raise SlackSettingsError(f"Invalid setting {name}: {msg}.") from None
