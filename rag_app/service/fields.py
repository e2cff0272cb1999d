"""Reading a request's fields with their types checked: a wrong type is a one-line error.

The store service's clients send well-typed bodies, but anything on the machine that has
the token can send any JSON; a field of the wrong type must come back as what was wrong,
not as a traceback in the service's log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_app.errors import RAGError


class BadRequestError(RAGError, ValueError):
    """A request field of the wrong type or form."""


def text(body: dict[str, Any], name: str, default: str = "") -> str:
    """A string field (missing or null: `default`)."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadRequestError(f"The field {name!r} must be a string.")
    return value


def optional_text(body: dict[str, Any], name: str) -> str | None:
    """A string field that may be missing, null or empty (all: None)."""
    return text(body, name) or None


def nullable_text(body: dict[str, Any], name: str) -> str | None:
    """A string field that may be missing or null (None); an empty string stays one, for
    fields where it is a wrong value rather than "not given"."""
    return None if body.get(name) is None else text(body, name)


def integer(body: dict[str, Any], name: str) -> int | None:
    """A whole-number field (missing or null: None); true/false are not numbers."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"The field {name!r} must be a whole number.")
    return value


def whole(body: dict[str, Any], name: str, default: int) -> int:
    """A whole-number field with a default for missing or null."""
    value = integer(body, name)
    return default if value is None else value


def flag(body: dict[str, Any], name: str) -> bool:
    """A yes/no field: only `true` is yes."""
    return body.get(name) is True


def absolute_path(body: dict[str, Any], name: str) -> str:
    """A local path the client has resolved: a relative one would be read against the
    service's own folder, which is never what the caller meant."""
    value = text(body, name)
    if value and "://" not in value and not Path(value).is_absolute():
        raise BadRequestError(f"The field {name!r} must be an absolute path or a URL.")
    return value
