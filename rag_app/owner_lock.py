"""StoreOwnerLock: exactly one process opens a persistent store at a time.

Chroma's embedded client is not process-safe and the BM25 folder has one writer, so
the process that opens them holds an exclusive `filelock` in each folder for as
long as it has them open. The operating system drops the lock when the process
exits, however it exits (kill -9 included), so there is nothing to clean up by
hand. Every other process talks to the owner (see `rag_app.service`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from rag_app.config import RAGSettings
from rag_app.errors import StoreBusyError, StoreUnavailableError

LOCK_NAME = ".rag-owner.lock"
INFO_NAME = ".rag-owner.json"


def state_dirs(settings: RAGSettings) -> list[Path]:
    """The folders one owner holds: the embedded Chroma folder (if any), the BM25 folder
    (never empty: the settings refuse an empty BM25_PERSIST_DIR); the first is where the
    owner publishes its details."""
    return [path for _, path in _named_dirs(settings)]


def _named_dirs(settings: RAGSettings) -> list[tuple[str, Path]]:
    dirs: list[tuple[str, Path]] = []
    if not settings.chroma_host:
        dirs.append(("CHROMADB_PERSIST_DIR", Path(settings.chromadb_persist_dir).expanduser()))
    dirs.append(("BM25_PERSIST_DIR", Path(settings.bm25_persist_dir).expanduser()))
    out: list[tuple[str, Path]] = []
    for name, path in dirs:
        resolved = path.resolve()
        if resolved not in [p for _, p in out]:
            out.append((name, resolved))
    return out


def prepare_dirs(settings: RAGSettings) -> list[Path]:
    """Create the store's folders; one sentence naming the setting if one cannot be used."""
    for name, path in _named_dirs(settings):
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".rag-write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise StoreUnavailableError(
                f"{name}={path} cannot be used ({err.strerror or err}); choose a folder "
                "this user can write to."
            ) from None
    return state_dirs(settings)


class StoreOwnerLock:
    """Exclusive, non-blocking locks on a store's folders; `info` names the holder."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self._locks = [FileLock(d / LOCK_NAME, timeout=0) for d in dirs]
        self._held: list[FileLock] = []
        self._inodes: list[tuple[int, int]] = []
        """(device, inode) of each lock file as taken (see `intact`)."""

    @classmethod
    def for_settings(cls, settings: RAGSettings) -> StoreOwnerLock:
        return cls(state_dirs(settings))

    @property
    def primary(self) -> Path:
        return self.dirs[0]

    @property
    def held(self) -> bool:
        return bool(self._held) and len(self._held) == len(self._locks)

    def acquire(self, timeout: float = 0) -> None:
        """Take every lock or none (waiting up to `timeout` s for each); raise
        `StoreBusyError` naming the owner if one is held."""
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        try:
            for lock in self._locks:
                lock.acquire(timeout=timeout)
                self._held.append(lock)
            self._inodes = [_identity(Path(lock.lock_file)) for lock in self._locks]
        except Timeout:
            self.release()
            owner = read_info(self.primary)
            who = f"process {owner.get('pid')}" if owner.get("pid") else "another process"
            raise StoreBusyError(
                f"The knowledge base in {self.primary} is open in {who}; use the store service "
                "(the rag command and rag-mcp connect to it by themselves) or stop that process."
            ) from None

    def release(self) -> None:
        while self._held:
            self._held.pop().release()

    def intact(self) -> bool:
        """Every lock file is still the one this process locked. A folder removed (or its
        lock file replaced) under a running owner lets another process lock a new file
        there and own the same store beside it."""
        return self.changed() is None

    def changed(self) -> Path | None:
        """The first folder whose lock file is no longer the one this process locked
        (the first folder when none is held), else None."""
        if not self._held:
            return self.primary
        for folder, lock, taken in zip(self.dirs, self._locks, self._inodes, strict=True):
            try:
                if _identity(Path(lock.lock_file)) != taken:
                    return folder
            except OSError:
                return folder
        return None

    def republish(self, info: dict[str, Any]) -> bool:
        """Write `info` again when the published details are gone or not this process's
        (a user removed `.rag-owner.json`: every client then waited for an owner that
        never published itself, and `rag service stop` found none). True when rewritten."""
        if read_info(self.primary).get("pid") == os.getpid():
            return False
        self.write_info(info)
        return True

    def write_info(self, info: dict[str, Any]) -> None:
        """Publish how to reach the owner (atomic replace, readable by this user only)."""
        path = self.primary / INFO_NAME
        tmp = path.with_name(f"{INFO_NAME}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(info, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def clear_info(self) -> None:
        """Remove the published details if they are still this process's (a folder
        replaced under it may hold another owner's by now)."""
        if read_info(self.primary).get("pid") == os.getpid():
            (self.primary / INFO_NAME).unlink(missing_ok=True)


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def read_info(directory: Path) -> dict[str, Any]:
    """The owner's published details, or {} when there are none (or they are unreadable)."""
    try:
        data = json.loads((directory / INFO_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
