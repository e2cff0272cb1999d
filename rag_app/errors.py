"""User-facing errors: each message is one sentence saying what was wrong and what to do."""

from __future__ import annotations


class RAGError(Exception):
    """Base for every error a user may see; `str(err)` is the one-line message."""


class EmptyQueryError(RAGError, ValueError):
    """The search query was empty or whitespace."""


class UnknownSourceError(RAGError, LookupError):
    """Nothing is stored under the given source URL or path."""


class EmbeddingUnavailableError(RAGError):
    """The embedding provider cannot be reached or failed after retries."""


class EmbeddingMismatchError(RAGError):
    """The collection was built with another embedding model or dimension."""


class StoreUnavailableError(RAGError):
    """The vector store (Chroma) cannot be opened or reached."""


class UrlRefusedError(RAGError, ValueError):
    """A URL was refused before any connection (scheme, private address, policy)."""


class CrawlError(RAGError):
    """A page could not be fetched or read (HTTP status, timeout, size, type)."""


class StoreBusyError(RAGError):
    """The store's folders are held by another process (its owner)."""


class ServiceError(RAGError):
    """The store service could not be started or reached."""
