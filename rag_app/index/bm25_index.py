"""BM25Index: incremental BM25 keyword search with crash-safe persistence.

Why not a plain `bm25s.BM25`: bm25s precomputes every (doc, term) score with the
global IDF and average length, so any add means a full re-index (1.9 s at 100k
chunks on this machine). Here each document is tokenised once, kept as
(term id, tf) postings, and scored at query time with the same Lucene formula bm25s
uses (`method="lucene"`; tests check parity with bm25s):

    idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
    score    = Σ_t idf(t) · tf / (tf + k1 · (1 - b + b · len / avglen))

Only the postings of the query terms are touched, so N, df and avglen are always
current and a query costs what its terms cost, not what the corpus costs. Only ids,
sources and token statistics are kept (the text lives in Chroma). On disk: a
snapshot segment plus small delta segments listed by an atomically replaced manifest
(`bm25_segments`); the manifest also carries the caller's `cursor` (how far the index
has caught up with the store's change log).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_app.index import bm25_segments as seg
from rag_app.index.bm25_postings import Bag, Postings, QueryTerm, bag_of
from rag_app.index.key_typos import KeyVariants
from rag_app.index.tokenizer import (
    BOUND,
    GRAM,
    STOP_WORDS,
    get_tokenizer,
    key_spans,
    key_term,
    quoted_keys,
    stem,
)

logger = logging.getLogger(__name__)

MAX_SEGMENTS = 64  # at this many segments the next save is a full snapshot
FULL_SNAPSHOT_SLACK = 1000  # ... and once changes exceed this + 1/8 of the index

Tokenizer = Callable[[str], list[str]]

LAYOUT = "context-key-fields-v2"
"""Bump when what a document's terms are made of changes (stored indexes are rebuilt)."""
CONTEXT = "^"
"""Prefix of context-field terms (page title, heading path): a field of their own."""


@dataclass(frozen=True)
class FieldWeights:
    """Query-time weight of each field: body words 1, the rest relative to them.

    Measured in docs/evaluation.md; a weight of 0 switches the field off for queries.
    """

    gram: float = 0.5
    bound: float = 1.0
    context: float = 1.0
    key: float = 2.0

    def expand(self, tokens: list[str]) -> list[tuple[float, list[tuple[str, float]]]]:
        """Query tokens → (term weight, [(indexed term, field weight)]), one entry per
        distinct token (a repeated token counts more): the body term and its context twin
        are scored as one term (BM25F: their frequencies add, one IDF)."""
        weights: dict[str, float] = {}
        for token in tokens:
            weight = self.gram if token.startswith(GRAM) else 1.0
            if token.startswith(BOUND):
                weight = self.bound
            if weight > 0:
                weights[token] = weights.get(token, 0.0) + weight
        out: list[tuple[float, list[tuple[str, float]]]] = []
        for token, weight in weights.items():
            fields = [(token, 1.0)]
            if self.context > 0 and not token.startswith(BOUND):
                fields.append((CONTEXT + token, self.context))
            out.append((weight, fields))
        return out


@dataclass(frozen=True, slots=True)
class BM25Document:
    """One chunk to index: its id, the text BM25 sees, the source it belongs to, its
    context (title, heading path) and, for a table row, its key (first column), each
    indexed as a field of its own."""

    id: str
    text: str
    source: str | None = None
    context: str = ""
    key: str = ""


def _check_document(doc: BM25Document) -> None:
    if not isinstance(doc.id, str) or not doc.id:
        raise ValueError(f"BM25 document id must be a non-empty string, got {doc.id!r}.")
    if not isinstance(doc.text, str):
        raise ValueError(f"BM25 document {doc.id!r} has no text string.")
    if not isinstance(doc.context, str) or not isinstance(doc.key, str):
        raise ValueError(f"BM25 document {doc.id!r} context and key must be strings.")
    if doc.source is not None and not isinstance(doc.source, str):
        raise ValueError(f"BM25 document {doc.id!r} source must be a string or None.")


