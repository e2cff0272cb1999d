"""Per-domain politeness delay, measured from the start of the previous request."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from rag_app.keyed_locks import KeyedLocks
from rag_app.limits import MAX_CRAWL_DELAY_SEC

SWEEP_MIN_HOSTS = 256
"""Hosts known before the first sweep for old ones."""


class DomainThrottle:
    """Space request starts to the same host by at least `delay` seconds.

    Two steps per request, so that no request waits out a delay while it holds one of the
    crawler's connection slots (a slot sleeping for a host's 60 s Crawl-delay is a slot no
    other site can use). `wait_turn`, before the request takes a slot, waits for its host's
    next turn: `delay` after both the last turn and the last actual start. `try_start`,
    once it holds a slot, records the start, or refuses when the host's last request
    started less than `delay` ago (turns that came due while every slot was taken by other
    sites get their slots at the same moment): the request then gives its slot back and
    waits for a turn again. Requests to one host queue on a lock for their turns; other
    hosts are not held up.

    A host's times are forgotten once they are `forget_after` old (no delay is longer, so
    its next request would not wait anyway): a long-lived crawler keeps state only for
    the hosts of the last hour, not for every host it ever met.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        forget_after: float = MAX_CRAWL_DELAY_SEC,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._forget_after = forget_after
        self._last_turn: dict[str, float] = {}
        self._last_start: dict[str, float] = {}
        self._locks = KeyedLocks()
        self._sweep_at = SWEEP_MIN_HOSTS

    def __len__(self) -> int:
        """Hosts with times remembered."""
        return len(self._last_turn.keys() | self._last_start.keys())

    async def wait_turn(self, host: str, delay: float) -> None:
        """Before taking a connection slot: wait until `host`'s next turn, and take it."""
        if delay > self._forget_after:
            raise ValueError(f"A delay of {delay} s is longer than this throttle remembers.")
        async with self._locks.hold(host):
            while delay > 0:  # a start recorded while this sleeps moves the turn on
                last = max(
                    self._last_turn.get(host, -math.inf), self._last_start.get(host, -math.inf)
                )
                remaining = last + delay - self._clock()
                if remaining <= 0:
                    break
                await self._sleep(remaining)
            self._last_turn[host] = self._clock()

    def try_start(self, host: str, delay: float) -> bool:
        """Holding a slot, right before the request goes out: record its start, or False
        when `host`'s last request started less than `delay` ago (wait for a turn again)."""
        now = self._clock()
        last = self._last_start.get(host)
        if delay > 0 and last is not None and last + delay - now > 0:  # as `wait_turn` reckons
            return False
        self._last_start[host] = now
        if len(self._last_start) >= self._sweep_at:
            self._sweep(now)
        return True

    def _sweep(self, now: float) -> None:
        """Forget the hosts whose last turn and start are `forget_after` old and that no
        request is waiting for; the next sweep comes when twice as many hosts are known."""
        old = now - self._forget_after
        for host in self._last_turn.keys() | self._last_start.keys():
            last = max(self._last_turn.get(host, -math.inf), self._last_start.get(host, -math.inf))
            if last <= old and not self._locks.in_use(host):
                self._last_turn.pop(host, None)
                self._last_start.pop(host, None)
        self._sweep_at = max(SWEEP_MIN_HOSTS, 2 * len(self))
