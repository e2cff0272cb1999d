"""Whole-site crawls against a real static server on loopback: recursive scope, depth and
page limits, canonical URLs, sitemaps (index + gzip), refresh, background jobs."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import os
import time
from collections.abc import Iterator

import pytest

from rag_app import site_crawl
from rag_app.config import RAGSettings
from rag_app.crawl.scope import CrawlScope, page_key
from rag_app.crawl.sitemap import parse_sitemap
from rag_app.crawl_options import CrawlOptions
from rag_app.errors import CrawlError, RAGError
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.docs_site import IN_SCOPE
from tests.static_site import StaticSite, page


@pytest.fixture
def crawl_settings(settings: RAGSettings) -> RAGSettings:
    return settings.model_copy(
        update={"rag_allow_private_network": True, "rag_crawl_delay_sec": 0.0}
    )


@pytest.fixture
async def kb(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding
) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(crawl_settings, embed_model=counting_embed)
    await base.open()
    yield base
    await base.aclose()


def key_path(path: str) -> str:
    """A page's path in its one spelling (`/docs/` and `/docs/index.html` are one page)."""
    return page_key("http://h" + path).removeprefix("http://h")


def stored_paths(sources: list[str], site: StaticSite) -> set[str]:
    return {key_path(s.removeprefix(site.base)) for s in sources}


IN_SCOPE_KEYS = {key_path(p) for p in IN_SCOPE}


def page_requests(site: StaticSite) -> list[str]:
    return [p for p in site.paths() if p != "/robots.txt"]


# --- scope and keys (no server) -----------------------------------------------------------


def test_page_key_folds_the_spellings_of_one_page() -> None:
    same = [
        "http://h/docs/guide/",
        "http://h/docs/guide",
        "http://h/docs/guide/index.html",
        "HTTP://H:80/docs/./x/../guide/index.html#intro",
    ]
    assert {page_key(u) for u in same} == {"http://h/docs/guide"}
    assert page_key("http://h/docs/guide?v=2") != page_key("http://h/docs/guide")
    assert page_key("https://h/") != page_key("http://h:8080/")


def test_scope_is_the_start_directory_and_the_filters() -> None:
    scope = CrawlScope.build("http://h/docs/index.html", "", r"/_static/")
    assert scope.admits("http://h/docs/guide/a.html")
    assert scope.admits("https://h/docs/a.html")  # http↔https on default ports: same site
    assert not scope.admits("http://h/outside.html")
    assert not scope.admits("http://h/docsearch.html")
    assert not scope.admits("http://other/docs/a.html")
    assert not scope.admits("http://h/docs/_static/x.html")
    only = CrawlScope.build("http://h/docs/", "/guide/")
    assert only.admits("http://h/docs/guide/x") and not only.admits("http://h/docs/api/x")
    assert CrawlScope.build("http://h/docs/", whole_site=True).admits("http://h/outside.html")


def test_sitemap_parsing_is_bounded_and_safe() -> None:
    urlset = (
        b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<url><loc> http://h/a </loc></url><url><loc>http://h/b</loc></url><url></url></urlset>"
    )
    assert parse_sitemap(urlset, "s").pages == ["http://h/a", "http://h/b"]
    assert parse_sitemap(gzip.compress(urlset), "s").pages == ["http://h/a", "http://h/b"]
    capped = parse_sitemap(urlset, "s", max_urls=1)
    assert capped.pages == ["http://h/a"] and capped.truncated == 1
    index = b"<sitemapindex><sitemap><loc>http://h/s1.xml.gz</loc></sitemap></sitemapindex>"
    assert parse_sitemap(index, "s").sitemaps == ["http://h/s1.xml.gz"]
    assert parse_sitemap(b"http://h/a\nnot a url\nhttps://h/b\n", "s").pages == [
        "http://h/a",
        "https://h/b",
    ]
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;">]><urlset><url><loc>&lol2;</loc></url></urlset>'
    )
    with pytest.raises(CrawlError, match="not valid XML"):
        parse_sitemap(bomb, "s")
    with pytest.raises(CrawlError, match="inflates to more than"):
        parse_sitemap(gzip.compress(b" " * (51 * 1024 * 1024)), "s")
    with pytest.raises(CrawlError, match="not a sitemap"):
        parse_sitemap(b"<html><body>hi</body></html>", "s")


# --- crawls against the served site ---------------------------------------------------------


