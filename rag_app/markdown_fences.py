"""Markdown code fences, recognised the way CommonMark does.

A fence opens only at the start of a line (at most three spaces in): three or more
backticks or tildes. A backtick run followed by more backticks on the same line is inline
code (```x``` in a sentence), not a fence. A fence closes with a run of the same character
at least as long, and nothing else on its line. Used by the chunker (headings and tables
inside code are not structure) and by the answer formatter (headings inside code are not
demoted). Standard library only: light clients import it.
"""

from __future__ import annotations

import re

_RUN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


class Fences:
    """Feed lines in order; `step` says whether each is part of a fenced code block."""

    def __init__(self) -> None:
        self.marker = ""
        """The open fence's run (```` ``` ```` or `~~~~`), empty outside a block."""

    @property
    def inside(self) -> bool:
        return bool(self.marker)

    def step(self, line: str) -> bool:
        """True for an opening or closing fence line and every line between them."""
        found = _RUN.match(line)
        if self.marker:
            if found:
                run, rest = found.groups()
                if run[0] == self.marker[0] and len(run) >= len(self.marker) and not rest.strip():
                    self.marker = ""
            return True
        if found is None:
            return False
        run, info = found.groups()
        if run[0] == "`" and "`" in info:
            return False  # inline code that happens to start a line
        self.marker = run
        return True


def opening(block: str) -> tuple[str, str]:
    """(fence line, closing fence) of a block that starts with a fence line."""
    first = block.split("\n", 1)[0]
    found = _RUN.match(first)
    run = found.group(1) if found else "```"
    return first.strip(), run


def open_block(text: str) -> str:
    """The opening fence line of the code block `text` leaves open; empty when none is."""
    fences = Fences()
    opened = ""
    for line in text.split("\n"):
        was_inside = fences.inside
        fences.step(line)
        if fences.inside and not was_inside:
            opened = line.strip()
    return opened if fences.inside else ""
