"""Backoff policy for remote embedding calls: exponential, longer on rate limits.

Pure arithmetic (no sleeping, no I/O) so both the sync and the async client share it
and tests can check it directly. Defaults follow spec 001: retries after 1 s, 2 s, 4 s;
an HTTP 429 waits what the server's `Retry-After` asks, else twice the backoff.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

MAX_DELAY_SEC = 60.0


@dataclass(frozen=True)
class Backoff:
    """How long to wait before retry number `retry` (0 = first retry)."""

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = MAX_DELAY_SEC

    def delay(
        self, retry: int, *, rate_limited: bool = False, retry_after: float | None = None
    ) -> float:
        """Seconds to wait; a server's `Retry-After` wins, capped at `max_delay`."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay)
        wait = self.base * self.factor**retry
        if rate_limited:
            wait *= 2
        return min(wait, self.max_delay)


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from `retry-after-ms` / `Retry-After` (seconds or HTTP date), else None."""
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = _as_float(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _as_float(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def _as_float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None
