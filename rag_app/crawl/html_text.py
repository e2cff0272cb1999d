"""HTML → structured Markdown-like text that the chunkers understand.

Boilerplate (script, style, nav, header, footer, aside, forms, …) is dropped, the main
region is `<article>` → `<main>` → `<body>`, headings become `#`..`######`, tables become
Markdown pipe tables (so each row can become a chunk with its header), lists `- item`,
`<pre>` is kept verbatim in a fence, paragraphs are separated by blank lines.

Hostile pages stay cheap: the DOM walk uses explicit stacks (a page nesting elements
thousands deep cannot raise RecursionError), lists and quotes nested deeper than
`MAX_NESTING` are rendered flat, unclosed cells/rows/definitions (which `html.parser` nests
in one another) are not repeated inside each other, and the title is capped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from bs4 import BeautifulSoup, Comment, Declaration, Doctype, NavigableString, Tag
from bs4.element import CData, PageElement, ProcessingInstruction

from rag_app.crawl.links import canonical_link, raw_links, robots_directives
from rag_app.crawl.soup import parse_html
from rag_app.crawl.tag_index import TagIndex
from rag_app.limits import MAX_TITLE_CHARS, shorten, spread_cell
from rag_app.parsing.content_type import is_numeric_token

_DROP_ALWAYS = (
    "script",
    "style",
    "nav",
    "footer",
    "aside",
    "noscript",
    "iframe",
    "svg",
    "template",
    "canvas",
    "object",
    "embed",
    "button",
    "select",
    "input",
    "textarea",
    "link",
    "meta",
    "title",  # read separately; never part of the text (not `head`: parsers may leave it open)
    "base",
)
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = frozenset(
    {
        "address",
        "article",
        "body",
        "center",
        "details",
        "dialog",
        "div",
        "fieldset",
        "figcaption",
        "figure",
        "form",
        "header",
        "hgroup",
        "html",
        "legend",
        "li",
        "main",
        "p",
        "section",
        "summary",
        "caption",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
    }
)
_SKIPPED_STRINGS = (Comment, Declaration, Doctype, CData, ProcessingInstruction)
_SPACES = re.compile(r"\s+")
_CJK = "\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff01-\uffef"
# A source line break between two Japanese characters is not a space (as browsers render it).
_CJK_BREAK = re.compile(rf"(?<=[{_CJK}])[ \t\r]*\n\s*(?=[{_CJK}])")
_MAX_COLSPAN = 50
MAX_NESTING = 32  # lists / quotes inside each other; deeper ones are rendered as plain blocks
_CELL_PARTS = frozenset({"td", "th", "tr"})
_BOLD = frozenset({"b", "strong"})
_BREAKS = _BLOCKS | frozenset({"br", "hr", "ul", "ol", "dl", "dt", "dd", "table", "pre"})
_BREAKS |= frozenset(_HEADINGS) | frozenset({"blockquote", "nav", "aside", "footer"})
_BREAKS |= frozenset({"search", "menu", "img"})  # an image between two words parts them
"""Elements a browser starts on a line of their own: their text is not glued to the next."""
_DEFINITION_PARTS = frozenset({"dt", "dd"})
_DEFINITION_BLOCKS = frozenset({"p", "div", "pre", "table", "ul", "ol", "dl", "blockquote"})
_DEFINITION_BLOCKS |= frozenset(_HEADINGS)
_NOT_PROSE = re.compile(r"```|~~~|\||- |> |#|\d+\.(?: |$)")
"""How a fence, table row, list item, quote or heading block starts."""
_AT_MARGIN = ("```", "~~~", "|")
_MARKUP_AT_START = re.compile(r"#{1,6}(?:[ \t]|$)|`{3}|~{3}")
_HEADING_TAG = re.compile(r"<(/?h[1-6])\b", re.IGNORECASE)
"""How a code block or table starts: inside a list item or quote it is a block of its own
at the margin, where the chunker sees a fence or a pipe table."""
_NO_LANGUAGE = frozenset({"default", "none", "text"})
_LANGUAGE = re.compile(r"[\w+#.-]{1,40}")  # a name a fence line can carry, not a page's whim
_NESTED_LIST = frozenset({"dl"})
_CONTENT_REGIONS = frozenset({"article", "main"})
_FORM_CONTENT = frozenset({"article", "main", "h1", "h2", "h3"})
_NAV_ROLES = frozenset({"navigation", "search"})
_NAV_CLASSES = frozenset({"navheader", "navfooter"})
"""DocBook XSL's previous / up / next tables above and below every page."""
_PERMALINK_MARKS = frozenset({"", "¶", "#", "§", "🔗", "link"})


