"""Build the wheel, install it into a clean virtualenv and use it outside the repository.

Run by `make test` (and so by CI): `python scripts/wheel_check.py`, with the project's
development interpreter. Offline: the wheel is installed with `--no-deps --no-index`;
its dependencies are made visible from this interpreter's site-packages through a folder
of links that leaves out this project's own installation (an editable install there
would otherwise import the repository instead of the wheel). From an empty working
folder it then checks: the packages import from the wheel, `pip check`, `--version` of
the four commands, `rag completion bash`, `rag-eval evaluate` on the bundled dataset
against the committed baseline, and the demo (`rag index` of the bundled samples,
`rag search`, `rag stats`, `rag service stop`). Any failure prints the command and its
output and exits 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = "rag_knowledge"  # the distribution name as wheels and dist-info folders spell it
PACKAGES = ("rag_app", "eval", "mcp_server", "slack_router")
COMMANDS = ("rag", "rag-eval", "rag-mcp", "rag-slack")
BASELINE = REPO / "tests" / "fixtures" / "rag" / "baseline.json"
STEP_TIMEOUT_SEC = 900
# Settings a developer's shell may carry; the check runs on the defaults.
SETTING_PREFIXES = ("RAG_", "CHROMA", "BM25_", "EMBEDDING_", "OPENAI_", "SLACK_", "MCP_", "LLM_")


class CheckFailed(RuntimeError):
    """A step failed; the message holds the command and what it printed."""


def run(argv: Sequence[str | Path], *, env: dict[str, str] | None = None, cwd: Path) -> str:
    """Run a command; return its stdout or raise `CheckFailed` with all it printed."""
    done = subprocess.run(
        [str(a) for a in argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_SEC,
    )
    if done.returncode != 0:
        raise CheckFailed(
            f"`{' '.join(map(str, argv))}` exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}"
        )
    return done.stdout


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def copy_sources(target: Path) -> None:
    """The working tree's files (tracked and new, not ignored): no stale `build/` folder."""
    listed = run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO)
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is skipped
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def own_entries(site: Path) -> set[str]:
    """Top-level names in `site` that belong to this project's own installation."""
    names = set(PACKAGES)
    for info in site.glob(f"{PROJECT}-*.dist-info"):
        names.add(info.name)
        record = info / "RECORD"
        if record.exists():
            for line in record.read_text(encoding="utf-8").splitlines():
                first = line.split(",", 1)[0].split("/", 1)[0]
                if first and first not in ("..", "__pycache__"):
                    names.add(first)
    return names


def link_dependencies(target: Path) -> list[Path]:
    """Link every entry of this interpreter's site-packages into `target`, except this
    project's own; returns the site-packages folders used."""
    target.mkdir()
    paths = sysconfig.get_paths()
    sites = list(dict.fromkeys(Path(paths[key]) for key in ("purelib", "platlib")))
    for site in sites:
        skip = own_entries(site) | {"__pycache__"}
        for entry in site.iterdir():
            if entry.name not in skip and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    return sites


