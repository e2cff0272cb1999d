"""Bolt wiring (events → router → thread replies) and the `rag-slack` entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from slack_bolt.request.async_request import AsyncBoltRequest

from slack_router import replies
from slack_router.__main__ import main
from slack_router.app import build_app
from slack_router.bot import build_mcp, build_router
from slack_router.rag_handler import RagCommandHandler
from slack_router.router import MessageRouter
from slack_router.settings import load_slack_settings

SLACK_ENV = (
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "MCP_ENABLED",
    "MCP_SERVERS_CONFIG",
    "LLM_BASE_URL",
    "LLM_API_KEY",
    "LLM_MODEL",
)


from tests.fixtures import slack_stand_ins as stand_ins  # noqa: E402


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No Slack/LLM settings from the environment or a `.env` in the working directory."""
    for name in SLACK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest_asyncio.fixture
async def slack() -> AsyncIterator[Any]:
    async with stand_ins.SlackApiStandIn() as api:
        yield api


def _event_body(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "token": "x",
        "team_id": "T1",
        "api_app_id": "A1",
        "type": "event_callback",
        "event_id": f"Ev{event['ts']}",
        "event_time": 1700000000,
        "event": {"team": "T1", "user": "U1", **event},
    }


async def _dispatch(app: Any, event: dict[str, Any]) -> int:
    request = AsyncBoltRequest(body=_event_body(event), mode="socket_mode")
    response = await app.async_dispatch(request)
    return int(response.status)


async def test_mention_and_dm_are_answered_in_thread(slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(None), chat=None)
    app = build_app(router, slack.client(), process_before_response=True)
    mention = {
        "type": "app_mention",
        "channel": "C1",
        "ts": "100.1",
        "thread_ts": "99.9",
        "text": "<@UBOT> rag status",
    }
    assert await _dispatch(app, mention) == 200
    dm = {"type": "message", "channel_type": "im", "channel": "D1", "ts": "101.1", "text": "rag"}
    assert await _dispatch(app, dm) == 200
    shown = zip(slack.posts, slack.texts(), strict=True)
    assert [(p["channel"], p["thread_ts"], text) for p, text in shown] == [
        ("C1", "99.9", replies.RAG_DISABLED),
        ("D1", "101.1", replies.USAGE),
    ]


async def test_channel_chatter_edits_and_bot_posts_are_ignored(slack: Any) -> None:
    router = MessageRouter(RagCommandHandler(None), chat=None)
    app = build_app(router, slack.client(), process_before_response=True)
    ignored = [
        {"type": "message", "channel_type": "channel", "channel": "C1", "ts": "1.1", "text": "hi"},
        {
            "type": "message",
            "channel_type": "im",
            "channel": "D1",
            "ts": "1.2",
            "subtype": "message_changed",
            "text": "rag status",
        },
        {
            "type": "message",
            "channel_type": "im",
            "channel": "D1",
            "ts": "1.3",
            "bot_id": "BOTHER",
            "text": "rag status",
        },
        # another bot mentioning this one: answering would let two bots talk for ever
        {"type": "app_mention", "channel": "C1", "ts": "1.4", "bot_id": "B2", "text": "<@U> rag"},
        {
            "type": "app_mention",
            "channel": "C1",
            "ts": "1.5",
            "subtype": "bot_message",
            "text": "<@UBOT> rag",
        },
    ]
    for event in ignored:
        await _dispatch(app, event)
    assert slack.posts == []


async def test_a_direct_message_with_a_file_or_also_sent_to_the_channel_is_answered(
    slack: Any,
) -> None:
    router = MessageRouter(RagCommandHandler(None), chat=None)
    app = build_app(router, slack.client(), process_before_response=True)
    for ts, subtype in (("2.1", "file_share"), ("2.2", "thread_broadcast")):
        event = {"type": "message", "channel_type": "im", "channel": "D1", "ts": ts}
        await _dispatch(app, {**event, "subtype": subtype, "text": "rag"})
    assert slack.texts() == [replies.USAGE, replies.USAGE]


def test_main_without_tokens_exits_2_with_one_line(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "SLACK_BOT_TOKEN" in err and "SLACK_APP_TOKEN" in err and "Traceback" not in err


def test_main_with_swapped_tokens_says_which(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xapp-1-abc")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xoxb-123")
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "SLACK_BOT_TOKEN must be the bot token" in capsys.readouterr().err


def test_main_with_missing_mcp_config_exits_2(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1")
    monkeypatch.setenv("MCP_ENABLED", "true")
    monkeypatch.setenv("MCP_SERVERS_CONFIG", str(clean_env / "nope.json"))
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope.json not found" in err


def test_missing_default_config_uses_the_bundled_example(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_ENABLED", "true")
    settings = load_slack_settings()
    assert not (clean_env / settings.mcp_servers_config).exists()
    manager = build_mcp(settings)
    assert manager is not None
    assert [conn.config.name for conn in manager._connections] == ["rag"]


def test_invalid_setting_is_one_line(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MCP_ENABLED", "maybe")
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rag-slack: Invalid setting MCP_ENABLED") and len(err.splitlines()) == 1


def test_settings_defaults_and_feature_switches(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_slack_settings()
    assert settings.mcp_enabled is False
    assert settings.mcp_servers_config == "config/mcp_servers.json"
    assert build_mcp(settings) is None
    assert settings.chat_enabled is False
    router = build_router(settings, None)
    assert router._chat is None

    (clean_env / ".env").write_text(
        "MCP_ENABLED=true\nLLM_BASE_URL=http://127.0.0.1:1234/v1\nLLM_MODEL=qwen\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("MCP_SERVERS_CONFIG", str(clean_env / "mcp.json"))
    (clean_env / "mcp.json").write_text('{"mcpServers": {}}', encoding="utf-8")
    settings = load_slack_settings()
    assert settings.mcp_enabled and settings.chat_enabled and settings.llm_model == "qwen"
    manager = build_mcp(settings)
    assert manager is not None and manager.server_names == []
    assert build_router(settings, manager)._chat is not None
