"""Chroma-backed storage: the chunk collection (via LlamaIndex's ChromaVectorStore)
and a small sources collection that records what each source was ingested as.

Embedded `PersistentClient` by default; a Chroma server when `CHROMA_HOST` is set.
The chunk collection records its embedding model and dimension and refuses a mismatch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import chromadb
import httpx
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore

from rag_app.config import RAGSettings
from rag_app.errors import EmbeddingMismatchError, StoreUnavailableError
from rag_app.index import stored_text
from rag_app.index.chunk_orders import ChunkOrder, ChunkOrders
from rag_app.index.exact_vectors import ExactVectors, VectorMatches
from rag_app.index.search_gate import SEARCHES, SearchGate, WriteWaits
from rag_app.index.stored_rows import Row, StoredRows
from rag_app.index.vector_copy import VectorCopy, model_key
from rag_app.parsing.metadata_modes import follows_modes, set_metadata_modes

logger = logging.getLogger(__name__)

MODEL_KEY = "embedding_model"
DIM_KEY = "embedding_dimension"
ACTIVE_KEY = "active_chunks"  # sources-collection metadata: which collection holds the chunks
_BATCH = 2000
_PAGE = 1000  # vectors per read of the exact-search copy
ROWS_PAGE = 200
"""Rows per read of `load_rows`. Chroma's embedded client holds the GIL for a whole call,
and a read of 1,000 rows took ~0.1 s at 100k chunks: searches that arrive while the rows
are read in would wait that long."""
WRITE_SLICE = 64
"""Chunks per Chroma upsert or delete call. Chroma's embedded client holds the GIL for a
whole call, so one 500-chunk page written in one call stopped every other thread (every
search) for 0.49–0.60 s; in slices of 64 the longest stall was 0.15–0.34 s, for ×1.45–2.24
write time (`bench/write_stall.py`)."""
UNFINDABLE_RECHECK = 200
"""How wide `unfindable` looks again before it calls a chunk lost."""
SAME_VECTOR = 1e-4
"""A query's cosine distance to its own stored vector stays below this (float32 error
reaches ~2.4e-6 at 3,072 dimensions)."""


def _all_same(distances: Sequence[float]) -> bool:
    """A window of hits that are all copies of the query's own vector: the nearest is at
    (about) zero and every other at exactly its distance."""
    return bool(distances) and distances[0] <= SAME_VECTOR and distances[-1] - distances[0] <= 1e-6


def _sources(got: Any) -> list[str]:
    """The `source_url` of each chunk in a Chroma `get` result that included metadatas."""
    metas = got["metadatas"] or [{}] * len(got["ids"])
    return [str((m or {}).get("source_url", "")) for m in metas]


class SectionChunk(NamedTuple):
    """One stored chunk as a passage uses it."""

    source: str
    chunk_index: int
    text: str
    heading_path: str
    page: int | None = None
    """A PDF chunk's page (chunks stored before pages were kept flat: None)."""


def _only(keep: Sequence[bool], *columns: Sequence[Any]) -> list[list[Any]]:
    """Each column's items where `keep` is true."""
    return [[v for v, k in zip(col, keep, strict=True) if k] for col in columns]


def _rows_of(got: Any) -> dict[str, Row]:
    """`{id: (document, metadata)}` of a Chroma `get` that included both."""
    return {
        i: (d, m or {})
        for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }


def _page(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _section_chunks(got: Any) -> list[SectionChunk]:
    return [
        SectionChunk(
            str((m or {}).get("source_url", "")),
            int((m or {}).get("chunk_index", -1)),
            stored_text.decode(d, m),
            stored_text.decode(str((m or {}).get("heading_path", "")), m),
            _page((m or {}).get("page")),
        )
        for d, m in zip(got["documents"], got["metadatas"], strict=True)
    ]


@dataclass
class SourceRecord:
    """What a source (URL or file path) was last ingested as."""

    source: str
    title: str = ""
    content_hash: str = ""
    chunk_count: int = 0
    indexed_at: str = ""
    kind: str = "web"
    etag: str = ""
    last_modified: str = ""
    mtime: float = 0.0
    chunk_ids: str = ""
    """The source's chunk ids in `chunk_index` order, space-separated (empty for records
    written by older versions): a hit's neighbours are then fetched by id."""
    fetched_from: str = ""
    """The URL a web page was fetched from when it is stored under another one (its
    canonical URL); empty otherwise."""
    extra: dict[str, Any] = field(default_factory=dict)

    def ordered_chunk_ids(self) -> list[str]:
        return self.chunk_ids.split()

    def still(self, now: SourceRecord | None) -> bool:
        """`now` (the source's record as read again) is this version of it: not deleted
        or stored anew since this one was read."""
        return now is not None and (now.content_hash, now.indexed_at) == (
            self.content_hash,
            self.indexed_at,
        )

    def to_metadata(self) -> dict[str, str | int | float]:
        data = asdict(self)
        data["extra"] = json.dumps(self.extra, ensure_ascii=False)
        return data

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> SourceRecord:
        data = dict(meta)
        raw_extra = data.pop("extra", "{}")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known, extra=json.loads(raw_extra or "{}"))


