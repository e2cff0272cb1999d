"""Word (.docx) → (title, Markdown) with python-docx, so the chunker sees its structure.

Headings (the built-in `Heading 1`–`Heading 9` styles, or any style or paragraph with an
outline level) become `#` lines, capped at `######`, so they make the chunks' heading
path; the `Title` paragraph becomes the document title, as pandoc treats it. Tables become
Markdown pipe tables whose first row is the header (merged cells repeat their text, so
every row reads on its own; a one-row or one-column table becomes plain paragraphs).
List paragraphs become `- item` / `1. item` lines, indented by level. Content controls
are read through, text boxes are read with the paragraph that holds them, and deleted
(tracked) text is left out. Not read: headers, footers, footnotes, comments.

The archive is checked before python-docx unpacks it (`zip_guard`); python-docx parses
XML with entity expansion off, and its parser refuses absurd nesting. Text is walked
iteratively, never by recursion, and the `Budget` is spent after every block.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from io import BytesIO
from typing import Any

import docx
from docx.oxml.ns import qn

from rag_app.documents.budget import Budget, DocumentLimits
from rag_app.documents.errors import DocumentError, NoTextError, UnreadableDocumentError
from rag_app.documents.zip_guard import check_zip
from rag_app.limits import MERGED_CELL_REPEAT_CHARS, spread_cell

_HINT = "it may be damaged, or an old .doc file (save it as .docx)"
_P, _TBL, _TR, _TC, _SDT, _SDT_CONTENT = (
    qn(t) for t in ("w:p", "w:tbl", "w:tr", "w:tc", "w:sdt", "w:sdtContent")
)
_T, _TAB, _BREAKS = qn("w:t"), qn("w:tab"), frozenset({qn("w:br"), qn("w:cr")})
_VAL = qn("w:val")
# Not text: properties (their w:tab are tab stops), and the VML copy of a text box that
# Word writes beside its DrawingML one.
_SKIP = frozenset(
    {
        qn("w:pPr"),
        qn("w:rPr"),
        qn("w:tcPr"),
        "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback",
    }
)
_HEADING_STYLE = re.compile(r"heading\s*([1-9])")
_MAX_SPAN = 64  # a hostile gridSpan must not multiply a cell
_MAX_STYLE_CHAIN = 16


def _children(element: Any, tags: frozenset[str]) -> Iterator[Any]:
    """Children of `element` with one of `tags`, reading through content controls."""
    stack = [iter(element)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
        elif child.tag == _SDT:
            content = child.find(_SDT_CONTENT)
            if content is not None:
                stack.append(iter(content))
        elif child.tag in tags:
            yield child


def paragraph_text(paragraph: Any) -> str:
    """The text of a `w:p`: runs, tabs and line breaks; nested text-box paragraphs on
    lines of their own."""
    parts: list[str] = []
    stack = [iter(paragraph)]
    while stack:
        child = next(stack[-1], None)
        if child is None:
            stack.pop()
            continue
        tag = child.tag
        if tag == _T:
            parts.append(child.text or "")
        elif tag == _TAB:
            parts.append("\t")
        elif tag in _BREAKS:
            parts.append("\n")
        elif isinstance(tag, str) and tag not in _SKIP and len(child):
            if tag == _P:
                parts.append("\n")
            stack.append(iter(child))
    return "".join(parts)


class _Styles:
    """Heading level and list kind of each paragraph style, following `basedOn`."""

    def __init__(self, styles_element: Any) -> None:
        self._styles: dict[str, Any] = {}
        for style in styles_element.iterchildren(qn("w:style")):
            style_id = style.get(qn("w:styleId"))
            if style_id and style_id not in self._styles:
                self._styles[style_id] = style

    def _chain(self, style_id: str | None) -> Iterator[Any]:
        seen: set[str] = set()
        while style_id and style_id not in seen and len(seen) < _MAX_STYLE_CHAIN:
            seen.add(style_id)
            style = self._styles.get(style_id)
            if style is None:
                return
            yield style
            based = style.find(qn("w:basedOn"))
            style_id = based.get(_VAL) if based is not None else None

    def name(self, style_id: str | None) -> str:
        style = next(self._chain(style_id), None)
        found = style.find(qn("w:name")) if style is not None else None
        return (found.get(_VAL) or "").lower() if found is not None else ""

    def outline_level(self, style_id: str | None) -> int | None:
        """1-based heading level of a style (its name or outline level), else None."""
        for style in self._chain(style_id):
            found = style.find(qn("w:name"))
            match = (
                _HEADING_STYLE.fullmatch((found.get(_VAL) or "").lower().strip())
                if (found is not None)
                else None
            )
            if match:
                return int(match.group(1))
            level = _outline(style.find(qn("w:pPr")))
            if level is not None:
                return level
        return None

    def is_list(self, style_id: str | None) -> bool:
        return any(_num_pr(style.find(qn("w:pPr"))) is not None for style in self._chain(style_id))


def _outline(ppr: Any) -> int | None:
    found = ppr.find(qn("w:outlineLvl")) if ppr is not None else None
    value = found.get(_VAL) if found is not None else None
    if value is None or not value.isdigit() or int(value) > 8:
        return None  # 9 is "body text"
    return int(value) + 1


def _num_pr(ppr: Any) -> Any:
    return ppr.find(qn("w:numPr")) if ppr is not None else None


def _int(value: str | None, default: int, high: int) -> int:
    return min(int(value), high) if value and value.isdigit() else default


def _paragraph_block(paragraph: Any, styles: _Styles) -> tuple[str, str]:
    """(kind, Markdown) of a paragraph; kind is heading, title, list or text."""
    text = paragraph_text(paragraph).strip()
    if not text:
        return "text", ""
    ppr = paragraph.find(qn("w:pPr"))
    style_el = ppr.find(qn("w:pStyle")) if ppr is not None else None
    style_id = style_el.get(_VAL) if style_el is not None else None
    name = styles.name(style_id)
    if name == "title":
        return "title", " ".join(text.split())
    level = _outline(ppr) or styles.outline_level(style_id)
    if level is not None:
        return "heading", f"{'#' * min(level, 6)} {' '.join(text.split())}"
    num_pr = _num_pr(ppr)
    if num_pr is not None or name.startswith("list") or styles.is_list(style_id):
        ilvl = num_pr.find(qn("w:ilvl")) if num_pr is not None else None
        depth = _int(ilvl.get(_VAL) if ilvl is not None else None, 0, 8)
        marker = "1." if "number" in name else "-"
        return "list", f"{'  ' * depth}{marker} {' '.join(text.split())}"
    return "text", text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table_rows(table: Any, budget: Budget) -> list[list[str]]:
    """Cell texts row by row; a merged cell's text in every column and row it covers when
    it is short (`MERGED_CELL_REPEAT_CHARS`), else in its first only. The text the rows will make is
    counted against `budget` as they are read: a few KB of XML may span millions of cells."""
    rows: list[list[str]] = []
    size = 0
    for tr in _children(table, frozenset({_TR})):
        row: list[str] = []
        for tc in _children(tr, frozenset({_TC})):
            tcpr = tc.find(qn("w:tcPr"))
            span_el = tcpr.find(qn("w:gridSpan")) if tcpr is not None else None
            span = _int(span_el.get(_VAL) if span_el is not None else None, 1, _MAX_SPAN)
            merge = tcpr.find(qn("w:vMerge")) if tcpr is not None else None
            continues = merge is not None and merge.get(_VAL) in (None, "continue")
            above = rows[-1] if rows else []
            if continues and len(above) > len(row):
                text = above[len(row)]
                if len(text) > MERGED_CELL_REPEAT_CHARS:
                    text = ""  # a long cell merged down is written in its first row only
            else:
                text = _cell(" ".join(paragraph_text(p) for p in tc.iter(_P)))
            span = max(span, 1)
            row.extend(spread_cell(text, span))
            size += len(text) + 3 * span
            budget.check_room(size)
        rows.append(row)
    return rows


def table_markdown(table: Any, budget: Budget) -> str:
    """A Markdown pipe table (header = first row), or paragraphs for a 1-row/1-column one.
    Rows are not padded to the widest (a wide header over many short rows cost columns ×
    rows: a 3 KB file needed 4 GB); the chunker pairs each row's own cells."""
    rows = [row for row in _table_rows(table, budget) if any(row)]
    width = max((len(row) for row in rows), default=0)
    if len(rows) < 2 or width < 2:
        return "\n\n".join(cell for row in rows for cell in row if cell)
    lines = []
    for index, row in enumerate(rows):
        lines.append("| " + " | ".join(row) + " |")
        if index == 0:
            lines.append("|" + " --- |" * len(row))
    return "\n".join(lines)


