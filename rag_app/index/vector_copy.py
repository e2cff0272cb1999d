"""A durable copy of every chunk vector beside an embedded Chroma store.

Chroma keeps a collection's vectors in its HNSW files and only the writes since their
last save in its log (purged after each save). A kill at the wrong moment can leave those
files unloadable; the store then sets them aside and would have to embed every chunk
again from its stored text (at 100k chunks: 48 min at the builtin model's 34.5 chunks/s
on short texts, hours on real pages). This copy (SQLite, WAL, written with every upsert
and delete) lets that salvage take the vectors back instead: a chunk id is made from its
source and text, so the same id under the same model is the same vector.

The copy is an aid, never a cause of failure: an unreadable file is set aside and begun
again, a write that fails turns the copy off for this process (logged). It records
whether its last owner closed it cleanly; when not (a kill, a copy turned off), the next
open compares it with Chroma id by id (`KnowledgeStore.fill_vector_copy`).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

FILE = "rag-vectors.sqlite3"
_FORMAT = 1  # PRAGMA user_version of this layout
_IN = 500  # ids per `IN (...)` query: SQLite's default limit is 32,766 variables

_SCHEMA = (  # a rowid table on 8 KiB pages: 1.7 KB per 384-dim vector, against 4.7 KB
    # WITHOUT ROWID on 4 KiB pages (rows this long overflow its pages), and 3.5× faster writes
    "PRAGMA page_size=8192",  # takes effect only in a new file
    "CREATE TABLE models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
    "CREATE TABLE vectors (model INTEGER NOT NULL, id TEXT NOT NULL, vector BLOB NOT NULL, "
    "UNIQUE (model, id))",
    "CREATE TABLE state (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)
_COLUMNS = {
    "models": ["id", "name"],
    "vectors": ["model", "id", "vector"],
    "state": ["key", "value"],
}
_UNIQUE = {"models": ["name"], "vectors": ["model", "id"], "state": ["key"]}
_STAGED = "\x00staged"  # suffix of a reindex's rows until its switch (`staged`)


class UnknownLayout(sqlite3.DatabaseError):
    """A database that is not this copy's layout (set aside like a damaged one)."""


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (the connection runs in autocommit otherwise)."""
    with db:
        db.execute("BEGIN")
        yield


def _forget(db: sqlite3.Connection, model: str) -> None:
    """Delete every vector kept under `model`, and the name itself."""
    db.execute(
        "DELETE FROM vectors WHERE model IN (SELECT id FROM models WHERE name = ?)", (model,)
    )
    db.execute("DELETE FROM models WHERE name = ?", (model,))


def model_key(model_name: str, dimension: int) -> str:
    """The copy's name for one model's vectors (a model change is a reindex)."""
    return f"{model_name}\x00{dimension}"


def staged(model: str) -> str:
    """Where a reindex keeps the new collection's rows until its switch (`promote`)."""
    return f"{model}{_STAGED}"


def _check_layout(db: sqlite3.Connection) -> None:
    for table, names in _COLUMNS.items():
        columns = [
            c for (c,) in db.execute("SELECT name FROM pragma_table_info(?) ORDER BY cid", (table,))
        ]
        if columns != names:
            raise UnknownLayout(f"table {table} is not ({', '.join(names)})")
    for table, key in _UNIQUE.items():
        unique = [
            [
                c
                for (c,) in db.execute(
                    "SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,)
                )
            ]
            for (index,) in db.execute(
                'SELECT name FROM pragma_index_list(?) WHERE "unique"', (table,)
            )
        ]
        if key not in unique:
            raise UnknownLayout(f"no unique {table}({', '.join(key)})")


