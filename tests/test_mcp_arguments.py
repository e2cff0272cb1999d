"""`check_arguments`: one sentence per bad argument, short whatever the value's size."""

from __future__ import annotations

from mcp_server.arguments import check_arguments

SCHEMA = {
    "properties": {
        "query": {"type": "string"},
        "n_results": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["query"],
}


def test_a_huge_number_is_not_echoed_whole() -> None:
    message = check_arguments("rag_search", SCHEMA, {"query": "q", "n_results": 10**4000})
    assert message is not None and "between 1 and 50" in message
    assert len(message) < 200 and "4,001 characters" in message, message


def test_a_small_number_is_echoed_as_it_is() -> None:
    message = check_arguments("rag_search", SCHEMA, {"query": "q", "n_results": 0})
    assert message is not None and message.endswith("got 0."), message


def test_an_unknown_argument_name_is_not_echoed_whole() -> None:
    message = check_arguments("rag_search", SCHEMA, {"query": "q", "k" * 2_000_000: 1})
    assert message is not None and "has no argument" in message
    assert len(message) < 300, len(message)


def test_an_integer_written_as_a_float_is_an_integer() -> None:
    """JSON Schema counts 2.0 as an integer; some clients send numbers that way."""
    assert check_arguments("rag_search", SCHEMA, {"query": "q", "n_results": 3.0}) is None
    message = check_arguments("rag_search", SCHEMA, {"query": "q", "n_results": 3.5})
    assert message is not None and "integer" in message, message
