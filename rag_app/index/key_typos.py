"""Row keys written with one typo: `Sumit X13` finds the row `Summit X13`.

A table row's key is one BM25 term (`@summit x13`), matched when a query writes it whole
(`tokenizer.key_spans`). A query with a one-character typo in the name (dropped, added,
replaced or two neighbours swapped) matched no key, and worse, `Helix M8 Pluw` matched
the shorter key `Helix M8` exactly, so the wrong row won. Here keys are also found at
edit distance one (Damerau), by the symmetric-delete method: every key is indexed under
itself and each string made by deleting one of its characters; a query span is looked up
under the same variants, and each candidate is verified. Query spans are runs of one
script (Latin words with digits, katakana, hiragana, kanji) and up to `MAX_SPAN_RUNS` of
them in a row, never starting or ending with a one-character run (a particle such as
`の`, which one substitution would turn into the last character of a longer key). A fuzzy
match longer than an exact
one overrides it (`Helix M8 Pluw` → `Helix M8 Plus`, not `Helix M8`).

The variants live in sorted numpy arrays of 64-bit hashes (12 bytes each, ~13 per key),
grown incrementally as the vocabulary grows; collisions are removed by the verification.
A maintained SymSpell (symspellpy) was measured on 100k keys: 262 MB of dictionaries
against 23 MB here, for lookups of 15 against 25 µs per span.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence

import numpy as np

from rag_app.index.tokenizer import KEY, KEY_SCAN_CHARS, MAX_KEY_CHARS, fold_key, normalize

MIN_FUZZY_CHARS = 3
"""Keys shorter than this (folded) are matched exactly only: one edit is most of them."""
MAX_SPAN_RUNS = 4
"""Script runs one query span may join (`new kelfodr`, `helix m8 pluw`)."""
_MERGE_SHARE = 8
"""Pending variants are merged into the sorted arrays when they exceed 1/8 of them."""
BACKGROUND_TERMS = 20_000
MAX_CANDIDATES = 32
"""A span with more keys than this at one edit (a short, common string) is left alone."""
MAX_FUZZY = 32
"""More new vocabulary terms than this at once are scanned in a background thread."""

_RUN = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*|[ァ-ヺー]+|[ぁ-ゖー]+|[\u4e00-\u9fff々]+")


def variants(text: str) -> set[str]:
    """`text` and every string made by deleting one of its characters."""
    return {text} | {text[:i] + text[i + 1 :] for i in range(len(text))}


def within_one_edit(a: str, b: str) -> bool:
    """True when `a` and `b` differ by one insertion, deletion, substitution or swap of
    two neighbouring characters (and are not equal)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):
        return a[i:] == b[i + 1 :]
    if a[i + 1 :] == b[i + 1 :]:
        return True  # one substitution
    return i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2 :] == b[i + 2 :]


def _hash(text: str) -> int:
    return hash(text) & 0xFFFF_FFFF_FFFF_FFFF


def _scan(terms: Sequence[str], start: int, end: int) -> tuple[list[int], list[int], int]:
    """Variant hashes and their term ids of the key terms in `terms[start:end]`, and how
    many keys there were."""
    hashes: list[int] = []
    ids: list[int] = []
    keys = 0
    for term_id in range(start, end):
        term = terms[term_id]
        if not term.startswith(KEY) or len(term) - len(KEY) < MIN_FUZZY_CHARS:
            continue
        keys += 1
        found = [_hash(v) for v in variants(term[len(KEY) :])]
        hashes += found
        ids += [term_id] * len(found)
    return hashes, ids, keys


Span = tuple[int, int, str, tuple[str, ...]]
"""(start, end, folded text, the folded script runs it is made of)."""


def query_spans(query: str) -> list[Span]:
    """Each span of 1..`MAX_SPAN_RUNS` script runs in the first `KEY_SCAN_CHARS`
    characters of the normalised query."""
    text = normalize(query)[:KEY_SCAN_CHARS]
    runs = [(m.start(), m.end()) for m in _RUN.finditer(text)]
    folded_runs = [fold_key(text[a:b]) for a, b in runs]
    spans: list[Span] = []
    for i, (start, first_end) in enumerate(runs):
        for j in range(i, min(i + MAX_SPAN_RUNS, len(runs))):
            end = runs[j][1]
            folded = fold_key(text[start:end])
            if len(folded) > MAX_KEY_CHARS + 1:
                break
            if j > i and (first_end - start == 1 or end - runs[j][0] == 1):
                continue  # one edit would swallow a whole edge run: `アイアンダガーの` ≠ `…改`
            spans.append((start, end, folded, tuple(folded_runs[i : j + 1])))
    return spans


