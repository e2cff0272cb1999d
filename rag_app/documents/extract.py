"""One entry point for document files, from folders and from URLs: bytes → (title, text).

Which reader runs is decided by the file suffix (`.pdf`, `.docx`) or the HTTP
Content-Type, never by guessing from the bytes; a file that is not what its name says
fails in its reader with one sentence.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal
from urllib.parse import unquote, urlsplit

from rag_app.documents.budget import DocumentLimits
from rag_app.limits import MAX_TITLE_CHARS, shorten

DocumentKind = Literal["pdf", "docx"]
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
DOCUMENT_SUFFIXES: dict[str, DocumentKind] = {".pdf": "pdf", ".docx": "docx"}
DOCUMENT_TYPES: dict[str, DocumentKind] = {
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",  # still sent by some servers
    DOCX_TYPE: "docx",
}


def name_stem(name: str) -> str:
    """`/a/Report 2024.pdf` or `https://x/files/Report%202024.pdf` → `Report 2024`."""
    path = unquote(urlsplit(name).path) if "://" in name else name
    return PurePosixPath(path.replace("\\", "/")).stem or name


def extract_document(
    data: bytes, *, kind: DocumentKind, name: str, limits: DocumentLimits | None = None
) -> tuple[str, str]:
    """(title, text) of a PDF or DOCX; `name` (path or URL) is used in error messages and
    its stem is the title of last resort. Raises a `DocumentError` (one sentence).

    The readers (pypdf, python-docx) are imported here, on the first document: a
    process that never reads one (every search, most crawls) does not pay ~0.3 s for them.
    """
    if kind == "pdf":
        from rag_app.documents.pdf_text import read_pdf as read
    else:
        from rag_app.documents.docx_markdown import read_docx as read
    title, text = read(data, name, limits or DocumentLimits())
    return shorten(title or name_stem(name), MAX_TITLE_CHARS), text
