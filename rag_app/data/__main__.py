"""`python -m rag_app.data [NAME] [--path]`: list, print or locate a bundled file.

For an installed package, where the repository's files are not at hand:
`python -m rag_app.data env.example > .env`, `rag index "$(python -m rag_app.data
--path samples)"`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rag_app.data import data_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rag_app.data", description="List, print or locate a bundled file."
    )
    parser.add_argument("name", nargs="?", help="e.g. env.example or samples")
    parser.add_argument("--path", action="store_true", help="print where it is instead")
    args = parser.parse_args(argv)
    root = data_path(".")
    if args.name is None:
        for entry in sorted(root.iterdir()):
            if not entry.name.startswith("_"):
                print(entry.name + ("/" if entry.is_dir() else ""))
        return 0
    try:
        target = data_path(args.name)
    except FileNotFoundError:
        print(
            f"error: no bundled file {args.name!r}; run without a name to list them.",
            file=sys.stderr,
        )
        return 2
    if args.path:
        print(target)
    elif target.is_dir():
        for entry in sorted(target.iterdir()):
            print(entry.name)
    else:
        sys.stdout.write(target.read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
