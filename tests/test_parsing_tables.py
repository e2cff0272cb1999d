"""Table chunking: one chunk per row with the header repeated (the りゅうおう case)."""

from __future__ import annotations

import time

import pytest
from llama_index.core import Document
from llama_index.core.schema import MetadataMode

from rag_app.parsing.chunk import MAX_HEADING_CHARS, MAX_PATH_CHARS
from rag_app.parsing.content_type import ContentType
from rag_app.parsing.tables import (
    MAX_ROW_CHUNK_CHARS,
    TableNodeParser,
    chunk_table_data,
    find_tables,
    row_key,
    row_texts,
)

RYUOU = "名前: りゅうおう\nHP: 90, MP: 75, 攻撃力: 100"
SLIME = "名前: スライム\nHP: 10, MP: 5, 攻撃力: 8"

SPACE_TABLE = """名前    HP  MP  攻撃力
りゅうおう  90  75  100
スライム    10  5   8"""

PIPE_TABLE = """| 名前 | HP | MP | 攻撃力 |
|:-----|---:|---:|-----:|
| りゅうおう | 90 | 75 | 100 |
| スライム | 10 | 5 | 8 |"""

PIPE_NO_OUTER = """名前 | HP | MP | 攻撃力
--- | --- | --- | ---
りゅうおう | 90 | 75 | 100
スライム | 10 | 5 | 8"""

TAB_TABLE = "名前\tHP\tMP\t攻撃力\nりゅうおう\t90\t75\t100\nスライム\t10\t5\t8"
SINGLE_SPACE = "名前 HP MP 攻撃力\nりゅうおう 90 75 100\nスライム 10 5 8"


@pytest.mark.parametrize(
    "text",
    [SPACE_TABLE, PIPE_TABLE, PIPE_NO_OUTER, TAB_TABLE, SINGLE_SPACE],
    ids=["spaces", "pipes", "pipes-no-outer", "tabs", "single-space"],
)
def test_ryuou_rows_have_the_header_repeated(text: str) -> None:
    chunks = chunk_table_data(text)
    assert [c.text for c in chunks] == [RYUOU, SLIME]
    assert [c.extra["entity_name"] for c in chunks] == ["りゅうおう", "スライム"]
    assert {c.extra["table_header"] for c in chunks} == {"名前 | HP | MP | 攻撃力"}
    assert {c.content_type for c in chunks} == {ContentType.TABLE}


def test_english_table() -> None:
    text = "Name        HP   MP\nSlime       10   5\nKing Slime  30   12"
    chunks = chunk_table_data(text)
    assert [c.text for c in chunks] == [
        "Name: Slime\nHP: 10, MP: 5",
        "Name: King Slime\nHP: 30, MP: 12",
    ]
    assert chunks[1].extra == {
        "entity_name": "King Slime",
        "row_key": "King Slime",
        "table_header": "Name | HP | MP",
    }


def test_rows_without_header_are_kept_as_row_text() -> None:
    text = "りゅうおう 90 75 100\nスライム 10 5 8"
    chunks = chunk_table_data(text)
    assert [c.text for c in chunks] == ["りゅうおう 90 75 100", "スライム 10 5 8"]
    assert chunks[0].extra == {
        "entity_name": "りゅうおう",
        "row_key": "りゅうおう",
        "table_header": "",
    }
    pipe = "| 1 | 2 | 3 |\n| 4 | 5 | 6 |"
    assert [c.text for c in chunk_table_data(pipe)] == ["| 1 | 2 | 3 |", "| 4 | 5 | 6 |"]


def test_text_only_table_uses_first_row_as_header() -> None:
    text = "名前\t職業\t出身\n勇者\t戦士\tラダトーム"
    assert [c.text for c in chunk_table_data(text)] == ["名前: 勇者\n職業: 戦士, 出身: ラダトーム"]


