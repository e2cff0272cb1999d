r"""Every regular expression in rag_app/parsing and rag_app/crawl on its worst input.

Each test feeds >= 100 KB built to make a backtracking engine work hardest (long runs of
spaces, `#`, `|`, backticks, `<`, unclosed tags) and asserts it finishes within `BOUND`.
robots.py and url_safety.py are audited on their own. "was" rows are regexes replaced by
str methods or one-pass scans because they backtracked super-linearly.

pattern (module)                  why it is linear
--------------------------------  ----------------------------------------------------------
_COLUMN_GAP, _GAP (content_type,  one-class runs (`\t+`, `[ \u3000]{2,}`); a failed try
  tables)                           stops at the first other character
_PIPE (content_type, tables)      one character plus a one-character lookbehind
_SEPARATOR_ROW (content_type)     neighbouring tokens are disjoint classes (`|`, `\s`, `:`,
                                    `-`) and each group starts with a literal `|`: one parse
_NUMBER (content_type)            anchored, one greedy run, then O(1)
_TOKEN_SPLIT (content_type)       one class run
_HTML_OPEN, _HTML_CLOSE           fixed length; one `\s*` before a disjoint `>`
  (headings)
_FENCE (headings, router)         at most 6 characters
was _MD_HEADING (headings)        `(.*?)` before `[ \t]+#+` / `[ \t]*$`: O(n^2) on a run of
                                    spaces; now `atx_heading` (str methods)
was _HTML_HEADING (headings)      every unclosed `<h1>` scanned to the end: O(n^2); now
                                    one pass over the tags + bisect (`normalize_headings`)
was _TAG `<[^>]+>` (headings)     `<<<<...` without `>`: O(n^2); now `strip_tags` (str.find)
_SENTENCE_END (prose)             two disjoint alternatives, then a disjoint class run
_CLAUSE_BREAK, _NON_SPACE (prose) one character
_PARAGRAPH_BREAK (prose)          the run after a `\n` holds no `\n`: each scanned once
_META_CHARSET (charset)           fixed: `\s*["']?\s*` split a space run O(n^2) ways, now
                                    `\s*(?:["']\s*)?`; input is the first 4 KB only
_JAPANESE, _KANA (charset)        one character
_SPACES (html_text)               one class run
_CJK_BREAK (html_text)            only a position right after a CJK character passes the
                                    lookbehind; its whitespace run is scanned once
was markdown_title's regex        `(.+?)\s*#*\s*$`: O(n^3) on a run of spaces; now str
  (html_text)                       methods (`_markdown_heading`)
user URL pattern (links)          google-re2: automaton matching, never backtracks
_BOUND_PAIR (index/tokenizer)     a katakana or kanji label starts only at its run's first
                                    character (or second, after a Latin letter or digit);
                                    was tried from every character of a run, each try
                                    backtracking from the run's end: O(n^2) (8,000 kanji,
                                    2.2 s)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from rag_app import markdown_fences
from rag_app.crawl import charset, html_text
from rag_app.crawl.url_match import compile_pattern
from rag_app.index import tokenizer
from rag_app.parsing import content_type, headings, prose, tables
from rag_app.parsing.router import structured_chunks

BOUND = 1.0  # seconds; every case below takes a few milliseconds
SIZE = 100_000


def within(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `fn(*args, **kwargs)` and fail if it takes longer than `BOUND`."""
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    elapsed = time.perf_counter() - started
    assert elapsed < BOUND, f"{getattr(fn, '__name__', fn)} took {elapsed:.2f} s"
    return result


# -- parsing/content_type ----------------------------------------------------------------------