@dataclass(frozen=True)
class ExtractedText:
    """Title and body text of one page, plus what a recursive crawl needs from it."""

    title: str
    text: str
    links: tuple[str, ...] = ()
    """Absolute link targets in document order (navigation included), unfiltered."""
    canonical: str | None = None
    robots: frozenset[str] = frozenset()
    """`<meta name="robots">` directives such as `noindex`, `nofollow`."""


def squash(text: str) -> str:
    """Drop line breaks between Japanese characters, then turn whitespace runs into one space."""
    return _SPACES.sub(" ", _CJK_BREAK.sub("", text))


def collapse(text: str) -> str:
    """`squash` and strip."""
    return squash(text).strip()


def literal(line: str) -> str:
    """A line of a page's text with what would read as Markdown structure escaped the
    CommonMark way: a leading `#` run (a heading), a leading ```` ``` ```` or `~~~` (a code
    fence) and `<h1>`–`<h6>` tags (headings to the chunker) get a backslash. Only the
    page's headings and `<pre>` blocks are structure: a paragraph reading `## [2] Source:
    …` or a lone ```` ``` ```` made a heading or opened a code block that swallowed the
    rest of the page, and in an answer read as another hit."""
    if _MARKUP_AT_START.match(line):
        line = "\\" + line
    return _HEADING_TAG.sub(r"\\<\1", line) if "<" in line else line


def cap_title(title: str) -> str:
    """`title` cut to `MAX_TITLE_CHARS` characters, ending in `…` when it was cut."""
    return shorten(title, MAX_TITLE_CHARS)


def _inline_text(tag: Tag) -> str:
    return _own_text(tag, frozenset())


def _has_ancestor(tag: Tag, names: frozenset[str], memo: dict[int, bool]) -> bool:
    """Whether an ancestor of `tag` is named in `names`; answers are remembered per element."""
    path: list[Tag] = []
    node = tag.parent
    answer = False
    while node is not None:
        known = memo.get(id(node))
        if known is not None:
            answer = known
            break
        if node.name in names:
            answer = True
            break
        path.append(node)
        node = node.parent
    for visited in path:
        memo[id(visited)] = answer
    return answer


def _holding(tags: TagIndex, names: frozenset[str]) -> set[int]:
    """ids of the elements that have a descendant named in `names` (each walked up once)."""
    holding: set[int] = set()
    for tag in tags.named(names):
        node = tag.parent
        while node is not None and id(node) not in holding:
            holding.add(id(node))
            node = node.parent
    return holding


def _remove_boilerplate(tags: TagIndex) -> None:
    tags.remove(tags.named(_DROP_ALWAYS))
    # Sphinx and MkDocs put a permalink `¶` after every heading and signature
    permalinks = [t for t in tags.named("a") if "headerlink" in (t.get("class") or ())]
    tags.remove([t for t in permalinks if _short_text(t) in _PERMALINK_MARKS])
    # navigation bars and sidebars that are not <nav> elements (Sphinx: role="navigation",
    # with an <h3> of their own; DocBook: class="navheader"), unless they hold the page's
    # <main> or <article>
    with_content = _holding(tags, _CONTENT_REGIONS)
    tags.remove(
        [
            t
            for t in tags.live()
            if (
                _NAV_ROLES & set(str(t.get("role") or "").lower().split())
                or _NAV_CLASSES & set(t.get("class") or ())
            )
            and id(t) not in with_content
        ]
    )
    tags.remove([t for t in tags.live() if "hidden" in t.attrs or t.get("aria-hidden") == "true"])
    memo: dict[int, bool] = {}
    # A header inside <article>/<main> usually holds the page title: keep it.
    tags.remove([t for t in tags.named("header") if not _has_ancestor(t, _CONTENT_REGIONS, memo)])
    # Some sites wrap the whole page in one <form>; keep forms that hold content.
    with_content = _holding(tags, _FORM_CONTENT)
    tags.remove([t for t in tags.named("form") if id(t) not in with_content])


