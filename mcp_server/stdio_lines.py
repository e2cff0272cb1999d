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
_DIGITS = re.compile(r"\d+")
LONG_NUMBER = 1000
"""A run of this many digits or more makes a line worth reading here first."""


def _has_long_number(line: str) -> bool:
    """A run of `LONG_NUMBER` digits (each run read once: linear in the line)."""
    return any(m.end() - m.start() >= LONG_NUMBER for m in _DIGITS.finditer(line))


class _Number(str):
    """An integer of the line, kept as its digits (Python refuses to read more than
    4,300 of them as an int)."""


_TOOL = re.compile(r"[a-z_]{1,40}")


def _answerable(line: str) -> str:
    """A request the SDK's parser refuses is dropped by it without a reply, and its
    client waits for its own timeout: a `tools/call` whose arguments nest ~200 deep or
    hold a number of thousands of digits. Such a line becomes the same request (same id,
    tool) with one argument saying why, which the tool answers as a failure; another
    method becomes an unknown one, which is answered "Method not found". The id, method
    and tool are read with Python's `json` (numbers kept as text, so no digit limit); a
    line it cannot read either, or whose id is not a string or an integer, is left as it
    is."""
    if line.count("[") + line.count("{") < _NESTING_HINT and not _has_long_number(line):
        return line
    from mcp import types

    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return line
    except ValueError:
        pass
    try:
        message = json.loads(line, parse_int=_Number, parse_float=lambda _: None)
    except (ValueError, RecursionError):
        return line
    if not isinstance(message, dict):
        return line
    raw_id, method = message.get("id"), message.get("method")
    if not isinstance(method, str) or not isinstance(raw_id, str):
        return line  # a number comes back as text; a float or null id cannot be answered
    request_id: str | int = raw_id
    if isinstance(raw_id, _Number):  # a number in the line: answered as the same number
        if len(raw_id) > 18:
            return line
        request_id = int(raw_id)
    end = "\n" if line.endswith("\n") else ""
    params = message.get("params")
    tool = params.get("name") if isinstance(params, dict) else None
    if method == "tools/call" and isinstance(tool, str) and _TOOL.fullmatch(tool):
        why = (
            "the request's JSON nests too deep or holds a number too long to read "
            "(arguments are plain strings, numbers and booleans)"
        )
        call = {"name": tool, "arguments": {REFUSED: why}}
        reply = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": call}
    else:
        reply = {"jsonrpc": "2.0", "id": request_id, "method": "rag/unreadable-request"}
    return json.dumps(reply) + end


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
