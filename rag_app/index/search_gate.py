"""Searches first: a big store write does not start while a search is running.

Chroma's embedded client holds the GIL for a whole call, so a slice of chunks written
while a search is between its steps stops that search for the slice's duration (tens of
ms). The store's owner marks each search (`SEARCHES.searching`), and the writer of a
slice waits until none is running (`SEARCHES.wait_idle`), at most `MAX_WAIT_SEC` per
slice and `MAX_WAIT_PER_WRITE_SEC` per store write (`WriteWaits`, shared by the upserts and
deletes of one page), so the store's stall watchdog (`RAG_STORE_STALL_SEC`) never counts
more than that. Only an embedded Chroma waits (an HTTP client's calls stop no search). A
search that must wait for the writer itself (catching up with other machines' changes
takes the store's write lock) steps aside while it waits (`SEARCHES.stepping_aside`), so
the two never wait for each other.

The cost: searches back to back without a pause slow an ingest of small pages (each
slice waits at most 0.1 s; 20 small pages with two clients searching back to back took
4.1 s instead of 2.0 s). Measured with
`bench/search_during_ingest.py` (120 small files into a store service, a search every
50 ms): busy p95 52–58 ms without the gate, 42–48 ms with it, ingest speed the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar

MAX_WAIT_SEC = 0.1
"""Longest a write slice waits for searches to finish (a search takes ~20 ms)."""
MAX_WAIT_PER_WRITE_SEC = 2.0
"""Longest one write (all its slices) waits in all."""

_in_search: ContextVar[bool] = ContextVar("in_search", default=False)
"""Set in a search's task, and so in the threads it starts (`asyncio.to_thread` copies
the context)."""


class SearchGate:
    """How many searches are running in this process; writers wait for none."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._running = 0
        self.waiting = 0
        """Writers waiting now."""
        self.waited_sec = 0.0
        """Total time writers have waited (for measurements)."""

    @contextlib.contextmanager
    def searching(self) -> Iterator[None]:
        """Mark a search as running for the duration of the block."""
        token = _in_search.set(True)
        with self._idle:
            self._running += 1
        try:
            yield
        finally:
            self._leave()
            _in_search.reset(token)

    def _leave(self) -> None:
        with self._idle:
            self._running -= 1
            if not self._running:
                self._idle.notify_all()

    @contextlib.contextmanager
    def stepping_aside(self) -> Iterator[None]:
        """Inside a search, while it waits for something a writer holds: it does not
        count as running meanwhile (outside a search: nothing)."""
        if not _in_search.get():
            yield
            return
        self._leave()
        try:
            yield
        finally:
            with self._idle:
                self._running += 1

    def wait_idle(self, limit: float | None = None) -> float:
        """Wait until no search is running, or `limit` seconds (`MAX_WAIT_SEC`). On a
        thread that runs an event loop it does not wait: the searches it runs could not
        finish meanwhile; nor inside a search (it would wait for itself). Returns the
        seconds waited."""
        if _in_search.get():
            return 0.0
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            return 0.0
        with self._idle:
            if not self._running:
                return 0.0
            start = time.monotonic()
            wait = MAX_WAIT_SEC if limit is None else limit
            self.waiting += 1
            try:
                self._idle.wait_for(lambda: not self._running, timeout=wait)
            finally:
                self.waiting -= 1
                waited = time.monotonic() - start
                self.waited_sec += waited
            return waited


class WriteWaits:
    """The waits of one write's slices, `MAX_WAIT_PER_WRITE_SEC` in all (no gate: none)."""

    def __init__(self, gate: SearchGate | None) -> None:
        self._gate = gate
        self._left = MAX_WAIT_PER_WRITE_SEC

    def before_slice(self) -> None:
        """Wait for running searches before writing the next slice, within the budget."""
        if self._gate is not None and self._left > 0:
            self._left -= self._gate.wait_idle(min(MAX_WAIT_SEC, self._left))


SEARCHES = SearchGate()