def _short_text(tag: Tag, limit: int = 8) -> str | None:
    """`tag.get_text().strip()` if it is at most `limit` characters and `tag` holds at
    most 64 nodes, else None: nested anchors each reading all of theirs (or bs4's
    `strings`, which first walks down to the last descendant) was quadratic."""
    nodes = list(islice(_children_of(tag, lambda _: True), 65))
    if len(nodes) > 64:
        return None
    types = tag.interesting_string_types
    text = "".join(
        node
        for node in nodes
        if not isinstance(node, Tag)
        and (type(node) is types if isinstance(types, type) else type(node) in types)
    ).strip()
    return text if len(text) <= limit else None


def _main_region(soup: BeautifulSoup, tags: TagIndex) -> Tag:
    articles = tags.named("article")
    if len(articles) == 1:
        return articles[0]
    return tags.first("main") or tags.first("body") or soup


def _children_of(tag: Tag, enter: Callable[[Tag], bool]) -> Iterator[PageElement]:
    """Descendants of `tag` in document order, not looking inside elements `enter` refuses.

    An explicit stack instead of recursion: any nesting depth is fine.
    """
    stack: list[Iterator[PageElement]] = [iter(tag.children)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        yield node
        if isinstance(node, Tag) and enter(node):
            stack.append(iter(node.children))


def _own_text(tag: Tag, skip: frozenset[str], whole: frozenset[str] = frozenset()) -> str:
    """The text of `tag` as a browser shows it, collapsed, leaving out `skip` elements
    (rendered on their own): text nodes joined as they are, so `json.<em>dumps</em>(`
    stays `json.dumps(`, and a space where a block element or `<br>` breaks the line.

    Elements named in `whole` count with all their text. Sloppy HTML nests unclosed cells,
    rows and definitions in one another; without this each would repeat all later ones.
    """
    types = tag.interesting_string_types or Tag.MAIN_CONTENT_STRING_TYPES
    parts: list[str] = []
    stack: list[tuple[Iterator[PageElement], bool]] = [(iter(tag.children), False)]
    while stack:
        children, breaks = stack[-1]
        node = next(children, None)
        if node is None:
            stack.pop()
            if breaks:
                parts.append(" ")  # the text after a block starts a new line
        elif isinstance(node, Tag):
            if node.name in whole:
                parts.append(f" {_own_text(node, frozenset())} ")
            elif node.name not in skip:
                is_break = node.name in _BREAKS
                if is_break:
                    parts.append(" ")
                stack.append((iter(node.children), is_break))
        elif type(node) in types:
            parts.append(str(node))
    return collapse("".join(parts))


def _table_rows(table: Tag) -> tuple[list[Tag], bool]:
    """This table's own `<tr>`s (not those of nested tables) and whether it nests a table."""
    rows: list[Tag] = []
    nested = False
    for node in _children_of(table, lambda t: t.name != "table"):
        if isinstance(node, Tag):
            if node.name == "tr":
                rows.append(node)
            elif node.name == "table":
                nested = True
    return rows, nested


def _own_rows(table: Tag) -> list[Tag]:
    return _table_rows(table)[0]


def _cell_text(cell: Tag) -> str:
    return _own_text(cell, _CELL_PARTS).replace("|", r"\|")


def _span(cell: Tag) -> int:
    try:
        return max(1, min(int(str(cell.get("colspan", "1"))), _MAX_COLSPAN))
    except ValueError:
        return 1


def _row_cell_tags(tr: Tag) -> list[Tag]:
    """The row's `<td>`/`<th>`: its children, and cells left unclosed inside them."""
    cells: list[Tag] = []
    for child in tr.children:
        if isinstance(child, Tag) and child.name in ("td", "th"):
            cells.append(child)
            cells.extend(
                node
                for node in _children_of(child, lambda t: t.name not in ("tr", "table"))
                if isinstance(node, Tag) and node.name in ("td", "th")
            )
    return cells


def _row_cells(cells: list[Tag]) -> tuple[list[str], bool]:
    """Cell texts (a short one repeated across its colspan, a longer one written once
    with empty cells after it) and whether every cell with text is a `<th>` (an
    admonition's `| (icon) | Note |` row names the column its text stands in)."""
    texts: list[str] = []
    names = set()
    for cell in cells:
        text = _cell_text(cell)
        texts.extend(spread_cell(text, _span(cell)))
        if text.strip():
            names.add(cell.name)
    return texts, names == {"th"}


def _is_layout_table(table: Tag, rows: list[Tag], nests_table: bool) -> bool:
    if nests_table:
        return True
    cell_count = sum(len(_row_cell_tags(tr)) for tr in rows)
    return cell_count <= 1


HEADER_CELL_CHARS = 40
"""A `<td>` first row is read as the columns' names only if every cell is this short."""


def _first_row_names_columns(rows: list[list[str]]) -> bool:
    """Whether a table without a `<th>` row has its header in `<td>`s: a first row of
    short labels, none a number, over a column whose other cells are mostly numbers
    (`| 名前 | 攻撃力 |` over `| スライム | 8 |`). Sphinx's summary tables start with data
    (`| namedtuple() | factory function for … |`): their first row stays a row."""
    first, body = rows[0], rows[1:]
    if len(first) < 2 or not body:
        return False
    if any(not c or len(c) > HEADER_CELL_CHARS or is_numeric_token(c) for c in first):
        return False
    values = [0] * len(first)  # one pass over the cells: columns × rows was quadratic
    numbers = [0] * len(first)
    for row in body:
        for column, value in enumerate(row[: len(first)]):
            if value:
                values[column] += 1
                numbers[column] += is_numeric_token(value)
    return any(2 * n > v for n, v in zip(numbers, values, strict=True) if v)


def _mostly_bold(cells: list[Tag]) -> bool:
    """More than half of the cells with text have at least half of it in `<b>`/`<strong>`:
    a header row written in `<td>`s (DocBook's `informaltable`; Sphinx's `**SSLv3**`
    over a `yes`/`no` grid, whose corner reads `*client* / **server**` and whose cells
    carry footnote marks). A data row with a bold name in its first cell is not one."""
    with_text = bold_cells = 0
    for cell in cells:
        text = "".join(_cell_text(cell).split())
        if not text:
            continue
        with_text += 1
        bold = "".join(
            _own_text(node, _CELL_PARTS)
            for node in _children_of(cell, lambda t: t.name not in _BOLD | _CELL_PARTS)
            if isinstance(node, Tag) and node.name in _BOLD
        )
        bold_cells += 2 * len("".join(bold.split())) >= len(text)
    return 2 * bold_cells > with_text


def _names_columns(tr: Tag, tags: list[Tag], all_th: bool) -> bool:
    """Whether a row (among the first two) is the header: in `<thead>`; or two or more
    cells with text, all `<th>` or mostly bold; or an admonition's `| (icon) | Note |`,
    one `<th>` after the first cell. A `<th>` first cell with an empty value beside it
    (`| Homepage | |` of a key / value table) or one bold cell across the table is not."""
    if tr.parent is not None and tr.parent.name == "thead":
        return True
    with_text = [i for i, cell in enumerate(tags) if _cell_text(cell).strip()]
    if len(with_text) >= 2:
        return all_th or _mostly_bold(tags)
    return all_th and with_text not in ([], [0])


def render_table(table: Tag) -> str:
    """A data `<table>` as a Markdown pipe table (header row, separator, data rows, each
    row as long as its own cells); a first row of one cell across the table is its
    title, a line above it."""
    rows = [(tr, _row_cell_tags(tr)) for tr in _own_rows(table)]
    rows = [(tr, tags, *_row_cells(tags)) for tr, tags in rows]
    rows = [(tr, tags, cells, all_th) for tr, tags, cells, all_th in rows if any(cells)]
    if not rows:
        return ""
    title = ""
    if len(rows) > 1 and len(rows[0][1]) == 1 and len(rows[0][2]) > 1:
        title = rows.pop(0)[2][0]
    header_index = next(
        (
            i
            for i, (tr, tags, _c, all_th) in enumerate(rows[:2])
            if _names_columns(tr, tags, all_th)
        ),
        None,
    )  # a <th> row deeper in the table is a section label, not the header
    if header_index is None and _first_row_names_columns([r[2] for r in rows]):
        header_index = 0
    # no header row: an empty one, so the first row is not taken for the columns' names
    width = max(len(r[2]) for r in rows)
    header = rows[header_index][2] if header_index is not None else []
    header = header + [""] * (width - len(header))  # rows are not padded: N² for a ragged table

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    lines = [line(header), "| " + " | ".join(["---"] * width) + " |"]
    lines.extend(line(cells) for i, (_tr, _t, cells, _h) in enumerate(rows) if i != header_index)
    return (f"{title}\n\n" if title else "") + "\n".join(lines)


def _fence(pre: Tag) -> str:
    code = pre.get_text().strip("\n")
    if not code.strip():
        return ""
    fence = "~~~" if "```" in code else "```"
    return f"{fence}{_language(pre)}\n{code}\n{fence}"


def _language(pre: Tag) -> str:
    """The code's language: `<code class="language-x">` (Markdown renderers), or the
    `highlight-x` class of the `<div>`s around a Sphinx `<pre>`."""
    code_tag = pre.find("code")
    if isinstance(code_tag, Tag):
        classes = code_tag.get("class") or []
        language = next((c[9:] for c in classes if c.startswith("language-")), "")
        if _LANGUAGE.fullmatch(language):
            return language
    for holder in islice(pre.parents, 2):
        if holder.name != "div":
            break
        for name in holder.get("class") or []:
            language = name[10:] if name.startswith("highlight-") else ""
            if _LANGUAGE.fullmatch(language) and language not in _NO_LANGUAGE:
                return language
    return ""


# A render step yields sub-steps (a nested list item, a quote) to `_run` instead of calling
# them, and receives their result back: the DOM walk never recurses in Python.
_Step = Generator[Any, Any, Any]


def _run(step: _Step) -> Any:
    """Drive a render step and every sub-step it yields with an explicit stack."""
    stack = [step]
    result: Any = None
    while True:
        try:
            sub = stack[-1].send(result)
        except StopIteration as done:
            stack.pop()
            if not stack:
                return done.value
            result = done.value
        else:
            stack.append(sub)
            result = None


class _Renderer:
    """Walks the DOM and produces a list of text blocks.

    `nesting` counts enclosing lists and quotes; past `MAX_NESTING` they are rendered as
    plain blocks, so each level's re-indenting cannot add up to quadratic work.
    """

    def __init__(self, nesting: int = 0, skip: frozenset[str] = frozenset()) -> None:
        self.blocks: list[str] = []
        self._inline: list[str] = []
        self._nesting = nesting
        self._skip = skip

    def flush(self) -> None:
        text = "".join(self._inline)
        self._inline.clear()
        lines = [literal(collapse(line)) for line in text.split("\n")]
        paragraph = "\n".join(line for line in lines if line)
        if paragraph:
            self.blocks.append(paragraph)

    def add_block(self, block: str) -> None:
        self.flush()
        if block:
            self.blocks.append(block)

    def add_blocks(self, blocks: list[str]) -> None:
        """`add_block` for each, with one flush: blocks from every nesting level pass
        through here once per enclosing level."""
        if blocks:
            self.flush()
            self.blocks.extend(block for block in blocks if block)

    def walk(self, node: Tag) -> _Step:
        """Render `node`'s children, descending with a stack of child iterators."""
        pending: list[tuple[Iterator[PageElement], bool]] = [(iter(node.children), False)]
        while pending:
            children, is_block = pending[-1]
            child = next(children, None)
            if child is None:
                pending.pop()
                if is_block:
                    self.flush()
            elif isinstance(child, _SKIPPED_STRINGS):
                continue
            elif isinstance(child, NavigableString):
                self._inline.append(squash(str(child)))
            elif isinstance(child, Tag):
                descend = yield from self._element(child)
                if descend is not None:
                    pending.append((iter(child.children), descend))

    def _element(self, tag: Tag) -> Generator[_Step, Any, bool | None]:
        """Render `tag`; return True / False to walk into it as a block / inline, else None."""
        name = tag.name
        nested = self._nesting < MAX_NESTING
        if name in self._skip:
            return None
        if name == "br":
            self._inline.append("\n")
        elif name == "img":
            self._inline.append(" ")  # an image between two words parts them
        elif name in _HEADINGS:
            text = _inline_text(tag)
            self.add_block(f"{'#' * _HEADINGS[name]} {text}" if text else "")
        elif name in ("ul", "ol") and nested:
            self.add_blocks((yield _render_list(tag, self._nesting + 1)))
        elif name == "table":
            rows, nests_table = _table_rows(tag)
            if _is_layout_table(tag, rows, nests_table):
                self.flush()
                return True
            self._data_table(tag)
        elif name == "pre":
            self.add_block(_fence(tag))
        elif name == "blockquote" and nested:
            self.add_blocks(_quoted((yield _blocks(tag, self._nesting + 1))))
        elif name == "dl":
            self.add_blocks((yield _render_definitions(tag, self._nesting + 1)))
        elif name == "hr":
            self.flush()
        elif name in _BLOCKS or name in ("ul", "ol", "blockquote"):
            self.flush()
            return True
        else:
            return False
        return None

    def _data_table(self, table: Tag) -> None:
        caption = table.find("caption")
        if isinstance(caption, Tag) and caption.find_parent("table") is table:
            self.add_block(_inline_text(caption))
        self.add_block(render_table(table))


def _blocks(node: Tag, nesting: int = 0, skip: frozenset[str] = frozenset()) -> _Step:
    """Step: the text blocks of `node`, leaving out `skip` elements."""
    renderer = _Renderer(nesting, skip)
    yield from renderer.walk(node)
    renderer.flush()
    return renderer.blocks


def _render_blocks(node: Tag) -> str:
    return "\n\n".join(_run(_blocks(node)))


def _quoted(blocks: list[str]) -> list[str]:
    """A quote's blocks: text as `> ` lines, and a code block or table as a block of its
    own at the margin. Behind `> ` a fence or pipe row is not one to the chunker, which cut
    such tables into stray `|` pieces and reflowed such code as prose; Sphinx puts every
    indented table and code example in a `<blockquote>`."""
    out: list[str] = []
    run: list[str] = []
    for block in blocks:
        if block.startswith(_AT_MARGIN):
            if run:
                out.append(_quote("\n\n".join(run)))
                run = []
            out.append(block)
        else:
            run.append(block)
    if run:
        out.append(_quote("\n\n".join(run)))
    return out


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


def _render_list(tag: Tag, nesting: int) -> _Step:
    """Step: the blocks of a list: `- item` / `1. item` lines, continuation lines indented
    under the marker. A code block or table in an item is a block of its own at the
    margin, and the list goes on after it: indented under a marker a fence is not a fence
    (three spaces at most), so the chunker took the code for prose, reflowed it and met its
    closing fence as an opening one; and `1. | A | B |` made `1.` a column of every row."""
    ordered = tag.name == "ol"
    blocks: list[str] = []
    lines: list[str] = []
    number = 0
    for item in tag.find_all("li", recursive=False):
        parts = yield _blocks(item, nesting)
        if not parts:
            continue
        number += 1
        marker = f"{number}. " if ordered else "- "
        lead = marker
        for part in parts:
            if part.startswith(_AT_MARGIN):
                if lead == marker and ordered:
                    lines.append(marker.rstrip())  # the step whose text is its code or table
                if lines:
                    blocks.append("\n".join(lines))
                    lines = []
                blocks.append(part)
                if ordered:  # an unordered item's marker goes on its first text after
                    lead = " " * len(marker)
                continue
            first, *rest = part.split("\n")
            lines.append(lead + first)
            lines.extend(" " * len(marker) + line for line in rest)
            lead = " " * len(marker)
    if lines:
        blocks.append("\n".join(lines))
    return blocks


def _definitions(tag: Tag) -> Iterator[Tag]:
    """This `<dl>`'s `<dt>`/`<dd>` in order (those of nested lists are part of their text)."""
    for node in _children_of(tag, lambda t: t.name != "dl"):
        if isinstance(node, Tag) and node.name in ("dt", "dd"):
            yield node


def _holds_blocks(dd: Tag) -> bool:
    """Whether this `<dd>` holds paragraphs, code, tables or lists of its own (an API
    entry's description does; a glossary's one-line definition does not) and no `<dt>` or
    `<dd>` outside a list of its own. Unclosed definitions, which `html.parser` nests in
    the block before them, are rendered as text: inside a list item, quote, `<pre>` or
    cell they would be shown twice, there and as entries of their own."""
    blocks = False
    for node in _children_of(dd, lambda t: t.name != "dl"):
        if isinstance(node, Tag):
            if node.name in _DEFINITION_PARTS:
                return False
            blocks = blocks or node.name in _DEFINITION_BLOCKS
    return blocks


def _is_plain(block: str) -> bool:
    """A paragraph of prose (not a fence, table, list, quote or heading)."""
    return not _NOT_PROSE.match(block)


def _render_definitions(tag: Tag, nesting: int) -> _Step:
    """Step: the blocks of a `<dl>`. `<dt>term</dt><dd>text</dd>` → a `term: text` line
    (further `<dd>`s on indented lines); a `<dd>` holding paragraphs, code or tables (an
    API entry) keeps them as blocks of their own after its `term: first paragraph` line,
    so its code stays a fenced block with its indentation."""
    blocks: list[str] = []
    lines: list[str] = []
    term_waiting = False
    for child in _definitions(tag):
        if child.name == "dd" and nesting < MAX_NESTING and _holds_blocks(child):
            parts = list((yield _blocks(child, nesting, skip=_DEFINITION_PARTS)))
            if parts and term_waiting and _is_plain(parts[0]):
                lines[-1] = f"{lines[-1]}: {parts.pop(0)}"
            term_waiting = False
            if parts:
                if lines:
                    blocks.append("\n".join(lines))
                    lines = []
                blocks.extend(parts)
            continue
        text = _own_text(child, _DEFINITION_PARTS, whole=_NESTED_LIST)
        if not text:
            continue
        if child.name == "dt":
            lines.append(text)
            term_waiting = True
        elif term_waiting:
            lines[-1] = f"{lines[-1]}: {text}"
            term_waiting = False
        else:
            lines.append(f"  {text}")
    if lines:
        blocks.append("\n".join(lines))
    return blocks


def _title(tags: TagIndex) -> str:
    title = tags.first("title")
    if title is not None:
        text = collapse(title.get_text())
        if text:
            return cap_title(text)
    h1 = tags.first("h1")
    return cap_title(_inline_text(h1)) if h1 is not None else ""


def html_to_text(html: str, url: str = "") -> ExtractedText:
    """Extract the title and the main content of an HTML document as structured text;
    with the page's `url`, also its links (before navigation is dropped) and hints."""
    soup = parse_html(html)
    tags = TagIndex(soup)
    title = _title(tags)
    links: tuple[str, ...] = ()
    canonical = None
    if url:
        links = tuple(raw_links(tags, url))
        canonical = canonical_link(tags, url)
    robots = robots_directives(tags)
    _remove_boilerplate(tags)
    text = _render_blocks(_main_region(soup, tags))
    return ExtractedText(title, text, links, canonical, robots)


def _markdown_heading(line: str) -> str:
    """The text of a `# Title #` line (no indent, 1-6 `#`, whitespace after them), or ''."""
    level = len(line) - len(line.lstrip("#"))
    rest = line[level:]
    if not 1 <= level <= 6 or not rest[:1].isspace():
        return ""
    return rest.strip().rstrip("#").rstrip()


def markdown_title(text: str) -> str:
    """The first non-empty ATX heading of a Markdown document (capped), or ''."""
    for line in text.splitlines():
        heading = _markdown_heading(line)
        if heading:
            return cap_title(heading)
    return ""
