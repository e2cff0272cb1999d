"""Index-page link selection: `<a href>` → absolute, same-site, de-duplicated, filtered URLs
(the filter and the same-site test are `url_match`'s)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit

from bs4 import BeautifulSoup, Tag

from rag_app.crawl.pages import IndexLinks
from rag_app.crawl.soup import parse_html
from rag_app.crawl.tag_index import TagIndex
from rag_app.crawl.url_match import UrlPattern, same_site
from rag_app.crawl.url_safety import AddressPolicy, parse_url
from rag_app.errors import UrlRefusedError

_NON_PAGE_SCHEMES = ("javascript:", "mailto:", "tel:", "data:", "sms:", "ftp:", "file:")


def raw_links(html: str | BeautifulSoup | TagIndex, page_url: str) -> list[str]:
    """Absolute link targets in document order, resolved against `<base href>` if present.

    `rel="nofollow"` links are left out: the site asks crawlers not to follow them.
    """
    tags = _index(html)
    base_url = page_url
    bases = tags.having("base", "href")
    base = bases[0] if bases else None
    if isinstance(base, Tag):
        candidate = urljoin(page_url, str(base["href"]).strip())
        if urlsplit(candidate).scheme in ("http", "https"):
            base_url = candidate
    links: list[str] = []
    for anchor in tags.having("a", "href"):
        href = str(anchor["href"]).strip()
        if not href or href.startswith("#") or href.lower().startswith(_NON_PAGE_SCHEMES):
            continue
        if "nofollow" in _rel(anchor):
            continue
        links.append(urljoin(base_url, href))
    return links


def _rel(tag: Tag) -> list[str]:
    rel = tag.get("rel") or []
    values = rel.split() if isinstance(rel, str) else list(rel)
    return [str(v).lower() for v in values]


def _index(page: str | BeautifulSoup | TagIndex) -> TagIndex:
    if isinstance(page, TagIndex):
        return page
    return TagIndex(page if isinstance(page, BeautifulSoup) else parse_html(page))


def canonical_link(page: BeautifulSoup | TagIndex, page_url: str) -> str | None:
    """The absolute `<link rel="canonical" href>` of a page (http/https only), or None."""
    for link in _index(page).having("link", "href"):
        if "canonical" in _rel(link):
            target = urljoin(page_url, str(link["href"]).strip())
            if urlsplit(target).scheme in ("http", "https"):
                return target
            return None
    return None


def robots_directives(page: BeautifulSoup | TagIndex) -> frozenset[str]:
    """`<meta name="robots" content="noindex, nofollow">` values, lower case."""
    found: set[str] = set()
    for meta in _index(page).having("meta", "name", "content"):
        if str(meta["name"]).strip().lower() in ("robots", "rag-knowledge"):
            found.update(part.strip().lower() for part in str(meta["content"]).split(","))
    return frozenset(found - {""})


def select_links(
    html: str,
    index_url: str,
    *,
    pattern: UrlPattern | None,
    max_pages: int,
    policy: AddressPolicy | None = None,
    exclude: Iterable[str] = (),
) -> IndexLinks:
    """Pick the pages to crawl from an index page (depth 1, same site only).

    `index_url` is the page's own (final) URL: links resolve against it, "same site"
    means its host, and it is never listed itself (nor anything in `exclude`).
    """
    seen: set[str] = {index_url, *exclude}
    found: list[str] = []
    external = invalid = 0
    for link in raw_links(html, index_url):
        try:
            if urlsplit(link).scheme.lower() in ("http", "https") and not same_site(
                link, index_url
            ):
                external += 1
                continue
            url = parse_url(link, policy).url
        except (UrlRefusedError, ValueError):
            invalid += 1
            continue
        if not same_site(url, index_url):
            external += 1
            continue
        if url not in seen:
            seen.add(url)
            found.append(url)
    matching = [u for u in found if pattern is None or pattern.search(u)]
    return IndexLinks(
        index_url=index_url,
        urls=matching[:max_pages],
        found=len(found),
        skipped_external=external,
        skipped_by_pattern=len(found) - len(matching),
        skipped_invalid=invalid,
        truncated=max(0, len(matching) - max_pages),
    )
