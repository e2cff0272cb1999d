"""Requests over stdio whose JSON holds a lone surrogate get an answer, not silence.

JSON lets a string hold a lone surrogate escape (`"\\ud83d"`: what a client sends when it
cuts a string inside an emoji). The `mcp` SDK's parser refuses the whole line, so such a
request was dropped and its client waited for its own timeout. `install()` makes the
SDK's stdin reader pass such a line through Python's `json` (which takes lone
surrogates), with each one replaced by U+FFFD as everywhere else in this project
(`rag_app.limits.without_surrogates`), and re-serialised; a line with no surrogate escape
is passed on untouched.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rag_app.limits import without_surrogates

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def clean_line(line: str) -> str:
    """`line` with lone surrogates replaced (`_without_lone_surrogates`), and, when the
    SDK would refuse it for nesting or a number it cannot read, a request that gets an
    answer instead (`_answerable`)."""
    return _answerable(_without_lone_surrogates(line))


REFUSED = "__refused__"
"""The argument through which a tool call the SDK could not read is answered with why
(`mcp_server.server.RagServer.call_tool`)."""
_NESTING_HINT = 100
"""Lines with at least this many brackets are read by the SDK's parser here first
(it refuses a message nested ~200 deep), so that a refusal can be answered."""
_LONG_NUMBER = re.compile(r"\d{1000}")
_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')
_METHOD = re.compile(r'"method"\s*:\s*"([a-z/_]{1,60})"')
_TOOL = re.compile(r'"name"\s*:\s*"([a-z_]{1,40})"')


def _answerable(line: str) -> str:
    """A request the SDK's parser refuses is dropped by it without a reply, and its
    client waits for its own timeout: a `tools/call` whose arguments nest ~200 deep or
    hold a number of thousands of digits. Such a line becomes the same request (same id,
    tool) with one argument saying why, which the tool answers as a failure; another
    method becomes an unknown one, which is answered "Method not found". A line whose id
    cannot be found is left as it is."""
    if line.count("[") + line.count("{") < _NESTING_HINT and not _LONG_NUMBER.search(line):
        return line
    from mcp import types

    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return line
    except ValueError:
        pass
    found = _ID.search(line)
    method = _METHOD.search(line)
    if found is None or method is None:
        return line
    request_id = json.loads(found.group(1))
    end = "\n" if line.endswith("\n") else ""
    tool = _TOOL.search(line)
    if method.group(1) == "tools/call" and tool is not None:
        why = (
            "the request's JSON nests too deep or holds a number too long to read "
            "(arguments are plain strings, numbers and booleans)"
        )
        params = {"name": tool.group(1), "arguments": {REFUSED: why}}
        message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    else:
        message = {"jsonrpc": "2.0", "id": request_id, "method": "rag/unreadable-request"}
    return json.dumps(message) + end


def _without_lone_surrogates(line: str) -> str:
    """`line` (one JSON-RPC message) with its lone surrogates as U+FFFD, re-serialised;
    unchanged when it has no surrogate escape, is not JSON this cleaning can read, or
    holds one in a request id (a reply must carry the id exactly as sent: such a line is
    left for the SDK to refuse, as before)."""
    if not _SURROGATE_ESCAPE.search(line):
        return line
    try:
        message = json.loads(line)
        if _id_has_surrogate(message):
            return line
        cleaned = _clean(message)  # keys that differ only by a lone surrogate merge
    except (ValueError, RecursionError):
        return line
    return json.dumps(cleaned, ensure_ascii=False) + ("\n" if line.endswith("\n") else "")


def _id_has_surrogate(message: Any) -> bool:
    """A request id (`id`, or `params.requestId` of a cancellation) holding a lone
    surrogate."""
    if not isinstance(message, dict):
        return False
    params = message.get("params")
    ids = [message.get("id"), params.get("requestId") if isinstance(params, dict) else None]
    return any(isinstance(i, str) and without_surrogates(i) != i for i in ids)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return without_surrogates(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {without_surrogates(k): _clean(v) for k, v in value.items()}
    return value


def install() -> bool:
    """Make the SDK's stdio transport read lines through `clean_line` (False when this
    SDK has no such reader: its lines are then read as it reads them)."""
    from mcp.server import stdio

    base = getattr(stdio, "_UnownedTextWrapper", None)
    if base is None or getattr(base, "cleans_lines", False):
        return base is not None

    class CleaningTextWrapper(base):  # type: ignore[misc, valid-type]
        cleans_lines = True

        def readline(self, size: int = -1) -> str:  # type: ignore[override]
            return clean_line(super().readline(size))

    stdio._UnownedTextWrapper = CleaningTextWrapper  # type: ignore[attr-defined]
    return True
