"""Passages: neighbouring chunks of a section joined without their overlaps, within the
per-hit and per-answer budgets, in rank order."""

from __future__ import annotations

import random

from rag_app.parsing.router import structured_chunks
from rag_app.passages import (
    DRY_RUNS,
    HEADER_CHARS,
    LEAD_REACH,
    PASSAGE_REACH,
    NeighbourFetcher,
    Piece,
    PieceReader,
    expand_hits,
    first_reaches,
    join_chunks,
    left_out_by_budget,
    page,
    reading_text,
)
from rag_app.results import Hit


def _hit(index: int, text: str, source: str = "s", path: str = "A") -> Hit:
    return Hit(
        node_id=f"{source}{index}",
        text=text,
        source_url=source,
        title="T",
        heading_path=path,
        content_type="prose",
        chunk_index=index,
        vector_distance=0.1,
        bm25_score=1.0,
        combined_score=1.0,
    )


SECTION = [Piece(i, f"段落{i}の文です。" * 3, "A") for i in range(10)] + [
    Piece(10, "別の節です。", "B")
]


def fetch(source: str, first: int, last: int) -> list[Piece]:
    return [p for p in SECTION if first <= p.chunk_index <= last]


def test_join_removes_the_overlap_and_only_a_real_one() -> None:
    assert join_chunks("今日は晴れです。明日は雨です。", "明日は雨です。週末は曇り。") == (
        "今日は晴れです。明日は雨です。週末は曇り。"
    )
    assert join_chunks("abc。", "。xyz") == "abc。\n。xyz"  # a 1-character match is chance


def test_join_drops_the_section_heading_every_chunk_repeats() -> None:
    first = "# json ¶\nBe cautious when parsing JSON data: it may consume CPU and memory."
    second = "# json ¶\nCPU and memory. Limiting the size of data is recommended."
    assert join_chunks(first, second) == (
        "# json ¶\nBe cautious when parsing JSON data: it may consume CPU and memory. "
        "Limiting the size of data is recommended."
    )
    other = "# other ¶\nCPU and memory. Limiting"  # another heading is kept
    assert join_chunks(first, other) == f"{first}\n{other}"
    code = "#include <stdio.h>\nint main(void);"  # not a Markdown heading: nothing dropped
    assert join_chunks(code, code + " x") == code + " x"


def test_reading_text_drops_repeated_headings_but_keeps_hash_lines() -> None:
    pieces = [
        (0, "## Setup\nInstall it first, then run the", "Setup", 2),
        (1, "## Setup\nthen run the tool once.", "Setup", 2),
        (2, "## Setup\n#include <stdio.h>\nmore", "Setup", 2),
        (3, "## Use\nCall it.", "Use", 2),
        (4, "## Use\n#include <stdio.h>\nagain", "Use", 2),
    ]
    text, paths = reading_text(pieces)
    assert paths == ["Setup", "Use"]
    assert text.count("## Setup") == 1 and text.count("## Use") == 1
    assert "Install it first, then run the tool once." in text
    assert text.count("#include <stdio.h>") == 2  # a code line like a heading stays


def test_a_hit_grows_in_its_section_within_the_budget() -> None:
    hit = _hit(5, SECTION[5].text)
    (wide,) = expand_hits([hit], fetch, per_hit=100, total=3000)
    assert wide.rank == 1 and hit.text in wide.passage and len(wide.passage) <= 100
    assert wide.passage_chunks == sorted(wide.passage_chunks) and 5 in wide.passage_chunks
    assert wide.passage_chunks[-1] > 5  # reads on after the hit first
    assert "別の節" not in wide.passage