@pytest.mark.parametrize("line", [" a" * (SIZE // 2), "\t" * SIZE + "x", "a" + "\u3000 " * SIZE])
def test_column_gap(line: str) -> None:
    within(content_type._COLUMN_GAP.split, line)
    within(content_type.column_cells, line)


def test_pipe() -> None:
    line = "\\|" * SIZE
    within(content_type._PIPE.split, line)
    within(content_type.detect_content_type, line + "\n" + line)


@pytest.mark.parametrize(
    "line",
    [
        "|" + "--|" * (SIZE // 3) + "x",
        "|--" + " " * SIZE + "x",
        "|" + ":--: |" * (SIZE // 6) + ":-",
        "| --" + " " * SIZE + "|--" + " " * SIZE + "x",
    ],
)
def test_separator_row(line: str) -> None:
    within(content_type._SEPARATOR_ROW.match, line)
    assert not within(content_type.is_separator_row, line)


@pytest.mark.parametrize("token", ["1" + "1," * SIZE + "x", "¥" + "9" * SIZE + "%%"])
def test_number(token: str) -> None:
    assert not within(content_type.is_numeric_token, token)


def test_token_split() -> None:
    within(content_type.is_numeric_line, " |" * SIZE + "1 2")


# -- parsing/headings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "# a" + " " * SIZE + "b",  # was O(n²) with the old regex
        "# a" + " \t" * SIZE + "#" * SIZE + "x",
        "#" * SIZE,
        "# " + "#" * SIZE + " x",
        "# " + "x" * SIZE + " " * SIZE + "#" * SIZE,
    ],
)
def test_atx_heading_replaces_md_heading_regex(line: str) -> None:
    within(headings.atx_heading, line)
    within(headings.split_sections, line + "\n本文")


@pytest.mark.parametrize(
    "text",
    [
        "<h1>" * (SIZE // 4),  # unclosed openings: was O(n²)
        "<h1 " * (SIZE // 4),  # openings without `>`
        "<h1 " * (SIZE // 4) + ">",  # openings sharing one far `>`
        "<h1>" + "x" * SIZE + "</h2>" * (SIZE // 5),  # closers of another level only
        "</h1" + " " * SIZE,  # a closer without `>`
        "<h1>" + "<" * SIZE + "</h1>",  # tag stripping inside the heading
        ("<h2>a</h2>" + "<h3>") * (SIZE // 14),
    ],
)
def test_html_heading_patterns(text: str) -> None:
    within(headings._HTML_OPEN.findall, text)
    within(headings._HTML_CLOSE.findall, text)
    within(headings.normalize_headings, text)


@pytest.mark.parametrize("text", ["<" * SIZE, "<>" * SIZE, "<a" * SIZE + ">"])
def test_strip_tags_replaces_tag_regex(text: str) -> None:
    within(headings.strip_tags, text)


def test_fence() -> None:
    within(markdown_fences._RUN.match, " " * 3 + "`" * SIZE)
    within(markdown_fences._RUN.match, " " * 3 + "`" * SIZE + "x" + "`" * SIZE)
    within(structured_chunks, ("```\n" + "`" * 1000 + "\n") * (SIZE // 1000))


# -- parsing/prose -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    ["." * SIZE + "a", "。！？" * (SIZE // 3) + "x", "!」" * (SIZE // 2), ".)" * (SIZE // 2)],
)
def test_sentence_end(line: str) -> None:
    within(lambda: list(prose._SENTENCE_END.finditer(line)))
    within(prose.split_sentences, line)


def test_clause_break_and_non_space() -> None:
    text = "a" * SIZE + " " * SIZE + "b" * SIZE  # one over-long "sentence"
    within(prose._CLAUSE_BREAK.search, "a" * SIZE)
    within(prose._NON_SPACE.search, " " * SIZE)
    chunks = within(prose.split_prose, text, 200, 30)
    assert all(len(chunk) <= 200 for chunk in chunks)


@pytest.mark.parametrize("text", ["\n" + " " * SIZE + "x", "\n \t\u3000" * SIZE + "\n"])
def test_paragraph_break(text: str) -> None:
    within(prose._PARAGRAPH_BREAK.split, text)
    within(prose.split_prose, text, 200, 30)


# -- parsing/tables ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line", ["|" * SIZE, "a" + "  " * SIZE + "b", "\\|" * SIZE, "\t" * SIZE, "| a " * (SIZE // 4)]
)
def test_table_pipe_and_gap(line: str) -> None:
    within(tables._PIPE.split, line)
    within(tables._GAP.search, line.strip())
    within(tables.pipe_cells, line)
    within(tables.find_tables, [line, line, line])


# -- crawl/charset -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"<meta " * (SIZE // 6),  # openings without `>`
        b"<meta charset=" + b" " * SIZE + b"!",  # was O(n²) inside the 4 KB window
        b"<meta" + b" charset=  " * (SIZE // 11),
        b"<meta charset='" + b" " * SIZE,
    ],
)
def test_meta_charset(body: bytes) -> None:
    within(charset._META_CHARSET.search, body[:4096])
    within(charset.meta_charset, body)
    within(charset.decode_body, body, None, is_html=True)


def test_japanese_and_kana() -> None:
    body = ("りゅうおう" * SIZE).encode("cp932")
    within(charset._JAPANESE.findall, "字" * SIZE)
    within(charset._KANA.findall, "ア" * SIZE)
    assert within(charset.decode_body, body, None, is_html=False)[1] == "cp932"


# -- crawl/html_text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        " \n" * SIZE,
        "字" + "\n" * SIZE + "a",
        "字 \n" * (SIZE // 3),
        "字" + " \t\r" * SIZE + "\n" + " " * SIZE + "字",
        "字" + "\n " * SIZE,
    ],
)
def test_spaces_and_cjk_break(text: str) -> None:
    within(html_text._SPACES.sub, " ", text)
    within(html_text._CJK_BREAK.sub, "", text)
    within(html_text.squash, text)


@pytest.mark.parametrize(
    "text",
    [
        "# a" + " " * SIZE + "b",  # was O(n³) with the old regex
        "#" + " " * SIZE,
        "# " + "#" * SIZE,
        ("#" * 7 + " x\n") * (SIZE // 10),
    ],
)
def test_markdown_title_replaces_its_regex(text: str) -> None:
    assert len(within(html_text.markdown_title, text)) <= html_text.MAX_TITLE_CHARS


def test_hostile_html_heading_and_title_lines() -> None:
    page = within(html_text.html_to_text, f"<title>{' ' * SIZE}x</title><h2>{'#' * SIZE}</h2>")
    assert page.title == "x"


# -- crawl/links: the user's URL pattern -------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "url"),
    [
        (r"(a+)+$", "a" * 50_000 + "b"),
        (r"(x+x+)+y", "x" * SIZE),
        (r"^(\w+\s?)*$", "word " * (SIZE // 5) + "!"),
        (r"(.*a){20}", "a" * 20 + "b" * SIZE),
        (r"(a|aa)+$", "a" * SIZE + "b"),
    ],
)
def test_user_url_pattern_runs_on_re2(pattern: str, url: str) -> None:
    compiled = compile_pattern(pattern)
    assert compiled is not None
    within(compiled.search, url)


# -- index/tokenizer ---------------------------------------------------------------------------


@pytest.mark.parametrize("run", ["漢", "ア", "ー", "々", "a漢", "1ア"])
def test_bound_pair(run: str) -> None:
    text = run * (SIZE // len(run))
    within(tokenizer._BOUND_PAIR.findall, text)
    within(tokenizer._BOUND_PAIR.findall, text + ": 12")
    # a label after a Latin letter or digit starts at its run's second character, as before
    assert tokenizer.bound_terms("a漢字1") == [f"{tokenizer.BOUND}字#1"]
    assert tokenizer.bound_terms("xアイウ 2") == [f"{tokenizer.BOUND}いう#2"]
