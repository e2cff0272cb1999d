"""KnowledgeBase: the one orchestration point — ingest, retrieve, delete, stats, reindex.

It parses, embeds and fetches; the `KnowledgeStore` owns Chroma + BM25 and changes
both in one step. One crawler lives as long as the knowledge base, so robots.txt
caches and per-domain delays hold across calls. A persistent store is opened by one
owner at a time (`StoreOwnerLock`); other processes reach it through the store
service (`rag_app.service`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import heapq
import logging
import shlex
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cachetools import LRUCache
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import BaseNode

from rag_app import source_scope
from rag_app.background import in_ingest_lane
from rag_app.config import RAGSettings, SettingsError, get_settings, with_options
from rag_app.crawl.exceptions import no_text_error
from rag_app.crawl.pages import CrawledPage, utc_now_iso
from rag_app.crawl.scope import CrawlScope, page_key
from rag_app.crawl_checkpoint import CrawlCheckpoint
from rag_app.crawl_options import CrawlOptions
from rag_app.documents import DocumentLimits
from rag_app.embeddings import get_embed_model
from rag_app.errors import (
    CrawlError,
    EmbeddingMismatchError,
    EmbeddingUnavailableError,
    EmptyQueryError,
    RAGError,
    StoreUnavailableError,
    UnknownSourceError,
)
from rag_app.fetching import Fetched, Gone, NotModified, fetch_file, fetch_web
from rag_app.index.bm25_index import BM25Index, FieldWeights
from rag_app.index.chroma_store import ChromaStore, SectionChunk, SourceRecord, make_client
from rag_app.index.hybrid_retriever import HybridRetriever, SearchMode
from rag_app.index.reindex_carry import Carry
from rag_app.index.search_gate import SEARCHES
from rag_app.index.store import EXACT_COPY_INLINE, KnowledgeStore, Neighbourhood, bm25_text
from rag_app.index.tokenizer import get_tokenizer
from rag_app.index.vector_copy import VectorCopy, model_key, staged
from rag_app.index.vector_salvage import (
    is_damaged_vector_index,
    mark_pending,
    pending,
    salvage,
)
from rag_app.ingest_transforms import AssignStableIds, EmbedMissing, embed_text
from rag_app.job_journal import JobJournal
from rag_app.jobs import MAX_CRASHES, REFRESH_TARGET, Job, JobRegistry
from rag_app.keyed_locks import KeyedLocks
from rag_app.limits import (
    MAX_CRAWL_PAGES,
    MAX_LISTED_FILE_ERRORS,
    MAX_QUERY_CHARS,
    MAX_READ_CHARS,
    MAX_REJOINS,
    MAX_SOURCE_CHARS,
    MAX_TITLE_CHARS,
    shorten,
    without_surrogates,
)
from rag_app.local_files import scan_dir
from rag_app.markdown_fences import open_block
from rag_app.owner_lock import StoreOwnerLock, state_dirs
from rag_app.parsing.metadata_modes import ApplyMetadataModes
from rag_app.parsing.router import StructuredNodeParser
from rag_app.passages import (
    DRY_RUNS,
    Piece,
    PieceReader,
    first_reaches,
    left_out_by_budget,
    page,
    reading_text,
    section_forms,
)
from rag_app.refresh import Refresh
from rag_app.refresh_checkpoint import RefreshCheckpoint
from rag_app.results import (
    CheckReport,
    CrawlSummary,
    DirIndexSummary,
    Hit,
    IngestResult,
    KBStats,
    ReadResult,
    RefreshSummary,
    RetrievalResult,
    check_search_mode,
    hit_overhead,
)
from rag_app.site_crawl import SiteCrawl
from rag_app.storage_errors import check_space, storage_error
from rag_app.timing import timer
from rag_app.write_wait import NOTICE, REPEAT_SEC, WriteWait

if TYPE_CHECKING:  # the crawler (and its HTML parser) loads on the first fetch
    from rag_app.crawl.crawler import WebCrawler

logger = logging.getLogger("rag_app.knowledge")
retrieval_log = logging.getLogger("rag_app.retrieval")

Progress = Callable[[int, int], None]
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
R = TypeVar("R")


# Bump when what is embedded or indexed for a chunk changes, so unchanged pages are
# re-chunked and re-embedded once instead of keeping vectors of the old text.
INDEXED_TEXT_VERSION = 5  # 5: form feeds are page breaks (chunks carry `page`)


def content_hash(title: str, text: str, embed_context: bool = True) -> str:
    """Hash of what a source's chunks are built from (and how they are built)."""
    version = INDEXED_TEXT_VERSION if embed_context else f"{INDEXED_TEXT_VERSION}-text-only"
    key = f"v{version}\x00{title}\x00{text}"
    return hashlib.sha256(key.encode()).hexdigest()


__all__ = ["INDEXED_TEXT_VERSION", "KnowledgeBase", "bm25_text", "content_hash"]


def _file_error(err: Exception) -> str:
    """One line for a file that could not be indexed."""
    if isinstance(err, RAGError | OSError):
        return str(err)
    if isinstance(err, RecursionError):
        return "its structure is nested too deeply to parse."
    return f"it could not be read ({type(err).__name__}: {err})."


def _deleted_meanwhile(source: str) -> UnknownSourceError:
    return UnknownSourceError(
        f"{shorten(source, 200)} was deleted while it was being refreshed; it was not stored again."
    )


def _report(
    on_commit: Callable[[IngestResult], object] | None, result: IngestResult
) -> Callable[[Any], None]:
    """A `then` callback that hands `result` to `on_commit` (if any)."""

    def call(_value: Any) -> None:
        if on_commit is not None:
            on_commit(result)

    return call


def _pieces(chunks: list[SectionChunk]) -> list[tuple[str, Piece]]:
    """Stored chunks as `(source, piece)` pairs for `PieceReader`."""
    return [(c.source, Piece(c.chunk_index, c.text, c.heading_path, c.page)) for c in chunks]


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """Retrieve a shielded write's outcome, so one whose caller left is not reported as
    "never retrieved" (a failure is logged; the caller, if still there, gets it too)."""
    if not task.cancelled() and task.exception() is not None:
        logger.info("A store write failed: %s", task.exception())


def _embedding_dimension(model: BaseEmbedding) -> int:
    dim = getattr(model, "dimension", None)
    if isinstance(dim, int) and dim > 0:
        return dim
    return len(model.get_query_embedding("dimension probe"))


def _storage_guard(method: F) -> F:
    """Report storage faults (disk full, read-only, Chroma server down) in one sentence."""

    @functools.wraps(method)
    async def guarded(self: KnowledgeBase, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, *args, **kwargs)
        except RAGError:
            raise
        except Exception as err:
            mapped = storage_error(err, self.settings)
            if mapped is None:
                raise
            logger.warning("Storage fault: %s (%s)", mapped, err)
            raise mapped from err

    return guarded  # type: ignore[return-value]


READ_CACHE_CHARS = 8_000_000
"""Characters of sources kept between `rag_read` pages (the most recently read first)."""
ReadingPiece = tuple[int, str, str, int]
"""(chunk index, text, heading path, heading level): a chunk as `reading_text` takes it."""
STATS_PAGE_READ_MAX = 1000
"""A stats page of up to this many sources reads their records by id; a larger one reads
them all (a query naming too many ids can pass SQLite's limit on variables)."""
WRITES_AT_CLOSE_SEC = 60.0
"""How long `aclose` waits for writes still running (one write of 64 chunks takes ~0.5 s
at 100k chunks; a whole page's, a few)."""
INDEX_WORKERS = 4
"""Files of a folder indexed at once, so that one file's reading and store write overlap
another's embedding (one at a time, a folder of small files ran at 0.72–0.83 of the
embedder's own throughput; `bench/folder_index.py`)."""


