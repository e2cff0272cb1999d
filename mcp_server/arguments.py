"""Check a tool call's arguments before the SDK does, and say what is wrong in one line.

The SDK ignores unknown arguments and reports a wrong type as a multi-line pydantic
dump. Here an unknown or missing argument, a wrong type, a non-finite number and an
over-long string each get one sentence naming the argument, in the tool's language.
"""

from __future__ import annotations

import math
from typing import Any

from rag_app.limits import (
    MAX_JOB_ID_CHARS,
    MAX_PATTERN_CHARS,
    MAX_QUERY_CHARS,
    MAX_SOURCE_CHARS,
    MAX_URL_CHARS,
    shorten,
)

MAX_ARGUMENT_NAME_CHARS = 100
"""An unknown argument's name is quoted back at most this long."""

MAX_STRING_CHARS: dict[str, int] = {
    "query": MAX_QUERY_CHARS,
    "url": MAX_URL_CHARS,
    "pattern": MAX_PATTERN_CHARS,
    "exclude": MAX_PATTERN_CHARS,
    "source": MAX_SOURCE_CHARS,
    "cancel": MAX_JOB_ID_CHARS,
}
DEFAULT_MAX_STRING = MAX_SOURCE_CHARS

_JSON_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _types_of(schema: dict[str, Any]) -> set[str]:
    if "type" in schema:
        kind = schema["type"]
        return set(kind) if isinstance(kind, list) else {kind}
    out: set[str] = set()
    for option in schema.get("anyOf", []) + schema.get("oneOf", []):
        out |= _types_of(option)
    return out


def _matches(value: Any, kinds: set[str]) -> bool:
    for kind in kinds:
        allowed = _JSON_TYPES.get(kind)
        if allowed is None:
            return True  # a type this check does not know: leave it to the SDK
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            return True  # JSON Schema's integer: 2.0 is one (the range is checked after)
        if isinstance(value, allowed):
            return True
    return False


def check_arguments(tool: str, schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """One sentence describing the first problem with `arguments`, or None if they fit."""
    properties: dict[str, Any] = schema.get("properties", {})
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        known = ", ".join(sorted(properties)) or "none"
        name = shorten(unknown[0], MAX_ARGUMENT_NAME_CHARS)  # a 2 MB name came back whole
        return f"{tool} has no argument {name!r}; its arguments are: {known}."
    for name in schema.get("required", []):
        if name not in arguments:
            return f"{tool} needs the argument {name!r}."
    for name, value in arguments.items():
        spec = properties[name]
        kinds = _types_of(spec)
        if kinds and not _matches(value, kinds):
            wanted = " or ".join(sorted(k for k in kinds if k != "null")) or "null"
            article = "an" if wanted[0] in "aeiou" else "a"
            return f"{tool}: {name!r} must be {article} {wanted}, not {type(value).__name__}."
        if isinstance(value, float) and not math.isfinite(value):
            return f"{tool}: {name!r} must be a finite number."
        if isinstance(value, int | float) and not isinstance(value, bool):
            low, high = spec.get("minimum"), spec.get("maximum")
            for option in spec.get("anyOf", []):
                low = option.get("minimum", low)
                high = option.get("maximum", high)
            if (low is not None and value < low) or (high is not None and value > high):
                if high is None:
                    return f"{tool}: {name!r} must be {low} or more, got {_short(value)}."
                if low is None:
                    return f"{tool}: {name!r} must be {high} or less, got {_short(value)}."
                return f"{tool}: {name!r} must be between {low} and {high}, got {_short(value)}."
        if isinstance(value, str):
            limit = MAX_STRING_CHARS.get(name, DEFAULT_MAX_STRING)
            if len(value) > limit:
                return (
                    f"{tool}: {name!r} is {len(value):,} characters long; the limit is "
                    f"{limit:,}. Shorten it."
                )
    return None


def _short(value: object) -> str:
    """A value as echoed in a message: a number of thousands of digits is cut."""
    try:
        text = str(value)
    except ValueError:  # an int past Python's digit limit for str()
        return "a number of more than 4,300 digits"
    return text if len(text) <= 40 else f"{text[:20]}… ({len(text):,} characters)"