def test_hits_inside_a_passage_give_way_and_the_total_holds() -> None:
    hits = [_hit(i, SECTION[i].text) for i in (4, 5, 6)] + [_hit(0, "遠い話", "other")]
    out = expand_hits(hits, fetch, per_hit=1000, total=700, limit=3)
    assert [h.rank for h in out] == list(range(1, len(out) + 1))
    assert out[0].chunk_index == 4
    first = out[0]
    assert all(
        h.source_url != first.source_url or h.chunk_index not in first.passage_chunks
        for h in out[1:]
    )
    assert sum(len(h.passage) + HEADER_CHARS for h in out) <= 700
    assert out[-1].source_url == "other"  # the next candidate took a merged hit's place


def test_reading_order_sections_and_pages() -> None:
    pieces = [(1, "二つ目。", "A > B", 2), (0, "一つ目。", "A", 1), (2, "三つ目。", "C", 1)]
    text, paths = reading_text(pieces)
    assert text == "# A\n一つ目。\n\n## B\n二つ目。\n\n# C\n三つ目。"
    assert paths == ["A", "A > B", "C"]
    assert reading_text(pieces, "A")[0] == "# A\n一つ目。\n\n## B\n二つ目。"
    assert reading_text(pieces, "B")[0] == "## B\n二つ目。"
    part, nxt = page("line one\nline two\nline three", 0, 10)
    assert part == "line one\n" and nxt == 9
    assert page("short", 0, 100) == ("short", None)


def _random_sections(
    rng: random.Random,
    count: int,
    *,
    new_section: float,
    gap: float = 0.0,
    code: float = 0.0,
    headed: bool = False,
) -> list[Piece]:
    """`count` chunk positions in sections A, B, C of random lengths and chunk sizes: a
    chunk missing now and then (`gap`), code chunks without a heading line (`code`), the
    others led by their section's heading line when `headed`."""
    pieces: list[Piece] = []
    path = "A"
    for i in range(count):
        if rng.random() < new_section:
            path = rng.choice("ABC")
        if rng.random() < gap:
            continue
        body = f"文{i}。" * rng.randint(1, 30)
        if rng.random() < code:
            pieces.append(Piece(i, f"```\n{body}\n```", path))
        else:
            pieces.append(Piece(i, f"## {path}\n{body}" if headed else body, path))
    return pieces


def test_asking_the_near_neighbours_first_gives_the_passages_of_the_full_window() -> None:
    rng = random.Random(7)
    for _ in range(300):
        # sections of random lengths, chunks of random sizes, a gap now and then
        pieces = _random_sections(rng, 40, new_section=0.1, gap=0.05)
        by_index = {p.chunk_index: p for p in pieces}
        asked: list[tuple[int, int]] = []

        def fetch_from(
            source: str, first: int, last: int, pieces: list[Piece] = pieces, asked: list = asked
        ) -> list[Piece]:
            asked.append((first, last))
            return [p for p in pieces if first <= p.chunk_index <= last]

        hits = [
            _hit(p.chunk_index, p.text, path=p.heading_path)
            for p in rng.sample(list(by_index.values()), 4)
        ]
        per_hit, total = rng.choice([(300, 3000), (1200, 3000), (5000, 6000)])
        full = expand_hits(hits, fetch_from, per_hit=per_hit, total=total, limit=3, first_reach=8)
        asked.clear()
        staged = expand_hits(hits, fetch_from, per_hit=per_hit, total=total, limit=3, first_reach=2)
        assert staged == full
        # a window reaches PASSAGE_REACH on each side, or further back for a lead (and the
        # chunk before it, which shows where its section starts)
        assert all(last - first <= PASSAGE_REACH + LEAD_REACH + 1 for first, last in asked)


def test_reading_ahead_in_batches_gives_the_passages_of_reading_every_window() -> None:
    rng = random.Random(11)
    for _ in range(300):
        _check_reader(rng)


