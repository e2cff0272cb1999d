"""Storage faults as one sentence that names the fix (disk full, read-only, server down).

Chroma, SQLite and the file system report the same situations with many exception
types; the message the user needs is the same each time. Nothing stored is lost by
these failures (writes are ordered, see index/store.py), so each sentence says the
store works again as soon as the cause is gone.
"""

from __future__ import annotations

import errno

import httpx

from rag_app.config import RAGSettings
from rag_app.errors import StoreUnavailableError

_FULL = ("disk is full", "no space left", "database or disk is full", "file too large")
_READ_ONLY = ("read-only", "readonly", "read only")
_UNREACHABLE = (
    "connection refused",
    "could not connect",
    "connecterror",
    "connection reset",
    "server disconnected",
    "remoteprotocolerror",
    "name or service not known",
    "connection aborted",
)


def _where(settings: RAGSettings) -> str:
    if settings.chroma_host:
        return f"the Chroma server at {settings.chroma_host}:{settings.chroma_port}"
    return f"the store folder {settings.chromadb_persist_dir}"


def _sentence_start(text: str) -> str:
    return text[:1].upper() + text[1:]


def storage_error(err: BaseException, settings: RAGSettings) -> StoreUnavailableError | None:
    """A user-facing error for a storage fault, or None if `err` is something else."""
    text = f"{type(err).__name__}: {err}".lower()
    code = getattr(err, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or any(m in text for m in _FULL):
        return StoreUnavailableError(
            f"The disk under {_where(settings)} (or BM25_PERSIST_DIR) is full; free some "
            "space and run the command again — nothing stored was lost."
        )
    if code in (errno.EROFS, errno.EACCES, errno.EPERM) or any(m in text for m in _READ_ONLY):
        return StoreUnavailableError(
            f"{_sentence_start(_where(settings))} (or BM25_PERSIST_DIR) cannot be written "
            "(read-only or no permission); make it writable and run the command again."
        )
    if settings.chroma_host and isinstance(err, httpx.TimeoutException):
        return StoreUnavailableError(
            f"{_sentence_start(_where(settings))} did not answer within "
            f"{settings.rag_chroma_timeout_sec:g} s (RAG_CHROMA_TIMEOUT_SEC); check that it "
            "runs and run the command again."
        )
    if settings.chroma_host and (
        isinstance(err, ConnectionError) or any(m in text for m in _UNREACHABLE)
    ):
        return StoreUnavailableError(
            f"{_sentence_start(_where(settings))} cannot be reached; start it (or check "
            "CHROMA_HOST/CHROMA_PORT) and run the command again."
        )
    return None
