"""BM25Index: incremental BM25 keyword search with crash-safe persistence.

Why not a plain `bm25s.BM25`: bm25s precomputes every (doc, term) score with the
global IDF and average length, so any add means a full re-index (1.9 s at 100k
chunks on this machine). Here each document is tokenised once, kept as
(term id, tf) pairs, and scored at query time from term postings with the same
Lucene formula bm25s uses (`method="lucene"`; tests check parity with bm25s):

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score    = Σ_t idf(t) · tf / (tf + k1 · (1 - b + b · len / avglen))

Only the postings of the few query terms are touched, so N, df and avglen are
always current. Deletes are tombstones; postings are compacted in bulk now and
then. On disk the index is a chain of immutable segments listed by an atomically
replaced `manifest.json` (see docs/bm25.md).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math
import os
import shutil
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag_app.index.tokenizer import get_tokenizer

logger = logging.getLogger(__name__)

FORMAT_NAME = "rag-bm25"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".npz"
TMP_PREFIX = ".tmp-"
MAX_SEGMENTS = 64  # at this many segments, all but the base are merged into one
FULL_SNAPSHOT_SLACK = 1000  # rewrite everything once changes exceed this + 1/8 of the index

MetadataValue = str | int | float | bool | None
Tokenizer = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class BM25Document:
    """One indexed chunk: its id, text and flat metadata (`source_url` = its source)."""

    id: str
    text: str
    metadata: dict[str, MetadataValue] = field(default_factory=dict)

    @property
    def source(self) -> str | None:
        """The source URL or path the chunk came from, if recorded."""
        value = self.metadata.get("source_url")
        return value if isinstance(value, str) else None


def _check_document(doc: BM25Document) -> None:
    if not isinstance(doc.id, str) or not doc.id:
        raise ValueError(f"BM25 document id must be a non-empty string, got {doc.id!r}.")
    if not isinstance(doc.text, str):
        raise ValueError(f"BM25 document {doc.id!r} has no text string.")
    for key, value in doc.metadata.items():
        if not isinstance(key, str) or not isinstance(value, str | int | float | bool | None):
            raise ValueError(
                f"BM25 document {doc.id!r} metadata {key!r} must be str, int, float, bool or "
                f"None (as in Chroma), got {type(value).__name__}."
            )


def _json_line(doc: BM25Document) -> bytes:
    record = {"id": doc.id, "text": doc.text, "metadata": doc.metadata}
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def _bag(token_ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Unique term ids and their counts (term frequencies) for one document."""
    counts = Counter(token_ids)
    terms = np.fromiter(counts.keys(), np.int32, len(counts))
    return terms, np.fromiter(counts.values(), np.int32, len(counts))