async def test_recursive_crawl_takes_every_page_in_scope_once(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    summary = await kb.ingest_from_index(
        site.url("/docs/"),
        options=CrawlOptions(max_depth=10, exclude="/_static/"),
    )
    stats = await kb.stats()
    assert stored_paths(stats.sources, site) == IN_SCOPE_KEYS, summary
    assert summary.pages_crawled == len(IN_SCOPE)
    # missing.html is the only failure; private.html is noindex, print.html names
    # functions.html as canonical, copy.html repeats functions.html's text
    assert [d["url"] for d in summary.error_details] == [site.url("/docs/missing.html")]
    assert summary.duplicates == 2 and summary.filtered >= 2, summary
    assert summary.out_of_scope >= 2  # ../outside.html and the external link
    fetched = page_requests(site)
    keys = [page_key(site.url(p)) for p in fetched]
    assert len(keys) == len(set(keys)), f"a page was fetched twice: {fetched}"
    assert not any(p.startswith(("/outside", "/docs/_static")) for p in fetched)


async def test_a_recrawl_spelled_otherwise_updates_the_stored_pages_in_place(
    kb: KnowledgeBase, site: StaticSite, counting_embed: CountingEmbedding
) -> None:
    options = CrawlOptions(max_depth=10, exclude="/_static/")
    await kb.ingest_from_index(site.url("/docs/"), options=options)
    before = sorted((await kb.stats()).sources)
    embedded = counting_embed.texts
    again = await kb.ingest_from_index(site.url("/docs/index.html"), options=options)
    assert sorted((await kb.stats()).sources) == before
    assert again.unchanged == len(IN_SCOPE) and counting_embed.texts == embedded, again


async def test_depth_and_page_limits(kb: KnowledgeBase, site: StaticSite) -> None:
    summary = await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(max_depth=2))
    stored = stored_paths((await kb.stats()).sources, site)
    assert "/docs/guide/usage.html" in stored  # depth 2
    assert "/docs/guide/deep/a.html" not in stored  # depth 3
    assert "/docs/guide" in stored  # `guide/` (depth 1) and `guide/index.html` are one
    assert summary.errors == 1  # missing.html

    site.requests.clear()
    capped = await kb.ingest_from_index(
        site.url("/docs/"), options=CrawlOptions(max_depth=10, max_pages=3)
    )
    assert len(page_requests(site)) == 3 and capped.over_cap > 0, capped


async def test_depth_one_is_the_index_crawl_of_the_specification(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    summary = await kb.ingest_from_index(site.url("/docs/index.html"))
    stored = stored_paths((await kb.stats()).sources, site)
    # the index page's same-site links, the index itself not stored, the folder not enforced
    assert "/outside.html" in stored and "/docs" not in stored
    assert "/docs/guide/usage.html" not in stored  # not linked from the index
    assert summary.errors == 1


def test_a_listed_url_longer_than_the_crawler_takes_is_counted_not_kept() -> None:
    long = "http://h/" + "p" * 3_000
    for body in (
        f"<urlset><url><loc>{long}</loc></url><url><loc>http://h/a</loc></url></urlset>",
        f"<sitemapindex><sitemap><loc>{long}</loc></sitemap></sitemapindex>",
        f"{long}\nhttp://h/a\n",
    ):
        entries = parse_sitemap(body.encode(), "http://h/s.xml")
        assert long not in entries.pages + entries.sitemaps
        assert (entries.too_long, entries.truncated) == (1, 0)  # not the page limit's


async def test_sitemap_crawl_gets_every_listed_page_in_scope(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    listed = sorted(IN_SCOPE | {"/outside.html"})
    urlset = "".join(f"<url><loc>{site.url(p)}</loc></url>" for p in listed)
    (site.root / "sitemap-docs.xml.gz").write_bytes(
        gzip.compress(f"<urlset>{urlset}</urlset>".encode())
    )
    (site.root / "sitemap.xml").write_text(
        f"<sitemapindex><sitemap><loc>{site.url('/sitemap-docs.xml.gz')}</loc></sitemap>"
        "</sitemapindex>"
    )
    (site.root / "robots.txt").write_text(f"User-agent: *\nSitemap: {site.url('/sitemap.xml')}\n")
    summary = await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))
    stored = stored_paths((await kb.stats()).sources, site)
    assert stored == IN_SCOPE_KEYS, summary
    assert summary.out_of_scope == 1 and summary.errors == 0
    assert "/docs/missing.html" not in page_requests(site)  # links are not followed at depth 1

    # copy.html repeats the stored functions.html: listed first, it is still not stored twice
    urlset = f"<url><loc>{site.url('/docs/api/copy.html')}</loc></url>" + urlset
    (site.root / "sitemap-docs.xml.gz").write_bytes(
        gzip.compress(f"<urlset>{urlset}</urlset>".encode())
    )
    again = await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))
    assert again.duplicates == 1 and again.unchanged == len(IN_SCOPE), again
    assert stored_paths((await kb.stats()).sources, site) == IN_SCOPE_KEYS


