"""Pinned DNS resolution for aiohttp: connect only to addresses that passed the policy.

Two gates close the DNS-rebinding window:
- `PinnedResolver` (an aiohttp `AbstractResolver`) resolves through an injectable lookup,
  checks every address and hands aiohttp only those checked addresses;
- `guarded_socket_factory` re-checks the exact socket address right before `connect()`,
  which also covers IP-literal URLs (aiohttp does not call the resolver for them).
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from rag_app.crawl.url_safety import (
    PRIVATE_NETWORK_HINT,
    AddressPolicy,
    Lookup,
    check_addresses,
    lookup_host,
)

_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV

AddrInfo = tuple[int, int, int, str, tuple[object, ...]]


class RefusedAddressError(ConnectionRefusedError):
    """Raised by the socket factory when a connection target fails the policy.

    It is an `OSError` so aiohttp wraps it like any connect failure; the fetcher
    unwraps it into `UrlRefusedError`.
    """


class PinnedResolver(AbstractResolver):
    """Resolve via `lookup`, refuse if ANY address fails the policy, return only checked ones."""

    def __init__(self, policy: AddressPolicy, lookup: Lookup | None = None) -> None:
        self._policy = policy
        self._lookup = lookup

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Return checked addresses for `host`; raise `UrlRefusedError` on any refused one."""
        addresses = check_addresses(host, await lookup_host(host, port, self._lookup), self._policy)
        results: list[ResolveResult] = []
        for address in addresses:
            addr_family = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family not in (socket.AF_UNSPEC, addr_family):
                continue
            results.append(
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=port,
                    family=addr_family,
                    proto=0,
                    flags=_NUMERIC_FLAGS,
                )
            )
        if not results:
            raise OSError(f"The host {host} has no address of the requested family.")
        return results

    async def close(self) -> None:
        """Nothing to release."""


def guarded_socket_factory(policy: AddressPolicy) -> Callable[[AddrInfo], socket.socket]:
    """A socket factory that refuses to create a socket for a refused address."""

    def factory(addr_info: AddrInfo) -> socket.socket:
        family, type_, proto, _canon, sockaddr = addr_info
        address = str(sockaddr[0])
        reason = policy.refusal(address)
        if reason is not None:
            raise RefusedAddressError(
                f"The address {address} is a {reason} address, so it is refused to protect "
                f"internal services ({PRIVATE_NETWORK_HINT})."
            )
        return socket.socket(family=family, type=type_, proto=proto)

    return factory


def build_connector(
    policy: AddressPolicy, lookup: Lookup | None = None, *, limit: int = 8
) -> aiohttp.TCPConnector:
    """A `TCPConnector` that can only reach addresses allowed by `policy`."""
    return aiohttp.TCPConnector(
        resolver=PinnedResolver(policy, lookup),
        socket_factory=guarded_socket_factory(policy),  # type: ignore[arg-type]
        use_dns_cache=False,
        limit=limit,
    )
