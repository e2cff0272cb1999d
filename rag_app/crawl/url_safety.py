"""SSRF guard: URL syntax rules and the address policy every connection must pass.

`validate_url` is synchronous (syntax, scheme, userinfo, numeric-host tricks, literal IPs);
`resolve_and_check` also resolves the host and checks EVERY address. The same
`AddressPolicy` is applied again by the pinned resolver and the socket factory
(`resolver.py`), so the connection goes only to an address that was checked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from rag_app.errors import CrawlError, UrlRefusedError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Lookup = Callable[[str, int], Awaitable[Sequence[str]]]
"""Resolve `(host, port)` to IP address strings; injectable so tests need no DNS."""

MAX_URL_LENGTH = 2048
ALLOWED_SCHEMES = frozenset({"http", "https"})
PRIVATE_NETWORK_HINT = "set RAG_ALLOW_PRIVATE_NETWORK=true only for local testing"

_net = ipaddress.ip_network

# The IANA IPv4 and IPv6 Special-Purpose Address Registries (plus multicast), reduced to
# what matters here: every range that is not globally reachable, with its RFC. The IPv6
# forms that carry an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo, ...) are decided
# by the address they carry first, in `_classify`; these tables see only the rest.

# Never reachable, whatever the settings say: nothing legitimate listens there.
_ALWAYS_REFUSED: tuple[tuple[IPNetwork, str], ...] = (
    (_net("0.0.0.0/8"), "unspecified (0.0.0.0/8)"),  # RFC 791 §3.2, RFC 1122 ("this network")
    (_net("224.0.0.0/4"), "multicast"),  # RFC 5771
    (_net("255.255.255.255/32"), "broadcast"),  # RFC 919, RFC 8190
    (_net("240.0.0.0/4"), "reserved (240.0.0.0/4)"),  # RFC 1112
    (_net("::/128"), "unspecified (::)"),  # RFC 4291
    (_net("ff00::/8"), "multicast"),  # RFC 4291
    (_net("100::/64"), "discard-only (RFC 6666)"),  # RFC 6666: a black hole by design
)

# Not globally reachable: refused unless RAG_ALLOW_PRIVATE_NETWORK is on (or the network
# is listed in `allowed_networks`). Benchmarking and documentation ranges are here, not
# above, because labs and fake-IP DNS setups really use them.
_PRIVATE: tuple[tuple[IPNetwork, str], ...] = (
    (_net("127.0.0.0/8"), "loopback"),  # RFC 1122
    (_net("10.0.0.0/8"), "private (RFC 1918)"),
    (_net("172.16.0.0/12"), "private (RFC 1918)"),
    (_net("192.168.0.0/16"), "private (RFC 1918)"),
    (_net("169.254.0.0/16"), "link-local (cloud metadata)"),  # RFC 3927
    (_net("100.64.0.0/10"), "carrier-grade NAT (100.64.0.0/10)"),  # RFC 6598
    # RFC 6890; its few anycast service addresses (192.0.0.9, .10) serve no web pages.
    (_net("192.0.0.0/24"), "IETF protocol assignment (RFC 6890)"),
    (_net("192.0.2.0/24"), "documentation (RFC 5737)"),
    (_net("198.51.100.0/24"), "documentation (RFC 5737)"),
    (_net("203.0.113.0/24"), "documentation (RFC 5737)"),
    (_net("198.18.0.0/15"), "benchmarking (RFC 2544)"),
    (_net("192.88.99.0/24"), "deprecated 6to4 relay anycast (RFC 7526)"),
    (_net("::1/128"), "IPv6 loopback"),  # RFC 4291
    (_net("fc00::/7"), "IPv6 unique-local"),  # RFC 4193
    (_net("fe80::/10"), "IPv6 link-local"),  # RFC 4291
    (_net("fec0::/10"), "IPv6 site-local"),  # RFC 3879 (deprecated)
    (_net("2001:2::/48"), "IPv6 benchmarking (RFC 5180)"),
    (_net("2001:db8::/32"), "IPv6 documentation (RFC 3849)"),
    (_net("3fff::/20"), "IPv6 documentation (RFC 9637)"),
    # RFC 2928 (ORCHID, AMT, AS112, anycast services inside); Teredo 2001::/32 is decided
    # by the address it carries before this line is reached.
    (_net("2001::/23"), "IPv6 IETF protocol assignment (RFC 2928)"),
    (_net("5f00::/16"), "SRv6 segment identifier (RFC 9602)"),
)

# Outside 2000::/3 IPv6 is unassigned or special (RFC 4291); what is special and used is
# matched above or in `_embedded_ipv4` first, so anything else left there is refused.
_GLOBAL_UNICAST = _net("2000::/3")

_MAPPED = _net("::ffff:0:0/96")  # RFC 4291: the IPv4 address itself, on a dual-stack socket
_TRANSLATED = _net("::ffff:0:0:0/96")  # RFC 2765 (SIIT)
_COMPATIBLE = _net("::/96")  # RFC 4291 §2.5.5.1 (deprecated); :: and ::1 are not in it
_NAT64 = _net("64:ff9b::/96")  # RFC 6052, globally reachable
_LOCAL_NAT64 = _net("64:ff9b:1::/48")  # RFC 8215, not globally reachable
_SIX_TO_FOUR = _net("2002::/16")  # RFC 3056
_TEREDO = _net("2001::/32")  # RFC 4380: client address = complement of the last 32 bits

# A form carrying a PUBLIC IPv4 address is still refused when the form itself is not
# globally reachable. IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 wrapping a public address
# are allowed: they reach that public host (6to4 through public relays, NAT64 through a
# translator the network operator runs), so refusing them would only break IPv6-only
# networks. Teredo is refused whatever it carries: 2001::/32 lies in 2001::/23, which is not
# globally reachable, and the Teredo service is obsolete.
_FORM_REFUSAL = {
    "IPv4-compatible": "deprecated IPv4-compatible IPv6",
    "IPv4-translated": "IPv4-translated IPv6 (RFC 2765)",
    "local-use NAT64": "local-use NAT64 (RFC 8215)",
    "Teredo": "Teredo (RFC 4380)",
}

_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
_CANONICAL_OCTET = re.compile(r"^(?:0|[1-9][0-9]{0,2})$")
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_LOCALHOST_NAMES = frozenset(
    {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


@dataclass(frozen=True)
class AddressPolicy:
    """Which IP addresses may be connected to.

    `allow_private` opens every range that is not globally reachable (loopback, RFC 1918,
    link-local, CGNAT, ULA, documentation, benchmarking, ...; local testing);
    `allowed_networks` opens only the listed networks (e.g. one internal wiki host).
    Unspecified, multicast, broadcast, reserved and discard-only addresses are always
    refused, and so is an IPv6 form carrying such an IPv4 address.
    """

    allow_private: bool = False
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def build(
        cls, allow_private: bool = False, allowed_networks: Iterable[str] = ()
    ) -> AddressPolicy:
        """Create a policy, parsing network strings like `10.1.2.0/24`."""
        try:
            nets = tuple(ipaddress.ip_network(n, strict=False) for n in allowed_networks)
        except ValueError as err:
            raise UrlRefusedError(
                f"Invalid allowed network ({err}); use CIDR like 10.1.2.0/24."
            ) from None
        return cls(allow_private=allow_private, allowed_networks=nets)

    def refusal(self, address: str | IPAddress) -> str | None:
        """Why `address` must not be contacted (a short label), or None when it may be."""
        ip = address if not isinstance(address, str) else _parse_ip(address)
        if ip is None:
            return "not a valid IP address"
        label, always = _classify(ip)
        if label is None:
            return None
        if always:
            return label
        if self.allow_private or any(ip in net for net in self.allowed_networks):
            return None
        return label


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _article(label: str) -> str:
    return "an" if label[:1].lower() in "aeiou" else "a"


def _classify(ip: IPAddress) -> tuple[str | None, bool]:
    """Return (label, always_refused) for a non-public address, (None, False) for public."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded, form = _embedded_ipv4(ip)
        if embedded is not None:
            inner, always = _classify(embedded)
            if inner is not None:
                return f"{form} form of {_article(inner)} {inner}", always
            return _FORM_REFUSAL.get(form), False
    for net, label in _ALWAYS_REFUSED:
        if ip.version == net.version and ip in net:
            return label, True
    for net, label in _PRIVATE:
        if ip.version == net.version and ip in net:
            return label, False
    if ip.version == 6 and ip not in _GLOBAL_UNICAST:
        return "reserved IPv6 (outside 2000::/3)", True
    if not ip.is_global:
        return "special-purpose (non-public)", False
    return None, False


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address | None, str]:
    """The IPv4 address hidden in an IPv6 address, and the name of the form hiding it.

    Local-use NAT64 is read with the /96 layout only (RFC 6052 allows others); the whole
    /48 is refused anyway unless private networks are allowed.
    """
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _MAPPED:
        return low32, "IPv4-mapped"
    if ip in _TRANSLATED:
        return low32, "IPv4-translated"
    if ip in _COMPATIBLE and int(ip) > 1:
        return low32, "IPv4-compatible"
    if ip in _NAT64:
        return low32, "NAT64"
    if ip in _LOCAL_NAT64:
        return low32, "local-use NAT64"
    if ip in _SIX_TO_FOUR:
        return ip.sixtofour, "6to4"
    if ip in _TEREDO:
        return ipaddress.IPv4Address(~int(ip) & 0xFFFFFFFF), "Teredo"
    return None, ""