def _markdown(body: Any, styles: _Styles, budget: Budget) -> tuple[str, str, str]:
    """(Title-style text, first heading, Markdown of the body)."""
    blocks: list[str] = []
    title = first_heading = previous = ""
    for element in _children(body, frozenset({_P, _TBL})):
        if element.tag == _TBL:
            kind, text = "table", table_markdown(element, budget)
        else:
            kind, text = _paragraph_block(element, styles)
        if kind == "title" and not title:
            title = text
            continue
        if not text:
            continue
        if kind == "heading" and not first_heading:
            first_heading = text.lstrip("#").strip()
        joiner = "\n" if kind == previous == "list" else "\n\n"
        blocks.append(budget.spend((joiner if blocks else "") + text))
        previous = kind
    return title, first_heading, "".join(blocks)


def _core_title(document: Any) -> str:
    try:
        return " ".join((document.core_properties.title or "").split())
    except Exception:  # a damaged docProps/core.xml only costs the title
        return ""


def read_docx(data: bytes, name: str, limits: DocumentLimits) -> tuple[str, str]:
    """(title, Markdown) of a Word document: core title, else the Title paragraph, else
    the first heading, else '' (the caller falls back to the file name)."""
    label = f"The Word document {name}"
    check_zip(data, label, limits.max_unzipped_bytes, _HINT)
    budget = Budget(limits, label)
    try:
        document = docx.Document(BytesIO(data))
        title_paragraph, first_heading, text = _markdown(
            document.element.body, _Styles(document.styles.element), budget
        )
        title = _core_title(document) or title_paragraph or first_heading
    except DocumentError:
        raise
    except Exception as err:  # python-docx on hostile bytes may raise anything
        raise UnreadableDocumentError(label, str(err) or type(err).__name__, _HINT) from None
    if title_paragraph and title_paragraph != title:
        text = f"{title_paragraph}\n\n{text}"  # a Title that is not the title stays text
    if not text.strip():
        raise NoTextError(label, "it holds no paragraphs or tables with text")
    return title, text
