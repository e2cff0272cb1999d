"""Postings: the in-memory BM25 corpus — term postings, document lengths, scoring.

Documents live in slots. Compacted postings are CSC arrays grouped by term
(`indptr`, `post_slots`, `post_tfs`) for slots below `base_slots`; documents added
since are kept as a small per-term delta. Deletes are tombstones in `alive`.
Only ids, sources and token statistics are kept: the chunk text lives in Chroma.

A query touches only the postings of its own terms (no array the size of the corpus
unless the query's postings already cover a sizeable part of it). Not thread-safe:
`BM25Index` holds the lock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

Bag = tuple[np.ndarray, np.ndarray]  # (unique term ids int32, term frequencies int32)
QueryTerm = tuple[float, list[tuple[int, float]]]
"""(term weight, [(term id, field weight)]): one query term and the fields it is asked in."""

# Above this share of the corpus, accumulating scores densely beats sorting postings.
DENSE_SHARE = 8


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
        self.n_dead = 0

    # --------------------------------------------------------------- scoring
    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """Live (slots, tfs) of one term: compacted part + delta."""
        if term + 1 < len(self.indptr):
            start, end = self.indptr[term], self.indptr[term + 1]
            slots, tfs = self.post_slots[start:end], self.post_tfs[start:end]
        else:
            slots, tfs = self.post_slots[:0], self.post_tfs[:0]
        extra = self.delta.get(term)
        if extra is not None:
            slots = np.concatenate([slots, np.asarray(extra[0], np.int32)])
            tfs = np.concatenate([tfs, np.asarray(extra[1], np.int32)])
        if self.n_dead:
            live = self.alive[slots]
            return slots[live], tfs[live]
        return slots, tfs

    def _term_scores(
        self, query: list[QueryTerm], k1: float, b: float
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per query term: the slots holding it (in any of its fields) and their weighted
        BM25 parts. Field frequencies add up, scaled by field weight, before saturation,
        and the IDF counts documents holding the term in any field (BM25F)."""
        n = self.n_live
        avg_len = self.total_len / n if self.total_len else 1.0
        slot_parts: list[np.ndarray] = []
        score_parts: list[np.ndarray] = []
        for weight, fields in query:
            found = [(self.postings(term), field_weight) for term, field_weight in fields]
            found = [(p, fw) for p, fw in found if len(p[0])]
            if not found:
                continue
            if len(found) == 1:
                (slots, tfs), fw = found[0]
                tf = tfs.astype(np.float64) * fw
            else:
                all_slots = np.concatenate([p[0] for p, _ in found])
                all_tf = np.concatenate([p[1].astype(np.float64) * fw for p, fw in found])
                slots, inverse = np.unique(all_slots, return_inverse=True)
                tf = np.bincount(inverse, weights=all_tf)
            df = len(slots)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            norm = k1 * (1.0 - b + b * self.doc_len[slots] / avg_len)
            slot_parts.append(slots)
            score_parts.append(weight * idf * tf / (tf + norm))
        return slot_parts, score_parts

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
        slot_parts, score_parts = self._term_scores(query, k1, b)
        if allowed is not None:
            mask = np.zeros(self.n_slots, dtype=bool)
            mask[np.asarray(allowed, dtype=np.int64)] = True
            kept = [(s, mask[s]) for s in slot_parts]
            score_parts = [p[m] for p, (_, m) in zip(score_parts, kept, strict=True)]
            slot_parts = [s[m] for s, m in kept]
        if not slot_parts:
            return []
        if len(slot_parts) == 1:  # a term's postings hold each slot once
            cand, cand_scores = slot_parts[0], score_parts[0]
        else:
            all_slots = np.concatenate(slot_parts)
            all_scores = np.concatenate(score_parts)
            if len(all_slots) * DENSE_SHARE > self.n_slots:
                dense = np.bincount(all_slots, weights=all_scores, minlength=self.n_slots)
                cand = np.flatnonzero(dense)
                cand_scores = dense[cand]
            else:
                cand, inverse = np.unique(all_slots, return_inverse=True)
                cand_scores = np.bincount(inverse, weights=all_scores)
        positive = cand_scores > 0
        if not positive.all():
            cand, cand_scores = cand[positive], cand_scores[positive]
        if len(cand) > top_k:
            kth = np.partition(cand_scores, -top_k)[-top_k]
            keep = cand_scores >= kth
            cand, cand_scores = cand[keep], cand_scores[keep]
        ids = self.slot_ids
        pairs = (
            (-score, ids[slot])
            for slot, score in zip(cand.tolist(), cand_scores.tolist(), strict=True)
        )
        best = heapq.nsmallest(top_k, pairs)  # score desc, then id: deterministic ties
        return [(doc_id, -neg) for neg, doc_id in best]  # type: ignore[misc]
