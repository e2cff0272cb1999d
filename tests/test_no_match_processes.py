"""The no-match verdict crosses processes: the store service decides it, `rag search`
and the real `rag-mcp` (over stdio, with the mcp client) show it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_server.formatting import NO_MATCH
from tests.processes import rag, rag_json, rag_mcp, store_env, text_of, write_notes

pytestmark = pytest.mark.slow

ABSENT = "How do I make a tkinter window with a button?"
UNKNOWN_CODE = "nm7tok2 with unittest.mock.patch"
"""Every word is stored but the code it names is not: declined at any cut-off."""


async def test_a_declined_search_is_shown_as_such_by_the_cli_and_over_mcp(tmp_path: Path) -> None:
    # a cut-off this high declines every weak search: the lexical evidence decides
    env = store_env(tmp_path, RAG_NO_MATCH_CUTOFF="10")
    notes = tmp_path / "notes"
    write_notes(notes, "nm", 20, words=12, sections=True)  # 240 chunks in 20 files
    try:
        indexed = rag(env, "index", str(notes))
        assert indexed.returncode == 0, indexed.stderr
        assert rag_json(env, "stats")["total_chunks"] >= 200  # enough for the spread (240)

        declined = rag_json(env, "search", ABSENT)
        assert declined["confident"] is False and declined["hits"]
        assert declined["evidence"]["unseen"] and declined["evidence"]["excess"] is not None
        assert all(not h["passage"] for h in declined["hits"])  # pointers, not passages
        known = rag_json(env, "search", "nm7tok2")
        assert known["confident"] is True  # the store holds every word of it
        code = rag_json(env, "search", UNKNOWN_CODE)
        assert code["confident"] is False
        assert code["evidence"]["unseen_code"] == ["unittest.mock.patch"]
        printed = rag(env, "search", ABSENT)
        assert printed.returncode == 0 and "no confident match" in printed.stdout

        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            found = await client.call_tool("rag_search", {"query": ABSENT})
            assert not found.is_error and text_of(found).startswith(NO_MATCH)
            assert "## [" not in text_of(found)
            assert (found.structured_content or {})["confident"] is False
            named = await client.call_tool("rag_search", {"query": UNKNOWN_CODE})
            assert text_of(named).startswith(NO_MATCH)
            assert (named.structured_content or {})["confident"] is False
            answered = await client.call_tool("rag_search", {"query": "nm7tok2"})
            assert text_of(answered).startswith("## [1] Source:")
            assert (answered.structured_content or {})["confident"] is True
    finally:
        rag(env, "service", "stop")
