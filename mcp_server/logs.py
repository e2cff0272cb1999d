"""Logging for the server: everything to stderr, because stdout carries the protocol.

Also asks tqdm (used by some libraries for progress bars) to stay quiet.
"""

from __future__ import annotations

import logging
import os
import sys

OUR_LOGGERS = ("mcp_server", "rag_app")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str = "INFO") -> None:
    """Our loggers at `level`, third-party ones at WARNING (DEBUG shows all), to stderr."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(level)