def test_empty_cells_are_left_out() -> None:
    text = "| Name | HP | MP | Note |\n|---|---|---|---|\n| Slime | 10 |  | weak |\n| Ghost | | |"
    assert [c.text for c in chunk_table_data(text)] == [
        "Name: Slime\nHP: 10, Note: weak",
        "Name: Ghost",
    ]


def test_escaped_pipe_is_a_literal() -> None:
    text = "| Key | Value |\n|---|---|\n| or | a \\| b |"
    assert [c.text for c in chunk_table_data(text)] == ["Key: or\nValue: a | b"]


def test_preceding_heading_and_caption_go_into_heading_path() -> None:
    text = f"# 図鑑\n## ボス一覧\n表1: ステータス\n{PIPE_TABLE}\n\n続きの説明文です。"
    chunks = chunk_table_data(text)
    rows = [c for c in chunks if c.content_type is ContentType.TABLE]
    assert [c.text for c in rows] == [RYUOU, SLIME]
    assert {c.heading_path for c in rows} == {"図鑑 > ボス一覧 > 表1: ステータス"}
    assert {c.heading_level for c in rows} == {2}
    prose = [c.text for c in chunks if c.content_type is ContentType.PROSE]
    assert prose == ["表1: ステータス", "続きの説明文です。"]


def test_a_sentence_above_the_table_is_not_a_caption() -> None:
    text = f"The stats are listed below.\n{SPACE_TABLE}"
    assert {t.caption for t in find_tables(text.split("\n"))} == {""}
    text = f"Monster stats:\n{SPACE_TABLE}"
    assert [t.caption for t in find_tables(text.split("\n"))] == ["Monster stats"]


def test_caption_one_blank_line_above_the_table() -> None:
    assert [t.caption for t in find_tables(f"モンスター一覧\n\n{PIPE_TABLE}".split("\n"))] == [
        "モンスター一覧"
    ]
    long_paragraph = f"前の段落の一行目\nモンスター一覧\n\n{PIPE_TABLE}"
    assert [t.caption for t in find_tables(long_paragraph.split("\n"))] == [""]


def test_a_previous_table_row_is_never_a_caption() -> None:
    text = f"{PIPE_TABLE}\n{SPACE_TABLE}\n\n{TAB_TABLE}"
    tables = find_tables(text.split("\n"))
    assert [(len(t.rows), t.caption) for t in tables] == [(2, ""), (2, ""), (2, "")]


def test_long_row_is_split_between_pairs_repeating_the_name() -> None:
    header = ["名前", *[f"能力{i}" for i in range(30)]]
    cells = ["りゅうおう", *[str(100 + i) for i in range(30)]]
    texts = row_texts(header, cells, "", chunk_size=80)
    assert len(texts) > 1
    assert all(t.startswith("名前: りゅうおう\n") and len(t) <= 80 for t in texts)
    pairs = [p for t in texts for p in t.split("\n")[1].split(", ")]
    assert pairs == [f"能力{i}: {100 + i}" for i in range(30)]


def test_single_pair_too_long_stays_whole() -> None:
    """The documented exception: one header+value that alone exceeds the size."""
    long_value = "説" * 150
    texts = row_texts(["名前", "説明"], ["スライム", long_value], "", chunk_size=100)
    assert texts == [f"名前: スライム\n説明: {long_value}"]


def test_double_spaced_prose_is_not_a_table() -> None:
    text = "This is one.  This is two.  This is three.\nAnd so on.  It goes.  Like this."
    assert find_tables(text.split("\n")) == []
    assert {c.content_type for c in chunk_table_data(text)} == {ContentType.PROSE}


def test_ragged_rows_end_the_column_table() -> None:
    text = "a  b  c\n1  2  3\n4  5\nplain line"
    (table,) = find_tables(text.split("\n"))
    assert (table.header, table.rows, table.start, table.end) == (
        ("a", "b", "c"),
        (("1", "2", "3"),),
        0,
        2,
    )


def test_empty_input() -> None:
    assert chunk_table_data("") == []
    assert TableNodeParser().get_nodes_from_documents([Document(text="")]) == []


