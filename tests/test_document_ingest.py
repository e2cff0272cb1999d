"""PDF and Word files through the knowledge base: from a folder and from URLs, searchable
with their page numbers and headings; hostile files fail alone, each with its reason."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from mcp_server.schemas import SearchOutput
from rag_app.config import RAGSettings
from rag_app.documents import pdf_text
from rag_app.documents.errors import DocumentError
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.document_files import docx_bytes, encrypted_pdf, pdf_bytes, pdf_with_page_count

PDF_PAGES = [
    ["Travel notes", "The weather in Rimuldar was rainy all week."],
    ["Merchants in Cantlin sell the Magic Key for 53 gold pieces."],
    ["The road north of Garinham is guarded by wolves."],
]
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture
async def doc_kb(
    settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    local = settings.model_copy(
        update={
            "rag_allow_private_network": True,
            "rag_crawl_delay_sec": 0.0,
            "rag_max_docx_unzipped_bytes": 1024 * 1024,
        }
    )
    base = KnowledgeBase(local, embed_model=counting_embed)
    yield base
    await base.aclose()


def _zip_bomb() -> bytes:
    import zipfile
    from io import BytesIO

    out = BytesIO(docx_bytes())
    with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/media/bomb.bin", b"\0" * (2 * 1024 * 1024))
    return out.getvalue()


async def test_folder_of_documents_is_searchable_by_page_and_heading(
    doc_kb: KnowledgeBase, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "travel.pdf").write_bytes(pdf_bytes(PDF_PAGES, title="Travel Notes"))
    (folder / "guide.docx").write_bytes(docx_bytes())
    (folder / "notes.md").write_text("# Notes\n\nTantegel castle has a throne room.\n")
    hostile = {
        "bomb.pdf": pdf_with_page_count(5_000),
        "locked.pdf": encrypted_pdf([["secret"]], user_password="pw"),
        "random.pdf": bytes(range(256)) * 64,
        "zipbomb.docx": _zip_bomb(),
    }
    for name, data in hostile.items():
        (folder / name).write_bytes(data)

    summary = await doc_kb.index_dir(folder)
    assert summary.added == 3
    reasons = dict(summary.errors)
    assert sorted(Path(path).name for path in reasons) == sorted(hostile)
    for path, reason in reasons.items():
        kind = "Word document" if path.endswith(".docx") else "PDF"
        assert reason.startswith(f"The {kind} {path} ") and "\n" not in reason
    assert "has 5,000 pages; RAG_MAX_PDF_PAGES allows 1,000" in reasons[str(folder / "bomb.pdf")]
    assert "password-protected" in reasons[str(folder / "locked.pdf")]
    assert "could not be read" in reasons[str(folder / "random.pdf")]
    assert "would unpack to" in reasons[str(folder / "zipbomb.docx")]

    hit = (await doc_kb.retrieve("Magic Key price in Cantlin", n_results=1)).hits[0]
    assert hit.source_url == (folder / "travel.pdf").as_uri()
    assert hit.title == "Travel Notes" and hit.metadata["page"] == 2
    assert "53 gold pieces" in hit.text

    hit = (await doc_kb.retrieve("Dragonlord HP", n_results=1)).hits[0]
    assert hit.source_url == (folder / "guide.docx").as_uri()
    assert hit.title == "Dragon Quest Field Guide"
    assert hit.heading_path == "Monsters > Bosses" and hit.content_type == "table"
    assert hit.text == "Name: Dragonlord\nHP: 130, Area: Charlock"
    assert "page" not in hit.metadata

    again = await doc_kb.index_dir(folder)  # unchanged files are skipped, errors reported again
    assert again.unchanged == 3 and len(again.errors) == 4


async def test_documents_added_from_urls(doc_kb: KnowledgeBase, httpserver: HTTPServer) -> None:
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    httpserver.expect_request("/files/travel.pdf").respond_with_data(
        pdf_bytes(PDF_PAGES), content_type="application/pdf"
    )
    httpserver.expect_request("/files/Field Guide.docx").respond_with_data(
        docx_bytes(), content_type=DOCX
    )
    httpserver.expect_request("/files/broken.pdf").respond_with_data(
        b"%PDF-1.7 not really", content_type="application/pdf"
    )
    pdf_url = httpserver.url_for("/files/travel.pdf")
    added = await doc_kb.ingest_page(pdf_url)
    assert added.chunks == 3
    result = await doc_kb.retrieve("wolves on the northern road", n_results=1)
    hit = result.hits[0]
    assert hit.source_url == pdf_url and hit.page == 3
    assert hit.title == "Travel notes"  # no metadata title: its first line
    assert f"Source: {pdf_url}\nTravel notes · p. 3 · スコア" in result.context
    assert SearchOutput.of(result).hits[0].page == 3

    docx_url = httpserver.url_for("/files/Field%20Guide.docx")
    assert (await doc_kb.ingest_page(docx_url)).chunks > 0
    hit = (await doc_kb.retrieve("Golem HP", n_results=1)).hits[0]
    assert hit.source_url == docx_url and hit.heading_path == "Monsters > Bosses"
    assert hit.page is None

    broken = httpserver.url_for("/files/broken.pdf")
    with pytest.raises(DocumentError) as caught:
        await doc_kb.ingest_page(broken)
    assert str(caught.value).startswith(f"The PDF {broken} could not be read (")
    assert broken not in (await doc_kb.stats()).sources


async def test_reading_a_document_leaves_the_event_loop_free(
    doc_kb: KnowledgeBase, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 100-page PDF is read in a worker thread: the loop keeps ticking while it is read
    (ticks seen between the reader's start and end; how long a tick waits for the GIL
    depends on the machine's load, so no duration is asserted)."""
    line = "Page {} line {} about the kingdom of Alefgard."
    pages = [[line.format(n, i) for i in range(40)] for n in range(100)]
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    httpserver.expect_request("/big.pdf").respond_with_data(
        pdf_bytes(pages), content_type="application/pdf"
    )
    real_read = pdf_text.read_pdf
    reads: list[tuple[int, float, float]] = []

    def timed_read(data: bytes, name: str, limits: Any) -> tuple[str, str]:
        began = time.perf_counter()
        try:
            return real_read(data, name, limits)
        finally:
            reads.append((threading.get_ident(), began, time.perf_counter()))

    monkeypatch.setattr(pdf_text, "read_pdf", timed_read)
    crawler = doc_kb.crawler()
    ticks: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.002)
            ticks.append(time.perf_counter())

    task = asyncio.create_task(ticker())
    page = await crawler.crawl_page(httpserver.url_for("/big.pdf"))
    stop.set()
    await task
    assert page.text.count("\f") == 100
    ((thread, began, ended),) = reads
    assert thread != threading.get_ident()  # not on the event loop's thread
    assert any(began < tick < ended for tick in ticks), (began, ended, len(ticks))
