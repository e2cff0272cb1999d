"""Table chunking: one chunk per data row, with the header repeated (spec 004, りゅうおう).

A row of `名前 HP MP 攻撃力` / `りゅうおう 90 75 100` becomes::

    名前: りゅうおう
    HP: 90, MP: 75, 攻撃力: 100

so a query for the name lands on a short chunk that is all about it. Recognised tables:
Markdown pipe tables (with or without a separator row), columns separated by tabs or 2+
spaces (3+ columns, or 2+ with tabs, same count on every row), and single-space rows of
numbers (same token count, optional header line). The header is the first row unless
that row holds a number; header-less rows are kept as their own text.

Size rule: a row is never cut inside a cell. A row longer than `chunk_size` is split between
its `header: value` pairs, every piece repeating the first-column line; a single pair
(or a header-less row) that alone exceeds the size stays one over-long chunk, up to
`MAX_ROW_CHUNK_CHARS`, past which it is cut (at a space where there is one). Header names,
and the first-column line where later pieces repeat it, are capped like headings
(`MAX_HEADING_CHARS`): every row repeats them, so a hostile header must not multiply.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rag_app.parsing.base import SizedNodeParser, check_sizes
from rag_app.parsing.chunk import (
    MAX_HEADING_CHARS,
    MAX_PATH_CHARS,
    Chunk,
    MetadataValue,
    join_path,
    shorten,
)
from rag_app.parsing.content_type import (
    SENTENCE_ENDINGS,
    ContentType,
    column_cells,
    is_numeric_line,
    is_numeric_token,
    is_separator_row,
)
from rag_app.parsing.headings import split_sections
from rag_app.parsing.prose import prose_chunks

HEADER_JOINER = " | "
MAX_ROW_CHUNK_CHARS = 2000
"""A row chunk longer than this is cut: a cell of 100 KB made one chunk the embedding model
took 30 s over (its cost grows with the text), and thousands of rows like it took hours."""
CAPTION_MAX_CHARS = 60
_PIPE = re.compile(r"(?<!\\)\|")
_GAP = re.compile(r"\t|[ \u3000]{2,}")


@dataclass(frozen=True)
class Table:
    """A table found in a list of lines; `end` is exclusive, `header` may be empty."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    row_lines: tuple[str, ...]
    start: int
    end: int
    caption: str = ""


