"""Index-page link selection: `<a href>` → absolute, same-site, de-duplicated, filtered URLs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit

from bs4 import BeautifulSoup, Tag

from rag_app.crawl.exceptions import InvalidPatternError
from rag_app.crawl.pages import IndexLinks
from rag_app.crawl.url_safety import AddressPolicy, parse_url
from rag_app.errors import UrlRefusedError

MAX_PATTERN_LENGTH = 500
_NON_PAGE_SCHEMES = ("javascript:", "mailto:", "tel:", "data:", "sms:", "ftp:", "file:")


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """Compile the URL filter (`re.search` semantics); '' means no filter."""
    if not pattern:
        return None
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidPatternError(
            f"The URL pattern is longer than {MAX_PATTERN_LENGTH} characters; use a shorter one."
        )
    try:
        return re.compile(pattern)
    except re.error as err:
        raise InvalidPatternError(
            f"The URL pattern is not a valid regular expression ({err}); fix it or leave it empty."
        ) from None


def raw_links(html: str, page_url: str) -> list[str]:
    """Absolute link targets in document order, resolved against `<base href>` if present."""
    soup = BeautifulSoup(html, "html.parser")
    base_url = page_url
    base = soup.find("base", href=True)
    if isinstance(base, Tag):
        candidate = urljoin(page_url, str(base["href"]).strip())
        if urlsplit(candidate).scheme in ("http", "https"):
            base_url = candidate
    links: list[str] = []
    for anchor in soup.find_all("a", href=True):
        href = str(anchor["href"]).strip()
        if not href or href.startswith("#") or href.lower().startswith(_NON_PAGE_SCHEMES):
            continue
        links.append(urljoin(base_url, href))
    return links


def _site(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return (parts.hostname or "", parts.port or default)


def same_site(a: str, b: str) -> bool:
    """Same exact host, and same port (an http↔https switch on default ports counts as same)."""
    host_a, port_a = _site(a)
    host_b, port_b = _site(b)
    if host_a != host_b:
        return False
    return port_a == port_b or {port_a, port_b} == {80, 443}


def select_links(
    html: str,
    index_url: str,
    *,
    pattern: re.Pattern[str] | None,
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
