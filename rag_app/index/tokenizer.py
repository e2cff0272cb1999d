"""Japanese + English tokenizer for BM25 (fugashi/MeCab with unidic-lite).

Text is NFKC-normalised and lower-cased (width). Content words come from MeCab:
common nouns written with a kanji as UniDic's lemma (one spelling for a word's variants:
子ども is 子供, 打合せ is 打ち合わせ; a kana spelling stays as written, since MeCab
guesses its lemma from context), other nouns as written, verbs and adjectives in
dictionary form (so 倒した matches 倒す),
numerals and unknown words (English, codes; an English word as its Snowball stem, so
`expires` matches `expired`); every term is kana-folded (katakana →
hiragana, small kana → full size, no long-vowel mark), so スライム, すらいむ and
ｽﾗｲﾑ are one term. Context-free extras make names recallable whatever MeCab does:

- every kana run adds the character bigrams of its folded form, and every Latin word
  of 4+ letters its trigrams, as terms of their own field (prefix `GRAM`): MeCab
  splits unknown names differently by context (りゅう/おう vs りゅう/お/う) and cannot
  split a hiragana spelling of a katakana name at all, but n-grams are a function of
  the characters, so a query run inside a document run shares all its n-grams with
  it, and a one-character typo still shares most of them;
- every katakana run that MeCab split adds the whole run (メタルスライム), so the
  compound outranks documents holding only one part;
- a number right after a label (`HP: 90`, `No.57`, `HPが412`) adds a bound term
  (prefix `BOUND`, `hp#90`): a table row's numbers travel with their column names;
- a code name adds itself whole (`code_names`): a dotted path (`bisect.bisect_left`)
  and each snake_case part of it (`bisect_left`), which MeCab cuts into plain words
  (`bisect`, `left`) that every page about the module holds.

Field weights for the prefixed terms are applied at query time by the BM25 index.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Iterable

import fugashi
import Stemmer

from rag_app.limits import TOKENIZER_PIECE_CHARS, without_surrogates

# Bump when the rules change: stored token ids are then re-derived from text.
TOKENIZER_SIGNATURE = (
    "fugashi-unidic-lite/v7-kana-fold-grams-bound-code-names-en-stem-kanji-noun-lemma"
)

GRAM = "~"
"""Prefix of kana character-bigram terms (typo- and script-tolerant field)."""
BOUND = "="
"""Prefix of label#number terms."""
KEY = "@"
"""Prefix of a table row's whole key (its first column), folded: one term per row."""
MAX_KEY_CHARS = 40
KEY_SCAN_CHARS = 200
"""Row keys are looked for in the first this many characters of a query (bounded cost:
~8k set lookups for the longest query, 0.15 ms for a typical one)."""

_LATIN_TERM = re.compile(r"[a-z]+")
_stemmers = threading.local()


def stem(word: str) -> str:
    """An English word's Snowball stem (`freezing` → `freez`, `expires` → `expir`), as
    every Latin word of a text or query is indexed; other terms unchanged. One stemmer per
    thread: a PyStemmer object must not be shared between threads."""
    if not _LATIN_TERM.fullmatch(word):
        return word
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    return str(stemmer.stemWord(word))


_CONTENT_POS = frozenset({"名詞", "動詞", "形容詞", "接尾辞"})
_BASE_FORM_POS = frozenset({"動詞", "形容詞"})
_ORTH_BASE_FIELD = 10  # unidic feature index of orthBase (dictionary form as written)
_LEMMA_FIELD = 7  # unidic feature index of lemma (語彙素: one spelling for a word's variants)

