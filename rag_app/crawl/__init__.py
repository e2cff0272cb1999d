"""Fetching pages safely and politely: SSRF guard, robots.txt, delays, HTML → text."""

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
