"""Text an earlier crawl stored, met again under a new URL by a re-crawl.

A new page whose text a stored page holds is a duplicate only while that page still
holds it: a renamed page, or text moved to a new page, must not be skipped for a copy a
later refresh removes (the text would then be stored nowhere). `StoredCopies` keeps, per
text, the stored URLs holding it, what this crawl learnt of each (`settle`), and the new
pages waiting for that answer (`wait`).
`rag_app.site_crawl` decides when to ask and when to visit again.
"""

from __future__ import annotations

from rag_app.crawl.scope import CrawlScope, page_key
from rag_app.index.chroma_store import SourceRecord

Waiter = tuple[str, str, int, str]
"""A new page waiting on a stored one: (stored URL, the page's URL, depth, the text's
digest when the page met it)."""


class StoredCopies:
    """Stored URLs by the digest of their text, and the new pages waiting on them."""

    def __init__(self, known: dict[str, SourceRecord], scope: CrawlScope) -> None:
        self.known = known
        self._by_digest: dict[str, list[str]] = {}
        for source, record in known.items():
            if record.kind == "web" and record.content_hash and scope.admits(source):
                self._by_digest.setdefault(record.content_hash, []).append(source)
        self._holds: dict[str, bool] = {}
        """Stored URL → whether it answered this crawl with its stored text."""
        self._waiting: dict[str, list[Waiter]] = {}
        """Stored page key → the new pages waiting on it."""
        self._until_done: dict[str, list[Waiter]] = {}
        """Stored page key → the waiting pages it holds the text of, until its own visit
        ends: a stop before that asks it again, and they wait again (`finished`)."""

    def holders(self, digest: str, mine: set[str]) -> list[str]:
        """The stored URLs (other than the page's own keys) that may still hold a text."""
        return [u for u in self._by_digest.get(digest, ()) if page_key(u) not in mine]

    def holds(self, url: str) -> bool | None:
        """Whether a stored URL answered this crawl with its stored text (None: not yet)."""
        return self._holds.get(url)

    def wait(self, waiter: Waiter) -> None:
        self._waiting.setdefault(page_key(waiter[0]), []).append(waiter)

    def settle(self, url: str, holds: bool) -> tuple[list[str], list[tuple[str, int]]]:
        """Record what the stored page `url` answered (once). Returns the waiting pages it
        keeps as duplicates (it holds the text they waited for) and those to visit again
        (page URL, depth): the others (another stored spelling of the page is never
        asked: its waiters go too)."""
        if url in self._holds:
            return [], []
        self._holds[url] = holds
        record = self.known.get(url)
        digest = record.content_hash if record is not None else ""
        if not holds and digest in self._by_digest:
            self._by_digest[digest] = [u for u in self._by_digest[digest] if u != url]
        key = page_key(url)
        kept: list[Waiter] = []
        again: list[tuple[str, int]] = []
        for waiter in self._waiting.pop(key, []):
            holder, page, depth, waited = waiter
            if holds and holder == url and waited == digest:
                kept.append(waiter)
            else:
                again.append((page, depth))
        if kept:
            self._until_done[key] = kept
        return [page for _, page, _, _ in kept], again

    def finished(self, key: str) -> None:
        """The visit of the page with this key ended (its answer is durable)."""
        self._until_done.pop(key, None)

    def waiters(self) -> list[Waiter]:
        """The pages waiting on a stored page's answer, or on its visit's end."""
        return [
            w for by in (self._waiting, self._until_done) for pages in by.values() for w in pages
        ]

    def still_holding(self, waiter: Waiter) -> bool:
        """Whether a waiter's stored page is stored with the text it waited for (after a
        resume: the page may have answered, and been stored anew, before the kill)."""
        record = self.known.get(waiter[0])
        return record is not None and record.content_hash == waiter[3]


__all__ = ["StoredCopies", "Waiter"]