class _Corpus:
    """In-memory documents, term postings and BM25 scoring (not thread-safe)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.terms: list[str] = []
        self.id_to_slot: dict[str, int] = {}
        self.slot_docs: list[BM25Document | None] = []
        self.slot_bags: list[tuple[np.ndarray, np.ndarray] | None] = []
        self.slot_lines: list[bytes | None] = []  # the doc as a JSON line, for saving
        self.doc_len = np.zeros(1024, np.int64)
        self.alive = np.zeros(1024, np.bool_)
        self.n_live = 0
        self.total_len = 0
        self.n_dead = 0
        self.source_ids: dict[str, set[str]] = {}
        # Compacted postings (CSC by term) for slots < base_slots, plus a small
        # append-only delta for slots added since the last compaction.
        self.base_slots = 0
        self.indptr = np.zeros(1, np.int64)
        self.post_slots = np.empty(0, np.int32)
        self.post_tfs = np.empty(0, np.int32)
        self.delta: dict[int, tuple[list[int], list[int]]] = {}
        self.delta_entries = 0

    @property
    def n_slots(self) -> int:
        return len(self.slot_docs)

    def term_ids(self, tokens: Iterable[str], grow: bool) -> list[int]:
        """Token strings → term ids; unknown tokens are added (`grow`) or skipped."""
        vocab = self.vocab
        if not grow:
            return [vocab[token] for token in tokens if token in vocab]
        known = len(vocab)
        ids = [vocab.setdefault(token, len(vocab)) for token in tokens]
        if len(vocab) > known:
            terms = self.terms
            for token, tid in zip(tokens, ids, strict=True):
                if tid == len(terms):  # first sighting, in id order
                    terms.append(token)
        return ids

    def extend_vocab(self, start: int, terms: Sequence[str]) -> None:
        if start != len(self.terms):
            raise ValueError(f"vocabulary gap: expected start {len(self.terms)}, got {start}")
        for term in terms:
            if not isinstance(term, str) or term in self.vocab:
                raise ValueError(f"bad vocabulary entry {term!r}")
            self.vocab[term] = len(self.terms)
            self.terms.append(term)

    def add(
        self,
        doc: BM25Document,
        terms: np.ndarray,
        tfs: np.ndarray,
        postings: bool = True,
        line: bytes | None = None,
    ) -> None:
        """Store one document; with `postings=False` the caller must `compact()` after."""
        self.remove(doc.id)
        slot = self.n_slots
        if slot >= len(self.alive):
            cap = 2 * len(self.alive)
            self.doc_len = np.resize(self.doc_len, cap)
            self.alive = np.resize(self.alive, cap)
        length = int(tfs.sum())
        self.doc_len[slot] = length
        self.alive[slot] = True
        self.slot_docs.append(doc)
        self.slot_bags.append((terms, tfs))
        self.slot_lines.append(line if line is not None else _json_line(doc))
        self.id_to_slot[doc.id] = slot
        self.n_live += 1
        self.total_len += length
        source = doc.source
        if source is not None:
            self.source_ids.setdefault(source, set()).add(doc.id)
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
        doc = self.slot_docs[slot]
        assert doc is not None
        source = doc.source
        if source is not None:
            ids = self.source_ids[source]
            ids.discard(doc_id)
            if not ids:
                del self.source_ids[source]
        self.alive[slot] = False
        self.n_live -= 1
        self.total_len -= int(self.doc_len[slot])
        self.slot_docs[slot] = None
        self.slot_bags[slot] = None
        self.slot_lines[slot] = None
        self.n_dead += 1
        return True

    def needs_compaction(self) -> bool:
        too_dead = self.n_dead > 100 + self.n_slots // 5
        too_much_delta = self.delta_entries > 20_000 + len(self.post_slots) // 20
        return too_dead or too_much_delta

    def compact(self) -> None:
        """Merge the delta into the compacted postings and drop tombstones (vectorised)."""
        n_slots = self.n_slots
        alive = self.alive[:n_slots].copy()
        # Entries of the compacted postings, then those of docs added since.
        base_terms = np.repeat(
            np.arange(len(self.indptr) - 1, dtype=np.int32), np.diff(self.indptr)
        )
        bags = self.slot_bags
        new = [s for s in range(self.base_slots, n_slots) if bags[s] is not None]
        new_bags = [bag for bag in (bags[s] for s in new) if bag is not None]
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
            self.slot_docs = list(itertools.compress(self.slot_docs, flags))
            self.slot_bags = list(itertools.compress(self.slot_bags, flags))
            self.slot_lines = list(itertools.compress(self.slot_lines, flags))
            self.id_to_slot = {doc.id: i for i, doc in enumerate(self.slot_docs) if doc is not None}
            lengths = self.doc_len[:n_slots][alive]
            n = len(lengths)
            self.doc_len = np.zeros(max(1024, 2 * n), np.int64)
            self.doc_len[:n] = lengths
            self.alive = np.zeros(len(self.doc_len), np.bool_)
            self.alive[:n] = True
        order = np.argsort(terms)  # mostly sorted already; slot order within a term is free
        self.post_slots = slots[order]
        self.post_tfs = tfs[order]
        self.indptr = np.zeros(len(self.terms) + 1, np.int64)
        np.cumsum(np.bincount(terms, minlength=len(self.terms)), out=self.indptr[1:])
        self.base_slots = self.n_slots
        self.delta = {}
        self.delta_entries = 0
        self.n_dead = 0

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        if term + 1 < len(self.indptr):
            start, end = self.indptr[term], self.indptr[term + 1]
            slots, tfs = self.post_slots[start:end], self.post_tfs[start:end]
        else:
            slots, tfs = self.post_slots[:0], self.post_tfs[:0]
        extra = self.delta.get(term)
        if extra is not None:
            slots = np.concatenate([slots, np.asarray(extra[0], np.int32)])
            tfs = np.concatenate([tfs, np.asarray(extra[1], np.int32)])
        live = self.alive[slots]
        return slots[live], tfs[live]

    def search(
        self, query_terms: list[int], top_k: int, k1: float, b: float
    ) -> list[tuple[str, float]]:
        if not query_terms or self.n_live == 0 or top_k <= 0:
            return []
        n = self.n_live
        avg_len = self.total_len / n if self.total_len else 1.0
        scores = np.zeros(self.n_slots, np.float64)
        touched = False
        for term, weight in Counter(query_terms).items():  # repeated query terms count
            slots, tfs = self.postings(term)
            df = len(slots)
            if df == 0:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            tf = tfs.astype(np.float64)
            norm = k1 * (1.0 - b + b * self.doc_len[slots] / avg_len)
            scores[slots] += weight * idf * tf / (tf + norm)
            touched = True
        if not touched:
            return []
        cand = np.flatnonzero(scores)  # one linear scan beats np.unique over postings
        cand_scores = scores[cand]
        if len(cand) > top_k:
            kth = np.partition(cand_scores, -top_k)[-top_k]
            keep = cand_scores >= kth
            cand, cand_scores = cand[keep], cand_scores[keep]
        docs = self.slot_docs
        pairs = (
            (-score, docs[slot].id)  # type: ignore[union-attr]  # live slots hold docs
            for slot, score in zip(cand.tolist(), cand_scores.tolist(), strict=True)
        )
        best = heapq.nsmallest(top_k, pairs)  # score desc, then id: deterministic ties
        return [(doc_id, -neg) for neg, doc_id in best]


class BM25Index:
    """Keyword index over chunks: upsert, delete, search; persisted when `persist_dir` is set.

    `needs_rebuild` is True after a corrupt or incompatible index was found on disk:
    the caller must then `rebuild()` it from the vector store.
    """

    def __init__(
        self,
        persist_dir: str | Path | None,
        k1: float = 0.5,
        b: float = 0.5,
        tokenizer: Tokenizer | None = None,
        autosave: bool = True,
    ) -> None:
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.k1 = float(k1)
        self.b = float(b)
        self.autosave = autosave
        self._tokenizer: Tokenizer = tokenizer or get_tokenizer()
        self._signature = _signature_of(self._tokenizer)
        self._lock = threading.RLock()
        self._corpus = _Corpus()
        self.needs_rebuild = False
        # Persistence bookkeeping: ids changed since the last save, segments on disk.
        self._dirty: set[str] = set()
        self._saved_vocab = 0
        self._segments: list[str] = []
        self._base_ids: set[str] = set()  # ids written by the first (base) segment
        self._base_vocab = 0  # vocabulary size the base segment covers
        self._changed: set[str] = set()  # ids touched since the base segment
        self._generation = 0
        self._full_save_pending = False
        if self.persist_dir is not None:
            self._load()

    # ----------------------------------------------------------------- reads
    def __len__(self) -> int:
        with self._lock:
            return self._corpus.n_live

    def ids(self) -> set[str]:
        """Ids of all stored documents."""
        with self._lock:
            return set(self._corpus.id_to_slot)

    def sources(self) -> dict[str, int]:
        """Chunk count per source URL or path."""
        with self._lock:
            return {src: len(ids) for src, ids in self._corpus.source_ids.items()}

    def get(self, ids: Iterable[str]) -> list[BM25Document]:
        """Copies of the stored documents for `ids` (in that order; unknown ids skipped)."""
        with self._lock:
            known = self._corpus.id_to_slot
            return [self._copy(doc_id) for doc_id in ids if doc_id in known]

    def search(self, query: str, top_k: int = 10) -> list[tuple[str, float]]:
        """Best `top_k` (id, raw BM25 score) pairs with score > 0, best first."""
        tokens = self._tokenizer(query)
        with self._lock:
            terms = self._corpus.term_ids(tokens, grow=False)
            return self._corpus.search(terms, top_k, self.k1, self.b)

    def search_documents(self, query: str, top_k: int = 10) -> list[tuple[BM25Document, float]]:
        """Like `search`, but with copies of the documents, read in one consistent step."""
        tokens = self._tokenizer(query)
        with self._lock:
            corpus = self._corpus
            hits = corpus.search(corpus.term_ids(tokens, grow=False), top_k, self.k1, self.b)
            return [(self._copy(doc_id), score) for doc_id, score in hits]

    def _copy(self, doc_id: str) -> BM25Document:
        doc = self._corpus.slot_docs[self._corpus.id_to_slot[doc_id]]
        assert doc is not None
        return BM25Document(doc.id, doc.text, dict(doc.metadata))

    # ------------------------------------------------------------- mutations
    def add(self, docs: Sequence[BM25Document]) -> int:
        """Insert or replace (by id) documents; returns how many were written."""
        for doc in docs:
            _check_document(doc)
        token_lists = [self._tokenizer(doc.text) for doc in docs]  # outside the lock
        with self._lock:
            self._add_tokenized(docs, token_lists)
            self._after_mutation()
        return len(docs)

    def delete_ids(self, ids: Iterable[str]) -> int:
        """Remove documents by id; returns how many existed."""
        if isinstance(ids, str):
            ids = [ids]
        with self._lock:
            removed = 0
            for doc_id in ids:
                if self._corpus.remove(doc_id):
                    self._touch(doc_id)
                    removed += 1
            if removed:
                self._after_mutation()
            return removed

    def delete_source(self, source: str) -> int:
        """Remove every chunk whose `source_url` is `source`; returns the count."""
        with self._lock:
            return self.delete_ids(list(self._corpus.source_ids.get(source, ())))

    def clear(self) -> None:
        """Remove everything (and the vocabulary)."""
        with self._lock:
            self._corpus = _Corpus()
            self._dirty.clear()
            self._full_save_pending = True
            self._after_mutation(compact=False)

    def rebuild(self, docs: Iterable[BM25Document]) -> int:
        """Replace the whole index with `docs` (e.g. from the vector store); one full save."""
        docs = list(docs)
        for doc in docs:
            _check_document(doc)
        token_lists = [self._tokenizer(doc.text) for doc in docs]
        with self._lock:
            self._corpus = _Corpus()
            self._dirty.clear()
            self._add_tokenized(docs, token_lists, postings=False)
            self._corpus.compact()
            self._full_save_pending = True
            self.needs_rebuild = False
            self._after_mutation(compact=False)
            return self._corpus.n_live

    def _add_tokenized(
        self, docs: Sequence[BM25Document], token_lists: list[list[str]], postings: bool = True
    ) -> None:
        corpus = self._corpus
        for doc, tokens in zip(docs, token_lists, strict=True):
            stored = BM25Document(doc.id, doc.text, dict(doc.metadata))
            terms, tfs = _bag(corpus.term_ids(tokens, grow=True))
            corpus.add(stored, terms, tfs, postings=postings)
            self._touch(doc.id)

    def _touch(self, doc_id: str) -> None:
        self._dirty.add(doc_id)
        self._changed.add(doc_id)

    def _after_mutation(self, compact: bool = True) -> None:
        if compact and self._corpus.needs_compaction():
            self._corpus.compact()
        if self.persist_dir is not None and self.autosave:
            try:
                self.save()
            except OSError as err:
                logger.warning(
                    "BM25 index could not be saved to %s (%s); it will be rebuilt from the "
                    "vector store if it is stale at the next start.",
                    self.persist_dir,
                    err,
                )

    # ----------------------------------------------------------- persistence
    def save(self) -> None:
        """Write pending changes to disk (see `_plan_save` for what is written)."""
        if self.persist_dir is None:
            return
        with self._lock:
            corpus = self._corpus
            if not (self._full_save_pending or self._dirty) and self._saved_vocab == len(
                corpus.terms
            ):
                return
            kind, deleted, ids, vocab_start = self._plan_save()
            self.persist_dir.mkdir(parents=True, exist_ok=True)
            slots = [corpus.id_to_slot[i] for i in ids]
            name = f"{SEGMENT_PREFIX}{self._generation + 1:08d}{SEGMENT_SUFFIX}"
            self._write_segment(
                name,
                deleted,
                [corpus.slot_lines[s] for s in slots],
                [corpus.slot_bags[s] for s in slots],
                vocab_start,
                corpus.terms[vocab_start:],
            )
            if kind == "full":
                segments = [name]
            elif kind == "tail":
                segments = [self._segments[0], name]
            else:
                segments = [*self._segments, name]
            self._write_manifest(segments, self._generation + 1, corpus.n_live, len(corpus.terms))
            self._generation += 1
            self._segments = segments
            self._saved_vocab = len(corpus.terms)
            self._dirty.clear()
            self._full_save_pending = False
            if kind == "full":
                self._base_ids = set(corpus.id_to_slot)
                self._base_vocab = len(corpus.terms)
                self._changed.clear()
            if kind != "small":
                self._remove_stale_files()

    def _plan_save(self) -> tuple[str, list[str], list[str], int]:
        """Choose the write: (kind, ids to delete, ids to write, first vocabulary id).

        - "small": one segment with just the changes since the last save (the usual case);
        - "tail": after MAX_SEGMENTS saves, everything changed since the base snapshot
          is rewritten as one segment, replacing all but the base;
        - "full": one snapshot of everything, when there is no base yet or the changes
          since it reach an eighth of the index (so full rewrites are rare: amortised O(1)).
        """
        corpus = self._corpus
        live = corpus.id_to_slot
        if (
            self._full_save_pending
            or not self._segments
            or len(self._changed) > FULL_SNAPSHOT_SLACK + corpus.n_live // 8
        ):
            return "full", [], [d.id for d in corpus.slot_docs if d is not None], 0
        if len(self._segments) >= MAX_SEGMENTS:
            changed = sorted(self._changed)
            deleted = [i for i in changed if i in self._base_ids]
            return "tail", deleted, [i for i in changed if i in live], self._base_vocab
        dirty = sorted(self._dirty)
        return "small", dirty, [i for i in dirty if i in live], self._saved_vocab

    def _write_segment(
        self,
        name: str,
        deleted: list[str],
        lines: list[bytes | None],
        bags: list[tuple[np.ndarray, np.ndarray] | None],
        vocab_start: int,
        vocab: list[str],
    ) -> None:
        """Write one immutable segment file under a temp name, then rename it into place."""
        assert self.persist_dir is not None
        header = {"count": len(lines), "deleted": deleted, "vocab_start": vocab_start}
        header["vocab"] = vocab
        present = [bag for bag in bags if bag is not None]
        counts = np.fromiter((len(bag[0]) for bag in present), np.int64, len(present))
        offsets = np.zeros(len(present) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        empty = np.empty(0, np.int32)
        arrays = {
            "header": _as_array(json.dumps(header, ensure_ascii=False).encode()),
            "docs": _as_array(b"".join(line or b"" for line in lines)),  # JSON lines
            "offsets": offsets,
            "terms": np.concatenate([b[0] for b in present]) if present else empty,
            "tfs": np.concatenate([b[1] for b in present]) if present else empty,
        }
        tmp = self.persist_dir / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.persist_dir / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.persist_dir)

    def _write_manifest(self, segments: list[str], generation: int, count: int, vocab: int) -> None:
        assert self.persist_dir is not None
        manifest = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "tokenizer": self._signature,
            "generation": generation,
            "segments": segments,
            "doc_count": count,
            "vocab_size": vocab,
        }
        tmp = self.persist_dir / f"{TMP_PREFIX}{MANIFEST}-{uuid.uuid4().hex[:8]}"
        try:
            _write_bytes(tmp, json.dumps(manifest, indent=1).encode())
            os.replace(tmp, self.persist_dir / MANIFEST)  # the commit point
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.persist_dir)

    def _remove_stale_files(self) -> None:
        """Delete segments the manifest no longer lists and temp files of dead saves."""
        assert self.persist_dir is not None
        keep = set(self._segments)
        for entry in self.persist_dir.iterdir():
            stale_segment = entry.name.startswith(SEGMENT_PREFIX) and entry.name not in keep
            if stale_segment or entry.name.startswith(TMP_PREFIX):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)

    def _load(self) -> None:
        assert self.persist_dir is not None
        manifest_path = self.persist_dir / MANIFEST
        if not manifest_path.exists():
            if self.persist_dir.exists() and any(self.persist_dir.iterdir()):
                self._start_empty(f"{manifest_path} is missing")
            return
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT_NAME or manifest.get("version") != FORMAT_VERSION:
                self._start_empty(
                    f"format {manifest.get('format')!r} version {manifest.get('version')!r} "
                    f"is not {FORMAT_NAME!r} version {FORMAT_VERSION}"
                )
                return
            segments = [str(s) for s in manifest["segments"]]
            for k, name in enumerate(segments):
                if not name.startswith(SEGMENT_PREFIX) or "/" in name or "\\" in name:
                    raise ValueError(f"bad segment name {name!r}")
                touched = self._load_segment(self.persist_dir / name)
                if k == 0:
                    self._base_ids = touched
                    self._base_vocab = len(self._corpus.terms)
                else:
                    self._changed |= touched
            corpus = self._corpus
            if (
                corpus.n_live != manifest["doc_count"]
                or len(corpus.terms) != manifest["vocab_size"]
            ):
                raise ValueError("document or vocabulary count differs from the manifest")
            corpus.compact()
            self._segments = segments
            self._generation = int(manifest["generation"])
            self._saved_vocab = len(corpus.terms)
        except Exception as err:  # any unreadable state means: start empty, rebuild
            self._start_empty(f"it could not be read ({type(err).__name__}: {err})")
            return
        if manifest.get("tokenizer") != self._signature:
            logger.warning(
                "BM25 index in %s was built with tokenizer %r, not %r; re-tokenising %d chunks.",
                self.persist_dir,
                manifest.get("tokenizer"),
                self._signature,
                len(self._corpus.id_to_slot),
            )
            self.rebuild([d for d in self._corpus.slot_docs if d is not None])
            return
        self._remove_stale_files()

    def _load_segment(self, path: Path) -> set[str]:
        """Apply one segment (deletes, vocabulary, documents); returns the ids it touches."""
        with np.load(path, allow_pickle=False) as arrays:
            header = json.loads(arrays["header"].tobytes())
            docs_raw = arrays["docs"].tobytes().splitlines(keepends=True)
            offsets, terms, tfs = arrays["offsets"], arrays["terms"], arrays["tfs"]
        if len(docs_raw) != header["count"] or len(offsets) != len(docs_raw) + 1:
            raise ValueError(f"segment {path.name} is inconsistent")
        corpus = self._corpus
        for doc_id in header["deleted"]:
            corpus.remove(doc_id)
        corpus.extend_vocab(int(header["vocab_start"]), header["vocab"])
        vocab_size = len(corpus.terms)
        if len(terms) and (terms.min() < 0 or terms.max() >= vocab_size):
            raise ValueError(f"segment {path.name} refers to unknown terms")
        touched = {str(doc_id) for doc_id in header["deleted"]}
        for i, line in enumerate(docs_raw):
            raw = json.loads(line)
            line = line if line.endswith(b"\n") else line + b"\n"
            doc = BM25Document(str(raw["id"]), raw["text"], dict(raw["metadata"]))
            _check_document(doc)
            start, end = int(offsets[i]), int(offsets[i + 1])
            bag = terms[start:end].astype(np.int32), tfs[start:end].astype(np.int32)
            corpus.add(doc, *bag, postings=False, line=line)  # _load compacts at the end
            touched.add(doc.id)
        return touched

    def _start_empty(self, reason: str) -> None:
        logger.warning(
            "BM25 index in %s is unusable: %s; starting empty, it must be rebuilt from the "
            "vector store.",
            self.persist_dir,
            reason,
        )
        self._corpus = _Corpus()
        self._segments = []
        self._base_ids = set()
        self._changed = set()
        self._saved_vocab = 0
        self._full_save_pending = True
        self.needs_rebuild = True


def _as_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def _signature_of(tokenizer: Tokenizer) -> str:
    """What the stored token ids depend on; a change means re-tokenising."""
    signature = getattr(tokenizer, "signature", None)
    if signature is None:
        signature = getattr(tokenizer, "__qualname__", type(tokenizer).__qualname__)
    return str(signature)


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    """Make renames inside `path` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
