"""Fetching pages safely and politely: SSRF guard, robots.txt, delays, HTML → text.

The names below load on first use (PEP 562): importing one light module of this package
(a crawl scope, a page record) must not import the crawler and its HTML parser, which
the store service would otherwise load at every start (~0.15 s) before its first search.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag_app.crawl.crawler import WebCrawler
    from rag_app.crawl.exceptions import (
        BinaryContentError,
        CrawlTimeoutError,
        HttpStatusError,
        InvalidPatternError,
        PageTooLargeError,
        RedirectNotFollowedError,
        RobotsBlockedError,
        UnsupportedContentTypeError,
    )
    from rag_app.crawl.pages import CrawledPage, IndexLinks, NotModified, PageResult
    from rag_app.crawl.safe_browsing import SafeBrowsingClient
    from rag_app.crawl.url_safety import AddressPolicy, resolve_and_check, validate_url

_WHERE = {
    "WebCrawler": "crawler",
    **dict.fromkeys(
        (
            "BinaryContentError",
            "CrawlTimeoutError",
            "HttpStatusError",
            "InvalidPatternError",
            "PageTooLargeError",
            "RedirectNotFollowedError",
            "RobotsBlockedError",
            "UnsupportedContentTypeError",
        ),
        "exceptions",
    ),
    **dict.fromkeys(("CrawledPage", "IndexLinks", "NotModified", "PageResult"), "pages"),
    "SafeBrowsingClient": "safe_browsing",
    **dict.fromkeys(("AddressPolicy", "resolve_and_check", "validate_url"), "url_safety"),
}

__all__ = [
    "AddressPolicy",
    "BinaryContentError",
    "CrawlTimeoutError",
    "CrawledPage",
    "HttpStatusError",
    "IndexLinks",
    "InvalidPatternError",
    "NotModified",
    "PageResult",
    "PageTooLargeError",
    "RedirectNotFollowedError",
    "RobotsBlockedError",
    "SafeBrowsingClient",
    "UnsupportedContentTypeError",
    "WebCrawler",
    "resolve_and_check",
    "validate_url",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
