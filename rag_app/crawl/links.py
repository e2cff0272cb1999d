"""Index-page link selection: `<a href>` → absolute, same-site, de-duplicated, filtered URLs.

The URL filter is a user-supplied regular expression, so it runs on RE2 (google-re2):
matching is linear in the URL length whatever the pattern (`(a+)+$` cannot backtrack).
RE2 has no backreferences or lookarounds; such a pattern gets a one-line error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol
from urllib.parse import urljoin, urlsplit

import re2
from bs4 import BeautifulSoup, Tag

from rag_app.crawl.exceptions import InvalidPatternError
from rag_app.crawl.pages import IndexLinks
from rag_app.crawl.soup import parse_html
from rag_app.crawl.tag_index import TagIndex
from rag_app.crawl.url_safety import AddressPolicy, parse_url
from rag_app.errors import UrlRefusedError
from rag_app.limits import MAX_PATTERN_CHARS

MAX_PATTERN_LENGTH = MAX_PATTERN_CHARS
_NON_PAGE_SCHEMES = ("javascript:", "mailto:", "tel:", "data:", "sms:", "ftp:", "file:")


class UrlPattern(Protocol):
    """A compiled URL filter: `search(url)` is truthy when the URL matches."""

    def search(self, text: str) -> object: ...


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern to stderr
    return options


def _reason(err: Exception) -> str:
    detail = err.args[0] if err.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return str(detail or type(err).__name__)


def compile_pattern(pattern: str) -> UrlPattern | None:
    """Compile the URL filter (`re.search` semantics, RE2 syntax); '' means no filter."""
    if not pattern:
        return None
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise InvalidPatternError(
            f"The URL pattern is longer than {MAX_PATTERN_LENGTH} characters; use a shorter one."
        )
    try:
        return re2.compile(pattern, _re2_options())
    except re2.error as err:
        reason = _reason(err)
    try:
        re.compile(pattern)
    except re.error as err:
        raise InvalidPatternError(
            f"The URL pattern is not a valid regular expression ({err}); fix it or leave it empty."
        ) from None
    raise InvalidPatternError(
        f"The URL pattern uses something the linear-time RE2 engine does not support "
        f"({reason}), such as a backreference, a lookaround or a repeat over 1000; "
        "rewrite it without that."
    )


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
