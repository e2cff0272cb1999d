"""Carry other writers' changes into the collection a reindex is building.

On a Chroma server several owners (machines) share one chunk collection. `rag reindex`
on one of them re-embeds a snapshot of it into a new collection while the others keep
writing to the live one; those writes went down with the old collection at the switch.
The reindexer therefore follows the change log (`ChangeLog`) from before its snapshot:

- before the switch, it copies into the new collection every source another writer
  changed since, pass after pass until one finds none, and then compares the two
  collections id by id once (a snapshot read page by page can miss a chunk when another
  writer deletes meanwhile);
- after the switch and its grace period, just before the old collection is deleted, once
  more for sources whose latest write went into the old collection (their writer had not
  seen the switch); a source whose latest write went into the new one stands (each
  change-log entry names the collection its write went to).

A chunk id is its source and text, so an id already in the new collection has its new
vector: only text the new collection lacks is embedded. An embedded store has one owner
and no other writer, so nothing is carried there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from llama_index.core.schema import BaseNode

from rag_app.index.change_log import SKEW_MS, Change, ChangeLog, now_ms

if TYPE_CHECKING:
    from rag_app.index.chroma_store import ChromaStore

logger = logging.getLogger(__name__)

ROUNDS = 10
"""Passes before the switch at most (a writer that never pauses is caught after it)."""

Embed = Callable[[Sequence[BaseNode]], None]
"""Gives each node its embedding under the new collection's model."""


def source_of(node: BaseNode) -> str:
    return str(node.metadata.get("source_url", ""))


class Carry:
    """One reindex's view of the other writers, from before its snapshot to its end."""

    def __init__(self, log: ChangeLog, old: ChromaStore, new: ChromaStore, embed: Embed) -> None:
        self._log, self._old, self._new, self._embed = log, old, new, embed
        self._since = now_ms() - SKEW_MS
        self._seen = {(e.origin, e.seq) for e in log.since(self._since)}
        self._placed: dict[str, set[str]] = {}
        """Source → the chunk ids this reindex put in the new collection."""
        self.carried: dict[str, None] = {}
        """Sources copied again from the live collection, in order."""

    def placed(self, nodes: Sequence[BaseNode]) -> None:
        """Record chunks of the snapshot written to the new collection."""
        for node in nodes:
            self._placed.setdefault(source_of(node), set()).add(node.node_id)

    def _fresh_entries(self) -> list[Change]:
        """Other writers' entries since the last look, oldest first."""
        own = self._log.origin
        entries = [
            e
            for e in self._log.since(self._since)
            if e.origin != own and e.op != "switch" and (e.origin, e.seq) not in self._seen
        ]
        self._seen.update((e.origin, e.seq) for e in entries)
        return entries

    def _fresh(self) -> list[str]:
        """Sources other writers changed since the last look."""
        return list(dict.fromkeys(e.source for e in self._fresh_entries()))

    def _copy(self, source: str) -> None:
        """Make the new collection hold the live collection's chunks of `source`."""
        nodes = self._old.source_nodes(source)
        ids = {n.node_id for n in nodes}
        there = set(self._new.ids_for_source(source))
        stale = sorted(there - ids)
        if stale:
            self._new.delete_ids(stale)
        todo = [n for n in nodes if n.node_id not in there]
        if todo:
            self._embed(todo)
        if nodes:  # ids already there only get their metadata again
            self._new.upsert_nodes(nodes, stored=there)
        self._placed[source] = ids
        self.carried[source] = None

    def before_switch(self) -> None:
        """Carry every change made so far, then settle what a paged snapshot missed."""
        for _ in range(ROUNDS):
            sources = self._fresh()
            if not sources:
                break
            for source in sources:
                self._copy(source)
        live = self._old.all_ids()
        placed = set().union(*self._placed.values()) if self._placed else set()
        missing = sorted(live - placed)
        sources = {src for src, ids in self._placed.items() if ids - live}  # removed since
        sources.update(source_of(n) for n in self._old.get_nodes(missing))
        for source in sorted(sources):
            self._copy(source)

    def after_switch(self) -> None:
        """Carry writes that reached the old collection after the switch (their writer had
        not seen it), unless the source's latest write went into the new one: each entry
        names the collection its write went to, so a later write into the new collection
        stands even when it restored the snapshot's text."""
        latest: dict[str, Change] = {}
        for entry in self._fresh_entries():  # oldest first: the last one per source wins
            latest[entry.source] = entry
        old, new = self._old.collection.name, self._new.collection.name
        for source, entry in latest.items():
            if entry.into == new:
                continue  # written into the new collection since the switch: that stands
            if entry.into == old:
                self._copy(source)
                continue
            # a writer that does not name its collection (an older version): by the ids
            placed = self._placed.get(source, set())
            if set(self._new.ids_for_source(source)) != placed:
                continue
            if set(self._old.ids_for_source(source)) != placed:
                self._copy(source)