def test_table_node_parser_nodes() -> None:
    doc = Document(
        text=f"## ボス\n{SPACE_TABLE}",
        metadata={"source_url": "https://example.com/monsters", "title": "モンスター"},
    )
    nodes = TableNodeParser().get_nodes_from_documents([doc])
    assert [n.get_content(MetadataMode.EMBED) for n in nodes] == [RYUOU, SLIME]
    assert nodes[1].metadata == {
        "source_url": "https://example.com/monsters",
        "title": "モンスター",
        "entity_name": "スライム",
        "row_key": "スライム",
        "table_header": "名前 | HP | MP | 攻撃力",
        "chunk_index": 1,
        "content_type": "table",
        "heading_path": "ボス",
        "heading_level": 2,
    }
    context = {"title", "heading_path"}
    assert set(nodes[0].excluded_llm_metadata_keys) == set(nodes[0].metadata) - context


def test_huge_header_names_and_first_cell_do_not_multiply() -> None:
    huge = "列" * 100_000
    lines = ["| 名前 | " + huge + " |", "|---|---|", *[f"| 敵{i} | {i} |" for i in range(50)]]
    chunks = chunk_table_data("\n".join(lines))
    assert len(chunks) == 50
    assert all(len(c.text) < MAX_HEADING_CHARS + 20 for c in chunks)
    assert chunks[0].text == f"名前: 敵0\n{'列' * 199}…: 0"
    assert all(len(str(c.extra["table_header"])) <= MAX_PATH_CHARS for c in chunks)


def test_later_pieces_of_a_long_row_repeat_a_capped_first_cell() -> None:
    header = ["名前", *[f"能力{i}" for i in range(500)]]
    cells = ["竜" * 100_000, *[str(i) for i in range(500)]]
    texts = row_texts(header, cells, "", chunk_size=200)
    assert texts[0].startswith("名前: 竜")
    assert max(map(len, texts)) <= MAX_ROW_CHUNK_CHARS  # the long cell is cut, not one chunk
    values = [t for t in texts if "能力" in t]
    assert all(t.startswith(f"名前: {'竜' * 195}…\n") for t in values)
    assert "".join(values).count("能力") == 500  # every pair kept
    # Before the cap every piece repeated all 100,000 characters (50 MB for this row).
    assert sum(map(len, texts)) < 1.2 * 100_000 + 500 * (MAX_HEADING_CHARS + 20)


def test_a_row_of_one_huge_cell_is_cut_into_pieces_of_bounded_size() -> None:
    """A 100 KB cell made one 100 KB chunk, which the embedding model took 30 s over."""
    text = "word " * 20_000
    named = row_texts(["名前", "説明"], ["りゅうおう", text], "", 200)
    bare = row_texts([], [], text, 200)  # a header-less row
    for texts in (named, bare):
        assert len(texts) > 40
        assert max(map(len, texts)) <= MAX_ROW_CHUNK_CHARS
        assert sum(t.count("word") for t in texts) == 20_000  # cut at spaces, nothing lost
    assert all(t.startswith("名前: りゅうおう\n") for t in named)


def test_runs_of_sentence_columns_are_rejected_in_linear_time() -> None:
    block = (
        "a  b  c\nThis is one.  Here is two.  And three.\nThis is one.  Here is two.  And three.\n"
    )
    started = time.perf_counter()
    assert find_tables((block * 3_000).split("\n")) == []  # ~260 KB, 9,000 lines
    assert time.perf_counter() - started < 10  # quadratic work would take minutes


def test_row_key_skips_an_index_column() -> None:
    chunks = chunk_table_data("| No. | 名前 | HP |\n| --- | --- | --- |\n| 57 | スライム | 8 |")
    assert (chunks[0].extra["entity_name"], chunks[0].extra["row_key"]) == ("57", "スライム")
    assert row_key(["12", "34"]) == "12"
