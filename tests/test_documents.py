"""PDF and Word files → (title, text) and chunks: structure kept, hostile files bounded."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rag_app.documents import DocumentLimits, extract_document
from rag_app.documents.errors import (
    DocumentTimeoutError,
    DocumentTooLargeError,
    EncryptedDocumentError,
    NoTextError,
    UnreadableDocumentError,
)
from rag_app.parsing.router import structured_chunks
from tests.document_files import (
    docx_bytes,
    docx_cell,
    docx_with_body,
    encrypted_pdf,
    pdf_bytes,
    pdf_with_page_count,
    zip_with_member,
)

PAGES = [
    ["Chapter one", "Slimes live near the castle."],
    [],  # a blank page keeps its number
    ["The Dragonlord waits in Charlock."],
]


def one_line(err: BaseException, start: str) -> str:
    message = str(err)
    assert message.startswith(start) and message.endswith(".") and "\n" not in message
    return message


def test_pdf_pages_become_page_numbers_on_chunks() -> None:
    title, text = extract_document(pdf_bytes(PAGES, title="Field Guide"), kind="pdf", name="g.pdf")
    assert title == "Field Guide"
    assert text.split("\f") == [
        "Chapter one\nSlimes live near the castle.",
        "",
        "The Dragonlord waits in Charlock.",
        "",
    ]
    chunks = structured_chunks(text)
    assert [(c.text, c.extra["page"]) for c in chunks] == [
        ("Chapter one\nSlimes live near the castle.", 1),
        ("The Dragonlord waits in Charlock.", 3),
    ]


def test_pdf_title_is_its_first_line_then_its_file_name() -> None:
    assert extract_document(pdf_bytes(PAGES), kind="pdf", name="/d/g.pdf")[0] == "Chapter one"
    url = "https://example.com/files/Field%20Guide.pdf"
    title, text = extract_document(pdf_bytes([[" "], ["x"]]), kind="pdf", name=url)
    assert (title, text) == ("x", "\fx\f")
    assert extract_document(pdf_bytes([["y"]], title="  "), kind="pdf", name=url)[0] == "y"


def test_one_page_pdf_still_has_its_page_number() -> None:
    _title, text = extract_document(pdf_bytes([["Only page"]]), kind="pdf", name="a.pdf")
    assert [c.extra["page"] for c in structured_chunks(text)] == [1]


def test_pdf_without_text_says_so() -> None:
    with pytest.raises(NoTextError) as caught:
        extract_document(pdf_bytes([[], []]), kind="pdf", name="scan.pdf")
    assert "OCR" in one_line(caught.value, "The PDF scan.pdf has no text to index;")


def test_docx_headings_lists_and_tables_become_markdown() -> None:
    title, text = extract_document(docx_bytes(), kind="docx", name="/d/guide.docx")
    assert title == "Dragon Quest Field Guide"  # the Title paragraph, not repeated in the text
    assert text == (
        "# Monsters\n\nSlimes are the weakest monsters and appear near the castle.\n\n"
        "## Bosses\n\nThe Dragonlord waits at the end of the journey in Charlock.\n\n"
        "- Bring a Silver Harp\n- Bring Erdrick's Token\n\n"
        "| Name | HP | Area |\n| --- | --- | --- |\n| Dragonlord | 130 | Charlock |\n"
        "| Golem | 70 | Mercado |\n\n# Spells\n\nHeal restores a little health."
    )
    chunks = structured_chunks(text)
    row = next(c for c in chunks if c.extra.get("entity_name") == "Dragonlord")
    assert row.text == "Name: Dragonlord\nHP: 130, Area: Charlock"
    assert row.heading_path == "Monsters > Bosses"
    assert {c.heading_path for c in chunks} == {"Monsters", "Monsters > Bosses", "Spells"}


def test_docx_core_title_wins_and_the_title_paragraph_stays_text() -> None:
    title, text = extract_document(docx_bytes(title="Guide v2"), kind="docx", name="g.docx")
    assert title == "Guide v2"
    assert text.startswith("Dragon Quest Field Guide\n\n# Monsters")


# --- hostile files: each is one sentence, at a bounded cost ------------------------------


def test_page_count_beyond_the_cap_is_refused_before_reading_pages() -> None:
    data = pdf_with_page_count(5_000)
    assert len(data) < 50_000
    with pytest.raises(DocumentTooLargeError) as caught:
        extract_document(data, kind="pdf", name="bomb.pdf")
    assert one_line(caught.value, "The PDF bomb.pdf has 5,000 pages;") == (
        "The PDF bomb.pdf has 5,000 pages; RAG_MAX_PDF_PAGES allows 1,000, raise it to index "
        "the document."
    )
    limits = DocumentLimits(max_pdf_pages=5_000)
    assert extract_document(data, kind="pdf", name="b.pdf", limits=limits)[1].count("\f") == 5_000


def test_password_protected_pdf_is_refused() -> None:
    data = encrypted_pdf([["secret plans"]], user_password="s3cret")
    with pytest.raises(EncryptedDocumentError) as caught:
        extract_document(data, kind="pdf", name="locked.pdf")
    one_line(caught.value, "The PDF locked.pdf is password-protected;")


def test_pdf_with_only_an_owner_password_is_read() -> None:
    data = encrypted_pdf([["printing is restricted"]], user_password="")
    assert extract_document(data, kind="pdf", name="r.pdf")[1] == "printing is restricted\f"


@pytest.mark.parametrize(
    "data",
    [b"", b"%PDF-1.7\n" + bytes(range(256)) * 40, bytes(range(256)) * 40, b"%PDF-1.4\n1 0 obj <<"],
)
def test_broken_pdf_bytes_are_one_sentence(data: bytes) -> None:
    with pytest.raises(UnreadableDocumentError) as caught:
        extract_document(data, kind="pdf", name="random.pdf")
    message = one_line(caught.value, "The PDF random.pdf could not be read (")
    assert message.endswith("; it may be damaged, or not a PDF.")


def test_repaired_pdf_is_read_without_warnings_on_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    data = pdf_bytes([["still readable"]])
    broken = re.sub(rb"startxref\s+\d+", b"startxref\n999999", data)  # wrong xref offset
    assert extract_document(broken, kind="pdf", name="x.pdf")[1] == "still readable\f"
    assert capfd.readouterr().err == ""


def test_text_beyond_the_character_cap_is_refused() -> None:
    pages = [[f"line {n} of page {p}" for n in range(40)] for p in range(5)]
    with pytest.raises(DocumentTooLargeError) as caught:
        extract_document(
            pdf_bytes(pages), kind="pdf", name="long.pdf", limits=DocumentLimits(max_chars=1000)
        )
    one_line(caught.value, "The PDF long.pdf has over 1,000 characters of text;")
    with pytest.raises(DocumentTooLargeError, match="RAG_MAX_DOCUMENT_CHARS allows 100,"):
        extract_document(
            docx_bytes(), kind="docx", name="g.docx", limits=DocumentLimits(max_chars=100)
        )


def test_reading_stops_when_the_time_is_up() -> None:
    with pytest.raises(DocumentTimeoutError) as caught:
        extract_document(
            pdf_bytes(PAGES), kind="pdf", name="slow.pdf", limits=DocumentLimits(timeout_sec=0)
        )
    one_line(caught.value, "The PDF slow.pdf took longer than 0 s to read")


def _with_member(docx: bytes, name: str, size: int, method: int) -> bytes:
    """`docx` with one more member of `size` zero bytes."""
    from io import BytesIO

    out = BytesIO(docx)
    with zipfile.ZipFile(out, "a", compression=method) as archive:
        archive.writestr(name, b"\0" * size)
    return out.getvalue()


def test_docx_zip_bomb_is_refused_from_its_directory() -> None:
    mib = 1024 * 1024
    data = _with_member(docx_bytes(), "word/media/bomb.bin", 3 * mib, zipfile.ZIP_DEFLATED)
    assert len(data) < 100_000
    limits = DocumentLimits(max_unzipped_bytes=2 * mib)
    with pytest.raises(DocumentTooLargeError) as caught:
        extract_document(data, kind="docx", name="bomb.docx", limits=limits)
    message = one_line(caught.value, "The Word document bomb.docx would unpack to 3,")
    assert "RAG_MAX_DOCX_UNZIPPED_BYTES allows 2,097,152" in message


def test_docx_with_a_bzip2_member_is_refused() -> None:
    data = _with_member(docx_bytes(), "word/media/x.bin", 10, zipfile.ZIP_BZIP2)
    with pytest.raises(UnreadableDocumentError, match="compression method 12, which Word never"):
        extract_document(data, kind="docx", name="odd.docx")


def test_docx_member_that_lies_about_its_size_stops_at_the_declared_size() -> None:
    data = bytearray(zip_with_member("[Content_Types].xml", 2 * 1024 * 1024))
    central = data.index(b"PK\x01\x02")
    data[central + 24 : central + 28] = struct.pack("<I", 100)  # declares 100 bytes
    with pytest.raises(UnreadableDocumentError) as caught:
        extract_document(bytes(data), kind="docx", name="liar.docx")
    one_line(caught.value, "The Word document liar.docx could not be read (")


@pytest.mark.parametrize("data", [b"", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600])
def test_not_a_docx_is_one_sentence(data: bytes) -> None:
    with pytest.raises(UnreadableDocumentError) as caught:
        extract_document(data, kind="docx", name="old.docx")
    assert one_line(caught.value, "The Word document old.docx could not be read (").endswith(
        "; it may be damaged, or an old .doc file (save it as .docx)."
    )


def test_a_zip_that_is_not_word_is_one_sentence() -> None:
    with pytest.raises(UnreadableDocumentError):
        extract_document(zip_with_member("hello.txt", 5), kind="docx", name="a.docx")


def test_docx_content_controls_merges_and_tracked_changes() -> None:
    from io import BytesIO

    import docx
    from docx.oxml import parse_xml
    from docx.oxml.ns import nsdecls

    document = docx.Document()
    document.add_heading("Stock", 1)
    table = document.add_table(rows=3, cols=2)
    for (row, col), value in {(0, 0): "Town", (0, 1): "Item", (1, 0): "Cantlin"}.items():
        table.cell(row, col).text = value
    table.cell(1, 1).text = "Magic Key"
    table.cell(2, 1).text = "Silver Shield"
    table.cell(1, 0).merge(table.cell(2, 0))  # "Cantlin" spans two rows
    body = document.element.body
    body.insert(
        len(body) - 1,  # before the section properties
        parse_xml(
            f"<w:sdt {nsdecls('w')}><w:sdtContent><w:p><w:r><w:t>Inside a control</w:t></w:r>"
            "<w:del><w:r><w:delText>deleted words</w:delText></w:r></w:del>"
            "<w:ins><w:r><w:t xml:space='preserve'> and inserted ones</w:t></w:r></w:ins>"
            "</w:p></w:sdtContent></w:sdt>"
        ),
    )
    out = BytesIO()
    document.save(out)
    _title, text = extract_document(out.getvalue(), kind="docx", name="s.docx")
    assert text == (
        "# Stock\n\n| Town | Item |\n| --- | --- |\n| Cantlin | Magic Key |\n"
        "| Cantlin | Silver Shield |\n\nInside a control and inserted ones"
    )


_WIDE_DOCX = """
import resource, sys
from rag_app.documents import extract_document
from rag_app.documents.errors import DocumentError
from tests.document_files import docx_cell, docx_with_body
resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))
header = "<w:tr>" + docx_cell("h", 64) * 4000 + "</w:tr>"
body = "<w:tbl>" + header + ("<w:tr>" + docx_cell("x") + "</w:tr>") * 4000 + "</w:tbl>"
data = docx_with_body(body)
print(len(data))
try:
    extract_document(data, kind="docx", name="wide.docx")
