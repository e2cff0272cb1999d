"""Per-domain politeness delay, measured from the start of the previous request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class DomainThrottle:
    """Space request starts to the same host by at least `delay` seconds.

    Requests to one host queue on a lock, so concurrent tasks cannot start together;
    other hosts are not held up.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._last_start: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait_turn(self, host: str, delay: float) -> None:
        """Wait until `host` may receive a request, then record this request's start."""
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            last = self._last_start.get(host)
            if last is not None and delay > 0:
                remaining = last + delay - self._clock()
                if remaining > 0:
                    await self._sleep(remaining)
            self._last_start[host] = self._clock()
