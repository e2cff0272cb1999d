"""Table-row lookup sets (eval.table_sets) and the runner's scoring (eval.row_lookup).

Fast: nothing is embedded or indexed. The committed sets in eval/sets are read back from
their HTML, so what is checked is what the runner indexes.
"""

from __future__ import annotations

import html.parser
import json
import unicodedata
from collections import Counter
from pathlib import Path

import pytest

from eval.datasets import DatasetError
from eval.row_lookup import (
    QuestionResult,
    RowQuestion,
    is_row,
    load_questions,
    page_of,
    page_row_names,
    preview,
    row_rank,
    score,
    select,
    summarize,
)
from eval.table_sets import (
    JA_CATEGORIES,
    MINIMUMS,
    SET_NAMES,
    SETS_DIR,
    EvalSet,
    build_sets,
    contains_value,
    normalize,
    row_matches,
    to_half_width,
    to_hiragana,
    write_set,
)

FIELDS = {"id", "query", "category", "page", "row_key", "answers"}


@pytest.fixture(scope="module")
def sets() -> list[EvalSet]:
    return build_sets()


@pytest.fixture(scope="module")
def built(sets: list[EvalSet]) -> dict[str, dict[str, str]]:
    return {s.name: s.files() for s in sets}


class _Tables(html.parser.HTMLParser):
    """Rows of every table of a page as `header: cell` texts, and the row-name cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str]] = []  # (name, text)
        self._header: list[str] = []
        self._cells: list[str] = []
        self._name = ""
        self._cell: list[str] | None = None
        self._in_head = False
        self._row_header = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "thead":
            self._in_head, self._header = True, []
        elif tag == "tr":
            self._cells = []
        elif tag in ("td", "th"):
            self._cell = []
            self._row_header = ("scope", "row") in attrs

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            (self._header if self._in_head else self._cells).append(text)
            if self._row_header:
                self._name = text
            self._cell = None
        elif tag == "tr" and not self._in_head and self._cells:
            assert len(self._cells) == len(self._header)
            text = "\n".join(f"{h}: {c}" for h, c in zip(self._header, self._cells, strict=True))
            self.rows.append((self._name, text))

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _committed(name: str) -> tuple[dict[str, list[tuple[str, str]]], list[dict[str, object]]]:
    folder = SETS_DIR / name
    pages = {}
    for page in sorted((folder / "pages").glob("*.html")):
        parser = _Tables()
        parser.feed(page.read_text(encoding="utf-8"))
        pages[page.name] = parser.rows
    lines = (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return pages, [json.loads(line) for line in lines]


# --- the generator ------------------------------------------------------------------------


def test_generator_is_deterministic_and_matches_the_committed_sets(
    built: dict[str, dict[str, str]],
) -> None:
    again = {s.name: s.files() for s in build_sets()}
    assert again == built
    for name, files in built.items():
        folder = SETS_DIR / name
        on_disk = {
            p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
            for p in folder.rglob("*")
            if p.is_file()
        }
        assert on_disk == files, f"eval/sets/{name} is stale: run python -m eval.table_sets"


def test_write_set_writes_pages_and_queries_and_drops_stale_pages(
    tmp_path: Path, sets: list[EvalSet]
) -> None:
    evalset = sets[1]
    stale = tmp_path / evalset.name / "pages" / "old.html"
    stale.parent.mkdir(parents=True)
    stale.write_text("<p>old</p>", encoding="utf-8")
    folder = write_set(evalset, tmp_path)
    assert not stale.exists()
    assert {p.name for p in (folder / "pages").iterdir()} == {p.file for p in evalset.pages}
    assert len(load_questions(folder)) == len(evalset.questions)


@pytest.mark.parametrize("name", SET_NAMES)
def test_sizes_meet_the_minimums(name: str) -> None:
    pages, questions = _committed(name)
    least = MINIMUMS[name]
    assert len(pages) >= least["pages"]
    assert sum(len(rows) for rows in pages.values()) >= least["rows"]
    assert len(questions) >= least["questions"]
    per_category = Counter(str(q["category"]) for q in questions)
    assert min(per_category.values()) >= least["per_category"]
    if name == "ja-tables":
        assert set(per_category) == set(JA_CATEGORIES)
        assert sum(len(rows) for rows in pages.values()) >= 1100
        for category in set(JA_CATEGORIES) - {"number_lookup"}:  # spread over all pages
            assert {q["page"] for q in questions if q["category"] == category} == set(pages)
    total = sum(p.stat().st_size for p in (SETS_DIR / name).rglob("*") if p.is_file())
    assert total < 1_000_000


@pytest.mark.parametrize("name", SET_NAMES)
def test_every_question_is_answered_by_exactly_one_row_of_its_page(name: str) -> None:
    pages, questions = _committed(name)
    every = [(page, row, normalize(row[1])) for page, rows in pages.items() for row in rows]
    assert len(Counter(q["id"] for q in questions)) == len(questions)
    for q in questions:
        assert FIELDS <= set(q) <= FIELDS | {"variant"}
        key, answers = str(q["row_key"]), [str(a) for a in q["answers"]]  # type: ignore[attr-defined]
        matching = [name for name, text in pages[str(q["page"])] if row_matches(text, key, answers)]
        assert matching == [key], q
        # the name is no other row's anywhere in the set (no question names its page)
        near = normalize(key)
        holding = [p for p, (_, text), hay in every if near in hay and contains_value(text, key)]
        assert holding == [q["page"]], q


def test_near_identical_names_and_numbers_are_really_there() -> None:
    pages, questions = _committed("ja-tables")
    names = [name for rows in pages.values() for name, _ in rows]
    assert {"スライム", "スライムベス", "メタルスライム", "はぐれメタルスライム"} <= set(names)
    family = sum(1 for n in names if any(n != m and m in n for m in names))
    assert family > 300  # names that contain another row's name
    numbers = {
        text.split(": ", 1)[1] for rows in pages.values() for _, t in rows for text in t.split("\n")
    }
    extended = [n for n in numbers if n.isdigit() and n[:-1] in numbers and len(n) > 1]
    assert len(extended) > 50  # 41 beside 412
    variants = Counter(str(q.get("variant", "")) for q in questions)
    for kind in ("drop_long_vowel", "add_long_vowel", "small_to_big", "big_to_small", "half_width"):
        assert variants[kind] >= 10
    en_pages, _ = _committed("en-tables")
    en_names = [name for rows in en_pages.values() for name, _ in rows]
    assert any(f"{n} Pro" in en_names for n in en_names)


def test_altered_names_are_no_real_name() -> None:
    pages, questions = _committed("ja-tables")
    names = {unicodedata.normalize("NFKC", n) for rows in pages.values() for n, _ in rows}
    for q in questions:
        if q["category"] in ("hiragana", "typo", "long_vowel_small_kana"):
            altered = str(q["query"]).split("の")[0] if "の" in str(q["query"]) else ""
            assert unicodedata.normalize("NFKC", altered) not in names - {q["row_key"]}
        if q["category"] == "hiragana":
            assert to_hiragana(str(q["row_key"])) in str(q["query"])
        if q["category"] == "long_vowel_small_kana" and q["variant"] == "half_width":
            assert to_half_width(str(q["row_key"])) in str(q["query"])
        if q["category"] in ("typo", "long_vowel_small_kana") and q["variant"] != "half_width":
            assert not contains_value(str(q["query"]), str(q["row_key"])), q


# --- matching and scoring -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        ("名前: スライム\nHP: 41, MP: 0", "41", True),
        ("名前: スライム\nHP: 412, MP: 0", "41", False),
        ("名前: スライム\nHP: 241, MP: 0", "41", False),
        ("Weight (kg): 4.41", "41", False),
        ("Weight (kg): 41.5", "41", False),
        ("Weight (kg): 1.35, Price (USD): 799", "1.35", True),
        ("Weight (kg): 1.353", "1.35", False),
        ("No.: 57\n名前: スライム", "57", True),
        ("名前: スライムベス\nHP: 41", "スライム", False),
        ("名前: メタルスライム\nHP: 41", "スライム", False),
        ("名前: はぐれメタルスライム", "メタルスライム", False),
        ("名前: メタルスライム", "ﾒﾀﾙｽﾗｲﾑ", True),
        ("名前: スライム\n効果: HPを30回復", "HPを30回復", True),
        ("Model: Nova X200 Pro, Weight (g): 187", "Nova X200", False),
        ("Model: Nova X2000, Weight (g): 187", "Nova X200", False),
        ("Model: Nova X200, Weight (g): 187", "nova x200", True),
        ("| Nova X200 | 187 |", "Nova X200", True),
        ("City: Port Alden, Population: 5000", "Alden", False),
        ("City: Aldenville, Population: 5000", "Alden", False),
        ("Material: Steel 1045-T6", "Steel 1045", False),
        ("", "41", False),
        ("HP: 41", "", False),
    ],
)
def test_contains_value(text: str, value: str, expected: bool) -> None:
    assert contains_value(text, value) is expected


def test_row_matches_needs_the_key_and_every_answer() -> None:
    text = "No.: 2\n名前: スライムベス, HP: 412, MP: 0"
    assert row_matches(text, "スライムベス", ["412"])
    assert not row_matches(text, "スライムベス", ["41"])
    assert not row_matches(text, "スライム", ["412"])
    assert not row_matches(text, "スライムベス", ["412", "7"])


def _question(**changes: object) -> RowQuestion:
    base: dict[str, object] = {
        "id": "ja-templated-001",
        "query": "スライムのHPはいくつ？",
        "category": "templated",
        "page": "monsters.html",
        "row_key": "スライム",
        "answers": ("41",),
    }
    return RowQuestion(**{**base, **changes})  # type: ignore[arg-type]


def test_is_row_checks_page_key_answers_and_other_rows() -> None:
    q = _question()
    row = "名前: スライム\nHP: 41, MP: 0"
    assert is_row(row, "monsters.html", q)
    assert not is_row(row, "other.html", q)
    assert not is_row("名前: スライムベス\nHP: 41", "monsters.html", q)
    two_rows = "名前: スライム\nHP: 41\n名前: ドラキー\nHP: 41"
    others = ["スライム", "スライムベス", "ドラキー"]
    assert is_row(two_rows, "monsters.html", q)
    assert not is_row(two_rows, "monsters.html", q, others)
    assert is_row(row, "monsters.html", q, others)  # スライムベス is not in スライム's row


def test_rank_score_and_summary() -> None:
    q = _question()
    hits = [
        ("名前: スライムベス\nHP: 412", "monsters.html"),
        ("名前: スライム\nHP: 41", "monsters.html"),
    ]
    assert row_rank(hits, q) == 2
    assert row_rank(hits[:1], q) is None
    result = score(q, hits, 12.5, ["スライム", "スライムベス"])
    assert result.rank == 2 and result.page_at_1
    assert result.metrics() == {
        "row@1": 0.0,
        "row@5": 1.0,
        "mrr": 0.5,
        "page@1": 1.0,
        "declined": 0.0,
    }
    empty = score(q, [], 3.0, [], declined=True)
    assert empty.rank is None and not empty.page_at_1 and empty.top_text == ""
    first = score(q, hits[1:], 10.0, [])
    groups = summarize([result, empty, first], "category")
    assert groups["all"].n == 3 and groups["templated"].metrics["row@1"] == pytest.approx(
        1 / 3, abs=1e-3
    )
    assert groups["all"].ms == pytest.approx(8.5)
    assert groups["all"].metrics["declined"] == pytest.approx(1 / 3, abs=1e-3)
    assert isinstance(result, QuestionResult)


def test_page_of_and_preview() -> None:
    assert page_of("file:///tmp/set/pages/monsters-cave.html") == "monsters-cave.html"
    assert page_of("file:///tmp/my%20set/pages/a%20b.html") == "a b.html"
    assert preview("No.: 57\n名前: スライム, HP: 41") == "No.: 57 / 名前: スライム, HP: 41"
    long_line = "名前: はぐれメタルスライムキング, HP: 41, MP: 0"
    assert preview(f"{long_line}\n効果: なし") == long_line
    assert preview("x" * 200).endswith("…") and len(preview("x" * 200)) == 90


def test_load_questions_and_row_names(tmp_path: Path) -> None:
    folder = SETS_DIR / "en-tables"
    questions = load_questions(folder)
    assert len(questions) == len((folder / "queries.jsonl").read_text().splitlines())
    assert len(select(questions, 10)) == 10 and select(questions, None) == questions
    names = page_row_names(folder / "pages")
    assert all(q.row_key in names[q.page] for q in questions)
    with pytest.raises(DatasetError, match="not a table set"):
        load_questions(tmp_path)
    (tmp_path / "pages").mkdir()
    (tmp_path / "queries.jsonl").write_text('{"id": "x"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match="line 1"):
        load_questions(tmp_path)