async def test_sitemap_missing_is_one_clear_error(kb: KnowledgeBase, site: StaticSite) -> None:
    with pytest.raises(CrawlError, match=r"No sitemap could be read .* 404"):
        await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))


async def test_a_sitemap_index_naming_endless_sitemaps_is_read_in_bounded_memory(
    kb: KnowledgeBase, site: StaticSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sitemap index names 5,000 sitemaps: at most `MAX_SITEMAP_FILES` are queued and
    read, the other entries only counted and reported (every one was kept: 50,000 a file
    over 100 files held 5 GB); the page a read one lists is crawled."""
    monkeypatch.setattr(site_crawl, "MAX_SITEMAP_FILES", 5)
    names = "".join(
        f"<sitemap><loc>{site.url(f'/maps/{i}.xml')}</loc></sitemap>" for i in range(5_000)
    )
    (site.root / "maps").mkdir()
    for i in range(6):
        (site.root / "maps" / f"{i}.xml").write_text(f"<sitemapindex>{names}</sitemapindex>")
    (site.root / "maps" / "0.xml").write_text(
        f"<urlset><url><loc>{site.url('/docs/index.html')}</loc></url></urlset>"
    )
    (site.root / "robots.txt").write_text(f"User-agent: *\nSitemap: {site.url('/maps/1.xml')}\n")
    summary = await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))
    assert stored_paths((await kb.stats()).sources, site) == {key_path("/docs/index.html")}
    read = [p for p in site.paths() if p.startswith("/maps/")]
    assert sorted(read) == [f"/maps/{i}.xml" for i in range(5)], read
    reasons = [d["reason"] for d in summary.error_details]
    assert any("19,980 more sitemap entries not followed" in r for r in reasons), reasons


async def test_sitemaps_that_list_no_page_say_so(kb: KnowledgeBase, site: StaticSite) -> None:
    (site.root / "self.xml").write_text(
        f"<sitemapindex><sitemap><loc>{site.url('/self.xml')}</loc></sitemap></sitemapindex>"
    )
    (site.root / "robots.txt").write_text(f"User-agent: *\nSitemap: {site.url('/self.xml')}\n")
    with pytest.raises(CrawlError, match=r"list no page that can be crawled \(1 sitemap file"):
        await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))
    (site.root / "self.xml").write_text("<urlset></urlset>")
    with pytest.raises(CrawlError, match=r"list no page"):
        await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))
    long = site.url("/docs/" + "p" * 3_000 + ".html")
    (site.root / "self.xml").write_text(f"<urlset><url><loc>{long}</loc></url></urlset>")
    with pytest.raises(CrawlError, match=r"list no page that can be crawled .* 1 URL\(s\) too"):
        await kb.ingest_from_index(site.url("/docs/"), options=CrawlOptions(sitemap=True))


async def test_sitemap_entries_past_the_limits_are_reported_as_what_they_are(
    kb: KnowledgeBase, site: StaticSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """robots.txt naming more sitemaps than a crawl reads: the rest are reported, not
    dropped unsaid; a listed URL too long to crawl is reported as that, not as left out
    by the page limit."""
    monkeypatch.setattr(site_crawl, "MAX_SITEMAP_FILES", 2)
    long = site.url("/docs/" + "p" * 3_000 + ".html")
    for i in range(4):
        (site.root / f"m{i}.xml").write_text(
            f"<urlset><url><loc>{site.url('/docs/index.html')}</loc></url>"
            f"<url><loc>{long}</loc></url></urlset>"
        )
    named = "".join(f"Sitemap: {site.url(f'/m{i}.xml')}\n" for i in range(4))
    (site.root / "robots.txt").write_text("User-agent: *\n" + named)
    summary = await kb.ingest_from_index(
        site.url("/docs/"), options=CrawlOptions(sitemap=True, max_pages=50)
    )
    assert sorted(p for p in site.paths() if p.startswith("/m")) == ["/m0.xml", "/m1.xml"]
    reasons = sorted(d["reason"] for d in summary.error_details)
    assert reasons == [
        "2 listed URL(s) longer than 2,048 characters not crawled",
        "2 more sitemap entries not followed: a crawl reads at most 2 sitemap files",
    ], reasons
    assert summary.over_cap == 0 and summary.pages_crawled == 1


async def test_bad_limits_and_patterns_fail_before_any_fetch(
    kb: KnowledgeBase, site: StaticSite
) -> None:
    for options, message in [
        (CrawlOptions(max_depth=0), "max_depth must be between"),
        (CrawlOptions(max_depth=99), "max_depth must be between"),
        (CrawlOptions(max_pages=0), "max_pages must be between"),
        (CrawlOptions(exclude="(a"), "The exclude pattern is not a valid regular"),
    ]:
        with pytest.raises(RAGError, match=message):
            await kb.start_crawl(site.url("/docs/"), options=options)
    assert site.requests == []


async def test_refresh_fetches_conditionally_and_removes_exactly_the_gone_pages(
    kb: KnowledgeBase, site: StaticSite, counting_embed: CountingEmbedding
) -> None:
    options = CrawlOptions(max_depth=10, exclude="/_static/")
    await kb.ingest_from_index(site.url("/docs/"), options=options)
    embedded = counting_embed.texts
    site.requests.clear()
    unchanged = await kb.refresh()
    assert unchanged.checked == len(IN_SCOPE) == unchanged.unchanged, unchanged
    assert counting_embed.texts == embedded, "an unchanged site must cost no embedding"
    conditional = [key_path(p) for p, since in site.requests if since]
    assert sorted(conditional) == sorted(IN_SCOPE_KEYS)
    assert sum(1 for path, code in site.statuses if code == 304) == len(IN_SCOPE)

    gone = ["/docs/guide/deep/a.html", "/docs/api/functions.html"]
    for path in gone:
        (site.root / path.lstrip("/")).unlink()
    changed = site.root / "docs/guide/install.html"
    changed.write_text(page("Install", "Install the kettle from the source tarball."))
    future = time.time() + 5
    os.utime(changed, (future, future))  # a newer Last-Modified than the one stored
    result = await kb.refresh()
    assert stored_paths(result.removed_urls, site) == set(gone)
    assert (result.removed, result.updated, result.errors) == (2, 1, 0), result
    assert stored_paths((await kb.stats()).sources, site) == IN_SCOPE_KEYS - set(gone)
    hits = (await kb.retrieve("source tarball", mode="bm25")).hits
    assert hits and hits[0].source_url == site.url("/docs/guide/install.html")


async def test_a_crawl_job_runs_in_the_background_and_cancels_within_two_seconds(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding, site: StaticSite
) -> None:
    slow = crawl_settings.model_copy(update={"rag_crawl_delay_sec": 0.4})
    kb = KnowledgeBase(slow, embed_model=counting_embed)
    await kb.open()
    try:
        job = await kb.start_crawl(site.url("/docs/"), options=CrawlOptions(max_depth=10))
        assert job["state"] == "running" and job["kind"] == "crawl"
        while (await kb.jobs())[0]["result"].get("pages_crawled", 0) < 1:
            listed = await kb.jobs()
            assert listed[0]["id"] == job["id"] and listed[0]["state"] == "running"
            await asyncio.sleep(0.05)
        # `result` fills in only at the end; progress shows pages done meanwhile
        started = time.monotonic()
        cancelled = await kb.cancel_job(job["id"])
        assert time.monotonic() - started < 2.0
        assert cancelled["state"] == "cancelled"
        kept = (await kb.stats()).sources
        assert 1 <= len(kept) < len(IN_SCOPE)
        assert cancelled["result"]["pages_crawled"] == len(kept)
        with pytest.raises(RAGError, match="was cancelled"):
            await kb.job_result(job["id"])
        report = await kb.check()
        assert report.ok, report
    finally:
        await kb.aclose()


async def test_two_crawls_at_once_share_one_politeness_budget(
    crawl_settings: RAGSettings, counting_embed: CountingEmbedding, site: StaticSite
) -> None:
    polite = crawl_settings.model_copy(update={"rag_crawl_delay_sec": 0.3})
    kb = KnowledgeBase(polite, embed_model=counting_embed)
    await kb.open()
    try:
        jobs = [
            await kb.start_crawl(site.url(start), options=CrawlOptions(max_depth=3))
            for start in ("/docs/guide/", "/docs/api/")
        ]
        done = [await kb.wait_job(job["id"]) for job in jobs]
        assert [job["state"] for job in done] == ["done", "done"], done
        assert all(job["result"]["pages_crawled"] >= 2 for job in done), done
    finally:
        await kb.aclose()
    pages = [t for path, t in site.arrivals if path != "/robots.txt"]
    gaps = [b - a for a, b in itertools.pairwise(sorted(pages))]
    # One per-host delay (0.3 s) for both crawls, seen from the server: a request that
    # arrives late after its turn (the loop stalled under load: ~0.1 s was seen) shortens
    # the next gap by as much as it lengthens its own; two gaps still span two delays,
    # less such a stall (up to 0.15 s here).
    # Two throttles of their own would let the crawls' requests arrive together.
    assert len(pages) >= 6 and min(gaps) >= 0.15, gaps
    assert min(a + b for a, b in itertools.pairwise(gaps)) >= 0.45, gaps