def pipe_cells(line: str) -> tuple[str, ...]:
    """Cells of a Markdown pipe row; `\\|` is a literal pipe."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return tuple(cell.strip().replace("\\|", "|") for cell in _PIPE.split(inner))


def _has_number(cells: Sequence[str]) -> bool:
    return any(is_numeric_token(cell) for cell in cells)


def _make(
    rows: list[tuple[str, ...]], lines: list[str], start: int, end: int, header: bool | None
) -> Table:
    """`header=None`: the first row is a header unless it holds a number."""
    if header is None:
        header = not _has_number(rows[0])
    if header:
        return Table(rows[0], tuple(rows[1:]), tuple(lines[1:]), start, end)
    return Table((), tuple(rows), tuple(lines), start, end)


def _pipe_table(lines: Sequence[str], i: int) -> Table | None:
    line = lines[i].strip()
    if "|" not in line or is_separator_row(line):
        return None
    if i + 1 < len(lines) and is_separator_row(lines[i + 1]):
        j = i + 2
        while j < len(lines) and "|" in lines[j] and not is_separator_row(lines[j]):
            j += 1
        body = [lines[k].strip() for k in range(i + 2, j)]
        if not body:
            return None
        rows = [pipe_cells(line), *(pipe_cells(row) for row in body)]
        return _make(rows, [line, *body], i, j, header=True)
    if not (line.startswith("|") and line.endswith("|")):
        return None
    j = i
    while j < len(lines) and lines[j].strip().startswith("|"):
        j += 1
    body = [lines[k].strip() for k in range(i, j) if not is_separator_row(lines[k])]
    if len(body) < 2:
        return None
    return _make([pipe_cells(row) for row in body], body, i, j, header=None)


def _column_count(line: str) -> int:
    if not _GAP.search(line.strip()):
        return 0
    cells = column_cells(line)
    minimum = 2 if "\t" in line else 3
    return len(cells) if len(cells) >= minimum else 0


class _ColumnLines:
    """Column cells of every line and where each run of equal column counts ends.

    Computed once per `find_tables` call, with prefix sums for the sentence test: a long run
    of sentence-like column lines is rejected from every start line in O(1), not re-split
    and re-checked each time (which was quadratic on hostile text).
    """

    def __init__(self, lines: Sequence[str]) -> None:
        counts = [_column_count(line) for line in lines]
        self.cells = [
            tuple(column_cells(line)) if n else () for line, n in zip(lines, counts, strict=True)
        ]
        self.run_end = list(range(1, len(lines) + 1))
        for k in range(len(lines) - 2, -1, -1):
            if counts[k] and counts[k + 1] == counts[k]:
                self.run_end[k] = self.run_end[k + 1]
        self._cells = [0]
        self._endings = [0]
        self._chars = [0]
        for row in self.cells:
            self._cells.append(self._cells[-1] + len(row))
            self._endings.append(self._endings[-1] + sum(c.endswith(SENTENCE_ENDINGS) for c in row))
            self._chars.append(self._chars[-1] + sum(map(len, row)))

    def looks_like_sentences(self, start: int, end: int) -> bool:
        """`looks_like_sentences` of all cells of lines `start` to `end` (exclusive)."""
        cells = self._cells[end] - self._cells[start]
        endings = self._endings[end] - self._endings[start]
        return endings * 2 > cells or self._chars[end] - self._chars[start] > 40 * cells


def _column_table(lines: Sequence[str], i: int, columns: _ColumnLines) -> Table | None:
    if not columns.cells[i]:
        return None
    j = columns.run_end[i]
    if j - i < 2 or columns.looks_like_sentences(i, j):
        return None
    rows = columns.cells[i:j]
    return _make(rows, [lines[k].strip() for k in range(i, j)], i, j, header=None)


def _spaced_numeric_table(lines: Sequence[str], i: int) -> Table | None:
    tokens = lines[i].split()
    if len(tokens) < 3:
        return None
    header = not is_numeric_line(lines[i])
    j = i + 1
    while j < len(lines) and is_numeric_line(lines[j]) and len(lines[j].split()) == len(tokens):
        j += 1
    if j - i < 2:
        return None
    rows = [tuple(lines[k].split()) for k in range(i, j)]
    return _make(rows, [lines[k].strip() for k in range(i, j)], i, j, header=header)


def caption_of(line: str) -> str:
    """`line` as a table caption if it looks like one (short, not a sentence), else ''."""
    line = line.strip().strip("*_").strip()
    if "\n" in line or len(line) > CAPTION_MAX_CHARS or line.endswith(SENTENCE_ENDINGS):
        return ""
    if line.startswith("|") or is_numeric_line(line):
        return ""  # a table row, not a caption
    return line.rstrip(":：").strip()


def _caption(lines: Sequence[str], start: int, first: int) -> str:
    """The line right above the table, or a one-line paragraph one blank line above it.

    Lines before `first` (the end of the previous table) are never a caption.
    """
    above = start - 1
    if above >= first and not lines[above].strip():
        above -= 1
        if above > first and lines[above - 1].strip():
            return ""  # the end of a longer paragraph, not a caption
    return caption_of(lines[above]) if above >= first else ""


def find_tables(lines: Sequence[str]) -> list[Table]:
    """Tables in `lines`, in order, each with the short line above it as caption."""
    tables: list[Table] = []
    columns = _ColumnLines(lines)
    i = 0
    while i < len(lines):
        table = None
        if lines[i].strip():
            table = (
                _pipe_table(lines, i)
                or _column_table(lines, i, columns)
                or _spaced_numeric_table(lines, i)
            )
        if table is None:
            i += 1
            continue
        previous_end = tables[-1].end if tables else 0
        tables.append(replace(table, caption=_caption(lines, table.start, previous_end)))
        i = table.end
    return tables


def split_table_blocks(text: str) -> list[str | Table]:
    """`text` as prose strings and `Table`s, in order; prose parts are stripped, non-empty."""
    lines = text.split("\n")
    blocks: list[str | Table] = []
    position = 0
    for table in find_tables(lines):
        prose = "\n".join(lines[position : table.start]).strip()
        if prose:
            blocks.append(prose)
        blocks.append(table)
        position = table.end
    rest = "\n".join(lines[position:]).strip()
    if rest:
        blocks.append(rest)
    return blocks


def _pair(header: str, value: str) -> str:
    return f"{header}: {value}" if header else value


def _cut(text: str, repeated: str, limit: int = MAX_ROW_CHUNK_CHARS) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at the last space before the
    limit where there is one; pieces after the first start with `repeated`."""
    if len(repeated) >= limit // 2:  # a prefix that leaves too little room is dropped
        repeated = ""
    pieces: list[str] = []
    while len(text) > limit:
        room = text.rfind(" ", limit // 2, limit)
        end = room if room > 0 else limit
        pieces.append(text[:end].rstrip())
        text = repeated + text[end:].lstrip()
    return [*pieces, text]


def row_texts(header: Sequence[str], cells: Sequence[str], line: str, chunk_size: int) -> list[str]:
    """The chunk text(s) of one data row (see the module docstring for the size rule)."""
    if not header:
        return _cut(line.strip(), "") if line.strip() else []
    # the row's own cells only: a wide header over many short rows cost columns × rows
    first = _pair(header[0], cells[0]) if cells and cells[0] else ""
    rest = [_pair(header[i] if i < len(header) else "", v) for i, v in enumerate(cells) if i and v]
    if not rest:
        return _cut(first, "") if first else []
    prefix = f"{first}\n" if first else ""
    repeated = f"{shorten(first, MAX_HEADING_CHARS)}\n" if first else ""
    texts: list[str] = []
    group: list[str] = []
    size = 0  # len(", ".join(group)), kept as it grows
    for item in rest:
        if group and len(prefix) + size + 2 + len(item) > chunk_size:
            texts.append(prefix + ", ".join(group))
            group, size = [], 0
            prefix = repeated
        size += len(item) + (2 if group else 0)
        group.append(item)
    texts.append(prefix + ", ".join(group))
    return [piece for text in texts for piece in _cut(text, repeated)]


def row_key(cells: Sequence[str]) -> str:
    """What names a row: its first cell that is not a number (a `No.` column is an index,
    not a name), else its first cell."""
    for cell in cells:
        if cell.strip() and not is_numeric_token(cell.strip()):
            return cell.strip()
    return cells[0].strip() if cells else ""


def table_chunks(
    table: Table,
    chunk_size: int,
    heading_path: str = "",
    heading_level: int = 0,
    extra: dict[str, MetadataValue] | None = None,
) -> list[Chunk]:
    """TABLE chunks, one per data row (more only for over-long rows)."""
    path = join_path(heading_path, table.caption)
    names = tuple(shorten(name, MAX_HEADING_CHARS) for name in table.header)
    header = shorten(HEADER_JOINER.join(names), MAX_PATH_CHARS)
    chunks: list[Chunk] = []
    for cells, line in zip(table.rows, table.row_lines, strict=True):
        metadata: dict[str, MetadataValue] = {
            **(extra or {}),
            "entity_name": shorten(cells[0], MAX_HEADING_CHARS) if cells else "",
            "row_key": shorten(row_key(cells), MAX_HEADING_CHARS),
            "table_header": header,
        }
        for text in row_texts(names, cells, line, chunk_size):
            chunks.append(Chunk(text, ContentType.TABLE, path, heading_level, metadata))
    return chunks


def chunk_table_data(
    text: str, heading_path: str = "", chunk_size: int = 200, chunk_overlap: int = 30
) -> list[Chunk]:
    """Spec 000 function: row chunks for every table; other text becomes prose chunks."""
    check_sizes(chunk_size, chunk_overlap)
    chunks: list[Chunk] = []
    for section in split_sections(text):
        path = join_path(heading_path, section.heading_path)
        for block in split_table_blocks(section.body):
            if isinstance(block, Table):
                chunks.extend(table_chunks(block, chunk_size, path, section.level))
            else:
                chunks.extend(prose_chunks(block, chunk_size, chunk_overlap, path, section.level))
    return chunks


class TableNodeParser(SizedNodeParser):
    """NodeParser for tabular text: one node per table row, header repeated."""

    @classmethod
    def class_name(cls) -> str:
        return "TableNodeParser"

    def split_chunks(self, text: str) -> list[Chunk]:
        return chunk_table_data(text, chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap)
