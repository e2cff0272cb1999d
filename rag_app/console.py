"""What every console command shares: its version string, progress on stderr, and how
it ends on Ctrl-C and a closed pipe.

Imports nothing heavy, so a command's `--help` and `--version` stay fast. Every
command exits 130 when interrupted; the other codes are each command's own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag_app.write_wait import WriteWait

EXIT_INTERRUPTED = 130


def package_version() -> str:
    """The installed distribution's version ("0" when run from a bare source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-knowledge")
    except PackageNotFoundError:
        return "0"


class VersionAction(argparse.Action):
    """`--version` printing "PROG VERSION"; the version is read only when asked, since
    importlib.metadata alone would cost `--help` ~25 ms."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any):
        kw.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kw: Any) -> None:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROLS |= {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


_CONTROLS_IN_LINES = {c: e for c, e in _CONTROLS.items() if c not in (ord("\n"), ord("\t"))}


def printable(text: str, *, lines: bool = False) -> str:
    """`text` safe for a terminal: control characters written as escapes (a file named
    `a\nerror: b.md` printed two lines, one a forged error; an ESC in a page's text starts
    a terminal command: clearing the screen, retitling the window, writing the clipboard).
    With `lines`, line breaks and tabs are kept (a passage, a page read whole)."""
    return text.translate(_CONTROLS_IN_LINES if lines else _CONTROLS)


def guarded(body: Callable[[], int | None], interrupted: str = "interrupted") -> int:
    """Run a command's body and return its exit code, without a traceback when the
    user presses Ctrl-C (exit 130, `interrupted` on stderr) or the reader of stdout goes
    away (`| head`, exit 0)."""
    try:
        try:
            return body() or 0
        finally:
            sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the final flush at exit says nothing
        return 0


def progress_reporter(
    desc: str, unit: str
) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """Progress on stderr driven by `(done, total)` callbacks: a tqdm bar on a terminal,
    a plain line at most every 5 s (and at the end) in a log."""
    if not sys.stderr.isatty():
        state = {"last": 0.0, "shown": (-1, -1)}
        units = unit  # a Japanese counter word has no plural
        if unit.isascii():
            units = unit[:-1] + "ies" if unit.endswith("y") else unit + "s"

        def line(done: int, total: int) -> None:
            now = time.monotonic()
            due = done == total or now - state["last"] >= 5.0
            if due and state["shown"] != (done, total):
                print(f"{desc}: {done}/{total} {units}", file=sys.stderr, flush=True)
                state["last"], state["shown"] = now, (done, total)

        return line, lambda: None

    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "bar" not in bar:
            bar["bar"] = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)
        b = bar["bar"]
        b.total = total
        b.n = done
        b.refresh()

    def close() -> None:
        if "bar" in bar:
            bar["bar"].close()

    return update, close


WAIT_NOTE_EVERY_SEC = 30.0


def wait_printer(japanese: bool) -> Callable[[WriteWait | None], None]:
    """Says on stderr why a write waits (a restore or a reindex holds the store's writes):
    at once, then at most every 30 s while the count moves."""
    shown: dict[str, Any] = {"at": float("-inf"), "kind": None}

    def show(wait: WriteWait | None) -> None:
        if wait is None:
            return
        now = time.monotonic()
        if wait.kind != shown["kind"] or now - shown["at"] >= WAIT_NOTE_EVERY_SEC:
            print(wait.japanese() if japanese else wait.english(), file=sys.stderr, flush=True)
            shown["at"], shown["kind"] = now, wait.kind

    return show
