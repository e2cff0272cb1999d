"""Web ingestion through the KnowledgeBase and the CLI, against a real local site."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from rag_app.cli import main
from rag_app.config import RAGSettings
from rag_app.errors import CrawlError, UrlRefusedError
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding

PAGES = Path(__file__).parent / "fixtures" / "rag_test_pages"
SITE_PAGES = sorted(p.name for p in PAGES.glob("*.html") if p.name != "index.html")


def serve_site(server: HTTPServer, *, broken: str | None = None) -> None:
    server.expect_request("/robots.txt").respond_with_data("User-agent: *\nAllow: /\n")
    for page in PAGES.glob("*.html"):
        if page.name == broken:
            server.expect_request(f"/{page.name}").respond_with_data("boom", status=500)
            continue
        body = page.read_bytes()
        etag = f'"{abs(hash(body))}"'

        def handler(request: Request, body: bytes = body, etag: str = etag) -> Response:
            if request.headers.get("If-None-Match") == etag:
                return Response(status=304, headers={"ETag": etag})
            return Response(body, content_type="text/html; charset=utf-8", headers={"ETag": etag})

        server.expect_request(f"/{page.name}").respond_with_handler(handler)


@pytest.fixture
def local_settings(settings: RAGSettings) -> RAGSettings:
    return settings.model_copy(
        update={"rag_allow_private_network": True, "rag_crawl_delay_sec": 0.0}
    )


@pytest.fixture
async def kb(
    local_settings: RAGSettings, counting_embed: CountingEmbedding
) -> AsyncIterator[KnowledgeBase]:
    """A knowledge base that may crawl loopback; closed after the test (its HTTP session)."""
    base = KnowledgeBase(local_settings, embed_model=counting_embed)
    yield base
    await base.aclose()


async def test_crawl_then_search_finds_table_row(
    httpserver: HTTPServer, kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    serve_site(httpserver)
    seen: list[tuple[int, int]] = []
    summary = await kb.ingest_from_index(
        httpserver.url_for("/index.html"), progress=lambda d, t: seen.append((d, t))
    )
    assert summary.errors == 0, summary.error_details
    assert summary.pages_crawled == len(SITE_PAGES)
    assert summary.chunks_stored > 0
    assert seen[-1] == (len(SITE_PAGES), len(SITE_PAGES))
    # the character's own entry (a heading chunk) and the stats row both answer it;
    # the row must be among the default 3 results
    hits = (await kb.retrieve("りゅうおう")).hits
    assert len(hits) == 3 and all("りゅうおう" in h.text for h in hits)
    row = next(h for h in hits if h.text.startswith("名前: りゅうおう"))
    assert row.source_url == httpserver.url_for("/table_numeric.html")
    stats = await kb.stats()
    assert len(stats.sources) == len(SITE_PAGES)

    # a second crawl: ETag → 304, nothing re-embedded
    calls = counting_embed.texts
    again = await kb.ingest_from_index(httpserver.url_for("/index.html"))
    assert again.unchanged == len(SITE_PAGES) and again.errors == 0
    assert counting_embed.texts == calls


async def test_one_failing_page_never_fails_the_crawl(
    httpserver: HTTPServer, kb: KnowledgeBase
) -> None:
    serve_site(httpserver, broken="long_document.html")
    summary = await kb.ingest_from_index(httpserver.url_for("/index.html"))
    assert summary.errors == 1
    assert summary.pages_crawled == len(SITE_PAGES) - 1
    detail = summary.error_details[0]
    assert detail["url"].endswith("/long_document.html") and "HTTP 500" in detail["reason"]


async def test_pattern_filters_links(
    httpserver: HTTPServer, kb: KnowledgeBase, counting_embed: CountingEmbedding
) -> None:
    serve_site(httpserver)
    summary = await kb.ingest_from_index(httpserver.url_for("/index.html"), r"table_")
    assert summary.pages_crawled == 2


async def test_add_page_and_gone_page_pruned(httpserver: HTTPServer, kb: KnowledgeBase) -> None:
    page = (PAGES / "japanese_names.html").read_bytes()
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    served: list[int] = []

    def names(_: Request) -> Response:
        served.append(1)
        if len(served) == 1:
            return Response(page, content_type="text/html")
        return Response("gone", status=404)

    httpserver.expect_request("/names.html").respond_with_handler(names)
    url = httpserver.url_for("/names.html")
    added = await kb.ingest_page(url + "#section")
    assert added.chunks > 0 and added.source == url
    with pytest.raises(CrawlError, match="HTTP 404"):
        await kb.ingest_page(url)
    assert url in (await kb.stats()).sources  # reported, kept without --prune
    with pytest.raises(CrawlError, match="removed"):
        await kb.ingest_page(url, prune=True)
    assert url not in (await kb.stats()).sources


async def test_private_network_is_refused_by_default(
    httpserver: HTTPServer, settings: RAGSettings, counting_embed: CountingEmbedding
) -> None:
    serve_site(httpserver)
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    try:
        with pytest.raises(UrlRefusedError):
            await kb.ingest_page(httpserver.url_for("/table_numeric.html"))
    finally:
        await kb.aclose()
    assert len(httpserver.log) == 0


def test_cli_add_and_crawl(
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve_site(httpserver)
    monkeypatch.setenv("CHROMADB_PERSIST_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("BM25_PERSIST_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("RAG_ALLOW_PRIVATE_NETWORK", "true")
    monkeypatch.setenv("RAG_CRAWL_DELAY_SEC", "0")
    assert main(["add", httpserver.url_for("/table_numeric.html")]) == 0
    assert "ページを取り込みました" in capsys.readouterr().out
    assert main(["crawl", httpserver.url_for("/index.html"), "table_"]) == 0
    out = capsys.readouterr().out
    assert "完了: 2ページ / " in out and "エラー: 0件" in out
    httpserver.expect_request("/missing.html").respond_with_data("no", status=404)
    assert main(["add", httpserver.url_for("/missing.html")]) == 1
    err = capsys.readouterr().err
    assert "ページの取り込みに失敗しました" in err and "HTTP 404" in err
