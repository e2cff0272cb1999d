"""`rag-slack`: run the Slack bot over Socket Mode.

Configuration errors (missing tokens, broken MCP config) are one line on stderr and
exit code 2; Slack rejecting the tokens is one line and exit code 1; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence


def _fail(message: str, code: int) -> None:
    print(f"rag-slack: {message}", file=sys.stderr)
    raise SystemExit(code)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-knowledge")
    except PackageNotFoundError:
        return "0"


def main(argv: Sequence[str] | None = None) -> None:
    """Console script entry point (arguments are read before anything heavy is imported)."""
    parser = argparse.ArgumentParser(
        prog="rag-slack",
        description="Run the Slack bot over Socket Mode (settings from the environment and "
        ".env: SLACK_BOT_TOKEN, SLACK_APP_TOKEN, MCP_ENABLED, MCP_SERVERS_CONFIG, LLM_*).",
    )
    parser.add_argument("--version", action="version", version=f"rag-slack {_version()}")
    parser.parse_args(argv)
    try:
        _run()
    except KeyboardInterrupt:  # no traceback, also while the heavy imports below load
        print("rag-slack: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def _run() -> None:
    """Load the settings, connect to Slack and serve until stopped."""
    import asyncio

    from slack_sdk.errors import SlackApiError

    from slack_router.bot import build_mcp, check_tokens, run_bot
    from slack_router.mcp_config import MCPConfigError
    from slack_router.settings import SlackSettingsError, load_slack_settings

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = load_slack_settings()
        check_tokens(settings)
        mcp = build_mcp(settings)
    except (SlackSettingsError, MCPConfigError) as err:
        _fail(str(err), 2)
        return
    try:
        asyncio.run(run_bot(settings, mcp))
    except SlackApiError as err:
        code = err.response.get("error", "unknown_error") if err.response else "unknown_error"
        _fail(
            f"Slack refused the connection ({code}); check SLACK_BOT_TOKEN and SLACK_APP_TOKEN.", 1
        )


if __name__ == "__main__":
    main()
