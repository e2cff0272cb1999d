"""Hostile files in an indexed folder: binary data under a text name, huge files, titles,
deep HTML and odd encodings each end in a bounded cost and a one-sentence outcome."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rag_app.crawl.exceptions import BinaryContentError
from rag_app.errors import CrawlError, RAGError
from rag_app.local_files import read_local_document

BINARIES = {
    "report.md": b"%PDF-1.7\n1 0 obj << /Type /Catalog >>",
    "archive.txt": b"PK\x03\x04\x14\x00\x08\x00",
    "photo.html": b"\xff\xd8\xff\xe0\x00\x10JFIF",
    "icon.htm": b"\x89PNG\r\n\x1a\n\x00\x00",
    "anim.markdown": b"GIF89a\x10\x00\x10\x00",
    "notes.txt": b"\x1f\x8b\x08\x00\x00\x00\x00\x00",
    "dump.md": b"# Title\n" + b"\x00\x01\x02" * 100,
    # random bytes with no NUL pass the sniff; decoded, they are mostly not text
    "noise.md": bytes(b for b in random.Random(5).randbytes(900) if b)[:600],
}


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_binary_content_under_a_text_name_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BINARIES[name])
    with pytest.raises(BinaryContentError) as caught:
        read_local_document(path)
    message = str(caught.value)
    assert message.startswith(f"The file {path} has a text file name but holds ")
    assert message.endswith(
        "only HTML, Markdown and plain text files are read as text (PDF and Word files "
        "need their .pdf or .docx name)."
    )
    assert "\n" not in message and isinstance(caught.value, CrawlError)


def test_too_large_file_is_refused_before_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_bytes(b"a" * 2_000)
    with pytest.raises(RAGError, match=r"larger than the 1,000-byte limit"):
        read_local_document(path, max_bytes=1_000)
    assert read_local_document(path, max_bytes=2_000)[1] == "a" * 2_000


def test_utf16_text_with_a_bom_is_read(tmp_path: Path) -> None:
    path = tmp_path / "wide.txt"
    path.write_bytes("# 題名\n本文".encode("utf-16"))
    assert read_local_document(path) == ("題名", "# 題名\n本文")


def test_shift_jis_text_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "sjis.md"
    path.write_bytes("# りゅうおう\n竜王は最後のボスである。".encode("cp932"))
    assert read_local_document(path) == ("りゅうおう", "# りゅうおう\n竜王は最後のボスである。")


def test_huge_titles_are_capped(tmp_path: Path) -> None:
    html = tmp_path / "page.html"
    html.write_text(f"<title>{'題' * 100_000}</title><p>本文</p>", encoding="utf-8")
    markdown = tmp_path / "page.md"
    markdown.write_text(f"# {'x' * 100_000}\n本文", encoding="utf-8")
    assert read_local_document(html) == ("題" * 199 + "…", "本文")
    assert read_local_document(markdown)[0] == "x" * 199 + "…"


def test_deeply_nested_html_file(tmp_path: Path) -> None:
    path = tmp_path / "deep.html"
    path.write_text("<div>" * 5_000 + "奥" + "</div>" * 5_000, encoding="utf-8")
    assert read_local_document(path) == ("deep", "奥")
