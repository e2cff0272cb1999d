"""XML sitemaps (sitemaps.org): page URLs and nested sitemaps, from hostile bytes safely.

Parsing goes through `defusedxml` (no DTDs, no entity expansion, no external
resources), gzip is inflated with a hard output cap, and every count is bounded: a
sitemap can neither blow up memory nor send the crawl elsewhere (the caller keeps
only same-scope URLs). Plain-text sitemaps (one URL per line) are accepted as the
protocol allows.

Why not a sitemap library: the maintained parsers (ultimate-sitemap-parser and
others) fetch URLs themselves with their own HTTP client, which would bypass the
crawler's address checks, robots.txt, delays and size limits; parsing is the small part.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass, field
from xml.etree.ElementTree import Element

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, iterparse

from rag_app.crawl.url_safety import MAX_URL_LENGTH
from rag_app.errors import CrawlError

MAX_SITEMAP_BYTES = 50 * 1024 * 1024
"""Uncompressed size limit of one sitemap (the protocol's own: 50 MB)."""
MAX_SITEMAP_URLS = 50_000
"""URLs read from one sitemap (the protocol's own limit)."""
MAX_DEPTH = 16
"""Element nesting a sitemap may have (the protocol's is 3, extensions add a few)."""
MAX_ENTRY_ELEMENTS = 10_000
"""Elements inside one entry (a page may list up to 1,000 images, each a few elements)."""
MAX_LOC_CHARS = MAX_URL_LENGTH
"""A listed URL longer than the crawler takes is counted as left out, not kept."""
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class SitemapEntries:
    """What one sitemap file lists: page URLs and (for a sitemap index) more sitemaps."""

    pages: list[str] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    truncated: int = 0
    """Entries left out because of `MAX_SITEMAP_URLS`."""
    too_long: int = 0
    """URLs left out for being longer than `MAX_LOC_CHARS`."""


def inflate(data: bytes, url: str, limit: int = MAX_SITEMAP_BYTES) -> bytes:
    """The bytes of a gzip body (or `data` itself when it is not gzip), at most `limit`."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as err:
        raise CrawlError(f"The sitemap {url} is not valid gzip ({err}).") from None
    if len(out) > limit:
        raise CrawlError(
            f"The sitemap {url} inflates to more than {limit:,} bytes; it was not read."
        )
    return out


def _local(tag: object) -> str:
    text = tag if isinstance(tag, str) else ""
    return text.rsplit("}", 1)[-1].lower()


def _loc(entry: Element) -> str:
    for child in entry:
        if _local(child.tag) == "loc" and child.text:
            return child.text.strip()
    return ""


def parse_sitemap(data: bytes, url: str, max_urls: int = MAX_SITEMAP_URLS) -> SitemapEntries:
    """Entries of one sitemap body (XML urlset, XML sitemap index, or plain text)."""
    body = inflate(data, url)
    head = body[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    entries = SitemapEntries()
    if not head.startswith(b"<"):
        for line in io.StringIO(body.decode("utf-8", "replace"), newline=None):  # line by line
            line = line.strip()
            if not line.startswith(("http://", "https://")):
                continue
            if len(line) > MAX_LOC_CHARS:
                entries.too_long += 1
            elif len(entries.pages) >= max_urls:
                entries.truncated += 1
            else:
                entries.pages.append(line)
        return entries
    try:
        _read_entries(body, url, max_urls, entries)
    except (ParseError, DefusedXmlException, ValueError) as err:
        raise CrawlError(f"The sitemap {url} is not valid XML ({err}).") from None
    return entries


def _read_entries(body: bytes, url: str, max_urls: int, entries: SitemapEntries) -> None:
    """The root's `<url>` or `<sitemap>` entries, read as the parser goes: each entry is
    dropped once read, so memory stays flat however many elements the file holds (a tree
    of a 10 MB file of empty elements took ~240 MB)."""
    root: Element | None = None
    wanted, target = "", entries.pages
    depth = inside = 0
    for event, elem in iterparse(io.BytesIO(body), events=("start", "end"), forbid_dtd=True):
        if event == "start":
            depth += 1
            if depth > MAX_DEPTH:
                raise CrawlError(f"The sitemap {url} nests elements deeper than {MAX_DEPTH}.")
            if root is None:
                root, kind = elem, _local(elem.tag)
                if kind not in ("urlset", "sitemapindex"):
                    raise CrawlError(
                        f"The file {url} is not a sitemap (its root element is <{kind}>, "
                        "not <urlset> or <sitemapindex>)."
                    )
                wanted = "url" if kind == "urlset" else "sitemap"
                target = entries.pages if kind == "urlset" else entries.sitemaps
            continue
        depth -= 1
        if depth > 1:
            inside += 1
            if inside > MAX_ENTRY_ELEMENTS:
                raise CrawlError(
                    f"The sitemap {url} has an entry of more than {MAX_ENTRY_ELEMENTS:,} elements."
                )
            continue
        if depth == 1 and root is not None:  # one entry of the root read: keep its <loc>
            inside = 0
            if _local(elem.tag) == wanted and (loc := _loc(elem)):
                if len(loc) > MAX_LOC_CHARS:
                    entries.too_long += 1  # no crawl takes such a URL: not kept
                elif len(target) >= max_urls:
                    entries.truncated += 1
                else:
                    target.append(loc)
            root.clear()


__all__ = ["MAX_SITEMAP_BYTES", "MAX_SITEMAP_URLS", "SitemapEntries", "inflate", "parse_sitemap"]
