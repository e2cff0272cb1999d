"""`rag_read` with a section: any heading path a hit or the sections list shows reads
that section (with or without the page title, with `>` or `›`, a middle heading, a
heading holding `>` or `›` itself)."""

from __future__ import annotations

from typing import Any

import pytest

from rag_app.errors import RAGError
from rag_app.knowledge import KnowledgeBase

SOURCE = "file:///n/setup.md"
TEXT = """# Setup

Intro text.

## Linux

### Install

Linux install text with apt.

## Mac

### Install

Mac install text with brew.

## Option<T> and ->

Rust option text.

## Pick A › B

Pick text.
"""


@pytest.fixture
async def setup_kb(kb: KnowledgeBase) -> KnowledgeBase:
    await kb.ingest_text(SOURCE, TEXT, title="Setup", kind="file")
    return kb


@pytest.mark.parametrize(
    "section",
    [
        "Setup > Linux > Install",  # the hit's heading_path
        "Linux > Install",  # without the page title
        "Setup › Linux › Install",  # as the hit's text shows it
        "Setup > Setup > Linux > Install",  # the page title copied in front
        "Setup > Linux",  # a middle heading, whole
        "Linux",  # a middle heading by its name
        "Setup>Linux>Install",  # typed without spaces
    ],
)
async def test_every_form_of_a_heading_path_reads_its_section(
    setup_kb: KnowledgeBase, section: str
) -> None:
    read = await setup_kb.read_source(SOURCE, section=section)
    assert "Linux install text" in read.text, (section, read)
    assert "Mac install text" not in read.text and "Rust option" not in read.text


@pytest.mark.parametrize(
    ("section", "wanted"),
    [("Option<T> and ->", "Rust option text"), ("Pick A › B", "Pick text")],
)
async def test_a_heading_holding_an_arrow_is_read_whole(
    setup_kb: KnowledgeBase, section: str, wanted: str
) -> None:
    read = await setup_kb.read_source(SOURCE, section=section)
    assert wanted in read.text and "Linux install" not in read.text, read


async def test_a_heading_name_shared_by_two_sections_reads_both_and_a_wrong_one_fails(
    setup_kb: KnowledgeBase,
) -> None:
    both = await setup_kb.read_source(SOURCE, section="Install")
    assert "Linux install text" in both.text and "Mac install text" in both.text
    # each under its parent headings, so the two can be told apart
    linux, mac = both.text.index("## Linux"), both.text.index("## Mac")
    assert linux < both.text.index("Linux install text") < mac < both.text.index("Mac install")
    assert both.text.count("### Install") == 2 and both.text.count("# Setup") == 1
    one = await setup_kb.read_source(SOURCE, section="Linux > Install")
    assert "## Linux" not in one.text  # one section: no parents above it
    with pytest.raises(RAGError, match="has no section"):
        await setup_kb.read_source(SOURCE, section="Windows > Install")


def test_the_whole_source_text_is_built_in_linear_time_and_as_before() -> None:
    """`reading_text` joins each chunk to the text's tail only (a join never looks
    further back): the same text as joining to the whole text each time, which copied
    the whole text at every chunk (1.5 s for one `rag_read` page of a 5,000-chunk source)."""
    import random

    from rag_app.passages import join_chunks, last_heading, reading_text, section_heading

    def whole(pieces: list[tuple[int, str, str, int]]) -> str:
        text, last_path, heading_line = "", None, ""
        headed: set[str] = set()
        for _, chunk, path, level in sorted(pieces, key=lambda p: p[0]):
            if path != last_path:
                heading = last_heading(path)
                block = chunk
                if heading and not chunk.lstrip().startswith("#"):
                    block = f"{'#' * max(1, min(level, 6))} {heading}\n{chunk}"
                parts = path.split(" > ") if path else []
                for depth in range(len(parts) - 1, 0, -1):  # parents with no chunk, once
                    if " > ".join(parts[:depth]) not in headed:
                        headed.add(" > ".join(parts[:depth]))
                        block = (
                            f"{'#' * (level - len(parts) + depth)} {parts[depth - 1]}\n\n{block}"
                        )
                headed.add(path)
                text = f"{text}\n\n{block}" if text else block
                last_path, heading_line = path, section_heading(block)
            else:
                text = join_chunks(text, chunk, heading_line)
        return text

    rng = random.Random(3)
    for _ in range(30):
        pieces, previous = [], ""
        for i in range(rng.randint(1, 60)):
            body = "".join(rng.choice("ab 設定\n") for _ in range(rng.randint(1, 1500)))
            path = f"T > S{i // rng.randint(1, 8)}"
            if previous and rng.random() < 0.7:  # repeats the end of the chunk before
                body = previous[-rng.randint(1, min(len(previous), 1200)) :] + body
            if rng.random() < 0.2:
                body = f"### {last_heading(path)}\n{body}"
            if rng.random() < 0.15:  # an empty chunk, with or without a heading
                body, path = "", rng.choice(["", path])
            pieces.append((i, body, path, 3))
            previous = body
        rng.shuffle(pieces)
        assert reading_text(pieces)[0] == whole(pieces)


