"""`rag-mcp`: serve the knowledge base over MCP (stdio by default, or streamable HTTP)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from mcp_server.logs import configure_logging

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

logger = logging.getLogger("mcp_server")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rag-mcp",
        description="Serve the RAG knowledge base as an MCP server (tools: rag_search, "
        "rag_add, rag_crawl, rag_delete, rag_stats). Settings come from the environment "
        "and .env (see .env.example).",
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
        "--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
        help="log level (logs go to stderr)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `rag-mcp` console script."""
    args = parse_args(argv)
    configure_logging(args.log_level)

    from rag_app.config import SettingsError, load_settings

    try:
        settings = load_settings()
    except SettingsError as err:
        print(f"rag-mcp: {err}", file=sys.stderr)
        raise SystemExit(2) from None

    from mcp_server.server import build_server

    server = build_server(settings, log_level=args.log_level)
    try:
        if args.transport == "stdio":
            server.run("stdio")
        else:
            if args.host not in LOOPBACK_HOSTS:
                logger.warning(
                    "Serving on %s without authentication: anyone who can reach port %d can "
                    "add and delete knowledge.",
                    args.host,
                    args.port,
                )
            logger.info(
                "Serving MCP over streamable HTTP at http://%s:%d/mcp", args.host, args.port
            )
            server.run("streamable-http", host=args.host, port=args.port)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
