"""Files shipped inside the package: found through importlib.resources, listed in the
build configuration (so the wheel carries them), printable with `python -m rag_app.data`."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from eval.data import DOCUMENTS, QUESTIONS
from eval.data import data_path as eval_data
from rag_app.data import ENV_EXAMPLE, SAMPLES, data_path
from rag_app.data.__main__ import main
from slack_router.mcp_config import example_config_path

REPO = Path(__file__).resolve().parent.parent
DATA_FOLDERS = ("rag_app/data", "eval/data", "eval/notebooks", "slack_router/data")


def test_bundled_files_are_found_from_any_working_folder() -> None:
    assert sorted(p.name for p in data_path(SAMPLES).iterdir()) == [
        "asyncio-guide.md",
        "items.md",
        "kyoto.html",
        "monsters.md",
    ]
    assert "RAG_CHUNK_SIZE=" in data_path(ENV_EXAMPLE).read_text(encoding="utf-8")
    assert eval_data(QUESTIONS).is_file() and eval_data(DOCUMENTS).is_file()
    assert example_config_path().is_file()
    with pytest.raises(FileNotFoundError, match="no bundled file"):
        data_path("missing.txt")


def test_every_data_file_is_package_data() -> None:
    """A file added to a data folder but not to `package-data` would be missing from the wheel."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]
    for folder in DATA_FOLDERS:
        for file in (REPO / folder).rglob("*"):
            if file.is_dir() or "__pycache__" in file.parts or file.suffix == ".py":
                continue
            package_dir = file.parent.relative_to(REPO)
            globs = patterns.get(".".join(package_dir.parts), [])
            assert any(fnmatch.fnmatch(file.name, g) for g in globs), f"{file} is not shipped"


def test_python_m_rag_app_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out.split() == ["env.example", "samples/"]
    assert main([ENV_EXAMPLE]) == 0
    assert capsys.readouterr().out == data_path(ENV_EXAMPLE).read_text(encoding="utf-8")
    assert main(["--path", SAMPLES]) == 0
    assert Path(capsys.readouterr().out.strip()) == data_path(SAMPLES)
    assert main(["nothing-here"]) == 2
    assert "no bundled file 'nothing-here'" in capsys.readouterr().err