_KATAKANA_RUN = re.compile(r"[ァ-ヺー]{2,}")
_KANA_RUN = re.compile(r"[ぁ-ゖ][ぁ-ゖー]*|[ァ-ヺー]+")
# A label (Latin word, katakana word or kanji compound) then at most a separator or a
# particle, then a number: HP: 90 / No.57 / HPが412 / 攻撃力 100. A katakana or kanji
# label starts at its run's first character, or its second when a Latin letter or digit
# stands before the first: a label must reach its run's end, so a later start finds
# nothing more, and trying each one backtracked from the run's end again (quadratic:
# 8,000 kanji took 2.2 s).
_KATA = "ァ-ヺー"
_KANJI = "\u4e00-\u9fff々"
_HAS_KANJI = re.compile(f"[{_KANJI}]")
_KANA_KANJI_WORD = re.compile(f"[\u3041-\u3096\u30a1-\u30faー{_KANJI}〆ヶ]+")
_BOUND_PAIR = re.compile(
    rf"(?<![a-z0-9_])([a-z][a-z_]*"
    rf"|(?:(?<![{_KATA}])|(?<=[a-z0-9_][{_KATA}]))[{_KATA}]{{2,}}"
    rf"|(?:(?<![{_KANJI}])|(?<=[a-z0-9_][{_KANJI}]))[{_KANJI}]+)"
    r"[ \t]*(?:[.:=][ \t]*|[がはの][ \t]*)?(\d[\d,]*(?:\.\d+)?)(?![\d.])"
)
_LATIN_WORD = re.compile(r"(?<![a-z])[a-z]{4,}(?![a-z])")
_NAME_RUN = re.compile(r"[a-z0-9_.]+")
_NAME_PART = re.compile(r"_*[a-z][a-z0-9_]*")
_DOTS = re.compile(r"\.{2,}")
MAX_NAME_CHARS = 160
"""Longer runs of name characters are not names (hashes, hostile input): no term."""
_QUOTED_CHAR = re.compile(r"(?<![A-Za-z0-9])['\"‘’“”`「『](\S)['\"‘’“”`」』](?![A-Za-z0-9])")
_SMALL_KANA = str.maketrans("ぁぃぅぇぉっゃゅょゎゕゖ", "あいうえおつやゆよわかけ")
_HAS_WORD_CHAR = re.compile(r"\w")
_ALL_HIRAGANA = re.compile(r"[ぁ-ゖー]+")

STOP_WORDS: frozenset[str] = frozenset(
    str.split(
        # Japanese: formal nouns, light verbs, and frequent function bigrams
        "こと もの ため よう とき ところ わけ はず ほう さん これ それ あれ どれ この その "
        "あの ここ そこ どこ する いる ある なる れる られる せる させる できる おる くる "
        "いく やる ない です ます まし した して しま てい って され から ので のは には "
        "では とは ても でも など まで より かも だっ でし ませ だけ られ"
        # English
        " a an the and or but nor of to in on at for with by from as into about than "
        "is are was were be been being am do does did have has had having it its this "
        "that these those there here i me my you your he him his she her we our they "
        "them their what which who whom how when where why if then so not can could "
        "will would should shall may might must s t isn aren wasn weren don doesn didn"
    )
)


def normalize(text: str) -> str:
    """NFKC (full-width → half-width, half-width kana → full-width) and lower case; lone
    surrogates as U+FFFD (MeCab cannot take them)."""
    return unicodedata.normalize("NFKC", without_surrogates(text)).lower()


def fold_kana(text: str) -> str:
    """Katakana → hiragana, small kana → full size, long-vowel marks dropped."""
    chars = [chr(ord(c) - 0x60) if "ァ" <= c <= "ヶ" else c for c in text]
    return "".join(chars).translate(_SMALL_KANA).replace("ー", "")


def hiragana_bigrams(text: str) -> list[str]:
    """Character bigrams of the folded kana runs of `text` (unprefixed).

    Runs are not cut at particle characters (の, が, へ …): names hold them too
    (ぶらっく|が|む, へ|るほいみん), and in their own weighted field the extra prose
    bigrams cost nothing measurable on JSQuAD (docs/evaluation.md).
    """
    grams: list[str] = []
    for run in _KANA_RUN.findall(text):
        folded = fold_kana(run)
        grams.extend(folded[i : i + 2] for i in range(len(folded) - 1))
    return grams


