"""Heading chunking: sections with breadcrumbs, Markdown and HTML, oversize bodies."""

from __future__ import annotations

from llama_index.core import Document
from llama_index.core.schema import MetadataMode

from rag_app.parsing.chunk import MAX_HEADING_CHARS, MAX_PATH_CHARS, shorten
from rag_app.parsing.content_type import ContentType
from rag_app.parsing.headings import (
    HeadingNodeParser,
    atx_heading,
    chunk_by_headings,
    normalize_headings,
    split_sections,
    strip_tags,
)
from rag_app.parsing.prose import split_prose

JA_DEEP = """はじめに、この文書の概要を説明する。

# ドラゴンクエスト
シリーズの紹介。

## モンスター
敵キャラクターの説明。

### りゅうおう
竜王は最後のボスである。

### スライム
スライムは最初の敵である。

## 呪文
ホイミは回復の呪文である。
"""

EN_DEEP = """# Guide
Intro text.
## Setup
### Install
Run the installer.
#### Linux
Use the package manager.
## Usage
Start the app.
"""


def _summary(text: str, size: int = 500) -> list[tuple[str, str, int, str]]:
    return [
        (c.text, c.heading_path, c.heading_level, c.content_type.value)
        for c in chunk_by_headings(text, size, 50)
    ]


def test_japanese_deep_headings_carry_their_breadcrumb() -> None:
    assert _summary(JA_DEEP) == [
        ("はじめに、この文書の概要を説明する。", "", 0, "prose"),
        ("# ドラゴンクエスト\nシリーズの紹介。", "ドラゴンクエスト", 1, "heading"),
        ("## モンスター\n敵キャラクターの説明。", "ドラゴンクエスト > モンスター", 2, "heading"),
        (
            "### りゅうおう\n竜王は最後のボスである。",
            "ドラゴンクエスト > モンスター > りゅうおう",
            3,
            "heading",
        ),
        (
            "### スライム\nスライムは最初の敵である。",
            "ドラゴンクエスト > モンスター > スライム",
            3,
            "heading",
        ),
        ("## 呪文\nホイミは回復の呪文である。", "ドラゴンクエスト > 呪文", 2, "heading"),
    ]


def test_parent_headings_and_heading_metadata() -> None:
    chunk = chunk_by_headings(JA_DEEP)[3]
    assert chunk.extra == {
        "heading": "りゅうおう",
        "parent_headings": "ドラゴンクエスト > モンスター",
    }
    top = chunk_by_headings(JA_DEEP)[1]
    assert top.extra == {"heading": "ドラゴンクエスト", "parent_headings": ""}


def test_english_deep_headings_and_level_jumps() -> None:
    assert _summary(EN_DEEP) == [
        ("# Guide\nIntro text.", "Guide", 1, "heading"),
        ("### Install\nRun the installer.", "Guide > Setup > Install", 3, "heading"),
        ("#### Linux\nUse the package manager.", "Guide > Setup > Install > Linux", 4, "heading"),
        ("## Usage\nStart the app.", "Guide > Usage", 2, "heading"),
    ]


def test_html_headings_are_recognised() -> None:
    text = (
        '<h1 class="title">Monster <em>Book</em></h1><p>Intro.</p>\n'
        "<H2>Bosses &amp; Kings</H2>\nThe Dragonlord rules.\n"
        "<h3>\n  竜王\n</h3>最後のボス。"
    )
    assert _summary(text) == [
        ("# Monster Book\n<p>Intro.</p>", "Monster Book", 1, "heading"),
        ("## Bosses & Kings\nThe Dragonlord rules.", "Monster Book > Bosses & Kings", 2, "heading"),
        ("### 竜王\n最後のボス。", "Monster Book > Bosses & Kings > 竜王", 3, "heading"),
    ]


def test_all_six_levels() -> None:
    text = "\n".join(f"{'#' * n} L{n}\nbody {n}" for n in range(1, 7))
    chunks = chunk_by_headings(text)
    assert [c.heading_level for c in chunks] == [1, 2, 3, 4, 5, 6]
    assert chunks[-1].heading_path == "L1 > L2 > L3 > L4 > L5 > L6"
    html_text = "".join(f"<h{n}>H{n}</h{n}>text{n}" for n in range(1, 7))
    assert [c.heading_level for c in chunk_by_headings(html_text)] == [1, 2, 3, 4, 5, 6]


def test_oversize_body_is_split_and_every_piece_keeps_the_heading() -> None:
    body = "".join(f"竜王の説明文その{i}である。" for i in range(60))  # ~900 chars
    text = f"# 図鑑\n## りゅうおう\n{body}"
    chunks = chunk_by_headings(text, max_chunk_size=120, chunk_overlap=20)
    assert len(chunks) >= 8
    for chunk in chunks:
        assert chunk.text.startswith("## りゅうおう\n")
        assert len(chunk.text) <= 120
        assert chunk.heading_path == "図鑑 > りゅうおう"
    pieces = "".join(c.text.removeprefix("## りゅうおう\n") for c in chunks)
    assert all(f"竜王の説明文その{i}である。" in pieces for i in range(60))


def test_oversize_english_body_split_with_heading() -> None:
    body = " ".join(f"Sentence {i} about the castle." for i in range(40))
    chunks = chunk_by_headings(f"## Castle\n{body}", max_chunk_size=100, chunk_overlap=20)
    assert len(chunks) > 5
    assert all(c.text.startswith("## Castle\n") and len(c.text) <= 100 for c in chunks)