def _check_reader(rng: random.Random) -> None:
    sources = {
        src: [
            Piece(i, f"{src}{i}。" * rng.randint(1, 40), rng.choice("AB"))
            for i in range(rng.randint(1, 30))
            if rng.random() > 0.05
        ]
        for src in ("s", "t")
    }
    hits = [
        _hit(p.chunk_index, p.text, source=src, path=p.heading_path)
        for src, pieces in sources.items()
        for p in pieces
    ]
    hits = rng.sample(hits, min(len(hits), 8))
    per_hit, total = rng.choice([(300, 3000), (1200, 3000), (5000, 6000)])

    def window(source: str, first: int, last: int) -> list[Piece]:
        return [p for p in sources[source] if first <= p.chunk_index <= last]

    full = expand_hits(hits, window, per_hit=per_hit, total=total, limit=5)
    reads: list[list[tuple[str, list[int]]]] = []

    def read(todo: list[tuple[str, list[int]]]) -> list[tuple[str, Piece]]:
        reads.append(todo)
        return [(s, p) for s, idx in todo for p in sources[s] if p.chunk_index in idx]

    reader = PieceReader(read)
    # what a search read with the hits: a part of the first two hits' windows
    ahead = {h.source_url: set(range(h.chunk_index - 1, h.chunk_index + 2)) for h in hits[:2]}
    read_ahead = [(s, p) for s, idx in ahead.items() for p in sources[s] if p.chunk_index in idx]
    reader.add(read_ahead, ahead)
    reaches = first_reaches(5, per_hit=per_hit, total=total, chunk_chars=60, overlap=0)
    got = reader.expand(hits, per_hit=per_hit, total=total, limit=5, first_reach=reaches)
    assert got == full
    assert reader.reads == len(reads)
    asked = [(s, i) for todo in reads for s, idx in todo for i in idx]
    assert len(asked) == len(set(asked))  # nothing is read twice


def test_dry_runs_read_what_the_passages_need_in_a_few_reads() -> None:
    pieces = [Piece(i, f"短い文{i}。", "A") for i in range(40)]  # much shorter than nominal
    hits = [_hit(i, pieces[i].text) for i in (5, 20, 35)]
    reads: list[int] = []

    def read(todo: list[tuple[str, list[int]]]) -> list[tuple[str, Piece]]:
        reads.append(sum(len(idx) for _, idx in todo))
        return [(s, pieces[i]) for s, idx in todo for i in idx if i < len(pieces)]

    reaches = first_reaches(3, per_hit=1200, total=3000, chunk_chars=200, overlap=30)
    got = PieceReader(read).expand(hits, per_hit=1200, total=3000, limit=3, first_reach=reaches)
    assert [h.passage_chunks[0] < h.chunk_index < h.passage_chunks[-1] for h in got] == [
        True, True, True
    ]  # fmt: skip
    assert len(reads) <= DRY_RUNS  # one read per pass over every hit, not one per hit


def test_a_section_heading_is_shown_once_in_a_passage_that_starts_at_a_table_row() -> None:
    rows = [Piece(i, f"Format: {c}\nC Type: t{i}", "S > Notes") for i, c in enumerate("abc")]
    notes = [Piece(3 + i, f"### Notes\nnote {i} " + "x" * 40, "S > Notes") for i in range(4)]
    pieces = rows + notes

    def fetch_s(source: str, first: int, last: int) -> list[Piece]:
        return [p for p in pieces if first <= p.chunk_index <= last]

    (wide,) = expand_hits(
        [_hit(2, rows[2].text, path="S > Notes")], fetch_s, per_hit=2000, total=3000
    )
    assert wide.passage.count("### Notes") == 1
    assert all(f"note {i}" in wide.passage for i in range(4)) and "Format: a" in wide.passage


def test_a_later_passage_never_repeats_chunks_a_better_one_shows() -> None:
    hits = [_hit(3, SECTION[3].text), _hit(6, SECTION[6].text)]
    out = expand_hits(hits, fetch, per_hit=120, total=3000)
    assert len(out) == 2
    assert not set(out[0].passage_chunks) & set(out[1].passage_chunks)


