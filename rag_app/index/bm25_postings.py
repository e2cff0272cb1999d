"""Postings: the in-memory BM25 corpus — term postings, document lengths, scoring.

Documents live in slots. Compacted postings are CSC arrays grouped by term
(`indptr`, `post_slots`, `post_tfs`) for slots below `base_slots`; documents added
since are kept as a small per-term delta. Deletes are tombstones in `alive`.
Only ids, sources and token statistics are kept: the chunk text lives in Chroma.

A query touches only the postings of its own terms (no array the size of the corpus
unless the query's postings already cover a sizeable part of it), and of those only the
rarer ones are walked: common terms are looked up at the surviving candidates
(MaxScore, exact). Not thread-safe: `BM25Index` holds the lock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

Bag = tuple[np.ndarray, np.ndarray]  # (unique term ids int32, term frequencies int32)
QueryTerm = tuple[float, list[tuple[int, float]]]
"""(term weight, [(term id, field weight)]): one query term and the fields it is asked in."""

# Above this share of the corpus, accumulating scores densely beats sorting postings.
DENSE_SHARE = 8
# Pruning walks postings unless a term is this many times rarer than the work it saves.
WALK_SHARE = 4
# Below this many postings in all, scoring every one is cheaper than pruning.
PRUNE_FROM = 30_000
# Document frequencies remembered between changes (entries; cleared when full).
DF_CACHE_SIZE = 50_000


def bag_of(token_ids: Sequence[int]) -> Bag:
    """Unique term ids and their counts (term frequencies) for one document."""
    counts = Counter(token_ids)
    terms = np.fromiter(counts.keys(), np.int32, len(counts))
    return terms, np.fromiter(counts.values(), np.int32, len(counts))


class Postings:
    """Slots, vocabulary, compacted + delta postings, BM25 scoring."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.terms: list[str] = []
        self.id_to_slot: dict[str, int] = {}
        self.slot_ids: list[str | None] = []
        self.slot_sources: list[str | None] = []
        self.doc_len = np.zeros(1024, np.int32)
        self.alive = np.zeros(1024, np.bool_)
        self.n_live = 0
        self.total_len = 0
        self.n_dead = 0
        self.source_ids: dict[str, set[str]] = {}
        self.base_slots = 0
        self.indptr = np.zeros(1, np.int64)
        self.post_slots = np.empty(0, np.int32)
        self.post_tfs = np.empty(0, np.int32)
        self.delta: dict[int, tuple[list[int], list[int]]] = {}
        self.delta_entries = 0
        self.delta_bags: dict[int, Bag] = {}  # bags of slots >= base_slots
        self._df_cache: dict[tuple[int, ...], int] = {}
        self._norms: tuple[float, float, np.ndarray] | None = None  # (k1, b, per slot)

    def _changed(self) -> None:
        """Drop what is cached from the documents (document frequencies, length norms)."""
        self._df_cache.clear()
        self._norms = None

    # ------------------------------------------------------------ vocabulary
    @property
    def n_slots(self) -> int:
        return len(self.slot_ids)

    def term_ids(self, tokens: Iterable[str], grow: bool) -> list[int]:
        """Token strings → term ids; unknown tokens are added (`grow`) or skipped."""
        vocab = self.vocab
        if not grow:
            return [vocab[token] for token in tokens if token in vocab]
        ids: list[int] = []
        terms = self.terms
        for token in tokens:
            tid = vocab.get(token)
            if tid is None:
                tid = len(terms)
                vocab[token] = tid
                terms.append(token)
            ids.append(tid)
        return ids

    def extend_vocab(self, start: int, terms: Sequence[str]) -> None:
        if start != len(self.terms):
            raise ValueError(f"vocabulary gap: expected start {len(self.terms)}, got {start}")
        for term in terms:
            if not isinstance(term, str) or term in self.vocab:
                raise ValueError(f"bad vocabulary entry {term!r}")
            self.vocab[term] = len(self.terms)
            self.terms.append(term)

    # ------------------------------------------------------------- documents
    def _grow(self, need: int) -> None:
        if need > len(self.alive):
            cap = max(need, 2 * len(self.alive))
            self.doc_len = np.resize(self.doc_len, cap)
            self.alive = np.resize(self.alive, cap)
            self.alive[self.n_slots :] = False

    def add(self, doc_id: str, source: str | None, bag: Bag, postings: bool = True) -> None:
        """Store one document; with `postings=False` the caller must `compact()` after."""
        self.remove(doc_id)
        self._changed()
        slot = self.n_slots
        self._grow(slot + 1)
        terms, tfs = bag
        length = int(tfs.sum())
        self.doc_len[slot] = length
        self.alive[slot] = True
        self.slot_ids.append(doc_id)
        self.slot_sources.append(source)
        self.id_to_slot[doc_id] = slot
        self.n_live += 1
        self.total_len += length
        if source is not None:
            self.source_ids.setdefault(source, set()).add(doc_id)
        self.delta_bags[slot] = bag
        if not postings:
            return
        for term, tf in zip(terms.tolist(), tfs.tolist(), strict=True):
            entry = self.delta.get(term)
            if entry is None:
                self.delta[term] = ([slot], [tf])
            else:
                entry[0].append(slot)
                entry[1].append(tf)
        self.delta_entries += len(terms)

    def remove(self, doc_id: str) -> bool:
        slot = self.id_to_slot.pop(doc_id, None)
        if slot is None:
            return False
        self._changed()
        source = self.slot_sources[slot]
        if source is not None:
            ids = self.source_ids[source]
            ids.discard(doc_id)
            if not ids:
                del self.source_ids[source]
        self.alive[slot] = False
        self.n_live -= 1
        self.total_len -= int(self.doc_len[slot])
        self.slot_ids[slot] = None
        self.slot_sources[slot] = None
        self.delta_bags.pop(slot, None)
        self.n_dead += 1
        return True

    def load_snapshot(
        self,
        ids: list[str],
        sources: list[str | None],
        doc_len: np.ndarray,
        indptr: np.ndarray,
        post_slots: np.ndarray,
        post_tfs: np.ndarray,
    ) -> None:
        """Adopt a compacted snapshot (all slots alive) as the base."""
        n = len(ids)
        if len(sources) != n or len(doc_len) != n or len(indptr) != len(self.terms) + 1:
            raise ValueError("snapshot arrays disagree in length")
        if len(post_slots) != len(post_tfs) or int(indptr[-1]) != len(post_slots):
            raise ValueError("snapshot postings are inconsistent")
        if n and len(post_slots) and (post_slots.min() < 0 or post_slots.max() >= n):
            raise ValueError("snapshot postings refer to unknown documents")
        if len(post_slots) > 1:
            rising = np.diff(post_slots.astype(np.int64)) > 0
            rising[indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < len(post_slots))] - 1] = True
            if not rising.all():
                raise ValueError("snapshot postings are not sorted by document")
        self.slot_ids = list(ids)
        self.slot_sources = list(sources)
        self.id_to_slot = {doc_id: i for i, doc_id in enumerate(ids)}
        if len(self.id_to_slot) != n:
            raise ValueError("snapshot holds duplicate ids")
        self.doc_len = np.zeros(max(1024, 2 * n), np.int32)
        self.doc_len[:n] = doc_len
        self.alive = np.zeros(len(self.doc_len), np.bool_)
        self.alive[:n] = True
        self.n_live = n
        self.total_len = int(doc_len.sum())
        self.n_dead = 0
        self.source_ids = {}
        for doc_id, source in zip(ids, sources, strict=True):
            if source is not None:
                self.source_ids.setdefault(source, set()).add(doc_id)
        self.indptr = indptr.astype(np.int64, copy=False)
        self.post_slots = post_slots.astype(np.int32, copy=False)
        self.post_tfs = post_tfs.astype(np.int32, copy=False)
        self.base_slots = n
        self.delta, self.delta_entries, self.delta_bags = {}, 0, {}
        self._changed()

    # ------------------------------------------------------------ compaction
    def needs_compaction(self) -> bool:
        too_dead = self.n_dead > 100 + self.n_slots // 5
        too_much_delta = self.delta_entries > 20_000 + len(self.post_slots) // 20
        return too_dead or too_much_delta

    def is_compact(self) -> bool:
        return self.n_dead == 0 and not self.delta_bags

    def compact(self) -> None:
        """Merge the delta into the compacted postings and drop tombstones (vectorised)."""
        n_slots = self.n_slots
        alive = self.alive[:n_slots].copy()
        base_terms = np.repeat(
            np.arange(len(self.indptr) - 1, dtype=np.int32), np.diff(self.indptr)
        )
        new = sorted(self.delta_bags)
        new_bags = [self.delta_bags[s] for s in new]
        counts = np.fromiter((len(bag[0]) for bag in new_bags), np.int64, len(new_bags))
        new_slots = np.repeat(np.asarray(new, np.int32), counts)
        terms = np.concatenate([base_terms, *(bag[0] for bag in new_bags)])
        slots = np.concatenate([self.post_slots, new_slots])
        tfs = np.concatenate([self.post_tfs, *(bag[1] for bag in new_bags)])
        if self.n_dead:
            keep = alive[slots]
            terms, slots, tfs = terms[keep], slots[keep], tfs[keep]
            remap = np.cumsum(alive, dtype=np.int64) - 1
            slots = remap[slots].astype(np.int32)
            flags = alive.tolist()
            self.slot_ids = list(itertools.compress(self.slot_ids, flags))
            self.slot_sources = list(itertools.compress(self.slot_sources, flags))
            self.id_to_slot = {d: i for i, d in enumerate(self.slot_ids) if d is not None}
            lengths = self.doc_len[:n_slots][alive]
            n = len(lengths)
            self.doc_len = np.zeros(max(1024, 2 * n), np.int32)
            self.doc_len[:n] = lengths
            self.alive = np.zeros(len(self.doc_len), np.bool_)
            self.alive[:n] = True
        order = np.argsort(terms, kind="stable")
        self.post_slots = slots[order]
        self.post_tfs = tfs[order]
        self.indptr = np.zeros(len(self.terms) + 1, np.int64)
        np.cumsum(np.bincount(terms, minlength=len(self.terms)), out=self.indptr[1:])
        self.base_slots = self.n_slots
        self.delta, self.delta_entries, self.delta_bags = {}, 0, {}
        self._changed()
        self.n_dead = 0

    # --------------------------------------------------------------- scoring
    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """(slots, tfs) of one term, sorted by slot: compacted part + delta, tombstoned
        slots included (a live candidate never matches one; `live` drops them)."""
        if term + 1 < len(self.indptr):
            start, end = self.indptr[term], self.indptr[term + 1]
            slots, tfs = self.post_slots[start:end], self.post_tfs[start:end]
        else:
            slots, tfs = self.post_slots[:0], self.post_tfs[:0]
        extra = self.delta.get(term)
        if extra is not None:
            slots = np.concatenate([slots, np.asarray(extra[0], np.int32)])
            tfs = np.concatenate([tfs, np.asarray(extra[1], np.int32)])
        return slots, tfs

    def _count_live(self, slots: np.ndarray) -> int:
        return int(np.count_nonzero(self.alive[slots])) if self.n_dead else len(slots)

    def live(self, slots: np.ndarray, tfs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.n_dead:
            return slots, tfs
        keep = self.alive[slots]
        return slots[keep], tfs[keep]

    def _df(self, fields: list[tuple[np.ndarray, np.ndarray, float]], key: tuple) -> int:
        """Live documents holding the term in any field; cached until the next change,
        so a common term costs a pass over its postings once, not at every query."""
        df = self._df_cache.get(key)
        if df is None:
            if len(fields) == 1:
                df = self._count_live(fields[0][0])
            elif len(fields) == 2:
                a, b = fields[0][0], fields[1][0]
                df = self._count_live(a) + self._count_live(b) - self._count_live(_shared(a, b))
            else:
                df = len(np.unique(np.concatenate([self.live(*f[:2])[0] for f in fields])))
            if len(self._df_cache) >= DF_CACHE_SIZE:
                self._df_cache.clear()
            self._df_cache[key] = df
        return df

    def _query_terms(self, query: list[QueryTerm], k1: float, b: float) -> list[_Term]:
        """The query's terms with their live postings, exact document frequency (any
        field: BM25F) and IDF; terms found nowhere are dropped."""
        n = self.n_live
        terms: list[_Term] = []
        for weight, fields in query:
            found = [(*self.postings(term), fw) for term, fw in fields]
            kept = [(f, term) for f, (term, _) in zip(found, fields, strict=True) if len(f[0])]
            if not kept:
                continue
            found = [f for f, _ in kept]
            df = self._df(found, tuple(term for _, term in kept))
            if not df:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            terms.append(_Term(weight * idf, found, df))
        return terms

    def _norm(self, slots: np.ndarray, k1: float, b: float) -> np.ndarray:
        """BM25's length norm at `slots`, from a per-slot array kept until the next
        change: worked out at every query, it cost a tenth of a query at 100k chunks."""
        cached = self._norms
        if cached is None or cached[0] != k1 or cached[1] != b:
            avg_len = self.total_len / self.n_live if self.total_len else 1.0
            cached = self._norms = (k1, b, k1 * (1.0 - b + b * self.doc_len / avg_len))
        return cached[2][slots]

    def _full(self, term: _Term, k1: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """Every slot holding the term and its BM25 part (field frequencies add up,
        scaled by field weight, before saturation)."""
        fields = [(*self.live(f[0], f[1]), f[2]) for f in term.fields]
        if len(fields) == 1:
            slots, tfs, fw = fields[0]
            tf = tfs.astype(np.float64) * fw
        else:
            all_slots = np.concatenate([f[0] for f in fields])
            all_tf = np.concatenate([f[1].astype(np.float64) * f[2] for f in fields])
            slots, inverse = np.unique(all_slots, return_inverse=True)
            tf = np.bincount(inverse, weights=all_tf)
        return slots, term.bound * tf / (tf + self._norm(slots, k1, b))

    def _at(self, term: _Term, cand: np.ndarray, norm: np.ndarray) -> np.ndarray:
        """The term's BM25 part at the sorted slots `cand` (0 where absent): a binary
        search in its sorted postings instead of a pass over them."""
        tf = np.zeros(len(cand), np.float64)
        for slots, tfs, fw in term.fields:
            pos = np.searchsorted(slots, cand)
            np.minimum(pos, len(slots) - 1, out=pos)
            hit = slots[pos] == cand
            tf[hit] += tfs[pos[hit]] * fw
        return term.bound * tf / (tf + norm)

    def _accumulate(
        self, parts: list[tuple[np.ndarray, np.ndarray]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sum per-term (slots, scores) into sorted unique slots and their totals."""
        if len(parts) == 1:
            return parts[0]
        all_slots = np.concatenate([p[0] for p in parts])
        all_scores = np.concatenate([p[1] for p in parts])
        if len(all_slots) * DENSE_SHARE > self.n_slots:
            dense = np.bincount(all_slots, weights=all_scores, minlength=self.n_slots)
            cand = np.flatnonzero(dense != 0)  # 13x faster than on the floats themselves
            return cand, dense[cand]
        cand, inverse = np.unique(all_slots, return_inverse=True)
        return cand, np.bincount(inverse, weights=all_scores)

    def _exact(self, terms: list[_Term], cand: np.ndarray, k1: float, b: float) -> np.ndarray:
        norm = self._norm(cand, k1, b)
        return sum((self._at(t, cand, norm) for t in terms), np.zeros(len(cand)))

    def _pruned(
        self, terms: list[_Term], top_k: int, k1: float, b: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Candidates and exact scores that surely hold the top `top_k` (MaxScore).

        A term adds less than its bound (weight × IDF) to any score. The rarest term's
        best documents, scored exactly, give a threshold θ that the k-th result reaches;
        the cheapest terms whose bounds sum below θ cannot lift a document that holds
        none of the others into the results, so only the other terms' postings are
        walked, and the cheap terms are looked up at the survivors only. Exact: the same
        results as scoring every posting, at a cost that follows the rare terms."""
        every = sum(t.df for t in terms)
        seed = min(terms, key=lambda t: t.df)
        if every < PRUNE_FROM or seed.df * WALK_SHARE > every:  # pruning cannot pay
            return self._accumulate([self._full(t, k1, b) for t in terms])
        seed_full = slots, scores = self._full(seed, k1, b)
        if len(slots) > top_k:
            best = np.argpartition(scores, -top_k)[-top_k:]
            slots = np.sort(slots[best])
        exact = self._exact(terms, slots, k1, b)
        theta = float(np.partition(exact, -top_k)[-top_k]) if len(exact) >= top_k else 0.0
        ranked = sorted(terms, key=lambda t: t.bound)
        cheap_bound = 0.0
        n_cheap = 0
        for term in ranked:
            if (cheap_bound + term.bound) * (1 + 1e-9) >= theta:
                break
            cheap_bound += term.bound
            n_cheap += 1
        cheap, walked = ranked[:n_cheap], ranked[n_cheap:]
        if sum(t.df for t in walked) * 2 > every:  # most postings must be walked anyway
            return self._accumulate([self._full(t, k1, b) for t in terms])
        cand, partial = self._accumulate(
            [seed_full if t is seed else self._full(t, k1, b) for t in walked]
        )
        keep = partial + cheap_bound * (1 + 1e-9) >= theta
        cand, partial = cand[keep], partial[keep]
        norm = self._norm(cand, k1, b)
        for term in cheap:
            if len(cand) * WALK_SHARE < term.df:  # few survivors: binary searches
                partial = partial + self._at(term, cand, norm)
            else:  # many: one pass over the term's postings
                slots, scores = self._full(term, k1, b)
                dense = np.zeros(self.n_slots)
                dense[slots] = scores
                partial = partial + dense[cand]
        return cand, partial

    def search(
        self,
        query: list[QueryTerm],
        top_k: int,
        k1: float,
        b: float,
        allowed: list[int] | None = None,
    ) -> list[tuple[str, float]]:
        """Best `top_k` (id, score) with score > 0; ties ordered by id. With `allowed`,
        only those slots compete (statistics stay the whole index's)."""
        if not query or self.n_live == 0 or top_k <= 0:
            return []
        terms = self._query_terms(query, k1, b)
        if not terms:
            return []
        if allowed is not None:
            scope = np.unique(np.asarray(allowed, dtype=np.int32))
            if len(scope) * DENSE_SHARE < sum(len(f[0]) for t in terms for f in t.fields):
                cand, cand_scores = scope, self._exact(terms, scope, k1, b)
            else:
                cand, cand_scores = self._accumulate([self._full(t, k1, b) for t in terms])
                inside = np.isin(cand, scope, assume_unique=True)
                cand, cand_scores = cand[inside], cand_scores[inside]
        elif len(terms) == 1:
            cand, cand_scores = self._full(terms[0], k1, b)
        else:
            cand, cand_scores = self._pruned(terms, top_k, k1, b)
        return self._top(cand, cand_scores, top_k)

    def _top(self, cand: np.ndarray, scores: np.ndarray, top_k: int) -> list[tuple[str, float]]:
        positive = scores > 0
        if not positive.all():
            cand, scores = cand[positive], scores[positive]
        if len(cand) > top_k:
            kth = np.partition(scores, -top_k)[-top_k]
            keep = scores >= kth
            cand, scores = cand[keep], scores[keep]
        ids = self.slot_ids
        pairs = (
            (-score, ids[slot]) for slot, score in zip(cand.tolist(), scores.tolist(), strict=True)
        )
        best = heapq.nsmallest(top_k, pairs)  # score desc, then id: deterministic ties
        return [(doc_id, -neg) for neg, doc_id in best]  # type: ignore[misc]


@dataclass(frozen=True, slots=True)
class _Term:
    """One query term: its upper bound (weight × IDF: a document gets less), its
    postings per field as (sorted slots, tfs, field weight; tombstones included) and its
    live document frequency."""

    bound: float
    fields: list[tuple[np.ndarray, np.ndarray, float]]
    df: int


def _shared(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The slots two sorted postings share (binary search of the shorter)."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    if not len(short):
        return short
    pos = np.searchsorted(long, short)
    np.minimum(pos, len(long) - 1, out=pos)
    return short[long[pos] == short]