def latin_trigrams(text: str) -> list[str]:
    """Character trigrams of Latin words of 4+ letters (a typo keeps most of them)."""
    grams: list[str] = []
    for word in _LATIN_WORD.findall(text):
        if word not in STOP_WORDS:
            grams.extend(word[i : i + 3] for i in range(len(word) - 2))
    return grams


def code_names(text: str) -> list[str]:
    """Code names of normalised `text` as whole terms: each dotted path of identifiers
    (`os.path.join`, one part of 2+ characters at least, so `e.g` is none; `..` ends a
    path) and each identifier holding an underscore (`bisect_left`, `__init__`, also in
    `3.bisect_left` or Markdown's `bisect\\_left`). Plain words add nothing here."""
    out: list[str] = []
    for run in _NAME_RUN.findall(text.replace("\\_", "_")):
        if len(run) > MAX_NAME_CHARS or ("_" not in run and "." not in run):
            continue
        for path in _DOTS.split(run):
            parts = [p for p in path.split(".") if p]
            names = [p for p in parts if _NAME_PART.fullmatch(p)]
            if len(parts) > 1 and len(names) == len(parts) and any(len(p) > 1 for p in parts):
                out.append(".".join(parts))
            out.extend(p for p in names if "_" in p.strip("_") or (p[0] == "_" and len(p) > 2))
    return out


def fold_key(text: str) -> str:
    """A key as matched: NFKC, lower case, kana-folded, spaces collapsed."""
    return " ".join(fold_kana(normalize(text)).split())


def key_term(name: str) -> str | None:
    """The KEY term of a row whose first column is `name` (None when unusable). A
    one-character key (a format code, a flag, an operator) keeps its case: `n` and `N`
    name different rows; a query matches it only quoted (`quoted_keys`)."""
    folded = fold_key(name)
    if len(folded) == 1:
        return KEY + fold_kana(unicodedata.normalize("NFKC", name).strip())
    if not 2 <= len(folded) <= MAX_KEY_CHARS:
        return None
    return KEY + folded


def quoted_keys(query: str, known: Callable[[str], bool]) -> list[str]:
    """KEY terms of one-character row keys the query quotes (`'n'`, `"!"`, 「@」):
    unquoted, a single character is too common to name a row."""
    text = unicodedata.normalize("NFKC", query[:KEY_SCAN_CHARS])
    terms = (KEY + fold_kana(c) for c in _QUOTED_CHAR.findall(text))
    return list(dict.fromkeys(t for t in terms if known(t)))


_ALNUM = re.compile(r"[a-z0-9]")


def key_spans(query: str, known: Callable[[str], bool]) -> list[str]:
    """KEY terms of every row key written whole in `query`, longest match only.

    A Latin or digit edge of a key must not continue into the query's next character
    (Kelford ≠ Kelfordshire); a key inside a longer matched key is dropped (メタルスライム
    does not also match スライム). `known` says whether a term is indexed.
    """
    text = fold_key(query)[:KEY_SCAN_CHARS]
    found: list[tuple[int, int, str]] = []
    n = len(text)
    for start in range(n):
        if start and _ALNUM.match(text[start]) and _ALNUM.match(text[start - 1]):
            continue
        for end in range(start + 2, min(n, start + MAX_KEY_CHARS) + 1):
            if end < n and _ALNUM.match(text[end - 1]) and _ALNUM.match(text[end]):
                continue
            term = KEY + text[start:end]
            if known(term):
                found.append((start, end, term))
    kept = [
        (s, e, t)
        for s, e, t in found
        if not any(s2 <= s and e <= e2 and (e2 - s2) > (e - s) for s2, e2, _ in found)
    ]
    return list(dict.fromkeys(t for _, _, t in kept))


def bound_terms(text: str) -> list[str]:
    """`label#number` for each number that directly follows a label (normalised text)."""
    out: list[str] = []
    for label, number in _BOUND_PAIR.findall(text):
        if label in STOP_WORDS:
            continue
        out.append(f"{BOUND}{fold_kana(label)}#{number.replace(',', '')}")
    return out


