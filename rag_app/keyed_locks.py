"""One asyncio lock per key (a host, a robots.txt URL, a source), kept only while in use.

A long-lived crawler meets thousands of hosts; a dict of locks that only grows keeps one
for each of them for the life of the process. Here a key's lock exists while a task holds
it or waits for it, and is dropped when the last one lets go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class KeyedLocks:
    """`async with locks.hold(key):` serialises the tasks of one key."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    def in_use(self, key: str) -> bool:
        """A task holds or waits for `key`'s lock."""
        return key in self._locks

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
