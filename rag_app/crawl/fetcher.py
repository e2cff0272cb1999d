"""One bounded HTTP GET: never follows redirects, limits time, size and content type.

Policy (URL checks, robots.txt, delays, redirect handling) lives in `crawler.py`;
this module only turns one request into a `RawResponse` or a clear `CrawlError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from rag_app.crawl.exceptions import (
    CrawlTimeoutError,
    PageTooLargeError,
    UnsupportedContentTypeError,
)
from rag_app.crawl.resolver import RefusedAddressError
from rag_app.documents import DOCUMENT_TYPES
from rag_app.errors import CrawlError, UrlRefusedError

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
PAGE_TYPES = HTML_TYPES | TEXT_TYPES | frozenset(DOCUMENT_TYPES)
ACCEPT_HEADER = "text/html,application/xhtml+xml,text/markdown;q=0.9,text/plain;q=0.8,*/*;q=0.1"
_CHUNK = 64 * 1024
_SNIFF_HTML = (b"<!doctype html", b"<html", b"<head", b"<body")


@dataclass(frozen=True)
class RawResponse:
    """Status, headers and (for 2xx only) the body of one response."""

    url: str
    status: int
    reason: str
    headers: CIMultiDictProxy[str]
    body: bytes
    content_type: str | None
    """Lower-case MIME type, or None when the server sent no Content-Type."""
    charset: str | None

    @property
    def is_redirect(self) -> bool:
        """A 3xx other than 304 Not Modified."""
        return 300 <= self.status < 400 and self.status != 304

    def header(self, name: str) -> str | None:
        """One header value (case-insensitive), or None."""
        return self.headers.get(name)


def sniff_html(body: bytes) -> bool:
    """True when an untyped body starts like an HTML document."""
    head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith(_SNIFF_HTML)


class HttpFetcher:
    """Performs single GETs on a session built with the safe connector."""

    def __init__(self, session: aiohttp.ClientSession, *, timeout: float) -> None:
        self._session = session
        self._timeout = timeout

    async def get(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        max_bytes: int,
        accept_types: frozenset[str] | None = PAGE_TYPES,
        truncate: bool = False,
    ) -> RawResponse:
        """GET `url` (already validated); read the body only for 2xx answers.

        A body over `max_bytes` is refused, or with `truncate` cut there (robots.txt:
        RFC 9309 has crawlers parse its first 500 KiB).
        """
        try:
            async with asyncio.timeout(self._timeout):
                return await self._get(url, headers or {}, max_bytes, accept_types, truncate)
        except TimeoutError:
            raise CrawlTimeoutError(url, self._timeout) from None
        except aiohttp.ClientConnectorError as err:
            if isinstance(err.os_error, RefusedAddressError):
                raise UrlRefusedError(str(err.os_error)) from None
            reason = err.os_error.strerror or type(err.os_error).__name__
            raise CrawlError(
                f"Could not connect to {err.host}:{err.port} ({reason}); "
                "check the URL or try again later."
            ) from None
        except aiohttp.ClientError as err:
            detail = (str(err) or type(err).__name__)[:200]
            raise CrawlError(
                f"Could not fetch {url} ({detail}); check the URL or try again later."
            ) from None

    async def _get(
        self,
        url: str,
        headers: Mapping[str, str],
        max_bytes: int,
        accept_types: frozenset[str] | None,
        truncate: bool = False,
    ) -> RawResponse:
        async with self._session.get(
            URL(url, encoded=True),
            headers=dict(headers),
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        ) as response:
            content_type = response.content_type if "Content-Type" in response.headers else None
            body = b""
            if 200 <= response.status < 300:
                if accept_types and content_type and content_type not in accept_types:
                    raise UnsupportedContentTypeError(url, content_type)
                body = await _read_limited(response, url, max_bytes, truncate)
                if accept_types is not None and content_type is None:
                    if not sniff_html(body):
                        raise UnsupportedContentTypeError(url, "(none)")
                    content_type = "text/html"
            return RawResponse(
                url=url,
                status=response.status,
                reason=response.reason or "",
                headers=CIMultiDictProxy(CIMultiDict(response.headers)),
                body=body,
                content_type=content_type,
                charset=response.charset if content_type else None,
            )


async def _read_limited(
    response: aiohttp.ClientResponse, url: str, max_bytes: int, truncate: bool = False
) -> bytes:
    """Read the body, refusing it up front (Content-Length) or mid-stream past `max_bytes`;
    with `truncate`, keep its first `max_bytes` instead and stop reading."""
    declared = response.content_length
    if declared is not None and declared > max_bytes and not truncate:
        raise PageTooLargeError(url, max_bytes)
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        total += len(chunk)
        if total > max_bytes:
            if not truncate:
                raise PageTooLargeError(url, max_bytes)
            chunks.append(chunk[: len(chunk) - (total - max_bytes)])
            break
        chunks.append(chunk)
    return b"".join(chunks)
