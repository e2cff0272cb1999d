"""`WebCrawler`: safe, polite fetching of single pages and one-level index crawls.

Every request (each redirect hop included) passes: URL syntax and address checks
(`url_safety`), the optional Safe Browsing check, robots.txt, the per-domain delay and
the concurrency cap; the connection itself goes through the pinned resolver
(`resolver`), so only checked addresses are ever contacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from urllib.parse import urldefrag, urljoin, urlsplit

import aiohttp

from rag_app.config import RAGSettings
from rag_app.crawl.charset import binary_kind, decode_body, garbled_kind
from rag_app.crawl.exceptions import (
    MAX_ROBOTS_DELAY_SEC,
    BinaryContentError,
    CrawlDelayTooLongError,
    CrawlTimeoutError,
    HttpStatusError,
    RedirectNotFollowedError,
    RobotsBlockedError,
    no_text_error,
    status_phrase,
)
from rag_app.crawl.fetcher import ACCEPT_HEADER, HTML_TYPES, PAGE_TYPES, HttpFetcher, RawResponse
from rag_app.crawl.html_text import ExtractedText, cap_title, html_to_text, markdown_title
from rag_app.crawl.links import select_links
from rag_app.crawl.pages import (
    CrawledPage,
    IndexLinks,
    NotModified,
    PageResult,
    content_hash,
    utc_now_iso,
)
from rag_app.crawl.resolver import build_connector
from rag_app.crawl.robots import RobotsCache, RobotsResponse
from rag_app.crawl.safe_browsing import SafeBrowsingClient
from rag_app.crawl.sitemap import MAX_SITEMAP_BYTES, SitemapEntries, parse_sitemap
from rag_app.crawl.throttle import DomainThrottle
from rag_app.crawl.url_match import UrlPattern, compile_pattern, same_site
from rag_app.crawl.url_safety import AddressPolicy, Lookup, parse_url, resolve_and_check
from rag_app.documents import DOCUMENT_TYPES, DocumentLimits, extract_document
from rag_app.errors import CrawlError, RAGError, UrlRefusedError

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
PARSES_AT_ONCE = 2
"""Fetched pages decoded and turned into text at the same time (CPU-bound: two cores are
enough, and each page's tree can take tens of times its size in memory)."""
ROBOTS_MAX_BYTES = 512 * 1024
ProgressCallback = Callable[[int, int], object]
"""Called as `progress(done, total)` after each page; may return an awaitable."""
Validators = tuple[str | None, str | None]
"""`(etag, last_modified)` remembered from the previous crawl of a page."""


class WebCrawler:
    """Fetch pages safely and politely; owns one aiohttp session.

    Use as `async with WebCrawler(settings) as crawler: ...` (or call `close()`).
    `resolver_lookup` replaces DNS (tests map `evil.test` → 10.0.0.1 without network);
    `allowed_networks` opens specific internal networks (CIDR strings) without opening
    all private ranges; `trace_configs` are passed to the aiohttp session.
    """

    def __init__(
        self,
        settings: RAGSettings,
        *,
        resolver_lookup: Lookup | None = None,
        safe_browsing: SafeBrowsingClient | None = None,
        allowed_networks: Iterable[str] = (),
        trace_configs: Sequence[aiohttp.TraceConfig] = (),
    ) -> None:
        self._settings = settings
        self._policy = AddressPolicy.build(settings.rag_allow_private_network, allowed_networks)
        self._lookup = resolver_lookup
        self._owns_safe_browsing = safe_browsing is None and settings.rag_url_safety_check
        if self._owns_safe_browsing:
            safe_browsing = SafeBrowsingClient.from_settings(settings)
        self._safe_browsing = safe_browsing
        self._trace_configs = list(trace_configs)
        self._session: aiohttp.ClientSession | None = None
        self._fetcher: HttpFetcher | None = None
        self._semaphore = asyncio.Semaphore(settings.rag_crawl_concurrency)
        self._parse_slots = asyncio.Semaphore(PARSES_AT_ONCE)
        self._throttle = DomainThrottle()
        self.robots = RobotsCache(
            self._fetch_robots, settings.rag_user_agent, settings.rag_robots_txt_cache_ttl
        )
        self.requests_made = 0
        """HTTP requests actually sent (pages, index pages, robots.txt, redirect hops)."""

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> WebCrawler:
        self._ensure_session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session (and the Safe Browsing client if this crawler made it)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
            self._fetcher = None
        if self._owns_safe_browsing and self._safe_browsing is not None:
            await self._safe_browsing.close()

    def _ensure_session(self) -> HttpFetcher:
        if self._fetcher is None or self._session is None or self._session.closed:
            connector = build_connector(
                self._policy, self._lookup, limit=self._settings.rag_crawl_concurrency + 2
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={
                    "User-Agent": self._settings.rag_user_agent,
                    "Accept": ACCEPT_HEADER,
                    "Accept-Language": "ja,en;q=0.8",
                },
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                trace_configs=self._trace_configs or None,
            )
            self._fetcher = HttpFetcher(self._session, timeout=self._settings.rag_crawl_timeout_sec)
        return self._fetcher

    # -- URL checks ------------------------------------------------------------------------

    @property
    def policy(self) -> AddressPolicy:
        """The address policy in force (private networks allowed or not)."""
        return self._policy

    def validate_url(self, url: str) -> str:
        """Normalised URL (fragment removed) or `UrlRefusedError` (syntax and literal IPs)."""
        return parse_url(url, self._policy).url

    async def resolve_and_check(self, url: str) -> tuple[str, list[str]]:
        """Normalised URL and its checked addresses, or `UrlRefusedError`/`CrawlError`."""
        timeout = self._settings.rag_crawl_timeout_sec
        try:
            async with asyncio.timeout(timeout):
                return await resolve_and_check(url, lookup=self._lookup, policy=self._policy)
        except TimeoutError:
            raise CrawlTimeoutError(url, timeout) from None

    # -- public crawling API ---------------------------------------------------------------

    async def crawl_page(
        self, url: str, etag: str | None = None, last_modified: str | None = None
    ) -> CrawledPage | NotModified:
        """Fetch one page and extract its text; `NotModified` when a conditional GET says 304.

        Raises `UrlRefusedError` (refused before connecting) or `CrawlError` (HTTP status,
        timeout, size, content type, robots.txt, redirect, empty page).
        """
        requested = self.validate_url(url)
        headers: dict[str, str] = {}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        response = await self._get(
            requested,
            headers=headers,
            accept_types=PAGE_TYPES,
            max_bytes=self._settings.rag_max_page_bytes,
        )
        if response.status == 304:
            return NotModified(
                url=requested,
                etag=response.header("ETag") or etag,
                last_modified=response.header("Last-Modified") or last_modified,
                checked_at=utc_now_iso(),
            )
        if response.status >= 400:
            raise HttpStatusError(requested, response.status, response.reason)
        # Decoding and HTML → text are CPU-bound (seconds for a 5 MB page): keep them off
        # the event loop so other requests and searches go on meanwhile. A page's tree
        # takes up to ~60 times its size (2.4 MB of links: ~150 MB), so only
        # `PARSES_AT_ONCE` pages are parsed at a time, whatever the fetch concurrency.
        async with self._parse_slots:
            return await asyncio.to_thread(self._build_page, requested, response)

    async def crawl_index(
        self, url: str, pattern: str = "", *, max_pages: int | None = None
    ) -> IndexLinks:
        """Links of an index page (depth 1, same host, fragments removed, de-duplicated,
        filtered by `pattern` (RE2 syntax, `re.search` semantics), capped) plus counts of
        what was skipped."""
        compiled = compile_pattern(pattern)
        requested = self.validate_url(url)
        response = await self._get(
            requested, accept_types=PAGE_TYPES, max_bytes=self._settings.rag_max_page_bytes
        )
        if response.status >= 300:
            raise HttpStatusError(requested, response.status, response.reason)
        links = await asyncio.to_thread(
            self._index_links,
            requested,
            response,
            compiled,
            max_pages or self._settings.rag_max_crawl_pages,
        )
        log.info(
            "Index %s: %d links (%d external skipped, %d filtered out, %d over the cap)",
            requested,
            len(links.urls),
            links.skipped_external,
            links.skipped_by_pattern,
            links.truncated,
        )
        return dataclasses.replace(links, index_url=requested)

    async def crawl_index_page(self, url: str, pattern: str = "") -> list[str]:
        """Same-domain page URLs linked from an index page (see `crawl_index`)."""
        return (await self.crawl_index(url, pattern)).urls

    async def crawl_pages(
        self,
        urls: Iterable[str],
        progress: ProgressCallback | None = None,
        *,
        validators: Mapping[str, Validators] | None = None,
    ) -> list[PageResult]:
        """Crawl pages concurrently; one failure never stops the others.

        URLs are normalised and de-duplicated (so `/a#x` and `/a#y` are one page); at most
        `RAG_MAX_CRAWL_PAGES` are fetched, the rest are reported as skipped. `validators`
        maps a normalised URL to its stored `(etag, last_modified)` for conditional GETs.
        Results keep input order; `progress(done, total)` runs after each page.
        """
        results: list[PageResult] = []
        to_fetch: list[tuple[int, str]] = []
        seen: set[str] = set()
        cap = self._settings.rag_max_crawl_pages
        for raw in urls:
            try:
                url = self.validate_url(raw)
            except UrlRefusedError as err:
                results.append(PageResult(url=raw, error=str(err)))
                continue
            if url in seen:
                continue
            seen.add(url)
            if len(to_fetch) >= cap:
                results.append(
                    PageResult(
                        url=url,
                        error=f"Skipped because one crawl fetches at most {cap} pages "
                        "(RAG_MAX_CRAWL_PAGES).",
                    )
                )
                continue
            to_fetch.append((len(results), url))
            results.append(PageResult(url=url))
        total = len(results)
        done = total - len(to_fetch)
        if done:
            await _notify(progress, done, total)
        await self._prefetch_safety([url for _i, url in to_fetch])
        lock = asyncio.Lock()

        async def one(index: int, url: str) -> None:
            nonlocal done
            etag, modified = (validators or {}).get(url, (None, None))
            results[index] = await self._page_result(url, etag, modified)
            async with lock:
                done += 1
                current = done
            await _notify(progress, current, total)

        await asyncio.gather(*(one(index, url) for index, url in to_fetch))
        return results

    async def sitemap_urls(self, url: str) -> list[str]:
        """Sitemaps of the site of `url`: those robots.txt names on the same site, else
        `/sitemap.xml`."""
        listed: tuple[str, ...] = ()
        if self._settings.rag_respect_robots_txt:
            listed = (await self.robots.rules_for(url)).sitemaps
        same = [s for s in listed if same_site(s, url)]
        if same:
            return list(dict.fromkeys(same))
        parts = urlsplit(url)
        return [f"{parts.scheme}://{parts.netloc}/sitemap.xml"]

    async def fetch_sitemap(self, url: str) -> SitemapEntries:
        """Fetch and parse one sitemap (XML, sitemap index, gzip or plain text)."""
        requested = self.validate_url(url)
        response = await self._get(requested, accept_types=None, max_bytes=MAX_SITEMAP_BYTES)
        if response.status >= 300:
            raise HttpStatusError(requested, response.status, response.reason)
        return await asyncio.to_thread(parse_sitemap, response.body, requested)

    # -- internals -------------------------------------------------------------------------

    async def _page_result(self, url: str, etag: str | None, modified: str | None) -> PageResult:
        try:
            outcome = await self.crawl_page(url, etag, modified)
        except RAGError as err:
            log.info("Crawl of %s failed: %s", url, err)
            return PageResult(url=url, error=str(err), status=getattr(err, "status", None))
        except Exception as err:
            log.exception("Unexpected error while crawling %s", url)
            return PageResult(
                url=url,
                error=f"Unexpected error while crawling {url} ({type(err).__name__}); "
                "see the server log.",
            )
        if isinstance(outcome, NotModified):
            return PageResult(url=url, not_modified=True)
        return PageResult(url=url, page=outcome)

    async def _prefetch_safety(self, urls: list[str]) -> None:
        """Warm the Safe Browsing cache with one batched call (verdicts are applied per page)."""
        if self._safe_browsing is None or not urls:
            return
        # A fail-closed API error is reported by each page on its own.
        with contextlib.suppress(UrlRefusedError):
            await self._safe_browsing.check_many(urls)

    def _index_links(
        self, url: str, response: RawResponse, pattern: UrlPattern | None, max_pages: int
    ) -> IndexLinks:
        """The links of a fetched index page (runs in a worker thread: parsing is CPU-bound)."""
        html = ""
        if response.content_type in HTML_TYPES:
            kind = binary_kind(response.body, response.charset)
            if kind is not None:
                raise BinaryContentError.for_page(url, response.content_type, kind)
            html, _codec = decode_body(response.body, response.charset, is_html=True)
        return select_links(
            html,
            response.url,
            pattern=pattern,
            max_pages=max_pages,
            policy=self._policy,
            exclude=(url,),
        )

    def _build_page(self, url: str, response: RawResponse) -> CrawledPage:
        """Decode and extract a fetched page (runs in a worker thread: CPU-bound)."""
        content_type = response.content_type or "text/html"
        links: tuple[str, ...] = ()
        canonical, robots = None, frozenset[str]()
        if content_type in DOCUMENT_TYPES:  # PDF, DOCX: their reader, within its limits
            limits = DocumentLimits.from_settings(self._settings)
            kind = DOCUMENT_TYPES[content_type]
            title, text = extract_document(response.body, kind=kind, name=url, limits=limits)
            codec = ""
        else:
            page, codec = self._page_text(url, response, content_type)
            title, text = page.title, page.text
            links, canonical, robots = page.links, page.canonical, page.robots
        if not text.strip() and not links:
            raise no_text_error(url)
        return CrawledPage(
            url=url,
            title=cap_title(title or url),
            text=text,
            crawled_at=utc_now_iso(),
            etag=response.header("ETag"),
            last_modified=response.header("Last-Modified"),
            content_hash=content_hash(text),
            final_url=response.url,
            content_type=content_type,
            encoding=codec,
            links=links,
            canonical=canonical,
            robots=robots,
        )

    def _page_text(
        self, url: str, response: RawResponse, content_type: str
    ) -> tuple[ExtractedText, str]:
        """The extracted page (links and hints for HTML) and the codec of a text-like body."""
        kind = binary_kind(response.body, response.charset)
        if kind is not None:
            raise BinaryContentError.for_page(url, content_type, kind)
        is_html = content_type in HTML_TYPES
        decoded, codec = decode_body(response.body, response.charset, is_html=is_html)
        garbled = garbled_kind(decoded)
        if garbled is not None:
            raise BinaryContentError.for_page(url, content_type, garbled)
        if is_html:
            return html_to_text(decoded, response.url), codec
        text = decoded.replace("\r\n", "\n").replace("\r", "\n").strip()
        return ExtractedText(
            markdown_title(text) if "markdown" in content_type else "", text
        ), codec

    async def _get(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        accept_types: frozenset[str] | None,
        max_bytes: int,
        polite: bool = True,
        truncate: bool = False,
        follow: bool | None = None,
        budget: asyncio.Timeout | None = None,
    ) -> RawResponse:
        """GET with every policy applied to every hop; up to `MAX_REDIRECTS` redirects
        followed when `follow` (default: `RAG_FOLLOW_REDIRECTS`) says so.

        `polite=False` (robots.txt itself) skips robots, Safe Browsing and the delay.
        """
        if follow is None:
            follow = self._settings.rag_follow_redirects
        current = url
        hops = 0
        while True:
            target, host, delay = await self._admit(current, polite=polite, hop=hops > 0)
            response = await self._send(
                target, host, delay, headers, accept_types, max_bytes, polite, truncate, budget
            )
            if not response.is_redirect:
                return response
            location = response.header("Location")
            if not location:
                raise CrawlError(
                    f"{status_phrase(response.status, response.reason)} without a Location "
                    f"header for {target}; the site is misconfigured."
                )
            try:
                next_url = urldefrag(urljoin(target, location.strip())).url
            except ValueError as err:  # e.g. `http://[::1/x`: not a URL at all
                raise CrawlError(
                    f"{status_phrase(response.status, response.reason)} from {target} "
                    f"points to an address that is not a URL ({err}); the site is misconfigured."
                ) from err
            if not follow:
                raise RedirectNotFollowedError(target, next_url, response.status)
            hops += 1
            if hops > MAX_REDIRECTS:
                raise RedirectNotFollowedError(url, next_url, response.status, too_many=True)
            log.info("Following redirect %s → %s", target, next_url)
            current = next_url

    async def _admit(self, url: str, *, polite: bool, hop: bool = False) -> tuple[str, str, float]:
        """Check one hop before any connection; return (url, host, delay seconds). A
        redirect `hop` is checked against Safe Browsing even when not `polite` (robots.txt
        redirects to another site too)."""
        normalised = self.validate_url(url)
        if (polite or hop) and self._safe_browsing is not None:
            await self._safe_browsing.ensure_safe(normalised)  # before DNS: no lookup if flagged
        await self.resolve_and_check(normalised)
        delay = self._settings.rag_crawl_delay_sec
        if polite and self._settings.rag_respect_robots_txt:
            allowed, robots_delay = await self.robots.allowed(normalised)
            if not allowed:
                raise RobotsBlockedError(normalised)
            if robots_delay is not None and robots_delay > MAX_ROBOTS_DELAY_SEC:
                raise CrawlDelayTooLongError(normalised, robots_delay)
            if robots_delay is not None and robots_delay > delay:
                delay = robots_delay
        return normalised, urlsplit(normalised).hostname or "", delay

    async def _send(
        self,
        url: str,
        host: str,
        delay: float,
        headers: Mapping[str, str] | None,
        accept_types: frozenset[str] | None,
        max_bytes: int,
        polite: bool,
        truncate: bool = False,
        budget: asyncio.Timeout | None = None,
    ) -> RawResponse:
        """One request, after its host's turn and with a connection slot. `budget`, the
        time limit of a whole chain of requests, does not run while it waits for them."""
        fetcher = self._ensure_session()
        loop = asyncio.get_running_loop()
        left = budget.when() - loop.time() if budget and budget.when() is not None else None
        if left is not None and left <= 0:
            raise TimeoutError  # the chain's time is up: no turn or slot taken for nothing
        if budget is not None:
            budget.reschedule(None)  # waiting for a turn or a slot is not the site's time
        while True:  # the turn is waited for before taking a slot: no slot sleeps
            if polite:
                await self._throttle.wait_turn(host, delay)
            await self._semaphore.acquire()
            if not polite or self._throttle.try_start(host, delay):
                break
            self._semaphore.release()  # the slot came late, with a later turn's: wait again
        if budget is not None and left is not None:
            budget.reschedule(loop.time() + left)
        try:
            self.requests_made += 1
            log.debug("GET %s", url)
            return await fetcher.get(
                url,
                headers=headers,
                max_bytes=max_bytes,
                accept_types=accept_types,
                truncate=truncate,
            )
        finally:
            self._semaphore.release()

    async def _fetch_robots(self, url: str) -> RobotsResponse:
        """A site's robots.txt. Its redirects are followed whatever `RAG_FOLLOW_REDIRECTS`
        says (RFC 9309 §2.3.1.2: up to five, across hosts too; the rules found apply to the
        site asked about), each hop checked like any request: a site whose robots.txt
        moved to HTTPS or another host is crawled under its rules, not as if it had none.
        Like the site's own robots.txt, hops wait for no host's turn (at most six requests
        per site per cache time; queued behind a host's pages, a hop waited out their
        delays while every page of the site waited for it). The whole chain, DNS included,
        gets one `RAG_CRAWL_TIMEOUT_SEC`."""
        seconds = self._settings.rag_crawl_timeout_sec
        try:
            async with asyncio.timeout(seconds) as budget:
                response = await self._get(
                    url,
                    accept_types=None,
                    max_bytes=ROBOTS_MAX_BYTES,
                    polite=False,
                    truncate=True,
                    follow=True,
                    budget=budget,
                )
        except TimeoutError as err:
            raise CrawlTimeoutError(url, seconds) from err
        text = ""
        if 200 <= response.status < 300:
            text, _codec = decode_body(response.body, response.charset, is_html=False)
        return RobotsResponse(status=response.status, text=text)


async def _notify(progress: ProgressCallback | None, done: int, total: int) -> None:
    """Call the progress callback; its failures are logged, never fatal."""
    if progress is None:
        return
    try:
        result = progress(done, total)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.warning("Progress callback failed", exc_info=True)


__all__ = ["MAX_REDIRECTS", "ProgressCallback", "Validators", "WebCrawler", "no_text_error"]
