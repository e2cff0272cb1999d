"""Matching URLs without reading pages: the user's URL filter and the same-site test.

The URL filter is a user-supplied regular expression, so it runs on RE2 (google-re2):
matching is linear in the URL length whatever the pattern (`(a+)+$` cannot backtrack).
RE2 has no backreferences or lookarounds; such a pattern gets a one-line error. Kept
apart from the HTML link reader so a crawl scope needs no HTML parser (the store
service opens without importing one).
"""

from __future__ import annotations

import re
from typing import Protocol
from urllib.parse import urlsplit

import re2

from rag_app.crawl.exceptions import InvalidPatternError
from rag_app.limits import MAX_PATTERN_CHARS


class UrlPattern(Protocol):
    """A compiled URL filter: `search(url)` is truthy when the URL matches."""

    def search(self, text: str) -> object: ...


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every rejected pattern to stderr
    return options


def _reason(err: Exception) -> str:
    detail = err.args[0] if err.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    return str(detail or type(err).__name__)


def compile_pattern(pattern: str, argument: str = "pattern") -> UrlPattern | None:
    """Compile the URL filter (`re.search` semantics, RE2 syntax); '' means no filter.

    `argument` names the option the pattern came from (`pattern`, or `exclude`), so an
    error says which of the two to fix."""
    if not pattern:
        return None
    what = "The URL pattern" if argument == "pattern" else f"The {argument} pattern"
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidPatternError(
            f"{what} is longer than {MAX_PATTERN_CHARS} characters; use a shorter one."
        )
    try:
        return re2.compile(pattern, _re2_options())
    except re2.error as err:
        reason = _reason(err)
    try:
        re.compile(pattern)
    except re.error as err:
        raise InvalidPatternError(
            f"{what} is not a valid regular expression ({err}); fix it or leave it empty."
        ) from None
    raise InvalidPatternError(
        f"{what} uses something the linear-time RE2 engine does not support "
        f"({reason}), such as a backreference, a lookaround or a repeat over 1000; "
        "rewrite it without that."
    )


def _site(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return (parts.hostname or "", parts.port or default)


def same_site(a: str, b: str) -> bool:
    """Same exact host, and same port (an http↔https switch on default ports counts as same)."""
    host_a, port_a = _site(a)
    host_b, port_b = _site(b)
    if host_a != host_b:
        return False
    return port_a == port_b or {port_a, port_b} == {80, 443}
