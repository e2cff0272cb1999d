"""Lanes for document-side work, so that searches never queue behind an ingest.

Parsing, chunking and BM25 tokenising run in the ingest lane (two threads), off the
event loop and off the threads searches use. Only the document embedding lane
(`rag_app.embedding.builtin`) may run at a lower CPU priority (Linux nice,
`RAG_INGEST_NICE`, inherited by its OpenMP threads; default 0: nice 19 sped up searches
during an ingest a little but let any other busy program starve a crawl): its work is
C code that holds no Python lock. The ingest lane stays at normal priority on purpose:
its Python code holds the GIL, and a low-priority thread holding the GIL makes every
search wait (priority inversion, measured: p95 went up, not down).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")


_ingest_nice = 0


def set_ingest_nice(nice: int) -> None:
    """The priority `lower_priority` gives (`RAG_INGEST_NICE`); set before the lane starts."""
    global _ingest_nice
    _ingest_nice = max(0, min(19, nice))


def lower_priority() -> None:
    """Run this thread (and the threads it starts) at the ingest priority
    (`RAG_INGEST_NICE`; 0, the default, leaves it as it is)."""
    if sys.platform.startswith("linux") and _ingest_nice:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _ingest_nice)


INGEST_LANE = ThreadPoolExecutor(2, thread_name_prefix="ingest")


async def in_ingest_lane(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `fn` in the low-priority ingest lane without blocking the event loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(INGEST_LANE, partial(fn, *args, **kwargs))
