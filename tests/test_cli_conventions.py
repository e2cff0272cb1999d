"""What every console command promises: `--version`, a `--help` that loads nothing heavy,
exit 130 on Ctrl-C and no traceback when the reader of its output goes away.

`--help` speed is proved by what it imports, not by timing it (`bench/cli_help.py`
measures the wall time).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# command -> (module run with `python -m`, module holding `main`)
COMMANDS = {
    "rag": ("rag_app.cli", "rag_app.cli"),
    "rag-mcp": ("mcp_server", "mcp_server.__main__"),
    "rag-slack": ("slack_router", "slack_router.__main__"),
    "rag-eval": ("eval.cli", "eval.cli"),
}
HEAVY = (
    "asyncio",
    "chromadb",
    "llama_index",
    "mcp",
    "numpy",
    "openai",
    "pydantic",
    "pydantic_settings",
    "shtab",
    "slack_bolt",
    "slack_sdk",
)


def _python(code_or_args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """This interpreter with the repository's code first on the path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *code_or_args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_import_nothing_heavy(command: str, argv: list[str]) -> None:
    module = COMMANDS[command][1]
    code = (
        "import importlib, json, sys\n"
        f"main = importlib.import_module({module!r}).main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exit_:\n"
        "    code = exit_.code\n"
        "else:\n"
        "    code = 'no exit'\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))\n"
        "print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)\n"
    )
    done = _python(["-c", code])
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result == {"code": 0, "heavy": []}, done.stderr
    assert done.stdout.strip(), "printed nothing"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_version_names_command_and_release(command: str) -> None:
    done = _python(["-m", COMMANDS[command][0], "--version"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{command} {version('rag-knowledge')}"


def test_ctrl_c_exits_130_without_traceback() -> None:
    script = (
        "import signal, sys, time\n"
        # a shell's background job inherits SIGINT ignored: Python then never raises
        # KeyboardInterrupt, whatever the program does; a terminal's Ctrl-C is the case here
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from rag_app.console import guarded\n"
        "def body():\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "sys.exit(guarded(body))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.decode().strip() == "interrupted"


def _with_closed_stdout(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe nobody reads any more (as in `rag search … | head -0`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, *args],
            env=env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)


def test_closed_pipe_is_quiet(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma"),
        "BM25_PERSIST_DIR": str(tmp_path / "bm25"),
    }
    flood = (
        "import sys; from rag_app.console import guarded\n"
        "sys.exit(guarded(lambda: print('x' * 100_000)))"
    )
    for args in (["-c", flood], ["-m", "rag_app.cli", "service", "status"]):
        done = _with_closed_stdout(args, env)
        assert (done.returncode, done.stderr) == (0, ""), args


def _interrupt(*_args: object, **_kw: object) -> None:
    raise KeyboardInterrupt


def test_each_command_turns_ctrl_c_into_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import eval.cli
    import eval.commands
    import mcp_server.__main__
    import rag_app.cli
    import slack_router.__main__

    monkeypatch.setattr(rag_app.cli, "_run", _interrupt)
    assert rag_app.cli.main(["search", "x"]) == 130
    assert rag_app.cli.main(["-v", "stats"]) == 130  # a command that speaks Japanese
    assert capsys.readouterr().err == "interrupted\n中断しました\n"
    monkeypatch.setitem(eval.commands.COMMANDS, "sweep", _interrupt)
    assert eval.cli.run(["sweep"]) == 130
    monkeypatch.setattr(mcp_server.__main__, "_serve", _interrupt)
    with pytest.raises(SystemExit) as exit_info:
        mcp_server.__main__.main([])
    assert exit_info.value.code == 130
    monkeypatch.setattr(slack_router.__main__, "_run", _interrupt)
    with pytest.raises(SystemExit) as exit_info:
        slack_router.__main__.main([])
    assert exit_info.value.code == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("interrupted") == 3
