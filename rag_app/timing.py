"""Step timers in milliseconds (spec 001 §3.7): measure without cluttering the logic."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def timer(
    label: str, timings: dict[str, float], logger: logging.Logger | None = None
) -> Iterator[None]:
    """Record the elapsed ms of the block in `timings[label]` (and log it at DEBUG)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = (time.perf_counter() - start) * 1000.0
        timings[label] = timings.get(label, 0.0) + elapsed
        if logger is not None and logger.isEnabledFor(logging.DEBUG):
            logger.debug("[TIMER] %s: %.1fms", label, elapsed)
