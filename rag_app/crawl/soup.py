"""Parse HTML with BeautifulSoup and `html.parser` at a cost bounded by the page's size.

Stock BeautifulSoup 4 and Python's `html.parser` cost time quadratic in the page for some
shapes, so one hostile page of a few hundred KB held a worker for minutes:

- Each string after the first in an element made bs4 walk from that element up to the
  root, looking for an ancestor with a next sibling to link the string to
  (`_linkage_fixer`). While the element is still open, no ancestor can have one: all
  are open, each the last child of its parent. `"<div>a<b>b</b>c" * 40_000` (600 KB):
  150 s, four times as long at twice the size.
- Each void tag written without `/>` (`<br>`) was appended to a list that every end tag
  was then looked up in and removed from. `"<br>" * n + "</x>" * n`: quadratic.
- At the end of the input, `html.parser` (before Python 3.11.13, CVE-2025-6069) rescans
  the rest of the page for every construct left unterminated there (`"<!--" * n`,
  `"<a " * n`).

`parse_html` gives the same tree with the walk skipped where it finds nothing and the
list kept as counts by name; when the unterminated constructs at a page's end would cost
more than `_CLOSE_WORK` times its length to rescan, the rest of them is left out (the page
before them is kept, and a warning logged).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from bs4 import BeautifulSoup, ParserRejectedMarkup, Tag
from bs4.builder import HTMLParserTreeBuilder
from bs4.builder._htmlparser import BeautifulSoupHTMLParser

from rag_app.crawl.exceptions import BrokenMarkupError
from rag_app.limits import shorten

log = logging.getLogger(__name__)

_CLOSE_WORK = 32
"""Characters rescanned at the end of the input, per character of the page, at most (plus
10 M, ~0.5 s): a real page leaves a construct or two unterminated (a truncated comment);
C code after an unclosed `<pre>` makes each `<name` one (200 lines of it fit)."""


class _NameCounts(Counter[str]):
    """The list API bs4 uses for closed void tags (`in`, `append`, `remove`), as counts."""

    def append(self, name: str) -> None:
        self[name] += 1

    def remove(self, name: str) -> None:
        if self[name] <= 1:
            del self[name]
        else:
            self[name] -= 1


class _OutOfBudget(Exception):
    """The end of the input would cost more rescanning than the page is worth."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


class _Parser(BeautifulSoupHTMLParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.already_closed_empty_element = _NameCounts()  # type: ignore[assignment]
        self._closing = False
        self._page_chars = 0
        self._rescan_budget = 0

    def feed(self, data: str) -> None:
        self._page_chars += len(data)
        super().feed(data)

    def close(self) -> None:
        self._closing = True
        self._rescan_budget = _CLOSE_WORK * self._page_chars + 10_000_000
        try:
            super().close()
        except _OutOfBudget as out:
            log.warning(
                "HTML ends in %s characters of unterminated tags or comments; they were left out.",
                f"{len(self.rawdata) - out.at:,}",
            )
            self.rawdata = ""

    def _rescanned(self, i: int, end: int) -> int:
        """Charge a construct at `i` left unterminated at the end of the input (`end` < 0):
        `html.parser` scanned the rest of the page for it and will scan again for `>`."""
        if end < 0 and self._closing:
            self._rescan_budget -= 2 * (len(self.rawdata) - i)
            if self._rescan_budget < 0:
                raise _OutOfBudget(i)
        return end

    def parse_starttag(self, i: int) -> int:
        return self._rescanned(i, super().parse_starttag(i))

    def parse_endtag(self, i: int) -> int:
        return self._rescanned(i, super().parse_endtag(i))

    def parse_comment(self, i: int, report: bool = True) -> int:
        return self._rescanned(i, super().parse_comment(i, report))

    def parse_pi(self, i: int) -> int:
        return self._rescanned(i, super().parse_pi(i))

    def parse_html_declaration(self, i: int) -> int:
        return self._rescanned(i, super().parse_html_declaration(i))


class _Builder(HTMLParserTreeBuilder):
    def feed(self, markup: Any, _parser_class: type = _Parser) -> None:
        super().feed(markup, _parser_class=_parser_class)


class _Soup(BeautifulSoup):
    def _linkage_fixer(self, el: Tag) -> None:
        # While `el` is open, the string just added to it is already linked to what came
        # before, and `el` and its ancestors are open, each the last child of its parent:
        # the stock method's walk up for a next sibling ends at the root, linking nothing.
        if el is not self.currentTag:
            super()._linkage_fixer(el)


def parse_html(html: str) -> BeautifulSoup:
    """`BeautifulSoup(html, "html.parser")` at a cost bounded by the page's size.

    Raises `BrokenMarkupError` for a page `html.parser` rejects (`<![ x`)."""
    try:
        return _Soup(html, builder=_Builder())
    except ParserRejectedMarkup as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = shorten(lines[-1] if lines else "rejected", 200)
        raise BrokenMarkupError(f"The HTML cannot be parsed ({detail}).") from None
