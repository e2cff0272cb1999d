"""Evaluation sets for table-row lookup: does search find the exact row that answers?

Two sets are generated from a fixed seed with the standard library only, so the same code
always writes the same bytes:

- `ja-tables`: Japanese game-style stat tables (monsters by area, metal monsters, bosses,
  weapons, armour, items, spells, accessories) whose katakana names come in families of
  near-identical names (スライム, スライムベス, メタルスライム, はぐれメタルスライム…) with
  near-identical numbers (a sibling's 41 beside 412). Questions: `templated`,
  `hiragana` (the name in hiragana), `long_vowel_small_kana` (ー dropped or added, small
  kana made big or the reverse, half-width katakana), `typo` (one character replaced,
  dropped or swapped), `synonym` (the column asked by another word: HP→体力, 値段→価格…),
  `number_lookup` (which row is No. 57) and `reverse` (which row has HP 412).
- `en-tables`: English product specifications, city statistics and materials with
  near-duplicate names ("Nova X200", "Nova X200 Pro", "Nova X2000"): `templated`,
  `synonym` (weight↔mass, price↔cost, population↔inhabitants…), `typo`, `number_lookup`
  and `reverse`.

`python -m eval.table_sets [OUT_DIR]` writes `OUT_DIR/<set>/pages/*.html` (a title, an h1,
an intro paragraph and tables with `<thead>`, the row's name in a `<th scope="row">`) and
`OUT_DIR/<set>/queries.jsonl`, one question a line::

    {"id", "query", "category", "page", "row_key", "answers"[, "variant"]}

`row_key` is the row's name as written on the page, `answers` the exact cell strings that
answer (the name itself for `number_lookup` and `reverse`), `variant` how the name was
altered (hiragana, typo and kana questions). The committed copies are in `eval/sets/`
(OUT_DIR's default); `eval.row_lookup` scores retrieval on them.

Every question is checked, with the same `row_matches` the runner scores hits with, to be
answered by exactly one row of its page and to name a row no other page has; altered names
never equal a real name. A violation raises `AssertionError` while generating.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SEED = 20251123
SETS_DIR = Path(__file__).resolve().parent / "sets"
SET_NAMES = ("ja-tables", "en-tables")
JA_CATEGORIES = (
    "templated",
    "hiragana",
    "long_vowel_small_kana",
    "typo",
    "synonym",
    "number_lookup",
    "reverse",
)
EN_CATEGORIES = ("templated", "synonym", "typo", "number_lookup", "reverse")
MINIMUMS: dict[str, dict[str, int]] = {
    "ja-tables": {"pages": 11, "rows": 1100, "questions": 600, "per_category": 80},
    "en-tables": {"pages": 5, "rows": 300, "questions": 200, "per_category": 40},
}
NO_COLUMN = "No."


# --- matching (shared with eval.row_lookup) -------------------------------------------
_JOINERS = "-./+"


def normalize(text: str) -> str:
    """NFKC and case-folded: full/half-width and case never decide a match."""
    return unicodedata.normalize("NFKC", text).casefold()


def _word(ch: str) -> bool:
    return ch.isalnum() or ch in "ー_"


def _ascii_alnum(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def _free_left(hay: str, i: int, needle: str, spaced: bool) -> bool:
    if not _word(needle[0]) or i == 0:
        return True
    if _word(hay[i - 1]):
        return False  # スライム inside メタルスライム, 41 inside 241
    if hay[i - 1] in _JOINERS and i > 1 and _word(hay[i - 2]):
        return False  # 41 inside 4.41
    if spaced:
        j = i
        while j > 0 and hay[j - 1] == " ":
            j -= 1
        if j < i and j > 0 and _ascii_alnum(hay[j - 1]):
            return False  # Alden inside Port Alden
    return True


def _free_right(hay: str, end: int, needle: str, spaced: bool) -> bool:
    if not _word(needle[-1]) or end == len(hay):
        return True
    if _word(hay[end]):
        return False  # スライム inside スライムベス, 41 inside 412
    if hay[end] in _JOINERS and end + 1 < len(hay) and _word(hay[end + 1]):
        return False  # 41 inside 41.5, Steel 1045 inside Steel 1045-T6
    if spaced:
        j = end
        while j < len(hay) and hay[j] == " ":
            j += 1
        if j > end and j < len(hay) and _ascii_alnum(hay[j]):
            return False  # Nova X200 inside Nova X200 Pro
    return True


def contains_value(text: str, value: str) -> bool:
    """Whether `value` occurs in `text` as a whole value, compared after NFKC.

    A match may not continue a longer name or number on either side: `41` is not in
    `412`, `4.41` or `41.5`; `スライム` is not in `スライムベス` or `メタルスライム`; a value
    with Latin letters is not in a longer name made by adding words (`Nova X200` is not in
    `Nova X200 Pro`, `Alden` not in `Port Alden`).
    """
    return _contains(normalize(text), normalize(value).strip())


def _contains(hay: str, needle: str) -> bool:
    """`contains_value` on texts already normalized."""
    if not needle:
        return False
    spaced = any(c.isascii() and c.isalpha() for c in needle)
    start = hay.find(needle)
    while start != -1:
        end = start + len(needle)
        if _free_left(hay, start, needle, spaced) and _free_right(hay, end, needle, spaced):
            return True
        start = hay.find(needle, start + 1)
    return False


def row_matches(text: str, row_key: str, answers: Sequence[str]) -> bool:
    """Whether `text` holds the row `row_key` and every answer, each as a whole value."""
    return contains_value(text, row_key) and all(contains_value(text, a) for a in answers)


# --- data model ---------------------------------------------------------------------
@dataclass
class Table:
    """One `<table>`: an optional caption (an `<h2>` above it), columns and rows."""

    caption: str
    columns: list[str]
    rows: list[list[str]]


@dataclass
class Page:
    """One HTML page of a set and how its rows are asked about."""

    file: str
    title: str
    h1: str
    intro: str
    name_column: str
    noun: str  # what one row is, as a question says it: モンスター, smartphone
    list_name: str  # the page's list, as a question says it: 草原のモンスター一覧
    lang: str
    tables: list[Table] = field(default_factory=list)
    numbered: str = ""  # group whose No. values are unique across the set ("" = no No.)
    reverse_columns: tuple[str, ...] = ()
    article: str = ""  # English: "the " before a name, "" for cities
    outro: str = ""

    def rows(self) -> list[Row]:
        out: list[Row] = []
        for table in self.tables:
            for cells in table.rows:
                values = dict(zip(table.columns, cells, strict=True))
                out.append(Row(self, len(out), tuple(table.columns), values))
        return out


@dataclass(frozen=True)
class Row:
    page: Page
    index: int
    columns: tuple[str, ...]
    cells: dict[str, str]

    @property
    def name(self) -> str:
        return self.cells[self.page.name_column]

    def text(self) -> str:
        """`column: value` lines: the row as a chunk holds it, for the uniqueness checks."""
        return "\n".join(f"{c}: {self.cells[c]}" for c in self.columns)


@dataclass(frozen=True)
class Question:
    id: str
    query: str
    category: str
    page: str
    row_key: str
    answers: tuple[str, ...]
    variant: str = ""

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "id": self.id,
            "query": self.query,
            "category": self.category,
            "page": self.page,
            "row_key": self.row_key,
            "answers": list(self.answers),
        }
        if self.variant:
            data["variant"] = self.variant
        return data


@dataclass
class EvalSet:
    name: str
    pages: list[Page]
    questions: list[Question]
    categories: tuple[str, ...]

    def all_rows(self) -> list[Row]:
        return [row for page in self.pages for row in page.rows()]

    def files(self) -> dict[str, str]:
        """Relative path → file text, everything the set folder holds."""
        out = {f"pages/{page.file}": render_page(page) for page in self.pages}
        out["queries.jsonl"] = "".join(
            json.dumps(q.to_json(), ensure_ascii=False) + "\n" for q in self.questions
        )
        return out

    def summary(self) -> dict[str, object]:
        rows = {page.file: len(page.rows()) for page in self.pages}
        return {
            "pages": len(self.pages),
            "rows": sum(rows.values()),
            "rows_per_page": rows,
            "questions": len(self.questions),
            "per_category": dict(Counter(q.category for q in self.questions)),
        }


def render_page(page: Page) -> str:
    """The page as HTML: title, h1, intro, an h2 + `<table>` with `<thead>` per table."""
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        f'<html lang="{page.lang}">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{e(page.title)}</title>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>{e(page.h1)}</h1>",
        f"<p>{e(page.intro)}</p>",
    ]
    for table in page.tables:
        if table.caption:
            out.append(f"<h2>{e(table.caption)}</h2>")
        out.append("<table>")
        out.append("<thead><tr>" + "".join(f"<th>{e(c)}</th>" for c in table.columns))
        out.append("</tr></thead>")
        out.append("<tbody>")
        for cells in table.rows:
            tds = [
                f'<th scope="row">{e(v)}</th>' if c == page.name_column else f"<td>{e(v)}</td>"
                for c, v in zip(table.columns, cells, strict=True)
            ]
            out.append("<tr>" + "".join(tds) + "</tr>")
        out.append("</tbody>")
        out.append("</table>")
    if page.outro:
        out.append(f"<p>{e(page.outro)}</p>")
    out += ["</main>", "</body>", "</html>", ""]
    return "\n".join(out)


# --- kana helpers -------------------------------------------------------------------
_SMALL_TO_BIG = dict(zip("ァィゥェォッャュョ", "アイウエオツヤユヨ", strict=True))
_BIG_TO_SMALL = {big: small for small, big in _SMALL_TO_BIG.items()}
_HALF = {unicodedata.normalize("NFKC", chr(cp)): chr(cp) for cp in range(0xFF66, 0xFF9E)} | {
    "\u3099": "\uff9e",
    "\u309a": "\uff9f",
}


def is_katakana(ch: str) -> bool:
    return "\u30a1" <= ch <= "\u30fa"


def to_hiragana(text: str) -> str:
    """Katakana written in hiragana (ー and everything else unchanged)."""
    return "".join(chr(ord(c) - 0x60) if "\u30a1" <= c <= "\u30f6" else c for c in text)


def to_half_width(text: str) -> str:
    """Katakana (and ー) in half-width forms; NFKC turns it back."""
    out = []
    for ch in text:
        if is_katakana(ch) or ch == "ー":
            out.append("".join(_HALF.get(part, part) for part in unicodedata.normalize("NFD", ch)))
        else:
            out.append(ch)
    return "".join(out)


_PLAIN_KATAKANA = set(
    "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨ"
)
_PLAIN_KATAKANA |= set("ラリルレロワガギグゲゴザジズゼゾダデドバビブベボパピプペポヴ")
KANA_VARIANTS = ("drop_long_vowel", "add_long_vowel", "small_to_big", "big_to_small", "half_width")
TYPO_VARIANTS = ("replace", "drop", "swap")


def kana_variant(rng: random.Random, name: str, kind: str) -> str | None:
    """`name` with its long vowels, small kana or width altered (None: not applicable)."""
    if kind == "drop_long_vowel":
        spots = [i for i, c in enumerate(name) if c == "ー"]
        if not spots:
            return None
        i = rng.choice(spots)
        return name[:i] + name[i + 1 :]
    if kind == "add_long_vowel":
        spots = [
            i + 1
            for i, c in enumerate(name)
            if c in _PLAIN_KATAKANA
            and (i + 1 == len(name) or name[i + 1] not in "ーァィゥェォャュョ")
        ]
        if not spots:
            return None
        i = rng.choice(spots)
        return name[:i] + "ー" + name[i:]
    if kind == "small_to_big":
        spots = [i for i, c in enumerate(name) if c in _SMALL_TO_BIG]
        if not spots:
            return None
        i = rng.choice(spots)
        return name[:i] + _SMALL_TO_BIG[name[i]] + name[i + 1 :]
    if kind == "big_to_small":
        spots = [
            i
            for i, c in enumerate(name)
            if i > 0 and c in _BIG_TO_SMALL and name[i - 1] in _PLAIN_KATAKANA
        ]
        if not spots:
            return None
        i = rng.choice(spots)
        return name[:i] + _BIG_TO_SMALL[name[i]] + name[i + 1 :]
    if kind == "half_width":
        half = to_half_width(name)
        return half if half != name else None
    raise ValueError(kind)


_LOOKALIKE = dict(
    zip(
        "シツソンスヌクタワウルレメナチテハバパトドカガキギコゴサザホボポラ",
        "ツシンソヌスタクウワレルナメテチバパハドトガカギキゴコザサボポホヲ",
        strict=True,
    )
)
_ANY_KATAKANA = sorted(_PLAIN_KATAKANA - {"ヴ"})


def ja_typo(rng: random.Random, name: str, kind: str) -> str | None:
    """One character of `name` replaced (by a look-alike when there is one), dropped or
    swapped with its neighbour."""
    if len(name) < 4:
        return None  # one change in a two- or three-kana name leaves too little to find
    spots = [i for i, c in enumerate(name) if is_katakana(c) or c == "ー"]
    if kind == "replace":
        i = rng.choice(spots)
        old = name[i]
        new = _LOOKALIKE.get(old) if rng.random() < 0.7 else None
        while new is None or new == old:
            new = rng.choice(_ANY_KATAKANA)
        return name[:i] + new + name[i + 1 :]
    if kind == "drop":
        i = rng.choice(spots)
        return name[:i] + name[i + 1 :]
    if kind == "swap":
        pairs = [i for i in spots[:-1] if i + 1 in spots and name[i] != name[i + 1]]
        if not pairs:
            return None
        i = rng.choice(pairs)
        return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    raise ValueError(kind)


_KEY_NEIGHBOURS = {
    "q": "wa", "w": "qes", "e": "wrd", "r": "etf", "t": "ryg", "y": "tuh", "u": "yij",
    "i": "uok", "o": "ipl", "p": "ol", "a": "qsz", "s": "adw", "d": "sfe", "f": "dgr",
    "g": "fht", "h": "gjy", "j": "hku", "k": "jli", "l": "ko", "z": "xa", "x": "zcs",
    "c": "xvd", "v": "cbf", "b": "vng", "n": "bmh", "m": "nj",
}  # fmt: skip


def en_typo(rng: random.Random, name: str, kind: str) -> str | None:
    """One letter of `name` replaced by a keyboard neighbour, dropped, or swapped with the
    next letter (never a word's first letter; digits are left alone)."""
    inner = [
        i
        for i, c in enumerate(name)
        if c.isascii() and c.isalpha() and i > 0 and name[i - 1].isalpha()
    ]
    if kind == "replace":
        if not inner:
            return None
        i = rng.choice(inner)
        new = rng.choice(_KEY_NEIGHBOURS[name[i].lower()])
        new = new.upper() if name[i].isupper() else new
        return name[:i] + new + name[i + 1 :]
    if kind == "drop":
        spots = [i for i in inner if _word_length(name, i) >= 4]
        if not spots:
            return None
        i = rng.choice(spots)
        return name[:i] + name[i + 1 :]
    if kind == "swap":
        pairs = [i for i in inner if i + 1 in inner and name[i] != name[i + 1]]
        if not pairs:
            return None
        i = rng.choice(pairs)
        return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    raise ValueError(kind)


def _word_length(text: str, i: int) -> int:
    start = i
    while start > 0 and text[start - 1].isalpha():
        start -= 1
    end = i
    while end < len(text) and text[end].isalpha():
        end += 1
    return end - start


# --- question building ----------------------------------------------------------------
Made = tuple[str, tuple[str, ...], str] | None
Maker = Callable[[random.Random, Row, bool], Made]
"""(rng, row, strict) -> (query, answers, variant), or None when the row cannot be asked
this way. `strict` asks for the variant whose turn it is; without it any variant will do."""


class _Builder:
    """Picks rows page by page (round robin, unused rows first) and validates the result."""

    def __init__(self, name: str, prefix: str, rng: random.Random, pages: list[Page]) -> None:
        self.name = name
        self.prefix = prefix
        self.rng = rng
        self.pages = pages
        self.rows = {page.file: page.rows() for page in pages}
        self.order = {}
        for page in pages:
            order = list(range(len(self.rows[page.file])))
            rng.shuffle(order)
            self.order[page.file] = order
        every = [row for rows in self.rows.values() for row in rows]
        self.names = Counter(normalize(row.name) for row in every)
        duplicates = [n for n, count in self.names.items() if count > 1]
        if duplicates:
            raise AssertionError(f"{name}: names used twice: {duplicates[:5]}")
        self.values = Counter(
            (column, normalize(value)) for row in every for column, value in row.cells.items()
        )
        numbered = Counter(
            (row.page.numbered, row.cells[NO_COLUMN]) for row in every if row.page.numbered
        )
        if any(count > 1 for count in numbered.values()):
            raise AssertionError(f"{name}: a No. is used twice within one numbering")
        self.used: set[tuple[str, int]] = set()
        self.asked: set[tuple[str, str, int]] = set()
        self.questions: list[Question] = []

    def unique_value(self, column: str, value: str) -> bool:
        """No other row of the whole set has this value in a column of this name."""
        return self.values[(column, normalize(value))] == 1

    def is_name(self, text: str) -> bool:
        return normalize(text) in self.names

    def fill(self, category: str, count: int, pages: list[Page], make: Maker) -> None:
        pages = list(pages)
        made = turn = 0
        while made < count:
            if not pages:
                raise AssertionError(f"{self.name}: only {made} of {count} {category} questions")
            page = pages[turn % len(pages)]
            question = self._one(category, page, make)
            if question is None:
                pages.remove(page)
                continue
            turn += 1
            self.questions.append(question)
            made += 1

    def _one(self, category: str, page: Page, make: Maker) -> Question | None:
        rows = self.rows[page.file]
        order = self.order[page.file]
        candidates = [
            (strict, index)
            for strict in (True, False)
            for fresh in (True, False)
            for index in order
            if (category, page.file, index) not in self.asked
            and fresh != ((page.file, index) in self.used)
        ]
        for strict, index in candidates:
            made = make(self.rng, rows[index], strict)
            if made is not None:
                query, answers, variant = made
                self.used.add((page.file, index))
                self.asked.add((category, page.file, index))
                number = sum(q.category == category for q in self.questions) + 1
                return Question(
                    id=f"{self.prefix}-{category}-{number:03d}",
                    query=query,
                    category=category,
                    page=page.file,
                    row_key=rows[index].name,
                    answers=answers,
                    variant=variant,
                )
        return None

    def build(self, categories: tuple[str, ...]) -> EvalSet:
        evalset = EvalSet(self.name, self.pages, self.questions, categories)
        validate(evalset)
        return evalset


def validate(evalset: EvalSet) -> None:
    """Raise `AssertionError` unless every question is answered by exactly one row.

    Its row key and answers must match exactly one row of its page (`row_matches`), that
    row must be the one named `row_key`, and the key must match no row of another page.
    """
    rows = {page.file: page.rows() for page in evalset.pages}
    every = [(row, normalize(row.text())) for page_rows in rows.values() for row in page_rows]
    ids = Counter(q.id for q in evalset.questions)
    if any(count > 1 for count in ids.values()):
        raise AssertionError(f"{evalset.name}: question ids used twice")
    for q in evalset.questions:
        if q.page not in rows:
            raise AssertionError(f"{q.id}: unknown page {q.page}")
        hits = [r for r in rows[q.page] if row_matches(r.text(), q.row_key, q.answers)]
        if len(hits) != 1 or hits[0].name != q.row_key:
            raise AssertionError(f"{q.id}: {len(hits)} rows of {q.page} answer {q.query!r}")
        key = normalize(q.row_key)
        keyed = [row for row, hay in every if key in hay and _contains(hay, key)]
        if len(keyed) != 1:
            raise AssertionError(f"{q.id}: {q.row_key!r} matches {len(keyed)} rows of the set")
        altered = q.category in ("hiragana", "long_vowel_small_kana", "typo")
        if altered and contains_value(q.query, q.row_key) and q.variant != "half_width":
            raise AssertionError(f"{q.id}: the altered name is the name itself")


class _Turns:
    """Whose turn it is among a category's variants; moves on when a question is made."""

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self.made = 0

    def order(self, strict: bool) -> list[str]:
        start = self.made % len(self.kinds)
        if strict:
            return [self.kinds[start]]
        return [*self.kinds[start:], *self.kinds[:start]]

    def done(self) -> None:
        self.made += 1


# --- the Japanese set -------------------------------------------------------------------
JA_SYNONYMS: dict[str, tuple[str, ...]] = {
    "HP": ("体力",),
    "MP": ("魔力",),
    "攻撃力": ("攻撃",),
    "守備力": ("防御力",),
    "すばやさ": ("素早さ",),
    "ゴールド": ("所持金", "お金"),
    "経験値": ("EXP",),
    "値段": ("価格",),
    "消費MP": ("消費魔力",),
}
_JA_MONSTER_COLUMNS = ["HP", "MP", "攻撃力", "守備力", "すばやさ", "経験値", "ゴールド"]
_JA_ASK = (
    "{name}の{col}はいくつ？",
    "{name}の{col}を教えて",
    "{name}の{col}は？",
    "{name}の{col}はどのくらい？",
)
_JA_ASK_BY_COLUMN = {
    "値段": ("{name}の値段はいくら？", "{name}の値段を教えて"),
    "効果": ("{name}の効果は？", "{name}にはどんな効果がある？"),
    "習得レベル": ("{name}の習得レベルは？", "{name}の習得レベルを教えて"),
}
_JA_SYNONYM_ASK = ("{name}の{col}はいくつ？", "{name}の{col}は？", "{name}の{col}を教えて")
_JA_SYNONYM_BY_WORD = {
    "価格": ("{name}の価格はいくら？", "{name}の価格は？"),
    "お金": ("{name}を倒すともらえるお金は？", "{name}のお金はいくら？"),
    "所持金": ("{name}の所持金はいくら？", "{name}の所持金は？"),
}
_JA_NUMBER_ASK = (
    "{list}のNo.{no}は何？",
    "No.{no} の{noun}の名前は？",
    "{list}でNo.{no}の{noun}は？",
)
_JA_REVERSE_ASK = (
    "{col}が {value} の{noun}は？",
    "{col}が{value}の{noun}はどれ？",
    "{col} {value} の{noun}は何？",
)

_CLASSIC_ROOTS = [
    "スライム", "ドラキー", "ゴーレム", "ドラゴン", "ゴースト", "ミミック", "キメラ", "ガイコツ",
    "リザード", "マミー", "ゴブリン", "コボルト", "トロール", "ワーム", "バット", "スコーピオン",
    "ウルフ", "スパイダー", "ビートル", "プチット", "ホイミン", "バブリン", "ピクシー",
    "グリフォン", "サラマンダー", "ヒュドラ", "ゴルゴン", "ミノタウロス", "ガーゴイル",
    "ケルベロス",
]  # fmt: skip
_MONSTER_PREFIXES = [
    "キング", "ベビー", "ダーク", "シルバー", "ブラック", "レッド", "ブルー", "ヘル", "マッド",
    "ポイズン", "アイス", "フレイム", "サンダー", "ストーン", "アイアン", "ギガ", "シャドー",
    "ホーリー", "ミニ", "ジャイアント", "エビル", "バーサーク", "ホイミ", "バブル",
]  # fmt: skip
_MONSTER_SUFFIXES = [
    "ベス", "ナイト", "ロード", "キング", "マスター", "ソルジャー", "ライダー", "エンペラー",
    "クイーン", "ビースト", "ゾンビ", "ボーグ",
]  # fmt: skip
_METAL_PREFIXES = ["メタル", "はぐれメタル", "メタルキング"]
_MORA = list("カキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワ")
_MORA += list("ガギグゲゴザジズゼゾダデドバビブベボパピプペポ")
_I_ROW = set("キシチニヒミリギジビピ")
_GEMINABLE = set("カキクケコサシスセソタチツテトパピプペポ")


def _ja_root(rng: random.Random, low: int = 2, high: int = 4) -> str:
    """A katakana name stem built from syllables: ドラキー, ゾピョーン, ガメッタ…"""
    morae = [rng.choice(_MORA) for _ in range(rng.randint(low, high))]
    out: list[str] = []
    for k, mora in enumerate(morae):
        if mora in _I_ROW and rng.random() < 0.18:
            mora += rng.choice("ャュョ")
        out.append(mora)
        roll = rng.random()
        if k + 1 < len(morae) and morae[k + 1] in _GEMINABLE and roll < 0.2:
            out.append("ッ")
        elif roll < 0.38:
            out.append("ー")
        elif roll < 0.5 and k > 0:
            out.append("ン")
    return "".join(out)


def plausible_kana(name: str) -> bool:
    """No ーー, no name starting with ー/ッ/ン/small kana, no ッ before ー, ン or a vowel."""
    if "ーー" in name or name[:1] in "ーッンァィゥェォャュョ":
        return False
    return all(name[i + 1 : i + 2] in _GEMINABLE for i, c in enumerate(name) if c == "ッ")


def _monster_stats(rng: random.Random, level: int, metal: bool = False) -> dict[str, int]:
    if metal:
        return {
            "HP": rng.randint(4, 30),
            "MP": rng.choice([0, 0, rng.randint(2, 20)]),
            "攻撃力": rng.randint(30, 160),
            "守備力": rng.choice([255, 511, 999]) - rng.randint(0, 40),
            "すばやさ": rng.randint(120, 255),
            "経験値": rng.randint(1000, 40000),
            "ゴールド": rng.randint(5, 300),
        }
    return {
        "HP": max(1, round(level * rng.uniform(2.5, 6.0)) + rng.randint(0, 9)),
        "MP": 0 if rng.random() < 0.4 else round(level * rng.uniform(0.5, 2.5)) + rng.randint(0, 5),
        "攻撃力": round(level * rng.uniform(1.8, 3.6)) + rng.randint(1, 9),
        "守備力": round(level * rng.uniform(1.2, 3.0)) + rng.randint(0, 9),
        "すばやさ": round(level * rng.uniform(0.8, 2.2)) + rng.randint(1, 9),
        "経験値": round(level * level * rng.uniform(0.4, 1.6)) + rng.randint(1, 20),
        "ゴールド": round(level * rng.uniform(1.0, 6.0)) + rng.randint(0, 20),
    }


def _sibling_stats(rng: random.Random, base: dict[str, int]) -> dict[str, int]:
    """A family member's stats: the family's, a little off; now and then a number that
    extends the family's (41 → 412), so a whole-number match is needed to tell them apart."""
    out = {}
    for key, value in base.items():
        if value == 0:
            out[key] = 0 if rng.random() < 0.7 else rng.randint(1, 9)
        elif key in ("経験値", "ゴールド") and value < 100 and rng.random() < 0.15:
            out[key] = int(f"{value}{rng.randint(0, 9)}")
        else:
            out[key] = max(1, round(value * rng.uniform(0.88, 1.15)) + rng.randint(-2, 2))
    return out


@dataclass
class _JaArea:
    file: str
    place: str
    levels: tuple[int, int]
    tables: list[tuple[str, int]]
    numbered: bool
    columns: list[str]


_JA_AREAS = [
    _JaArea("monsters-grassland.html", "草原", (1, 12), [("ステータス一覧", 120)], True, []),
    _JaArea("monsters-forest.html", "森", (8, 25), [("ステータス一覧", 110)], True, []),
    _JaArea("monsters-cave.html", "洞窟", (18, 40), [("地下1階", 60), ("地下2階", 60)], True, []),
    _JaArea("monsters-castle.html", "魔王の城", (35, 65), [("ステータス一覧", 100)], True, []),
    _JaArea(
        "monsters-sea.html",
        "海",
        (12, 45),
        [("ステータス一覧", 100)],
        False,
        ["HP", "攻撃力", "守備力", "経験値", "ゴールド"],
    ),
]


def _monster_families(rng: random.Random, need: int) -> list[list[str]]:
    """Families of regular monster names (root, prefixed and suffixed forms)."""
    roots = list(_CLASSIC_ROOTS)
    seen: set[str] = set()
    families: list[list[str]] = []
    total = 0
    while total < need:
        root = roots.pop(0) if roots else _ja_root(rng)
        if root in seen:
            continue
        forms = [f"{p}{root}" for p in _MONSTER_PREFIXES] + [
            f"{root}{s}" for s in _MONSTER_SUFFIXES
        ]
        members = [root, *rng.sample(forms, rng.randint(2, 5))]
        if root == "スライム" and "スライムベス" not in members:
            members.insert(1, "スライムベス")  # the family the set is known by
        members = [m for m in members if m not in seen]
        seen.update(members)
        families.append(members)
        total += len(members)
    return families


def _ja_monster_pages(rng: random.Random) -> tuple[list[Page], list[str]]:
    """The five area pages, the metal page and the boss page; returns the metal roots too."""
    capacity = {a.file: sum(n for _, n in a.tables) for a in _JA_AREAS}
    families = _monster_families(rng, sum(capacity.values()) + 40)
    placed: dict[str, list[tuple[str, dict[str, int]]]] = {a.file: [] for a in _JA_AREAS}
    areas = {a.file: a for a in _JA_AREAS}
    metal_roots: list[str] = ["スライム"]
    for members in families:
        open_areas = [f for f in capacity if len(placed[f]) < capacity[f]]
        if not open_areas:
            break
        home = rng.choice(open_areas)
        low, high = areas[home].levels
        base = _monster_stats(rng, rng.randint(low, high))
        for member in members:
            open_areas = [f for f in capacity if len(placed[f]) < capacity[f]]
            if not open_areas:
                break
            target = home if home in open_areas and rng.random() < 0.75 else rng.choice(open_areas)
            stats = base if member == members[0] else _sibling_stats(rng, base)
            placed[target].append((member, stats))
        if len(metal_roots) < 30 and members[0] not in metal_roots and rng.random() < 0.4:
            metal_roots.append(members[0])
    pages: list[Page] = []
    number = 0
    for area in _JA_AREAS:
        entries = placed[area.file]
        rng.shuffle(entries)
        columns = area.columns or _JA_MONSTER_COLUMNS
        head = ([NO_COLUMN] if area.numbered else []) + ["名前", *columns]
        tables = []
        start = 0
        for caption, size in area.tables:
            rows = []
            for name, stats in entries[start : start + size]:
                number += area.numbered
                cells = ([str(number)] if area.numbered else []) + [name]
                rows.append(cells + [str(stats[c]) for c in columns])
            tables.append(Table(caption, head, rows))
            start += size
        pages.append(
            Page(
                file=area.file,
                title=f"{area.place}のモンスター図鑑 - 冒険の書 攻略データベース",
                h1=f"{area.place}のモンスター図鑑",
                intro=(
                    f"{area.place}に出現する主なモンスターの能力値をまとめた一覧です。"
                    "数値は通常プレイ時のもので、リメイク版では異なる場合があります。"
                    + (
                        "図鑑番号（No.）はモンスター図鑑全体の通し番号です。"
                        if area.numbered
                        else ""
                    )
                ),
                name_column="名前",
                noun="モンスター",
                list_name=f"{area.place}のモンスター一覧",
                lang="ja",
                tables=tables,
                numbered="monster" if area.numbered else "",
                reverse_columns=("HP", "攻撃力", "守備力", "経験値", "ゴールド"),
                outro="出現率や落とすアイテムは別のページにまとめています。",
            )
        )
    while len(metal_roots) < 30:
        root = _ja_root(rng, 2, 3)
        if all(root not in p for p in metal_roots) and not any(
            root == row.name for page in pages for row in page.rows()
        ):
            metal_roots.append(root)
    metal_rows = []
    for root in metal_roots:
        base = _monster_stats(rng, 30, metal=True)
        for prefix in _METAL_PREFIXES:
            stats = base if prefix == "メタル" else _sibling_stats(rng, base)
            metal_rows.append([f"{prefix}{root}", *(str(stats[c]) for c in _JA_MONSTER_COLUMNS)])
    rng.shuffle(metal_rows)
    pages.append(
        Page(
            file="monsters-metal.html",
            title="メタル系モンスター図鑑 - 冒険の書 攻略データベース",
            h1="メタル系モンスター図鑑",
            intro=(
                "守備力とすばやさが高く、倒すと大量の経験値が手に入るメタル系モンスターの一覧です。"
                "すぐに逃げてしまうので会心の一撃を狙いましょう。"
            ),
            name_column="名前",
            noun="モンスター",
            list_name="メタル系モンスター一覧",
            lang="ja",
            tables=[Table("メタル系の能力値", ["名前", *_JA_MONSTER_COLUMNS], metal_rows)],
            reverse_columns=("経験値", "ゴールド", "攻撃力"),
        )
    )
    pages.append(_ja_boss_page(rng, number, {row.name for p in pages for row in p.rows()}))
    return pages, metal_roots


def _ja_boss_page(rng: random.Random, number: int, taken: set[str]) -> Page:
    titles = ["魔王", "大魔王", "邪神", "覇王", "冥王", "真"]
    rows: list[list[str]] = []
    while len(rows) < 60:
        root = _ja_root(rng, 3, 4)
        members = [root, *(f"{t}{root}" for t in rng.sample(titles, rng.randint(1, 2)))]
        if len(rows) + len(members) > 60:
            members = members[: 60 - len(rows)]
        if any(m in taken for m in members):
            continue
        level = rng.randint(50, 99)
        base = {
            "HP": round(level * rng.uniform(12, 90)),
            "MP": rng.randint(50, 999),
            "攻撃力": round(level * rng.uniform(2.5, 5.0)),
            "守備力": round(level * rng.uniform(1.5, 3.5)),
            "すばやさ": round(level * rng.uniform(0.8, 2.5)),
            "経験値": round(level * level * rng.uniform(3, 9)),
            "ゴールド": round(level * rng.uniform(20, 80)),
        }
        for member in members:
            taken.add(member)
            stats = base if member == root else _sibling_stats(rng, base)
            rows.append([member, *(str(stats[c]) for c in _JA_MONSTER_COLUMNS)])
    rng.shuffle(rows)
    numbered = [[str(number + i + 1), *row] for i, row in enumerate(rows)]
    return Page(
        file="bosses.html",
        title="ボスモンスター図鑑 - 冒険の書 攻略データベース",
        h1="ボスモンスター図鑑",
        intro=(
            "物語の節目で戦うボスモンスターの能力値です。図鑑番号（No.）は通常のモンスターから"
            "続く通し番号です。HPは1回目の戦闘のものです。"
        ),
        name_column="名前",
        noun="ボス",
        list_name="ボスモンスター一覧",
        lang="ja",
        tables=[Table("ボスの能力値", [NO_COLUMN, "名前", *_JA_MONSTER_COLUMNS], numbered)],
        numbered="monster",
        reverse_columns=("HP", "経験値", "ゴールド", "攻撃力"),
    )


_MATERIALS = [
    "ブロンズ", "アイアン", "スチール", "シルバー", "ミスリル", "オリハルコン", "プラチナ",
    "ドラゴン", "ホーリー", "ダーク", "クリスタル", "ルーン", "デーモン", "エルフ", "ウッド",
    "ストーン", "サンダー", "フレイム", "アイス",
]  # fmt: skip
_WEAPON_TYPES = [
    "ソード", "ロングソード", "ショートソード", "ブロードソード", "ナイフ", "ダガー", "アックス",
    "バトルアックス", "スピア", "ランス", "ボウ", "ロングボウ", "ロッド", "スタッフ", "ハンマー",
    "ウォーハンマー", "クロー", "ウィップ", "ブーメラン", "サーベル",
]  # fmt: skip
_WEAPON_EFFECTS = [
    "会心率アップ", "炎の追加ダメージ", "氷の追加ダメージ", "雷の追加ダメージ", "2回攻撃",
    "ドラゴン系に強い", "眠りの追加効果", "毒の追加効果", "与えたダメージの一部を吸収",
    "メタル系に強い",
]  # fmt: skip
_BODY_TYPES = [
    "アーマー",
    "メイル",
    "チェインメイル",
    "プレートメイル",
    "ローブ",
    "マント",
    "ベスト",
]
_HEAD_TYPES = [
    "シールド",
    "ラウンドシールド",
    "タワーシールド",
    "ヘルム",
    "フルヘルム",
    "ガントレット",
]
_ARMOR_EFFECTS = [
    "炎のダメージを軽減", "氷のダメージを軽減", "毒を防ぐ", "眠りを防ぐ", "呪文のダメージを軽減",
    "歩くとHPが回復", "混乱を防ぐ", "即死を防ぐ",
]  # fmt: skip


def _price(rng: random.Random, strength: float) -> int:
    raw = strength * strength * rng.uniform(0.5, 1.6) + rng.randint(0, 40)
    step = 5 if raw < 1000 else 10
    return max(5, round(raw / step) * step)


def _gear_rows(
    rng: random.Random,
    types: list[str],
    count: int,
    stat: Callable[[int, int], int],
    effects: list[str],
    taken: set[str],
    upgraded: int = 0,
) -> list[list[str]]:
    combos = [(m, t) for m in range(len(_MATERIALS)) for t in range(len(types))]
    rng.shuffle(combos)
    rows = []
    for m, t in combos:
        if len(rows) == count - upgraded:
            break
        name = f"{_MATERIALS[m]}{types[t]}"
        if name in taken:
            continue
        taken.add(name)
        power = stat(m, t)
        effect = "なし" if rng.random() < 0.55 else rng.choice(effects)
        rows.append([name, str(power), str(_price(rng, power)), effect])
    for row in rng.sample(rows, upgraded):  # 改: a better copy of a weapon in the same list
        name = f"{row[0]}改"
        taken.add(name)
        power = int(row[1]) + rng.randint(3, 12)
        rows.append([name, str(power), str(_price(rng, power)), rng.choice(effects)])
    rng.shuffle(rows)
    return rows


def _ja_gear_pages(rng: random.Random, taken: set[str]) -> list[Page]:
    weapons = _gear_rows(
        rng,
        _WEAPON_TYPES,
        110,
        lambda m, t: 5 + m * 6 + t % 7 * 3 + rng.randint(0, 9),
        _WEAPON_EFFECTS,
        taken,
        upgraded=12,
    )
    weapon_rows = [[str(i + 1), *row] for i, row in enumerate(weapons)]
    body = _gear_rows(
        rng,
        _BODY_TYPES,
        50,
        lambda m, t: 3 + m * 4 + t * 2 + rng.randint(0, 7),
        _ARMOR_EFFECTS,
        taken,
    )
    head = _gear_rows(
        rng, _HEAD_TYPES, 50, lambda m, t: 1 + m * 3 + t + rng.randint(0, 5), _ARMOR_EFFECTS, taken
    )
    gear_columns = ["名前", "攻撃力", "値段", "効果"]
    armor_columns = ["名前", "守備力", "値段", "効果"]
    return [
        Page(
            file="weapons.html",
            title="武器一覧 - 冒険の書 攻略データベース",
            h1="武器一覧",
            intro=(
                "武器屋で買える武器と宝箱から手に入る武器の一覧です。値段は武器屋での買値で、"
                "売るときはこの半額になります。「改」は鍛冶屋で強化したものです。"
            ),
            name_column="名前",
            noun="武器",
            list_name="武器一覧",
            lang="ja",
            tables=[Table("武器のデータ", [NO_COLUMN, *gear_columns], weapon_rows)],
            numbered="weapon",
            reverse_columns=("値段",),
        ),
        Page(
            file="armor.html",
            title="防具一覧 - 冒険の書 攻略データベース",
            h1="防具一覧",
            intro=(
                "鎧と盾・兜の守備力と値段をまとめました。値段は防具屋での買値です。"
                "特殊な効果を持つ防具は効果の欄に書いています。"
            ),
            name_column="名前",
            noun="防具",
            list_name="防具一覧",
            lang="ja",
            tables=[Table("鎧", armor_columns, body), Table("盾・兜", armor_columns, head)],
            reverse_columns=("値段",),
        ),
    ]


_HEAL_BASES = {
    "ポーション": "HP", "ハーブ": "HP", "フルーツ": "HP", "ゼリー": "HP", "ハニー": "HP",
    "エーテル": "MP", "ドリンク": "MP", "ティー": "MP", "ソーダ": "MP",
    "キャンディ": "状態", "ミルク": "状態", "リーフ": "状態",
}  # fmt: skip
_HEAL_PREFIXES = {"": 1.0, "ハイ": 2.0, "エクス": 4.0, "メガ": 3.0, "ミニ": 0.5, "スーパー": 2.5}
_CURES = ["毒を治す", "麻痺を治す", "眠りから覚ます", "混乱を治す", "呪いを解く"]
_BATTLE_BASES = ["ボム", "スクロール", "シード", "パウダー", "オイル", "ジェム", "ダーツ"]
_BATTLE_PREFIXES = ["", "ファイア", "アイス", "サンダー", "ホーリー", "ダーク", "メガ", "ミニ"]
_SEED_STATS = ["ちから", "すばやさ", "守備力", "最大HP", "最大MP", "かしこさ"]


def _ja_item_page(rng: random.Random, taken: set[str]) -> Page:
    heal: list[list[str]] = []
    combos = [(p, b) for p in _HEAL_PREFIXES for b in _HEAL_BASES]
    rng.shuffle(combos)
    for prefix, base in combos:
        name = f"{prefix}{base}"
        if len(heal) == 60 or name in taken:
            continue
        taken.add(name)
        scale = _HEAL_PREFIXES[prefix]
        kind = _HEAL_BASES[base]
        amount = round(rng.randint(20, 45) * scale)
        if kind == "状態":
            effect = rng.choice([*_CURES, f"HPとMPを{amount}回復"])
        else:
            effect = f"{kind}を{amount}回復"
        heal.append([name, str(_price(rng, 4 + amount / 2)), effect])
    battle: list[list[str]] = []
    combos = [(p, b) for p in _BATTLE_PREFIXES for b in _BATTLE_BASES]
    rng.shuffle(combos)
    for prefix, base in combos:
        name = f"{prefix}{base}"
        if len(battle) == 40 or name in taken:
            continue
        taken.add(name)
        power = rng.randint(10, 160)
        if base == "ボム":
            effect = f"敵全体に{power}のダメージ"
        elif base in ("スクロール", "ダーツ"):
            effect = f"敵1体に{power}のダメージ"
        elif base == "シード":
            effect = f"{rng.choice(_SEED_STATS)}が{rng.randint(1, 5)}上がる"
        else:
            effect = rng.choice(["敵の守備力を下げる", "敵を眠らせる", "味方の攻撃力を上げる"])
        battle.append([name, str(_price(rng, 6 + power / 3)), effect])
    columns = [NO_COLUMN, "名前", "値段", "効果"]
    number = iter(range(1, 101))
    return Page(
        file="items.html",
        title="道具一覧 - 冒険の書 攻略データベース",
        h1="道具一覧",
        intro=(
            "道具屋で買える消費アイテムの一覧です。回復アイテムは戦闘中でも使えます。"
            "No.は道具一覧での通し番号です。"
        ),
        name_column="名前",
        noun="道具",
        list_name="道具一覧",
        lang="ja",
        tables=[
            Table("回復アイテム", columns, [[str(next(number)), *row] for row in heal]),
            Table("戦闘アイテム", columns, [[str(next(number)), *row] for row in battle]),
        ],
        numbered="item",
        reverse_columns=("値段",),
    )


_SPELL_LEVELS = ["", "ラ", "ミ", "ゾーマ", "ダイン", "ナズン", "ラマ", "ガン"]
_ELEMENTS = ["炎", "氷", "雷", "風", "爆発", "光", "闇", "大地"]
_TARGETS = ["敵1体", "敵1グループ", "敵全体"]


def _ja_spell_page(rng: random.Random, taken: set[str]) -> Page:
    rows: list[list[str]] = []
    while len(rows) < 90:
        root = _ja_root(rng, 2, 2)
        heal = rng.random() < 0.25
        forms = [f"{root}{s}" for s in rng.sample(_SPELL_LEVELS, rng.randint(3, 4))]
        if rng.random() < 0.5:
            forms.append(f"ベ{root}マ")
        forms = [f for f in forms if f not in taken][: 90 - len(rows)]
        element = rng.choice(_ELEMENTS)
        for rank, name in enumerate(forms, 1):
            taken.add(name)
            mp = rank * rng.randint(2, 6) + rng.randint(0, 3)
            power = rank * rng.randint(15, 70) + rng.randint(0, 30)
            level = min(99, rank * rng.randint(4, 12) + rng.randint(1, 5))
            if heal:
                effect = rng.choice(["味方1人のHPを回復", "味方全員のHPを回復"])
            else:
                effect = f"{rng.choice(_TARGETS)}に{element}のダメージ"
            rows.append([name, str(mp), str(power), str(level), effect])
    rng.shuffle(rows)
    return Page(
        file="spells.html",
        title="呪文一覧 - 冒険の書 攻略データベース",
        h1="呪文一覧",
        intro=(
            "主人公たちが覚える攻撃呪文と回復呪文の一覧です。威力は平均的なダメージ量または回復量で、"
            "習得レベルは最も早く覚える職業のものです。"
        ),
        name_column="名前",
        noun="呪文",
        list_name="呪文一覧",
        lang="ja",
        tables=[Table("呪文のデータ", ["名前", "消費MP", "威力", "習得レベル", "効果"], rows)],
        reverse_columns=("威力",),
    )


_GEMS = [
    "ルビー", "サファイア", "エメラルド", "トパーズ", "ガーネット", "オパール", "パール", "ダイヤ",
    "アメジスト", "ムーン", "スター", "サン", "エンジェル", "デビル", "スピード", "ガード",
    "ラッキー",
]  # fmt: skip
_ACCESSORY_TYPES = [
    "リング", "アミュレット", "ペンダント", "ブレスレット", "イヤリング", "アンクレット",
    "ブローチ", "チョーカー", "タリスマン",
]  # fmt: skip
_ACCESSORY_EFFECTS = [
    "毒を防ぐ", "眠りを防ぐ", "麻痺を防ぐ", "混乱を防ぐ", "呪いを防ぐ", "即死を防ぐ",
    "MPの消費を抑える", "会心率アップ", "歩くとHPが回復", "獲得経験値アップ", "なし",
]  # fmt: skip


def _ja_accessory_page(rng: random.Random, taken: set[str]) -> Page:
    combos = [f"{g}{t}" for g in _GEMS for t in _ACCESSORY_TYPES]
    rng.shuffle(combos)
    rows = []
    for name in combos:
        if len(rows) == 90 or name in taken:
            continue
        taken.add(name)
        defense = rng.randint(0, 40)
        speed = rng.randint(0, 60)
        price = _price(rng, 10 + defense + speed)
        rows.append([name, str(defense), str(speed), str(price), rng.choice(_ACCESSORY_EFFECTS)])
    return Page(
        file="accessories.html",
        title="アクセサリー一覧 - 冒険の書 攻略データベース",
        h1="アクセサリー一覧",
        intro=(
            "身につけるだけで効果がある装飾品の一覧です。アクセサリーは二つまで装備できます。"
            "値段が空欄のものは非売品ですが、この表には売っているものだけを載せています。"
        ),
        name_column="名前",
        noun="アクセサリー",
        list_name="アクセサリー一覧",
        lang="ja",
        tables=[Table("装飾品のデータ", ["名前", "守備力", "すばやさ", "値段", "効果"], rows)],
        reverse_columns=("値段",),
    )


def _ja_ask_columns(row: Row, synonyms: bool) -> list[str]:
    skip = {row.page.name_column, NO_COLUMN}
    columns = [c for c in row.columns if c not in skip]
    return [c for c in columns if c in JA_SYNONYMS] if synonyms else columns


def _ja_column_question(rng: random.Random, row: Row, name: str) -> tuple[str, tuple[str, ...]]:
    column = rng.choice(_ja_ask_columns(row, synonyms=False))
    template = rng.choice(_JA_ASK_BY_COLUMN.get(column, _JA_ASK))
    return template.format(name=name, col=column), (row.cells[column],)


def build_ja(seed: int = SEED) -> EvalSet:
    """The Japanese set (see the module docstring)."""
    rng = random.Random(seed)
    pages, _metal = _ja_monster_pages(rng)
    taken = {row.name for page in pages for row in page.rows()}
    pages += _ja_gear_pages(rng, taken)
    pages.append(_ja_item_page(rng, taken))
    pages.append(_ja_spell_page(rng, taken))
    pages.append(_ja_accessory_page(rng, taken))
    builder = _Builder("ja-tables", "ja", rng, pages)
    kana_turns, typo_turns = _Turns(KANA_VARIANTS), _Turns(TYPO_VARIANTS)

    def templated(rng: random.Random, row: Row, strict: bool) -> Made:
        query, answers = _ja_column_question(rng, row, row.name)
        return query, answers, ""

    def hiragana(rng: random.Random, row: Row, strict: bool) -> Made:
        name = to_hiragana(row.name)
        if name == row.name or builder.is_name(name):
            return None
        query, answers = _ja_column_question(rng, row, name)
        return query, answers, "hiragana"

    def kana(rng: random.Random, row: Row, strict: bool) -> Made:
        for kind in kana_turns.order(strict):
            name = kana_variant(rng, row.name, kind)
            if name is None or name == row.name:
                continue
            if kind != "half_width" and (builder.is_name(name) or not plausible_kana(name)):
                continue
            query, answers = _ja_column_question(rng, row, name)
            kana_turns.done()
            return query, answers, kind
        return None

    def typo(rng: random.Random, row: Row, strict: bool) -> Made:
        for kind in typo_turns.order(strict):
            name = ja_typo(rng, row.name, kind)
            if name is None or name == row.name or builder.is_name(name):
                continue
            if not plausible_kana(name):
                continue
            query, answers = _ja_column_question(rng, row, name)
            typo_turns.done()
            return query, answers, kind
        return None

    def synonym(rng: random.Random, row: Row, strict: bool) -> Made:
        columns = _ja_ask_columns(row, synonyms=True)
        if not columns:
            return None
        column = rng.choice(columns)
        word = rng.choice(JA_SYNONYMS[column])
        template = rng.choice(_JA_SYNONYM_BY_WORD.get(word, _JA_SYNONYM_ASK))
        return template.format(name=row.name, col=word), (row.cells[column],), ""

    def number_lookup(rng: random.Random, row: Row, strict: bool) -> Made:
        page = row.page
        template = rng.choice(_JA_NUMBER_ASK)
        query = template.format(list=page.list_name, no=row.cells[NO_COLUMN], noun=page.noun)
        return query, (row.name,), ""

    def reverse(rng: random.Random, row: Row, strict: bool) -> Made:
        columns = [c for c in row.page.reverse_columns if builder.unique_value(c, row.cells[c])]
        if not columns:
            return None
        column = rng.choice(columns)
        template = rng.choice(_JA_REVERSE_ASK)
        query = template.format(col=column, value=row.cells[column], noun=row.page.noun)
        return query, (row.name,), ""

    numbered = [p for p in pages if p.numbered]
    plan: list[tuple[str, int, list[Page], Maker]] = [
        ("templated", 100, pages, templated),
        ("hiragana", 100, pages, hiragana),
        ("long_vowel_small_kana", 100, pages, kana),
        ("typo", 100, pages, typo),
        ("synonym", 100, pages, synonym),
        ("number_lookup", 100, numbered, number_lookup),
        ("reverse", 100, pages, reverse),
    ]
    for category, count, eligible, make in plan:
        builder.fill(category, count, eligible, make)
    return builder.build(JA_CATEGORIES)


# --- the English set --------------------------------------------------------------------
EN_WORDS: dict[str, str] = {
    "Weight (g)": "weight",
    "Weight (kg)": "weight",
    "Mass (kg)": "mass",
    "Price (USD)": "price",
    "Battery (mAh)": "battery capacity",
    "Battery (kWh)": "battery capacity",
    "Battery (h)": "battery life",
    "Battery life (h)": "battery life",
    "Screen (in)": "screen size",
    "Released": "release year",
    "RAM (GB)": "RAM",
    "Storage (GB)": "storage",
    "Driver (mm)": "driver size",
    "Range (km)": "range",
    "Top speed (km/h)": "top speed",
    "Population": "population",
    "Area (km²)": "area",
    "Elevation (m)": "elevation",
    "Founded": "founding year",
    "Density (g/cm³)": "density",
    "Melting point (°C)": "melting point",
    "Tensile strength (MPa)": "tensile strength",
    "Cost (USD/kg)": "cost per kilogram",
}
"""How a question names each English column."""
EN_SYNONYMS: dict[str, tuple[str, ...]] = {
    "Weight (g)": ("mass",),
    "Weight (kg)": ("mass",),
    "Mass (kg)": ("weight",),
    "Price (USD)": ("cost",),
    "Cost (USD/kg)": ("price per kilogram",),
    "Population": ("inhabitants", "number of residents"),
    "Elevation (m)": ("altitude",),
    "Released": ("launch year",),
    "Founded": ("year of establishment",),
    "Screen (in)": ("display diagonal",),
    "Storage (GB)": ("disk capacity",),
    "Top speed (km/h)": ("maximum velocity",),
}
_EN_ASK = (
    "What is the {col} of {the}{name}?",
    "{name} {col}?",
    "Tell me the {col} of {the}{name}.",
    "What {col} does {the}{name} have?",
)
_EN_SYNONYM_BY_WORD = {
    "cost": ("How much does {the}{name} cost?", "What is the cost of {the}{name}?"),
    "inhabitants": ("How many inhabitants does {name} have?",),
    "number of residents": ("What is the number of residents of {name}?",),
    "altitude": ("At what altitude is {name}?", "What is the altitude of {name}?"),
    "mass": ("What is the mass of {the}{name}?", "Tell me the mass of {the}{name}."),
    "weight": ("What is the weight of {the}{name}?", "How much does {the}{name} weigh?"),
}
_EN_SYNONYM_ASK = ("What is the {col} of {the}{name}?", "Tell me the {col} of {the}{name}.")
_EN_NUMBER_ASK = (
    "Which {noun} is No. {no}?",
    "What is No. {no} in the {list}?",
    "Name the {noun} listed as No. {no}.",
)
_EN_REVERSE_ASK = (
    "Which {noun} has {a}{col} of {value}{unit}?",
    "Which {noun} has {col} {value}{unit}?",
)


def column_unit(column: str) -> str:
    if " (" not in column:
        return ""
    unit = column.split(" (", 1)[1].rstrip(")")
    return "" if unit in ("USD/kg",) else f" {unit}"


@dataclass
class _EnProduct:
    file: str
    title: str
    intro: str
    noun: str
    list_name: str
    brands: list[str]
    letters: str
    numbers: list[int]
    suffixes: list[str]
    count: int
    columns: list[str]
    make: Callable[[random.Random], dict[str, str]]
    numbered: bool
    reverse: tuple[str, ...]


def _phone(rng: random.Random) -> dict[str, str]:
    return {
        "Weight (g)": str(rng.randint(140, 240)),
        "Price (USD)": str(rng.randint(15, 160) * 10 - 1),
        "Battery (mAh)": str(rng.randint(2500, 6000)),
        "Screen (in)": f"{rng.randint(50, 69) / 10:.1f}",
        "Released": str(rng.randint(2018, 2024)),
    }


def _laptop(rng: random.Random) -> dict[str, str]:
    return {
        "Weight (kg)": f"{rng.randint(95, 290) / 100:.2f}",
        "Price (USD)": str(rng.randint(50, 400) * 10 - 1),
        "RAM (GB)": str(rng.choice([8, 16, 16, 32, 64])),
        "Storage (GB)": str(rng.choice([256, 512, 512, 1024, 2048])),
        "Battery life (h)": str(rng.randint(5, 22)),
    }


def _headphone(rng: random.Random) -> dict[str, str]:
    return {
        "Weight (g)": str(rng.randint(4, 390)),
        "Price (USD)": str(rng.randint(5, 60) * 10 - 1),
        "Battery (h)": str(rng.randint(5, 60)),
        "Driver (mm)": str(rng.choice([6, 8, 10, 11, 12, 30, 40, 45, 50])),
    }


def _car(rng: random.Random) -> dict[str, str]:
    return {
        "Mass (kg)": str(rng.randint(1200, 2600)),
        "Price (USD)": str(rng.randint(240, 1300) * 100 - 10),
        "Range (km)": str(rng.randint(250, 720)),
        "Top speed (km/h)": str(rng.randint(140, 260)),
        "Battery (kWh)": str(rng.randint(40, 110)),
    }


_EN_PRODUCTS = [
    _EnProduct(
        "smartphones.html",
        "Smartphone specifications",
        "Launch prices in US dollars and measured weights of the smartphones we reviewed "
        "between 2018 and 2024. Screen sizes are diagonals in inches.",
        "smartphone",
        "smartphone list",
        ["Nova", "Orion", "Zeta", "Lumen", "Vega", "Astra", "Helix"],
        "XSAZM",
        [10, 20, 100, 200, 210, 300, 7, 8, 9],
        ["Pro", "Pro Max", "Lite", "Plus", "Mini", "5G", "Ultra"],
        65,
        ["Weight (g)", "Price (USD)", "Battery (mAh)", "Screen (in)", "Released"],
        _phone,
        True,
        ("Price (USD)", "Battery (mAh)"),
    ),
    _EnProduct(
        "laptops.html",
        "Laptop line-up",
        "Every laptop in the current catalogue with its base configuration. Weights are for "
        "the base model; prices are list prices in US dollars.",
        "laptop",
        "laptop line-up",
        ["Model", "Aero", "Vector", "Summit", "Atlas"],
        "XGTE",
        [13, 14, 15, 16, 300, 500, 5],
        ["Pro", "Air", "OLED", "Max", "Studio"],
        60,
        ["Weight (kg)", "Price (USD)", "RAM (GB)", "Storage (GB)", "Battery life (h)"],
        _laptop,
        False,
        ("Price (USD)",),
    ),
    _EnProduct(
        "headphones.html",
        "Wireless headphones compared",
        "Earbuds and over-ear headphones with their weight, price and battery life as "
        "measured in our lab.",
        "headphone model",
        "headphone comparison",
        ["Sonic", "Echo", "Pulse", "Aura", "Beat"],
        "QWH",
        [5, 50, 7, 70, 3, 30],
        ["Pro", "ANC", "Lite", "Sport", "Max"],
        55,
        ["Weight (g)", "Price (USD)", "Battery (h)", "Driver (mm)"],
        _headphone,
        True,
        ("Price (USD)",),
    ),
    _EnProduct(
        "electric-cars.html",
        "Electric car specifications",
        "Kerb mass, list price, rated range and battery capacity of electric cars on sale "
        "this year. Ranges follow the WLTP cycle.",
        "car",
        "electric car table",
        ["Volta", "Ionix", "Ampere", "Spark"],
        "ERK",
        [3, 30, 4, 40, 6, 60],
        ["Long Range", "Performance", "Standard", "AWD"],
        55,
        ["Mass (kg)", "Price (USD)", "Range (km)", "Top speed (km/h)", "Battery (kWh)"],
        _car,
        False,
        ("Range (km)", "Price (USD)"),
    ),
]


def _en_product_page(rng: random.Random, spec: _EnProduct, taken: set[str]) -> Page:
    rows: list[list[str]] = []
    while len(rows) < spec.count:
        base = f"{rng.choice(spec.brands)} {rng.choice(spec.letters)}{rng.choice(spec.numbers)}"
        members = [base, *(f"{base} {s}" for s in rng.sample(spec.suffixes, rng.randint(1, 3)))]
        if base in taken:
            continue
        values = spec.make(rng)
        for member in members[: spec.count - len(rows)]:
            taken.add(member)
            own = values if member == base else _en_sibling(rng, values)
            rows.append([member, *(own[c] for c in spec.columns)])
    rng.shuffle(rows)
    name_column = "Model"
    columns = [name_column, *spec.columns]
    if spec.numbered:
        columns = [NO_COLUMN, *columns]
        rows = [[str(i + 1), *row] for i, row in enumerate(rows)]
    return Page(
        file=spec.file,
        title=f"{spec.title} | Spec Archive",
        h1=spec.title,
        intro=spec.intro,
        name_column=name_column,
        noun=spec.noun,
        list_name=spec.list_name,
        lang="en",
        tables=[Table("", columns, rows)],
        numbered=spec.file if spec.numbered else "",
        reverse_columns=spec.reverse,
        article="the ",
    )


_EN_KEEP = ("RAM (GB)", "Storage (GB)", "Driver (mm)")


def _en_sibling(rng: random.Random, values: dict[str, str]) -> dict[str, str]:
    """A variant's values, close to the base model's: prices and counts a few percent off,
    decimals a step or two off or with their two decimals swapped (1.35 beside 1.53)."""
    out = {}
    for key, value in values.items():
        if key in _EN_KEEP:
            out[key] = value if rng.random() < 0.6 else str(int(value) * 2)
        elif key == "Released":
            out[key] = str(int(value) + rng.randint(0, 1))
        elif "." in value:
            whole, frac = value.split(".")
            if len(frac) == 2 and frac[0] != frac[1] and rng.random() < 0.4:
                out[key] = f"{whole}.{frac[::-1]}"
            else:
                step = 10 ** -len(frac)
                shifted = float(value) + rng.choice([-2, -1, 1, 2]) * step
                out[key] = f"{shifted:.{len(frac)}f}"
        else:
            number = int(value)
            out[key] = str(max(1, number + rng.randint(-3, 3) * max(1, number // 40)))
    return out


_CITY_HEADS = ["Al", "Bel", "Car", "Dun", "El", "Fal", "Gar", "Hol", "Kel", "Lan", "Mar", "Nor"]
_CITY_HEADS += ["Os", "Pen", "Ros", "Sal", "Tam", "Ul", "Ver", "Wen", "Yar", "Bram", "Cor", "Ash"]
_CITY_TAILS = ["den", "ton", "mor", "ford", "wick", "haven", "ridge", "field", "brook", "stead"]
_CITY_TAILS += ["gate", "mouth", "bury", "holm", "dale", "more"]
_CITY_FORMS = [
    "Port {}", "North {}", "South {}", "New {}", "Lake {}", "Fort {}", "{} Springs", "{} Falls",
    "{}ville", "{} Heights",
]  # fmt: skip


def _en_city_page(rng: random.Random, taken: set[str]) -> Page:
    rows: list[list[str]] = []
    while len(rows) < 70:
        root = rng.choice(_CITY_HEADS) + rng.choice(_CITY_TAILS)
        members = [root, *(f.format(root) for f in rng.sample(_CITY_FORMS, rng.randint(1, 3)))]
        if any(m in taken for m in members):
            continue
        population = rng.randint(5_000, 900_000)
        for member in members[: 70 - len(rows)]:
            taken.add(member)
            pop = (
                population
                if member == root
                else max(900, round(population * rng.uniform(0.05, 1.3)))
            )
            rows.append(
                [
                    member,
                    str(pop),
                    f"{rng.randint(40, 9000) / 10:.1f}",
                    str(rng.randint(0, 2400)),
                    str(rng.randint(1150, 1990)),
                ]
            )
    rows.sort(key=lambda r: -int(r[1]))
    numbered = [[str(i + 1), *row] for i, row in enumerate(rows)]
    return Page(
        file="cities.html",
        title="City statistics | Spec Archive",
        h1="City statistics",
        intro=(
            "Cities of the region ranked by population at the last census, with their land "
            "area, elevation above sea level and the year each was founded."
        ),
        name_column="City",
        noun="city",
        list_name="city ranking",
        lang="en",
        tables=[
            Table(
                "Cities by population",
                [NO_COLUMN, "City", "Population", "Area (km²)", "Elevation (m)", "Founded"],
                numbered,
            )
        ],
        numbered="cities.html",
        reverse_columns=("Population", "Area (km²)", "Elevation (m)"),
    )


_ALLOYS = ["Steel", "Aluminium", "Titanium", "Copper", "Brass", "Bronze", "Nickel", "Magnesium"]
_ALLOY_SUFFIXES = ["HT", "T6", "Annealed", "Cold Drawn", "Cast"]


def _en_material_page(rng: random.Random, taken: set[str]) -> Page:
    rows: list[list[str]] = []
    while len(rows) < 55:
        base = (
            f"{rng.choice(_ALLOYS)} {rng.randint(10, 79) * 100 + rng.choice([20, 45, 61, 75, 40])}"
        )
        if base in taken:
            continue
        members = [base, *(f"{base} {s}" for s in rng.sample(_ALLOY_SUFFIXES, rng.randint(1, 2)))]
        density = rng.randint(170, 900) / 100
        melting = rng.randint(420, 1700)
        for member in members[: 55 - len(rows)]:
            taken.add(member)
            rows.append(
                [
                    member,
                    f"{density + rng.randint(-2, 2) / 100:.2f}",
                    str(melting + rng.randint(-15, 15)),
                    str(rng.randint(90, 1400)),
                    f"{rng.randint(15, 4000) / 100:.2f}",
                ]
            )
    rng.shuffle(rows)
    return Page(
        file="materials.html",
        title="Engineering materials | Spec Archive",
        h1="Engineering materials",
        intro=(
            "Typical properties of the metals and alloys we stock. Costs are per kilogram for "
            "bar stock and change with the metal markets."
        ),
        name_column="Material",
        noun="material",
        list_name="materials table",
        lang="en",
        tables=[
            Table(
                "Properties",
                [
                    "Material",
                    "Density (g/cm³)",
                    "Melting point (°C)",
                    "Tensile strength (MPa)",
                    "Cost (USD/kg)",
                ],
                rows,
            )
        ],
        reverse_columns=("Tensile strength (MPa)", "Melting point (°C)"),
        article="",
    )


def _en_ask_columns(row: Row, synonyms: bool) -> list[str]:
    skip = {row.page.name_column, NO_COLUMN}
    columns = [c for c in row.columns if c not in skip]
    return [c for c in columns if c in EN_SYNONYMS] if synonyms else columns


def _en_column_question(rng: random.Random, row: Row, name: str) -> tuple[str, tuple[str, ...]]:
    column = rng.choice(_en_ask_columns(row, synonyms=False))
    template = rng.choice(_EN_ASK)
    query = template.format(col=EN_WORDS[column], the=row.page.article, name=name)
    return query, (row.cells[column],)


def build_en(seed: int = SEED) -> EvalSet:
    """The English set (see the module docstring)."""
    rng = random.Random(seed + 1)
    taken: set[str] = set()
    pages = [_en_product_page(rng, spec, taken) for spec in _EN_PRODUCTS]
    pages.insert(2, _en_city_page(rng, taken))
    pages.append(_en_material_page(rng, taken))
    builder = _Builder("en-tables", "en", rng, pages)
    turns = _Turns(TYPO_VARIANTS)

    def templated(rng: random.Random, row: Row, strict: bool) -> Made:
        query, answers = _en_column_question(rng, row, row.name)
        return query, answers, ""

    def typo(rng: random.Random, row: Row, strict: bool) -> Made:
        for kind in turns.order(strict):
            name = en_typo(rng, row.name, kind)
            if name is None or normalize(name) == normalize(row.name) or builder.is_name(name):
                continue
            query, answers = _en_column_question(rng, row, name)
            turns.done()
            return query, answers, kind
        return None

    def synonym(rng: random.Random, row: Row, strict: bool) -> Made:
        columns = _en_ask_columns(row, synonyms=True)
        if not columns:
            return None
        column = rng.choice(columns)
        word = rng.choice(EN_SYNONYMS[column])
        template = rng.choice(_EN_SYNONYM_BY_WORD.get(word, _EN_SYNONYM_ASK))
        query = template.format(col=word, the=row.page.article, name=row.name)
        return query, (row.cells[column],), ""

    def number_lookup(rng: random.Random, row: Row, strict: bool) -> Made:
        page = row.page
        template = rng.choice(_EN_NUMBER_ASK)
        query = template.format(noun=page.noun, no=row.cells[NO_COLUMN], list=page.list_name)
        return query, (row.name,), ""

    def reverse(rng: random.Random, row: Row, strict: bool) -> Made:
        columns = [c for c in row.page.reverse_columns if builder.unique_value(c, row.cells[c])]
        if not columns:
            return None
        column = rng.choice(columns)
        template = rng.choice(_EN_REVERSE_ASK)
        word = EN_WORDS[column]
        query = template.format(
            noun=row.page.noun,
            a="an " if word[0] in "aeiou" else "a ",
            col=word,
            value=row.cells[column],
            unit=column_unit(column),
        )
        return query, (row.name,), ""

    numbered = [p for p in pages if p.numbered]
    plan: list[tuple[str, int, list[Page], Maker]] = [
        ("templated", 50, pages, templated),
        ("synonym", 50, pages, synonym),
        ("typo", 50, pages, typo),
        ("number_lookup", 45, numbered, number_lookup),
        ("reverse", 50, pages, reverse),
    ]
    for category, count, eligible, make in plan:
        builder.fill(category, count, eligible, make)
    return builder.build(EN_CATEGORIES)


# --- writing ------------------------------------------------------------------------------
BUILDERS: dict[str, Callable[[int], EvalSet]] = {"ja-tables": build_ja, "en-tables": build_en}


def build_sets(seed: int = SEED) -> list[EvalSet]:
    return [BUILDERS[name](seed) for name in SET_NAMES]


def write_set(evalset: EvalSet, out_dir: str | Path) -> Path:
    """Write the set into `out_dir/<name>/`; stale pages of an earlier run are removed."""
    folder = Path(out_dir) / evalset.name
    files = evalset.files()
    pages = folder / "pages"
    pages.mkdir(parents=True, exist_ok=True)
    for old in pages.glob("*.html"):
        if f"pages/{old.name}" not in files:
            old.unlink()
    for relative, text in files.items():
        target = folder / relative
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8", newline="\n")
    return folder


def iter_summary(evalset: EvalSet) -> Iterator[str]:
    info = evalset.summary()
    yield (
        f"{evalset.name}: {info['pages']} pages, {info['rows']} rows, {info['questions']} questions"
    )
    per = info["per_category"]
    assert isinstance(per, dict)
    yield "  " + ", ".join(f"{c} {per.get(c, 0)}" for c in evalset.categories)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.table_sets",
        description="Write the table-row lookup evaluation sets (pages/*.html + queries.jsonl).",
    )
    parser.add_argument("out_dir", nargs="?", default=str(SETS_DIR), help=f"default {SETS_DIR}")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    for evalset in build_sets(args.seed):
        folder = write_set(evalset, args.out_dir)
        for line in iter_summary(evalset):
            print(line)
        print(f"  -> {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