def test_a_heading_is_shown_once_at_the_top_of_a_passage_that_starts_at_a_code_block() -> None:
    """A code chunk repeats no heading: the prose chunk after it brought the heading into
    the middle of the passage, and the chunk before it brought it again at the top."""
    pieces = [
        Piece(0, "## Threads\nRun a blocking call in a thread. For example:", "Threads"),
        Piece(1, "```python\ndef blocking():\n    time.sleep(1)\n```", "Threads"),
        Piece(2, "## Threads\nCalling blocking() directly would block the loop.", "Threads"),
        Piece(3, "## Threads\nDue to the GIL, this suits IO-bound work.", "Threads"),
    ]

    def fetch_s(source: str, first: int, last: int) -> list[Piece]:
        return [p for p in pieces if first <= p.chunk_index <= last]

    (wide,) = expand_hits(
        [_hit(1, pieces[1].text, path="Threads")], fetch_s, per_hit=2000, total=3000
    )
    assert wide.passage_chunks == [0, 1, 2, 3]
    assert wide.passage.startswith("## Threads\nRun a blocking call")
    assert wide.passage.count("## Threads") == 1
    assert "```\nCalling blocking() directly" in wide.passage
    # a budget that holds the code and one chunk more: the section's lead before it
    (led,) = expand_hits(
        [_hit(1, pieces[1].text, path="Threads")], fetch_s, per_hit=130, total=3000
    )
    assert led.passage_chunks == [0, 1]
    assert led.passage.startswith("## Threads\nRun a blocking call in a thread. For example:\n```")
    # a passage that cannot reach back to the chunk before the code (too long to be the
    # lead): the heading the prose after it carries is still shown at the top, not after
    # the code
    pieces[0] = Piece(0, "## Threads\nRun a blocking call in a thread. " * 12, "Threads")
    (code_first,) = expand_hits(
        [_hit(1, pieces[1].text, path="Threads")], fetch_s, per_hit=130, total=3000
    )
    assert code_first.passage_chunks == [1, 2]
    assert code_first.passage.startswith("## Threads\n```python")
    assert code_first.passage.count("## Threads") == 1


def test_a_row_cell_that_looks_like_a_heading_is_left_in_its_row() -> None:
    """A table whose first column is `# of items` gives rows starting `# of items: 3`; only
    a line naming the hit's section is its heading."""
    pieces = [
        Piece(0, "### S\nIntro.", "A > S"),
        Piece(1, "# of items: 3\nName: apple", "A > S"),
        Piece(2, "# of items: 5\nName: fig", "A > S"),
    ]

    def fetch_s(source: str, first: int, last: int) -> list[Piece]:
        return [p for p in pieces if first <= p.chunk_index <= last]

    (wide,) = expand_hits([_hit(1, pieces[1].text, path="A > S")], fetch_s, per_hit=500, total=3000)
    assert wide.passage == "### S\nIntro.\n# of items: 3\nName: apple\n# of items: 5\nName: fig"


def test_a_chunk_of_an_empty_section_adds_no_second_heading() -> None:
    pieces = [Piece(0, "### S", "A > S"), Piece(1, "### S\nBody of the second S.", "A > S")]

    def fetch_s(source: str, first: int, last: int) -> list[Piece]:
        return [p for p in pieces if first <= p.chunk_index <= last]

    for index in (0, 1):
        hit = _hit(index, pieces[index].text, path="A > S")
        (wide,) = expand_hits([hit], fetch_s, per_hit=500, total=3000)
        assert wide.passage == "### S\nBody of the second S.", index


LEAD = "## Threads\ncoroutine to_thread(func): Run func in a separate thread."
THREADS = [Piece(0, LEAD, "Threads")] + [
    Piece(i, f"## Threads\nExample line {i} " + "x" * 80, "Threads") for i in range(1, 12)
]


def _threads_fetch(pieces: list[Piece]) -> NeighbourFetcher:
    def fetch_s(source: str, first: int, last: int) -> list[Piece]:
        return [p for p in pieces if first <= p.chunk_index <= last]

    return fetch_s