except DocumentError as err:
    print(err)
"""


def test_a_tiny_docx_whose_header_spans_a_million_columns_is_refused_in_bounded_memory() -> None:
    """4,000 header cells spanning 64 columns each over 4,000 one-cell rows: every row was
    padded to 256,000 cells (a 3 KB file needed over 4 GB). Now rows keep their own cells
    and the text they make is counted as they are read: one sentence, within 1.5 GB of
    address space (the interpreter and its libraries take most of that)."""
    done = subprocess.run(
        [sys.executable, "-c", _WIDE_DOCX],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    size, message = done.stdout.splitlines()[-2:]
    assert int(size) < 20_000
    assert "wide.docx has over 2,000,000 characters of text" in message


def test_a_long_merged_cell_is_written_once() -> None:
    body = (
        "<w:tbl><w:tr>" + docx_cell("name") + docx_cell("note") + docx_cell("more") + "</w:tr>"
        "<w:tr>" + docx_cell("a") + docx_cell("long " * 100, 2) + "</w:tr>"
        "<w:tr>" + docx_cell("b") + docx_cell("short", 2) + "</w:tr></w:tbl>"
    )
    _title, text = extract_document(docx_with_body(body), kind="docx", name="m.docx")
    assert text.count("long") == 100
    assert "| b | short | short |" in text


def test_the_readers_load_only_when_a_document_is_read() -> None:
    """A process that never reads a document (every search) does not import pypdf or
    python-docx (~0.3 s of start-up)."""
    code = (
        "import sys, rag_app.knowledge, rag_app.service.server\n"
        "print(sorted(m for m in ('pypdf', 'docx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