def clean_env(venv: Path, store: Path) -> dict[str, str]:
    """The environment of every checked command: the clean venv first on PATH, no
    project settings or PYTHONPATH from the caller, the store in a temporary folder."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(SETTING_PREFIXES) and k not in ("PYTHONPATH", "PYTHONHOME")
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        CHROMADB_PERSIST_DIR=str(store / "chroma_db"),
        BM25_PERSIST_DIR=str(store / "bm25_index"),
        RAG_SERVICE_IDLE_SEC="120",  # a leftover store service stops by itself
    )
    return env


@contextmanager
def step(name: str) -> Iterator[None]:
    """Announce a step and, when it succeeds, how long it took."""
    t0 = time.perf_counter()
    print(f"wheel-check: {name} ...", flush=True)
    yield
    print(f"wheel-check:   ok ({time.perf_counter() - t0:.1f} s)", flush=True)


def check(tmp: Path) -> None:
    """Every step; raises `CheckFailed` on the first problem."""
    started = time.perf_counter()
    py = sys.executable
    work, store = tmp / "work", tmp / "store"
    work.mkdir()
    with step("build the wheel from a copy of the working tree"):
        copy_sources(tmp / "src")
        run(
            [
                *(py, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
                *("--no-index", "-w", tmp / "dist", tmp / "src"),
            ],
            cwd=tmp,
        )
        wheels = list((tmp / "dist").glob(f"{PROJECT}-*.whl"))
        expect(len(wheels) == 1, f"expected one wheel, found {wheels}")
        wheel = wheels[0]
        version = wheel.name.split("-")[1]
        print(f"wheel-check:   {wheel.name}")
    venv = tmp / "venv"
    vpy = venv / "bin" / "python"
    with step("install it into a clean virtualenv, offline"):
        run([py, "-m", "venv", "--without-pip", venv], cwd=tmp)
        sites = link_dependencies(tmp / "deps")
        purelib = run(
            [vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work
        ).strip()
        hook = f"import site; site.addsitedir({str(tmp / 'deps')!r})\n"
        (Path(purelib) / "_wheel_check_deps.pth").write_text(hook, encoding="utf-8")
        run(
            [py, "-m", "pip", "--python", vpy, "install", "-q", "--no-deps", "--no-index", wheel],
            cwd=work,
        )
        print(f"wheel-check:   dependencies from {', '.join(map(str, sites))}")
    env = clean_env(venv, store)
    with step("the packages and their data come from the wheel; pip check"):
        where = run(
            [
                vpy,
                "-c",
                "import importlib, json, sys; from importlib.metadata import distribution\n"
                f"mods = [importlib.import_module(n) for n in {PACKAGES!r}]\n"
                "files = [m.__file__ for m in mods]\n"
                "dist = distribution('rag-knowledge')\n"
                "print(json.dumps({'files': files, 'dist': str(dist.locate_file(''))}))",
            ],
            env=env,
            cwd=work,
        )
        found = json.loads(where)
        for file in [*found["files"], found["dist"]]:
            expect(
                Path(file).resolve().is_relative_to(venv.resolve()), f"{file} is not in the wheel"
            )
        run([py, "-m", "pip", "--python", vpy, "check"], cwd=work)
    with step("--version of the four commands; rag completion bash"):
        for command in COMMANDS:
            out = run([venv / "bin" / command, "--version"], env=env, cwd=work).strip()
            expect(out == f"{command} {version}", f"{command} --version printed {out!r}")
        out = run(["rag", "completion", "bash"], env=env, cwd=work)
        expect("complete -o bashdefault -F _shtab_rag rag" in out, out[-500:])
    with step("rag-eval evaluate on the bundled dataset, against the committed baseline"):
        out = run(
            [
                *("rag-eval", "evaluate", "--chunk-size", "200", "--chunk-overlap", "30"),
                *("--vector-weight", "0.5", "--output-dir", work / "report"),
                *("--baseline-file", BASELINE, "--fail-on-regression"),
            ],
            env=env,
            cwd=work,
        )
        report = json.loads((work / "report" / "report.json").read_text(encoding="utf-8"))
        expect(report["config"]["dataset"] == "eval/data/rag_evaluation_dataset.json", out)
        expect(report["summary"]["queries"] == 21 and "no regression" in out, out)
        print("wheel-check:   " + out.strip().splitlines()[1].strip())
    with step("demo: rag index the bundled samples, rag search, rag stats"):
        try:
            samples = run([vpy, "-m", "rag_app.data", "--path", "samples"], env=env, cwd=work)
            samples = samples.strip()
            expect(Path(samples).resolve().is_relative_to(venv.resolve()), samples)
            run(["rag", "index", samples], env=env, cwd=work)
            out = run(["rag", "search", "りゅうおう", "-n", "3"], env=env, cwd=work)
            expect("monsters.md" in out.splitlines()[1], f"unexpected top hit:\n{out}")
            out = run(
                ["rag", "search", "how do I run several coroutines at once?"], env=env, cwd=work
            )
            expect("asyncio-guide.md" in out.splitlines()[1], f"unexpected top hit:\n{out}")
            out = run(["rag", "stats", "--json"], env=env, cwd=work)
            expect(len(json.loads(out)["sources"]) == 4, out)
        finally:
            run(["rag", "service", "stop"], env=env, cwd=work)
    print(f"wheel-check: passed in {time.perf_counter() - started:.1f} s")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="rag-wheel-check-") as tmp:
        try:
            check(Path(tmp))
        except (CheckFailed, subprocess.TimeoutExpired) as err:
            print(f"wheel-check: FAILED: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