def _refuse_address(host: str, ip: str, label: str, *, literal: bool) -> UrlRefusedError:
    where = f"The address {ip}" if literal else f"The host {host} resolves to {ip}, which"
    return UrlRefusedError(
        f"{where} is {_article(label)} {label} address, so it is refused to protect internal "
        f"services ({PRIVATE_NETWORK_HINT})."
    )


def check_addresses(host: str, addresses: Sequence[str], policy: AddressPolicy) -> list[str]:
    """Check every resolved address; return them normalised or raise `UrlRefusedError`."""
    if not addresses:
        raise CrawlError(f"The host {host} did not resolve to any address; check the URL.")
    checked: list[str] = []
    for raw in addresses:
        ip = _parse_ip(raw)
        if ip is None:
            raise UrlRefusedError(
                f"The host {host} resolved to {raw!r}, which is not an IP address."
            )
        reason = policy.refusal(ip)
        if reason is not None:
            raise _refuse_address(host, str(ip), reason, literal=False)
        if str(ip) not in checked:
            checked.append(str(ip))
    return checked


def _check_numeric_host(host: str) -> None:
    """Refuse IPv4 written in decimal/octal/hex/short forms (`127.1`, `0x7f000001`, ...)."""
    labels = host.split(".")
    if not _NUMERIC_LABEL.match(labels[-1]):
        return
    canonical = len(labels) == 4 and all(
        _CANONICAL_OCTET.match(part) and int(part) <= 255 for part in labels
    )
    if not canonical:
        raise UrlRefusedError(
            f"The host {host} is an IP address in a non-standard numeric form; "
            "write it as four decimal numbers like 93.184.216.34."
        )


