"""Japanese + English tokenizer for BM25 (fugashi/MeCab with unidic-lite).

Content words come from MeCab: nouns (surface), verbs and adjectives (dictionary
form, so 倒した matches 倒す), numerals and unknown words (English, codes). Two
context-free extras make names recallable whatever MeCab does with them:

- every run of hiragana adds its character bigrams: MeCab splits unknown
  hiragana names differently by context (りゅう/おう vs りゅう/お/う), but the
  bigrams of a run are a function of its characters, so a query run that occurs
  inside a document run always shares all its bigrams with it;
- every katakana run that MeCab split adds the whole run (メタルスライム), so the
  compound outranks documents holding only one part.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable

import fugashi

from rag_app.limits import TOKENIZER_PIECE_CHARS

# Bump when the rules change: stored token ids are then re-derived from text.
TOKENIZER_SIGNATURE = "fugashi-unidic-lite/v1"

_CONTENT_POS = frozenset({"名詞", "動詞", "形容詞", "接尾辞"})
_BASE_FORM_POS = frozenset({"動詞", "形容詞"})
_ORTH_BASE_FIELD = 10  # unidic feature index of orthBase (dictionary form as written)

_HIRAGANA_RUN = re.compile(r"[ぁ-ゖ][ぁ-ゖー]*")
# Hiragana runs are cut at the common particles before taking bigrams: a cut at a
# character is context-free (the bigram guarantee above still holds) and removes
# most bigrams of ordinary prose (これはとても → これ, て).
_PARTICLE_CHARS = re.compile(r"[のをはがにでともへや]")
_KATAKANA_RUN = re.compile(r"[ァ-ヺー]{2,}")
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
    """NFKC (full-width → half-width, half-width kana → full-width) and lower case."""
    return unicodedata.normalize("NFKC", text).lower()


def hiragana_bigrams(text: str) -> list[str]:
    """Character bigrams of the hiragana runs of `text`, cut at particle characters."""
    grams: list[str] = []
    for run in _HIRAGANA_RUN.findall(text):
        for piece in _PARTICLE_CHARS.split(run):
            grams.extend(piece[i : i + 2] for i in range(len(piece) - 1))
    return grams


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
            tokens.append(term)
            whole.add(surface)
        tokens.extend(gram for gram in hiragana_bigrams(norm) if gram not in stop)
        for run in _KATAKANA_RUN.findall(norm):
            if run not in whole and run not in stop:
                tokens.append(run)
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
