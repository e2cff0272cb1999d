"""ChangeLog: which sources changed, kept in the store itself (a small Chroma collection).

Every write of a source appends an entry before it touches the chunks and another
after it is done. Any process that keeps a derived index (BM25) reads the entries it
has not seen and re-syncs those sources from Chroma. Re-syncing a source makes the
derived index equal to what Chroma holds for it, so applying an entry twice, late or
out of order is harmless; an entry written before a crash makes the half-done write
visible to whoever reads next.

Entries carry their writer (`origin`, one per process start) and a per-writer sequence
number, so a reader notices a gap and asks for the missing entries; the time window
(`SKEW_MS`) only bounds how far back a poll looks for writers it has not met yet.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from chromadb.api import ClientAPI

logger = logging.getLogger(__name__)

SKEW_MS = 60_000  # how far behind the newest entry a new writer's clock may be
RETENTION_MS = 7 * 24 * 3600 * 1000  # entries older than this are pruned


@dataclass(frozen=True, slots=True)
class Change:
    """One entry: `source` changed (`op`: write | delete | begin | switch)."""

    origin: str
    seq: int
    ts_ms: int
    source: str
    op: str
    into: str = ""
    """The chunk collection the write went to ("" when not recorded: older versions)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ChangeLog:
    """Append and read change entries in the `<collection>_changes` collection."""

    def __init__(self, client: ClientAPI, collection_name: str) -> None:
        self.collection = client.get_or_create_collection(
            f"{collection_name}_changes", embedding_function=None
        )
        self.origin = uuid.uuid4().hex[:12]
        self._next = 1

    def peek_seq(self) -> int:
        """The sequence number the next entry will get."""
        return self._next

    def append(self, sources: list[str], op: str, into: str = "") -> list[Change]:
        """Record that `sources` change (one entry each) in chunk collection `into`;
        returns the entries written."""
        if not sources:
            return []
        ts = now_ms()
        seqs = list(range(self._next, self._next + len(sources)))
        self._next += len(sources)
        self.collection.upsert(
            ids=[f"{self.origin}-{s:010d}" for s in seqs],
            embeddings=[[0.0] for _ in sources],
            metadatas=[
                {
                    "origin": self.origin,
                    "seq": s,
                    "ts_ms": ts,
                    "source": src,
                    "op": op,
                    "into": into,
                }
                for s, src in zip(seqs, sources, strict=True)
            ],
        )
        return [
            Change(self.origin, s, ts, src, op, into) for s, src in zip(seqs, sources, strict=True)
        ]

    def since(self, ts_ms: int) -> list[Change]:
        """Entries written at or after `ts_ms` (writer's clock)."""
        return self._get({"ts_ms": {"$gte": int(ts_ms)}})

    def of_origin(self, origin: str, after_seq: int) -> list[Change]:
        """One writer's entries after `after_seq` (to fill a gap)."""
        return self._get({"$and": [{"origin": origin}, {"seq": {"$gt": int(after_seq)}}]})

    def _get(self, where: dict[str, Any]) -> list[Change]:
        got = self.collection.get(where=where, include=["metadatas"])
        out = []
        for meta in got["metadatas"] or []:
            m = dict(meta or {})
            try:
                out.append(
                    Change(str(m["origin"]), int(m["seq"]), int(m["ts_ms"]), str(m["source"]),
                           str(m["op"]), str(m.get("into", "")))
                )  # fmt: skip
            except (KeyError, TypeError, ValueError):
                logger.warning("Ignoring a malformed change-log entry: %r", m)
        return sorted(out, key=lambda c: (c.ts_ms, c.origin, c.seq))

    def oldest_ms(self) -> int | None:
        """Time of the oldest retained entry (None when the log is empty)."""
        got = self.collection.get(limit=1, include=["metadatas"])
        if not got["ids"]:
            return None
        return min(int(dict(m or {}).get("ts_ms", 0)) for m in got["metadatas"] or [{}])

    def prune(self, older_than_ms: int | None = None) -> None:
        """Drop entries older than the retention period."""
        cutoff = older_than_ms if older_than_ms is not None else now_ms() - RETENTION_MS
        self.collection.delete(where={"ts_ms": {"$lt": int(cutoff)}})


class Cursor:
    """How far a reader has applied the log: newest time seen, last seq per writer."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        state = state or {}
        self.ts_ms = int(state.get("ts_ms", 0))
        self.origins: dict[str, list[int]] = {
            str(k): [int(v[0]), int(v[1])] for k, v in dict(state.get("origins", {})).items()
        }  # origin -> [last seq, its ts]

    def to_state(self) -> dict[str, Any]:
        cutoff = now_ms() - RETENTION_MS
        origins = {k: v for k, v in self.origins.items() if v[1] >= cutoff}
        return {"ts_ms": self.ts_ms, "origins": origins}

    def pending(self, log: ChangeLog) -> list[Change]:
        """Entries past this cursor, oldest first (gaps in a writer's sequence are filled)."""
        entries = log.since(max(0, self.ts_ms - SKEW_MS))
        by_origin: dict[str, list[Change]] = {}
        for e in entries:
            by_origin.setdefault(e.origin, []).append(e)
        fresh: list[Change] = []
        for origin, items in by_origin.items():
            last = self.origins.get(origin, [0, 0])[0]
            items = [e for e in items if e.seq > last]
            if items and items[0].seq != last + 1:  # a gap: fetch what the window missed
                items = log.of_origin(origin, last)
            fresh.extend(items)
        return sorted(fresh, key=lambda c: (c.ts_ms, c.origin, c.seq))

    def claim(self, origin: str, seq: int) -> None:
        """Mark a writer's entries up to `seq` as applied (a writer's own, as it writes).

        The read position (`ts_ms`) does not move: only entries actually read may move it,
        or another writer's entries older than this write would never be read."""
        last = self.origins.get(origin, [0, 0])
        if seq > last[0]:
            self.origins[origin] = [seq, now_ms()]

    def advance(self, entries: list[Change]) -> None:
        """Mark `entries` as applied. The read position never passes this machine's own
        clock: an entry from a machine whose clock runs ahead would move the next poll's
        window past every other writer's entries."""
        now = now_ms()
        for e in entries:
            self.ts_ms = max(self.ts_ms, min(e.ts_ms, now))
            last = self.origins.get(e.origin, [0, 0])
            if e.seq > last[0]:
                self.origins[e.origin] = [e.seq, e.ts_ms]
