"""SSRF guard: URL syntax, address policy, pinned resolver, and end-to-end refusals.

No real DNS: host names resolve through a stub lookup. End-to-end tests run a real
server on loopback and prove a refused URL made no request and no connection.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

import aiohttp
import pytest
from test_crawl_site_helper import LocalSite, crawl_settings

from rag_app.crawl.crawler import WebCrawler
from rag_app.crawl.resolver import PinnedResolver, guarded_socket_factory
from rag_app.crawl.url_safety import AddressPolicy, resolve_and_check, validate_url
from rag_app.errors import CrawlError, UrlRefusedError

STUB_DNS: dict[str, list[str]] = {
    "public.test": ["93.184.216.34"],
    "public6.test": ["2606:2800:220:1:248:1893:25c8:1946"],
    "evil.test": ["127.0.0.1"],
    "ten.test": ["10.0.0.1"],
    "rfc1918.test": ["172.16.5.4"],
    "home.test": ["192.168.1.1"],
    "metadata.test": ["169.254.169.254"],
    "cgnat.test": ["100.64.0.1"],
    "zero.test": ["0.0.0.0"],
    "v6loop.test": ["::1"],
    "ula.test": ["fc00::1"],
    "linklocal6.test": ["fe80::1"],
    "sitelocal.test": ["fec0::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "nat64.test": ["64:ff9b::7f00:1"],
    "multicast.test": ["224.0.0.1"],
    "mixed.test": ["93.184.216.34", "10.0.0.1"],
    "translated.test": ["::ffff:0:7f00:1"],
    "teredo.test": ["2001:0:4136:e378:8000:63bf:80ff:fffe"],
}


async def stub_lookup(host: str, port: int) -> list[str]:
    """Resolve from STUB_DNS only; unknown names fail like a real resolver would."""
    try:
        return STUB_DNS[host]
    except KeyError:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None


# -- validate_url: normalisation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com/page#section", "https://example.com/page"),
        ("HTTPS://Example.COM:443/a?b=1#c", "https://example.com/a?b=1"),
        ("http://example.com:8080", "http://example.com:8080/"),
        ("http://example.com./x", "http://example.com/x"),
        ("  https://example.com/  ", "https://example.com/"),
        ("https://例え.jp/ページ", "https://xn--r8jz45g.jp/%E3%83%9A%E3%83%BC%E3%82%B8"),
        ("https://example.com/a%20b", "https://example.com/a%20b"),
        (
            "https://example.com/a b?q=日本 語",
            "https://example.com/a%20b?q=%E6%97%A5%E6%9C%AC%20%E8%AA%9E",
        ),
        ("http://93.184.216.34/", "http://93.184.216.34/"),
        ("http://[2606:2800:220:1::1]:8443/", "http://[2606:2800:220:1::1]:8443/"),
    ],
)
def test_validate_url_normalises(url: str, expected: str) -> None:
    assert validate_url(url) == expected


def test_anchor_variants_normalise_to_one_url() -> None:
    assert validate_url("https://example.com/p#a") == validate_url("https://example.com/p#b")


# -- the hostile table (≥30 inputs) ------------------------------------------------------------

HOSTILE: list[tuple[str, str]] = [
    # schemes
    ("file:///etc/passwd", r"not scheme 'file'"),
    ("ftp://example.com/pub/", r"not scheme 'ftp'"),
    ("javascript:alert(1)", r"not scheme 'javascript'"),
    ("gopher://example.com:70/_evil", r"not scheme 'gopher'"),
    ("data:text/html,<h1>hi</h1>", r"not scheme 'data'"),
    ("//example.com/no-scheme", r"'//example.com/no-scheme' is not an http\(s\) URL: it has no"),
    (
        "not a url",
        r"^'not a url' is not an http\(s\) URL: it has no scheme \(http:// or https://\)",
    ),
    ("example.com/page", r"not an http\(s\) URL: it has no scheme"),
    # structure
    ("http:///just-a-path", r"no host name"),
    ("http://:80/", r"no host name"),
    ("https://example.com/" + "a" * 2100, r"longer than 2048"),
    ("http://example.com@127.0.0.1/", r"user name or password"),
    ("http://user:secret@example.com/", r"user name or password"),
    ("http://exa\tmple.com/", r"control characters"),
    ("http://exa mple.com/", r"not a valid host name"),
    ("http://example.com:99999/", r"not a valid port"),
    ("http://127.0.0.1\\@example.com/", r"backslash"),
    ("http://[fe80::1%25eth0]/", r"zone identifiers"),
    # literal loopback and numeric tricks
    ("http://127.0.0.1/", r"loopback"),
    ("http://127.1/", r"non-standard numeric form"),
    ("http://0x7f000001/", r"non-standard numeric form"),
    ("http://2130706433/", r"non-standard numeric form"),
    ("http://0177.0.0.1/", r"non-standard numeric form"),
    ("http://127.000.000.001/", r"non-standard numeric form"),
    ("http://１２７.０.０.１/", r"loopback"),
    ("http://localhost/", r"loopback name"),
    ("http://LOCALHOST./admin", r"loopback name"),
    ("http://app.localhost/", r"loopback name"),
    ("http://[::1]/", r"IPv6 loopback"),
    ("http://0.0.0.0/", r"unspecified"),
    ("http://[::]/", r"unspecified"),
    # literal private / special ranges
    ("http://10.0.0.1/", r"private \(RFC 1918\)"),
    ("http://172.31.255.255/", r"private \(RFC 1918\)"),
    ("http://192.168.0.1/router", r"private \(RFC 1918\)"),
    ("http://169.254.169.254/latest/meta-data/", r"link-local"),
    ("http://100.64.0.1/", r"carrier-grade NAT"),
    ("http://224.0.0.1/", r"multicast"),
    ("http://255.255.255.255/", r"broadcast"),
    ("http://[fc00::1]/", r"unique-local"),
    ("http://[fe80::1]/", r"IPv6 link-local"),
    ("http://[fec0::1]/", r"site-local"),
    ("http://[::ffff:127.0.0.1]/", r"IPv4-mapped form of a loopback"),
    ("http://[::ffff:169.254.169.254]/", r"IPv4-mapped form of a link-local"),
    ("http://[::127.0.0.1]/", r"IPv4-compatible form of a loopback"),
    ("http://[64:ff9b::7f00:1]/", r"NAT64 form of a loopback"),
    ("http://[2002:a00:1::]/", r"6to4 form of a private"),
    ("http://[::ffff:0:7f00:1]/", r"IPv4-translated form of a loopback"),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", r"Teredo form of a loopback"),
    ("http://[64:ff9b:1::a9fe:a9fe]/", r"local-use NAT64 form of a link-local"),
    ("http://192.0.2.10/", r"documentation \(RFC 5737\)"),
    # host names that resolve (stub) to internal addresses: EVERY address is checked
    ("http://evil.test/", r"evil.test resolves to 127.0.0.1.*loopback"),
    ("http://ten.test/", r"resolves to 10.0.0.1.*RFC 1918"),
    ("http://rfc1918.test/", r"resolves to 172.16.5.4.*RFC 1918"),
    ("http://home.test/", r"resolves to 192.168.1.1.*RFC 1918"),
    ("http://metadata.test/latest/meta-data/", r"169.254.169.254.*link-local"),
    ("http://cgnat.test/", r"100.64.0.1.*carrier-grade NAT"),
    ("http://zero.test/", r"0.0.0.0.*unspecified"),
    ("http://v6loop.test/", r"resolves to ::1.*IPv6 loopback"),
    ("http://ula.test/", r"fc00::1.*unique-local"),
    ("http://linklocal6.test/", r"fe80::1.*IPv6 link-local"),
    ("http://sitelocal.test/", r"fec0::1.*site-local"),
    ("http://mapped.test/", r"::ffff:7f00:1.*IPv4-mapped form of a loopback"),
    ("http://nat64.test/", r"64:ff9b::7f00:1.*NAT64 form of a loopback"),
    ("http://multicast.test/", r"224.0.0.1.*multicast"),
    ("http://translated.test/", r"::ffff:0:7f00:1.*IPv4-translated form of a loopback"),
    ("http://teredo.test/", r"Teredo form of a loopback"),
    ("http://mixed.test/", r"resolves to 10.0.0.1.*RFC 1918"),
]


def test_hostile_table_is_large_enough() -> None:
    assert len(HOSTILE) >= 30


@pytest.mark.parametrize(("url", "reason"), HOSTILE)
async def test_resolve_and_check_refuses(url: str, reason: str) -> None:
    with pytest.raises(UrlRefusedError, match=reason) as caught:
        await resolve_and_check(url, lookup=stub_lookup)
    message = str(caught.value)
    assert message.endswith(".") and "\n" not in message


async def test_resolve_and_check_accepts_public_hosts() -> None:
    assert await resolve_and_check("http://public.test/a#b", lookup=stub_lookup) == (
        "http://public.test/a",
        ["93.184.216.34"],
    )
    _url, addresses = await resolve_and_check("https://public6.test/", lookup=stub_lookup)
    assert addresses == ["2606:2800:220:1:248:1893:25c8:1946"]
    # NAT64/6to4 forms of PUBLIC IPv4 addresses are ordinary public addresses.
    assert (await resolve_and_check("http://[64:ff9b::5db8:d822]/"))[1] == ["64:ff9b::5db8:d822"]


async def test_unresolvable_host_is_a_crawl_error_not_a_crash() -> None:
    with pytest.raises(CrawlError, match="could not be resolved"):
        await resolve_and_check("http://nowhere.test/", lookup=stub_lookup)


# -- the special-purpose address registries: one case per range ------------------------------

# (an address inside the range, the reason given, refused even with RAG_ALLOW_PRIVATE_NETWORK)
SPECIAL_RANGES: list[tuple[str, str, bool]] = [
    ("0.1.2.3", r"unspecified \(0\.0\.0\.0/8\)", True),
    ("10.255.0.1", r"private \(RFC 1918\)", False),
    ("100.127.255.254", r"carrier-grade NAT", False),
    ("127.255.255.254", r"loopback", False),
    ("169.254.1.1", r"link-local", False),
    ("172.20.0.1", r"private \(RFC 1918\)", False),
    ("192.0.0.9", r"IETF protocol assignment \(RFC 6890\)", False),
    ("192.0.2.1", r"documentation \(RFC 5737\)", False),
    ("192.88.99.1", r"6to4 relay anycast \(RFC 7526\)", False),
    ("192.168.255.1", r"private \(RFC 1918\)", False),
    ("198.19.255.1", r"benchmarking \(RFC 2544\)", False),
    ("198.51.100.7", r"documentation \(RFC 5737\)", False),
    ("203.0.113.7", r"documentation \(RFC 5737\)", False),
    ("239.255.255.250", r"multicast", True),
    ("250.1.2.3", r"reserved \(240\.0\.0\.0/4\)", True),
    ("255.255.255.255", r"broadcast", True),
    ("::", r"unspecified \(::\)", True),
    ("::1", r"IPv6 loopback", False),
    ("100::1", r"discard-only \(RFC 6666\)", True),
    ("2001:2::1", r"IPv6 benchmarking \(RFC 5180\)", False),
    ("2001:4:112::1", r"IPv6 IETF protocol assignment \(RFC 2928\)", False),
    ("2001:db8::1", r"IPv6 documentation \(RFC 3849\)", False),
    ("3fff:fff::1", r"IPv6 documentation \(RFC 9637\)", False),
    ("5f00::1", r"SRv6 segment identifier \(RFC 9602\)", False),
    ("fd12:3456::1", r"IPv6 unique-local", False),
    ("febf::1", r"IPv6 link-local", False),
    ("fec0::1", r"IPv6 site-local", False),
    ("ff02::1", r"multicast", True),
    ("4000::1", r"reserved IPv6 \(outside 2000::/3\)", True),
    ("100:0:0:1::1", r"reserved IPv6 \(outside 2000::/3\)", True),
]


def literal_url(address: str) -> str:
    return f"http://[{address}]/" if ":" in address else f"http://{address}/"


@pytest.mark.parametrize(("address", "reason", "always"), SPECIAL_RANGES)
def test_special_purpose_range_is_refused(address: str, reason: str, always: bool) -> None:
    with pytest.raises(UrlRefusedError, match=reason) as caught:
        validate_url(literal_url(address))
    message = str(caught.value)
    assert message.endswith(".") and "\n" not in message
    opened = AddressPolicy(allow_private=True).refusal(address)
    assert (opened is not None) is always, opened


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "172.32.0.1",  # just past 172.16.0.0/12
        "100.128.0.1",  # just past 100.64.0.0/10
        "192.0.3.1",
        "192.88.98.1",
        "198.20.0.1",  # just past 198.18.0.0/15
        "198.51.101.1",
        "203.0.114.1",
        "223.255.255.254",
        "192.31.196.1",  # AS112 (RFC 7535): globally reachable
        "2606:2800:220:1:248:1893:25c8:1946",
        "2001:200::1",  # just past 2001::/23
        "2001:db9::1",
        "3fff:1000::1",  # just past 3fff::/20
    ],
)
def test_public_neighbours_of_special_ranges_are_allowed(address: str) -> None:
    assert AddressPolicy().refusal(address) is None
    assert validate_url(literal_url(address)) == literal_url(address)


# IPv6 forms that carry an IPv4 address: refused whenever the IPv4 address would be.
# (address, reason, refused even with RAG_ALLOW_PRIVATE_NETWORK)
EMBEDDED_REFUSED: list[tuple[str, str, bool]] = [
    ("::ffff:127.0.0.1", r"IPv4-mapped form of a loopback", False),
    ("::ffff:10.0.0.1", r"IPv4-mapped form of a private \(RFC 1918\)", False),
    ("::ffff:0.0.0.0", r"IPv4-mapped form of an unspecified", True),
    ("::ffff:0:7f00:1", r"IPv4-translated form of a loopback", False),  # RFC 2765
    ("::ffff:0:a9fe:a9fe", r"IPv4-translated form of a link-local", False),
    ("::ffff:0:e000:1", r"IPv4-translated form of a multicast", True),
    ("::7f00:1", r"IPv4-compatible form of a loopback", False),
    ("::c0a8:101", r"IPv4-compatible form of a private", False),
    ("64:ff9b::7f00:1", r"NAT64 form of a loopback", False),
    ("64:ff9b::c0a8:101", r"NAT64 form of a private", False),
    ("64:ff9b::e000:1", r"NAT64 form of a multicast", True),
    ("64:ff9b:1::7f00:1", r"local-use NAT64 form of a loopback", False),
    ("64:ff9b:1:ab::ffff:ffff", r"local-use NAT64 form of a broadcast", True),
    ("2002:7f00:1::", r"6to4 form of a loopback", False),
    ("2002:a9fe:a9fe::1", r"6to4 form of a link-local", False),
    ("2002:0:1::", r"6to4 form of an unspecified", True),
    # Teredo: the client address is the complement of the last 32 bits.
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", r"Teredo form of a loopback", False),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", r"Teredo form of a private", False),
    ("2001:0:4136:e378:8000:63bf:ffff:ffff", r"Teredo form of an unspecified", True),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", r"Teredo form of a documentation", False),
]


@pytest.mark.parametrize(("address", "reason", "always"), EMBEDDED_REFUSED)
def test_ipv6_form_of_a_refused_ipv4_is_refused(address: str, reason: str, always: bool) -> None:
    with pytest.raises(UrlRefusedError, match=reason):
        validate_url(literal_url(address))
    opened = AddressPolicy(allow_private=True).refusal(address)
    assert (opened is not None) is always, opened


# The same forms around the PUBLIC address 93.184.216.34 (5db8:d822). Allowed where the
# form reaches that public host: IPv4-mapped (it is the IPv4 address), NAT64 64:ff9b::/96
# (globally reachable per RFC 6052) and 6to4 (public relays). Refused where the form itself
# is not globally reachable: IPv4-translated and IPv4-compatible (::/8 is reserved), local-use
# NAT64 (RFC 8215) and Teredo (inside 2001::/23; the service is obsolete). Those refusals
# are lifted by RAG_ALLOW_PRIVATE_NETWORK like any other non-public range.
EMBEDDED_PUBLIC: list[tuple[str, str | None]] = [
    ("::ffff:93.184.216.34", None),
    ("64:ff9b::5db8:d822", None),
    ("2002:5db8:d822::1", None),
    ("::ffff:0:5db8:d822", r"IPv4-translated IPv6 \(RFC 2765\)"),
    ("::5db8:d822", r"deprecated IPv4-compatible IPv6"),
    ("64:ff9b:1::5db8:d822", r"local-use NAT64 \(RFC 8215\)"),
    ("2001:0:4136:e378:8000:63bf:a247:27dd", r"Teredo \(RFC 4380\)"),
]


@pytest.mark.parametrize(("address", "reason"), EMBEDDED_PUBLIC)
def test_ipv6_form_of_a_public_ipv4(address: str, reason: str | None) -> None:
    if reason is None:
        assert validate_url(literal_url(address)) == f"http://[{ipaddress.ip_address(address)}]/"
    else:
        with pytest.raises(UrlRefusedError, match=reason):
            validate_url(literal_url(address))
    assert AddressPolicy(allow_private=True).refusal(address) is None


# -- the policy switch -------------------------------------------------------------------------


async def test_allow_private_network_opens_internal_ranges_only() -> None:
    policy = AddressPolicy(allow_private=True)
    assert validate_url("http://127.0.0.1:8080/", policy) == "http://127.0.0.1:8080/"
    assert validate_url("http://localhost/", policy) == "http://localhost/"
    assert (await resolve_and_check("http://ten.test/", lookup=stub_lookup, policy=policy))[1] == [
        "10.0.0.1"
    ]
    for url in ("http://0.0.0.0/", "http://224.0.0.1/", "http://[::]/", "http://127.1/"):
        with pytest.raises(UrlRefusedError):
            validate_url(url, policy)


def test_allowed_networks_open_only_the_listed_network() -> None:
    policy = AddressPolicy.build(allowed_networks=["10.1.2.0/24"])
    assert validate_url("http://10.1.2.3/", policy) == "http://10.1.2.3/"
    with pytest.raises(UrlRefusedError, match="RFC 1918"):
        validate_url("http://10.1.3.1/", policy)
    with pytest.raises(UrlRefusedError, match="loopback"):
        validate_url("http://127.0.0.1/", policy)


# -- the pinned resolver and the socket gate ---------------------------------------------------


async def test_pinned_resolver_returns_only_checked_addresses() -> None:
    resolver = PinnedResolver(AddressPolicy(), stub_lookup)
    results = await resolver.resolve("public.test", 443, socket.AF_UNSPEC)
    assert [(r["host"], r["port"], r["family"]) for r in results] == [
        ("93.184.216.34", 443, socket.AF_INET)
    ]
    with pytest.raises(UrlRefusedError, match=r"10\.0\.0\.1"):
        await resolver.resolve("mixed.test", 80, socket.AF_UNSPEC)


def test_socket_factory_refuses_internal_targets() -> None:
    factory = guarded_socket_factory(AddressPolicy())
    with pytest.raises(OSError, match="loopback"):
        factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)))
    sock.close()


# -- end to end: refused means NO request and NO connection -----------------------------------


def connection_counter() -> tuple[aiohttp.TraceConfig, list[str]]:
    """A trace config recording every request start and every connection made."""
    events: list[str] = []
    trace = aiohttp.TraceConfig()

    async def on_request(_session: object, _ctx: object, params: object) -> None:
        events.append(f"request {getattr(params, 'url', '')}")

    async def on_connection(_session: object, _ctx: object, _params: object) -> None:
        events.append("connection")

    trace.on_request_start.append(on_request)
    trace.on_connection_create_end.append(on_connection)
    return trace, events


def on_port(url: str, port: int) -> str:
    """Point a hostile URL at the test server's port (keeping its host form)."""
    if url.startswith("http://") and "/" in url[7:]:
        host, path = url[7:].split("/", 1)
        if host and not host.endswith(("]", "localhost", "LOCALHOST.")) and ":" not in host:
            return f"http://{host}:{port}/{path}"
        if host.endswith("]"):
            return f"http://{host}:{port}/{path}"
    return url


