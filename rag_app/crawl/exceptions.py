"""Crawl failure types: `CrawlError` subclasses that keep machine-readable details.

Callers show `str(err)` (one sentence) and branch on the type or on `status`
(e.g. 404/410 means the page is gone and its chunks may be removed).
"""

from __future__ import annotations

from http import HTTPStatus

from rag_app.errors import CrawlError, RAGError


def status_phrase(status: int, reason: str | None = None) -> str:
    """`404` → `HTTP 404 Not Found` (the spec's wording), falling back to the server's reason."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = (reason or "").strip() or "Unknown Status"
    return f"HTTP {status} {phrase}"


def format_seconds(seconds: float) -> str:
    """`30.0` → `30`, `0.5` → `0.5` (for messages)."""
    return f"{seconds:g}"


class HttpStatusError(CrawlError):
    """The server answered with an error status (4xx/5xx)."""

    def __init__(self, url: str, status: int, reason: str | None = None) -> None:
        self.url = url
        self.status = status
        hint = "check the URL" if 400 <= status < 500 else "try again later"
        super().__init__(f"{status_phrase(status, reason)} for {url}; {hint}.")

    @property
    def is_gone(self) -> bool:
        """True for 404 Not Found and 410 Gone: the page no longer exists."""
        return self.status in (404, 410)


class RedirectNotFollowedError(CrawlError):
    """A 3xx answer was not followed (redirects are off, or the hop limit was reached)."""

    def __init__(self, url: str, target: str, status: int, *, too_many: bool = False) -> None:
        self.url = url
        self.target = target
        self.status = status
        if too_many:
            message = (
                f"Too many redirects starting at {url} (last target {target}); "
                "add the final URL directly."
            )
        else:
            message = f"Redirect to {target} not followed; add the target URL directly."
        super().__init__(message)


class CrawlTimeoutError(CrawlError):
    """The server did not answer (or finish answering) within the timeout."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url = url
        self.status: int | None = None
        self.seconds = seconds
        secs = format_seconds(seconds)
        super().__init__(
            f"接続がタイムアウトしました ({secs}秒): {url} did not answer within {secs} s; "
            "try again later or raise RAG_CRAWL_TIMEOUT_SEC."
        )


class RobotsBlockedError(CrawlError):
    """robots.txt disallows the URL for our user agent."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.status: int | None = None
        super().__init__(
            f"Blocked by robots.txt: {url} may not be crawled by this user agent; "
            "ask the site owner or set RAG_RESPECT_ROBOTS_TXT=false if you may ignore it."
        )


MAX_ROBOTS_DELAY_SEC = 60.0
"""The longest Crawl-delay a crawl honours; a site asking for more is not crawled (a
delay of hours would hold a crawl for days, whatever its page limit)."""


class CrawlDelayTooLongError(CrawlError):
    """robots.txt asks for more time between requests than a crawl waits."""

    def __init__(self, url: str, delay: float) -> None:
        self.url = url
        self.status: int | None = None
        super().__init__(
            f"Not crawled: the robots.txt of {url} asks for {delay:g} s between requests "
            f"(Crawl-delay), more than the {MAX_ROBOTS_DELAY_SEC:g} s a crawl waits; ask the "
            "site owner or set RAG_RESPECT_ROBOTS_TXT=false if you may ignore it."
        )


class PageTooLargeError(CrawlError):
    """The response body exceeds the size limit."""

    def __init__(self, url: str, limit: int) -> None:
        self.url = url
        self.status: int | None = None
        self.limit = limit
        super().__init__(
            f"The page {url} is larger than the {limit:,}-byte limit; "
            "raise RAG_MAX_PAGE_BYTES if you need it."
        )


class UnsupportedContentTypeError(CrawlError):
    """The response is not HTML, XHTML, plain text, Markdown, PDF or Word (.docx)."""

    def __init__(self, url: str, content_type: str) -> None:
        self.url = url
        self.status: int | None = None
        self.content_type = content_type
        super().__init__(
            f"Unsupported content type {content_type} at {url}; only HTML, XHTML, "
            "plain text, Markdown, PDF and Word (.docx) pages can be ingested."
        )


class InvalidPatternError(RAGError, ValueError):
    """The URL filter pattern is not a usable regular expression."""


class BrokenMarkupError(RAGError, ValueError):
    """`html.parser` rejects the page (`<![ x`)."""


class BinaryContentError(CrawlError):
    """A body served or named as text is binary (NUL bytes or a known file signature)."""

    def __init__(self, source: str, kind: str, message: str) -> None:
        self.url = source
        self.status: int | None = None
        self.kind = kind
        super().__init__(message)

    @classmethod
    def for_page(cls, url: str, content_type: str, kind: str) -> BinaryContentError:
        """A fetched page whose Content-Type says text but whose body is `kind`."""
        return cls(
            url,
            kind,
            f"The page {url} is served as {content_type} but its body is {kind}; only HTML, "
            "XHTML, plain text, Markdown, PDF and Word (.docx) pages can be ingested, each "
            "served as its own type.",
        )

    @classmethod
    def for_file(cls, path: str, kind: str) -> BinaryContentError:
        """A local .html/.md/.txt file whose bytes are `kind` (a .pdf/.docx goes to its
        reader instead)."""
        return cls(
            path,
            kind,
            f"The file {path} has a text file name but holds {kind}; only HTML, Markdown "
            "and plain text files are read as text (PDF and Word files need their .pdf or "
            ".docx name).",
        )


def no_text_error(url: str) -> CrawlError:
    """The error for a page without readable text (links alone are followed, not stored)."""
    return CrawlError(
        f"The page {url} has no readable text (it may need JavaScript); nothing to ingest."
    )
