"""Heading chunking: one section (heading + body) per chunk, with its breadcrumb.

Markdown ATX headings (`#` to `######`, not inside fenced code) and HTML `<h1>`–`<h6>` are
recognised. Every chunk of a section starts with the heading line (`## Title`, HTML
headings are written the same way), so a piece of a long section still says what it is
about; a body longer than the chunk is split with the prose splitter under that line.
Metadata: `heading`, `heading_level`, `heading_path` (`A > B > C`, this heading last) and
`parent_headings` (`A > B`). Text before the first heading becomes prose chunks with an
empty path; a text without headings is chunked as prose (spec 000 fallback).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from rag_app.markdown_fences import Fences
from rag_app.parsing.base import ChunkingNodeParser, check_sizes
from rag_app.parsing.chunk import MAX_HEADING_CHARS, Chunk, join_path, shorten
from rag_app.parsing.content_type import ContentType
from rag_app.parsing.prose import prose_chunks, split_prose

# Only fixed-shape patterns here; the variable parts (heading text, tag bodies, the text
# between an opening and a closing tag) are found with str methods, so that no hostile line
# makes the regex engine backtrack (see tests/adversarial/test_regex_worst_case.py).
_HTML_OPEN = re.compile(r"(?<!\\)<h([1-6])\b", re.IGNORECASE)  # `\<h2>` is literal text
_HTML_CLOSE = re.compile(r"(?<!\\)</h([1-6])\s*>", re.IGNORECASE)
_BLANKS = " \t"


@dataclass(frozen=True)
class Section:
    """A heading and the text up to the next heading (level 0: text before any heading)."""

    heading: str
    level: int
    parents: tuple[str, ...]
    body: str
    has_children: bool = False

    @property
    def heading_path(self) -> str:
        return join_path(*self.parents, self.heading)

    @property
    def parent_path(self) -> str:
        return join_path(*self.parents)

    @property
    def heading_line(self) -> str:
        return f"{'#' * self.level} {self.heading}" if self.level else ""


def atx_heading(line: str) -> tuple[int, str] | None:
    """`(level, text)` of a Markdown ATX heading line (`## Title ##`), else None.

    Up to three spaces of indent, 1-6 `#`, then a space/tab or the end; a closing `#` run
    is dropped when a space/tab precedes it. The text may be empty.
    """
    indent = len(line) - len(line.lstrip(" "))
    if indent > 3:
        return None
    rest = line[indent:]
    level = len(rest) - len(rest.lstrip("#"))
    rest = rest[level:]
    if not 1 <= level <= 6 or (rest and rest[0] not in _BLANKS):
        return None
    rest = rest.rstrip(_BLANKS)
    without_closing = rest.rstrip("#")
    if not without_closing or without_closing[-1] in _BLANKS:
        rest = without_closing
    return level, rest.strip()


def strip_tags(text: str) -> str:
    """Every `<...>` (at least one character inside) replaced by a space."""
    parts: list[str] = []
    kept = search = 0
    while (start := text.find("<", search)) >= 0:
        end = text.find(">", start + 1)
        if end < 0:
            break
        search = end + 1
        if end > start + 1:
            parts.append(text[kept:start])
            parts.append(" ")
            kept = search
    parts.append(text[kept:])
    return "".join(parts)


def _heading_markdown(level: str, inner: str, original: str) -> str:
    text = " ".join(html.unescape(strip_tags(inner)).split())
    return f"\n{'#' * int(level)} {text}\n" if text else original


def _closing_tags(text: str) -> dict[str, tuple[list[int], list[int]]]:
    """Level → (starts, ends) of every `</hN>`, in document order."""
    closing: dict[str, tuple[list[int], list[int]]] = {}
    for match in _HTML_CLOSE.finditer(text):
        starts, ends = closing.setdefault(match.group(1), ([], []))
        starts.append(match.start())
        ends.append(match.end())
    return closing


def normalize_headings(text: str) -> str:
    """Rewrite HTML headings as Markdown heading lines; unify line endings.

    `<hN ...>text</hN>` (the nearest closing tag of the same level) becomes `## text` on a
    line of its own; done with one pass over the tags, so it stays linear on hostile text.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "<" not in text:
        return text
    fences = Fences()
    runs: list[tuple[bool, list[str]]] = []  # (inside a code block, its lines)
    for line in text.split("\n"):
        code = fences.step(line)
        if not runs or runs[-1][0] != code:
            runs.append((code, []))
        runs[-1][1].append(line)
    return "\n".join(  # code keeps its tags: `<h1>` in an HTML example is not a heading
        "\n".join(lines) if code else _html_headings("\n".join(lines)) for code, lines in runs
    )


