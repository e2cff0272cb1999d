"""Wall time of `--help` for the four commands, against a bare interpreter start.

Not a test. Each command runs as its console script does (`from module import main;
main()`) in a fresh process with this checkout first on the path; one warm-up run,
then the best and the median of `--runs`. The baseline is `python -c pass` measured
in the same run, so the ratio stays comparable across machines.

    python bench/cli_help.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {
    "rag": "rag_app.cli",
    "rag-mcp": "mcp_server.__main__",
    "rag-slack": "slack_router.__main__",
    "rag-eval": "eval.cli",
}


def wall_times(argv: list[str], runs: int) -> list[float]:
    """Seconds per run of `argv` (after one warm-up), output discarded."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    with tempfile.TemporaryDirectory() as cwd:  # `-c` puts the working folder on the path
        for i in range(runs + 1):
            start = time.perf_counter()
            subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
            if i:
                times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    base = wall_times([sys.executable, "-c", "pass"], args.runs)
    print(
        f"baseline `python -c pass`: best {min(base):.3f} s, median {statistics.median(base):.3f} s"
    )
    print("| command | best s | median s | best / baseline |")
    print("| --- | ---: | ---: | ---: |")
    for name, module in COMMANDS.items():
        script = f"import sys; from {module} import main; sys.exit(main())"
        times = wall_times([sys.executable, "-c", script, "--help"], args.runs)
        print(
            f"| `{name} --help` | {min(times):.3f} | {statistics.median(times):.3f} "
            f"| {min(times) / min(base):.1f}x |"
        )


if __name__ == "__main__":
    main()
