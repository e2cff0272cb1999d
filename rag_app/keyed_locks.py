"""One asyncio lock per key (a host, a robots.txt URL, a source), kept only while in use.

A long-lived crawler meets thousands of hosts; a dict of locks that only grows keeps one
for each of them for the life of the process. Here a key's lock exists while a task holds
it or waits for it, and is dropped when the last one lets go.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable


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
        release = await self.acquire(key)
        try:
            yield
        finally:
            release()

    async def acquire(self, key: str) -> Callable[[], None]:
        """Take `key`'s lock; returns the call that lets go of it (once), for a holder
        whose turn ends later than its own code does (a write that outlives its caller)."""
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:
            self._leave(key)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                lock.release()
                self._leave(key)

        return release

    def _leave(self, key: str) -> None:
        lock, users = self._locks[key]
        if users <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)
