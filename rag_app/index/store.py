"""KnowledgeStore: Chroma (the source of truth) + BM25 (derived) + the change log,
changed together in one step.

Writes are serialised by one lock and ordered so that a crash at any point loses
nothing that was reported committed and leaves nothing half-visible for long:

1. a `begin` entry in the change log names the source;
2. new chunks are upserted to Chroma, then BM25 is made to match;
3. stale chunks are deleted (Chroma, then BM25);
4. the source record is written (a record exists only while its chunks do);
5. a `write` entry tells every other reader the source is done.

A reader that meets an entry re-syncs that source from Chroma (`sync_source`), so a
process killed between steps is repaired by whoever reads next, including itself at
its next start. Deletes remove the record first, then the chunks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from chromadb.api import ClientAPI
from llama_index.core.schema import BaseNode, MetadataMode, TextNode

from rag_app.crawl.pages import utc_now_iso
from rag_app.index.bm25_index import BM25Document, BM25Index, FieldWeights
from rag_app.index.change_log import (
    RETENTION_MS,
    SKEW_MS,
    Change,
    ChangeLog,
    Cursor,
    now_ms,
)
from rag_app.index.chroma_store import (
    HNSW_EF_SEARCH,
    RESTORE_COPY_MAX_BYTES,
    ChromaStore,
    SectionChunk,
    SourceRecord,
    embedded,
)
from rag_app.index.exact_vectors import ExactVectors, VectorMatches
from rag_app.index.search_gate import SEARCHES
from rag_app.index.segment_files import remove_left_behind, segment_ids
from rag_app.index.vector_copy import VectorCopy
from rag_app.parsing.content_type import is_numeric_token
from rag_app.parsing.metadata_modes import context_text
from rag_app.results import CheckReport

logger = logging.getLogger(__name__)

VECTOR_CHECK_SAMPLE = 5000  # chunks whose own embedding must find them (per check)


def bm25_text(node: BaseNode) -> str:
    """The chunk text as BM25 sees it: the text alone; its context is a field of its own."""
    return node.get_content(metadata_mode=MetadataMode.NONE)


def _dangling(entries: list[Change]) -> list[str]:
    """Sources whose latest entry is a `begin` (its writer stopped mid-write), oldest first."""
    last: dict[str, str] = {}
    for e in sorted(entries, key=lambda c: (c.ts_ms, c.origin, c.seq)):
        last[e.source] = e.op
    return sorted(src for src, op in last.items() if op == "begin" and src != "*")


def bm25_doc(node: BaseNode) -> BM25Document:
    """A chunk as BM25 indexes it: text, context field and, for a table row, its key."""
    meta = node.metadata
    source = meta.get("source_url")
    key = ""
    if meta.get("content_type") == "table":  # what names the row (older chunks: 1st cell)
        key = str(meta.get("row_key", meta.get("entity_name")) or "")
        key = "" if is_numeric_token(key.strip()) else key  # an index number is no name
    return BM25Document(
        node.node_id,
        bm25_text(node),
        str(source) if source else None,
        context_text(node),
        key,
    )


@dataclass
class Neighbourhood:
    """Chunks read around a search's best hits (`KnowledgeStore.nodes_near`): the pieces,
    and which chunk indexes of each source were asked (found or not)."""

    chunks: list[SectionChunk] = field(default_factory=list)
    asked: dict[str, set[int]] = field(default_factory=dict)


EXACT_COPY_INLINE = 5_000  # up to here the exact-search copy is read in line (~0.4 s)
RESTORE_READ = 1000
"""Vectors read from the copy at a time by `search_the_copy`."""
HEAL_BATCH = 500  # chunks whose vectors one step of `heal_vectors` looks up (~0.2 s)


class KnowledgeStore:
    """One owner's view of the store: every change goes through here."""

    def __init__(
        self,
        client: ClientAPI,
        collection_name: str,
        bm25: BM25Index,
        *,
        model_name: str,
        dimension: int,
        poll_changes: bool,
        check_model: bool = True,
        ef_search: int = HNSW_EF_SEARCH,
        exact_max_chunks: int = 0,
        rows_max_chunks: int | None = None,
        vector_copy: VectorCopy | None = None,
    ) -> None:
        self.client = client
        self.vector_copy = vector_copy
        self.ef_search = ef_search
        self.exact_max_chunks = exact_max_chunks
        self.rows_max_chunks = rows_max_chunks
        self.collection_name = collection_name
        self.model_name = model_name
        self.dimension = dimension
        self.bm25 = bm25
        self.chroma = self._chunks(check_model)
        self.log = ChangeLog(client, collection_name)
        self.poll_changes = poll_changes
        self._write_lock = threading.RLock()
        self._failed_writes: set[str] = set()
        """Sources whose write failed part-way, to be settled (`settle_failed_writes`)."""
        self.write_started: float | None = None  # monotonic start of the write in progress
        self.stall_exit_sec: float | None = None  # set by an owner process: see _timed_write
        self._sync_lock = threading.Lock()
        self.closing = threading.Event()  # set by the owner on close: background reads stop
        self.loaders: list[threading.Thread] = []
        """Background reads of the in-memory copies after a switch of collections (the
        owner joins them on close, after setting `closing`)."""
        self._cursor = Cursor(bm25.cursor)

    # ----------------------------------------------------------------- opening
    def recover(self) -> int:
        """At start: rebuild BM25 if unusable, apply unseen changes, repair any drift."""
        with self._write_lock:
            if self.bm25.needs_rebuild:
                self.rebuild_bm25()
                return len(self.bm25)
            synced = self.catch_up(force=True)
            self.close_dangling()
            if not self.poll_changes:  # the only writer: nothing older can still arrive
                self._cursor.ts_ms = max(self._cursor.ts_ms, now_ms() - SKEW_MS)
                self.bm25.set_cursor(self._cursor.to_state())
            stale = self._cursor.ts_ms and self._cursor.ts_ms < now_ms() - RETENTION_MS
            if stale or len(self.bm25) != self.chroma.count():
                report = self.check(repair=True, vector_copy=False)  # its own thread
                if not report.ok:
                    logger.warning(
                        "BM25 and Chroma differed (%d missing, %d extra); repaired from Chroma.",
                        report.missing_in_bm25,
                        report.extra_in_bm25,
                    )
            self.log.prune()
            return synced

    def _chunks(self, check_model: bool) -> ChromaStore:
        """The current chunk collection, its rows kept for the ids this BM25 holds."""
        return ChromaStore(
            self.client, self.collection_name, model_name=self.model_name,
            dimension=self.dimension, check_model=check_model, ef_search=self.ef_search,
            exact_max_chunks=self.exact_max_chunks, rows_max_chunks=self.rows_max_chunks,
            known=self.known_ids, vector_copy=self.vector_copy,
        )  # fmt: skip

    def known_ids(self, ids: Sequence[str]) -> list[bool]:
        """Which of `ids` this process has caught up with (its BM25 holds them)."""
        return [s is not None for s in self.bm25.source_of(ids)]

    def load_exact_vectors(self) -> None:
        """Fill the exact-search copy of the vectors from Chroma (stores of up to
        `exact_max_chunks`), then the in-memory copy of the stored rows (up to
        `rows_max_chunks`). Reading takes no lock (writes go on; searches use HNSW and read
        Chroma until it is ready); the vectors are then settled against Chroma's ids under
        the write lock. Logs how long it took."""
        start = time.perf_counter()
        chroma = self.chroma
        if chroma.exact is not None and chroma.rows is not None:
            return
        try:
            exact = chroma.read_exact(self.bm25.source_of, self.closing)
            with self._write_lock:
                if self.closing.is_set() or self.chroma is not chroma:
                    return  # closing, or switched to another collection meanwhile
                if exact is not None and chroma.exact is None:
                    chroma.adopt_exact(exact)
                if not chroma.start_rows():
                    return
        except Exception as err:  # e.g. the collection went away: HNSW keeps answering
            logger.warning("Exact vector search is off for this store: %s", err)
            return
        loaded = time.perf_counter()
        try:  # no lock: a page a write overlaps is left to be read when a search needs it
            rows = chroma.load_rows(self.closing)
        except Exception as err:  # searches read their rows from Chroma meanwhile
            logger.warning("Could not read the stored rows into memory: %s", err)
            rows = 0
        logger.info(
            "Exact vector search over %d chunks (loaded in %.2f s); %d rows held in memory "
            "(read in %.2f s).",
            len(exact) if exact is not None and chroma.exact is exact else 0,
            loaded - start,
            rows,
            time.perf_counter() - loaded,
        )

    def heal_vectors(self) -> bool:
        """After the previous owner ended abnormally: re-insert every chunk that Chroma's
        vector index (HNSW) no longer finds by its own stored embedding, as `check
        --repair` does. Chroma keeps text and metadata in SQLite, but a kill at the
        wrong moment can leave its HNSW without a chunk. Looks up without the lock
        (writes go on), re-inserts under it; stops when closing or after a switch, and on
        an error (logged: the store stays open). Returns whether every chunk was checked."""
        chroma = self.chroma
        checked = healed = 0
        try:
            ids = sorted(chroma.all_ids())
            for start in range(0, len(ids), HEAL_BATCH):
                if self.closing.is_set() or self.chroma is not chroma:
                    return False
                part = ids[start : start + HEAL_BATCH]
                lost = chroma.unfindable(part)
                checked += len(part)
                if lost:
                    with self._write_lock:
                        if self.chroma is not chroma:
                            return False
                        healed += chroma.reinsert(lost)  # those still stored, same vectors
        except Exception as err:  # e.g. Chroma failed a query: the next start tries again
            logger.warning("Checking the vector index stopped after %d chunks: %s", checked, err)
            return False
        (logger.warning if healed else logger.info)(
            "Checked the vector index after an abnormal stop: re-inserted %d of %d chunks.",
            healed,
            checked,
        )
        return True

    def fill_vector_copy(self) -> int:
        """Bring the durable vector copy in line with Chroma: copies the vectors of chunks
        it lacks (a store made before it, a copy set aside or turned off) and forgets
        chunks Chroma no longer has (a kill between the two writes). After a clean close
        equal counts are trusted; otherwise ids are compared in full. Compares without the
        lock, then acts on each page under it, checking Chroma again, so no write can fall
        in between. Stops when closing or after a switch. Returns how many it added."""
        copy, chroma = self.vector_copy, self.chroma
        if copy is None or not copy.usable:
            return 0
        key = chroma.copy_key
        added = dropped = 0
        try:
            if not copy.incomplete and copy.count(key) == chroma.count():
                return 0
            copy.incomplete = True
            have, stored = copy.ids(key), chroma.all_ids()
            mended = self._mend_copy(chroma, sorted(stored - have), sorted(have - stored))
            if mended is None:
                return added
            added, dropped = mended
            with self._write_lock:  # whole only if Chroma gave every vector asked for
                copy.incomplete = copy.count(key) != chroma.count()
        except Exception as err:  # e.g. vectors unreadable: the next start tries again
            logger.warning("Filling the vector copy stopped after %d chunks: %s", added, err)
        if added or dropped:
            logger.info("Vector copy: %d vectors copied from Chroma, %d dropped.", added, dropped)
        return added

    def _mend_copy(
        self, chroma: ChromaStore, missing: list[str], extra: list[str]
    ) -> tuple[int, int] | None:
        """Copy Chroma's vectors of `missing` into the vector copy and forget those of
        `extra` that Chroma no longer has, page by page under the write lock (checking
        Chroma again there). None when it stopped: closing, a switch, the copy off."""
        copy, key = self.vector_copy, chroma.copy_key
        added = dropped = 0
        for todo, adding in ((missing, True), (extra, False)):
            for start in range(0, len(todo), HEAL_BATCH):
                part = todo[start : start + HEAL_BATCH]
                with self._write_lock:
                    if copy is None or not copy.usable:
                        return None
                    if self.closing.is_set() or self.chroma is not chroma:
                        return None
                    if adding:
                        got = chroma.existing_embeddings(part)
                        copy.put(key, list(got), list(got.values()))
                        added += len(got)
                    else:
                        present = set(chroma.collection.get(ids=part, include=[])["ids"])
                        copy.delete(key, [i for i in part if i not in present])
                        dropped += len(part) - len(present)
        return added, dropped

    def rebuild_bm25(self) -> None:
        logger.warning("Rebuilding the BM25 index from %d Chroma chunks.", self.chroma.count())
        with self._write_lock:
            start = now_ms()
            self.bm25.rebuild(bm25_doc(n) for n in self.chroma.iter_nodes())
            self._cursor.ts_ms = max(self._cursor.ts_ms, start)
            self.bm25.set_cursor(self._cursor.to_state())

    # ------------------------------------------------------------------- reads
    def count(self) -> int:
        return self.chroma.count()

    def query_ids(
        self, embedding: Sequence[float], top_k: int, sources: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        return self.chroma.query_ids(embedding, top_k, sources)

    def query_vectors(
        self, embedding: Sequence[float], top_k: int, sources: Sequence[str] | None = None
    ) -> VectorMatches:
        return self.chroma.query_vectors(embedding, top_k, sources)

    def lexical_evidence(self, query: str, ids: Sequence[str]) -> tuple[list[str], int | None]:
        return self.bm25.lexical_evidence(query, ids)

    def unknown_code(self, names: Sequence[str]) -> list[str]:
        return self.bm25.unknown_code(names)

    def bm25_search(
        self,
        query: str,
        top_k: int,
        *,
        k1: float | None = None,
        b: float | None = None,
        fields: FieldWeights | None = None,
        sources: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        return self.bm25.search(query, top_k, k1=k1, b=b, fields=fields, sources=sources)

    def get_nodes(self, ids: Sequence[str]) -> list[TextNode]:
        return self.chroma.get_nodes(ids)

    def source_nodes(self, source: str) -> list[TextNode]:
        """Every chunk of one source, for reading it whole."""
        return self.chroma.source_nodes(source)

    def section_chunks(self, windows: Sequence[tuple[str, Sequence[int]]]) -> list[SectionChunk]:
        """Chunks of each `(source, chunk indexes)` window, for passages.

        By id where the source's record lists its chunks in order (the orders are cached:
        `ChromaStore.chunk_orders`), else by a metadata query (15–50 ms)."""
        orders = self.chroma.chunk_orders([s for s, _ in windows])
        by_id: list[str] = []
        by_query: list[tuple[str, Sequence[int]]] = []
        for source, indexes in windows:
            order = orders[source].ids
            if order:
                by_id.extend(order[i] for i in indexes if 0 <= i < len(order))
            else:
                by_query.append((source, indexes))
        found = self.chroma.nodes_and_sections([], list(dict.fromkeys(by_id)))[1]
        return found + (self.chroma.section_chunks(by_query) if by_query else [])

    def nodes_near(
        self, ids: Sequence[str], reaches: Sequence[int] = ()
    ) -> tuple[list[TextNode], Neighbourhood]:
        """The nodes of `ids` and, in the same Chroma read, the chunks within `reaches[i]`
        of `ids[i]` on each side (the hits a search widens to passages). Hits whose source
        has no recorded order are left to `section_chunks`."""
        centres = list(ids[: len(reaches)])
        reaches = reaches[: len(centres)]
        sources = self.bm25.source_of(centres) if centres else []
        orders = self.chroma.chunk_orders([s for s in sources if s]) if centres else {}
        near = Neighbourhood()
        section_ids: list[str] = []
        for chunk_id, source, reach in zip(centres, sources, reaches, strict=True):
            window = orders[source].window(chunk_id, reach) if source else None
            if window is None or source is None:
                continue
            indexes, ids_near = window
            section_ids.extend(ids_near)
            near.asked.setdefault(source, set()).update(indexes)
        nodes, near.chunks = self.chroma.nodes_and_sections(ids, section_ids)
        return nodes, near

    def existing_embeddings(self, ids: Sequence[str]) -> dict[str, list[float]]:
        return self.chroma.existing_embeddings(ids)

    def chunk_ids(self, source: str) -> list[str]:
        """Ids of a source's chunks, from memory (no metadata scan)."""
        return self.bm25.ids_for_source(source)

    def get_source(self, source: str) -> SourceRecord | None:
        return self.chroma.get_source(source)

    def list_sources(self) -> list[SourceRecord]:
        return self.chroma.list_sources()

    def counts(self) -> tuple[int, int, dict[str, int]]:
        """Chroma's chunk count, BM25's, and BM25's per source, taken between two writes:
        read one by one, a write landing in between showed them differ."""
        with self._write_lock:
            return self.chroma.count(), len(self.bm25), self.bm25.sources()

    # ------------------------------------------------------------------ writes
    def put_source(self, record: SourceRecord) -> None:
        """Update a record whose chunks are unchanged (ETag, mtime)."""
        with self._write_lock:
            self.chroma.put_source(record)

    def tokenize(self, nodes: Sequence[BaseNode]) -> dict[str, list[str]]:
        """BM25 tokens of chunks, made ahead of `replace_source` (in the ingest lane)."""
        return {n.node_id: self.bm25.document_tokens(bm25_doc(n)) for n in nodes}

    def replace_source(
        self,
        source: str,
        nodes: Sequence[BaseNode],
        record: SourceRecord | None,
        tokens: dict[str, list[str]] | None = None,
    ) -> int:
        """Make `source` hold exactly `nodes` (embedded); returns how many stale were removed."""
        with self._write_lock, self._timed_write():
            begin = self._logged([source], "begin")
            with self._settled_if_cut_off(source):
                stored = set(self.chroma.ids_for_source(source))
                before = stored | set(self.chunk_ids(source))
                waits = self.chroma.write_waits()  # one budget for the whole write
                if nodes:
                    self.chroma.upsert_nodes(nodes, stored, waits)
                stale = sorted(before - {n.node_id for n in nodes})
                if stale:
                    self.chroma.delete_ids(stale, waits)
                self.bm25.replace_source(
                    source, [bm25_doc(n) for n in nodes], cursor=self._claim(begin), tokens=tokens
                )
                if record is not None and nodes:
                    self.chroma.put_source(record)
                else:
                    self.chroma.delete_source_record(source)
                self._claim(self._logged([source], "write"))
            return len(stale)

    @contextlib.contextmanager
    def _settled_if_cut_off(self, source: str) -> Iterator[None]:
        """A write of `source` to a Chroma server that fails after its `begin` entry (the
        server gone mid-write) may have left part of it there: the source is settled
        (`settle_failed_writes`) as soon as the server answers again, as the next start
        would settle it. Without it, this process's BM25 stayed behind Chroma and the other
        machines until a restart or `rag check --repair`. An embedded store is left to the
        next start: its writes fail part-way on a full disk, where a settling write would
        wedge embedded Chroma (the service then stopped answering for two minutes)."""
        try:
            yield
        except Exception:
            if self.poll_changes:
                self._failed_writes.add(source)
            raise

    def settle_failed_writes(self) -> None:
        """Settle this process's writes that failed part-way: BM25 re-synced from Chroma,
        a closing entry for the other readers, and the record marked changed where its
        chunks are not the ones it lists, so the next index, crawl or refresh stores it
        whole. Kept for later while Chroma does not answer."""
        with self._write_lock:
            failed = sorted(self._failed_writes)
            if not failed:
                return
            try:
                again = self._settle(failed)
            except Exception as err:  # still unreachable: tried again at the next call
                logger.debug("Writes that failed part-way stay unsettled: %s", err)
                return
            self._failed_writes.difference_update(failed)
        logger.warning(
            "Settled %d writes that failed part-way (%d to be stored again).", len(failed), again
        )

    def _logged(self, sources: list[str], op: str) -> list[Change]:
        """Change-log entries for `sources`, naming the chunk collection they go into
        (a reindex tells by it which writes missed its switch)."""
        return self.log.append(sources, op, self.chroma.collection.name)

    def delete_source(self, source: str) -> int:
        """Remove a source's chunks, then its record; returns the chunk count.

        The record goes last: a delete cut off in between leaves the record, so the source
        is still listed and the delete can be run again (the next start drops a record
        whose chunks are all gone). Deleted first, a cut-off delete left chunks no record
        named, which no refresh, folder delete or check found again."""
        with self._write_lock, self._timed_write():
            begin = self._logged([source], "begin")
            with self._settled_if_cut_off(source):
                ids = sorted(set(self.chunk_ids(source)) | set(self.chroma.ids_for_source(source)))
                if ids:
                    self.chroma.delete_ids(ids)
                self.bm25.delete_source(source, cursor=self._claim(begin))
                self.chroma.delete_source_record(source)
                self._claim(self._logged([source], "delete"))
            return len(ids)

    @contextlib.contextmanager
    def _timed_write(self) -> Iterator[None]:
        """Mark a write in progress. With `stall_exit_sec` (the store service), a write that
        has not returned by then ends the process: a wedged Chroma call cannot be cancelled
        and may hold the GIL, so the watchdog is faulthandler's C thread, which needs none.
        The next command starts a new owner that reopens the store from disk."""
        self.write_started = time.monotonic()
        if self.stall_exit_sec:
            faulthandler.dump_traceback_later(self.stall_exit_sec, exit=True)
        try:
            yield
        finally:
            if self.stall_exit_sec:
                faulthandler.cancel_dump_traceback_later()
            self.write_started = None

    def _claim(self, entries: list[Change]) -> dict[str, object]:
        """Mark this process's own entries as applied; the state to save with BM25.

        Only entries already written are claimed: a crash before a closing entry leaves
        the `begin` entry as the last one, which the next start closes for everyone."""
        for entry in entries:
            self._cursor.claim(entry.origin, entry.seq)
        return self._cursor.to_state()

    # -------------------------------------------------------------- catching up
    def catch_up(self, force: bool = False) -> int:
        """Apply other writers' changes to BM25; returns how many sources were re-synced."""
        if self._failed_writes:
            self.settle_failed_writes()
        if not (self.poll_changes or force):
            return 0
        with self._sync_lock:
            entries = self._cursor.pending(self.log)
            if not entries:
                return 0
            own = self.log.origin
            sources = list(dict.fromkeys(e.source for e in entries if e.origin != own))
            switched = any(e.op == "switch" and e.origin != own for e in entries)
            if not self._write_lock.acquire(blocking=False):
                with SEARCHES.stepping_aside():  # a writer may be waiting for this search
                    self._write_lock.acquire()
            try:
                if switched:
                    self.reopen_chunks()
                for source in sources:
                    self.sync_source(source)
                self._cursor.advance(entries)
                self.bm25.set_cursor(self._cursor.to_state())
            finally:
                self._write_lock.release()
            if sources:
                logger.info("Caught up with %d changed sources from other writers.", len(sources))
            return len(sources)

    def close_dangling(self) -> None:
        """At start: a source whose writer stopped between `begin` and its closing entry
        (this machine's previous run included) gets a closing entry, so every other reader
        re-syncs it; this process re-syncs it first."""
        window = self.log.since(max(0, self._cursor.ts_ms - SKEW_MS))
        own = self.log.origin
        dangling = _dangling([e for e in window if e.origin != own])
        if not dangling:
            return
        again = self._settle(dangling)
        logger.info(
            "Closed %d writes that a stopped writer left open (%d to be stored again).",
            len(dangling),
            again,
        )

    def _settle(self, sources: list[str]) -> int:
        """Close writes of `sources` that were cut off; returns how many are marked to be
        stored again."""
        self.resync(sources)
        with self._write_lock:  # cut off between its chunks and its record: store it again
            records = self.chroma.get_sources(sources)
            cut = [
                r
                for r in records.values()
                if r.chunk_ids
                and r.content_hash
                and set(r.ordered_chunk_ids()) != set(self.chroma.ids_for_source(r.source))
            ]
            self._mark_changed(cut)
            # a first write cut off before its record (or a delete before it): record them
            # as changed, so the next index, crawl or refresh stores them whole or removes them
            held = {s: set(self.chroma.ids_for_source(s)) for s in sources if s not in records}
            adopted = self._adopt([s for s, ids in held.items() if ids], held)
        return len(cut) + len(adopted)

    def resync(self, sources: list[str]) -> None:
        """Re-sync `sources` from Chroma here and append a closing entry for each, so that
        every other reader re-syncs them too (a stopped writer's open writes, sources a
        reindex carried over)."""
        with self._write_lock:
            for source in sources:
                self.sync_source(source)
            self.bm25.set_cursor(self._claim(self._logged(sources, "write")))

    def sync_source(self, source: str) -> None:
        """Make BM25 hold exactly Chroma's chunks of `source` (and drop an orphan record)."""
        with self._write_lock:
            ids = set(self.chroma.ids_for_source(source))
            have = set(self.chunk_ids(source))
            self.chroma.forget_rows(ids | have)  # held rows may predate the other's write
            new_nodes = self.chroma.get_nodes(sorted(ids - have))
            docs = [bm25_doc(n) for n in new_nodes]
            docs += [BM25Document(i, "", source) for i in ids & have]  # kept, not re-read
            self.bm25.replace_source(source, docs)
            self.chroma.mirror_source(source, ids)
            self.chroma.orders.forget([source])  # another writer may have re-ordered it
            if not ids and self.chroma.get_source(source) is not None:
                self.chroma.delete_source_record(source)

    def check(self, repair: bool = False, vector_copy: bool = True) -> CheckReport:
        """Compare BM25 with Chroma id by id; with `repair`, fix BM25 and orphan records
        (and, with `vector_copy`, what the vector copy lacks)."""
        with self._write_lock:
            chroma_ids = self.chroma.all_ids()
            if fixed := self.chroma.mirror_ids(chroma_ids):
                logger.warning(
                    "The exact-search copy differed from Chroma by %d chunks; fixed.", fixed
                )
            bm25_ids = self.bm25.ids()
            missing = sorted(chroma_ids - bm25_ids)
            extra = sorted(bm25_ids - chroma_ids)
            with_chunks = self.chroma.source_ids()
            records = self.chroma.list_sources()
            orphans = [r.source for r in records if r.source not in with_chunks]
            recorded = {r.source for r in records}
            unrecorded = sorted(s for s in with_chunks if s not in recorded)
            unlike = [
                r
                for r in records
                if r.chunk_ids and r.source in with_chunks
                and set(r.ordered_chunk_ids()) != with_chunks[r.source]
            ]  # fmt: skip
            mixed = [r for r in unlike if r.content_hash]  # else already marked changed
            sample = sorted(chroma_ids)
            if len(sample) > VECTOR_CHECK_SAMPLE:
                sample = random.Random(len(sample)).sample(sample, VECTOR_CHECK_SAMPLE)
            lost = self.chroma.unfindable(sample)
            report = CheckReport(
                chunks=len(chroma_ids),
                bm25_documents=len(bm25_ids),
                missing_in_bm25=len(missing),
                extra_in_bm25=len(extra),
                orphan_records=orphans,
                unrecorded_sources=unrecorded,
                mixed_sources=[r.source for r in mixed],
                to_index_again=[r.source for r in records if not r.content_hash],
                vector_checked=len(sample),
                unfindable_by_vector=len(lost),
            )
            if repair and lost:  # re-insert them into the vector index (same embeddings)
                self.chroma.reinsert(lost)
                report.repaired = True
            copy = self.vector_copy
            if copy is not None:
                report.vector_copy = "on" if copy.usable else "off"
            if vector_copy and copy is not None and copy.usable:
                key = self.chroma.copy_key
                have = copy.ids(key)
                absent = sorted(chroma_ids - have)
                report.missing_in_vector_copy = len(absent)
                if repair and (absent or have - chroma_ids):
                    self._mend_copy(self.chroma, absent, sorted(have - chroma_ids))
                    report.repaired = True
            if repair and not report.ok:
                if extra:
                    self.bm25.delete_ids(extra)
                for start in range(0, len(missing), 2000):
                    nodes = self.chroma.get_nodes(missing[start : start + 2000])
                    self.bm25.add([bm25_doc(n) for n in nodes])
                for source in orphans:
                    self.chroma.delete_source_record(source)
                report.to_index_again += self._mark_changed(mixed)
                report.to_index_again += self._adopt(unrecorded, with_chunks)
                report.repaired = True
            return report

    def _adopt(self, sources: list[str], with_chunks: dict[str, set[str]]) -> list[str]:
        """Give chunks that no record names a record marked changed, so that they are
        listed again and the next `rag index`, crawl or refresh stores each source whole or
        removes it (a file or page gone); a delete or a first write cut off by a crash
        left them. Nothing is deleted here: they may be a write still going on elsewhere,
        whose own record then replaces this one."""
        adopted = []
        for source in sources:
            if self.chroma.get_source(source) is not None:
                continue  # recorded since the check read the records
            ids = sorted(with_chunks[source])
            nodes = self.chroma.get_nodes(ids[:1])
            title = str(nodes[0].metadata.get("title", "")) if nodes else ""
            kind = "file" if source.startswith("file://") else "web"
            record = SourceRecord(
                source=source,
                title=title,
                chunk_count=len(ids),
                indexed_at=utc_now_iso(),
                kind=kind,
            )
            self.chroma.put_source(record)
            adopted.append(source)
        return adopted

    def _mark_changed(self, records: list[SourceRecord]) -> list[str]:
        """Mark these sources' records changed, so that the next `rag index`, crawl or
        refresh stores each whole again through the normal write, which removes the
        chunks its record does not list (nothing is deleted here: the other version may
        be a write still going on elsewhere)."""
        marked = []
        for record in records:
            if not record.still(self.chroma.get_source(record.source)):
                continue  # written again since it was read: that write settled it
            cleared = dataclasses.replace(
                record, content_hash="", etag="", last_modified="", mtime=0.0
            )
            self.chroma.put_source(cleared)
            marked.append(record.source)
        return marked

    # ----------------------------------------------------------------- reindex
    def reopen_chunks(self, exact_copy: bool = True) -> None:
        """Follow the sources collection's pointer to the current chunk collection, and
        read its in-memory copies (vectors, rows) as at open: in line up to
        `EXACT_COPY_INLINE` chunks, else in the background (`loaders`)."""
        self.chroma = self._chunks(check_model=False)
        if not exact_copy:
            return
        if self.chroma.count() <= EXACT_COPY_INLINE:
            self.load_exact_vectors()
            return
        # larger: read in the background (HNSW and Chroma reads answer meanwhile), as at open
        loader = threading.Thread(target=self.load_exact_vectors, name="reload", daemon=True)
        self.loaders = [t for t in self.loaders if t.is_alive()] + [loader]
        loader.start()

    def search_the_copy(self, key: str, stop: threading.Event | None = None) -> int:
        """While a set-aside vector index waits to be restored (`KnowledgeBase.reindex`):
        answer vector searches exactly from the vector copy's rows under `key` instead of
        from the emptied HNSW index (float32 in memory, up to `RESTORE_COPY_MAX_BYTES`:
        154 MB at 100k chunks of 384 dimensions, until the restored collection takes
        over; `ChromaStore.restore_copy`). Not when exact search is off
        (`RAG_EXACT_SEARCH_MAX_CHUNKS=0`), or once `stop` or the store's closing is set.
        Chunks the copy lacks come back with the restore. Returns how many it holds."""
        chroma, copy = self.chroma, self.vector_copy
        if copy is None or chroma.exact_max_chunks <= 0:
            return 0
        ids = sorted(chroma.all_ids())
        if len(ids) * chroma.dimension * 4 > RESTORE_COPY_MAX_BYTES:
            return 0
        exact = ExactVectors(chroma.dimension, capacity=len(ids) + 16)
        for start in range(0, len(ids), RESTORE_READ):
            if self.closing.is_set() or (stop is not None and stop.is_set()):
                return 0
            part = ids[start : start + RESTORE_READ]
            got = copy.get(key, part, chroma.dimension)
            held = [i for i in part if i in got]
            if held:
                sources = [s or "" for s in self.bm25.source_of(held)]
                exact.upsert(held, [got[i] for i in held], sources)
        chroma.exact, chroma.restore_copy = exact, True
        return len(exact)

    def switch_chunks(
        self,
        new: ChromaStore,
        old_name: str,
        grace_sec: float,
        copy_key: str | None = None,
        before_drop: Callable[[], None] | None = None,
    ) -> None:
        """Point the store at a re-embedded collection, then drop the old one (after
        `before_drop`, when given). With `copy_key`, the new collection's rows in the
        vector copy, staged under `staged(copy_key)` while it was built, become the live
        ones in the same step."""
        with self._write_lock:
            self.chroma.set_active_chunks(new.collection.name)
            self.chroma = new
            if copy_key is not None:
                if self.vector_copy is not None:
                    self.vector_copy.promote(copy_key)
                new.copy_key = copy_key
            self.model_name, self.dimension = new.model_name, new.dimension
            self.log.append(["*"], "switch")
        if grace_sec:
            time.sleep(grace_sec)  # let searches that started on the old collection finish
        if before_drop is not None:
            with self._write_lock:
                before_drop()
        self.drop_collection(old_name)

    def reindex_leftovers(self, name: str, live: str) -> list[str]:
        """Chunk collections an interrupted reindex of store `name` left (`reindex_leftovers`)."""
        return reindex_leftovers([c.name for c in self.client.list_collections()], name, live)

    def drop_collection(self, name: str) -> None:
        """Delete a chunk collection no longer used, and on the embedded store the vector
        folder Chroma leaves behind (`segment_files`)."""
        persist_dir = (
            self.client.get_settings().persist_directory if embedded(self.client) else None
        )
        segments = segment_ids(persist_dir, name)
        try:
            self.client.delete_collection(name)
        except Exception as err:  # already gone: nothing to clean up
            logger.info("Old chunk collection %s not deleted: %s", name, err)
        remove_left_behind(persist_dir, segments)


def reindex_leftovers(names: Sequence[str], name: str, live: str) -> list[str]:
    """Of the collection `names`, the chunk collections an interrupted reindex of store
    `name` left: `<name>__<8 hex>` (or an early version's `<name>-reindex`) other than
    `live`. Never another store's on a shared server, such as one named `<name>__archive`
    or `<name>__0badf00d`: a store has its own sources collection, a leftover has none."""
    present = set(names)
    ours = re.compile(rf"{re.escape(name)}(__[0-9a-f]{{8}}|-reindex)")
    return sorted(
        n for n in present if n != live and ours.fullmatch(n) and f"{n}_sources" not in present
    )