async def test_the_next_page_reuses_the_source_read_until_the_source_changes(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paging through a source reads its chunks from the store once; a rewrite of the
    source (a new record) is read afresh, and a deleted source is not served from memory."""
    url = "https://example.com/manual"
    await kb.ingest_text(url, "# 手引き\n\n" + "".join(f"最初の版の第{i}文。" for i in range(300)))
    reads: list[str] = []
    real = kb.store.source_nodes
    monkeypatch.setattr(kb.store, "source_nodes", lambda key: reads.append(key) or real(key))
    first = await kb.read_source(url, max_chars=1000)
    second = await kb.read_source(url, offset=first.next_offset or 0, max_chars=1000)
    assert len(reads) == 1 and second.offset == first.next_offset
    await kb.ingest_text(
        url, "# 手引き\n\n" + "".join(f"二番目の版の第{i}文。" for i in range(300))
    )
    again = await kb.read_source(url, max_chars=1000)
    assert len(reads) == 2 and "二番目の版" in again.text and "最初の版" not in again.text
    await kb.delete_source(url)
    with pytest.raises(RAGError):
        await kb.read_source(url)


async def test_a_storage_fault_while_reading_is_one_sentence_naming_the_fix(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from rag_app.errors import StoreUnavailableError

    url = "https://example.com/full"
    await kb.ingest_text(url, "# 満杯\n\n本文。")

    def full(_key: str) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(kb.store, "source_nodes", full)
    monkeypatch.setattr(kb.store, "get_source", full)
    with pytest.raises(StoreUnavailableError, match="full"):
        await kb.read_source(url)


async def test_two_runs_of_one_heading_path_are_read_as_two_sections(kb: KnowledgeBase) -> None:
    """Two `Top > Usage` sections apart on a page were joined into one block with no
    heading between them: each keeps its heading line."""
    text = (
        "# Top\n\n## Usage\n\nfirst usage text.\n\n## Other\n\nother text.\n\n"
        "## Usage\n\nthird usage text.\n"
    )
    await kb.ingest_text("file:///n/twice.md", text, title="Top", kind="file")
    read = await kb.read_source("file:///n/twice.md", section="Top > Usage")
    assert "other text" not in read.text
    first, second = read.text.index("first usage"), read.text.index("third usage")
    assert "Usage" in read.text[first:second], read.text  # a heading between the two


CODE = (
    "# Code page\n\nBefore.\n\n```python\n"
    + "".join(f"value_{i} = {i}  # line {i}\n" for i in range(60))
    + "```\n\nAfter the code.\n"
)


async def test_a_page_cut_inside_code_is_shown_as_code_and_its_text_kept_exact(
    kb: KnowledgeBase,
) -> None:
    from mcp_server.formatting import format_read
    from rag_app.markdown_fences import open_block

    await kb.ingest_text("file:///n/code.md", CODE, title="Code page", kind="file")
    pages, offset = [], 0
    while offset is not None:
        page = await kb.read_source("file:///n/code.md", offset=offset, max_chars=600)
        pages.append(page)
        offset = page.next_offset
    assert len(pages) > 2
    whole = (await kb.read_source("file:///n/code.md", max_chars=50_000)).text
    assert "".join(p.text for p in pages) == whole  # the structured text is exact
    assert pages[0].code_fence == "" and pages[1].code_fence == "```python"
    for page in pages:
        shown = format_read(page)
        assert open_block(shown) == "", shown  # no page leaves a block open
        body = shown.split("\n\n", 1)[1]
        if page.code_fence:
            assert body.startswith("```python\n"), body[:40]


async def test_a_heading_with_no_text_of_its_own_is_read_above_its_subheading(
    kb: KnowledgeBase,
) -> None:
    text = "# Alpha Top\n## Beta Sub\nbeta text\n\n# Gamma Top\n### Delta Deep\ndelta text\n"
    await kb.ingest_text("file:///n/heads.md", text, title="Heads", kind="file")
    read = (await kb.read_source("file:///n/heads.md")).text
    for heading in ("# Alpha Top", "## Beta Sub", "Gamma Top", "### Delta Deep"):
        assert heading in read, read
    assert read.index("Alpha Top") < read.index("Beta Sub") < read.index("Gamma Top")
    assert read.count("Alpha Top") == 1
    section = (await kb.read_source("file:///n/heads.md", section="Gamma Top")).text
    assert section.startswith("# Gamma Top") or section.startswith("## Gamma Top"), section
    assert "Alpha" not in section
