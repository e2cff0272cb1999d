"""Defects an LLM would have to guess around in a formatted answer, counted per hit.

A hit's block (`## [n] Source: …` up to the next one) is checked for: a heading line below
its top (outside code, where it reads as the start of another section), an unclosed code
fence, a fence or table row behind a list or quote marker (`- ``` `, `> | a |`: no fence
or row to a Markdown reader), and a line that is only a list item's number (`4.`, a chunk
cut after it; not when a code block or table follows, the step's own text). Each
was seen in real answers and fixed; the counts keep them from coming back unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rag_app.markdown_fences import Fences

_HIT = re.compile(r"^## \[\d+\] ", re.MULTILINE)
_HEADING = re.compile(r"#{3,6} \S")
_BARE_NUMBER = re.compile(r"\s*\d{1,9}\.")
_BEHIND_MARKER = re.compile(r"\s*(?:(?:[-*>]|\d{1,9}\.)\s*)+(?:```|~~~|\|)")
HEADER_LINES = 2
"""Lines of a hit's block before its passage: the source line and the title/scores line."""
_BLOCKS = ("```", "~~~", "|")
CHECKS = ("heading_below_top", "unclosed_fence", "behind_marker", "bare_item_number")


def hit_blocks(output: str) -> list[str]:
    """The formatted answer's hit blocks, each without its `## [n] ` marker."""
    return _HIT.split(output)[1:]


def hit_defects(block: str) -> set[str]:
    """Which `CHECKS` one hit's block fails."""
    found: set[str] = set()
    fences = Fences()
    body = [line for line in block.split("\n")[HEADER_LINES:] if line.strip()]
    for index, line in enumerate(body):
        if fences.step(line):
            continue
        following = body[index + 1] if index + 1 < len(body) else ""
        if index > 0 and _HEADING.match(line):
            found.add("heading_below_top")
        if _BEHIND_MARKER.match(line):
            found.add("behind_marker")
        if _BARE_NUMBER.fullmatch(line) and not following.lstrip().startswith(_BLOCKS):
            # a numbered step whose text is the code or table after it is not a defect
            found.add("bare_item_number")
    if fences.inside:
        found.add("unclosed_fence")
    return found


def count_defects(outputs: Iterable[str]) -> dict[str, int]:
    """Hits in all `outputs`, how many fail any check, and how many fail each."""
    counts = {"hits": 0, "with_any": 0, **dict.fromkeys(CHECKS, 0)}
    for output in outputs:
        for block in hit_blocks(output):
            found = hit_defects(block)
            counts["hits"] += 1
            counts["with_any"] += bool(found)
            for name in found:
                counts[name] += 1
    return counts