def embedded(client: ClientAPI) -> bool:
    """Chroma runs in this process (its calls hold the GIL), not behind HTTP."""
    return "fastapi" not in str(client.get_settings().chroma_api_impl).lower()


def bound_requests(client: ClientAPI, seconds: float) -> None:
    """Give a Chroma HTTP client's requests a time limit. chromadb builds its httpx
    session with `timeout=None` and has no setting for it (chroma-core/chroma#5805; still
    so in 1.5.9), so a server that accepts connections and stops answering held every
    search and write for good; the session's default timeout is set here instead."""
    session = getattr(getattr(client, "_server", None), "_session", None)
    if not isinstance(session, httpx.Client):
        raise StoreUnavailableError(
            "This chromadb version keeps its HTTP session elsewhere; requests to the Chroma "
            "server could not be given a time limit."
        )
    session.timeout = httpx.Timeout(seconds, connect=min(seconds, 10.0))


def make_client(settings: RAGSettings) -> ClientAPI:
    """A Chroma client: HTTP when `CHROMA_HOST` is set, else embedded on disk."""
    try:
        if settings.chroma_host:
            client = chromadb.HttpClient(host=settings.chroma_host, port=settings.chroma_port)
            bound_requests(client, settings.rag_chroma_timeout_sec)
            return client
        return chromadb.PersistentClient(path=settings.chromadb_persist_dir)
    except Exception as err:  # chromadb raises many types for the same situation
        where = (
            f"the Chroma server at {settings.chroma_host}:{settings.chroma_port}"
            if settings.chroma_host
            else f"the Chroma directory {settings.chromadb_persist_dir}"
        )
        raise StoreUnavailableError(
            f"Could not open {where} ({err}); check CHROMA_HOST/CHROMA_PORT or "
            "CHROMADB_PERSIST_DIR."
        ) from err


HNSW_BUILD: dict[str, Any] = {"space": "cosine", "ef_construction": 400, "max_neighbors": 32}
"""Graph build settings of new chunk collections (fixed at creation; `rag reindex` makes a
new collection). With them and `HNSW_EF_SEARCH`, the top 30 of 300 JSQuAD questions equalled
exact search at 100k near-duplicate-rich chunks (`bench/vector_recall.py`); Chroma's defaults
(100 / 16 / 100) reached recall@10 0.78–0.81 there, and even ef_search 3200 only 0.996."""
HNSW_EF_SEARCH = 400
RESTORE_COPY_MAX_BYTES = 1 << 30
"""Largest in-memory copy of the vectors held while a set-aside index waits to be restored
(`KnowledgeStore.search_the_copy`; 1 GiB: up to 699,050 chunks of 384 dimensions)."""
HNSW_SYNC_THRESHOLD = 1000
"""New vectors between two saves of the HNSW files (Chroma's default, set on every open).
An open inserts the ones since the last save again (1.7 s for 520 at 100k chunks; the
service saves them at a clean stop, `hnsw_save`); 100 made that 0.2 s, but a kill -9
during a write then damaged the index in 5 of 60 rounds against 0 of 60 (README "Cold
start")."""