async def test_loopback_server_is_refused_without_the_switch() -> None:
    async with LocalSite() as site:
        site.page("/", "<h1>secret</h1>")
        trace, events = connection_counter()
        settings = crawl_settings(rag_allow_private_network=False)
        async with WebCrawler(settings, trace_configs=[trace]) as crawler:
            with pytest.raises(UrlRefusedError, match="loopback"):
                await crawler.crawl_page(site.url("/"))
        assert site.hits == []
        assert events == []
        # The same URL works with the switch on (so the test above can fail).
        async with WebCrawler(crawl_settings()) as crawler:
            page = await crawler.crawl_page(site.url("/"))
        assert page.title == "secret"
        assert site.paths() == ["/robots.txt", "/"]


async def test_hostile_table_end_to_end_makes_no_request() -> None:
    async with LocalSite() as site:
        site.page("/", "<h1>internal</h1>")
        trace, events = connection_counter()
        settings = crawl_settings(rag_allow_private_network=False)
        async with WebCrawler(settings, resolver_lookup=stub_lookup, trace_configs=[trace]) as c:
            for url, reason in HOSTILE:
                with pytest.raises(UrlRefusedError, match=reason):
                    await c.crawl_page(on_port(url, site.port))
            results = await c.crawl_pages([on_port(url, site.port) for url, _r in HOSTILE])
        assert all(r.page is None and r.error for r in results)
        assert site.hits == []
        assert events == []
        assert c.requests_made == 0


