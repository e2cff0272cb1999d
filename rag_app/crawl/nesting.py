"""What building a page's tree will cost, read in one pass before it is built.

BeautifulSoup's tree builder walks up the open elements each time text lands in an
element that already holds something (its `_linkage_fixer`), so such text N levels deep
costs N steps and a page of N nested items with text after each child costs N²/2: 20,000
levels of `<ol><li><pre>c</pre>t` (0.5 MB) took 74 s of CPU, and a 5 MB page would take
hours. The same page read once, keeping the open elements as `html.parser` leaves them (an
end tag closes the nearest open element of its name and every one opened after it; an
unclosed `<p>` or `<li>` stays open; comments and the text of `<script>`/`<style>` are
not markup), gives that count of steps; a page over `MAX_TREE_STEPS` is refused. Deep but
cheap pages (thousands of unclosed `<p>`, each text its element's first child) are not.
"""

from __future__ import annotations

import re

MAX_TREE_STEPS = 20_000_000
"""Ancestor steps allowed for building one page's tree: 4,400 levels of the shape above
(19.4 million steps) took 2.0 s to extract. The 621 pages of the Python 3.11 manual,
aptitude-doc-ja and the Debian Edu manual need at most 368,099 (the manual's general
index); reading the count takes 4 ms for an average one of those pages."""
_START = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*)")
_VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)
_RAW_TEXT = {name: re.compile(rf"</{name}", re.IGNORECASE) for name in ("script", "style")}


class _Open:
    __slots__ = ("filled", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.filled = False  # holds a child element or text already


def tree_steps(html: str, limit: int = MAX_TREE_STEPS) -> int:
    """The ancestor steps building `html`'s tree takes (an upper bound: each walk is
    counted to the root), or `limit + 1` as soon as they pass `limit`. Linear: each
    element is pushed and popped once."""
    stack: list[_Open] = []
    counts: dict[str, int] = {}
    steps = 0
    at = 0

    def text() -> None:  # a string or comment lands in the innermost open element
        nonlocal steps
        if stack:
            if stack[-1].filled:
                steps += len(stack)
            stack[-1].filled = True

    while (lt := html.find("<", at)) != -1:
        if lt > at:
            text()
        if html.startswith("<!--", lt):
            end = html.find("-->", lt + 4)
            if end == -1:
                break
            text()
            at = end + 3
        elif (tag := _START.match(html, lt)) is None:
            at = lt + 1  # a `<` that starts no tag is text
            text()
        elif (gt := html.find(">", tag.end())) == -1:
            break  # an unfinished tag at the end: nothing after it is markup
        else:
            at = gt + 1
            closing, name = tag.group(1), tag.group(2).lower()
            if closing:
                if counts.get(name):
                    while (top := stack.pop()).name != name:
                        counts[top.name] -= 1
                    counts[name] -= 1
                continue
            if stack:
                stack[-1].filled = True
            if name in _VOID or html[gt - 1] == "/":
                continue
            stack.append(_Open(name))
            counts[name] = counts.get(name, 0) + 1
            if name in _RAW_TEXT:
                end = _RAW_TEXT[name].search(html, at)
                if end is None:
                    break
                if end.start() > at:
                    text()
                at = end.start()
        if steps > limit:
            return limit + 1
    if at < len(html):
        text()
    return steps if steps <= limit else limit + 1
