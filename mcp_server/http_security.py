"""Who may talk to `rag-mcp` over streamable HTTP.

On every bind address the Host and Origin headers are checked (DNS-rebinding
defence): loopback names on a loopback bind; the bind address plus the names in
RAG_MCP_ALLOWED_HOSTS otherwise. A bearer token (RAG_MCP_TOKEN) is checked on every
request when set, and is required before the server binds a non-loopback address.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


class TokenMissingError(ValueError):
    """A non-loopback bind without RAG_MCP_TOKEN."""


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def transport_security(host: str, port: int, extra_hosts: list[str]) -> TransportSecuritySettings:
    """Host/Origin allow-lists for this bind (never disabled)."""
    names = ["127.0.0.1", "localhost", "::1"] if host in LOOPBACK_HOSTS else [host]
    names += [h.strip() for h in extra_hosts if h.strip()]
    hosts, origins = [], []
    for name in dict.fromkeys(names):
        shown = _bracket(name)
        hosts += [f"{shown}:{port}", shown] if name not in LOOPBACK_HOSTS else [f"{shown}:*"]
        for scheme in ("http", "https"):
            origins += [f"{scheme}://{shown}:{port}", f"{scheme}://{shown}"]
            if name in LOOPBACK_HOSTS:
                origins.append(f"{scheme}://{shown}:*")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


MIN_TOKEN_CHARS = 16


def require_token_for(host: str, token: str) -> None:
    """Refuse a bind off loopback without a token, and any token too weak to be one (a
    blank or one-character token satisfied the rule)."""
    if host not in LOOPBACK_HOSTS and not token:
        raise TokenMissingError(
            f"binding {host} lets other machines add and delete knowledge; set RAG_MCP_TOKEN "
            "(clients send it as 'Authorization: Bearer <token>') or bind 127.0.0.1."
        )
    if token and (len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token)):
        raise TokenMissingError(
            f"RAG_MCP_TOKEN must be at least {MIN_TOKEN_CHARS} characters without spaces "
            "(for example `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)."
        )


def with_bearer_token(app: ASGIApp, token: str) -> ASGIApp:
    """Wrap an ASGI app so that every HTTP request must carry `Authorization: Bearer token`."""
    expected = token.encode()

    async def guarded(scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, credentials = given.partition(b" ")
            # the scheme's name is case-insensitive (RFC 9110 §11.1): `bearer` is `Bearer`
            right = scheme.lower() == b"bearer" and hmac.compare_digest(credentials, expected)
            if not right:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b"missing or wrong token\n"})
                return
        await app(scope, receive, send)

    return guarded
