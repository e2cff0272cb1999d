"""CachedEmbedding: an embedding model wrapper that remembers vectors on disk.

Evaluations embed the same passages and queries again and again (every chunking, every
rerun of a sweep). The builtin model needs about a minute for the JSQuAD corpus on two
cores, so vectors are kept in a small SQLite file keyed by model, kind (query or
passage) and a hash of the text: a rerun, or another chunking that produces the same
chunk text, costs no embedding call.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import PrivateAttr

from eval.defaults import DEFAULT_CACHE_FILE


def cache_key(model: str, kind: str, text: str) -> str:
    """Key of one vector: the model, `query` or `passage`, and the text's SHA-256."""
    return hashlib.sha256(f"{model}\x00{kind}\x00{text}".encode()).hexdigest()


class CachedEmbedding(BaseEmbedding):
    """Delegates to `inner` and stores every vector in a SQLite file.

    Reads and writes are serialised by one lock (SQLite connections are not shared
    between threads otherwise); `hits` and `misses` count texts served from the cache
    and texts sent to the model.
    """

    _inner: BaseEmbedding = PrivateAttr()
    _db: sqlite3.Connection = PrivateAttr()
    _lock: threading.Lock = PrivateAttr()
    _hits: int = PrivateAttr(default=0)
    _misses: int = PrivateAttr(default=0)

    def __init__(
        self, inner: BaseEmbedding, path: str | os.PathLike[str] = DEFAULT_CACHE_FILE, **kw: Any
    ) -> None:
        kw.setdefault("embed_batch_size", max(1, int(inner.embed_batch_size)))
        super().__init__(model_name=inner.model_name, **kw)
        self._inner = inner
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(file, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB)")
        self._lock = threading.Lock()

    @classmethod
    def class_name(cls) -> str:
        return "CachedEmbedding"

    @property
    def dimension(self) -> int:
        """The inner model's dimension (probed once when it does not say)."""
        dim = getattr(self._inner, "dimension", None)
        if isinstance(dim, int) and dim > 0:
            return dim
        return len(self.get_query_embedding("dimension probe"))

    @property
    def hits(self) -> int:
        """Texts answered from the cache so far."""
        return self._hits

    @property
    def misses(self) -> int:
        """Texts the inner model had to embed so far."""
        return self._misses

    def close(self) -> None:
        """Close the SQLite file."""
        with self._lock:
            self._db.close()

    # --- cache plumbing -----------------------------------------------------
    def _lookup(self, keys: Sequence[str]) -> dict[str, Embedding]:
        found: dict[str, Embedding] = {}
        with self._lock:
            for start in range(0, len(keys), 500):
                part = list(keys[start : start + 500])
                marks = ",".join("?" * len(part))
                rows = self._db.execute(
                    f"SELECT key, vec FROM vectors WHERE key IN ({marks})", part
                ).fetchall()
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32).tolist()
        return found

    def _store(self, pairs: Sequence[tuple[str, Embedding]]) -> None:
        rows = [(key, np.asarray(vec, dtype=np.float32).tobytes()) for key, vec in pairs]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self._db.commit()

    def _split(self, kind: str, texts: Sequence[str]) -> tuple[list[str], dict[str, Embedding]]:
        keys = [cache_key(self.model_name, kind, t) for t in texts]
        found = self._lookup(list(dict.fromkeys(keys)))
        self._hits += sum(1 for k in keys if k in found)
        return keys, found

    def _finish(
        self, keys: list[str], found: dict[str, Embedding], todo: list[int], vectors: list
    ) -> list[Embedding]:
        self._misses += len(todo)
        fresh = [(keys[i], list(map(float, v))) for i, v in zip(todo, vectors, strict=True)]
        if fresh:
            self._store(fresh)
        found.update(fresh)
        return [found[k] for k in keys]

    # --- BaseEmbedding ------------------------------------------------------
    def _get_query_embedding(self, query: str) -> Embedding:
        keys, found = self._split("query", [query])
        todo = [] if keys[0] in found else [0]
        vectors = [self._inner.get_query_embedding(query)] if todo else []
        return self._finish(keys, found, todo, vectors)[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        keys, found = self._split("query", [query])
        todo = [] if keys[0] in found else [0]
        vectors = [await self._inner.aget_query_embedding(query)] if todo else []
        return self._finish(keys, found, todo, vectors)[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        keys, found = self._split("passage", texts)
        todo = [i for i, k in enumerate(keys) if k not in found]
        vectors = self._inner.get_text_embedding_batch([texts[i] for i in todo]) if todo else []
        return self._finish(keys, found, todo, vectors)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        keys, found = self._split("passage", texts)
        todo = [i for i, k in enumerate(keys) if k not in found]
        vectors = (
            await self._inner.aget_text_embedding_batch([texts[i] for i in todo]) if todo else []
        )
        return self._finish(keys, found, todo, vectors)
