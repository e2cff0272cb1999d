"""Local folder ingestion: which files count and how each is read into (title, text).

A file is refused with one sentence when it is too large (`MAX_FILE_BYTES`) or when its
bytes are binary although its name says text (a PDF renamed `.md`, an image saved as
`.html`), so no folder can make ingestion read gigabytes or chunk binary noise. PDF and
Word (.docx) files go through `rag_app.documents`, within its `DocumentLimits`.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from rag_app.crawl.charset import binary_kind, decode_body, garbled_kind
from rag_app.crawl.exceptions import BinaryContentError
from rag_app.documents import DOCUMENT_SUFFIXES, DocumentLimits, extract_document
from rag_app.errors import RAGError

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".html", ".htm", ".txt"})
SUFFIXES = TEXT_SUFFIXES | frozenset(DOCUMENT_SUFFIXES)
MAX_FILE_BYTES = 20 * 1024 * 1024


@dataclass
class FolderScan:
    """What a folder holds for indexing, and what could not be looked at."""

    files: list[Path] = field(default_factory=list)
    """Indexable files, sorted."""
    unreadable: dict[Path, str] = field(default_factory=dict)
    """Folders (or entries) that could not be looked at, with why: what was stored from
    them is kept."""
    refused: dict[Path, str] = field(default_factory=dict)
    """Files not read on purpose, with why (a link to a file outside the folder or to a
    hidden one): listed as skipped, not as failures; a copy stored before is removed."""


def scan_dir(root: Path) -> FolderScan:
    """Indexable files under `root` (resolved), hidden files and folders skipped. Walked
    without recursion, so no depth fails the walk; a folder that cannot be listed (no
    permission, a path too long) is reported, not taken for empty — its stored files
    would be pruned. Links to folders are not followed; a link to a file is read only
    when the file lies inside `root` (a `notes.txt` linking to a key file elsewhere would
    otherwise be served to an LLM)."""
    scan = FolderScan()
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                found = list(entries)
        except OSError as err:
            scan.unreadable[folder] = err.strerror or type(err).__name__
            continue
        for entry in found:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                    continue
                if path.suffix.lower() not in SUFFIXES or not entry.is_file():
                    continue  # not indexable, a link to no file or in a loop, a pipe
                if entry.is_symlink():
                    target = path.resolve()
                    if not target.is_relative_to(root):
                        scan.refused[path] = "it is a link to a file outside the folder"
                        continue
                    if any(p.startswith(".") for p in target.relative_to(root).parts):
                        scan.refused[path] = "it is a link to a hidden file"
                        continue
            except (OSError, RuntimeError) as err:  # RuntimeError: a loop of links
                looped = isinstance(err, RuntimeError) or err.errno == errno.ELOOP
                if looped and entry.is_symlink():
                    continue  # a loop of links holds nothing to read
                scan.unreadable[path] = getattr(err, "strerror", None) or str(err)
                continue
            scan.files.append(path)
    scan.files.sort()
    return scan


def read_bytes_limited(
    path: Path, max_bytes: int = MAX_FILE_BYTES, within: Path | None = None
) -> bytes:
    """The file's bytes, or a one-sentence `RAGError` when it is larger than `max_bytes`
    (or, with `within`, when the file opened is not inside that folder)."""
    with path.open("rb") as file:
        if within is not None:
            _check_inside(file.fileno(), path, within)
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise RAGError(
            f"The file {path} is larger than the {max_bytes:,}-byte limit for one document; "
            "split it into smaller files."
        )
    return raw


def _check_inside(fd: int, path: Path, folder: Path) -> None:
    """Refuse the opened file unless it lies inside `folder`: the folder's scan checks
    links, but a file swapped for a link to a file elsewhere after the scan was read
    through it and served. The file opened must be the one `path` resolves to inside the
    folder (same device and inode), so a swap between the open and this check is caught
    too."""
    real = path.resolve()
    if not real.is_relative_to(folder):
        raise RAGError(
            f"{path} is now a link to a file outside the folder ({real}); it was not read."
        )
    opened = os.fstat(fd)
    try:
        named = os.stat(real)
    except OSError:
        named = None
    if named is None or (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino):
        raise RAGError(f"{path} changed while it was being read; run the index again.")


def read_local_document(
    path: Path,
    max_bytes: int = MAX_FILE_BYTES,
    *,
    limits: DocumentLimits | None = None,
    within: Path | None = None,
) -> tuple[str, str]:
    """(title, text) of a file; HTML goes through the same extraction as crawled pages,
    PDF and DOCX through their readers. With `within`, only a file inside that folder is
    read (`_check_inside`)."""
    from rag_app.crawl.html_text import cap_title, html_to_text, markdown_title  # HTML parser

    raw = read_bytes_limited(path, max_bytes, within)
    document = DOCUMENT_SUFFIXES.get(path.suffix.lower())
    if document is not None:
        return extract_document(raw, kind=document, name=str(path), limits=limits)
    kind = binary_kind(raw)
    if kind is not None:
        raise BinaryContentError.for_file(str(path), kind)
    is_html = path.suffix.lower() in {".html", ".htm"}
    text, _codec = decode_body(raw, None, is_html=is_html)  # UTF-8 as before; BOM, a guess
    garbled = garbled_kind(text)
    if garbled is not None:
        raise BinaryContentError.for_file(str(path), garbled)
    if is_html:
        page = html_to_text(text)
        return page.title or cap_title(path.stem), page.text
    return markdown_title(text) or cap_title(path.stem), text
