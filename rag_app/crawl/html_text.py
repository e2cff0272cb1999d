"""HTML → structured Markdown-like text that the chunkers understand.

Boilerplate (script, style, nav, header, footer, aside, forms, …) is dropped, the main
region is `<article>` → `<main>` → `<body>`, headings become `#`..`######`, tables become
Markdown pipe tables (so each row can become a chunk with its header), lists `- item`,
`<pre>` is kept verbatim in a fence, paragraphs are separated by blank lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bs4 import BeautifulSoup, Comment, Declaration, Doctype, NavigableString, Tag
from bs4.element import CData, ProcessingInstruction

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


@dataclass(frozen=True)
class ExtractedText:
    """Title and body text of one page."""

    title: str
    text: str


def squash(text: str) -> str:
    """Drop line breaks between Japanese characters, then turn whitespace runs into one space."""
    return _SPACES.sub(" ", _CJK_BREAK.sub("", text))


def collapse(text: str) -> str:
    """`squash` and strip."""
    return squash(text).strip()


def _inline_text(tag: Tag) -> str:
    return collapse(tag.get_text(" "))


def _remove_boilerplate(soup: BeautifulSoup) -> None:
    for tag in soup.find_all(_DROP_ALWAYS):
        tag.decompose()
    for tag in soup.find_all(attrs={"hidden": True}):
        tag.decompose()
    for tag in soup.find_all(attrs={"aria-hidden": "true"}):
        tag.decompose()
    for tag in soup.find_all("header"):
        # A header inside <article>/<main> usually holds the page title: keep it.
        if tag.find_parent(["article", "main"]) is None:
            tag.decompose()
    for tag in soup.find_all("form"):
        # Some sites wrap the whole page in one <form>; keep forms that hold content.
        if tag.find(["article", "main", "h1", "h2", "h3"]) is None:
            tag.decompose()


def _main_region(soup: BeautifulSoup) -> Tag:
    articles = soup.find_all("article")
    if len(articles) == 1:
        return articles[0]
    main = soup.find("main")
    if isinstance(main, Tag):
        return main
    body = soup.find("body")
    return body if isinstance(body, Tag) else soup


def _own_rows(table: Tag) -> list[Tag]:
    return [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]


def _cell_text(cell: Tag) -> str:
    return _inline_text(cell).replace("|", r"\|")


def _span(cell: Tag) -> int:
    try:
        return max(1, min(int(str(cell.get("colspan", "1"))), _MAX_COLSPAN))
    except ValueError:
        return 1


def _row_cells(tr: Tag) -> tuple[list[str], bool]:
    """Cell texts (colspan repeated) and whether every cell is a `<th>`."""
    cells = tr.find_all(["td", "th"], recursive=False)
    texts: list[str] = []
    for cell in cells:
        texts.extend([_cell_text(cell)] * _span(cell))
    return texts, bool(cells) and all(c.name == "th" for c in cells)


def _is_layout_table(table: Tag, rows: list[Tag]) -> bool:
    if table.find("table") is not None:
        return True
    cell_count = sum(len(tr.find_all(["td", "th"], recursive=False)) for tr in rows)
    return cell_count <= 1


def render_table(table: Tag) -> str:
    """A data `<table>` as a Markdown pipe table (header row, separator, data rows)."""
    rows = [_row_cells(tr) for tr in _own_rows(table)]
    rows = [(cells, all_th) for cells, all_th in rows if any(cells)]
    if not rows:
        return ""
    header_index = next((i for i, (_c, all_th) in enumerate(rows) if all_th), 0)
    if header_index > 1:  # a <th> row deep in the table is a section label, not the header
        header_index = 0
    header = rows[header_index][0]
    body = [cells for i, (cells, _t) in enumerate(rows) if i != header_index]
    width = max(len(cells) for cells, _t in rows)

    def line(cells: list[str]) -> str:
        padded = cells + [""] * (width - len(cells))
        return "| " + " | ".join(padded) + " |"

    lines = [line(header), "| " + " | ".join(["---"] * width) + " |"]
    lines.extend(line(cells) for cells in body)
    return "\n".join(lines)


def _fence(pre: Tag) -> str:
    code = pre.get_text().strip("\n")
    if not code.strip():
        return ""
    language = ""
    code_tag = pre.find("code")
    if isinstance(code_tag, Tag):
        classes = code_tag.get("class") or []
        language = next((c[9:] for c in classes if c.startswith("language-")), "")
    fence = "~~~" if "```" in code else "```"
    return f"{fence}{language}\n{code}\n{fence}"


class _Renderer:
    """Walks the DOM and produces a list of text blocks."""

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self._inline: list[str] = []

    def flush(self) -> None:
        text = "".join(self._inline)
        self._inline.clear()
        lines = [collapse(line) for line in text.split("\n")]
        paragraph = "\n".join(line for line in lines if line)
        if paragraph:
            self.blocks.append(paragraph)

    def add_block(self, block: str) -> None:
        self.flush()
        if block:
            self.blocks.append(block)

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, _SKIPPED_STRINGS):
                continue
            if isinstance(child, NavigableString):
                self._inline.append(squash(str(child)))
            elif isinstance(child, Tag):
                self._element(child)

    def _element(self, tag: Tag) -> None:
        name = tag.name
        if name == "br":
            self._inline.append("\n")
        elif name in _HEADINGS:
            text = _inline_text(tag)
            self.add_block(f"{'#' * _HEADINGS[name]} {text}" if text else "")
        elif name in ("ul", "ol"):
            self.add_block(_render_list(tag))
        elif name == "table":
            self._table(tag)
        elif name == "pre":
            self.add_block(_fence(tag))
        elif name == "blockquote":
            inner = _render_blocks(tag)
            self.add_block("\n".join(f"> {line}" if line else ">" for line in inner.split("\n")))
        elif name == "dl":
            self.add_block(_render_definitions(tag))
        elif name == "hr":
            self.flush()
        elif name in _BLOCKS:
            self.flush()
            self.walk(tag)
            self.flush()
        else:
            self.walk(tag)

    def _table(self, table: Tag) -> None:
        rows = _own_rows(table)
        if _is_layout_table(table, rows):
            self.flush()
            self.walk(table)
            self.flush()
            return
        caption = table.find("caption")
        if isinstance(caption, Tag) and caption.find_parent("table") is table:
            self.add_block(_inline_text(caption))
        self.add_block(render_table(table))


def _render_blocks(node: Tag) -> str:
    renderer = _Renderer()
    renderer.walk(node)
    renderer.flush()
    return "\n\n".join(renderer.blocks)


def _render_list(tag: Tag) -> str:
    ordered = tag.name == "ol"
    lines: list[str] = []
    number = 0
    for item in tag.find_all("li", recursive=False):
        renderer = _Renderer()
        renderer.walk(item)
        renderer.flush()
        if not renderer.blocks:
            continue
        number += 1
        marker = f"{number}. " if ordered else "- "
        indent = " " * len(marker)
        item_lines = "\n".join(renderer.blocks).split("\n")
        lines.append(marker + item_lines[0])
        lines.extend(indent + line for line in item_lines[1:])
    return "\n".join(lines)


def _render_definitions(tag: Tag) -> str:
    """`<dt>term</dt><dd>text</dd>` → `term: text`; further `<dd>`s go on indented lines."""
    lines: list[str] = []
    term_waiting = False
    for child in tag.find_all(["dt", "dd"]):
        if child.find_parent("dl") is not tag:
            continue
        text = _inline_text(child)
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
    return "\n".join(lines)


def _title(soup: BeautifulSoup) -> str:
    title = soup.find("title")
    if isinstance(title, Tag):
        text = collapse(title.get_text())
        if text:
            return text
    h1 = soup.find("h1")
    return _inline_text(h1) if isinstance(h1, Tag) else ""


def html_to_text(html: str) -> ExtractedText:
    """Extract the title and the main content of an HTML document as structured text."""
    soup = BeautifulSoup(html, "html.parser")
    title = _title(soup)
    _remove_boilerplate(soup)
    text = _render_blocks(_main_region(soup))
    return ExtractedText(title=title, text=text)


def markdown_title(text: str) -> str:
    """The first ATX heading of a Markdown document, or ''."""
    for line in text.splitlines():
        match = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if match:
            return match.group(1)
    return ""