class KeyVariants:
    """Every row key of a BM25 vocabulary, under its one-deletion variants.

    Called under the BM25 index's lock. Many new terms at once (a store opened with
    tens of thousands of table rows: ~1.5 s per 100k keys) are indexed in a background
    thread, with exact keys only until it is done, so no search waits for it.
    """

    def __init__(self) -> None:
        self._arrays = (np.empty(0, np.uint64), np.empty(0, np.int32))
        """Sorted variant hashes and their key term ids (replaced whole, never mutated)."""
        self._pending: dict[int, list[int]] = {}
        self._pending_count = 0
        self._scanned = 0
        self._lock = threading.Lock()
        self._builder: threading.Thread | None = None
        self.keys = 0
        """Keys indexed (0: no table rows, fuzzy matching costs nothing)."""

    def update(self, terms: Sequence[str]) -> None:
        """Index the key terms added to `terms` (an append-only vocabulary) since the
        last call."""
        end = len(terms)
        if end == self._scanned or self.building:
            return
        if end - self._scanned > BACKGROUND_TERMS:
            self._builder = threading.Thread(
                target=self._build, args=(terms, self._scanned, end), name="key-variants",
                daemon=True,
            )  # fmt: skip
            self._builder.start()
            return
        hashes, ids, keys = _scan(terms, self._scanned, end)
        for h, term_id in zip(hashes, ids, strict=True):
            self._pending.setdefault(h, []).append(term_id)
        self._pending_count += len(hashes)
        self.keys += keys
        self._scanned = end
        if self._pending_count > max(1024, len(self._arrays[0]) // _MERGE_SHARE):
            hashes = [h for h, found in self._pending.items() for _ in found]
            ids = [i for found in self._pending.values() for i in found]
            self._add(hashes, ids)
            self._pending.clear()
            self._pending_count = 0

    @property
    def building(self) -> bool:
        """True while a background thread indexes a large batch of keys."""
        return self._builder is not None and self._builder.is_alive()

    def join(self, timeout: float | None = None) -> None:
        """Wait for a background build (tests, benchmarks)."""
        if self._builder is not None:
            self._builder.join(timeout)

    def _build(self, terms: Sequence[str], start: int, end: int) -> None:
        hashes, ids, keys = _scan(terms, start, end)
        with self._lock:
            self._add(hashes, ids)
            self.keys += keys
            self._scanned = end

    def _add(self, hashes: list[int], ids: list[int]) -> None:
        old_hashes, old_ids = self._arrays
        all_hashes = np.concatenate([old_hashes, np.asarray(hashes, np.uint64)])
        all_ids = np.concatenate([old_ids, np.asarray(ids, np.int32)])
        order = np.argsort(all_hashes, kind="stable")
        self._arrays = (all_hashes[order], all_ids[order])

    def candidates(self, texts: Sequence[str]) -> list[set[int]]:
        """For each of `texts`, the term ids of keys sharing a one-deletion variant with
        it (unverified); one sorted-array search for all of them."""
        found: list[set[int]] = [set() for _ in texts]
        owners: list[int] = []
        hashes: list[int] = []
        for n, text in enumerate(texts):
            for variant in variants(text):
                h = _hash(variant)
                found[n].update(self._pending.get(h, ()))
                owners.append(n)
                hashes.append(h)
        sorted_hashes, sorted_ids = self._arrays
        if len(sorted_hashes) and hashes:
            wanted = np.asarray(hashes, np.uint64)
            lo = np.searchsorted(sorted_hashes, wanted, "left").tolist()
            hi = np.searchsorted(sorted_hashes, wanted, "right").tolist()
            for n, a, b in zip(owners, lo, hi, strict=True):
                if b > a:
                    found[n].update(sorted_ids[a:b].tolist())
        return found

    def matches(
        self,
        query: str,
        terms: Sequence[str],
        exact: Sequence[str],
        known: Callable[[str], bool] = lambda _word: False,
    ) -> list[str]:
        """Key terms of `query`: the exact ones (`exact`, from `key_spans`) plus keys one
        edit away from a span of it; where they overlap, the longer match wins.

        As a spelling corrector does, only a span holding a word the store does not know
        (`known`: a body term) is corrected: `exits` is a word of the docs, not a typo of
        the row `exit`. A span with more than `MAX_CANDIDATES` keys at one edit names no
        row in particular, and at most `MAX_FUZZY` matches are kept (bounded work under
        the index's lock whatever the query).
        """
        if not self.keys:
            return list(exact)
        exact_set = set(exact)
        spans = query_spans(query)
        exact_at = [(s, e, KEY + text) for s, e, text, _ in spans if KEY + text in exact_set]
        asked = [
            span
            for span in spans
            if KEY + span[2] not in exact_set
            and len(span[2]) >= MIN_FUZZY_CHARS
            and not all(known(run) for run in span[3])
        ]
        texts = list(dict.fromkeys(text for _, _, text, _ in asked))
        near: dict[str, list[str]] = {}
        for text, found in zip(texts, self.candidates(texts), strict=True):
            if len(found) <= MAX_CANDIDATES:
                near[text] = [
                    terms[i] for i in found if within_one_edit(text, terms[i][len(KEY) :])
                ]
        found = ((s, e, text, term) for s, e, text, _ in asked for term in near.get(text, ()))
        fuzzy = list(dict.fromkeys(found))[: 4 * MAX_FUZZY]
        fuzzy = [f for f in fuzzy if not any(s <= f[0] and f[1] <= e for s, e, _ in exact_at)]
        fuzzy = [
            f
            for f in fuzzy
            if not any(g[0] <= f[0] and f[1] <= g[1] and g[1] - g[0] > f[1] - f[0] for g in fuzzy)
        ][:MAX_FUZZY]
        if not fuzzy:
            return list(exact)

        def covered(s: int, e: int) -> bool:
            return any(f[0] <= s and e <= f[1] and f[1] - f[0] > e - s for f in fuzzy)

        aligned = {term for *_, term in exact_at}
        kept = [
            term
            for term in exact
            if (term in aligned and not all(covered(s, e) for s, e, t in exact_at if t == term))
            or (term not in aligned
                and not any(term[len(KEY) :] in f[2] and len(f[2]) > len(term) - len(KEY)
                            for f in fuzzy))
        ]  # fmt: skip
        return list(dict.fromkeys([*kept, *(term for *_, term in fuzzy)]))


__all__ = ["KeyVariants", "query_spans", "variants", "within_one_edit"]
