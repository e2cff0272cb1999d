"""Telling a writer why it waits: a write queued behind a restore or a reindex.

A restore of a damaged vector index or a `rag reindex` holds the store's writes for as
long as it runs (minutes at 100k chunks). The write that waits reports the reason and
the count through the context variable `NOTICE`, set by whoever shows it: the store
service passes it down its reply stream, a client hands it to its command or tool.
Light on purpose: clients import this without LlamaIndex or Chroma.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["restore", "reindex"]


@dataclass(frozen=True)
class WriteWait:
    """What a write waits for and how far it is (chunks done of chunks in all)."""

    kind: Kind
    done: int
    total: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "done": self.done, "total": self.total}

    @classmethod
    def from_dict(cls, data: Any) -> WriteWait | None:
        """The wire's form back; anything malformed is None (a note is never worth failing a
        write over)."""
        if not isinstance(data, dict) or data.get("kind") not in ("restore", "reindex"):
            return None
        try:
            return cls(data["kind"], int(data.get("done", 0)), int(data.get("total", 0)))
        except (TypeError, ValueError):
            return None

    def english(self) -> str:
        what = (
            "the store is restoring its vector index after damage"
            if self.kind == "restore"
            else "a reindex is re-embedding the store"
        )
        count = f" ({self.done:,}/{self.total:,} chunks)" if self.total else ""
        return f"waiting: {what}{count}; this write goes on when it ends"

    def japanese(self) -> str:
        what = "再埋め込み（reindex）中"
        if self.kind == "restore":
            what = "損傷したベクトル索引を復元中"
        count = f" ({self.done}/{self.total}チャンク)" if self.total else ""
        return f"待機中: {what}{count}のため、完了後に書き込みます"


Notice = Callable[[WriteWait | None], None]
"""Called with the wait while a write waits (again as the count moves) and with None once
the write has its turn."""

NOTICE: ContextVar[Notice | None] = ContextVar("rag_write_wait_notice", default=None)

REPEAT_SEC = 2.0
"""How often a waiting write reports the count again."""
