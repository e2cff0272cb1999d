"""Local folder ingestion: which files count and how each is read into (title, text)."""

from __future__ import annotations

from pathlib import Path

from rag_app.crawl.charset import decode_body
from rag_app.crawl.html_text import html_to_text, markdown_title

SUFFIXES = frozenset({".md", ".markdown", ".html", ".htm", ".txt"})


def scan_dir(root: Path) -> list[Path]:
    """Indexable files under `root`, sorted, hidden files and folders skipped."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix.lower() in SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def read_local_document(path: Path) -> tuple[str, str]:
    """(title, text) of a file; HTML goes through the same extraction as crawled pages."""
    raw = path.read_bytes()
    if path.suffix.lower() in {".html", ".htm"}:
        html, _codec = decode_body(raw, None, is_html=True)
        page = html_to_text(html)
        return page.title or path.stem, page.text
    text = raw.decode("utf-8", errors="replace")
    return markdown_title(text) or path.stem, text
