"""Chunk: one piece of text plus the structural metadata every parser attaches to it.

Parsers first produce `Chunk`s (pure, deterministic, easy to test) and only then turn them
into LlamaIndex nodes (`base.ChunkingNodeParser`). Metadata values are str/int only, because
Chroma accepts nothing else (no lists, no None).

Titles, headings and heading paths go in front of every chunk (embedded text, BM25), so
they are capped (`MAX_*_CHARS`): a hostile 100 KB `<title>` or heading cannot blow up
every chunk of its page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rag_app.limits import ELLIPSIS, MAX_HEADING_CHARS, MAX_PATH_CHARS, MAX_TITLE_CHARS, shorten
from rag_app.parsing.content_type import ContentType

MetadataValue = str | int | float | bool
PATH_SEPARATOR = " > "
__all__ = ["ELLIPSIS", "MAX_HEADING_CHARS", "MAX_PATH_CHARS", "MAX_TITLE_CHARS", "shorten"]


@dataclass(frozen=True)
class Chunk:
    """A chunk's text, its kind and where it sits in the document's heading tree."""

    text: str
    content_type: ContentType
    heading_path: str = ""
    heading_level: int = 0
    extra: dict[str, MetadataValue] = field(default_factory=dict)

    def metadata(self, chunk_index: int) -> dict[str, MetadataValue]:
        """Flat node metadata for position `chunk_index` in the document."""
        return {
            **self.extra,
            "chunk_index": chunk_index,
            "content_type": self.content_type.value,
            "heading_path": self.heading_path,
            "heading_level": self.heading_level,
        }


def join_path(*parts: str) -> str:
    """Breadcrumb string `A > B > C`, skipping empty parts, at most `MAX_PATH_CHARS` long."""
    return shorten(PATH_SEPARATOR.join(part for part in parts if part), MAX_PATH_CHARS)
