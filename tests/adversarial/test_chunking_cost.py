"""Chunking hostile text costs time and output linear in its size, and a page of too many
chunks is refused before its nodes are built."""

from __future__ import annotations

import time

import pytest
from llama_index.core.schema import Document

from rag_app.parsing.base import POSITION_WINDOW, TooManyChunksError
from rag_app.parsing.router import MAX_FENCE_CHARS, StructuredNodeParser, structured_chunks


def test_a_long_fence_line_is_not_repeated_whole_in_every_piece() -> None:
    # each piece of a split code block repeats its fences: with a 100 KB info string the
    # chunk text grew with the square of the block (gigabytes at the size limits)
    block = "```" + "x" * 100_000 + "\n" + "y\n" * 20_000 + "```\n"
    chunks = structured_chunks(block)
    assert len(chunks) > 10 and sum(len(c.text) for c in chunks) < 2 * len(block)
    for chunk in chunks[1:]:
        fence, *_body, close = chunk.text.split("\n")
        assert fence == "```" + "x" * (MAX_FENCE_CHARS - 3) and close == "```"
    tildes = "~" * 50_000
    chunks = structured_chunks(f"{tildes}\n" + "y\n" * 20_000 + f"{tildes}\n")
    assert sum(len(c.text) for c in chunks) < 200_000


def test_a_wide_header_over_many_short_rows_is_linear() -> None:
    # each row's pairs used to be built over the whole header: 16,000 columns and rows took
    # 19 s (columns x rows); now only the row's own cells count
    started = time.perf_counter()
    structured_chunks("|" + "h|" * 32_000 + "\n|--|\n" + "| |\n" * 32_000)
    assert time.perf_counter() - started < 10
    rows = structured_chunks("|a|b|c|\n|--|--|--|\n|x|1|\n|y||2|3|\n")
    assert [c.text for c in rows] == ["a: x\nb: 1", "a: y\nc: 2, 3"]


def test_chunk_positions_are_looked_up_nearby_only() -> None:
    # LlamaIndex searched the rest of the document for every chunk the chunker rewrote
    # (overlap-joined prose is never verbatim): a 3 MB page of prose took 42 s
    parser = StructuredNodeParser(200, 30)
    text = "# h\n\n" + "Some words in a sentence here. " * 100_000
    started = time.perf_counter()
    nodes = parser.get_nodes_from_documents([Document(text=text)])
    assert time.perf_counter() - started < 20 and len(nodes) > 10_000
    # a verbatim chunk within the window still gets its position
    doc = "First paragraph.\n\n| a | b |\n| --- | --- |\n| x | 1 |\n\nLast words."
    nodes = parser.get_nodes_from_documents([Document(text=doc)])
    last = nodes[-1]
    assert last.start_char_idx == doc.index("Last words.") and len(doc) < POSITION_WINDOW
    assert nodes[1].start_char_idx is None  # the row, written as `a: x, b: 1`


def test_a_page_of_too_many_chunks_is_refused_before_its_nodes_are_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = StructuredNodeParser(200, 30, max_chunks=5_000)
    built = StructuredNodeParser._build_nodes
    monkeypatch.setattr(StructuredNodeParser, "_build_nodes", lambda *a: pytest.fail("built"))
    with pytest.raises(TooManyChunksError) as caught:
        parser.get_nodes_from_documents([Document(text="a\f" * 20_000, id_="page.txt")])
    monkeypatch.setattr(StructuredNodeParser, "_build_nodes", built)
    assert str(caught.value) == (
        "page.txt makes at least 20,000 chunks, more than RAG_MAX_CHUNKS_PER_SOURCE (5,000), "
        "so it was skipped; raise the setting to index it."
    )
    split = StructuredNodeParser.split_chunks  # pages are counted before any is chunked
    monkeypatch.setattr(StructuredNodeParser, "split_chunks", lambda *a: pytest.fail("split"))
    with pytest.raises(TooManyChunksError):
        parser.get_nodes_from_documents([Document(text="a\f" * 500_000)])
    monkeypatch.setattr(StructuredNodeParser, "split_chunks", split)
    with pytest.raises(TooManyChunksError) as caught:  # not paged: counted once split
        parser.get_nodes_from_documents([Document(text="|k|v|\n|--|--|\n" + "|x|y|\n" * 6_000)])
    assert "makes 6,000 chunks" in str(caught.value)
    assert len(parser.get_nodes_from_documents([Document(text="a\f" * 5_000)])) == 5_000