def test_over_long_heading_is_shortened_to_keep_the_size() -> None:
    text = "# " + "長い見出し" * 40 + "\n本文。" * 30
    chunks = chunk_by_headings(text, max_chunk_size=80, chunk_overlap=10)
    assert all(len(c.text) <= 80 for c in chunks)
    assert all(c.text.split("\n")[0].endswith("…") for c in chunks)
    assert chunks[0].extra["heading"] == "長い見出し" * 40


def test_no_headings_falls_back_to_prose() -> None:
    text = "見出しのない文章。" * 40
    chunks = chunk_by_headings(text, 100, 20)
    assert [c.text for c in chunks] == split_prose(text, 100, 20)
    assert {c.content_type for c in chunks} == {ContentType.PROSE}
    assert all(c.heading_path == "" and c.heading_level == 0 for c in chunks)


def test_empty_text_gives_nothing() -> None:
    assert chunk_by_headings("") == []
    assert chunk_by_headings("# \n   \n") == []


def test_headings_in_fenced_code_and_hashtags_are_text() -> None:
    text = "# Real\n```bash\n# just a comment\n```\n#hashtag is not a heading"
    sections = split_sections(text)
    assert [(s.heading, s.level) for s in sections] == [("Real", 1)]
    assert "# just a comment" in sections[0].body
    assert "#hashtag" in sections[0].body


def test_closing_hashes_are_dropped() -> None:
    assert split_sections("## Title ##\nbody")[0].heading == "Title"
    assert split_sections("## C#\nbody")[0].heading == "C#"


def test_heading_without_body() -> None:
    text = "# Book\n## Chapter\n### Empty leaf\n## Next\ntext"
    # A parent with children gives no chunk of its own (children carry it); a leaf does.
    assert _summary(text) == [
        ("### Empty leaf", "Book > Chapter > Empty leaf", 3, "heading"),
        ("## Next\ntext", "Book > Next", 2, "heading"),
    ]


def test_heading_node_parser_nodes() -> None:
    doc = Document(text=EN_DEEP, metadata={"source_url": "file:///guide.md"})
    parser = HeadingNodeParser(max_chunk_size=200, chunk_overlap=20)
    nodes = parser.get_nodes_from_documents([doc])
    assert [n.metadata["chunk_index"] for n in nodes] == [0, 1, 2, 3]
    linux = nodes[2]
    assert linux.get_content() == "#### Linux\nUse the package manager."
    assert linux.get_content(MetadataMode.EMBED) == (
        "Guide > Setup > Install > Linux\n#### Linux\nUse the package manager."
    )
    assert linux.metadata == {
        "source_url": "file:///guide.md",
        "heading": "Linux",
        "parent_headings": "Guide > Setup > Install",
        "chunk_index": 2,
        "content_type": "heading",
        "heading_path": "Guide > Setup > Install > Linux",
        "heading_level": 4,
    }
    for node in nodes:
        assert all(isinstance(v, str | int) for v in node.metadata.values())
        context = {"title", "heading_path"}
        assert set(node.excluded_embed_metadata_keys) == set(node.metadata) - context


def test_heading_node_parser_defaults_follow_spec() -> None:
    parser = HeadingNodeParser()
    assert (parser.max_chunk_size, parser.chunk_overlap) == (500, 50)


def test_huge_headings_and_paths_are_capped() -> None:
    huge = "見" * 100_000
    text = "".join(f"{'#' * level} {huge}{level}\n本文{level}。\n" for level in range(1, 7))
    sections = split_sections(text)
    assert all(len(s.heading) == MAX_HEADING_CHARS for s in sections)
    assert sections[0].heading == "見" * 199 + "…"
    assert len(sections[-1].heading_path) == MAX_PATH_CHARS
    chunks = chunk_by_headings(text, 500, 50)
    assert all(len(c.text) <= 500 and len(c.heading_path) <= MAX_PATH_CHARS for c in chunks)
    assert all(len(str(c.extra["parent_headings"])) <= MAX_PATH_CHARS for c in chunks)


def test_huge_html_heading_is_capped() -> None:
    (section,) = split_sections(f"<h2>{'x' * 100_000}</h2>\n本文")
    assert section.heading == "x" * 199 + "…" and section.body == "本文"


def test_shorten_cuts_on_a_character_and_marks_the_cut() -> None:
    assert shorten("りゅうおう", 5) == "りゅうおう"
    assert shorten("りゅうおうの城", 5) == "りゅうお…"
    assert shorten("ab cd", 4) == "ab…"  # no dangling space before the mark


def test_html_headings_without_closing_tags_stay_text() -> None:
    preamble, section = split_sections("<h1>" * 20_000 + "<h2>ok</h2>")
    assert preamble.body == "<h1>" * 20_000
    assert (section.heading, section.level) == ("ok", 2)
    assert normalize_headings("<h3 class='a'>A &amp; <b>B</b></H3 >x") == "\n### A & B\nx"
    assert normalize_headings("<h1>a</h2>") == "<h1>a</h2>"
    assert strip_tags("a<b>c<>d<e") == "a c<>d<e"


def test_atx_heading_shapes() -> None:
    assert atx_heading("## Title ##  ") == (2, "Title")
    assert atx_heading("   # x") == (1, "x")
    assert atx_heading("    # code") is None
    assert atx_heading("#hashtag") is None
    assert atx_heading("####### seven") is None
    assert atx_heading("# C# #") == (1, "C#")
    assert atx_heading("# #") == (1, "")
