"""PDF and Word (.docx) documents → text the structure-aware chunker reads.

PDF pages keep their numbers (a chunk's `page`), Word headings become the chunks'
heading path; reading either is bounded by `DocumentLimits` and fails with one
`DocumentError` sentence.
"""

from rag_app.documents.budget import DocumentLimits
from rag_app.documents.errors import DocumentError
from rag_app.documents.extract import (
    DOCUMENT_SUFFIXES,
    DOCUMENT_TYPES,
    DocumentKind,
    extract_document,
)

__all__ = [
    "DOCUMENT_SUFFIXES",
    "DOCUMENT_TYPES",
    "DocumentError",
    "DocumentKind",
    "DocumentLimits",
    "extract_document",
]
