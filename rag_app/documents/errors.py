"""Why a PDF or Word document could not be indexed: one `RAGError` sentence each.

`label` in every constructor is how the document is named in the message, e.g.
`The PDF /docs/a.pdf` or `The Word document https://example.com/b.docx`.
"""

from __future__ import annotations

from rag_app.errors import RAGError


class DocumentError(RAGError):
    """A PDF or Word document could not be turned into text."""


class UnreadableDocumentError(DocumentError):
    """The bytes are not a document the reader can parse (damaged, truncated, mislabelled)."""

    def __init__(self, label: str, detail: str, hint: str) -> None:
        detail = " ".join(detail.split())[:200] or "no detail"
        super().__init__(f"{label} could not be read ({detail}); {hint}.")


class EncryptedDocumentError(DocumentError):
    """The document needs a password to open."""

    def __init__(self, label: str) -> None:
        super().__init__(
            f"{label} is password-protected; save a copy without the password to index it."
        )


class DocumentTooLargeError(DocumentError):
    """Reading the document would cost more than a setting allows (pages, text, unpacked)."""

    def __init__(self, label: str, what: str, setting: str, limit: int) -> None:
        super().__init__(
            f"{label} {what}; {setting} allows {limit:,}, raise it to index the document."
        )


class DocumentTimeoutError(DocumentError):
    """Reading the document took longer than `RAG_PARSE_TIMEOUT_SEC`."""

    def __init__(self, label: str, seconds: float) -> None:
        super().__init__(
            f"{label} took longer than {seconds:g} s to read, so it was skipped; raise "
            "RAG_PARSE_TIMEOUT_SEC for very large documents."
        )


class NoTextError(DocumentError):
    """The document opened but holds no text (a scanned PDF, an empty file)."""

    def __init__(self, label: str, hint: str) -> None:
        super().__init__(f"{label} has no text to index; {hint}.")