class ChromaStore:
    """Chunks and source records in Chroma, with the model/dimension guard."""

    def __init__(
        self,
        client: ClientAPI,
        collection_name: str,
        *,
        model_name: str,
        dimension: int,
        check_model: bool = True,
        chunk_collection: str | None = None,
        ef_search: int = HNSW_EF_SEARCH,
        exact_max_chunks: int = 0,
        rows_max_chunks: int | None = None,
        known: Callable[[Sequence[str]], list[bool]] | None = None,
        vector_copy: VectorCopy | None = None,
        copy_key: str | None = None,
    ) -> None:
        self.client = client
        self.vector_copy = vector_copy
        """The durable copy of the vectors (embedded stores, `rag_app.index.vector_copy`):
        every upsert and delete of chunks updates it, under `copy_key`."""
        self.check_model = check_model
        self.ef_search = ef_search
        self.exact_max_chunks = exact_max_chunks
        self.rows_max_chunks = exact_max_chunks if rows_max_chunks is None else rows_max_chunks
        self.exact: ExactVectors | None = None  # see read_exact, adopt_exact
        self.restore_copy = False
        """`exact` is the vector copy held while this collection's set-aside HNSW index
        waits to be restored (`KnowledgeStore.search_the_copy`): kept whatever the store's
        size (up to `RESTORE_COPY_MAX_BYTES`), and the no-match rule stays off meanwhile
        (it may lack chunks, and it was off before the copy answered)."""
        self.rows: StoredRows | None = None
        """The stored rows in memory, for stores of up to `rows_max_chunks` (`load_rows`)."""
        self.known = known
        """Which ids this process has caught up with (its BM25 holds them): the rows kept
        when there is no exact-search copy to tell (see `_held`). Without it and the copy,
        no rows are held."""
        self.orders = ChunkOrders()  # sources' chunk orders, from their records
        self.gate: SearchGate | None = SEARCHES if embedded(client) else None
        """Searches this process's writes wait for (`search_gate`): only an embedded
        client holds the GIL through a call; an HTTP client's writes stop no search."""
        self.model_name = model_name
        self.dimension = dimension
        self.sources_collection: Collection = client.get_or_create_collection(
            f"{collection_name}_sources", embedding_function=None
        )
        active = (self.sources_collection.metadata or {}).get(ACTIVE_KEY)
        self.collection = self._open_chunks(
            chunk_collection or (str(active) if active else collection_name)
        )
        self.vector_store = ChromaVectorStore(chroma_collection=self.collection)
        recorded = self.collection.metadata or {}
        self.copy_key = copy_key or model_key(  # the model its vectors were made with
            str(recorded.get(MODEL_KEY, model_name)), int(recorded.get(DIM_KEY, dimension))
        )
        if (exact_max_chunks > 0 or self.rows_max_chunks > 0) and self.count() == 0:
            self.exact = ExactVectors(dimension) if exact_max_chunks > 0 else None
            ruled = self.exact is not None or known is not None  # see `_held`
            self.rows = StoredRows(complete=True) if ruled and self.rows_max_chunks > 0 else None

    def _open_chunks(self, name: str) -> Collection:
        wanted = {MODEL_KEY: self.model_name, DIM_KEY: self.dimension}
        col = self.client.get_or_create_collection(
            name,
            metadata=wanted,
            configuration={"hnsw": {**HNSW_BUILD, **self._hnsw_runtime()}},
            embedding_function=None,
        )
        hnsw = (col.configuration or {}).get("hnsw") or {}
        stale = {k: v for k, v in self._hnsw_runtime().items() if hnsw.get(k) not in (None, v)}
        if stale:  # saved now; Chroma applies it when a process next loads the index
            col.modify(configuration={"hnsw": stale})
        meta = col.metadata or {}
        have_model, have_dim = meta.get(MODEL_KEY), meta.get(DIM_KEY)
        if (have_model, have_dim) != (self.model_name, self.dimension):
            if col.count() == 0:
                col.modify(metadata=wanted)
            elif self.check_model:
                raise EmbeddingMismatchError(
                    f"The knowledge base was built with embedding model {have_model!r} "
                    f"({have_dim} dims) but {self.model_name!r} ({self.dimension} dims) is "
                    "configured; run `rag reindex` to re-embed the stored text, or switch "
                    "EMBEDDING_PROVIDER back."
                )
        return col

    def _hnsw_runtime(self) -> dict[str, int]:
        """The HNSW settings an existing collection can change (set on every open)."""
        return {"ef_search": self.ef_search, "sync_threshold": HNSW_SYNC_THRESHOLD}

    @staticmethod
    def recorded_dimension(client: Any, collection_name: str, model_name: str) -> int | None:
        """The dimension the stored chunks of `model_name` have, read from the collection's
        metadata (None for a new store or another model): lets a store open while its
        embedding provider is unreachable, for what needs no embedding."""
        try:
            sources = client.get_collection(f"{collection_name}_sources")
            active = (sources.metadata or {}).get(ACTIVE_KEY) or collection_name
            meta = client.get_collection(str(active)).metadata or {}
        except Exception:  # no such collection yet (the error type differs by client)
            return None
        dim = meta.get(DIM_KEY)
        if meta.get(MODEL_KEY) != model_name or not isinstance(dim, int) or dim <= 0:
            return None
        return dim

    def set_active_chunks(self, name: str) -> None:
        """Point this store's sources at another chunk collection (one metadata write)."""
        meta = dict(self.sources_collection.metadata or {})
        meta[ACTIVE_KEY] = name
        self.sources_collection.modify(metadata=meta)

    # --- chunks -----------------------------------------------------------
    def write_waits(self) -> WriteWaits:
        """The waits for running searches of one write (all its slices; `search_gate`)."""
        return WriteWaits(self.gate)

    def count(self) -> int:
        return self.collection.count()

    def upsert_nodes(
        self,
        nodes: Sequence[BaseNode],
        stored: AbstractSet[str] = frozenset(),
        waits: WriteWaits | None = None,
    ) -> None:
        """Write nodes that carry embeddings (insert or replace by id). Those of `stored`
        ids (already in Chroma) only get their metadata updated: an id is made from the
        chunk's embedded text, so its text and vector are already there, and rewriting a
        live vector is what Chroma's HNSW has lost records after (chroma-core/chroma#7758:
        live records unreachable by `query()` after deletes and upserts)."""
        kept = [n for n in nodes if n.node_id in stored]
        waits = waits or self.write_waits()
        for start in range(0, len(kept), WRITE_SLICE):
            batch = kept[start : start + WRITE_SLICE]
            ids = [n.node_id for n in batch]
            waits.before_slice()
            try:
                self.collection.update(
                    ids=ids, metadatas=[stored_text.ascii_metadata(n) for n in batch]
                )
            finally:  # read again in full: only part of each row was written
                self.forget_rows(ids)
        nodes = [n for n in nodes if n.node_id not in stored]
        for start in range(0, len(nodes), WRITE_SLICE):
            batch = nodes[start : start + WRITE_SLICE]
            ids = [n.node_id for n in batch]
            embeddings = [n.get_embedding() for n in batch]
            documents = [stored_text.encode(n.get_content()) for n in batch]
            metadatas = [stored_text.ascii_metadata(n) for n in batch]
            # a stored id's upsert merges its metadata in Chroma: that row is read again
            new = [not stored for stored in self._caught_up(ids)]
            if self.vector_copy is not None:  # first: a copy row Chroma lacks is harmless
                self.vector_copy.put(self.copy_key, ids, embeddings)
            waits.before_slice()
            with self._rows_written(ids):
                self.collection.upsert(
                    ids=ids, embeddings=embeddings, documents=documents, metadatas=metadatas
                )
                self._mirror(
                    ids, embeddings, [str(n.metadata.get("source_url", "")) for n in batch]
                )
            if (rows := self.rows) is not None:
                rows.forget([i for i, fresh in zip(ids, new, strict=True) if not fresh])
                rows.put(*_only(new, ids, documents, metadatas))
        if self.rows is not None and self.exact is None and nodes:  # else the copy's size
            self._drop_rows_if_too_big(self.count())  # is the store's

    def delete_ids(self, ids: Sequence[str], waits: WriteWaits | None = None) -> None:
        waits = waits or self.write_waits()
        for start in range(0, len(ids), WRITE_SLICE):
            part = list(ids[start : start + WRITE_SLICE])
            waits.before_slice()
            try:
                self.vector_store.delete_nodes(node_ids=part)
                if self.exact is not None:
                    self.exact.delete(part)
                if self.vector_copy is not None:
                    self.vector_copy.delete(self.copy_key, part)
            finally:  # gone, or perhaps gone if the write failed part-way
                self.forget_rows(part)

    # --- the exact-search copy (rag_app/index/exact_vectors.py) ------------
    def read_exact(
        self,
        known_sources: Callable[[Sequence[str]], list[str | None]] | None = None,
        stop: threading.Event | None = None,
    ) -> ExactVectors | None:
        """A copy of every stored vector when the store is small enough for exact search
        (None otherwise, when vectors cannot be read, or when `stop` is set). Reads vectors
        only, taking each chunk's source from `known_sources` where it knows it (parsing
        Chroma's metadata tripled the time). Needs no lock: writes made while it reads are
        settled by `adopt_exact`."""
        total = self.count()
        if self.exact_max_chunks <= 0 or total > self.exact_max_chunks:
            return None
        exact = ExactVectors(self.dimension, capacity=total + 1024)
        offset = 0
        try:
            while not (stop and stop.is_set()):
                got = self.collection.get(limit=_PAGE, offset=offset, include=["embeddings"])
                ids = list(got["ids"])
                if not ids:
                    return exact
                embeddings = got.get("embeddings")
                if embeddings is None or len(embeddings) != len(ids):
                    raise ValueError("Chroma returned chunks without their vectors")
                sources = known_sources(ids) if known_sources else [None] * len(ids)
                unknown = [i for i, s in zip(ids, sources, strict=True) if s is None]
                if unknown:
                    meta = self.collection.get(ids=unknown, include=["metadatas"])
                    found = dict(zip(meta["ids"], _sources(meta), strict=True))
                    sources = [
                        s if s is not None else found.get(i, "")
                        for i, s in zip(ids, sources, strict=True)
                    ]
                exact.upsert(ids, embeddings, [str(s) for s in sources])
                offset += len(ids)
        except Exception as err:  # vectors set aside or unreadable: HNSW answers instead
            logger.warning("Exact vector search is off for this store: %s", err)
        return None

    def adopt_exact(self, exact: ExactVectors) -> bool:
        """Start searching `exact` after making it hold exactly Chroma's chunk ids (a chunk's
        id derives from its source and text, so an id stands for one vector). Call with
        writes held off: from here on every write updates the copy. False when the store
        has grown past the limit meanwhile."""
        self._settle(exact, self.all_ids())
        if len(exact) != self.count():  # another machine wrote while ids were paged
            self._settle(exact, self.all_ids())
        self.exact, self.rows, self.restore_copy = exact, None, False
        self._drop_exact_if_too_big()
        self.start_rows()
        return self.exact is not None

    def start_rows(self) -> bool:
        """Begin an (empty, incomplete) in-memory copy of the rows if the store is within
        `rows_max_chunks` and has none; `load_rows` fills it. Call with writes held off:
        from here on every write updates the copy. True when there is a copy."""
        caught_up = self.exact is not None or self.known is not None  # see `_held`
        wanted = self.rows is None and caught_up and self.rows_max_chunks > 0
        if wanted and self.count() <= self.rows_max_chunks:
            self.rows = StoredRows()
        return self.rows is not None

    def load_rows(self, stop: threading.Event | None = None) -> int:
        """Read every stored row into the in-memory copy (`rag_app.index.stored_rows`),
        page by page, taking no lock: rows a write touched meanwhile are not kept (they are
        read when a search first needs them). Each read waits for running searches first
        (`search_gate`: the read holds the GIL, and the rows are read just when a new
        service's first searches come in). Returns how many rows it holds."""
        rows = self.rows
        offset = 0
        while rows is not None and rows is self.rows and not (stop and stop.is_set()):
            if self.gate is not None:
                self.gate.wait_idle()
            since = rows.generation
            got = self.collection.get(
                limit=ROWS_PAGE, offset=offset, include=["documents", "metadatas"]
            )
            if not got["ids"]:
                rows.complete = True
                break
            rows.fill(self._held(_rows_of(got)), since)
            self._drop_rows_if_too_big()
            offset += len(got["ids"])
        return len(rows) if rows is not None and rows is self.rows else 0

    def _read_rows(self, ids: Sequence[str]) -> dict[str, Row]:
        """Stored rows of `ids` (those that exist): from memory where held, the rest from
        Chroma in one read (and kept, unless a write came in meanwhile)."""
        rows = self.rows
        if rows is None:
            return _rows_of(self.collection.get(ids=list(ids), include=["documents", "metadatas"]))
        found, missing = rows.get(ids)
        if missing:
            since = rows.generation
            read = _rows_of(self.collection.get(ids=missing, include=["documents", "metadatas"]))
            rows.fill(self._held(read), since)
            self._drop_rows_if_too_big()
            found.update(read)
        return found

    def _caught_up(self, ids: Sequence[str]) -> list[bool]:
        """Which of `ids` are chunks this process has caught up with: those the exact-search
        copy holds, else those `known` names (neither: none)."""
        exact = self.exact
        if exact is not None:
            return [i in exact for i in ids]
        return self.known(ids) if self.known is not None else [False] * len(ids)

    def _held(self, rows: dict[str, Row]) -> dict[str, Row]:
        """Only the rows of chunks this process has caught up with: a row of another chunk
        (another machine's write not applied here yet) would be kept by no rule that later
        forgets it."""
        ids = list(rows)
        return {i: rows[i] for i, ok in zip(ids, self._caught_up(ids), strict=True) if ok}

    @contextlib.contextmanager
    def _rows_written(self, ids: Sequence[str]) -> Iterator[None]:
        """A write of `ids`: if it fails part-way, Chroma may hold it anyway, so the copy
        forgets their rows (read again when asked)."""
        try:
            yield
        except BaseException:
            self.forget_rows(ids)
            raise

    def forget_rows(self, ids: Iterable[str]) -> None:
        """Drop the in-memory rows of `ids` (changed, or perhaps changed, in Chroma)."""
        if (rows := self.rows) is not None:
            rows.forget(ids)

    def _mirror(self, ids: list[str], embeddings: Sequence[Any], sources: list[str]) -> None:
        exact = self.exact
        if exact is None:
            return
        exact.upsert(ids, embeddings, sources)
        self._drop_exact_if_too_big()

    def _drop_exact_if_too_big(self) -> None:
        size = len(self.exact) if self.exact is not None else None
        if size is not None and self.restore_copy:
            if size * self.dimension * 4 > RESTORE_COPY_MAX_BYTES:
                self.exact, self.restore_copy = None, False
            return
        if size is not None and size > self.exact_max_chunks:
            self.exact = None
            logger.info(
                "The store passed %d chunks (RAG_EXACT_SEARCH_MAX_CHUNKS); vector search uses "
                "Chroma's HNSW index from now on.",
                self.exact_max_chunks,
            )
            self._rows_follow_known()
        self._drop_rows_if_too_big(size)

    def _rows_follow_known(self) -> None:
        """The vector copy is gone, so `known` decides which rows are kept from now on:
        rows it held for chunks this process has not caught up with (another machine's,
        which the vector copy took in when it was read) are forgotten, as are those of
        reads still in flight under the old rule (`StoredRows.restart_fills`); else a
        later delete of such a chunk would be caught up with and its row kept."""
        rows = self.rows
        if rows is None or self.known is None:
            return
        rows.restart_fills()
        ids = list(rows.ids())
        rows.forget([i for i, ok in zip(ids, self._caught_up(ids), strict=True) if not ok])

    def _drop_rows_if_too_big(self, size: int | None = None) -> None:
        """Drop the rows copy once the store (`size` chunks, when known) or the copy itself
        passes `rows_max_chunks`."""
        rows = self.rows
        if rows is not None and (
            max(len(rows), size or 0) > self.rows_max_chunks
            or (self.exact is None and self.known is None)  # nothing tells which to keep
        ):
            self.rows = None
            logger.info(
                "The store passed %d chunks (RAG_ROWS_IN_MEMORY_MAX_CHUNKS); searches read "
                "their rows from Chroma from now on.",
                self.rows_max_chunks,
            )

    def mirror_source(self, source: str, ids: set[str]) -> None:
        """Make the exact-search copy hold exactly `ids` for `source` (another writer's
        change, read back from Chroma)."""
        exact = self.exact
        if exact is None:
            if self.rows is not None:
                self._drop_rows_if_too_big(self.count())
            return
        have = exact.ids_of_source(source)
        exact.delete(have - ids)
        self.forget_rows(have - ids)
        vectors = self.existing_embeddings(sorted(ids - have))
        self._mirror(list(vectors), list(vectors.values()), [source] * len(vectors))

    def mirror_ids(self, chunk_ids: set[str]) -> int:
        """Make the exact-search copy hold exactly `chunk_ids` (all of Chroma's); returns how
        many rows it had to add or drop."""
        exact = self.exact
        if exact is None:
            if (rows := self.rows) is not None:
                rows.forget(rows.ids() - chunk_ids)
            return 0
        fixed = self._settle(exact, chunk_ids)
        self._drop_exact_if_too_big()
        return fixed

    def _settle(self, exact: ExactVectors, chunk_ids: set[str]) -> int:
        have = exact.ids()
        extra = have - chunk_ids
        exact.delete(extra)
        missing = sorted(chunk_ids - have)
        self.forget_rows([*extra, *missing])
        for start in range(0, len(missing), 500):
            got = self.collection.get(
                ids=missing[start : start + 500], include=["embeddings", "metadatas"]
            )
            exact.upsert(list(got["ids"]), got["embeddings"], _sources(got))
        return len(extra) + len(missing)

    def warm_up(self) -> None:
        """Make Chroma load what a search reads now rather than on the first search: the
        chunks' HNSW segment, and the source records (their first read took 48 ms at a
        100k-chunk store, a later one 1 ms)."""
        if self.count():
            self.collection.query(
                query_embeddings=[[0.0] * (self.dimension - 1) + [1.0]], n_results=1, include=[]
            )
            self.sources_collection.get(limit=1, include=[])

    def all_ids(self) -> set[str]:
        """Every chunk id (paged; for consistency checks)."""
        out: set[str] = set()
        offset = 0
        while True:
            got = self.collection.get(limit=_BATCH * 5, offset=offset, include=[])
            if not got["ids"]:
                return out
            out.update(got["ids"])
            offset += len(got["ids"])

    def source_counts(self) -> dict[str, int]:
        """Chunks per source, read from chunk metadata (a scan; for consistency checks)."""
        return {source: len(ids) for source, ids in self.source_ids().items()}

    def source_ids(self) -> dict[str, set[str]]:
        """Chunk ids per source, read from chunk metadata (a scan; for consistency checks)."""
        found: dict[str, set[str]] = {}
        offset = 0
        while True:
            got = self.collection.get(limit=_BATCH * 5, offset=offset, include=["metadatas"])
            if not got["ids"]:
                return found
            for i, meta in zip(got["ids"], got["metadatas"] or [], strict=True):
                found.setdefault(str(dict(meta or {}).get("source_url", "")), set()).add(i)
            offset += len(got["ids"])

    def unfindable(self, ids: Sequence[str], k: int = 10) -> list[str]:
        """Those of `ids` that a query with their own stored embedding does not return in
        the top `k`, nor in a wider second look: chunks the vector index lost (e.g. after
        a crash) or cannot reach."""
        lost: list[str] = []
        for start in range(0, len(ids), 500):
            part = list(ids[start : start + 500])
            try:
                got = self.collection.get(ids=part, include=["embeddings"])
            except Exception:  # vectors missing (a set-aside index): none can be found
                lost += part
                continue
            found_ids, embeddings = got["ids"], got.get("embeddings")
            if embeddings is None or not len(found_ids):
                continue
            hits = self.collection.query(
                query_embeddings=[list(e) for e in embeddings], n_results=k, include=[]
            )
            missed = [
                (chunk_id, embedding)
                for chunk_id, embedding, row in zip(found_ids, embeddings, hits["ids"], strict=True)
                if chunk_id not in row
            ]
            if missed:  # near-identical chunks can crowd a top 10: look again, wider
                wide = self.collection.query(
                    query_embeddings=[list(e) for _, e in missed],
                    n_results=min(self.count(), UNFINDABLE_RECHECK),
                    include=["distances"],
                )
                lost += [
                    i
                    for (i, _), row, far in zip(missed, wide["ids"], wide["distances"], strict=True)
                    if i not in row and not _all_same(far)
                ]  # a window full of the very same vector (a page footer kept on 300 pages)
                # cannot tell: re-inserting it would only rewrite live vectors again
        return lost

    def reinsert(self, ids: Sequence[str]) -> int:
        """Write chunks again with their stored embeddings (re-indexes their vectors);
        returns how many were written (a chunk gone, or whose vector is gone, is not)."""
        written = 0
        for start in range(0, len(ids), 500):
            part = list(ids[start : start + 500])
            try:
                got = self.collection.get(
                    ids=part, include=["embeddings", "documents", "metadatas"]
                )
            except Exception:  # their vectors are gone: only `reindex` can embed them again
                continue
            if not got["ids"]:
                continue
            if self.vector_copy is not None:
                self.vector_copy.put(self.copy_key, got["ids"], got["embeddings"])
            with self._rows_written(got["ids"]):
                self.collection.upsert(  # never delete first: a crash must not lose them
                    ids=got["ids"],
                    embeddings=[list(e) for e in got["embeddings"]],
                    documents=got["documents"],
                    metadatas=got["metadatas"],
                )
            self._mirror(list(got["ids"]), got["embeddings"], _sources(got))
            if (rows := self.rows) is not None:  # kept by the rule reads follow (`_held`)
                read = _rows_of(got)
                held = self._held(read)
                rows.forget([i for i in read if i not in held])
                docs, metas = [d for d, _ in held.values()], [m for _, m in held.values()]
                rows.put(list(held), docs, metas)
                self._drop_rows_if_too_big()
            written += len(got["ids"])
        return written

    def section_chunks(self, windows: Sequence[tuple[str, Sequence[int]]]) -> list[SectionChunk]:
        """Stored chunks of each `(source, chunk indexes)` window, in one metadata query
        (for sources whose record does not list its chunks). `$in` over the indexes, not a
        `$gte`/`$lte` range: 5.7 ms against 109 ms for one window of a 6,600-chunk
        collection; three windows in one `$or` take 14 ms."""
        clauses = [
            {"$and": [{"source_url": source}, {"chunk_index": {"$in": list(indexes)}}]}
            for source, indexes in windows
            if indexes
        ]
        if not clauses:
            return []
        where = clauses[0] if len(clauses) == 1 else {"$or": clauses}
        got = self.collection.get(where=where, include=["documents", "metadatas"])  # type: ignore[arg-type]
        return _section_chunks(got)

    def chunk_orders(self, sources: Sequence[str]) -> dict[str, ChunkOrder]:
        """Each source's chunk ids in order (empty for a source whose record lists none),
        from memory or, for sources not cached, one read of their records."""

        def load(missing: list[str]) -> dict[str, list[str]]:
            return {s: r.ordered_chunk_ids() for s, r in self.get_sources(missing).items()}

        return self.orders.get(sources, load)

    def nodes_and_sections(
        self, node_ids: Sequence[str], section_ids: Sequence[str]
    ) -> tuple[list[TextNode], list[SectionChunk]]:
        """Nodes for `node_ids` and passage pieces for `section_ids`, in one read: each
        Chroma read costs ~0.6 ms before its first row, so a search that fetched its hits,
        then their neighbours, paid it several times. Pieces are read straight from
        Chroma's answer: building a node per neighbour cost a third of a passage lookup
        (2.4 of 7 ms for ~60 neighbours at 10k chunks)."""
        wanted = list(dict.fromkeys([*node_ids, *section_ids]))
        if not wanted:
            return [], []
        got = self._read_rows(wanted)
        nodes = [self._to_node(i, *got[i]) for i in dict.fromkeys(node_ids) if i in got]
        pieces = [got[i] for i in dict.fromkeys(section_ids) if i in got]
        return nodes, _section_chunks(
            {"documents": [d for d, _ in pieces], "metadatas": [m for _, m in pieces]}
        )

    def source_nodes(self, source: str) -> list[TextNode]:
        """Every stored chunk of `source` (any order)."""
        got = self.collection.get(where={"source_url": source}, include=["documents", "metadatas"])
        return [
            self._to_node(i, d, m)
            for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
        ]

    def ids_for_source(self, source: str) -> list[str]:
        got = self.collection.get(where={"source_url": source}, include=[])
        return list(got["ids"])

    def existing_embeddings(self, ids: Sequence[str]) -> dict[str, list[float]]:
        """Stored embeddings for those of `ids` that exist."""
        if not ids:
            return {}
        got = self.collection.get(ids=list(ids), include=["embeddings"])
        embs = got.get("embeddings")
        if embs is None:
            return {}
        return {i: [float(x) for x in e] for i, e in zip(got["ids"], embs, strict=True)}

    def get_nodes(self, ids: Sequence[str]) -> list[TextNode]:
        if not ids:
            return []
        got = self._read_rows(ids)
        return [self._to_node(i, *got[i]) for i in dict.fromkeys(ids) if i in got]

    def iter_nodes(self, batch: int = _BATCH) -> Iterator[TextNode]:
        """Every stored chunk (text + metadata), for BM25 rebuild and reindex."""
        offset = 0
        while True:
            got = self.collection.get(
                limit=batch, offset=offset, include=["documents", "metadatas"]
            )
            if not got["ids"]:
                return
            for i, d, m in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                yield self._to_node(i, d, m)
            offset += len(got["ids"])

    @staticmethod
    def _to_node(node_id: str, text: str | None, meta: Any) -> TextNode:
        node = metadata_dict_to_node(dict(meta or {}), text=stored_text.decode(text, meta))
        node.id_ = node_id
        if not follows_modes(node):  # a chunk stored by an older version
            set_metadata_modes([node])
        return node  # type: ignore[return-value]

    def query_ids(
        self, embedding: Sequence[float], top_k: int, sources: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """Nearest chunk ids with cosine distances, best first (within `sources` if given).

        The hot search path: the exact-search copy when the store has one; else asking
        Chroma for distances only (~4x faster than for documents + metadata); the few hits
        actually returned are fetched afterwards.
        """
        return self.query_vectors(embedding, top_k, sources).hits

    def query_vectors(
        self, embedding: Sequence[float], top_k: int, sources: Sequence[str] | None = None
    ) -> VectorMatches:
        """`query_ids` plus the similarity spread when the exact copy answered."""
        if top_k <= 0:
            return VectorMatches()
        exact = self.exact
        if exact is not None:
            found = exact.query(embedding, top_k, sources)
            if self.restore_copy:  # the no-match rule stays off (`restore_copy`)
                found.spread = None
            return found
        try:
            where = {"source_url": {"$in": list(sources)}} if sources is not None else None
            got = self.collection.query(
                query_embeddings=[list(embedding)],
                n_results=top_k,
                include=["distances"],
                where=where,  # type: ignore[arg-type]
            )
        except Exception:
            if self.count() == 0:
                return VectorMatches()
            raise
        ids, distances = got["ids"][0], got["distances"][0]
        return VectorMatches([(i, float(d)) for i, d in zip(ids, distances, strict=True)])

    # --- sources ----------------------------------------------------------
    def get_sources(self, sources: Sequence[str]) -> dict[str, SourceRecord]:
        """The records of those `sources` that have one."""
        if not sources:
            return {}
        got = self.sources_collection.get(ids=list(sources), include=["metadatas"])
        records = [SourceRecord.from_metadata(dict(m or {})) for m in got["metadatas"]]
        return {r.source: r for r in records}

    def get_source(self, source: str) -> SourceRecord | None:
        got = self.sources_collection.get(ids=[source], include=["metadatas"])
        if not got["ids"]:
            return None
        return SourceRecord.from_metadata(dict(got["metadatas"][0] or {}))

    def put_source(self, record: SourceRecord) -> None:
        self.put_sources([record])

    def put_sources(self, records: Sequence[SourceRecord]) -> None:
        """Write source records (insert or replace by source), in slices of `WRITE_SLICE`."""
        for start in range(0, len(records), WRITE_SLICE):
            batch = records[start : start + WRITE_SLICE]
            try:
                self.sources_collection.upsert(
                    ids=[r.source for r in batch],
                    embeddings=[[0.0]] * len(batch),
                    metadatas=[r.to_metadata() for r in batch],
                )
            finally:  # a write that failed may have been applied: the order is read again
                self.orders.forget(r.source for r in batch)

    def delete_source_record(self, source: str) -> None:
        try:
            self.sources_collection.delete(ids=[source])
        finally:
            self.orders.forget([source])

    def list_sources(self) -> list[SourceRecord]:
        out: list[SourceRecord] = []
        offset = 0
        while True:
            got = self.sources_collection.get(limit=_BATCH, offset=offset, include=["metadatas"])
            if not got["ids"]:
                return sorted(out, key=lambda r: r.source)
            out.extend(SourceRecord.from_metadata(dict(m or {})) for m in got["metadatas"])
            offset += len(got["ids"])