class VectorCopy:
    """Vectors by (model, chunk id), float32, in `<persist_dir>/rag-vectors.sqlite3`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._models: dict[str, int] = {}
        self.was_clean = False
        """The last owner closed the copy with every write made (else compare it in full)."""
        self.incomplete = False
        """The copy may lack rows (opened after an unclean close, a fill not finished):
        no clean close until a full comparison or a reindex made it whole."""
        try:
            self._db = self._connect()
        except sqlite3.OperationalError:  # locked, unreachable, I/O: not the file's fault
            raise
        except sqlite3.DatabaseError as err:  # not a database, damaged, another layout
            aside = self.path.with_name(
                f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
            )
            logger.warning(
                "The vector copy %s could not be read (%s); set aside as %s and begun "
                "again from Chroma.",
                self.path,
                err,
                aside.name,
            )
            for suffix in ("", "-wal", "-shm"):
                part = Path(f"{self.path}{suffix}")
                if part.exists():
                    part.replace(f"{aside}{suffix}")
            self._db = self._connect()

    @classmethod
    def for_store(cls, persist_dir: str | Path) -> VectorCopy | None:
        """The copy of an embedded store (None, logged, when it cannot be opened now)."""
        try:
            return cls(Path(persist_dir) / FILE)
        except (OSError, sqlite3.Error) as err:
            logger.warning("The vector copy is off for this process: %s", err)
            return None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute(_SCHEMA[0])
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives a process kill
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                with _transaction(db):
                    for statement in _SCHEMA[1:]:
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version = {_FORMAT}")
            elif version != _FORMAT:
                raise UnknownLayout(f"unknown format {version}")
            else:  # the first release of this format had no state table
                db.execute(_SCHEMA[3].replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
            _check_layout(db)
            row = db.execute("SELECT value FROM state WHERE key = 'clean'").fetchone()
            self.was_clean = bool(row and row[0] == 1)
            self.incomplete = not self.was_clean  # until compared in full or rebuilt
            with _transaction(db):  # open for writing: unclean until `close` says otherwise
                db.execute("INSERT OR REPLACE INTO state VALUES ('clean', 0)")
                stale = db.execute("SELECT name FROM models").fetchall()
                for (name,) in stale:  # of a reindex that stopped before its switch
                    if name.endswith(_STAGED):
                        _forget(db, name)
        except BaseException:
            db.close()
            raise
        return db

    @property
    def usable(self) -> bool:
        return self._db is not None

    def _run(self, what: str, work: Any) -> Any:
        """Run `work(db)` under the lock; on a database error turn the copy off (logged)."""
        with self._lock:
            db = self._db
            if db is None:
                return None
            try:
                return work(db)
            except sqlite3.Error as err:
                logger.warning(
                    "The vector copy is off for this process (%s failed: %s); the next "
                    "start fills it in from Chroma.",
                    what,
                    err,
                )
                self._db = None
                db.close()
                return None

    def _model(self, db: sqlite3.Connection, name: str, create: bool = False) -> int | None:
        """The number `name` is stored under (None when it has no vectors and not `create`)."""
        if name not in self._models:
            if create:
                db.execute("INSERT OR IGNORE INTO models (name) VALUES (?)", (name,))
            row = db.execute("SELECT id FROM models WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            self._models[name] = int(row[0])
        return self._models[name]

    def put(self, model: str, ids: Sequence[str], vectors: Sequence[Any]) -> None:
        """Keep `vectors` under `ids` (replacing what was there)."""
        if not ids:
            return
        try:
            blobs = [np.asarray(v, dtype="<f4").reshape(-1).tobytes() for v in vectors]
        except (TypeError, ValueError) as err:  # Chroma refuses such vectors itself
            logger.warning("Vectors not kept in the vector copy: %s", err)
            return

        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                number = self._model(db, model, create=True)
                db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                    [(number, i, b) for i, b in zip(ids, blobs, strict=True)],
                )

        self._run("a write", write)

    def delete(self, model: str, ids: Iterable[str]) -> None:
        ids = list(ids)
        if not ids:
            return

        def write(db: sqlite3.Connection) -> None:
            number = self._model(db, model)
            if number is None:
                return
            with _transaction(db):
                db.executemany(
                    "DELETE FROM vectors WHERE model = ? AND id = ?", [(number, i) for i in ids]
                )

        self._run("a delete", write)

    def get(self, model: str, ids: Sequence[str], dimension: int) -> dict[str, list[float]]:
        """The kept vectors of those `ids` that have one of `dimension` finite numbers."""
        found: dict[str, list[float]] = {}

        def read(db: sqlite3.Connection) -> None:
            number = self._model(db, model)
            if number is None:
                return
            for start in range(0, len(ids), _IN):
                part = list(ids[start : start + _IN])
                marks = ",".join("?" * len(part))
                for i, blob in db.execute(
                    f"SELECT id, vector FROM vectors WHERE model = ? AND id IN ({marks})",
                    [number, *part],
                ):
                    if isinstance(blob, bytes) and len(blob) == 4 * dimension:
                        vec = np.frombuffer(blob, dtype="<f4")
                        if np.isfinite(vec).all():
                            found[i] = vec.tolist()

        self._run("a read", read)
        return found

    def ids(self, model: str) -> set[str]:
        def read(db: sqlite3.Connection) -> set[str]:
            number = self._model(db, model)
            if number is None:
                return set()
            return {i for (i,) in db.execute("SELECT id FROM vectors WHERE model = ?", (number,))}

        return self._run("a read", read) or set()

    def count(self, model: str) -> int:
        def read(db: sqlite3.Connection) -> int:
            number = self._model(db, model)
            if number is None:
                return 0
            sql = "SELECT count(*) FROM vectors WHERE model = ?"
            return int(db.execute(sql, (number,)).fetchone()[0])

        return self._run("a count", read) or 0

    def keep(self, model: str, ids: Iterable[str]) -> None:
        """Keep only `model`'s vectors of `ids` (after a reindex: the store's whole set)."""
        rows = [(i,) for i in ids]

        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                number = self._model(db, model, create=True)
                db.execute("CREATE TEMP TABLE IF NOT EXISTS kept (id TEXT PRIMARY KEY)")
                db.execute("DELETE FROM kept")
                db.executemany("INSERT OR IGNORE INTO kept VALUES (?)", rows)
                db.execute("DELETE FROM vectors WHERE model != ?", (number,))
                db.execute(
                    "DELETE FROM vectors WHERE model = ? AND id NOT IN (SELECT id FROM kept)",
                    (number,),
                )
                db.execute("DELETE FROM models WHERE id != ?", (number,))
                db.execute("DELETE FROM kept")
            self._models = {model: number} if number is not None else {}

        self._run("a cleanup", write)

    def promote(self, model: str) -> None:
        """Make the vectors kept under `staged(model)` those of `model`, in one step (a
        reindex writes there, so the live rows stay as they are until its switch)."""

        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                number = self._model(db, staged(model), create=True)
                _forget(db, model)
                db.execute("UPDATE models SET name = ? WHERE id = ?", (model, number))
            self._models = {}

        self._run("a switch", write)

    def drop(self, model: str) -> None:
        """Forget every vector kept under `model` (a staged name left by a stopped reindex)."""

        def write(db: sqlite3.Connection) -> None:
            with _transaction(db):
                _forget(db, model)
            self._models = {}

        self._run("a cleanup", write)

    def close(self) -> None:
        """Close, recording a clean close when every write was made."""
        with self._lock:
            db, self._db = self._db, None
            if db is None:
                return
            try:
                if self.incomplete:
                    return
                with _transaction(db):
                    db.execute("INSERT OR REPLACE INTO state VALUES ('clean', 1)")
            except sqlite3.Error as err:  # the next open compares in full
                logger.warning("The vector copy was not closed cleanly: %s", err)
            finally:
                db.close()