def test_a_passage_late_in_its_section_is_preceded_by_the_section_lead() -> None:
    """An example chunk far into an API entry's section is shown under the entry's
    signature and summary, with an omission line between them, within the budget."""
    hit = _hit(8, THREADS[8].text, path="Threads")
    (wide,) = expand_hits([hit], _threads_fetch(THREADS), per_hit=400, total=3000)
    assert wide.passage.startswith(f"{LEAD}\n[…]\n")
    assert wide.passage.count("## Threads") == 1 and "Example line 8" in wide.passage
    assert len(wide.passage) <= 400
    assert wide.passage_chunks[0] == 0 and wide.passage_chunks[1] > 1
    assert 8 in wide.passage_chunks
    # without the lead the same budget holds one more example chunk: the lead took its room
    assert len(wide.passage_chunks) - 1 < len(
        expand_hits([hit], _threads_fetch(THREADS[1:]), per_hit=400, total=3000)[0].passage_chunks
    )


def test_a_passage_that_reaches_the_lead_joins_it_without_an_omission_line() -> None:
    """A hit right after the lead, whose passage read on after it and left no room for
    the lead: the lead comes first, joined to it, and the passage reads on less far."""
    hit = _hit(1, THREADS[1].text, path="Threads")
    (wide,) = expand_hits([hit], _threads_fetch(THREADS), per_hit=300, total=3000)
    assert wide.passage.startswith(LEAD + "\nExample line 1")
    assert "[…]" not in wide.passage and wide.passage_chunks[:2] == [0, 1]
    assert len(wide.passage) <= 300


def test_no_lead_when_it_is_long_unseen_shown_already_or_does_not_fit() -> None:
    long_lead = [Piece(0, "## Threads\n" + "signature " * 50, "Threads"), *THREADS[1:]]
    hit = _hit(8, THREADS[8].text, path="Threads")
    (wide,) = expand_hits([hit], _threads_fetch(long_lead), per_hit=400, total=3000)
    assert "[…]" not in wide.passage and 0 not in wide.passage_chunks  # over LEAD_MAX_CHARS
    # a section longer than the chunks read around the hit: where it starts is unknown
    many = [THREADS[0]] + [
        Piece(i, f"## Threads\nExample line {i} " + "x" * 80, "Threads") for i in range(1, 40)
    ]
    at = LEAD_REACH + 2  # the section starts further back than its lead is looked for
    far = _hit(at, many[at].text, path="Threads")
    (wide,) = expand_hits([far], _threads_fetch(many), per_hit=400, total=3000)
    assert "[…]" not in wide.passage and wide.passage_chunks[0] > 1
    # nearer, though past the widest window of neighbours, it is looked for and found
    at = LEAD_REACH
    assert at > PASSAGE_REACH + 1
    nearer = _hit(at, many[at].text, path="Threads")
    (wide,) = expand_hits([nearer], _threads_fetch(many), per_hit=400, total=3000)
    assert wide.passage.startswith(f"{LEAD}\n[…]\n") and wide.passage_chunks[0] == 0
    # the lead inside a better-ranked passage is not shown twice
    first, second = expand_hits(
        [_hit(0, LEAD, path="Threads"), hit], _threads_fetch(THREADS), per_hit=200, total=3000
    )
    assert 0 in first.passage_chunks and 0 not in second.passage_chunks
    assert "coroutine to_thread" not in second.passage
    # a budget that holds the hit's own chunk but not the lead besides it
    (tight,) = expand_hits([hit], _threads_fetch(THREADS), per_hit=len(hit.text) + 20, total=3000)
    assert tight.passage_chunks == [8] and "[…]" not in tight.passage


