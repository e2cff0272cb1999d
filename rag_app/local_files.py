"""Local folder ingestion: which files count and how each is read into (title, text).

A file is refused with one sentence when it is too large (`MAX_FILE_BYTES`) or when its
bytes are binary although its name says text (a PDF renamed `.md`, an image saved as
`.html`), so no folder can make ingestion read gigabytes or chunk binary noise. PDF and
Word (.docx) files go through `rag_app.documents`, within its `DocumentLimits`.
"""

from __future__ import annotations

from pathlib import Path

from rag_app.crawl.charset import binary_kind, decode_body
from rag_app.crawl.exceptions import BinaryContentError
from rag_app.documents import DOCUMENT_SUFFIXES, DocumentLimits, extract_document
from rag_app.errors import RAGError

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".html", ".htm", ".txt"})
SUFFIXES = TEXT_SUFFIXES | frozenset(DOCUMENT_SUFFIXES)
MAX_FILE_BYTES = 20 * 1024 * 1024


def scan_dir(root: Path) -> list[Path]:
    """Indexable files under `root`, sorted, hidden files and folders skipped."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix.lower() in SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def read_bytes_limited(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes, or a one-sentence `RAGError` when it is larger than `max_bytes`."""
    with path.open("rb") as file:
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise RAGError(
            f"The file {path} is larger than the {max_bytes:,}-byte limit for one document; "
            "split it into smaller files."
        )
    return raw


def read_local_document(
    path: Path, max_bytes: int = MAX_FILE_BYTES, *, limits: DocumentLimits | None = None
) -> tuple[str, str]:
    """(title, text) of a file; HTML goes through the same extraction as crawled pages,
    PDF and DOCX through their readers."""
    from rag_app.crawl.html_text import cap_title, html_to_text, markdown_title  # HTML parser

    raw = read_bytes_limited(path, max_bytes)
    document = DOCUMENT_SUFFIXES.get(path.suffix.lower())
    if document is not None:
        return extract_document(raw, kind=document, name=str(path), limits=limits)
    kind = binary_kind(raw)
    if kind is not None:
        raise BinaryContentError.for_file(str(path), kind)
    if path.suffix.lower() in {".html", ".htm"}:
        html, _codec = decode_body(raw, None, is_html=True)
        page = html_to_text(html)
        return page.title or cap_title(path.stem), page.text
    text, _codec = decode_body(raw, None, is_html=False)  # UTF-8 as before; BOM, then a guess
    return markdown_title(text) or cap_title(path.stem), text
