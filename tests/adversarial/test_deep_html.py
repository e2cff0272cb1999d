"""Pages nesting elements thousands deep, with the parser the crawler uses (html.parser).

BeautifulSoup builds, prints and searches such trees without recursion; the text
extraction must too: no RecursionError, linear time, output not repeated per level.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from rag_app.crawl.html_text import MAX_NESTING, html_to_text
from rag_app.crawl.links import raw_links

DEPTH = 5_000
BOUND = 5.0  # seconds; each case takes well under one


@pytest.fixture
def low_recursion_limit() -> Iterator[None]:
    """A recursion limit far below the nesting depth: any recursive walk would fail."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def timed_text(html: str) -> str:
    started = time.perf_counter()
    text = html_to_text(html).text
    assert time.perf_counter() - started < BOUND
    return text


def test_5000_nested_divs(low_recursion_limit: None) -> None:
    html = "<div>" * DEPTH + "深い本文" + "</div>" * DEPTH
    assert timed_text(html) == "深い本文"


def test_5000_nested_lists(low_recursion_limit: None) -> None:
    html = "<ul><li>" * DEPTH + "x" + "</li></ul>" * DEPTH
    text = timed_text(html)
    # The first MAX_NESTING levels are real nested items; deeper ones are flattened.
    assert text == "- " * MAX_NESTING + "x"


def test_5000_nested_blockquotes(low_recursion_limit: None) -> None:
    html = "<blockquote>" * DEPTH + "引用" + "</blockquote>" * DEPTH
    assert timed_text(html) == "> " * MAX_NESTING + "引用"


@pytest.mark.parametrize(
    ("html", "expected_lines"),
    [
        ("<p>段落" * DEPTH, DEPTH),  # unclosed <p>: html.parser nests them
        ("<ol>" + "<li>項目" * DEPTH + "</ol>", DEPTH),
        ("<span>字" * DEPTH, 1),
        ("<article>記事" * DEPTH, DEPTH),
        ("<h2>見出し" * DEPTH, 1),  # an unclosed heading holds the rest of the page
        ("<table><tr><td>" * DEPTH + "x" + "</td></tr></table>" * DEPTH, 1),
        ("<table>" + "<tr><td>a<td>b" * DEPTH + "</table>", DEPTH + 2),  # + empty header, separator
        ("<dl>" + "<dt>語<dd>意味" * DEPTH + "</dl>", DEPTH),
        ("<dl><dd>" * DEPTH + "x" + "</dd></dl>" * DEPTH, 1),
        ("<main>" + "<header>" * DEPTH + "<h1>t</h1>x" + "</header>" * DEPTH, 2),
        ("<form>" * DEPTH + "<h1>t</h1>x" + "</form>" * DEPTH, 2),
        ("<form>" * DEPTH + "x" + "</form>" * DEPTH, 0),
        ("<pre>コード" * DEPTH, 3),  # one fence, the text on one line
    ],
    ids=[
        "p",
        "li",
        "span",
        "article",
        "h2",
        "tables",
        "rows",
        "definitions",
        "dl",
        "headers",
        "forms",
        "empty-forms",
        "pre",
    ],
)
def test_other_deep_or_unclosed_structures(
    html: str, expected_lines: int, low_recursion_limit: None
) -> None:
    text = timed_text(html)
    assert len([line for line in text.split("\n") if line.strip()]) == expected_lines
    assert len(text) < 40 * DEPTH  # linear output: nothing repeated once per level


def test_links_of_a_deep_index_page(low_recursion_limit: None) -> None:
    html = "<div>" * DEPTH + '<a href="/deep">deep</a>' + "</div>" * DEPTH
    assert raw_links(html, "https://site.test/") == ["https://site.test/deep"]
