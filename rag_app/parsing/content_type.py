"""Content-type detection: is a text prose, a table, or a mix of both?

Heuristics from spec 000 ("コンテンツタイプ検出"): a Markdown pipe table with a separator
row, lines with a tab / multi-space column structure of at least three columns, and lines
dominated by numbers. Structured lines >= 30 % or numeric lines >= 20 % make a text
tabular; it is a TABLE when nearly all lines are tabular and MIXED otherwise.
"""

from __future__ import annotations

import re
from enum import StrEnum

STRUCTURED_RATIO = 0.30
NUMERIC_RATIO = 0.20
TABLE_RATIO = 0.80  # share of tabular lines above which the whole text is a TABLE

_COLUMN_GAP = re.compile(r"\t+|[ \u3000]{2,}")  # one space (or 全角 space) is not a gap
_PIPE = re.compile(r"(?<!\\)\|")
_SEPARATOR_ROW = re.compile(r"^\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?$")
_NUMBER = re.compile(r"^[-+±]?[¥$€£]?\d[\d,.:/]*%?$")
_TOKEN_SPLIT = re.compile(r"[\s|]+")
SENTENCE_ENDINGS = ("。", ".", "!", "?", "！", "？")


class ContentType(StrEnum):
    """What a piece of text is; also stored as the `content_type` of every chunk."""

    PROSE = "prose"
    TABLE = "table"
    MIXED = "mixed"
    HEADING = "heading"
    CODE = "code"


def is_separator_row(line: str) -> bool:
    """A Markdown table separator row such as `|---|:---:|`."""
    stripped = line.strip()
    return "|" in stripped and bool(_SEPARATOR_ROW.match(stripped))


def column_cells(line: str) -> list[str]:
    """Cells of a tab / multi-space separated line (no pipes)."""
    return [cell.strip() for cell in _COLUMN_GAP.split(line.strip()) if cell.strip()]


def looks_like_sentences(cells: list[str]) -> bool:
    """Cells that are mostly sentences (double-spaced prose), not table values."""
    endings = sum(1 for cell in cells if cell.endswith(SENTENCE_ENDINGS))
    return endings * 2 > len(cells) or sum(map(len, cells)) > 40 * len(cells)


def is_numeric_token(token: str) -> bool:
    """`90`, `1,000`, `12.5%`, `¥300`, `３` (full-width digits count too)."""
    return bool(_NUMBER.match(token))


def is_numeric_line(line: str) -> bool:
    """At least two numbers, and numbers make up at least half of the tokens."""
    tokens = [t for t in _TOKEN_SPLIT.split(line.strip()) if t and not set(t) <= set("-:")]
    numbers = sum(1 for t in tokens if is_numeric_token(t))
    return numbers >= 2 and numbers * 2 >= len(tokens)


def _is_structured(line: str, has_pipe_table: bool) -> bool:
    stripped = line.strip()
    if is_separator_row(stripped):
        return True
    if "|" in stripped and (has_pipe_table or stripped.startswith("|")):
        return len(_PIPE.split(stripped.strip("|"))) >= 2
    cells = column_cells(stripped)
    return len(cells) >= 3 and not looks_like_sentences(cells)


def _has_pipe_table(lines: list[str]) -> bool:
    return any("|" in lines[i] and is_separator_row(lines[i + 1]) for i in range(len(lines) - 1))


def detect_content_type(text: str) -> ContentType:
    """Classify `text` as PROSE, TABLE or MIXED (never HEADING)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ContentType.PROSE
    pipe_table = _has_pipe_table(lines)
    structured = [_is_structured(line, pipe_table) for line in lines]
    numeric = [is_numeric_line(line) for line in lines]
    tabular = [s or n for s, n in zip(structured, numeric, strict=True)]
    # A header line directly above numeric rows with the same token count is tabular too.
    for i in range(len(lines) - 1):
        if not tabular[i] and numeric[i + 1]:
            tabular[i] = len(lines[i].split()) == len(lines[i + 1].split()) >= 3
    total = len(lines)
    signal = (
        pipe_table
        or sum(structured) >= STRUCTURED_RATIO * total
        or sum(numeric) >= NUMERIC_RATIO * total
    )
    if not signal:
        return ContentType.PROSE
    if sum(tabular) >= TABLE_RATIO * total:
        return ContentType.TABLE
    return ContentType.MIXED
