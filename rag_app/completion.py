"""`rag completion bash|zsh`: a shell completion script generated from the argument
parser by shtab, so new commands and options complete without hand-written scripts.

shtab is imported only when a script is asked for; `--help` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

SHELLS = ("bash", "zsh")
# Positional arguments that name something on disk: completed as folders or files.
PATH_ARGUMENTS = {"directory": "DIRECTORY"}


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell`, covering every subcommand of `parser`."""
    import shtab

    for action in _actions(parser):
        kind = PATH_ARGUMENTS.get(action.dest)
        if kind and not action.option_strings:
            action.complete = getattr(shtab, kind)  # type: ignore[attr-defined]
    return shtab.complete(parser, shell=shell)


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    """The names of `parser`'s subcommands (first level)."""
    return [name for action in _subparser_actions(parser) for name in action.choices]


def _subparser_actions(parser: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every action of `parser` and of its subcommands, recursively."""
    yield from parser._actions
    for action in _subparser_actions(parser):
        for sub in action.choices.values():
            yield from _actions(sub)
