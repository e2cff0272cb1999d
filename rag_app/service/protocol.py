"""What owner and clients agree on: the wire format, errors, and the settings fingerprint.

Every endpoint answers a stream of JSON lines: `{"progress": [done, total]}` while it
works, `{"waiting": {"kind", "done", "total"}}` while a write waits behind a restore or a
reindex (`{"waiting": null}` once it has its turn), `{"heartbeat": true}` when nothing
else was said for a while, then one `{"result": ...}` or `{"error": {"type", "message",
"status"}}`. A client ignores the kinds of line it does not know.
Light on purpose: clients import this without LlamaIndex or Chroma.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from rag_app import errors
from rag_app.config import RETRIEVAL_SETTINGS, RAGSettings

API = "/v1"
TOKEN_HEADER = "Authorization"
PROTOCOL_VERSION = 1

_FOLDERS = ("chromadb_persist_dir", "bm25_persist_dir")  # compared as absolute paths
_SECRETS = ("openai_api_key", "google_safe_browsing_api_key", "rag_mcp_token")
# Shape one query or one client only: never a reason to restart the owner.
_CLIENT_ONLY = frozenset(
    {
        *RETRIEVAL_SETTINGS,
        "rag_service_idle_sec",
        "rag_service_start_timeout_sec",
        "rag_mcp_token",
        "rag_mcp_allowed_hosts",
    }
)


STOPPING_STATUS = 503
"""The answer to a request that arrives once the service is stopping: not started, so the
client sends it to the next owner. Taken before, such requests kept a stop busy for its
whole 10 s grace (807 adds and 769 searches in one test), and the last were cut off."""


def fingerprint(settings: RAGSettings) -> dict[str, str]:
    """The settings the owner runs with, as strings (secrets hashed)."""
    out: dict[str, str] = {}
    for name, value in sorted(settings.model_dump().items()):
        if name in _CLIENT_ONLY:
            continue
        if name in _FOLDERS and value:
            value = str(Path(value).expanduser().resolve())
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        if name in _SECRETS and value:
            text = "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]
        out[name] = text
    return out


def differences(mine: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """Setting names (as environment variables) whose values differ."""
    names = sorted(set(mine) | set(theirs))
    return [n.upper() for n in names if mine.get(n) != theirs.get(n)]


def retrieval_options(settings: RAGSettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in RETRIEVAL_SETTINGS}


def line(kind: str, value: Any) -> bytes:
    # "replace": a lone surrogate (a file name's byte that is not UTF-8, in a message)
    # becomes "?" instead of failing the reply
    return json.dumps({kind: value}, ensure_ascii=False).encode("utf-8", "replace") + b"\n"


def error_payload(err: BaseException) -> dict[str, Any]:
    """An exception as the wire's error object (one sentence, type name, HTTP status)."""
    status = getattr(err, "status", None)
    return {
        "type": type(err).__name__,
        "message": str(err) or type(err).__name__,
        "status": status if isinstance(status, int) else None,
        "user_error": isinstance(err, errors.RAGError),
    }


class RemoteError(errors.RAGError):
    """An error the owner reported; `status` keeps the HTTP status of a failed fetch."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


_TYPES: dict[str, type[errors.RAGError]] = {
    cls.__name__: cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.RAGError)
}
_CRAWL_TYPES = {
    "HttpStatusError",
    "RedirectNotFollowedError",
    "CrawlTimeoutError",
    "RobotsBlockedError",
    "PageTooLargeError",
    "UnsupportedContentTypeError",
}


def error_from(payload: dict[str, Any]) -> errors.RAGError:
    """Rebuild a user-facing error on the client side (same class where it is plain)."""
    name = str(payload.get("type", ""))
    message = str(payload.get("message", "The store service failed."))
    status = payload.get("status")
    cls = _TYPES.get(name)
    if cls is not None and cls.__init__ is errors.RAGError.__init__:
        err = cls(message)
        err.status = status  # type: ignore[attr-defined]
        return err
    if name in _CRAWL_TYPES or name == "InvalidPatternError":
        err = errors.CrawlError(message)
        err.status = status  # type: ignore[attr-defined]
        return err
    if not payload.get("user_error"):
        message = f"The store service failed ({name}: {message}); see its log."
    return RemoteError(message, status if isinstance(status, int) else None)


def proof(token: str, nonce: str) -> str:
    """What only the holder of the owner's token can answer to a client's nonce."""
    return hmac.new(token.encode(), nonce.encode(), hashlib.sha256).hexdigest()
