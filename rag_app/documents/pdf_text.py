"""PDF → (title, text) with pypdf, one page after another, each ended by a form feed.

The chunker reads the form feeds as page breaks and gives every chunk its `page`
(`rag_app.parsing.pages`). Cost is bounded three ways: the page count against
`RAG_MAX_PDF_PAGES` before any page is read; pypdf's own limits on every stream it
decodes (decompressed size, parsing work, page-tree size, form nesting); and the
`Budget` after every page (characters, seconds). pypdf never starts `jbig2dec` here
(images are not read). A PDF whose owner password only restricts printing opens as
pypdf opens it, with the empty password; one that needs a password to open is refused.
pypdf's repair warnings ("ignoring wrong pointing object", …) are dropped: a damaged
file that still yields text is indexed, one that does not gets one sentence.
"""

from __future__ import annotations

import logging
from io import BytesIO

from pypdf import PageObject, PdfReader, apply_configuration
from pypdf.errors import FileNotDecryptedError

from rag_app.documents.budget import Budget, DocumentLimits
from rag_app.documents.errors import (
    DocumentError,
    DocumentTooLargeError,
    EncryptedDocumentError,
    NoTextError,
    UnreadableDocumentError,
)
from rag_app.parsing.pages import PAGE_BREAK

logging.getLogger("pypdf").setLevel(logging.ERROR)
log = logging.getLogger(__name__)

_HINT = "it may be damaged, or not a PDF"
# Control characters (form feeds included: they mark our page breaks) become spaces.
_CONTROLS = {code: " " for code in range(32) if chr(code) not in "\t\n"} | {0x7F: " "}


def page_text(raw: str) -> str:
    """One page's extracted text, control characters and trailing blanks removed."""
    lines = raw.replace("\r\n", "\n").replace("\r", "\n").translate(_CONTROLS).split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")


def _open(data: bytes, label: str) -> PdfReader:
    reader = PdfReader(BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise EncryptedDocumentError(label)
    return reader


def _read_page(page: PageObject, number: int, label: str) -> str:
    """A page's text; a page pypdf cannot read is logged and left empty (its neighbours
    are still worth indexing)."""
    try:
        return page_text(page.extract_text())
    except Exception as err:
        log.warning(
            "%s: page %d could not be read (%s); the others are indexed", label, number, err
        )
        return ""


def _metadata_title(reader: PdfReader) -> str:
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # a damaged info dictionary only costs the title
        return ""
    return " ".join(str(title).split()) if title else ""


def read_pdf(data: bytes, name: str, limits: DocumentLimits) -> tuple[str, str]:
    """(title, text) of a PDF: metadata title, else first line; every page ends with a
    form feed (as `pdftotext` writes them), so even a one-page PDF has page numbers.

    The title is '' when the PDF names none and has no text line; the caller falls back
    to the file name."""
    label = f"The PDF {name}"
    budget = Budget(limits, label)
    try:
        with apply_configuration(jbig2dec_binary=None):
            reader = _open(data, label)
            count = len(reader.pages)
            if count > limits.max_pdf_pages:
                raise DocumentTooLargeError(
                    label, f"has {count:,} pages", "RAG_MAX_PDF_PAGES", limits.max_pdf_pages
                )
            text = "".join(
                budget.spend(_read_page(page, number, label)) + PAGE_BREAK
                for number, page in enumerate(reader.pages, start=1)
            )
            title = _metadata_title(reader)
    except DocumentError:
        raise
    except FileNotDecryptedError:
        raise EncryptedDocumentError(label) from None
    except Exception as err:  # pypdf on hostile bytes may raise anything; say what it was
        raise UnreadableDocumentError(label, str(err) or type(err).__name__, _HINT) from None
    if not text.strip():
        raise NoTextError(label, "its pages may be scanned images, and OCR is not supported")
    return title or _first_line(text), text