class KnowledgeBase:
    """Everything a user can do with the knowledge base, behind async methods."""

    def __init__(
        self,
        settings: RAGSettings | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        client: Any | None = None,
        crawler_factory: Callable[[RAGSettings], WebCrawler] | None = None,
        take_ownership: bool = True,
    ) -> None:
        self.settings = settings or get_settings()
        self.embed_model = embed_model or get_embed_model(self.settings)
        self._client = client
        self._crawler_factory = crawler_factory
        self._crawler: WebCrawler | None = None
        self._option_settings: LRUCache[str, RAGSettings] = LRUCache(maxsize=16)
        self._read_pieces: LRUCache[tuple[Any, ...], tuple[str, list[ReadingPiece]]] = LRUCache(
            maxsize=READ_CACHE_CHARS, getsizeof=lambda kept: 1 + sum(len(p[1]) for p in kept[1])
        )
        self._store: KnowledgeStore | None = None
        self._owner_lock: StoreOwnerLock | None = None
        self._take_ownership = take_ownership
        self.open_timings: dict[str, float] = {}
        self.model_mismatch: EmbeddingMismatchError | None = None
        self.vectors_set_aside: list[str] = []  # collections whose damaged HNSW was moved
        self._vector_copy: VectorCopy | None = None  # embedded stores: `vector_copy`
        self.reembedded = 0  # chunks the last reindex embedded (the rest came from the copy)
        self.threads_left: list[str] = []  # background threads still running after `aclose`
        self._reembedding: asyncio.Task[None] | None = None
        self.reindexing: tuple[int, int] | None = None
        """(chunks done, chunks in all) while a reindex (or a restore) holds the writes."""
        self._restore_running = False  # the reindex pending or running is a restore
        self._background: list[threading.Thread] = []  # exact copy loader, vector healer
        self.heal_marker: Path | None = None
        """Set by a store service whose previous owner ended abnormally: the open checks
        that the vector index still finds every chunk (`KnowledgeStore.heal_vectors`) and
        removes this file once every chunk was checked."""
        self._closing = threading.Event()  # a reindex stops at its next batch
        self._write_lock = asyncio.Lock()
        self._ingesting = KeyedLocks()  # per source: `ingest_text`
        self._writes: set[asyncio.Future[Any]] = set()
        self._jobs = JobRegistry(settle=self._settle)
        self._open_lock = asyncio.Lock()
        self.parser = StructuredNodeParser.from_settings(self.settings)

    # --- opening ----------------------------------------------------------
    @_storage_guard
    async def open(self, *, allow_model_mismatch: bool = False) -> KnowledgeBase:
        """Open the store (idempotent): take ownership, load BM25, catch up with Chroma.

        A store built with another embedding model raises `EmbeddingMismatchError`, or with
        `allow_model_mismatch` opens anyway: then only `reindex`, `stats` and `check` work,
        and everything else answers with that error (a store service must stay up so that
        `rag reindex` can fix it)."""
        async with self._open_lock:
            if self._store is None:
                self._closing.clear()
                self._jobs.stopping = False
                try:
                    await asyncio.to_thread(self._open_sync)
                except EmbeddingMismatchError as err:
                    if not allow_model_mismatch:
                        raise
                    await asyncio.to_thread(self._open_sync, False)
                    self.model_mismatch = err
        if self.model_mismatch is not None and not allow_model_mismatch:
            raise self.model_mismatch
        chunks = self._store.chroma.collection.name if self._store else None
        if chunks in self.vectors_set_aside and self._reembedding is None:
            self._reembedding = asyncio.create_task(self._reembed_set_aside())
        return self

    async def _reembed_set_aside(self) -> None:
        """After a damaged vector index was set aside: take every chunk's vector back from
        the vector copy, embedding again from its stored text only those it lacks (searches
        keep working meanwhile: BM25 fully, vectors exactly from the copy, `search_the_copy`)."""
        logger.warning("Restoring the vectors after the vector index was set aside.")
        self._restore_running = True
        try:
            count = await self.reindex(reuse_copy=True)
        except Exception as err:  # e.g. the embedding provider is down: say how to finish
            if self._closing.is_set():
                logger.warning("Re-embedding paused (the store is closing); the next start "
                               "resumes it.")  # fmt: skip
            else:
                logger.error("Re-embedding after the vector index was set aside failed (%s); "
                             "the next start tries again, or run `rag reindex`.", err)  # fmt: skip
            return
        finally:
            self._restore_running = False
        logger.warning(
            "Restored the vectors of %d chunks after the vector index was set aside (%d "
            "from the vector copy, %d embedded again).",
            count,
            count - self.reembedded,
            self.reembedded,
        )

    def _open_sync(self, check_model: bool = True) -> None:
        s = self.settings
        t: dict[str, float] = {}
        if self._take_ownership and self._owner_lock is None:
            lock = StoreOwnerLock.for_settings(s)
            lock.acquire()
            self._owner_lock = lock
        try:
            with timer("chroma_open", t):
                client = self._client or make_client(s)
            own_files = not s.chroma_host and self._client is None
            if own_files and self._vector_copy is None:
                with timer("vector_copy", t):
                    self._vector_copy = VectorCopy.for_store(s.chromadb_persist_dir)
            with timer("model", t):
                dim = self._dimension(client)
            with timer("bm25_load", t):
                bm25 = BM25Index(s.bm25_persist_dir, k1=s.rag_bm25_k1, b=s.rag_bm25_b)
            try:
                store = self._open_store(client, bm25, dim, check_model, t)
            except Exception as err:
                if not own_files or not is_damaged_vector_index(err):
                    raise
                client, damaged = salvage(s.chromadb_persist_dir)
                if not damaged:
                    raise
                store = self._open_store(client, bm25, dim, check_model, t)
                mark_pending(s.chromadb_persist_dir, damaged)
            if own_files:
                self.vectors_set_aside = self._chunks_set_aside(store)
        except BaseException:
            if self._vector_copy is not None:
                self._vector_copy.close()
                self._vector_copy = None
            if self._owner_lock is not None:  # a failed open must not keep the store locked
                self._owner_lock.release()
                self._owner_lock = None
            raise
        self._store = store
        if (
            self._vector_copy is not None
            and store.chroma.collection.name not in self.vectors_set_aside
        ):
            filler = threading.Thread(
                target=store.fill_vector_copy, name="vector-copy", daemon=True
            )
            filler.start()  # vectors of chunks stored before the copy, or while it was off
            self._background.append(filler)
        if check_model:
            with timer("warm_up", t):
                self._warm_up()
        self.open_timings = t
        logger.info(
            "Opened %d chunks (%s)",
            len(store.bm25),
            ", ".join(f"{k} {v / 1000:.2f} s" for k, v in t.items()),
        )

    def _chunks_set_aside(self, store: KnowledgeStore) -> list[str]:
        """The chunk collection, if its vectors are still to be restored. The sources and
        change-log collections hold placeholder vectors only: once open, nothing of
        theirs is pending (left listed, they would hold off the vector copy's fill)."""
        folder = self.settings.chromadb_persist_dir
        waiting = pending(folder)
        chunks = [n for n in waiting if n == store.chroma.collection.name]
        if len(chunks) != len(waiting):
            mark_pending(folder, [])
            mark_pending(folder, chunks)
        return chunks

    def _open_store(
        self, client: Any, bm25: BM25Index, dim: int, check_model: bool, t: dict[str, float]
    ) -> KnowledgeStore:
        s = self.settings
        with timer("chroma_open", t):
            store = KnowledgeStore(
                client,
                s.rag_collection_name,
                bm25,
                model_name=s.embedding_model_name,
                dimension=dim,
                poll_changes=bool(s.chroma_host),
                check_model=check_model,
                ef_search=s.rag_hnsw_ef_search,
                exact_max_chunks=s.rag_exact_search_max_chunks,
                rows_max_chunks=s.rag_rows_in_memory_max_chunks,
                vector_copy=self._vector_copy,
            )
        with timer("recovery", t):
            store.recover()
        small = store.count() <= EXACT_COPY_INLINE
        work = [store.load_exact_vectors]  # ~1.5 s at 20k chunks: HNSW answers meanwhile
        if self.heal_marker is not None:  # ~0.4 s per 1,000 chunks
            marker, self.heal_marker = self.heal_marker, None

            def heal_vectors() -> None:
                if store.heal_vectors():
                    marker.unlink(missing_ok=True)

            work.append(heal_vectors)
        for step in work:
            if small:
                step()
            else:
                thread = threading.Thread(target=step, name=step.__name__, daemon=True)
                thread.start()
                self._background.append(thread)
        return store

    def _dimension(self, client: Any) -> int:
        """The model's dimension; when its provider cannot be reached, the one the stored
        chunks record, so stats, delete, reading and BM25 search still work (a search
        that needs an embedding then fails with the provider's one-line error)."""
        try:
            return _embedding_dimension(self.embed_model)
        except EmbeddingUnavailableError:
            s = self.settings
            recorded = ChromaStore.recorded_dimension(
                client, s.rag_collection_name, s.embedding_model_name
            )
            if recorded is None:
                raise
            logger.warning(
                "The embedding provider is unreachable; opened without it (searches that "
                "need an embedding, and ingestion, will fail until it is back)."
            )
            return recorded

    def _warm_up(self) -> None:
        """Load the tokenizer, a local model and Chroma's index now, so the first search is
        as fast as the rest (remote providers are left alone: no call at open)."""
        get_tokenizer()("warm up")
        if self.settings.embedding_provider == "builtin":
            self.embed_model.get_query_embedding("warm up")
            self.store.chroma.warm_up()

    @property
    def store(self) -> KnowledgeStore:
        if self._store is None:
            raise RuntimeError("KnowledgeBase.open() must be awaited first")
        return self._store

    @property
    def bm25(self) -> BM25Index:
        return self.store.bm25

    def retriever(
        self,
        n_results: int | None = None,
        mode: SearchMode | None = None,
        settings: RAGSettings | None = None,
    ) -> HybridRetriever:
        """A LlamaIndex retriever over this knowledge base (for evaluators, engines)."""
        s = settings or self.settings
        default_mode: SearchMode = "fused" if s.rag_hybrid_search_enabled else "vector"
        return HybridRetriever(
            self.store,
            self.embed_model,
            similarity_top_k=n_results or s.rag_retrieval_count,
            vector_weight=s.rag_vector_weight,
            similarity_threshold=s.rag_similarity_threshold,
            min_combined_score=s.rag_min_combined_score,
            bm25_k1=s.rag_bm25_k1,
            bm25_b=s.rag_bm25_b,
            bm25_fields=FieldWeights(
                gram=s.rag_bm25_gram_weight,
                bound=s.rag_bm25_bound_weight,
                context=s.rag_bm25_context_weight,
                key=s.rag_bm25_key_weight,
            ),
            normalization=s.rag_fusion_normalization,
            mode=mode or default_mode,
            no_match_cutoff=s.rag_no_match_cutoff,
        )

    def _search_settings(self, options: dict[str, Any] | None) -> RAGSettings:
        """This knowledge base's settings with a client's retrieval settings on top
        (validated; the last few option sets are kept, as a sweep repeats one per query)."""
        if not options:
            return self.settings
        if not isinstance(options, dict):
            raise RAGError("Search options must map setting names to values.")
        key = repr(sorted(options.items()))
        found = self._option_settings.get(key)
        if found is None:
            try:
                found = with_options(self.settings, options)
            except SettingsError as err:
                raise RAGError(f"Search options: {err}") from None
            self._option_settings[key] = found
        return found

    def crawler(self) -> WebCrawler:
        """The knowledge base's one crawler (robots.txt cache, delays, Safe Browsing cache)."""
        if self._crawler is None:
            from rag_app.crawl.crawler import WebCrawler

            factory = self._crawler_factory or WebCrawler
            self._crawler = factory(self.settings)
        return self._crawler

    # --- ingest -----------------------------------------------------------
    @_storage_guard
    async def ingest_text(
        self,
        source: str,
        text: str,
        *,
        title: str = "",
        kind: str = "web",
        metadata: dict[str, Any] | None = None,
        record_fields: dict[str, Any] | None = None,
        on_commit: Callable[[IngestResult], object] | None = None,
        only_if_stored: bool = False,
        moving_from: SourceRecord | None = None,
    ) -> IngestResult:
        """Ingest one source's text, replacing what was stored for it.

        Same content hash as last time → nothing is parsed or embedded. `on_commit` is
        called once the write is durable, even when the caller was cancelled meanwhile
        (a cancelled crawl counts exactly what it stored). `only_if_stored`: only while
        the source is still stored (a refresh). `moving_from`: the same page stored under
        another URL, dropped in the same write, and only while it is still that version
        (a page deleted meanwhile stays deleted, under both URLs).

        Writes of one source take turns: the second (two `rag index` runs of one folder,
        `rag add` beside a crawl) reads what the first stored and embeds nothing again.
        """
        await self.open()
        async with self._source_turn(source) as writes:
            if self.store.poll_changes:  # another machine's reindex may have switched collections
                await asyncio.to_thread(self.store.catch_up)
            title = shorten(title, MAX_TITLE_CHARS)
            digest = content_hash(title, text, self.settings.rag_embed_context)
            old = await asyncio.to_thread(self.store.get_source, source)
            if only_if_stored and old is None:
                raise _deleted_meanwhile(source)
            if moving_from is not None and not moving_from.still(
                await asyncio.to_thread(self.store.get_source, moving_from.source)
            ):
                raise _deleted_meanwhile(moving_from.source)
            if old is not None and old.content_hash == digest and moving_from is None:
                same = IngestResult(source=source, chunks=old.chunk_count, unchanged=True)
                if record_fields:
                    for key, value in record_fields.items():
                        setattr(old, key, value)
                    await self._locked(
                        self._put_if_stored, old, then=_report(on_commit, same), track=writes
                    )
                elif on_commit is not None:
                    on_commit(same)
                return same
            check_space(self.settings)  # before any work: a full disk wedges Chroma
            now = utc_now_iso()
            doc_meta: dict[str, Any] = {
                "source_url": source,
                "title": title,
                "indexed_at": now,
                **(metadata or {}),
            }
            doc = Document(text=text, id_=source, metadata=doc_meta)
            nodes = await self._chunk(doc)
            embedder = EmbedMissing(self.embed_model, self.store.existing_embeddings)
            nodes = list(await embedder.acall(nodes))
            record = SourceRecord(
                source=source,
                title=title,
                content_hash=digest,
                chunk_count=len(nodes),
                indexed_at=now,
                kind=kind,
                chunk_ids=" ".join(
                    n.node_id for n in sorted(nodes, key=lambda n: n.metadata.get("chunk_index", 0))
                ),
                **(record_fields or {}),
            )
            tokens = await in_ingest_lane(self.store.tokenize, nodes)

            def committed(removed: int) -> None:
                logger.info(
                    "Ingested %s: %d chunks (%d embedded, %d stale removed)",
                    source,
                    len(nodes),
                    embedder.embedded,
                    removed,
                )
                if on_commit is not None:
                    on_commit(result(removed))

            def result(removed: int) -> IngestResult:
                return IngestResult(
                    source=source, chunks=len(nodes), embedded=embedder.embedded, removed=removed
                )

            def write() -> int:
                if only_if_stored and self.store.get_source(source) is None:
                    raise _deleted_meanwhile(source)  # checked in the write's turn: no race
                if moving_from is not None:
                    if not moving_from.still(self.store.get_source(moving_from.source)):
                        raise _deleted_meanwhile(moving_from.source)
                    removed = self.store.replace_source(source, nodes, record, tokens)
                    self.store.delete_source(moving_from.source)
                    return removed
                return self.store.replace_source(source, nodes, record, tokens)

            removed = await self._locked(write, then=committed, track=writes)
            return result(removed)

    @contextlib.asynccontextmanager
    async def _source_turn(self, source: str) -> AsyncIterator[list[asyncio.Future[Any]]]:
        """One write of `source` at a time. Yields a list for the write tasks the holder
        starts (`_locked(track=...)`): a cancelled holder's write goes on to its end, and
        the turn ends with it, not with the holder (a cancelled crawl job stops at once;
        the next write of the source still waits for what it stored)."""
        release = await self._ingesting.acquire(source)
        writes: list[asyncio.Future[Any]] = []
        try:
            yield writes
        finally:
            running = [w for w in writes if not w.done()]
            if running:
                ended = asyncio.gather(*running, return_exceptions=True)
                ended.add_done_callback(lambda _: release())
            else:
                release()

    def _put_if_stored(self, record: SourceRecord) -> None:
        """Update a stored record (new ETag, title) unless its source was deleted since
        it was read: writing it back would bring back a record without chunks."""
        if self.store.get_source(record.source) is not None:
            self.store.put_source(record)

    async def _chunk(self, doc: Document) -> list[BaseNode]:
        """Parse and chunk one document in a worker thread, within RAG_PARSE_TIMEOUT_SEC.

        The event loop keeps answering meanwhile; a page that takes longer is skipped with
        a clear reason (its thread finishes in the background and is discarded).
        """
        pipeline = IngestionPipeline(
            transformations=[
                self.parser,
                ApplyMetadataModes(embed_context=self.settings.rag_embed_context),
                AssignStableIds(),
            ],
            disable_cache=True,
        )
        limit = self.settings.rag_parse_timeout_sec
        try:
            nodes = await asyncio.wait_for(
                in_ingest_lane(pipeline.run, documents=[doc]), timeout=limit
            )
        except TimeoutError:
            raise RAGError(
                f"Chunking {doc.doc_id} took longer than {limit:g} s, so it was skipped; "
                "raise RAG_PARSE_TIMEOUT_SEC for very large pages."
            ) from None
        except RecursionError:
            raise RAGError(f"{doc.doc_id} is nested too deeply to chunk; it was skipped.") from None
        return list(nodes)  # the parser refused it above RAG_MAX_CHUNKS_PER_SOURCE

    @_storage_guard
    async def ingest_page(self, url: str, *, prune: bool = False) -> IngestResult:
        """Fetch one page and ingest it; a conditional GET (ETag/Last-Modified) or an
        unchanged hash costs no embedding. 404/410 on a known source with `prune` removes it.
        """
        await self.open()
        crawler = self.crawler()
        normalized = crawler.validate_url(url)
        old = await asyncio.to_thread(self.store.get_source, normalized)
        outcome = await fetch_web(crawler, normalized, old)
        if isinstance(outcome, Gone):
            if prune and old is not None:
                await self.delete_source(normalized)
                raise CrawlError(f"{outcome.reason} The stored copy was removed (--prune).")
            raise outcome.error or CrawlError(outcome.reason)
        return await self._apply(outcome, old)

    async def _apply(
        self,
        outcome: Fetched | NotModified,
        old: SourceRecord | None,
        on_commit: Callable[[IngestResult], object] | None = None,
        *,
        only_if_stored: bool = False,
        moving_from: SourceRecord | None = None,
    ) -> IngestResult:
        """Store what a fetch yielded (see `rag_app.fetching`): new content is ingested
        (only changed chunks embedded), a not-modified source is kept as it is."""
        if isinstance(outcome, NotModified):
            if old is None:  # 304 to a request that named no copy: nothing to keep
                raise CrawlError(
                    f"{shorten(outcome.source, 200)} answered 304 Not Modified though no "
                    "copy of it is stored; nothing was stored."
                )
            chunks = old.chunk_count
            same = IngestResult(source=outcome.source, chunks=chunks, unchanged=True)
            if on_commit is not None:
                on_commit(same)
            return same
        if outcome.kind == "web" and not outcome.text.strip():
            raise no_text_error(outcome.source)
        return await self.ingest_text(
            outcome.source,
            outcome.text,
            title=outcome.title,
            kind=outcome.kind,
            metadata=outcome.metadata,
            record_fields=outcome.record_fields,
            on_commit=on_commit,
            only_if_stored=only_if_stored,
            moving_from=moving_from,
        )

    @_storage_guard
    async def ingest_from_index(
        self,
        url: str,
        pattern: str = "",
        progress: Progress | None = None,
        *,
        prune: bool = False,
        options: CrawlOptions | None = None,
        summary: CrawlSummary | None = None,
        checkpoint: Callable[[dict[str, Any]], object] | None = None,
        resume: CrawlCheckpoint | None = None,
    ) -> CrawlSummary:
        """Crawl a site and ingest each page: by default the same-site links of one index
        page (depth 1); with `options`, recursively within the start directory or from the
        site's sitemaps (see `rag_app.site_crawl`).

        One failing page never fails the crawl: it is counted in `errors` with its reason.
        `checkpoint` receives where the crawl stands as it goes; `resume` goes on from
        such a checkpoint (pages finished before are not fetched again).
        """
        await self.open()
        start, scope, options = self.plan_crawl(url, pattern, options, prune=prune)
        crawler = self.crawler()
        known = {r.source: r for r in await asyncio.to_thread(self.store.list_sources)}
        crawl = SiteCrawl(
            crawler,
            scope,
            options,
            known=known,
            ingest=self._apply,
            remove=self.delete_source,
            progress=progress,
            workers=self.settings.rag_crawl_concurrency,
            summary=summary,
            digest=self._page_digest,
            checkpoint=checkpoint,
        )
        summary = await crawl.run(start, resume)
        logger.info(
            "Crawl of %s: %d pages, %d chunks, %d errors, %d unchanged, %d duplicates",
            url,
            summary.pages_crawled,
            summary.chunks_stored,
            summary.errors,
            summary.unchanged,
            summary.duplicates,
        )
        return summary

    def _page_digest(self, page: CrawledPage) -> str:
        """The digest `ingest_text` will store for a page (same text and title → same)."""
        title = shorten(page.title, MAX_TITLE_CHARS)
        return content_hash(title, page.text, self.settings.rag_embed_context)

    def plan_crawl(
        self, url: str, pattern: str, options: CrawlOptions | None, *, prune: bool = False
    ) -> tuple[str, CrawlScope, CrawlOptions]:
        """The checked start URL, scope and options of a crawl; a bad URL, pattern or
        limit raises its one-line error here, before anything is fetched."""
        options = (options or CrawlOptions()).validated(
            self.settings.rag_max_crawl_pages, MAX_CRAWL_PAGES
        )
        if prune:
            options = dataclasses.replace(options, prune=True)
        start = self.crawler().validate_url(url)
        scope = CrawlScope.build(start, pattern, options.exclude, whole_site=not options.recursive)
        return start, scope, options

    # --- jobs: long crawls and refreshes in the background ---------------------
    async def start_crawl(
        self,
        url: str,
        pattern: str = "",
        *,
        options: CrawlOptions | None = None,
        job_id: str | None = None,
        attempt: int = 1,
        crashes: int = 0,
        resume: CrawlCheckpoint | None = None,
    ) -> dict[str, Any]:
        """Start a crawl job and return it at once (bad arguments fail here, not later);
        `resume` goes on from an earlier attempt's checkpoint."""
        await self.open()
        start, _scope, options = self.plan_crawl(url, pattern, options)

        summary = CrawlSummary()
        resumed = resume is not None and page_key(resume.origin) == page_key(start)
        if resumed:  # listed with the earlier attempt's counts from the start, not zeros
            summary = CrawlSummary.from_dict(resume.summary)

        async def work(progress: Progress, job: Job) -> dict[str, Any]:
            await self.ingest_from_index(
                start,
                pattern,
                progress=progress,
                options=options,
                summary=summary,
                checkpoint=job.checkpoint,
                resume=resume,
            )
            return summary.to_dict()

        spec = {"url": url, "pattern": pattern, "options": dataclasses.asdict(options)}
        if resume is not None:  # kept until the resumed crawl writes its own
            spec["checkpoint"] = resume.to_dict()
        job = self._jobs.start(
            "crawl", start, work, spec=spec, job_id=job_id, attempt=attempt, crashes=crashes
        )
        job.live = summary
        if resumed:
            job.done, job.total = resume.done, resume.scheduled
        return job.to_dict()

    async def start_refresh(
        self,
        *,
        job_id: str | None = None,
        attempt: int = 1,
        crashes: int = 0,
        resume: RefreshCheckpoint | None = None,
    ) -> dict[str, Any]:
        """Start a refresh job (see `refresh`) and return it at once. While one runs, a new
        start returns that job marked `joined` instead (a second refresh would fetch every
        page again and count nothing new); whoever joined must not cancel it."""
        await self.open()
        if job_id is None and (running := self._jobs.running_of("refresh")) is not None:
            return {**running.to_dict(), "joined": True}

        async def work(progress: Progress, job: Job) -> dict[str, Any]:
            job.live = summary = RefreshSummary()
            await self.refresh(
                progress=progress, summary=summary, checkpoint=job.checkpoint, resume=resume
            )
            return summary.to_dict()

        spec = {} if resume is None else {"checkpoint": resume.to_dict()}
        return self._jobs.start(
            "refresh",
            REFRESH_TARGET,
            work,
            spec=spec,
            job_id=job_id,
            attempt=attempt,
            crashes=crashes,
        ).to_dict()

    async def refresh_in_job(self, progress: Progress | None = None) -> dict[str, Any]:
        """Start a refresh job (or join the running one) and wait for its summary. A
        joined job that the client which started it interrupts (Ctrl-C) is followed by a
        refresh of this caller's own, as if it had not joined; a user's cancel stands."""
        for _ in range(MAX_REJOINS):
            job = await self.start_refresh()
            done = await self.wait_job(job["id"], progress)
            if not (job.get("joined") and done["state"] == "cancelled" and done["interrupted"]):
                break
            logger.info("The refresh job %s joined was cancelled; starting one", job["id"])
        return {**await self.job_result(job["id"]), "joined": bool(job.get("joined"))}

    async def resume_jobs(self) -> list[str]:
        """Keep a record of running jobs from now on, and start again the jobs a previous
        owner of this store did not finish (same ids). Returns the ids resumed."""
        journal = JobJournal(state_dirs(self.settings)[0])
        self._jobs.journal = journal
        resumed: list[str] = []
        if self.model_mismatch is not None:  # nothing can be embedded until `rag reindex`
            return resumed
        for job_id, spec in journal.pending().items():
            kind = spec.get("kind")
            try:
                attempt = int(spec.get("attempt", 1)) + 1
                crashes = int(spec.get("crashes", 0)) + (0 if spec.get("clean_stop") else 1)
            except (TypeError, ValueError):
                attempt, crashes = 0, MAX_CRASHES  # a damaged record: not run blindly
            target = str(spec.get("url", "")) if kind == "crawl" else REFRESH_TARGET
            if crashes >= MAX_CRASHES:
                why = (
                    "its record in the job journal is damaged"
                    if attempt == 0
                    else f"it was running the {MAX_CRASHES} times the store service ended "
                    "abnormally"
                )
                logger.error("Job %s (%s) is not resumed: %s.", job_id, kind, why)
                self._jobs.record_failed(
                    job_id, str(kind), target, f"Not resumed: {why}; start it again by hand.",
                    attempt,
                )  # fmt: skip
                journal.remove(job_id)
                continue
            try:
                if kind == "crawl":
                    options = CrawlOptions(**spec.get("options", {}))
                    await self.start_crawl(
                        str(spec["url"]), str(spec.get("pattern", "")), options=options,
                        job_id=job_id, attempt=attempt, crashes=crashes,
                        resume=CrawlCheckpoint.parse(spec.get("checkpoint")),
                    )  # fmt: skip
                elif kind == "refresh":
                    await self.start_refresh(
                        job_id=job_id, attempt=attempt, crashes=crashes,
                        resume=RefreshCheckpoint.parse(spec.get("checkpoint")),
                    )  # fmt: skip
                else:
                    raise RAGError(f"unknown job kind {kind!r}")
            except (RAGError, KeyError, TypeError, ValueError) as err:
                logger.error("Job %s (%s) could not be resumed: %s", job_id, kind, err)
                self._jobs.record_failed(
                    job_id, str(kind), target, f"Could not be resumed: {err}", attempt
                )
                journal.remove(job_id)
                continue
            logger.warning("Resumed job %s (%s), attempt %d.", job_id, kind, attempt)
            resumed.append(job_id)
        return resumed

    async def jobs(self) -> list[dict[str, Any]]:
        """Running and recent jobs, running ones first."""
        return [job.to_dict() for job in self._jobs.list()]

    async def wait_job(self, job_id: str, progress: Progress | None = None) -> dict[str, Any]:
        """Wait for a job to end (passing on its progress) and return it."""
        return (await self._jobs.wait(self._jobs.get(job_id), progress)).to_dict()

    async def job_result(self, job_id: str, progress: Progress | None = None) -> dict[str, Any]:
        """Wait for a job; its result, or its failure or cancellation as a `RAGError`."""
        job = await self._jobs.wait(self._jobs.get(job_id), progress)
        return self._jobs.outcome(job)

    async def cancel_job(self, job_id: str, *, interrupted: bool = False) -> dict[str, Any]:
        """Cancel a job; returns it once stopped (committed pages stay). `interrupted`:
        the Ctrl-C of the client that started it (see `refresh_in_job`)."""
        return (await self._jobs.cancel(job_id, interrupted=interrupted)).to_dict()

    async def cancel_jobs(self) -> None:
        """Cancel every running job and end a reindex at its next batch (the owner is
        closing): nothing keeps writing once ownership is given up."""
        await self._jobs.cancel_all()
        await asyncio.to_thread(self.flush_journal)  # on disk before ownership ends
        self._closing.set()  # a reindex in a worker thread ends at its next batch
        if self._reembedding is not None:
            await self._reembedding
            self._reembedding = None

    def flush_journal(self, timeout: float = 10.0) -> None:
        """Wait until the job records are on disk (the owner is stopping)."""
        if self._jobs.journal is not None:
            self._jobs.journal.flush(timeout)

    @property
    def running_jobs(self) -> int:
        return self._jobs.running

    @_storage_guard
    async def refresh(
        self,
        progress: Progress | None = None,
        *,
        summary: RefreshSummary | None = None,
        checkpoint: Callable[[dict[str, Any]], object] | None = None,
        resume: RefreshCheckpoint | None = None,
    ) -> RefreshSummary:
        """Re-check every stored web page with a conditional request: re-ingest what
        changed, store a page moved to a new canonical URL there, remove what is gone
        (404/410, or now `noindex`), leave the rest (no embedding); see
        `rag_app.refresh`. `checkpoint` receives what it did as it goes; `resume` goes on
        counting from such a checkpoint."""
        await self.open()
        records = [r for r in await asyncio.to_thread(self.store.list_sources) if r.kind == "web"]
        run = Refresh(
            self.crawler(),
            self.store,
            self._apply,
            self._locked,
            concurrency=self.settings.rag_crawl_concurrency,
            summary=summary,
            progress=progress,
            checkpoint=checkpoint,
            resume=resume,
        )
        return await run.run(records)

    @_storage_guard
    async def index_dir(
        self, path: str | Path, progress: Progress | None = None
    ) -> DirIndexSummary:
        """Index a folder of .md/.markdown/.html/.htm/.txt/.pdf/.docx files incrementally.

        mtime first, then content hash; files gone from the folder are pruned.
        """
        root = Path(path).expanduser()
        if not root.is_dir():
            await self.open()
            stored = await asyncio.to_thread(self._files_under, root.absolute().as_uri())
            gone = (
                f" {len(stored)} files indexed from it are still stored; `rag delete -r "
                f"{shlex.quote(str(path))}` removes them."
                if stored and not root.exists()
                else ""
            )
            raise RAGError(
                f"{path} is not a directory; give a folder of "
                f".md/.markdown/.html/.htm/.txt/.pdf/.docx files.{gone}"
            )
        await self.open()
        root = root.resolve()
        scan = await asyncio.to_thread(scan_dir, root)
        prefix = root.as_uri().rstrip("/") + "/"
        known = {
            r.source: r
            for r in await asyncio.to_thread(self.store.list_sources)
            if r.kind == "file" and r.source.startswith(prefix)
        }
        summary = DirIndexSummary()
        for place, why in scan.unreadable.items():  # what was stored from it is kept
            logger.warning("Could not read %s: %s", place, why)
            summary.failure(str(place), f"Could not be read ({why}); what was stored from "
                            "it is kept.")  # fmt: skip
            uri = place.as_uri()
            for source in [s for s in known if s == uri or s.startswith(uri + "/")]:
                del known[source]
        summary.skipped_count = len(scan.refused)
        for file, why in list(scan.refused.items())[:MAX_LISTED_FILE_ERRORS]:
            summary.skipped.append((str(file), f"Not indexed: {why}."))  # pruned if stored
        limits = DocumentLimits.from_settings(self.settings)
        total, done = len(scan.files), 0

        # the folder's first failures are listed, in its order, whichever finish first
        room = max(0, MAX_LISTED_FILE_ERRORS - len(summary.errors))
        first_failures: list[tuple[int, str, str]] = []  # a heap of (-place, file, why)

        def failed(at: int, file: Path, err: Exception) -> None:
            logger.warning("Could not index %s: %s", file, err)
            summary.failed += 1
            heapq.heappush(first_failures, (-at, str(file), _file_error(err)))
            if len(first_failures) > room:
                heapq.heappop(first_failures)

        async def index_file(at: int, file: Path) -> None:
            old = known.pop(file.as_uri(), None)
            try:  # the file's own problems (unreadable, binary, too large): listed, go on
                outcome = await fetch_file(file, old, limits, within=root)
            except Exception as err:
                failed(at, file, err)
                return
            if isinstance(outcome, Gone):  # deleted since the folder was listed
                if old is not None:
                    known[old.source] = old  # pruned below with the other gone files
                return
            try:
                result = await self._apply(outcome, old)
            except StoreUnavailableError:
                raise  # the store itself is down: every other file would fail the same
            except Exception as err:  # one bad file never stops the folder
                mapped = None if isinstance(err, RAGError) else storage_error(err, self.settings)
                if mapped is not None:
                    raise mapped from err
                failed(at, file, err)
                return
            summary.chunks += result.chunks
            if result.unchanged:
                summary.unchanged += 1
            elif old is None and not result.chunks:
                summary.empty += 1  # nothing stored: "added" at every run before
            elif old is None:
                summary.added += 1
            else:
                summary.updated += 1

        files = enumerate(scan.files)

        async def worker() -> None:
            nonlocal done
            for at, file in files:  # shared: each file is taken by one worker
                await index_file(at, file)
                done += 1
                if progress:
                    progress(done, total)

        workers = [asyncio.create_task(worker()) for _ in range(INDEX_WORKERS)]
        try:  # the first store-wide error ends the others (their writes under way finish)
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        summary.errors += [(file, why) for _, file, why in sorted(first_failures, reverse=True)]
        for gone in known:
            await self.delete_source(gone)
            summary.deleted += 1
        return summary

    # --- retrieve ---------------------------------------------------------
    @_storage_guard
    async def retrieve(
        self,
        query: str,
        n_results: int | None = None,
        mode: str | None = None,
        *,
        options: dict[str, Any] | None = None,
        source: str | None = None,
    ) -> RetrievalResult:
        """Search; `mode` is fused (default with hybrid on), vector, bm25 or separate.

        `options` carries retrieval settings (`RETRIEVAL_SETTINGS`) for this query only;
        `source` limits it to a site, URL prefix or folder (`rag_app.source_scope`).
        """
        if not query or not query.strip():
            raise EmptyQueryError("The query is empty; type what you are looking for.")
        query = without_surrogates(query)
        if len(query) > MAX_QUERY_CHARS:
            raise RAGError(
                f"The query is {len(query):,} characters long; the limit is "
                f"{MAX_QUERY_CHARS:,}. Shorten it."
            )
        check_search_mode(mode)
        if n_results is not None and not (isinstance(n_results, int) and 1 <= n_results <= 100):
            raise RAGError(f"n_results must be between 1 and 100, got {n_results}.")
        await self.open()
        scope = source_scope.resolve(source, self.bm25.sources()) if source is not None else None
        search_settings = self._search_settings(options)
        wanted = n_results or search_settings.rag_retrieval_count
        widen = search_settings.rag_passage_chars > 0 and mode != "separate"
        # with passages, extra candidates stand by for hits that fall inside another's passage
        fetch_n = min(3 * wanted, 100) if widen else wanted
        retriever = self.retriever(n_results=fetch_n, settings=search_settings)
        reaches = self._first_reaches(search_settings, wanted) if widen else []
        with SEARCHES.searching():  # big store writes wait for it (`search_gate`)
            outcome = await retriever.search(
                query.strip(),
                mode=mode,  # type: ignore[arg-type]
                sources=scope,
                near=reaches,
            )
            hits = [Hit.from_node(n) for n in outcome.fused]
            left_out = 0
            if widen and hits and outcome.confident:  # a declined search shows pointers only
                with timer("passages", outcome.timings):
                    candidates = hits
                    hits = await asyncio.to_thread(
                        self._passages, hits, search_settings, reaches, outcome.neighbourhood
                    )
                left_out = left_out_by_budget(candidates, hits, len(reaches))
            else:
                hits = hits[:wanted]
        result = RetrievalResult(
            query=query,
            mode=outcome.mode,
            hits=hits,
            vector_hits=[Hit.from_node(n) for n in outcome.vector],
            bm25_hits=[Hit.from_node(n) for n in outcome.bm25],
            timings=outcome.timings,
            confident=outcome.confident,
            evidence=outcome.evidence.to_dict(),
            left_out=left_out,
        )
        self._log_retrieval(search_settings, result)
        return result

    @staticmethod
    def _first_reaches(settings: RAGSettings, limit: int) -> list[int]:
        return first_reaches(
            limit,
            per_hit=settings.rag_passage_chars,
            total=settings.rag_answer_chars,
            chunk_chars=settings.rag_chunk_size,
            overlap=settings.rag_chunk_overlap,
        )

    def _reads_are_cheap(self, hits: list[Hit]) -> bool:
        """Whether the passages of `hits` can be read as they grow: every row is in memory
        and each hit's source lists its chunks in order (else a window is a Chroma
        metadata query, and the dry runs batch them)."""
        chroma = self.store.chroma
        rows = chroma.rows
        if rows is None or not rows.complete:
            return False
        orders = chroma.chunk_orders(list(dict.fromkeys(h.source_url for h in hits)))
        return all(order.ids for order in orders.values())

    def _passages(
        self, hits: list[Hit], settings: RAGSettings, reaches: list[int], near: Neighbourhood
    ) -> list[Hit]:
        """Up to `len(reaches)` hits widened to their passages within the answer budgets
        (`rag_app.passages`). The neighbours of those hits came with them (`near`), as many
        as `reaches` says; what else the passages need is read in as few reads as
        `PieceReader` manages."""
        reader = PieceReader(
            lambda todo: _pieces(self.store.section_chunks(todo)),
            dry_runs=0 if self._reads_are_cheap(hits[: len(reaches)]) else DRY_RUNS,
        )
        reader.add(_pieces(near.chunks), near.asked)
        return reader.expand(
            hits,
            per_hit=settings.rag_passage_chars,
            total=settings.rag_answer_chars,
            limit=len(reaches),
            first_reach=reaches,
            overhead=hit_overhead,
        )

    async def _reading_pieces(self, key: str) -> tuple[str, list[ReadingPiece]]:
        """A source's title and chunks as `reading_text` takes them; kept for the next
        page while the source's record stays the same (reading a chunk-heavy source from
        Chroma again for every page took ~75 ms a page at 1,000 chunks)."""
        record = await asyncio.to_thread(self.store.get_source, key)
        version = (
            (key, record.content_hash, record.indexed_at, record.chunk_count) if record else None
        )
        if version is not None and (kept := self._read_pieces.get(version)) is not None:
            return kept
        nodes = await asyncio.to_thread(self.store.source_nodes, key)
        pieces = [
            (
                int(n.metadata.get("chunk_index", 0) or 0),
                n.get_content(),
                str(n.metadata.get("heading_path", "")),
                int(n.metadata.get("heading_level", 0) or 0),
            )
            for n in nodes
        ]
        title = str(nodes[0].metadata.get("title", "")) if nodes else ""
        if version is not None and len(pieces) == record.chunk_count:  # a whole version
            self._read_pieces[version] = (title, pieces)
        return title, pieces

    @_storage_guard
    async def read_source(
        self,
        source: str,
        *,
        section: str = "",
        offset: int = 0,
        max_chars: int | None = None,
    ) -> ReadResult:
        """A source's stored text in reading order (one section of it when `section` is a
        heading path or heading), paged by `max_chars` from `offset`."""
        limit = max_chars or self.settings.rag_read_chars
        if not 100 <= limit <= MAX_READ_CHARS:
            raise RAGError(f"max_chars must be between 100 and {MAX_READ_CHARS:,}, got {limit}.")
        if offset < 0:
            raise RAGError(f"offset must be 0 or more, got {offset}.")
        await self.open()
        key = await self._stored_name(source.strip())
        if key not in self.bm25.sources():
            raise UnknownSourceError(
                f"{source!r} is not in the knowledge base; rag_stats (rag stats) lists the sources."
            )
        title, pieces = await self._reading_pieces(key)
        text, sections = "", []
        for form in section_forms(section, title):  # the first that names a section
            # off the event loop: ~10 ms for 5,000 chunks (`bench/reading_text.py`)
            text, sections = await asyncio.to_thread(reading_text, pieces, form)
            if text or not form:
                section = form
                break
        if section and not text:
            raise RAGError(
                f"{key} has no section {section!r}; its sections are listed when it is "
                "read without one."
            )
        if offset > len(text):
            raise RAGError(f"offset {offset:,} is past the end ({len(text):,} characters).")
        part, next_offset = page(text, offset, limit)
        return ReadResult(
            source=key,
            title=title,
            section=section,
            text=part,
            offset=offset,
            next_offset=next_offset,
            total_chars=len(text),
            sections=sections,
            code_fence=open_block(text[:offset]) if offset else "",
        )

    def _log_retrieval(self, settings: RAGSettings, result: RetrievalResult) -> None:
        if not settings.rag_debug_log_enabled:
            return
        retrieval_log.info('RAG retrieve: query="%s" mode=%s', result.query, result.mode)
        for rank, hit in enumerate(result.hits or [*result.vector_hits, *result.bm25_hits], 1):
            retrieval_log.info(
                'RAG result %d: combined=%.3f distance=%s bm25=%s source="%s"',
                rank,
                hit.combined_score,
                "-" if hit.vector_distance is None else f"{hit.vector_distance:.3f}",
                "-" if hit.bm25_score is None else f"{hit.bm25_score:.3f}",
                hit.source_url,
            )
            retrieval_log.debug('RAG result %d text: "%s"', rank, hit.text[:100])
        retrieval_log.debug(
            "RAG timings (ms): %s",
            ", ".join(f"{k}={v:.1f}" for k, v in result.timings.items()),
        )

    # --- delete / stats ---------------------------------------------------
    def _files_under(self, folder: str) -> list[str]:
        """The stored files inside a `file://` folder (none for anything else)."""
        if not folder.startswith("file://"):
            return []
        prefix = folder.rstrip("/") + "/"
        return [r.source for r in self.store.list_sources() if r.source.startswith(prefix)]

    async def _stored_name(self, source: str) -> str:
        """The stored name of a source the user names (`_resolve_source`)."""
        return await asyncio.to_thread(self._resolve_source, source, self._url_as_added(source))

    def _url_as_added(self, source: str) -> list[str]:
        """A URL as `rag add` normalises it before storing it (none for a path, or a URL
        it refuses: that is not stored). On the event loop: it may build the crawler."""
        if "://" not in source or source.startswith("file://"):
            return []
        with contextlib.suppress(RAGError):
            return [self.crawler().validate_url(source)]
        return []

    def _resolve_source(self, source: str, also: Sequence[str] = ()) -> str:
        """The stored name of a source the user names: a local path as its `file://`
        URI, a URL as given, percent-encoded or as `also` spells it (`_url_as_added`)."""
        spellings = [*source_scope.url_spellings(source_scope.source_key(source)), *also]
        for key in spellings:
            if self.store.get_source(key) is not None or self.store.chunk_ids(key):
                return key
        return spellings[0]

    @_storage_guard
    async def delete_source(self, source: str, *, folder: bool = False) -> int:
        """Remove a source's chunks; unknown source → `UnknownSourceError`. With `folder`
        (`rag delete` in a terminal, not an MCP client's call), a local folder that is
        not itself a source removes every file indexed from it."""
        if not source or not source.strip():
            raise RAGError("No source given; pass the URL or file path to delete.")
        if len(source) > MAX_SOURCE_CHARS:
            raise RAGError(f"The source is longer than {MAX_SOURCE_CHARS:,} characters.")
        await self.open()
        key = await self._stored_name(source.strip())

        def delete() -> int:
            inside = self._files_under(key) if folder else []  # `-r`: the folder's files
            stored = bool(self.store.chunk_ids(key)) or self.store.get_source(key) is not None
            if inside:
                own = self.store.delete_source(key) if stored else 0
                return own + sum(self.store.delete_source(file) for file in inside)
            if stored:
                return self.store.delete_source(key)
            files = 0 if folder else len(self._files_under(key))
            if files:
                raise UnknownSourceError(
                    f"Nothing is stored for {source} itself: it is a folder of {files} "
                    "indexed files; `rag delete -r` in a terminal removes them all."
                )
            raise UnknownSourceError(
                f"Nothing is stored for {source}; list the stored sources with `rag stats` "
                "(or the rag_stats tool)."
            )

        removed = await self._locked(delete)
        logger.info("Deleted %s: %d chunks", key, removed)
        return removed

    async def _locked(
        self,
        fn: Callable[..., R],
        *args: Any,
        then: Callable[[R], object] | None = None,
        track: list[asyncio.Future[Any]] | None = None,
    ) -> R:
        """Run a store write in a thread under the write lock, to its end even when the
        caller is cancelled (a cancelled crawl job): the lock is held until the write is
        over, so no other write can start beside a write that is still running. `then`
        runs once the write is durable, whether or not the caller is still there; the
        write's task is added to `track`, for a caller that must wait for it anyway."""

        async def run() -> R:
            async with self._write_turn():
                if self.store.poll_changes:  # follow another machine's reindex switch first
                    await asyncio.to_thread(self.store.catch_up)
                value = await asyncio.to_thread(fn, *args)
            if then is not None:
                then(value)
            return value

        task = asyncio.ensure_future(run())
        if track is not None:
            track.append(task)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        task.add_done_callback(_consume_outcome)
        return await asyncio.shield(task)

    @property
    def restoring(self) -> tuple[int, int] | None:
        """(chunks done, chunks in all) while a set-aside vector index is restored in the
        background (shown by `rag service status`); None otherwise."""
        return (self.reindexing or (0, 0)) if self._restore_running else None

    def write_wait(self) -> WriteWait | None:
        """What holds the writes for long (a restore or a reindex), with its count."""
        if (held := self.reindexing) is None:
            return None
        return WriteWait("restore" if self._restore_running else "reindex", *held)

    @contextlib.asynccontextmanager
    async def _write_turn(self) -> AsyncIterator[None]:
        """Hold the write lock. While waiting for it behind a restore or a reindex, tell
        `write_wait.NOTICE` why (again every `REPEAT_SEC` as the count moves), and that
        the wait ended."""
        given = NOTICE.get()
        if given is None or not self._write_lock.locked():
            async with self._write_lock:
                yield
            return
        told = False

        def notice(wait: WriteWait | None) -> None:
            try:
                given(wait)
            except Exception as err:  # a note must never fail (or lock up) the write
                logger.debug("Could not say why a write waits: %s", err)

        async def tell() -> None:
            nonlocal told
            while True:
                if (wait := self.write_wait()) is not None:
                    notice(wait)
                    told = True
                await asyncio.sleep(REPEAT_SEC if told else 0.1)

        teller = asyncio.ensure_future(tell())
        try:
            await self._write_lock.acquire()
        finally:
            teller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await teller
            if told:
                notice(None)
        try:
            yield
        finally:
            self._write_lock.release()

    async def _settle(self) -> None:
        """Wait for the writes whose callers were cancelled (a cancelled job's last page)."""
        if self._writes:
            await asyncio.wait(set(self._writes))

    @_storage_guard
    async def stats(self, offset: int = 0, limit: int | None = None) -> KBStats:
        """Totals and the list of sources (every source that has chunks; with `limit`,
        that many from `offset`, sorted, so that a client pages a large store)."""
        await self.open(allow_model_mismatch=True)
        s = self.settings
        if self.store.poll_changes:
            await asyncio.to_thread(self.store.catch_up)
        total, bm25_documents, counts = await asyncio.to_thread(self.store.counts)
        every = sorted(counts)
        offset = max(0, offset)
        shown = every[offset:] if limit is None else every[offset : offset + max(0, limit)]
        if limit is None or len(shown) > STATS_PAGE_READ_MAX:
            records = list(await asyncio.to_thread(self.store.chroma.list_sources))
        else:  # one page: only its records are read (by id: a bounded number of them)
            records = list((await asyncio.to_thread(self.store.chroma.get_sources, shown)).values())
        dated = {r.source: r.indexed_at for r in records}
        return KBStats(
            total_chunks=total,
            sources=shown,
            source_chunks={src: counts[src] for src in shown},
            source_dates={src: dated.get(src, "") for src in shown},
            source_count=len(every),
            source_offset=offset,
            embedding_model=self.store.model_name,
            embedding_dimension=self.store.dimension,
            bm25_documents=bm25_documents,
            vector_store=(
                f"chroma://{s.chroma_host}:{s.chroma_port}"
                if s.chroma_host
                else s.chromadb_persist_dir
            ),
            bm25_dir=s.bm25_persist_dir,
        )

    @_storage_guard
    async def check(self, repair: bool = False) -> CheckReport:
        """Compare BM25 with Chroma chunk by chunk (and repair with `repair`)."""
        await self.open(allow_model_mismatch=True)
        async with self._write_turn():
            if not self.store.poll_changes:
                return await asyncio.to_thread(self.store.check, repair)
            # another machine's writes are applied first, as a search would; one landing
            # during the comparison shows as a difference, so a difference is looked at
            # again after catching up (what stays is real)
            await asyncio.to_thread(self.store.catch_up)
            report = await asyncio.to_thread(self.store.check, False)
            if report.ok and not repair:
                return report
            await asyncio.to_thread(self.store.catch_up)
            return await asyncio.to_thread(self.store.check, repair)

    @_storage_guard
    async def reindex(self, progress: Progress | None = None, reuse_copy: bool = False) -> int:
        """Re-embed every stored chunk with the configured model (no re-crawl); with
        `reuse_copy`, take the vectors the vector copy keeps for this model instead of
        embedding those chunks (restoring a set-aside index: nothing was asked to change).

        Builds a new collection beside the live one and switches to it in one step:
        searches get the old results until the switch and the new ones after, and a
        failure leaves the old knowledge base as it was. Writes wait meanwhile.
        """
        async with self._open_lock:
            if self._store is None:
                await asyncio.to_thread(self._open_sync, False)
        async with self._write_turn():
            self.reindexing = (0, 0)

            def counted(done: int, total: int) -> None:
                self.reindexing = (done, total)
                if progress is not None:
                    progress(done, total)

            try:
                count = await asyncio.to_thread(self._reindex_sync, counted, reuse_copy)
            finally:
                self.reindexing = None
        self.model_mismatch = None
        if self.vectors_set_aside:  # every vector is new: nothing set aside is pending now
            self.vectors_set_aside = []
            mark_pending(self.settings.chromadb_persist_dir, [])
        if self.settings.embedding_provider == "builtin":
            await asyncio.to_thread(self._warm_up)
        return count

    def _search_the_copy(self, store: KnowledgeStore, key: str) -> None:
        """Vector searches from the vector copy while a set-aside index waits to be
        restored (by this reindex, or by the next start after it failed); a failure
        (memory) leaves them off, as before, and the reindex goes on."""
        try:
            held = store.search_the_copy(key, self._closing)
        except Exception as err:
            logger.warning("Vector search stays off until the restore ends: %s", err)
            return
        if held:
            logger.info("Vector searches answer from the vector copy (%d chunks) until the "
                        "restored index takes over.", held)  # fmt: skip

    def _reindex_sync(self, progress: Progress | None, reuse_copy: bool = False) -> int:
        s = self.settings
        store = self.store
        dim = _embedding_dimension(self.embed_model)
        name = s.rag_collection_name
        # the pointer as it is now (another machine may have switched); no copy: all of
        # its vectors are about to be replaced
        store.reopen_chunks(exact_copy=False)
        old_name = store.chroma.collection.name
        live_key = model_key(s.embedding_model_name, dim)
        restoring = old_name in self.vectors_set_aside  # its HNSW index is empty
        if restoring:
            self._search_the_copy(store, live_key)
        for leftover in store.reindex_leftovers(name, old_name):  # of an interrupted reindex
            store.drop_collection(leftover)
        # the vector copy's rows of the new collection are staged under their own name
        # until the switch: the live ones stay those of the live collection meanwhile
        if store.vector_copy is not None:
            store.vector_copy.drop(staged(live_key))  # of a reindex stopped in this process
        new = ChromaStore(
            store.client,
            name,
            model_name=s.embedding_model_name,
            dimension=dim,
            chunk_collection=f"{name}__{uuid.uuid4().hex[:8]}",
            ef_search=s.rag_hnsw_ef_search,
            exact_max_chunks=s.rag_exact_search_max_chunks,
            rows_max_chunks=s.rag_rows_in_memory_max_chunks,
            known=store.known_ids,  # the same chunk ids: a chunk's id is its source and text
            vector_copy=store.vector_copy,
            copy_key=staged(live_key),
        )
        copy = store.vector_copy if reuse_copy else None
        self.reembedded = 0
        batch = 64

        def embed(part: Sequence[BaseNode]) -> None:
            """Each node's vector under the new collection's model (from the copy first)."""
            for start in range(0, len(part), batch):
                if self._closing.is_set():  # the old collection stays; the new one is left over
                    raise StoreUnavailableError("The reindex stopped: the store is closing.")
                some = part[start : start + batch]
                kept = copy.get(live_key, [n.node_id for n in some], dim) if copy else {}
                todo = [n for n in some if n.node_id not in kept]
                if todo:
                    vectors = self.embed_model.get_text_embedding_batch(
                        [embed_text(n) for n in todo]
                    )
                    kept.update(zip([n.node_id for n in todo], vectors, strict=True))
                    self.reembedded += len(todo)
                for node in some:
                    node.embedding = kept[node.node_id]

        # other machines' writes to the live collection meanwhile (`reindex_carry`)
        carry = Carry(store.log, store.chroma, new, embed) if store.poll_changes else None
        try:
            nodes = list(store.chroma.iter_nodes())
            for start in range(0, len(nodes), batch):
                part = nodes[start : start + batch]
                embed(part)
                new.upsert_nodes(part)
                if carry is not None:
                    carry.placed(part)
                if progress:
                    progress(min(start + batch, len(nodes)), len(nodes))
            if carry is not None:
                carry.before_switch()
        except BaseException:
            if not self._closing.is_set():  # searches go on on the old collection: exactly
                with contextlib.suppress(Exception):
                    store.reopen_chunks()
                    if restoring:  # its HNSW is still empty until the next restore
                        self._search_the_copy(store, live_key)
            raise
        grace = s.rag_reindex_grace_sec if s.chroma_host else 1.0
        store.switch_chunks(
            new,
            old_name,
            grace_sec=grace,
            copy_key=live_key,
            before_drop=carry.after_switch if carry is not None else None,
        )
        if carry is not None and carry.carried:
            store.resync(list(carry.carried))  # BM25 here, and a closing entry for the others
            logger.info(
                "The reindex took in %d sources other writers changed meanwhile.",
                len(carry.carried),
            )
        if (whole := store.vector_copy) is not None and whole.usable:
            whole.keep(live_key, [n.node_id for n in nodes])  # other models', chunks gone
            whole.incomplete = not whole.usable  # every chunk's vector was just written
        return len(nodes)

    async def aclose(self) -> None:
        """Close the crawler and give up ownership, once every write is durable (a
        write whose caller was cancelled, such as a request cut off by the stop, goes on
        to its end first: the store must outlive it)."""
        await self.cancel_jobs()
        if self._writes:
            try:
                await asyncio.wait_for(asyncio.shield(self._settle()), WRITES_AT_CLOSE_SEC)
            except TimeoutError:
                logger.warning("A store write was still running at close after %g s.",
                               WRITES_AT_CLOSE_SEC)  # fmt: skip
        if self._crawler is not None:
            await self._crawler.close()
            self._crawler = None
        if self._store is not None and (self._background or self._store.loaders):
            self._store.closing.set()  # each stops at its next page; Chroma must outlive it
            threads = [*self._background, *self._store.loaders]
            for thread in threads:
                await asyncio.to_thread(thread.join, 30.0)
            self.threads_left = [t.name for t in threads if t.is_alive()]
            self._background = []
        self._store = None
        if self._vector_copy is not None:
            self._vector_copy.close()
            self._vector_copy = None
        if self._owner_lock is not None:
            self._owner_lock.release()
            self._owner_lock = None