def _normalise_host(raw_host: str, bracketed: bool) -> tuple[str, IPAddress | None]:
    """Return (ASCII host for the URL, literal IP or None); raise on anything odd."""
    if bracketed:
        if "%" in raw_host:
            raise UrlRefusedError("IPv6 zone identifiers are not allowed in URLs to crawl.")
        try:
            ip6 = ipaddress.IPv6Address(raw_host)
        except ValueError:
            raise UrlRefusedError(f"The host [{raw_host}] is not a valid IPv6 address.") from None
        return f"[{ip6.compressed}]", ip6
    host = raw_host.lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise UrlRefusedError(f"The host {raw_host} is not a valid host name.") from None
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise UrlRefusedError(
            "The URL has no host name; give a full URL like https://example.com/page."
        )
    _check_numeric_host(host)
    labels = host.split(".")
    if len(labels) == 4 and all(_CANONICAL_OCTET.match(p) for p in labels):
        return host, ipaddress.IPv4Address(host)
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        raise UrlRefusedError(f"The host {raw_host} is not a valid host name.")
    return host, None


@dataclass(frozen=True)
class CheckedUrl:
    """A syntactically safe URL: normalised text plus its parts."""

    url: str
    scheme: str
    host: str
    """Host as used for DNS/connection (IPv6 without brackets)."""
    port: int
    literal_ip: IPAddress | None