def _content_term(surface: str, feature_raw: str) -> str | None:
    """The index term for one morpheme, or None for function words and symbols."""
    fields = feature_raw.split(",")
    pos = fields[0]
    if pos not in _CONTENT_POS:
        return None
    if pos == "接尾辞" and (fields[1] != "名詞的" or _ALL_HIRAGANA.fullmatch(surface)):
        return None  # keep 力 of 攻撃力, drop たち/ら/さん
    term = surface
    if pos in _BASE_FORM_POS and len(fields) > _ORTH_BASE_FIELD:
        base = fields[_ORTH_BASE_FIELD]
        if base and base != "*":
            term = base
    elif (
        pos == "名詞"
        and fields[1] == "普通名詞"
        and len(fields) > _LEMMA_FIELD
        and _HAS_KANJI.search(surface)
    ):  # a kana spelling's lemma is MeCab's guess from context (かみ: 紙, 髪 or 神?)
        lemma = fields[_LEMMA_FIELD]
        if _KANA_KANJI_WORD.fullmatch(lemma):  # not ＩＤ, ×, or フォント-font
            term = lemma  # 子ども → 子供; 打合せ → 打ち合わせ; 申込み → 申し込み
    if not _HAS_WORD_CHAR.search(term):
        return None
    return term


_BREAKS = ("\n", "。", ". ", " ", "、")


def pieces(text: str, size: int = TOKENIZER_PIECE_CHARS) -> list[str]:
    """`text` cut into pieces of at most `size` characters, at a line, sentence or word
    break near the end of each piece where there is one. MeCab is never handed more:
    very long inputs crash it natively."""
    out: list[str] = []
    start = 0
    while len(text) - start > size:
        end = start + size
        window = text[end - size // 10 : end]
        cut = max(window.rfind(b) + len(b) for b in _BREAKS)
        if cut > 0:
            end = end - size // 10 + cut
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


class JapaneseTokenizer:
    """Callable text → list of index terms; one MeCab tagger, guarded by a lock."""

    signature: str = TOKENIZER_SIGNATURE

    def __init__(self, stop_words: Iterable[str] = STOP_WORDS) -> None:
        self._tagger = fugashi.Tagger()
        self._lock = threading.Lock()  # a MeCab tagger must not parse concurrently
        self._stop_words = frozenset(stop_words)

    def __call__(self, text: str) -> list[str]:
        """Tokenise one text (document or query) the same way."""
        norm = normalize(text)
        if not norm.strip():
            return []
        with self._lock:
            morphemes = [
                (node.surface, node.feature_raw)
                for piece in pieces(norm)
                for node in self._tagger(piece)
            ]
        stop = self._stop_words
        tokens: list[str] = []
        whole: set[str] = set()
        for surface, feature_raw in morphemes:
            term = _content_term(surface, feature_raw)
            if term is None or term in stop:
                continue
            tokens.append(stem(fold_kana(term)))
            whole.add(surface)
        for run in _KATAKANA_RUN.findall(norm):
            if run not in whole and run not in stop:
                tokens.append(fold_kana(run))
        tokens.extend(GRAM + gram for gram in hiragana_bigrams(norm) if gram not in stop)
        tokens.extend(GRAM + gram for gram in latin_trigrams(norm))
        tokens.extend(bound_terms(norm))
        tokens.extend(t for t in code_names(norm) if t not in stop)
        return tokens

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokenise several texts (convenience for bulk builds)."""
        return [self(text) for text in texts]


_instance: JapaneseTokenizer | None = None
_instance_lock = threading.Lock()


def get_tokenizer() -> JapaneseTokenizer:
    """The process-wide tokenizer (MeCab start-up is paid once, on first use)."""
    global _instance
    if _instance is None:
        with _instance_lock:
            if _instance is None:
                _instance = JapaneseTokenizer()
    return _instance


def tokenize_japanese(text: str) -> list[str]:
    """Spec-named shortcut for `get_tokenizer()(text)`."""
    return get_tokenizer()(text)
