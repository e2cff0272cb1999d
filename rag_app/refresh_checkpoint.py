"""What an unfinished refresh did that a resumed one would not see again.

A refresh job keeps it in its journal record (`rag_app.job_journal`): the pages it
removed (no longer stored, so not checked again), the pages it moved to a new canonical
URL (and the new records those moves created, which a second pass does not check), the
pages it stored anew (a second pass finds them unchanged) and what that embedded. A
refresh resumed after the owner was killed starts from these counts, so its summary is
the whole job's (up to the last second before the kill: checkpoints are spaced). A
checkpoint that does not parse is ignored with a warning: the counts then start over,
the pages are checked as before.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_app.crawl_checkpoint import web_url

logger = logging.getLogger(__name__)

MAX_LISTED = 1_000_000
"""Entries of one list a checkpoint may hold (a damaged journal is not read blindly)."""


@dataclass
class RefreshCheckpoint:
    """A refresh's work so far, as JSON-safe values."""

    removed_urls: list[str] = field(default_factory=list)
    moved_pages: list[dict[str, str]] = field(default_factory=list)
    """`{"from": old URL, "to": new URL}` per moved page."""
    updated_urls: list[str] = field(default_factory=list)
    created_urls: list[str] = field(default_factory=list)
    """Pages its moves stored under a new URL: not among the pages a resumed pass checks."""
    embedded: int = 0
    chunks_stored: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, raw: object) -> RefreshCheckpoint | None:
        """The checkpoint in `raw`, or None (with a warning) when it is absent or damaged."""
        if raw is None:
            return None
        try:
            return cls._parse(raw)
        except (TypeError, ValueError, KeyError) as err:
            logger.warning("The refresh's checkpoint is unusable (%s); its counts start over.", err)
            return None

    @classmethod
    def _parse(cls, raw: object) -> RefreshCheckpoint:
        if not isinstance(raw, dict):
            raise TypeError("not a mapping")
        moved = _listed(raw.get("moved_pages", []), "moved pages")
        for item in moved:
            if not isinstance(item, dict) or set(item) != {"from", "to"}:
                raise ValueError("bad moved page")
            web_url(item["from"]), web_url(item["to"])
        counts = {name: raw.get(name, 0) for name in ("embedded", "chunks_stored")}
        for name, value in counts.items():
            if type(value) is not int or value < 0:
                raise ValueError(f"bad count {name}")
        return cls(
            removed_urls=[web_url(u) for u in _listed(raw.get("removed_urls", []), "removed")],
            moved_pages=[{"from": m["from"], "to": m["to"]} for m in moved],
            updated_urls=[web_url(u) for u in _listed(raw.get("updated_urls", []), "updated")],
            created_urls=[web_url(u) for u in _listed(raw.get("created_urls", []), "created")],
            **counts,
        )


def _listed(value: object, what: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > MAX_LISTED:
        raise ValueError(f"bad {what} list")
    return value


__all__ = ["RefreshCheckpoint"]
