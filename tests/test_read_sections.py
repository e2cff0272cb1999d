"""`rag_read` with a section: any heading path a hit or the sections list shows reads
that section (with or without the page title, with `>` or `›`, a middle heading, a
heading holding `>` or `›` itself)."""

from __future__ import annotations

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
    with pytest.raises(RAGError, match="has no section"):
        await setup_kb.read_source(SOURCE, section="Windows > Install")
