"""Fenced code: recognised as CommonMark does, kept whole up to a size, split only at line
ends inside its own fences; headings inside code stay code."""

from __future__ import annotations

from rag_app.markdown_fences import Fences
from rag_app.parsing.content_type import ContentType
from rag_app.parsing.router import code_chunks, structured_chunks
from rag_app.results import demote_headings

CODE = """```python
def main() -> None:
    # read the settings
    for name in ("a", "b"):
        print(name)
```"""


def _inside(text: str) -> list[bool]:
    fences = Fences()
    return [fences.step(line) for line in text.split("\n")]


def test_fences_open_only_at_line_start_and_close_with_the_same_run() -> None:
    assert _inside("text\n```py\nx = 1\n```\nafter") == [False, True, True, True, False]
    # inline code at the start of a line is not a fence
    assert _inside("```x``` is inline\n## Heading") == [False, False]
    # a shorter or different run does not close; trailing text does not close
    assert _inside("````\n```\n~~~\n```` no\n````\nout") == [True] * 5 + [False]
    assert _inside("   ~~~\n# not a heading\n~~~") == [True, True, True]
    assert _inside("    ```\nindented four: code, not a fence") == [False, False]


def test_a_code_block_is_one_chunk_with_its_indentation_and_language() -> None:
    text = f"# Guide\n\nRun this:\n\n{CODE}\n\nThen it prints two lines."
    chunks = structured_chunks(text, chunk_size=60, chunk_overlap=10)
    code = [c for c in chunks if c.content_type is ContentType.CODE]
    assert [c.text for c in code] == [CODE]  # longer than the chunk size, still whole
    assert code[0].heading_path == "Guide"
    assert "    for name in" in code[0].text  # indentation kept
    prose = " ".join(c.text for c in chunks if c.content_type is not ContentType.CODE)
    assert "Run this:" in prose and "Then it prints" in prose and "def main" not in prose


def test_a_literal_fence_inside_a_sentence_does_not_swallow_the_headings() -> None:
    text = "# A\n\nWrite ```code``` inline.\n\n## B\n\nbody of B\n\n## C\n\nbody of C"
    paths = [c.heading_path for c in structured_chunks(text, 200, 30)]
    assert "A > B" in paths and "A > C" in paths


def test_a_long_block_is_cut_at_line_ends_inside_its_own_fences() -> None:
    body = "\n".join(f"    value_{i} = compute({i})  # step {i}" for i in range(80))
    block = f"```python\n{body}\n```"
    pieces = code_chunks(block, chunk_size=200, code_block_chars=600)
    assert len(pieces) > 1
    for piece in pieces:
        assert len(piece.text) <= 600
        lines = piece.text.split("\n")
        assert lines[0] == "```python" and lines[-1] == "```"
        assert all(line.startswith("    value_") for line in lines[1:-1])
    rebuilt = [line for p in pieces for line in p.text.split("\n")[1:-1]]
    assert rebuilt == body.split("\n")  # nothing lost, nothing repeated


def test_headings_inside_code_are_not_demoted() -> None:
    text = "# Title\n```sh\n# comment\n## also a comment\n```\n## Real"
    assert demote_headings(text) == "### Title\n```sh\n# comment\n## also a comment\n```\n### Real"