def _html_headings(text: str) -> str:
    """`normalize_headings` of text outside code blocks."""
    closing = _closing_tags(text)
    parts: list[str] = []
    done = 0
    tag_end = -1
    for opening in _HTML_OPEN.finditer(text):
        if opening.start() < done:
            continue  # inside the heading just rewritten
        if tag_end < opening.end():  # else the `>` found last time is still the next one
            tag_end = text.find(">", opening.end())
            if tag_end < 0:
                break  # no later opening tag can be complete either
        starts, ends = closing.get(opening.group(1), ([], []))
        index = bisect_left(starts, tag_end + 1)
        if index == len(starts):
            continue
        parts.append(text[done : opening.start()])
        inner = text[tag_end + 1 : starts[index]]
        parts.append(
            _heading_markdown(opening.group(1), inner, text[opening.start() : ends[index]])
        )
        done = ends[index]
    parts.append(text[done:])
    return "".join(parts)


def split_sections(text: str) -> list[Section]:
    """Sections in document order; the level-0 preamble only if it has text."""
    raw: list[tuple[str, int, tuple[str, ...], list[str]]] = [("", 0, (), [])]
    stack: list[tuple[int, str]] = []
    fences = Fences()
    for line in normalize_headings(text).split("\n"):
        parsed = None if fences.step(line) else atx_heading(line)
        if parsed is None:
            raw[-1][3].append(line)
            continue
        level, heading = parsed[0], shorten(parsed[1], MAX_HEADING_CHARS)
        if not heading:
            continue  # `#` with no text: an empty heading carries nothing
        while stack and stack[-1][0] >= level:
            stack.pop()
        raw.append((heading, level, tuple(h for _, h in stack), []))
        stack.append((level, heading))
    sections: list[Section] = []
    for index, (heading, level, parents, lines) in enumerate(raw):
        body = "\n".join(lines).strip()
        if level == 0 and not body:
            continue
        following = raw[index + 1][1] if index + 1 < len(raw) else 0
        sections.append(Section(heading, level, parents, body, has_children=following > level))
    return sections


def _fit_heading_line(line: str, max_chunk_size: int) -> str:
    return shorten(line, max(1, max_chunk_size // 2))


def section_chunks(
    section: Section,
    max_chunk_size: int,
    chunk_overlap: int,
    body: str | None = None,
) -> list[Chunk]:
    """HEADING chunks of `body` (default: the section's body), each led by the heading line.

    A section without body yields the heading line alone, unless sub-sections follow (they
    carry it in their breadcrumb).
    """
    text = section.body if body is None else body.strip()
    extra: dict[str, str | int | float | bool] = {
        "heading": section.heading,
        "parent_headings": section.parent_path,
    }
    line = _fit_heading_line(section.heading_line, max_chunk_size)
    if not text:
        if section.has_children or body is not None:
            return []
        return [Chunk(line, ContentType.HEADING, section.heading_path, section.level, extra)]
    budget = max_chunk_size - len(line) - 1
    overlap = min(chunk_overlap, budget // 2)
    return [
        Chunk(f"{line}\n{piece}", ContentType.HEADING, section.heading_path, section.level, extra)
        for piece in split_prose(text, budget, overlap)
    ]


def chunk_by_headings(text: str, max_chunk_size: int = 500, chunk_overlap: int = 50) -> list[Chunk]:
    """Spec 000 function: heading chunks, or prose chunks when there is no heading.

    Without headings the whole text is the level-0 section, so it becomes prose chunks.
    """
    check_sizes(max_chunk_size, chunk_overlap)
    chunks: list[Chunk] = []
    for section in split_sections(text):
        if section.level == 0:
            chunks.extend(prose_chunks(section.body, max_chunk_size, chunk_overlap))
        else:
            chunks.extend(section_chunks(section, max_chunk_size, chunk_overlap))
    return chunks


class HeadingNodeParser(ChunkingNodeParser):
    """NodeParser that chunks Markdown / HTML documents by heading sections."""

    max_chunk_size: int = 500
    chunk_overlap: int = 50

    def __init__(self, max_chunk_size: int = 500, chunk_overlap: int = 50, **kwargs: Any) -> None:
        check_sizes(max_chunk_size, chunk_overlap)
        super().__init__(max_chunk_size=max_chunk_size, chunk_overlap=chunk_overlap, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "HeadingNodeParser"

    def split_chunks(self, text: str) -> list[Chunk]:
        return chunk_by_headings(text, self.max_chunk_size, self.chunk_overlap)
