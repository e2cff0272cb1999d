"""Prose chunking: paragraph → sentence → characters, sized and overlapped in characters.

Sizes are counted in characters, not tokens, because Japanese has no spaces and one
character carries roughly one word's meaning. Rules (spec 000 "テキストチャンキング"):

- A paragraph (blank-line separated) that fits in one chunk is never split across chunks.
- Longer paragraphs are split at sentence ends: Japanese `。！？` always, English `.!?` only
  when followed by whitespace or the end (so `3.14` and `example.com` stay whole); line
  breaks inside a paragraph are boundaries too. Terminators stay with their sentence.
- A sentence longer than the chunk is cut into pieces of at most `chunk_size -
  chunk_overlap` characters (at a space when one is near, for English).
- Each chunk after the first starts with up to `chunk_overlap` characters from the end of
  the previous chunk: whole trailing sentences when they fit, otherwise its last characters
  (starting after a space or comma when one is near, so words and clauses stay whole).
- No chunk is longer than `chunk_size`, none is empty or whitespace-only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rag_app.parsing.base import SizedNodeParser, check_sizes
from rag_app.parsing.chunk import Chunk
from rag_app.parsing.content_type import ContentType

PARAGRAPH_SEPARATOR = "\n\n"
_CLOSERS = "」』）】〕)]\"'”’"
_SENTENCE_END = re.compile(rf"(?:[。！？]+|[.!?]+)[{re.escape(_CLOSERS)}]*")
_ITEM_NUMBER = re.compile(r"\s*\d{1,9}(?:\.\d{1,9}){0,8}\.")
_CLAUSE_BREAK = re.compile(r"[\s、，,;；:：]")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\u3000]*\n")
_NON_SPACE = re.compile(r"\S")


@dataclass(frozen=True)
class _Unit:
    """An unsplittable piece; `sep` goes in front of it when it follows another unit."""

    text: str
    sep: str


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph, terminators kept, surrounding whitespace removed."""
    return [unit.text for line in text.split("\n") for unit in _line_units(line)]


def _line_units(line: str) -> list[_Unit]:
    pieces: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(line):
        end = match.end()
        if match.group(0)[0] in ".!?" and end < len(line) and not line[end].isspace():
            continue  # `3.14`, `example.com`, `!important`: not a sentence end
        if start == 0 and _ITEM_NUMBER.fullmatch(line, 0, end):
            continue  # `4. For the ...`: a numbered list item's number, not a sentence
        pieces.append(line[start:end])
        start = end
    pieces.append(line[start:])
    units: list[_Unit] = []
    for piece in pieces:
        text = piece.strip()
        if text:
            units.append(_Unit(text, " " if piece[:1].isspace() else ""))
    return units


def _hard_split(unit: _Unit, limit: int) -> list[_Unit]:
    """Cut an over-long sentence into pieces of at most `limit` characters.

    Works with offsets into the sentence (no re-slicing of the rest), so a 5 MB sentence
    costs linear time.
    """
    units: list[_Unit] = []
    text, sep, start = unit.text, unit.sep, 0
    while len(text) - start > limit:
        end = start + limit
        space = max(text.rfind(" ", start, end + 1), text.rfind("\t", start, end + 1))
        cut = space if space - start > limit // 2 else end
        units.append(_Unit(text[start:cut].rstrip(), sep))
        sep = " " if text[cut].isspace() else ""
        next_text = _NON_SPACE.search(text, cut)
        start = next_text.start() if next_text else len(text)
    if start < len(text):
        units.append(_Unit(text[start:], sep))
    return units


def _paragraph_units(paragraph: str, chunk_size: int, hard_limit: int) -> list[_Unit]:
    units: list[_Unit] = []
    for number, line in enumerate(paragraph.split("\n")):
        for index, unit in enumerate(_line_units(line)):
            if index == 0 and number > 0:
                unit = _Unit(unit.text, "\n")
            units.extend(_hard_split(unit, hard_limit) if len(unit.text) > chunk_size else [unit])
    return units


def _join(units: Sequence[_Unit]) -> str:
    if not units:
        return ""
    return units[0].text + "".join(unit.sep + unit.text for unit in units[1:])