async def test_dns_rebinding_cannot_slip_through() -> None:
    """First answer public, second answer loopback: the connection is still refused."""
    answers = [["93.184.216.34"], ["127.0.0.1"]]
    calls: list[str] = []

    async def rebinding_lookup(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return answers[min(len(calls), 2) - 1]

    async with LocalSite() as site:
        site.page("/", "<h1>internal</h1>")
        trace, events = connection_counter()
        settings = crawl_settings(rag_allow_private_network=False, rag_respect_robots_txt=False)
        async with WebCrawler(
            settings, resolver_lookup=rebinding_lookup, trace_configs=[trace]
        ) as crawler:
            with pytest.raises(UrlRefusedError, match=r"rebind\.test resolves to 127\.0\.0\.1"):
                await crawler.crawl_page(f"http://rebind.test:{site.port}/")
        assert calls == ["rebind.test", "rebind.test"]  # pre-check, then the connector
        assert "connection" not in events
        assert site.hits == []


async def test_stub_resolved_host_connects_to_the_checked_address() -> None:
    """`site.test` exists only in the stub: fetching it proves the pinned resolver is used."""

    async def lookup(host: str, port: int) -> list[str]:
        return {"site.test": ["127.0.0.1"]}[host]

    async with LocalSite() as site:
        site.page("/", "<title>via stub</title><p>ok</p>")
        async with WebCrawler(crawl_settings(), resolver_lookup=lookup) as crawler:
            page = await crawler.crawl_page(f"http://site.test:{site.port}/")
        assert page.title == "via stub"
        assert site.hits[-1].headers["Host"] == f"site.test:{site.port}"


async def test_redirect_from_allowed_host_to_loopback_is_refused() -> None:
    """A 'public' host (only 127.0.0.2 is opened) redirecting to 127.0.0.1 is refused per hop."""

    async def lookup(host: str, port: int) -> list[str]:
        return {"public.test": ["127.0.0.2"]}[host]

    async with LocalSite() as internal, LocalSite(host="127.0.0.2") as public:
        internal.page("/secret", "<h1>secret</h1>")
        public.page(
            "/go",
            "",
            status=302,
            headers={"Location": internal.url("/secret")},
        )
        settings = crawl_settings(rag_allow_private_network=False, rag_follow_redirects=True)
        async with WebCrawler(
            settings, resolver_lookup=lookup, allowed_networks=["127.0.0.2/32"]
        ) as crawler:
            with pytest.raises(UrlRefusedError, match=r"127.0.0.1 is a loopback"):
                await crawler.crawl_page(f"http://public.test:{public.port}/go")
        assert public.paths() == ["/robots.txt", "/go"]
        assert internal.hits == []
