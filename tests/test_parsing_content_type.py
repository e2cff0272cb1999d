"""Content-type detection: prose, table and mixed samples in Japanese and English."""

from __future__ import annotations

import pytest

from rag_app.parsing.content_type import ContentType, detect_content_type

JA_PROSE = """竜王は物語の最後に登場する敵である。城の奥深くに住んでいる。

勇者は長い旅の末に竜王の城へたどり着いた。2024年に新しいリメイク版が発売された。"""

EN_PROSE = """The Dragonlord waits at the end of the story. He lives deep inside his castle.

In 2024 a remake was released in 15 countries, and it sold well."""

JA_SPACE_TABLE = """名前    HP  MP  攻撃力
りゅうおう  90  75  100
スライム    10  5   8"""

EN_PIPE_TABLE = """| Name | HP | MP |
|------|---:|:--:|
| Slime | 10 | 5 |
| Dragonlord | 90 | 75 |"""

TAB_TABLE = "名前\tHP\tMP\nりゅうおう\t90\t75\nスライム\t10\t5"

SINGLE_SPACE_NUMERIC = """名前 HP MP 攻撃力
りゅうおう 90 75 100
スライム 10 5 8"""

JA_MIXED = """モンスターのステータスを以下にまとめる。数値は初期値である。
強さの目安として参考にしてほしい。
| 名前 | HP |
|---|---|
| りゅうおう | 90 |
表の後にも説明が続く。ボスは一体だけである。
最後までお読みいただきありがとうございます。"""

EN_MIXED = """Below are the starting stats of each monster.
They are only a rough guide to their strength.
Name    HP   MP
Slime   10   5
More explanation follows the table.
Thanks for reading to the end."""


def test_content_type_values_are_plain_strings() -> None:
    assert [c.value for c in ContentType] == ["prose", "table", "mixed", "heading", "code"]
    assert ContentType("table") is ContentType.TABLE
    assert ContentType.PROSE == "prose"
    assert isinstance(ContentType.MIXED, str)


@pytest.mark.parametrize("text", [JA_PROSE, EN_PROSE], ids=["ja", "en"])
def test_prose_is_prose(text: str) -> None:
    assert detect_content_type(text) is ContentType.PROSE


@pytest.mark.parametrize("text", ["", "   \n\n\t  "], ids=["empty", "whitespace"])
def test_empty_text_is_prose(text: str) -> None:
    assert detect_content_type(text) is ContentType.PROSE


@pytest.mark.parametrize(
    "text",
    [JA_SPACE_TABLE, EN_PIPE_TABLE, TAB_TABLE, SINGLE_SPACE_NUMERIC],
    ids=["ja-spaces", "en-pipes", "tabs", "single-space-numeric"],
)
def test_tables_are_tables(text: str) -> None:
    assert detect_content_type(text) is ContentType.TABLE


def test_spec_004_raw_numeric_rows_are_a_table() -> None:
    raw = "りゅうおう 90 75 100 15 15 15 0 0 0\nスライム 10 5 8 3 3 3 0 0 0"
    assert detect_content_type(raw) is ContentType.TABLE


@pytest.mark.parametrize("text", [JA_MIXED, EN_MIXED], ids=["ja", "en"])
def test_prose_with_a_table_is_mixed(text: str) -> None:
    assert detect_content_type(text) is ContentType.MIXED


def test_numeric_lines_at_twenty_percent_make_it_mixed() -> None:
    prose = [f"これは説明の文その{i}である。" for i in range(8)]
    numeric = ["10 20 30 40", "50 60 70 80"]
    assert detect_content_type("\n".join(prose + numeric)) is ContentType.MIXED  # 2/10
    one_numeric = "\n".join([*prose, "10 20 30 40"])  # 1/9 < 20 %
    assert detect_content_type(one_numeric) is ContentType.PROSE


def test_structured_lines_at_thirty_percent_make_it_mixed() -> None:
    prose = [f"Sentence number {i} explains something." for i in range(7)]
    rows = ["alpha  beta  gamma", "delta  epsilon  zeta", "eta  theta  iota"]
    assert detect_content_type("\n".join(prose + rows)) is ContentType.MIXED  # 3/10
    assert detect_content_type("\n".join(prose + rows[:2])) is ContentType.PROSE  # 2/9


def test_double_spaced_sentences_are_not_columns() -> None:
    text = "This is one.  This is two.  This is three.\nAnd so on.  It goes.  Like this."
    assert detect_content_type(text) is ContentType.PROSE


def test_inline_pipes_in_prose_are_not_a_table() -> None:
    text = "Home | About | Contact\nWelcome to the site, we write about games."
    assert detect_content_type(text) is ContentType.PROSE


def test_single_full_width_spaces_are_not_columns() -> None:
    text = "山田　太郎　さんが来た\n鈴木　花子　さんも来た"
    assert detect_content_type(text) is ContentType.PROSE
