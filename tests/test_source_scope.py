"""Source filters: a site, a URL prefix or a folder names exactly the sources within it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_app.errors import RAGError
from rag_app.source_scope import MAX_SCOPED_SOURCES, matches, resolve


def test_site_prefix_and_folder(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    stored = [
        "https://docs.example.com/guide/a.html",
        "https://docs.example.com/api/b.html",
        "https://blog.example.com/post",
        "https://docs.example.com.evil.test/x",
        (notes / "a.md").as_uri(),
        (tmp_path / "notes-old" / "b.md").as_uri(),
    ]
    assert resolve("docs.example.com", stored) == stored[:2][::-1]
    assert resolve("example.com", stored) == sorted(stored[:3])  # subdomains belong to the site
    assert resolve("https://docs.example.com/guide/", stored) == [stored[0]]
    assert resolve(str(notes), stored) == [stored[4]]  # not notes-old
    assert resolve(notes.as_uri(), stored) == [stored[4]]
    assert not matches("docs.example.com", "https://docs.example.com.evil.test/x")


def test_one_sentence_errors() -> None:
    with pytest.raises(RAGError, match=r"No stored source matches 'nothing\.test'"):
        resolve("nothing.test", ["https://a.test/"])
    with pytest.raises(RAGError, match="empty"):
        resolve("  ", ["https://a.test/"])
    with pytest.raises(RAGError, match="longer than"):
        resolve("x" * 5000, ["https://a.test/"])
    many = [f"https://big.test/{i}" for i in range(MAX_SCOPED_SOURCES + 1)]
    with pytest.raises(RAGError, match="narrower"):
        resolve("big.test", many)
