"""Google Safe Browsing Lookup API v4 (`threatMatches:find`) with an LRU+TTL verdict cache.

Optional (`RAG_URL_SAFETY_CHECK`). Unsafe URLs are refused with their threat type; when
the API fails, `RAG_URL_SAFETY_FAIL_OPEN` decides (default: log a warning and go on).
This client talks to the API only, through its own plain session: it is not the crawler,
so the crawler's private-network policy does not apply to it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

import aiohttp

from rag_app.config import RAGSettings
from rag_app.errors import UrlRefusedError

log = logging.getLogger(__name__)

THREAT_TYPES = (
    "MALWARE",
    "SOCIAL_ENGINEERING",
    "UNWANTED_SOFTWARE",
    "POTENTIALLY_HARMFUL_APPLICATION",
)
MAX_CACHE_ENTRIES = 1000
MAX_URLS_PER_REQUEST = 500
CLIENT_ID = "rag-knowledge"
CLIENT_VERSION = "0.1.0"


class SafeBrowsingUnavailableError(Exception):
    """The API could not give a verdict (timeout, HTTP error, bad JSON)."""


class SafeBrowsingClient:
    """Checks URLs against Safe Browsing; verdicts cached (LRU, `MAX_CACHE_ENTRIES`, TTL)."""

    def __init__(
        self,
        api_key: str,
        *,
        api_url: str,
        timeout: float = 5.0,
        cache_ttl: float = 300.0,
        fail_open: bool = True,
        max_entries: int = MAX_CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_key = api_key
        self._api_url = api_url
        self._timeout = timeout
        self._ttl = cache_ttl
        self._fail_open = fail_open
        self._max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[str, tuple[str | None, float]] = OrderedDict()
        self._session: aiohttp.ClientSession | None = None
        self.api_calls = 0

    @classmethod
    def from_settings(cls, settings: RAGSettings) -> SafeBrowsingClient:
        """Build the client from `RAG_URL_SAFETY_*` / `GOOGLE_SAFE_BROWSING_API_KEY`."""
        return cls(
            settings.google_safe_browsing_api_key,
            api_url=settings.rag_url_safety_api_url,
            timeout=settings.rag_url_safety_timeout,
            cache_ttl=settings.rag_url_safety_cache_ttl,
            fail_open=settings.rag_url_safety_fail_open,
        )

    async def __aenter__(self) -> SafeBrowsingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session (if one was opened)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _cached(self, url: str) -> tuple[bool, str | None]:
        entry = self._cache.get(url)
        if entry is None:
            return False, None
        verdict, expires = entry
        if self._clock() >= expires:
            del self._cache[url]
            return False, None
        self._cache.move_to_end(url)
        return True, verdict

    def _store(self, url: str, verdict: str | None) -> None:
        if self._ttl <= 0:
            return
        self._cache[url] = (verdict, self._clock() + self._ttl)
        self._cache.move_to_end(url)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)

    async def check_many(self, urls: Iterable[str]) -> dict[str, str | None]:
        """Threat type per URL (None = no match); uncached URLs are sent in batches.

        On API failure: fail-open returns None for the unknown URLs (not cached);
        fail-closed raises `UrlRefusedError`.
        """
        verdicts: dict[str, str | None] = {}
        missing: list[str] = []
        for url in dict.fromkeys(urls):
            hit, verdict = self._cached(url)
            if hit:
                verdicts[url] = verdict
            else:
                missing.append(url)
        for start in range(0, len(missing), MAX_URLS_PER_REQUEST):
            batch = missing[start : start + MAX_URLS_PER_REQUEST]
            try:
                found = await self._lookup(batch)
            except SafeBrowsingUnavailableError as err:
                if not self._fail_open:
                    raise UrlRefusedError(
                        f"The URL safety check could not be completed ({err}) and "
                        "RAG_URL_SAFETY_FAIL_OPEN is false, so the URL is refused; try again later."
                    ) from None
                log.warning("Safe Browsing check skipped (%s); continuing (fail-open)", err)
                verdicts.update(dict.fromkeys(batch))
                continue
            for url in batch:
                verdicts[url] = found.get(url)
                self._store(url, found.get(url))
        return verdicts

    async def check(self, url: str) -> str | None:
        """The threat type Safe Browsing reports for `url`, or None."""
        return (await self.check_many([url]))[url]

    async def ensure_safe(self, url: str) -> None:
        """Raise `UrlRefusedError` naming the threat type when `url` is flagged."""
        threat = await self.check(url)
        if threat is not None:
            raise UrlRefusedError(
                f"Google Safe Browsing flags {url} as {threat}, so it is refused; "
                "do not crawl this site."
            )

    def _request_body(self, urls: list[str]) -> dict[str, object]:
        return {
            "client": {"clientId": CLIENT_ID, "clientVersion": CLIENT_VERSION},
            "threatInfo": {
                "threatTypes": list(THREAT_TYPES),
                "platformTypes": ["ANY_PLATFORM"],
                "threatEntryTypes": ["URL"],
                "threatEntries": [{"url": url} for url in urls],
            },
        }

    async def _lookup(self, urls: list[str]) -> dict[str, str]:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self.api_calls += 1
        try:
            async with self._session.post(
                self._api_url,
                params={"key": self._api_key},
                json=self._request_body(urls),
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                allow_redirects=False,
            ) as response:
                if response.status != 200:
                    raise SafeBrowsingUnavailableError(f"HTTP {response.status}")
                payload = await response.json(content_type=None)
        except TimeoutError:
            raise SafeBrowsingUnavailableError(f"timed out after {self._timeout:g} s") from None
        except (aiohttp.ClientError, ValueError) as err:
            raise SafeBrowsingUnavailableError(type(err).__name__) from None
        return _threats(payload)


def _threats(payload: object) -> dict[str, str]:
    """URL → first threat type from a `threatMatches:find` response (`{}` = all clean)."""
    if not isinstance(payload, dict):
        raise SafeBrowsingUnavailableError("unexpected response")
    matches = payload.get("matches") or []
    if not isinstance(matches, list):
        raise SafeBrowsingUnavailableError("unexpected response")
    found: dict[str, str] = {}
    for match in matches:
        if not isinstance(match, dict):
            continue
        url = (match.get("threat") or {}).get("url")
        threat = match.get("threatType")
        if isinstance(url, str) and isinstance(threat, str):
            found.setdefault(url, threat)
    return found