class BM25Index:
    """Keyword index over chunks: add, delete, search; persisted when `persist_dir` is set.

    `needs_rebuild` is True after a corrupt or incompatible index was found on disk
    (or the tokenizer changed): the caller must `rebuild()` it from the vector store.
    """

    def __init__(
        self,
        persist_dir: str | Path | None,
        k1: float = 0.5,
        b: float = 0.5,
        tokenizer: Tokenizer | None = None,
        autosave: bool = True,
        fields: FieldWeights | None = None,
    ) -> None:
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.k1 = float(k1)
        self.b = float(b)
        self.autosave = autosave
        self.fields = fields or FieldWeights()
        self._tokenizer: Tokenizer = tokenizer or get_tokenizer()
        self._signature = f"{_signature_of(self._tokenizer)}+{LAYOUT}"
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()
        self._p = Postings()
        self._keys = KeyVariants()
        self._keys_of: Postings | None = None
        """The vocabulary `_keys` indexes (rebuilt when `_p` is replaced)."""
        self.needs_rebuild = False
        self._cursor: dict[str, Any] = {}
        self._dirty: set[str] = set()
        self._meta_dirty = False
        self._full_pending = False
        self._changed_since_snapshot = 0
        self._segments: list[str] = []
        self._generation = 0
        self._saved_vocab = 0
        if self.persist_dir is not None:
            self._load()

    # ----------------------------------------------------------------- reads
    def __len__(self) -> int:
        with self._lock:
            return self._p.n_live

    def __contains__(self, doc_id: object) -> bool:
        with self._lock:
            return doc_id in self._p.id_to_slot

    def ids(self) -> set[str]:
        """Ids of all stored documents."""
        with self._lock:
            return set(self._p.id_to_slot)

    def sources(self) -> dict[str, int]:
        """Chunk count per source."""
        with self._lock:
            return {src: len(ids) for src, ids in self._p.source_ids.items()}

    def source_of(self, ids: Sequence[str]) -> list[str | None]:
        """The source of each id (None for an id not stored): an in-memory lookup."""
        with self._lock:
            slots, sources = self._p.id_to_slot, self._p.slot_sources
            return [sources[slots[i]] if i in slots else None for i in ids]

    def ids_for_source(self, source: str) -> list[str]:
        """Ids of one source's chunks (an in-memory lookup, no scan)."""
        with self._lock:
            return sorted(self._p.source_ids.get(source, ()))

    @property
    def cursor(self) -> dict[str, Any]:
        """The caller's catch-up position, persisted with the index."""
        with self._lock:
            return dict(self._cursor)

    def tokenize(self, text: str) -> list[str]:
        return self._tokenizer(text)

    def document_tokens(self, doc: BM25Document) -> list[str]:
        """The terms stored for a document: its text, then its context field."""
        tokens = self._tokenizer(doc.text)
        if doc.context:
            tokens += [CONTEXT + t for t in self._tokenizer(doc.context) if not t.startswith(BOUND)]
        key = key_term(doc.key) if doc.key else None
        if key:
            tokens.append(key)
        return tokens

    def _query_terms(self, query: str, fields: FieldWeights | None) -> list[QueryTerm]:
        vocab = self._p.vocab
        out: list[QueryTerm] = []
        fields = fields or self.fields
        for weight, parts in fields.expand(self._tokenizer(query)):
            known = [(vocab[t], fw) for t, fw in parts if t in vocab]
            if known:
                out.append((weight, known))
        if fields.key > 0:
            if self._keys_of is not self._p:  # a new vocabulary (cleared, rebuilt, loaded)
                self._keys, self._keys_of = KeyVariants(), self._p
            self._keys.update(self._p.terms)
            exact = key_spans(query, vocab.__contains__)
            keys = self._keys.matches(query, self._p.terms, exact, self.knows_word)
            keys += [k for k in quoted_keys(query, vocab.__contains__) if k not in keys]
            out += [(fields.key, [(vocab[t], 1.0)]) for t in keys]
        return out

    def knows_word(self, word: str) -> bool:
        """Whether `word` (folded, as a query span holds it) is a stop word or a body
        term of the index, as the tokenizer would index it (stemmed)."""
        return word in STOP_WORDS or stem(word) in self._p.vocab

    def search(
        self,
        query: str,
        top_k: int = 10,
        *,
        k1: float | None = None,
        b: float | None = None,
        fields: FieldWeights | None = None,
        sources: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Best `top_k` (id, raw BM25 score) pairs with score > 0, best first; only chunks
        of `sources` when given."""
        k1 = self.k1 if k1 is None else k1
        b = self.b if b is None else b
        with self._lock:
            allowed = None
            if sources is not None:
                allowed = [
                    self._p.id_to_slot[i] for s in sources for i in self._p.source_ids.get(s, ())
                ]
            return self._p.search(self._query_terms(query, fields), top_k, k1, b, allowed)

    def unseen_words(self, query: str) -> list[str]:
        """The query's words that no stored chunk holds (body or context field): what
        the store never mentions. The lexical half of the no-match rule."""
        return self.lexical_evidence(query, [])[0]

    def rarest_match(self, query: str, ids: Sequence[str]) -> int | None:
        """The fewest chunks any query term held by one of `ids` is found in (body or
        context; character n-grams too): 1 means a hit shares a term with the query that
        no other chunk has. None when the hits share no term with the query."""
        return self.lexical_evidence(query, ids)[1]

    def unknown_code(self, names: Sequence[str]) -> list[str]:
        """Those of `names` (`no_match.named_code`) the store does not hold, judged by
        their last parts, since a query may qualify a name more or less than the docs do:
        `pathlib.Path.read_text` is held wherever `read_text` is (a snake_case name is
        specific on its own), `unittest.mock.patch` only where `mock` and `patch` both are
        (a plain word is not). Parts are looked up as the tokenizer indexes them (`stem`
        leaves a snake_case part whole; a stop word is always held, and a path ending in
        one is prose with a missing space: `Thanks.How`); body or context, live chunks."""
        with self._lock:

            def held(part: str) -> bool:
                return part in STOP_WORDS or self._held(stem(part))

            out = []
            for name in names:
                parts = name.split(".")
                last = parts[-1]
                specific = "_" in last or len(parts) == 1 or last in STOP_WORDS
                if held(last) and (specific or held(parts[-2])):
                    continue
                out.append(name)
            return out

    def _postings(self, term: str) -> list[np.ndarray]:
        """The slots holding `term` in the body or the context field (under the lock)."""
        p, vocab = self._p, self._p.vocab
        return [p.postings(vocab[t])[0] for t in (term, CONTEXT + term) if t in vocab]

    def _held(self, term: str) -> bool:
        """Whether a live chunk holds `term`, body or context (under the lock)."""
        return any(len(self._p.live(f, f)[0]) for f in self._postings(term))

    def lexical_evidence(self, query: str, ids: Sequence[str]) -> tuple[list[str], int | None]:
        """`unseen_words` and `rarest_match` of one query, tokenized once."""
        terms = list(dict.fromkeys(self._tokenizer(query)))
        with self._lock:
            p = self._p
            unseen = [t for t in terms if not t.startswith((GRAM, BOUND)) and not self._held(t)]
            slots = np.asarray([p.id_to_slot[i] for i in ids if i in p.id_to_slot], np.int64)
            rarest: int | None = None
            for term in terms if len(slots) else ():
                found = self._postings(term)
                if not any(np.isin(slots, f).any() for f in found):
                    continue  # the hits do not hold it: no need to count who does
                count = len(np.unique(np.concatenate([p.live(f, f)[0] for f in found])))
                rarest = count if rarest is None else min(rarest, count)
            return unseen, rarest

    # ------------------------------------------------------------- mutations
    def add(self, docs: Sequence[BM25Document]) -> int:
        """Insert or replace (by id) documents; returns how many were written."""
        for doc in docs:
            _check_document(doc)
        token_lists = [self.document_tokens(doc) for doc in docs]  # outside the lock
        with self._lock:
            self._add_tokenized(docs, token_lists)
        self._after_mutation()
        return len(docs)

    def delete_ids(self, ids: Iterable[str]) -> int:
        """Remove documents by id; returns how many existed."""
        if isinstance(ids, str):
            ids = [ids]
        with self._lock:
            removed = self._delete_locked(ids)
        if removed:
            self._after_mutation()
        return removed

    def delete_source(self, source: str, *, cursor: dict[str, Any] | None = None) -> int:
        """Remove every chunk of `source`; returns the count. `cursor` is saved with it."""
        with self._lock:
            removed = self._delete_locked(list(self._p.source_ids.get(source, ())))
            self._take_cursor(cursor)
        if removed or cursor is not None:
            self._after_mutation()
        return removed

    def _take_cursor(self, cursor: dict[str, Any] | None) -> None:
        if cursor is not None:
            self._cursor = dict(cursor)
            self._meta_dirty = True

    def replace_source(
        self,
        source: str,
        docs: Sequence[BM25Document],
        *,
        cursor: dict[str, Any] | None = None,
        tokens: dict[str, list[str]] | None = None,
    ) -> tuple[int, int]:
        """Make `source` hold exactly `docs`, in one step and one save: (written, removed).

        `cursor` (the change-log position this change brings the index to) is saved with it;
        `tokens` are token lists already made for some of `docs` (by id).
        """
        for doc in docs:
            _check_document(doc)
        wanted = {doc.id for doc in docs}
        with self._lock:
            have = set(self._p.source_ids.get(source, ()))
        todo = [doc for doc in docs if doc.id not in have]
        made = tokens or {}
        token_lists = [made[d.id] if d.id in made else self.document_tokens(d) for d in todo]
        with self._lock:
            self._add_tokenized(todo, token_lists)
            stale = set(self._p.source_ids.get(source, ())) - wanted
            removed = self._delete_locked(sorted(stale))
            self._take_cursor(cursor)
        if todo or removed or cursor is not None:
            self._after_mutation()
        return len(todo), removed

    def set_cursor(self, cursor: dict[str, Any]) -> None:
        """Record the catch-up position; saved with the next save (now, with autosave)."""
        with self._lock:
            self._cursor = dict(cursor)
            self._meta_dirty = True
        self._after_mutation(compact=False)

    def clear(self) -> None:
        """Remove everything (and the vocabulary)."""
        with self._lock:
            self._p = Postings()
            self._dirty.clear()
            self._full_pending = True
        self._after_mutation(compact=False)

    def rebuild(self, docs: Iterable[BM25Document]) -> int:
        """Replace the whole index with `docs` (e.g. from the vector store); one full save."""
        docs = list(docs)
        for doc in docs:
            _check_document(doc)
        token_lists = [self.document_tokens(doc) for doc in docs]
        with self._lock:
            self._p = Postings()
            self._dirty.clear()
            self._add_tokenized(docs, token_lists, postings=False)
            self._p.compact()
            self._full_pending = True
            self.needs_rebuild = False
        self._after_mutation(compact=False)
        return len(self)

    def _add_tokenized(
        self, docs: Sequence[BM25Document], token_lists: list[list[str]], postings: bool = True
    ) -> None:
        p = self._p
        for doc, tokens in zip(docs, token_lists, strict=True):
            p.add(doc.id, doc.source, bag_of(p.term_ids(tokens, grow=True)), postings)
            self._dirty.add(doc.id)
        self._changed_since_snapshot += len(docs)

    def _delete_locked(self, ids: Iterable[str]) -> int:
        removed = 0
        for doc_id in ids:
            if self._p.remove(doc_id):
                self._dirty.add(doc_id)
                removed += 1
        self._changed_since_snapshot += removed
        return removed

    def _after_mutation(self, compact: bool = True) -> None:
        if self.persist_dir is not None and self.autosave:
            try:
                self.save()
            except OSError as err:
                logger.warning(
                    "BM25 index could not be saved to %s (%s); it catches up from the "
                    "vector store at the next start.",
                    self.persist_dir,
                    err,
                )
        if compact:
            with self._lock:
                if self._p.needs_compaction():
                    self._p.compact()

    # ----------------------------------------------------------- persistence
    def save(self) -> None:
        """Write pending changes: a small delta segment, or now and then a full snapshot."""
        if self.persist_dir is None:
            return
        with self._save_lock:
            with self._lock:
                plan = self._plan_save()
                if plan is None:
                    return
                kind, arrays, dirty = plan
                generation = self._generation + 1
                name = seg.segment_name(generation)
                if kind == "snapshot":
                    segments = [name]
                elif kind == "delta":
                    segments = [*self._segments, name]
                else:  # manifest only (the cursor moved)
                    segments = list(self._segments)
                manifest = {
                    "format": seg.FORMAT_NAME,
                    "version": seg.FORMAT_VERSION,
                    "tokenizer": self._signature,
                    "generation": generation,
                    "segments": segments,
                    "doc_count": self._p.n_live,
                    "vocab_size": len(self._p.terms),
                    "cursor": self._cursor,
                }
                self._dirty = set()
                self._meta_dirty = False
            try:
                self.persist_dir.mkdir(parents=True, exist_ok=True)
                if arrays is not None:
                    seg.write_segment(self.persist_dir, name, arrays)
                seg.write_manifest(self.persist_dir, manifest)
            except BaseException:
                with self._lock:  # nothing is lost: the next save writes everything
                    self._dirty |= dirty
                    self._full_pending = True
                    self._meta_dirty = True
                raise
            with self._lock:
                self._generation = generation
                self._segments = segments
                self._saved_vocab = manifest["vocab_size"]
                if kind == "snapshot":
                    self._full_pending = False
                    self._changed_since_snapshot = 0
            if kind == "snapshot":
                seg.remove_stale_files(self.persist_dir, set(segments))

    def _plan_save(self) -> tuple[str, dict[str, Any] | None, set[str]] | None:
        """(kind, arrays to write or None for a manifest-only save, dirty ids) or None."""
        p = self._p
        if not (self._dirty or self._full_pending or self._meta_dirty):
            return None
        dirty = set(self._dirty)
        live = p.id_to_slot
        missing_bag = any(live[i] not in p.delta_bags for i in dirty if i in live)
        if (
            self._full_pending
            or not self._segments
            or len(self._segments) >= MAX_SEGMENTS
            or self._changed_since_snapshot > FULL_SNAPSHOT_SLACK + p.n_live // 8
            or missing_bag
        ):
            if not p.is_compact():
                p.compact()
            return "snapshot", seg.snapshot_arrays(p), dirty
        if not dirty and self._saved_vocab == len(p.terms):
            return "meta", None, dirty
        added: list[tuple[str, str | None, Bag]] = []
        for doc_id in sorted(dirty):
            slot = live.get(doc_id)
            if slot is not None:
                added.append((doc_id, p.slot_sources[slot], p.delta_bags[slot]))
        arrays = seg.delta_arrays(
            sorted(dirty), added, self._saved_vocab, p.terms[self._saved_vocab :]
        )
        return "delta", arrays, dirty

    def _load(self) -> None:
        assert self.persist_dir is not None
        manifest_path = self.persist_dir / seg.MANIFEST
        if not manifest_path.exists():
            if self.persist_dir.exists() and any(
                not p.name.startswith(".rag-") for p in self.persist_dir.iterdir()
            ):
                self._start_empty(f"{manifest_path} is missing")
            return
        try:
            manifest = seg.read_manifest(self.persist_dir)
            p = Postings()
            segments = [str(s) for s in manifest["segments"]]
            touched = 0
            for k, name in enumerate(segments):
                touched += len(seg.apply_segment(p, self.persist_dir / name, first=k == 0))
            if p.n_live != manifest["doc_count"] or len(p.terms) != manifest["vocab_size"]:
                raise ValueError("document or vocabulary count differs from the manifest")
            if not p.is_compact():
                p.compact()
        except Exception as err:  # any unreadable state means: start empty, rebuild
            self._start_empty(f"it could not be read ({type(err).__name__}: {err})")
            return
        if manifest.get("tokenizer") != self._signature:
            self._start_empty(
                f"it was built with tokenizer and fields {manifest.get('tokenizer')!r}, "
                f"not {self._signature!r}"
            )
            return
        self._p = p
        self._segments = segments
        self._generation = int(manifest["generation"])
        self._saved_vocab = len(p.terms)
        self._changed_since_snapshot = touched
        self._cursor = dict(manifest.get("cursor") or {})
        seg.remove_stale_files(self.persist_dir, set(segments))

    def _start_empty(self, reason: str) -> None:
        logger.warning(
            "BM25 index in %s is unusable: %s; starting empty, it must be rebuilt from the "
            "vector store.",
            self.persist_dir,
            reason,
        )
        self._p = Postings()
        self._segments = []
        self._saved_vocab = 0
        self._cursor = {}
        self._full_pending = True
        self.needs_rebuild = True


def _signature_of(tokenizer: Tokenizer) -> str:
    """What the stored token ids depend on; a change means re-tokenising."""
    signature = getattr(tokenizer, "signature", None)
    if signature is None:
        signature = getattr(tokenizer, "__qualname__", type(tokenizer).__qualname__)
    return str(signature)