def test_passages_with_leads_stay_within_budget_and_match_reading_every_window() -> None:
    """Sections whose chunks carry their heading line (leads possible), code chunks
    without one: every passage within its budget, the answer within the total, and
    the passages read in batches the same as those of reading every window."""
    rng = random.Random(5)
    leads = 0
    for _ in range(300):
        pieces = _random_sections(rng, 60, new_section=0.05, code=0.15, headed=True)

        def window(source: str, first: int, last: int, pieces: list[Piece] = pieces) -> list[Piece]:
            return [p for p in pieces if first <= p.chunk_index <= last]

        hits = [_hit(p.chunk_index, p.text, path=p.heading_path) for p in rng.sample(pieces, 5)]
        per_hit, total = rng.choice([(300, 3000), (600, 1500), (1200, 3000)])
        full = expand_hits(hits, window, per_hit=per_hit, total=total, limit=3)
        for h in full:
            assert len(h.passage) <= max(per_hit, len(h.text))
            assert h.passage_chunks == sorted(h.passage_chunks)
        assert sum(len(h.passage) + HEADER_CHARS for h in full) <= total
        leads += sum("[…]" in h.passage for h in full)

        def read(todo: list[tuple[str, list[int]]], pieces: list[Piece] = pieces) -> list:
            return [(s, p) for s, idx in todo for p in pieces if p.chunk_index in idx]

        got = PieceReader(read).expand(hits, per_hit=per_hit, total=total, limit=3)
        assert got == full
        # asking fewer neighbours first, as a search does, gives the same passages
        reaches = first_reaches(5, per_hit=per_hit, total=total, chunk_chars=60, overlap=0)
        for first in (reaches, 1, 3):
            staged = expand_hits(
                hits, window, per_hit=per_hit, total=total, limit=3, first_reach=first
            )
            assert staged == expand_hits(
                hits, window, per_hit=per_hit, total=total, limit=3, first_reach=PASSAGE_REACH
            )
    assert leads > 50  # the case is exercised


def test_a_lead_found_in_one_window_is_kept_in_the_wider_ones() -> None:
    """A narrow first window, then one reaching back for the lead (found 10 chunks back),
    then a wider one around the hit: the lead stays, as when every window is read."""
    pieces = [Piece(0, "## O\nother", "O"), Piece(1, LEAD, "Threads")] + [
        Piece(i, f"## Threads\nexample {i:02} " + "x" * 40, "Threads") for i in range(2, 25)
    ]
    hit = _hit(11, pieces[11].text, path="Threads")
    fetch_s = _threads_fetch(pieces)
    full = expand_hits([hit], fetch_s, per_hit=700, total=3000, first_reach=PASSAGE_REACH)[0]
    assert full.passage.startswith(f"{LEAD}\n[…]\n") and full.passage_chunks[0] == 1
    for first in range(1, PASSAGE_REACH):
        assert expand_hits([hit], fetch_s, per_hit=700, total=3000, first_reach=first) == [full]


def test_a_window_is_widened_when_the_passage_without_its_lead_reached_its_edge() -> None:
    """The whole section fits the budget, but a narrow window cut the lead-less passage at
    its edge, which made room for a lead and an omission line instead."""
    pieces = [Piece(0, "## O\nother", "O"), Piece(1, "## O\nother 1", "O")]
    pieces += [Piece(2, "## S\n" + "L" * 300, "S")]
    pieces += [Piece(i, f"## S\nc{i} " + "x" * 46, "S") for i in range(3, 9)]
    pieces += [Piece(9, "## P\nnext", "P")]
    hit = _hit(8, pieces[8].text, path="S")
    budget = 4 + 1 + 300 + 6 * 50  # the whole section, 2..8
    fetch_s = _threads_fetch(pieces)
    (full,) = expand_hits([hit], fetch_s, per_hit=budget, total=3000, first_reach=PASSAGE_REACH)
    assert full.passage_chunks == list(range(2, 9)) and "[…]" not in full.passage
    for first in range(1, PASSAGE_REACH):
        assert expand_hits([hit], fetch_s, per_hit=budget, total=3000, first_reach=first) == [full]