def _overlap(units: Sequence[_Unit], chunk_overlap: int, room: int) -> list[_Unit]:
    """The start of the next chunk: the end of the previous one, at most `room` long."""
    budget = min(chunk_overlap, room)
    if budget <= 0:
        return []
    tail: list[_Unit] = []
    length = 0
    for unit in reversed(units):
        grown = length + len(unit.text) + (len(tail[0].sep) if tail else 0)
        if grown > budget:
            break
        tail.insert(0, unit)
        length = grown
    if tail:
        return tail
    if budget * 2 < chunk_overlap:
        return []  # too little room left for a useful character overlap
    text = _join(units)
    start = len(text) - budget
    if not _CLAUSE_BREAK.match(text[start - 1]):
        # Mid-word or mid-clause: start after the next space / comma when one is near.
        match = _CLAUSE_BREAK.search(text, start, start + budget // 2)
        start = match.end() if match else start
    tail_text = text[start:].strip()
    return [_Unit(tail_text, "")] if tail_text else []


def _paragraphs(text: str) -> list[str]:
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    return [p.strip() for p in _PARAGRAPH_BREAK.split(normalized) if p.strip()]


class _Pending:
    """The units of the chunk being built and the length of their joined text."""

    def __init__(self) -> None:
        self.units: list[_Unit] = []
        self.length = 0

    def add(self, unit: _Unit) -> None:
        self.length += len(unit.text) + (len(unit.sep) if self.units else 0)
        self.units.append(unit)

    def restart(self, units: Sequence[_Unit]) -> None:
        self.units = list(units)
        self.length = len(_join(self.units))


def split_prose(text: str, chunk_size: int = 200, chunk_overlap: int = 30) -> list[str]:
    """Split `text` into overlapping chunks of at most `chunk_size` characters."""
    check_sizes(chunk_size, chunk_overlap)
    hard_limit = chunk_size - chunk_overlap
    chunks: list[str] = []
    current = _Pending()

    def fits(extra: int) -> bool:
        return current.length + extra <= chunk_size

    for paragraph in _paragraphs(text):
        units = _paragraph_units(paragraph, chunk_size, hard_limit)
        units[0] = _Unit(units[0].text, PARAGRAPH_SEPARATOR)
        whole = len(_join(units))
        if current.units and fits(len(PARAGRAPH_SEPARATOR) + whole):
            for unit in units:
                current.add(unit)
            continue
        if current.units and whole <= chunk_size:
            chunks.append(_join(current.units))
            room = chunk_size - len(PARAGRAPH_SEPARATOR) - whole
            current.restart([*_overlap(current.units, chunk_overlap, room), *units])
            continue
        for unit in units:
            if not current.units or fits(len(unit.sep) + len(unit.text)):
                current.add(unit)
                continue
            chunks.append(_join(current.units))
            room = chunk_size - len(unit.sep) - len(unit.text)
            current.restart([*_overlap(current.units, chunk_overlap, room), unit])
    if current.units:
        chunks.append(_join(current.units))
    return chunks


def chunk_text(text: str, chunk_size: int = 200, chunk_overlap: int = 30) -> list[str]:
    """Spec 000 name for `split_prose` (kept for compatibility, AC5-AC7)."""
    return split_prose(text, chunk_size, chunk_overlap)


def prose_chunks(
    text: str,
    chunk_size: int,
    chunk_overlap: int,
    heading_path: str = "",
    heading_level: int = 0,
) -> list[Chunk]:
    """`split_prose` pieces as PROSE chunks under an (optional) heading path."""
    return [
        Chunk(piece, ContentType.PROSE, heading_path, heading_level)
        for piece in split_prose(text, chunk_size, chunk_overlap)
    ]


class ProseNodeParser(SizedNodeParser):
    """NodeParser for plain text: paragraph → sentence → characters with overlap."""

    @classmethod
    def class_name(cls) -> str:
        return "ProseNodeParser"

    def split_chunks(self, text: str) -> list[Chunk]:
        return prose_chunks(text, self.chunk_size, self.chunk_overlap)
