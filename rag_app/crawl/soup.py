"""Parse HTML with BeautifulSoup and `html.parser` in time linear in the page.

Stock BeautifulSoup 4 costs time quadratic in the nesting depth or in the number of
void tags, so one hostile page of a few hundred KB holds a worker for minutes:

- Each string after the first in an element makes it walk from that element up to the
  root, looking for an ancestor with a next sibling to link the string to
  (`_linkage_fixer`). While the element is still open, no ancestor can have one: all
  are open, each the last child of its parent. `"<div>a<b>b</b>c" * 10_000` (150 KB):
  4.2 s, four times as long at twice the size.
- Each void tag written without `/>` (`<br>`) is appended to a list that every end tag
  is then looked up in and removed from. `"<br>" * n + "</x>" * n`: quadratic.

`parse_html` gives the same tree with the walk skipped where it can find nothing, and
the list kept as counts by name.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bs4 import BeautifulSoup, Tag
from bs4.builder import HTMLParserTreeBuilder
from bs4.builder._htmlparser import BeautifulSoupHTMLParser


class _NameCounts(Counter[str]):
    """The list API bs4 uses for closed void tags (`in`, `append`, `remove`), as counts."""

    def append(self, name: str) -> None:
        self[name] += 1

    def remove(self, name: str) -> None:
        if self[name] <= 1:
            del self[name]
        else:
            self[name] -= 1


class _Parser(BeautifulSoupHTMLParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.already_closed_empty_element = _NameCounts()  # type: ignore[assignment]


class _Builder(HTMLParserTreeBuilder):
    def feed(self, markup: Any, _parser_class: type = _Parser) -> None:
        super().feed(markup, _parser_class=_parser_class)


class _Soup(BeautifulSoup):
    def _linkage_fixer(self, el: Tag) -> None:
        if el is not self.currentTag:
            super()._linkage_fixer(el)
            return
        # The stock method less its walk up from `el`: `el` and its ancestors are open,
        # so none has a next sibling and the walk would end at the root, linking nothing.
        first, child = el.contents[0], el.contents[-1]
        if child is first and el.parent is not None:
            el.next_element = child
            prev_el = child.previous_element
            if prev_el is not None and prev_el is not el:
                prev_el.next_element = None
            child.previous_element = el
            child.previous_sibling = None
        child.next_sibling = None
        descendant = child
        if isinstance(child, Tag) and child.contents:
            descendant = child._last_descendant(False) or child
        descendant.next_element = None
        descendant.next_sibling = None


def parse_html(html: str) -> BeautifulSoup:
    """`BeautifulSoup(html, "html.parser")`, in time linear in the page."""
    return _Soup(html, builder=_Builder())