def test_a_section_starting_lead_reach_chunks_back_has_its_lead_found() -> None:
    at = 30
    start = at - LEAD_REACH
    pieces = [Piece(i, "## O\no", "O") for i in range(start)]
    pieces += [Piece(start, "## S\nlead", "S")]
    pieces += [Piece(i, f"## S\nc{i} " + "x" * 40, "S") for i in range(start + 1, at + 3)]
    (wide,) = expand_hits(
        [_hit(at, pieces[at].text, path="S")], _threads_fetch(pieces), per_hit=300, total=3000
    )
    assert wide.passage_chunks[0] == start and wide.passage.startswith("## S\nlead\n[…]\n")


def test_a_lead_over_code_chunks_counts_the_heading_it_brings() -> None:
    """Code chunks carry no heading line: a passage of code alone gains the section's
    heading with its lead, and that line counts against the budget too."""
    body = "coroutine run(func): Run func."
    code = [f"```\nline{i} = {i}\n" + "x = 1\n" * 5 + "```" for i in range(2)]
    pieces = [
        Piece(0, f"## S\n{body}", "S"),
        *(Piece(i, f"## S\nfiller {i} " + "y" * 60, "S") for i in range(1, 6)),
        Piece(6, code[0], "S"),
        Piece(7, code[1], "S"),
    ]
    budget = len(code[0]) + 1 + len(code[1]) + len(body) + len("[…]") + 2
    (wide,) = expand_hits(
        [_hit(6, code[0], path="S")], _threads_fetch(pieces), per_hit=budget, total=3000
    )
    assert wide.passage.startswith(f"## S\n{body}\n[…]\n```\nline0")
    assert len(wide.passage) <= budget and wide.passage_chunks == [0, 6]


def test_sibling_sections_whose_paths_were_cut_short_keep_their_own_heading_and_lead() -> None:
    """Heading paths are cut at 500 characters, so two sibling sections under long parents
    share one: the second one's passage is shown under its own heading, with its own
    lead, not the first one's."""
    body = lambda key: " ".join(f"Fact {i} about {key}." for i in range(40))  # noqa: E731
    doc = (
        f"# {'Alpha ' * 33}\n\n## {'Beta ' * 40}\n\n### {'Gamma ' * 10}\n\n"
        f"#### Configuration options for the frobnicator when running in mode A\n\n{body('A')}"
        f"\n\n#### Configuration options for the frobnicator when running in mode B\n\n"
        f"{body('B')}\n"
    )
    chunks = structured_chunks(doc, 200, 30)
    pieces = [Piece(i, c.text, c.heading_path) for i, c in enumerate(chunks)]
    last = pieces[-2]
    assert last.heading_path == pieces[1].heading_path  # the two sections share a path
    (wide,) = expand_hits(
        [_hit(last.chunk_index, last.text, path=last.heading_path)],
        _threads_fetch(pieces),
        per_hit=500,
        total=3000,
    )
    assert wide.passage.startswith(
        "#### Configuration options for the frobnicator when running in mode B\n"
    )
    assert "about A." not in wide.passage and "mode A" not in wide.passage


def test_a_section_sharing_its_path_with_the_next_does_not_run_into_it() -> None:
    """`## Y` and then `### Y` under two `# X` headings: one path, two sections. A code
    chunk of the first is shown under `## Y` whatever the first window, and the passage
    stops where `### Y` begins."""
    big = "```py\n" + "\n".join(f"v{i} = f({i})  # comment" for i in range(16)) + "\n```"
    pieces = [
        Piece(0, "## Y\nIntro of the first Y.", "X > Y"),
        *(Piece(i, big, "X > Y") for i in range(1, 8)),
        Piece(8, "```py\nhit_line = 1\n```", "X > Y"),
        Piece(9, "### Y\nText after the code.", "X > Y"),
        Piece(10, "# Z\nOther.", "Z"),
    ]
    hit = _hit(8, pieces[8].text, path="X > Y")
    fetch_s = _threads_fetch(pieces)
    got = {
        first: expand_hits([hit], fetch_s, per_hit=300, total=3000, first_reach=first)[0]
        for first in range(1, PASSAGE_REACH + 1)
    }
    assert len({(h.passage, tuple(h.passage_chunks)) for h in got.values()}) == 1
    passage = got[1].passage
    assert passage.startswith("## Y\nIntro of the first Y.\n[…]\n```py\nhit_line = 1")
    assert "### Y" not in passage and "Text after the code" not in passage


