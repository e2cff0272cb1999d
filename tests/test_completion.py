"""`rag completion bash|zsh`: generated from the parser, so it offers every subcommand.

The bash script is sourced in a real bash and asked to complete, as the shell would.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rag_app.cli import build_parser, main
from rag_app.completion import subcommands

BASH = shutil.which("bash")


def _script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def _complete(script: Path, *words: str) -> list[str]:
    """What bash offers for the last word of `rag WORDS…` with this script loaded."""
    line = " ".join(f"'{w}'" for w in ("rag", *words))
    done = subprocess.run(
        [
            BASH or "bash",
            "-c",
            f'source "$0"; COMP_WORDS=({line}); COMP_CWORD={len(words)}; '
            'fn=$(complete -p rag | sed -E "s/.*-F ([^ ]+).*/\\1/"); "$fn"; '
            'printf "%s\\n" "${COMPREPLY[@]}"',
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.split()


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_bash_script_completes_every_subcommand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "rag.bash"
    script.write_text(_script("bash", capsys), encoding="utf-8")
    subprocess.run([BASH or "bash", "-n", str(script)], check=True, timeout=30)
    expected = subcommands(build_parser())
    assert "search" in expected and "completion" in expected
    assert sorted(_complete(script, "")) == sorted(expected)
    assert _complete(script, "se") == ["search", "service"]
    assert "--mode" in _complete(script, "search", "--m")
    (tmp_path / "notes").mkdir()
    (tmp_path / "file.md").touch()
    offered = _complete(script, "index", str(tmp_path) + "/")
    assert f"{tmp_path}/notes" in offered and f"{tmp_path}/file.md" not in offered


def test_zsh_script_names_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    script = _script("zsh", capsys)
    assert script.startswith("#compdef rag")
    for name in subcommands(build_parser()):
        assert re.search(rf"^\s+{name}:'", script, flags=re.MULTILINE), name


def test_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["completion", "fish"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'fish'" in capsys.readouterr().err
