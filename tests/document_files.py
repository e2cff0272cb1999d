"""Real PDF and Word files built in memory for tests (pypdf and python-docx write them)."""

from __future__ import annotations

import zipfile
from io import BytesIO

import docx
from pypdf import PdfWriter
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    NameObject,
    NumberObject,
)


def _pdf_string(line: str) -> str:
    return "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def _writer(pages: list[list[str]], title: str | None = None) -> PdfWriter:
    """A writer holding one page per item, each line of it drawn in Helvetica."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        ops = ["BT /F1 12 Tf 72 720 Td 14 TL", *(f"{_pdf_string(x)} Tj T*" for x in lines), "ET"]
        stream = DecodedStreamObject()
        stream.set_data("\n".join(ops).encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
        )
    if title is not None:
        writer.add_metadata({"/Title": title})
    return writer


def _bytes(writer: PdfWriter) -> bytes:
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_bytes(pages: list[list[str]], title: str | None = None) -> bytes:
    """A PDF with one page per item of `pages`, each a list of text lines."""
    return _bytes(_writer(pages, title))


def encrypted_pdf(pages: list[list[str]], user_password: str) -> bytes:
    """The same PDF encrypted (RC4, which pypdf reads without extra packages)."""
    writer = _writer(pages)
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    return _bytes(writer)


def pdf_with_page_count(count: int) -> bytes:
    """A tiny PDF whose page tree lists one page `count` times (a page-count bomb)."""
    writer = _writer([["the only real page"]])
    pages = writer._root_object["/Pages"]
    kid = pages["/Kids"][0]
    pages[NameObject("/Kids")] = ArrayObject([kid] * count)
    pages[NameObject("/Count")] = NumberObject(count)
    return _bytes(writer)


def docx_bytes(title: str = "") -> bytes:
    """A Word document with a Title, nested headings, prose, a list and a table."""
    document = docx.Document()
    if title:
        document.core_properties.title = title
    document.add_heading("Dragon Quest Field Guide", 0)
    document.add_heading("Monsters", 1)
    document.add_paragraph("Slimes are the weakest monsters and appear near the castle.")
    document.add_heading("Bosses", 2)
    document.add_paragraph("The Dragonlord waits at the end of the journey in Charlock.")
    document.add_paragraph("Bring a Silver Harp", style="List Bullet")
    document.add_paragraph("Bring Erdrick's Token", style="List Bullet")
    table = document.add_table(rows=3, cols=3)
    for row, values in zip(
        table.rows, [("Name", "HP", "Area"), ("Dragonlord", "130", "Charlock"),
                     ("Golem", "70", "Mercado")], strict=True
    ):  # fmt: skip
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_heading("Spells", 1)
    document.add_paragraph("Heal restores a little health.")
    out = BytesIO()
    document.save(out)
    return out.getvalue()


def zip_with_member(name: str, size: int, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A ZIP archive whose one member unpacks to `size` zero bytes (a zip bomb in small)."""
    out = BytesIO()
    with zipfile.ZipFile(out, "w", compression=method) as archive:
        archive.writestr(name, b"\0" * size)
    return out.getvalue()


_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Types xmlns="http://schemas.'
    'openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="'
    'application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" '
    'ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="'
    'application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><Relationships xmlns="http://'
    'schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="'
    'http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="word/document.xml"/></Relationships>'
)


def docx_with_body(body: str) -> bytes:
    """A minimal .docx whose document body is `body` (WordprocessingML, `w:` prefix)."""
    ns = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    document = f'<?xml version="1.0" encoding="UTF-8"?><w:document {ns}><w:body>{body}</w:body></w:document>'  # noqa: E501
    out = BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES)
        z.writestr("_rels/.rels", _RELS)
        z.writestr("word/document.xml", document)
    return out.getvalue()


def docx_cell(text: str, span: int | None = None) -> str:
    pr = f'<w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr>' if span else ""
    return f"<w:tc>{pr}<w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:tc>"
