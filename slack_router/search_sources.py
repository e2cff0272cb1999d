"""Source URLs of a `rag_search` result, so the bot (not the model) lists its references.

Read from structured content when the server sends it (its `sources` list, else any
`source`/`source_url`/`url` value in it), otherwise from the labelled lines of the text
(`## [1] Source: <url>`, `## Source: <url>`, `出典: <url>`, `source_url: <url>`). URLs
merely mentioned inside page text are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from slack_router.mcp_manager import ToolResult

_SOURCE_KEYS = frozenset({"source", "source_url", "url", "sourceUrl"})
_LABELLED = re.compile(
    r"^[#>*\-\s]*(?:\[\d+\]\s*)?(?:source(?:[ _]url)?|出典|ソース(?:URL)?|参照元|url)\s*[:：]\s*"
    r"<?(https?://[^\s>|]+)",
    re.IGNORECASE | re.MULTILINE,
)


def _walk(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _SOURCE_KEYS and isinstance(item, str) and item.startswith("http"):
                yield item
            else:
                yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def unique(urls: Iterable[str]) -> list[str]:
    """Drop duplicates, keep first-seen order."""
    return list(dict.fromkeys(urls))


def sources_of(result: ToolResult) -> list[str]:
    """The distinct source URLs of one search result, in the order returned; none when
    the search found nothing that answers the question (`confident` false)."""
    if result.is_error:
        return []
    if result.structured and result.structured.get("confident") is False:
        return []
    if result.structured:
        listed = result.structured.get("sources")
        if isinstance(listed, list) and all(isinstance(url, str) for url in listed):
            return unique(listed)
        found = unique(_walk(result.structured))
        if found:
            return found
    return unique(match.group(1).rstrip(".,)") for match in _LABELLED.finditer(result.text))
