"""Retrieve small, return big: each hit widened to its passage within character budgets.

Retrieval ranks small chunks (a 200-character chunk is what matches a question best);
an LLM needs the passage around it. A hit's passage is its chunk plus the neighbouring
chunks of the same section (same source, same heading path, consecutive `chunk_index`),
added after and before in turn while the passage stays within the per-hit budget; the
chunker's overlaps are removed where chunks join. Budgets go to hits in rank order: each
gets at most `per_hit` characters and no more than what the whole answer may still use
(`total`) after keeping room for every later hit's own chunk and for each hit's heading
lines; a later hit whose chunk no longer fits is skipped for a shorter candidate, so the
answer stays within `total` unless the best hit's chunk alone is longer. A hit whose chunk
is already inside a better-ranked passage is dropped, and a passage ends where a
better-ranked one begins, so no text is shown twice; the section's heading line, which
every chunk but a code block or table row repeats, is shown once, at the passage's top
(when any of its chunks carries it), never in the middle where it would read as the
start of another section. A passage that begins after its section's first chunk is
preceded by that chunk (the section's lead: an API entry's signature and summary, a
section's topic sentence) and an omission line, when it fits the budget: the example a
question matched means little without the definition above it.

The same idea as LlamaIndex's sentence-window and auto-merging retrievers, done at query
time over the stored chunks: those need the window or parent text stored with every node
at ingest (a window per node, or a second node hierarchy), which would re-chunk every
stored page; here the neighbours are fetched by `(source, chunk_index)` for the few hits
returned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from rag_app.limits import ELLIPSIS
from rag_app.results import Hit

HEADER_CHARS = 120
"""Room kept per hit for its heading lines (`## [1] Source: <url>`, title, scores), so the
formatted answer, not only its passages, stays within the total budget."""
PASSAGE_REACH = 8
"""Chunks fetched on each side of a hit to widen it (enough for the default budgets)."""
FIRST_REACH = 5
"""Chunks asked first on each side of a hit; the rest of `PASSAGE_REACH` only when the
passage grows to the edge of those (most stop earlier, at a section's end or the budget)."""
DRY_RUNS = 3
"""Passes over the chunks at hand, each followed by one read of what it found missing,
before passages are built reading as they go (a read costs more than a pass)."""
LEAD_REACH = 12
"""How far before a hit its section's start is looked for (chunks), for the lead."""
LEAD_MAX_CHARS = 400
"""A section's first chunk longer than this (a code block, a long row) is not shown as
the lead of a passage that starts later in the section."""
OMITTED = "[…]"
"""The line between a section's lead and a passage that starts further on."""
MIN_JOIN_OVERLAP = 4
"""Shorter matches between a chunk's end and the next one's start are coincidence."""
MAX_JOIN_OVERLAP = 1000
_HEADING_LINE = re.compile(r"#{1,6} \S")


@dataclass(frozen=True)
class Piece:
    """One stored chunk of a section, as needed to rebuild a passage."""

    chunk_index: int
    text: str
    heading_path: str
    page: int | None = None
    """A PDF chunk's page: a passage stays on its hit's page."""


NeighbourFetcher = Callable[[str, int, int], list[Piece]]
"""(source, first chunk_index, last chunk_index) → the stored chunks in that range."""


def section_heading(text: str) -> str:
    """The Markdown heading line a chunk starts with (every stored chunk of a section
    repeats its section's heading), or ""."""
    line = text.partition("\n")[0]
    return line if _HEADING_LINE.match(line) else ""


def last_heading(heading_path: str) -> str:
    """The section's own heading: the last part of its `A > B > C` path ("" for none)."""
    return heading_path.rsplit(" > ", 1)[-1]


def names_section(line: str, heading_path: str) -> bool:
    """Whether heading `line` is the heading of the last part of `heading_path` (either may
    have been shortened with an ellipsis). A table row whose first column is `# of items`
    starts with a line that only looks like a heading."""
    text = line.lstrip("#").strip().removesuffix(ELLIPSIS).rstrip()
    last = last_heading(heading_path).removesuffix(ELLIPSIS).rstrip()
    return bool(text and last) and (text.startswith(last) or last.startswith(text))


def join_chunks(first: str, second: str, heading: str | None = None) -> str:
    """`first` then `second` without the overlap the chunker repeated at the start of
    `second`, nor its leading `heading` line (by default the heading `first` starts with);
    a newline between them when they do not overlap.

    Only the places in `first`'s tail where `second`'s first characters occur are tried
    (the longest overlap wins), so a join costs a few string searches, not one per length.
    """
    heading = section_heading(first) if heading is None else heading
    if heading and second.startswith(heading + "\n"):
        second = second[len(heading) + 1 :]
    head = second[:MIN_JOIN_OVERLAP]
    if len(head) == MIN_JOIN_OVERLAP:
        start = max(0, len(first) - min(len(second), MAX_JOIN_OVERLAP))
        at = first.find(head, start)
        while at != -1:
            if second.startswith(first[at:]):
                return first + second[len(first) - at :]
            at = first.find(head, at + 1)
    return f"{first}\n{second}"


def merge(pieces: Sequence[Piece]) -> str:
    """The pieces (in chunk order) as one text."""
    text = ""
    for piece in pieces:
        text = join_chunks(text, piece.text) if text else piece.text
    return text


def _heading_of(hit: Hit, text: str) -> str:
    """The heading line `text` starts with, if it names the hit's section (a table row
    whose first cell is `# of items` only looks like one)."""
    line = section_heading(text)
    return line if line and names_section(line, hit.heading_path) else ""


def section_start(hit: Hit, section: Sequence[Piece]) -> int | None:
    """The `chunk_index` of the first chunk of the hit's section, when `section` shows
    where it starts: the earliest chunk before the hit that carries the section's heading
    line, with nothing but the section's chunks between them (chunks without a heading
    line such as code or table rows, and chunks of a part inside the section, such as a
    table whose caption makes a heading path of its own), and before it chunk 0's start,
    a chunk of another heading path or one carrying another heading line (sibling
    sections whose headings share a path cut short). None when the chunks at hand stop
    before that."""
    by_index = {p.chunk_index: p for p in section}
    inside = hit.heading_path + " > "
    own = ""
    first: int | None = None
    at = hit.chunk_index
    while True:
        piece = by_index.get(at)
        if at == hit.chunk_index or (piece and piece.heading_path == hit.heading_path):
            line = _heading_of(hit, hit.text if at == hit.chunk_index else piece.text)
            if line and own and line != own:
                return first  # another section's heading: ours starts after it
            if line:
                own, first = line, at
        before = by_index.get(at - 1)
        if at == 0 or (
            before is not None
            and before.heading_path != hit.heading_path
            and not before.heading_path.startswith(inside)
        ):
            return first
        if before is None:
            return None
        at -= 1


def own_heading(hit: Hit, section: Sequence[Piece]) -> str:
    """The heading line of the hit's section: the nearest one at or before the hit among
    the chunks of its heading path that connect to it, else the nearest after it ("" when
    none is at hand). Two sections can share a heading path (`## Y` and later `### Y` under
    two `# X`, or paths cut short): the chunks carrying the other one's line are not part
    of this passage."""
    by_index = {p.chunk_index: p for p in section if p.heading_path == hit.heading_path}
    by_index[hit.chunk_index] = Piece(hit.chunk_index, hit.text, hit.heading_path)
    for step in (-1, 1):
        at = hit.chunk_index
        while at in by_index:
            if line := _heading_of(hit, by_index[at].text):
                return line
            at += step
    return ""


def widen(
    hit: Hit,
    section: Sequence[Piece],
    budget: int,
    lead: Piece | None = None,
    heading: str | None = None,
) -> tuple[str, list[int], list[tuple[int, int]]]:
    """The hit's passage within `budget` characters, the chunk indexes it covers, and the
    first and last chunk of every passage grown on the way (the one without the lead
    decides whether the lead is tried: a caller reading the neighbours window by window
    needs a wider one if any of them reached an edge). The passage is preceded by `lead`
    (the first chunk of the hit's section) when it starts later in the section and the
    lead fits (see the module docstring).

    `section` holds the hit's neighbours (any order, the hit's own chunk may be among
    them); only chunks of the hit's heading path that connect to it are used. `heading`:
    the section's heading line (`own_heading` of `section` by default).
    """
    text, indexes = _grown(hit, section, budget, heading)
    spans = [(indexes[0], indexes[-1])]
    if lead is None or indexes[0] <= lead.chunk_index:
        return text, indexes, spans  # no lead, or the passage starts at the section's start
    start = lead.chunk_index
    line = _heading_of(hit, lead.text)  # `section_start` found the lead by this line
    body = _untitled(lead.text, line)[0] if line else ""
    if not body or len(body) > LEAD_MAX_CHARS:
        return text, indexes, spans
    cost = len(body) + len(OMITTED) + 2
    for room in (budget - cost, budget - cost - len(line) - 1):  # the heading, if new
        if room < len(hit.text):
            break
        shorter, fewer = _grown(hit, section, room, heading)
        spans.append((fewer[0], fewer[-1]))
        if fewer[0] <= start:  # the smaller budget grew it back to the lead itself
            return shorter, fewer, spans
        if first := _heading_of(hit, shorter):
            shorter = _untitled(shorter, first)[0]
        if fewer[0] == start + 1:  # the shorter passage follows its lead with no gap
            led = f"{line}\n{join_chunks(body, shorter, '')}"
        else:
            led = f"{line}\n{body}\n{OMITTED}\n{shorter}"
        if len(led) <= budget:
            return led, [start, *fewer], spans
    return text, indexes, spans


def _grown(
    hit: Hit, section: Sequence[Piece], budget: int, heading: str | None = None
) -> tuple[str, list[int]]:
    """The hit's own chunk grown over its section's neighbours within `budget` (no lead).

    `heading`: the heading line the section's chunks repeat (`own_heading`; a code
    block's or table row's chunk has none): the passage is built without it and shows it
    once, at its top, when any of its chunks starts with it (wherever that chunk lies in
    the passage); a chunk carrying another heading line ends the passage."""
    if heading is None:
        heading = own_heading(hit, section)
    by_index = {
        p.chunk_index: p
        for p in section
        if p.heading_path == hit.heading_path and _heading_of(hit, p.text) in ("", heading)
    }
    lo = hi = hit.chunk_index
    body, titled = _untitled(hit.text, heading)
    grow = {1: True, -1: True}  # a side stops at a gap, another section or the budget
    while any(grow.values()):
        for step in (1, -1):  # after first: a passage reads on from its hit
            if not grow[step]:
                continue
            nxt = hi + 1 if step == 1 else lo - 1
            piece = by_index.get(nxt)
            joined = None
            if piece is not None:
                more, has_heading = _untitled(piece.text, heading)
                first, second = (body, more) if step == 1 else (more, body)
                joined = join_chunks(first, second, "") if first and second else first + second
                now_titled = titled or has_heading
            if joined is None or len(joined) + (len(heading) + 1) * now_titled > budget:
                grow[step] = False
                continue
            body, titled = joined, now_titled
            lo, hi = min(lo, nxt), max(hi, nxt)
    return _titled(body, heading, titled), list(range(lo, hi + 1))


def _untitled(text: str, heading: str) -> tuple[str, bool]:
    """`text` without the leading `heading` line, and whether it had it (a chunk of an
    empty section is that line alone)."""
    if heading and (text == heading or text.startswith(heading + "\n")):
        return text[len(heading) + 1 :], True
    return text, False


def _titled(body: str, heading: str, titled: bool) -> str:
    if not titled:
        return body
    return f"{heading}\n{body}" if body else heading


def expand_hits(
    hits: Sequence[Hit],
    fetch: NeighbourFetcher,
    *,
    per_hit: int,
    total: int,
    limit: int | None = None,
    reach: int = PASSAGE_REACH,
    first_reach: int | Sequence[int] = FIRST_REACH,
    overhead: Callable[[Hit], int] = lambda _hit: HEADER_CHARS,
) -> list[Hit]:
    """Up to `limit` hits with their passages (`Hit.passage`), ranked 1..n; see the module
    docstring. `hits` may hold more candidates than `limit`: those fill the places of hits
    that fell inside a better-ranked passage. `reach` bounds how many chunks on each side
    are fetched per hit, `first_reach` how many are asked first (the same passages, fewer
    chunks read; one number, or one per candidate in `hits` order, as `first_reaches`
    gives, then `FIRST_REACH` for the rest); `overhead` is what a hit costs in the answer
    besides its passage (its heading lines).
    """
    limit = len(hits) if limit is None else limit
    out: list[Hit] = []
    covered: dict[str, set[int]] = {}
    used = 0
    costs: dict[int, int] = {}  # each hit's overhead, worked out once

    def cost(position: int) -> int:
        if position not in costs:
            costs[position] = overhead(hits[position])
        return costs[position]

    for position, hit in enumerate(hits):
        if len(out) >= limit:
            break
        if hit.chunk_index in covered.get(hit.source_url, set()):
            continue  # already shown inside a better-ranked passage
        later = range(position + 1, min(len(hits), position + limit - len(out)))
        # room kept for the next hits' own chunks and every hit's heading lines
        reserved = sum(len(hits[i].text) + cost(i) for i in later) + cost(position)
        budget = min(per_hit, total - used - reserved)
        if budget < len(hit.text):
            if out:
                continue  # no room left for this chunk: a shorter candidate may still fit
            budget = len(hit.text)  # the best hit is always shown
        shown = covered.get(hit.source_url, set())
        if isinstance(first_reach, int):
            start = first_reach
        else:
            start = first_reach[position] if position < len(first_reach) else FIRST_REACH
        start = min(start, reach)
        nears = [start, *(r for r in sorted({FIRST_REACH, reach}) if start < r <= reach)]
        text, indexes = _widened(hit, fetch, budget, nears, shown)
        covered.setdefault(hit.source_url, set()).update(indexes)
        used += len(text) + cost(position)
        out.append(replace(hit, rank=len(out) + 1, passage=text, passage_chunks=indexes))
    return out


def left_out_by_budget(candidates: Sequence[Hit], shown: Sequence[Hit], limit: int) -> int:
    """How many of the `limit` hits asked for `expand_hits` left out for want of room in
    the answer's total budget: candidates neither shown nor inside a shown passage (those
    are not lost, their text is there), at most the places left empty. Fewer hits because
    fewer candidates matched is not counted."""
    if len(shown) >= limit:
        return 0
    ids = {h.node_id for h in shown}
    inside = {(h.source_url, i) for h in shown for i in (*h.passage_chunks, h.chunk_index)}
    dropped = sum(
        1
        for h in candidates
        if h.node_id not in ids and (h.source_url, h.chunk_index) not in inside
    )
    return min(limit - len(shown), dropped)


class PieceReader:
    """Passages built with few reads of the store: `read` takes `(source, chunk indexes)`
    windows and gives `(source, piece)` pairs (Chroma charges ~0.6 ms a read and ~40 µs
    a chunk). A dry run of `expand_hits` over the pieces at hand says what else the
    passages want; that is read at once and the dry run repeated (each pass reads only
    what the last one met missing, at most `DRY_RUNS` times); the passages are then built
    for real, reading anything still missing as it is met, so they are always those of a
    reader that read every window. With `dry_runs=0` (reads are cheap: the rows are in
    memory) the passages are built at once, reading as they go."""

    def __init__(
        self,
        read: Callable[[list[tuple[str, list[int]]]], list[tuple[str, Piece]]],
        dry_runs: int = DRY_RUNS,
    ) -> None:
        self._read = read
        self._dry_runs = dry_runs
        self.reads = 0
        self._asked: dict[str, set[int]] = {}
        self._pieces: dict[str, dict[int, Piece]] = {}

    def add(self, pieces: Sequence[tuple[str, Piece]], asked: dict[str, set[int]]) -> None:
        """Pieces read already, and every index asked for (found or not)."""
        for source, indexes in asked.items():
            self._asked.setdefault(source, set()).update(indexes)
        for source, piece in pieces:
            self._pieces.setdefault(source, {})[piece.chunk_index] = piece

    def load(self, windows: Sequence[tuple[str, int, int]]) -> None:
        """Read the indexes of these `(source, first, last)` windows not asked yet."""
        todo: list[tuple[str, list[int]]] = []
        for source, first, last in windows:
            seen = self._asked.setdefault(source, set())
            new = [i for i in range(max(first, 0), last + 1) if i not in seen]
            if new:
                seen.update(new)
                todo.append((source, new))
        if todo:
            self.reads += 1
            self.add(self._read(todo), {})

    def at_hand(self, source: str, first: int, last: int) -> list[Piece]:
        pieces = self._pieces.get(source, {})
        return [pieces[i] for i in range(max(first, 0), last + 1) if i in pieces]

    def expand(self, hits: Sequence[Hit], **options: Any) -> list[Hit]:
        """`expand_hits(hits, **options)` with this reader as the fetcher."""
        misses: list[tuple[str, int, int]] = []

        def guess(source: str, first: int, last: int) -> list[Piece]:
            seen = self._asked.get(source, set())
            if any(i not in seen for i in range(max(first, 0), last + 1)):
                misses.append((source, first, last))
            return self.at_hand(source, first, last)

        def fetch(source: str, first: int, last: int) -> list[Piece]:
            self.load([(source, first, last)])
            return self.at_hand(source, first, last)

        for _ in range(self._dry_runs):
            dry = expand_hits(hits, guess, **options)
            if not misses:
                return dry
            self.load(misses)
            misses.clear()
        return expand_hits(hits, fetch, **options)


def first_reaches(
    limit: int, *, per_hit: int, total: int, chunk_chars: int, overlap: int = 0
) -> list[int]:
    """How many chunks on each side of each of the first `limit` hits to read with the
    search: as many as `expand_hits` would give that hit's passage if every chunk held
    `chunk_chars` characters (the chunker's target), at most `PASSAGE_REACH`. The best hit
    gets the per-hit budget, later ones what the total leaves, so most need one or two
    neighbours, not eight (but at least one: whether the next chunk fits is only known by
    reading it); a passage that needs more reads them as it grows."""
    step = max(chunk_chars - overlap, 1)
    reaches: list[int] = []
    used = 0
    for position in range(limit):
        later = limit - position - 1
        reserved = later * (chunk_chars + HEADER_CHARS) + HEADER_CHARS
        budget = max(min(per_hit, total - used - reserved), chunk_chars)
        wanted = -(-(budget - chunk_chars) // step)
        reaches.append(min(PASSAGE_REACH, max(wanted, 1)))
        used += budget + HEADER_CHARS
    return reaches


def _widened(
    hit: Hit,
    fetch: NeighbourFetcher,
    budget: int,
    nears: Sequence[int],
    shown: AbstractSet[int] = frozenset(),
) -> tuple[str, list[int]]:
    """`widen` over the `nears[0]` neighbours on each side, then over each wider window of
    `nears` while the passage grew to the edge of the last one (there it stopped for want
    of a chunk, not for a section's end or the budget) or the window does not show where
    the hit's section starts (its lead), so the result is that of the widest window.
    Chunks `shown` in a better-ranked passage end it: an answer never repeats a text."""
    if budget <= len(hit.text):
        return widen(hit, [], budget)[:2]
    at = hit.chunk_index

    def section(first: int, last: int) -> list[Piece]:  # a PDF hit's page only
        pieces = fetch(hit.source_url, first, last)
        return pieces if hit.page is None else [p for p in pieces if p.page in (None, hit.page)]

    def grows(pieces: list[Piece]) -> list[Piece]:  # a shown chunk ends the passage
        return [p for p in _within(pieces, at, reach) if p.chunk_index not in shown]

    look = LEAD_REACH + 1  # the chunk before a section's first shows where it starts
    text, indexes, reach, back = "", [at], -1, -1
    found = not hit.heading_path  # a section with no heading has no lead to find
    lead: Piece | None = None
    pieces: list[Piece] = []
    touched = False
    for near in nears:
        if reach >= 0 and not touched and (found or back >= min(at, look)):
            break  # stopped inside the window, which shows where the section starts
        # once a window has not shown where the section starts, the next one reaches back
        # for its lead at once (one read for both, not two); passages still grow only
        # within `near` chunks of the hit, so every window gives the same passage
        back = max(back, near if found or reach < 0 else look)
        pieces = section(max(0, at - back), at + near)
        if not found:
            found, lead = _lead(hit, pieces, shown)
        reach = near
        heading = own_heading(hit, pieces)
        text, indexes, spans = widen(hit, grows(pieces), budget, lead, heading)
        touched = any((lo == at - reach and lo > 0) or hi == at + reach for lo, hi in spans)
    if not found and back < min(at, look):
        # the section starts before the widest window: look further back for its lead
        pieces += section(max(0, at - look), at - back - 1)
        found, lead = _lead(hit, pieces, shown)
        if lead is not None:
            text, indexes, _ = widen(hit, grows(pieces), budget, lead, own_heading(hit, pieces))
    return text, indexes


def _lead(hit: Hit, pieces: Sequence[Piece], shown: AbstractSet[int]) -> tuple[bool, Piece | None]:
    """Whether `pieces` show where the hit's section starts, and its first chunk if so
    and a better-ranked passage does not show it already (chunks shown still tell where
    sections start and end)."""
    start = section_start(hit, pieces)
    if start is None:
        return False, None
    lead = next((p for p in pieces if p.chunk_index == start), None)
    return True, None if start in shown else lead


def _within(pieces: Sequence[Piece], at: int, reach: int) -> list[Piece]:
    return [p for p in pieces if at - reach <= p.chunk_index <= at + reach]


def _in_section(heading_path: str, section: str) -> bool:
    """`section` names this heading path or an ancestor of it, whole or by its last
    headings (`Linux > Install` or `Linux` in `Setup > Linux > Install`): its headings
    are a run of the path's."""
    return not section or bool(_section_root(heading_path, section))


def section_forms(section: str, title: str) -> list[str]:
    """The ways a `rag_read` section argument may name a heading path, most literal
    first: as given (a heading may hold `>` or `›`), with ` › ` (the hits' text form)
    read as ` > `, with every `>` and `›` as a separator, and each without the page title
    it was copied with."""
    given = " > ".join(p.strip() for p in section.strip().split(" > ") if p.strip())
    arrows = " > ".join(p.strip() for p in given.split(" › ") if p.strip())
    loose = " > ".join(p.strip() for p in given.replace("›", ">").split(">") if p.strip())
    forms = list(dict.fromkeys([given, arrows, loose]))  # `A>B` typed without spaces last
    for form in list(forms):
        if title and form.startswith(title + " > "):
            forms.append(form[len(title) + 3 :])
    return forms


def reading_text(
    pieces: Sequence[tuple[int, str, str, int]], section: str = ""
) -> tuple[str, list[str]]:
    """A source's stored chunks as one text in reading order: (text, heading paths).

    `pieces` are (chunk_index, text, heading_path, heading_level). A heading line is
    written where the heading path changes (unless the chunk starts with its own heading);
    overlaps between consecutive chunks are removed. With `section`, only chunks under
    that heading path (or a heading of that name) are kept.
    """
    parts: list[str] = []
    written = 0  # characters so far (a source's first chunks may be empty)
    tail = ""  # the text's last MAX_JOIN_OVERLAP characters: all a join looks at
    paths: list[str] = []
    seen: set[str] = set()
    last_path: str | None = None
    heading_line = ""  # the current section's heading, which its chunks repeat
    headed: set[str] = set()  # heading paths whose heading line is written
    ordered = sorted(pieces, key=lambda p: p[0])
    # a heading name two sections share (`Notes` under Install and under Upgrade) reads
    # both, each under its parent headings, so the two can be told apart
    shared = len({_section_root(p[2], section) for p in ordered} - {""}) > 1
    for _, chunk, path, level in ordered:
        if not _in_section(path, section):
            last_path = None  # a later run of the same heading path is a section of its own
            continue
        if path != last_path:
            above = _unwritten_parents(path, level, headed, "" if shared else section)
            headed.add(path)
            if path and path not in seen:
                paths.append(path)
                seen.add(path)
            heading = last_heading(path)
            block = chunk
            if heading and not chunk.lstrip().startswith("#"):
                block = f"{'#' * max(1, min(level, 6))} {heading}\n{chunk}"
            block = "\n\n".join([*above, block])
            added = f"\n\n{block}" if written else block
            last_path = path
            heading_line = section_heading(block)
        else:  # `join_chunks` keeps its first text whole and searches only its tail
            added = join_chunks(tail, chunk, heading_line)[len(tail) :]
        parts.append(added)
        written += len(added)
        tail = (tail + added)[-MAX_JOIN_OVERLAP:]
    return "".join(parts), paths


def _section_root(heading_path: str, section: str) -> str:
    """The heading path of the section `section` names within `heading_path` ("" when it
    names none, or when no section is asked for)."""
    if not section:
        return ""
    path, wanted = heading_path.split(" > "), section.split(" > ")
    for i in range(len(path) - len(wanted) + 1):
        if path[i : i + len(wanted)] == wanted:
            return " > ".join(path[: i + len(wanted)])
    return ""


def _unwritten_parents(path: str, level: int, headed: set[str], section: str) -> list[str]:
    """Heading lines of `path`'s parent sections that have no chunk of their own (a heading
    followed at once by a subheading) and were not written yet, within `section`: they are
    in the chunks' heading paths only. Each is a level above the next; adds them to
    `headed`."""
    parts = path.split(" > ") if path else []
    lines: list[str] = []
    for depth in range(1, len(parts)):
        parent = " > ".join(parts[:depth])
        if parent in headed or not _in_section(parent, section):
            continue
        headed.add(parent)
        lines.append(f"{'#' * max(1, min(level, 6) - (len(parts) - depth))} {parts[depth - 1]}")
    return lines


def page(text: str, offset: int, limit: int) -> tuple[str, int | None]:
    """`text[offset:]` cut to at most `limit` characters at a line end when one is in the
    last fifth; returns the part and the next offset (None at the end)."""
    rest = text[offset:]
    if len(rest) <= limit:
        return rest, None
    cut = rest.rfind("\n", limit - limit // 5, limit)
    end = cut + 1 if cut > 0 else limit
    return rest[:end], offset + end