def test_a_heading_only_hit_stays_within_its_own_length() -> None:
    pieces = [Piece(0, "## Empty", "Empty"), Piece(1, "## Next\nbody", "Next")]
    (wide,) = expand_hits(
        [_hit(0, "## Empty", path="Empty")], _threads_fetch(pieces), per_hit=5, total=1000
    )
    assert wide.passage == "## Empty"


def test_a_lead_is_found_past_the_end_of_a_better_passage_of_the_section_before() -> None:
    """A better-ranked passage shows the previous section's last chunk: it still tells
    where this section starts, so the later hit keeps its lead."""

    def section(path: str, first: int, count: int) -> list[Piece]:
        words = lambda i: " ".join(f"w{i}.{t}" for t in range(12))  # noqa: E731
        return [Piece(i, f"## {path}\n{words(i)}", path) for i in range(first, first + count)]

    pieces = section("B", 0, 5) + section("A", 5, 20)
    fetch_s = _threads_fetch(pieces)
    late = _hit(15, pieces[15].text, path="A")
    (alone,) = expand_hits([late], fetch_s, per_hit=300, total=5000)
    _, second = expand_hits(
        [_hit(4, pieces[4].text, path="B"), late], fetch_s, per_hit=300, total=5000
    )
    assert alone.passage_chunks[0] == 5 and "[…]" in alone.passage
    assert second.passage == alone.passage and second.passage_chunks == alone.passage_chunks


def test_the_lead_is_found_past_a_captioned_table_inside_the_section() -> None:
    """A table's caption makes a heading path of its own inside the section (`A >
    Caption`): the section goes on after it, and its lead is its first chunk, not the
    chunk after the table."""
    rows = [Piece(i, f"| k{i} | v |", "A > Caption") for i in range(2, 5)]
    prose = lambda first, count: [  # noqa: E731
        Piece(i, "## A\n" + " ".join(f"w{i}.{t}" for t in range(12)), "A")
        for i in range(first, first + count)
    ]
    pieces = prose(0, 2) + rows + prose(5, 12)
    (wide,) = expand_hits(
        [_hit(12, pieces[12].text, path="A")], _threads_fetch(pieces), per_hit=300, total=5000
    )
    assert wide.passage_chunks[0] == 0 and wide.passage.startswith(f"{pieces[0].text}\n[…]\n")
    assert "| k" not in wide.passage  # the table itself is not part of the passage


def test_left_out_by_budget_counts_only_candidates_the_answer_had_no_room_for() -> None:
    """A candidate inside a shown passage is not lost; fewer candidates than asked for is
    no budget's doing; the count never passes the places left empty."""
    from dataclasses import replace

    candidates = [_hit(0, "a"), _hit(1, "b"), _hit(5, "c"), _hit(9, "d"), _hit(0, "e", "t")]
    shown = [replace(candidates[0], rank=1, passage="a b", passage_chunks=[0, 1])]
    assert left_out_by_budget(candidates, shown, 5) == 3  # 5, 9 and t0, not 1
    assert left_out_by_budget(candidates, shown, 3) == 2
    assert left_out_by_budget(candidates[:2], shown, 5) == 0
    assert left_out_by_budget(candidates, [*shown, *candidates[2:]], 4) == 0
