"""What reading one document may cost: pages, characters, unpacked bytes and seconds.

`DocumentLimits` comes from the settings; a `Budget` is spent while one document is read
and raises as soon as a limit is passed, so a hostile file stops early instead of after
it has cost everything (the readers check it after every page or block).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from rag_app.config import RAGSettings
from rag_app.documents.errors import DocumentTimeoutError, DocumentTooLargeError


@dataclass(frozen=True)
class DocumentLimits:
    """The cost limits of reading one document (defaults are the settings' defaults)."""

    max_pdf_pages: int = 1000
    max_chars: int = 2_000_000
    max_unzipped_bytes: int = 100 * 1024 * 1024
    timeout_sec: float = 30.0

    @classmethod
    def from_settings(cls, settings: RAGSettings) -> DocumentLimits:
        """`RAG_MAX_PDF_PAGES`, `RAG_MAX_DOCUMENT_CHARS`, `RAG_MAX_DOCX_UNZIPPED_BYTES`
        and `RAG_PARSE_TIMEOUT_SEC`."""
        return cls(
            max_pdf_pages=settings.rag_max_pdf_pages,
            max_chars=settings.rag_max_document_chars,
            max_unzipped_bytes=settings.rag_max_docx_unzipped_bytes,
            timeout_sec=settings.rag_parse_timeout_sec,
        )


class Budget:
    """Characters and time left for one document; `spend` raises when either runs out."""

    def __init__(self, limits: DocumentLimits, label: str) -> None:
        self.limits = limits
        self.label = label
        self.chars = 0
        self._deadline = time.monotonic() + limits.timeout_sec

    def spend(self, text: str) -> str:
        """Count `text` against the budget and return it."""
        self.check_room(len(text))
        self.chars += len(text)
        return text

    def check_room(self, chars: int) -> None:
        """Raise as `spend` would if `chars` more characters were spent (nothing is)."""
        if self.chars + chars > self.limits.max_chars:
            limit = self.limits.max_chars
            raise DocumentTooLargeError(
                self.label,
                f"has over {limit:,} characters of text",
                "RAG_MAX_DOCUMENT_CHARS",
                limit,
            )
        self.check_time()

    def check_time(self) -> None:
        """Raise `DocumentTimeoutError` once the time is up."""
        if time.monotonic() > self._deadline:
            raise DocumentTimeoutError(self.label, self.limits.timeout_sec)
