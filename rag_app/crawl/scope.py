"""What a recursive crawl may visit, and when two URLs are the same page.

The default scope of a site crawl is the start page's site and directory: from
`https://docs.example.com/guide/index.html` it takes `https://docs.example.com/guide/…`
and nothing above or beside it. Include and exclude patterns (RE2, `re.search`
semantics) narrow it further. `page_key` folds the spellings of one page (fragment,
dot segments, default port, a trailing slash, `index.html`) so that no page is fetched
twice.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import unquote, urlsplit, urlunsplit

from rag_app.crawl.url_match import UrlPattern, compile_pattern, same_site


class OutOfScope(Enum):
    """Why a link is not crawled (counted in the crawl's summary)."""

    EXTERNAL = "external"
    OUTSIDE = "outside the start directory"
    PATTERN = "not matching the pattern"
    EXCLUDED = "excluded"


_DIRECTORY_INDEXES = frozenset({"index.html", "index.htm"})
"""What a web server answers for a folder URL: `/guide/` and `/guide/index.html` are one."""


def directory_of(url: str) -> str:
    """The path of `url` up to and including its last `/` (`/guide/` for `/guide/a.html`)."""
    path = served_path(urlsplit(url).path)
    return path[: path.rfind("/") + 1]


_ENCODED_DOT = re.compile(r"%2e", re.IGNORECASE)
_SEPARATORS = re.compile(r"(?:/|%2f|%5c|\\)+", re.IGNORECASE)


def served_path(path: str) -> str:
    """The path as common web servers resolve it before serving it: `%2e` decoded,
    repeated slashes (and encoded or back slashes) merged, dot segments resolved, so
    `/docs/%2e%2e/private` and `//private/docs` are not inside `/docs/`. Scope checks
    and page keys use it (a URL's own spelling is what is fetched and stored)."""
    merged = _SEPARATORS.sub("/", _ENCODED_DOT.sub(".", path or "/"))
    segments: list[str] = []
    for segment in merged.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in (".", ""):
            segments.append(segment)
    resolved = "/" + "/".join(segments)
    if merged.endswith(("/", "/.", "/..")) and resolved != "/":
        resolved += "/"
    return resolved


def page_key(url: str) -> str:
    """One spelling per page: no fragment, dot segments resolved, default port dropped,
    `index.html` and a trailing slash removed (the root stays `/`), scheme and host lower
    case."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    shown = f"[{host}]" if ":" in host else host
    port = parts.port
    default = port is None or (scheme, port) in (("http", 80), ("https", 443))
    netloc = shown if default else f"{shown}:{port}"
    path = served_path(parts.path)  # ./ and ../ resolved (encoded too), // merged
    head, _slash, last = path.rpartition("/")
    if last.lower() in _DIRECTORY_INDEXES:
        path = head + "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    return urlunsplit((scheme, netloc, path, parts.query, ""))


@dataclass(frozen=True)
class CrawlScope:
    """The start URL, its directory prefix and the optional include/exclude filters."""

    start: str
    directory: str
    include: UrlPattern | None = None
    exclude: UrlPattern | None = None
    include_text: str = ""
    exclude_text: str = ""

    @classmethod
    def build(
        cls, start: str, pattern: str = "", exclude: str = "", *, whole_site: bool = False
    ) -> CrawlScope:
        """Scope of a crawl from `start` (its directory, or its whole site); bad patterns
        raise `InvalidPatternError`."""
        return cls(
            start=start,
            directory="/" if whole_site else directory_of(start),
            include=compile_pattern(pattern),
            exclude=compile_pattern(exclude, "exclude"),
            include_text=pattern,
            exclude_text=exclude,
        )

    def rebased(self, start: str) -> CrawlScope:
        """The same filters around another start (the start page's URL after redirects)."""
        directory = "/" if self.directory == "/" else directory_of(start)
        return dataclasses.replace(self, start=start, directory=directory)

    def check(self, url: str) -> OutOfScope | None:
        """None when `url` is in scope, else why not."""
        if not same_site(url, self.start):
            return OutOfScope.EXTERNAL
        path = served_path(urlsplit(url).path)
        if not (path.startswith(self.directory) or path + "/" == self.directory):
            return OutOfScope.OUTSIDE
        spellings = (url, unquote(url)) if "%" in url else (url,)  # `ページ` as written
        if self.include is not None and not any(self.include.search(u) for u in spellings):
            return OutOfScope.PATTERN
        if self.exclude is not None and any(self.exclude.search(u) for u in spellings):
            return OutOfScope.EXCLUDED
        return None

    def admits(self, url: str) -> bool:
        """True when `url` is in scope."""
        return self.check(url) is None


__all__ = ["CrawlScope", "OutOfScope", "directory_of", "page_key", "served_path"]
