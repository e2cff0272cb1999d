"""A search's source filter: which stored sources a scope such as a site, a URL prefix
or a folder names.

`rag_search` / `rag search` take one string; it matches a stored source when it is
- a URL prefix of it at a path boundary (`https://docs.example.com/guide` holds
  `…/guide/intro.html`, not `…/guide-old/`),
- its site (`docs.example.com`, or with its port `127.0.0.1:8765`; any scheme and
  path), or
- a folder or file that holds it (`./notes`, `/home/me/notes/a.md`, `file:///…`).
The scope is resolved against the in-memory list of sources, so both search sides are
filtered by exact source names (Chroma `$in`, BM25 per-source postings) instead of a
pattern that every chunk would have to be tested against.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from rag_app.errors import RAGError
from rag_app.limits import shorten

DEFAULT_PORTS = {"http": 80, "https": 443}
URL_BOUNDARIES = "/?#"
"""What may follow a URL scope in a source it holds."""
MAX_SCOPE_CHARS = 2000
MAX_SCOPED_SOURCES = 20_000
"""A scope naming more sources than this is refused: use a narrower one. Above the exact
copy's size Chroma filters by a `$in` of these names, and SQLite refuses a statement of
more than 32,766 of them; on 100,000 chunks a filter of 20,000 names took 322 ms p50 (604
max), of 5,000 216 ms, of one 96 ms (docs/mcp.md)."""


def local_uri(source: str) -> str:
    """A local path as the `file://` URI the store keys it by (absolute, resolved: the
    store service's working folder is not the caller's); URLs and names pass unchanged.
    A path the system refuses (a NUL, a name too long) is one `RAGError`."""
    if source and "://" not in source:
        try:
            local = Path(source).expanduser()
            if local.exists() or local.is_absolute() or source.startswith("."):
                return local.resolve().as_uri()
        except (OSError, ValueError, RuntimeError) as err:
            raise RAGError(
                f"{shorten(source, 200)!r} is not a valid path or URL ({type(err).__name__})."
            ) from None
    return source


def source_key(source: str) -> str:
    """One stored source named by the user (`rag read`, `rag delete`): a path without a
    scheme is a local file, resolved against the caller's folder even when it no longer
    exists (deleting a removed file from the store is when it is needed)."""
    if source and "://" not in source:
        return local_uri(source if Path(source).is_absolute() else f"./{source}")
    return source


SCHEMES = ("http://", "https://", "file://")
URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
"""What stays as it is when a URL is spelled as stored (reserved characters, escapes)."""


def url_spellings(url: str) -> list[str]:
    """`url` as given and as the crawler stores it (spaces and non-ASCII characters
    percent-encoded: `…/page one.html` is stored as `…/page%20one.html`; scheme and host
    in lower case, no fragment: `HTTP://Example.com/a#b` is `http://example.com/a`)."""
    if "://" not in url or url.startswith("file://"):
        return [url]
    try:
        parts = urlsplit(url)
    except ValueError:  # `http://[::1`: no stored source is spelled so; it matches none
        return [url]
    stored = urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, parts.query, ""))
    forms = [url, quote(url, safe=URL_SAFE), stored, quote(stored, safe=URL_SAFE)]
    return list(dict.fromkeys(forms))


def _folder_prefix(scope: str) -> str | None:
    """`file://` form of a local path scope, else None."""
    uri = local_uri(scope)
    return uri if uri.startswith("file://") else None


def matches(scope: str, source: str) -> bool:
    """Whether `source` lies within `scope` (see the module docstring)."""
    folder = _folder_prefix(scope)
    if folder is not None:  # a folder holds what is under it, not `notes-old` beside `notes`
        folder = folder.rstrip("/")
        return source == folder or source.startswith(folder + "/")
    if "://" in scope:  # a URL holds itself and what lies under it, not `docs-old` beside
        if scope.endswith(("/", "?", "#", "&", "=")):  # `docs`, nor `v10` beside `v1`
            return source.startswith(scope)
        return source == scope or (
            source.startswith(scope) and source[len(scope)] in URL_BOUNDARIES
        )
    if source.startswith(scope):
        return True
    if "/" not in scope and "://" not in scope:  # a bare host name, or host:port
        want = scope.lower()
        parts = urlsplit(source)
        host = parts.hostname or ""
        if _is_address(want.strip("[]")):  # an address names itself on any port
            return host == want.strip("[]")
        name = host
        if ":" in want:  # host:port, a URL's default port included
            try:
                port = parts.port or DEFAULT_PORTS.get(parts.scheme)
            except ValueError:
                return False
            name = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        # subdomains belong to a site; an address has none (`0.0.1` is not `127.0.0.1`'s)
        return name == want or (not _is_address(host) and name.endswith("." + want))
    return False


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def resolve(scope: str, sources: Iterable[str]) -> list[str]:
    """The stored sources within `scope`; one-sentence `RAGError` when none (or too many)."""
    scope = scope.strip()
    if not scope:
        raise RAGError("The source filter is empty; pass a site, URL prefix or folder.")
    if len(scope) > MAX_SCOPE_CHARS:
        raise RAGError(f"The source filter is longer than {MAX_SCOPE_CHARS:,} characters.")
    if (
        "://" not in scope
        and any(s.startswith(scope.lower()) for s in SCHEMES)
        and not Path(scope).expanduser().exists()  # a folder named `file` is one
    ):
        raise RAGError(  # `h` or `http:/` matched every web page: no filter at all
            f"{scope!r} is only the start of a URL; pass a site, URL prefix or folder."
        )
    sources = list(sources)
    for spelling in url_spellings(scope):
        found = sorted(s for s in sources if matches(spelling, s))
        if found:
            break
    if not found:
        raise RAGError(
            f"No stored source matches {scope!r}; rag_stats (rag stats) lists the sources."
        )
    if len(found) > MAX_SCOPED_SOURCES:
        raise RAGError(
            f"{scope!r} matches {len(found):,} sources, more than {MAX_SCOPED_SOURCES:,}; "
            "use a narrower site, URL prefix or folder."
        )
    return found
