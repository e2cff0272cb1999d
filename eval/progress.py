"""Progress on stderr for long evaluation steps: a bar on a terminal, plain lines in a
log (the same reporter as the `rag` command's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rag_app.console import progress_reporter

ProgressCallback = Callable[[int, int], None]


@contextmanager
def progress_bar(desc: str, unit: str, enabled: bool = True) -> Iterator[ProgressCallback]:
    """Yield a `(done, total)` callback; the bar is closed on exit."""
    if not enabled:
        yield lambda done, total: None
        return
    update, close = progress_reporter(desc, unit)
    try:
        yield update
    finally:
        close()
