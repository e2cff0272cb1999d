"""Lone surrogates in a JSON-RPC line from an MCP client become U+FFFD; a line with no
surrogate escape, or one in a request id, reaches the SDK exactly as sent
(mcp_server/stdio_lines.py)."""

from __future__ import annotations

import io
import json

import mcp_types as types
import pytest

from mcp_server.stdio_lines import clean_line, install


def test_a_line_with_a_lone_surrogate_becomes_one_the_sdk_accepts() -> None:
    line = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"rag_search",' \
        '"arguments":{"query":"a\\ud83d b","\\udc00key":["x\\ude00"]}}}\n'  # fmt: skip
    cleaned = clean_line(line)
    assert cleaned.endswith("\n")
    message = types.jsonrpc_message_adapter.validate_json(cleaned, by_name=False)
    args = json.loads(cleaned)["params"]["arguments"]
    assert args == {"query": "a\ufffd b", "\ufffdkey": ["x\ufffd"]}
    assert message.id == 7  # type: ignore[union-attr]


def test_other_lines_are_passed_on_untouched() -> None:
    pair = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"q":"\\ud83d\\ude00"}}\n'
    assert json.loads(clean_line(pair))["params"]["q"] == "\U0001f600"  # a pair stays
    for line in (
        '{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
        "not json \\ud800\n",  # the SDK reports what it cannot parse
        "[" * 100_000 + '"\\ud800"' + "]" * 100_000 + "\n",  # deeper than json can go
    ):
        assert clean_line(line) == line


def test_a_request_id_is_never_rewritten() -> None:
    """A reply must carry the id as sent: a line whose id holds a lone surrogate is left
    for the SDK to refuse, as it did before (two such requests must not share an id)."""
    for line in (
        '{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}\n',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\\udc00"}}\n',
    ):
        assert clean_line(line) == line
    kept = '{"jsonrpc":"2.0","id":"r-1","method":"ping","params":{"q":"\\ud800"}}\n'
    assert json.loads(clean_line(kept))["id"] == "r-1"


def test_install_wraps_the_sdks_reader_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp.server import stdio

    original = stdio._UnownedTextWrapper
    monkeypatch.setattr(stdio, "_UnownedTextWrapper", original)  # restored afterwards
    assert install() and install()
    wrapper = stdio._UnownedTextWrapper
    assert wrapper.cleans_lines  # type: ignore[attr-defined]
    assert wrapper.__bases__ == (original,)  # wrapped once, not twice
    reader = wrapper(io.BytesIO(b'{"q":"\\ud800"}\n'), encoding="utf-8")
    assert json.loads(reader.readline()) == {"q": "\ufffd"}


def _deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_a_line_the_sdk_refuses_is_answered_under_the_id_it_was_sent_with() -> None:
    """The request id is read as JSON, wherever it stands: an `id` inside the arguments
    (before it) is not it, a string id stays a string."""
    call = {"name": "rag_search", "arguments": {"id": 1, "q": _deep(250)}}
    line = json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": call, "id": 7})
    rewritten = json.loads(clean_line(line))
    assert rewritten["id"] == 7 and rewritten["params"]["name"] == "rag_search"
    assert "nests too deep" in rewritten["params"]["arguments"]["__refused__"]
    number = '{"jsonrpc":"2.0","id":"7","method":"tools/call","params":{"name":"rag_stats",'
    assert (
        json.loads(clean_line(number + '"arguments":{"limit":' + "9" * 5000 + "}}}"))["id"] == "7"
    )


def test_a_line_whose_id_cannot_be_answered_is_left_as_it_is() -> None:
    tail = ',"method":"tools/call","params":{"name":"rag_stats","arguments":{"l":' + "9" * 5000
    for request_id in ("2.5", "12345678901234567890123", "null"):
        line = '{"jsonrpc":"2.0","id":' + request_id + tail + "}}}"
        assert clean_line(line) == line
    normal = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}})
    assert clean_line(normal) == normal
