"""Storage faults as one sentence that names the fix (disk full, read-only, server down).

Chroma, SQLite and the file system report the same situations with many exception
types; the message the user needs is the same each time. Nothing stored is lost by
these failures (writes are ordered, see index/store.py), so each sentence says the
store works again as soon as the cause is gone.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

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


MIN_FREE_BYTES = 64 * 1024 * 1024
"""Below this much free space under a store folder a write is refused before anything is
embedded, and a storage failure is reported as the full disk it most likely is: Chroma's
own layer reports ENOSPC as "Failed to apply logs to the metadata segment", then its next
write wedged until the stall watchdog ended the service, and the store would not open
until space was freed."""


def free_bytes(folder: Path) -> int:
    """Free space for this user on the file system holding `folder` (or its nearest
    existing parent)."""
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def _full_folder(settings: RAGSettings) -> tuple[str, int] | None:
    """The first store folder with less than `MIN_FREE_BYTES` free, and its free bytes."""
    folders = [] if settings.chroma_host else [settings.chromadb_persist_dir]
    for folder in [*folders, settings.bm25_persist_dir]:
        try:
            free = free_bytes(Path(folder).expanduser())
        except OSError:
            continue
        if free < MIN_FREE_BYTES:
            return folder, free
    return None


def _full(settings: RAGSettings) -> StoreUnavailableError:
    return StoreUnavailableError(
        f"The disk under {_where(settings)} (or BM25_PERSIST_DIR) is full; free some "
        "space and run the command again — nothing stored was lost."
    )


def check_space(settings: RAGSettings) -> None:
    """Refuse a write while a store folder's disk is (nearly) full, before any work."""
    full = _full_folder(settings)
    if full is not None:
        folder, free = full
        raise StoreUnavailableError(
            f"The disk under {folder} has {free // (1024 * 1024)} MB free, less than the "
            f"{MIN_FREE_BYTES // (1024 * 1024)} MB a write needs; free some space and run "
            "the command again — nothing stored was lost."
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
        return _full(settings)
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
    storage = isinstance(err, OSError) or type(err).__module__.startswith(("chromadb", "sqlite3"))
    if storage and (full := _full_folder(settings)) is not None:  # Chroma hides ENOSPC
        return StoreUnavailableError(
            f"The disk under {full[0]} is (nearly) full; free some space and run the command "
            "again — nothing stored was lost."
        )
    return None
