"""A progress bar on stderr for long evaluation steps (shown on terminals only)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

ProgressCallback = Callable[[int, int], None]


@contextmanager
def progress_bar(desc: str, unit: str, enabled: bool = True) -> Iterator[ProgressCallback]:
    """Yield a `(done, total)` callback driving a tqdm bar; closed on exit.

    tqdm decides by itself to stay silent when stderr is not a terminal (CI logs, tests),
    so piping the output never fills it with bar redraws.
    """
    from tqdm import tqdm

    holder: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        bar = holder.get("bar")
        if bar is None:
            bar = holder["bar"] = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                file=sys.stderr,
                leave=False,
                disable=None if enabled else True,
                mininterval=0.5,
            )
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        if "bar" in holder:
            holder["bar"].close()
