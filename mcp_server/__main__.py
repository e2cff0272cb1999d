"""`rag-mcp`: serve the knowledge base over MCP (stdio by default, or streamable HTTP)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from mcp_server.logs import configure_logging
from rag_app.console import VersionAction, guarded
from rag_app.startup_gc import started, starting

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765

logger = logging.getLogger("mcp_server")


def _port(value: str) -> int:
    """A TCP port, 1-65535: the server would otherwise listen on the number modulo 65,536
    while saying it serves the one given."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1-65535)")
    return port


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rag-mcp",
        description="Serve the RAG knowledge base as an MCP server (tools: rag_search, "
        "rag_read, rag_add, rag_crawl, rag_jobs, rag_refresh, rag_delete, rag_stats). "
        "Settings come from the environment and .env (`python -m rag_app.data env.example` "
        "lists every setting).",
    )
    parser.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        default="stdio",
        help="stdio (default; for Claude Desktop / Claude Code) or streamable-http",
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"HTTP bind address (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})"
    )
    parser.add_argument("--version", action=VersionAction)
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
        help="log level (logs go to stderr)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `rag-mcp` console script (Ctrl-C: exit 130, no traceback)."""
    args = parse_args(argv)
    configure_logging(args.log_level)
    raise SystemExit(guarded(lambda: _serve(args)))


def _serve(args: argparse.Namespace) -> None:
    """Load the settings, build the server and run it until the client goes away."""
    starting()
    try:
        from rag_app.config import SettingsError, load_settings

        try:
            settings = load_settings()
        except SettingsError as err:
            print(f"rag-mcp: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        if args.transport == "stdio":  # HTTP checks its token and port first (they may fail)
            from rag_app.service.launcher import start_soon

            start_soon(settings)  # the store service opens while the MCP SDK is imported
        from mcp_server.server import build_server

        server = build_server(settings, log_level=args.log_level)
    finally:
        started()
    if args.transport == "stdio":
        from mcp_server.stdio_lines import install

        if not install():
            logger.warning("This mcp SDK's stdio reader is not the expected one; requests "
                           "holding lone surrogates may go unanswered.")  # fmt: skip
        server.run("stdio")
    else:
        _serve_http(server, args.host, args.port, settings, args.log_level)


def _serve_http(server: Any, host: str, port: int, settings: Any, log_level: str) -> None:
    """Streamable HTTP with Host/Origin checks on every bind and an optional bearer token."""
    import uvicorn

    from mcp_server.http_deadline import DeadlineH11Protocol
    from mcp_server.http_security import (
        TokenMissingError,
        require_token_for,
        transport_security,
        with_bearer_token,
    )

    token = settings.rag_mcp_token
    try:
        require_token_for(host, token)
    except TokenMissingError as err:
        print(f"rag-mcp: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    extra = settings.rag_mcp_allowed_hosts.split(",") if settings.rag_mcp_allowed_hosts else []
    app = server.streamable_http_app(
        host=host, transport_security=transport_security(host, port, extra)
    )
    if token:
        app = with_bearer_token(app, token)
    logger.info(
        "Serving MCP over streamable HTTP at http://%s:%d/mcp%s",
        host,
        port,
        " (bearer token required)" if token else "",
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level.lower(), http=DeadlineH11Protocol)


if __name__ == "__main__":
    main()