def parse_url(url: str, policy: AddressPolicy | None = None) -> CheckedUrl:
    """Validate syntax and literal IPs; return the normalised URL and its parts."""
    policy = policy or AddressPolicy()
    if not isinstance(url, str) or not url.strip():
        raise UrlRefusedError("The URL is empty; give a full URL like https://example.com/page.")
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        raise UrlRefusedError(
            f"The URL is longer than {MAX_URL_LENGTH} characters; use a shorter URL."
        )
    if _CONTROL.search(url):
        raise UrlRefusedError("The URL contains control characters (tab, newline, …); remove them.")
    if "\\" in url.split("?", 1)[0].split("#", 1)[0]:
        raise UrlRefusedError("The URL contains a backslash before its query; use forward slashes.")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise UrlRefusedError(f"The URL {url[:200]} cannot be parsed; check its syntax.") from None
    scheme = parts.scheme.lower()
    if not scheme:  # a word, a bare host or a path: no scheme to name
        raise UrlRefusedError(
            f"{url[:200]!r} is not an http(s) URL: it has no scheme (http:// or https://); "
            "give a full URL like https://example.com/page."
        )
    if scheme not in ALLOWED_SCHEMES:
        # shared by every tool that takes a URL (add, crawl, the redirect check)
        raise UrlRefusedError(f"Only http and https URLs are accepted, not scheme '{scheme}'.")
    netloc = parts.netloc
    if "@" in netloc:
        raise UrlRefusedError(
            "URLs with a user name or password (user@host) are refused; remove the part before '@'."
        )
    hostport = netloc
    bracketed = hostport.startswith("[")
    if bracketed:
        end = hostport.find("]")
        if end < 0:
            raise UrlRefusedError("The URL has an unterminated IPv6 address; check its syntax.")
        raw_host, rest = hostport[1:end], hostport[end + 1 :]
    else:
        raw_host, colon, port_text = hostport.partition(":")
        rest = f"{colon}{port_text}"
    if not raw_host:
        raise UrlRefusedError(
            "The URL has no host name; give a full URL like https://example.com/page."
        )
    port: int | None = None
    if rest:
        if not rest.startswith(":") or not rest[1:].isdigit() or not 0 < int(rest[1:]) < 65536:
            raise UrlRefusedError(
                f"The URL port {rest[1:] or '(empty)'} is not a valid port number."
            )
        port = int(rest[1:])
    host, literal = _normalise_host(raw_host, bracketed)
    loopback_name = host in _LOCALHOST_NAMES or host.endswith(".localhost")
    if literal is None and loopback_name and not policy.allow_private:
        raise UrlRefusedError(
            f"The host {host} is a loopback name, so it is refused to protect internal "
            f"services ({PRIVATE_NETWORK_HINT})."
        )
    if literal is not None:
        reason = policy.refusal(literal)
        if reason is not None:
            raise _refuse_address(host, str(literal), reason, literal=True)
    default_port = 443 if scheme == "https" else 80
    effective_port = port or default_port
    port_part = "" if effective_port == default_port else f":{effective_port}"
    path = quote(parts.path, safe=_PATH_SAFE) or "/"
    query = quote(parts.query, safe=_QUERY_SAFE)
    normalised = f"{scheme}://{host}{port_part}{path}" + (f"?{query}" if query else "")
    if len(normalised) > MAX_URL_LENGTH:
        raise UrlRefusedError(
            f"The URL is longer than {MAX_URL_LENGTH} characters; use a shorter URL."
        )
    return CheckedUrl(
        url=normalised,
        scheme=scheme,
        host=host.strip("[]"),
        port=effective_port,
        literal_ip=literal,
    )


def validate_url(url: str, policy: AddressPolicy | None = None) -> str:
    """Return the normalised URL (fragment removed) or raise `UrlRefusedError` with the reason."""
    return parse_url(url, policy).url


async def system_lookup(host: str, port: int) -> list[str]:
    """Resolve with the operating system (getaddrinfo in a thread)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in seen:
            seen.append(address)
    return seen


async def lookup_host(host: str, port: int, lookup: Lookup | None = None) -> list[str]:
    """Resolve a host name, turning resolver failures into one clear `CrawlError`."""
    try:
        return list(await (lookup or system_lookup)(host, port))
    except (OSError, UnicodeError) as err:
        raise CrawlError(f"The host {host} could not be resolved ({err}); check the URL.") from None


async def resolve_and_check(
    url: str, *, lookup: Lookup | None = None, policy: AddressPolicy | None = None
) -> tuple[str, list[str]]:
    """Validate the URL, resolve its host and check EVERY address.

    Returns `(normalised_url, checked_addresses)`; raises `UrlRefusedError` when the URL
    or any address is refused and `CrawlError` when the host does not resolve.
    """
    policy = policy or AddressPolicy()
    checked = parse_url(url, policy)
    if checked.literal_ip is not None:
        return checked.url, [str(checked.literal_ip)]
    addresses = await lookup_host(checked.host, checked.port, lookup)
    return checked.url, check_addresses(checked.host, addresses, policy)
