"""What the evaluation runners record about a run: which code, which settings, which
store folder (shared by `eval.row_lookup` and `eval.answer_eval`)."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_NOT_RETRIEVAL = {"rag_collection_name", "chromadb_persist_dir", "bm25_persist_dir"}


def code_version() -> str:
    """Where rag_app was imported from, and its git commit (+modified) when known."""
    import rag_app

    root = Path(rag_app.__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return str(root)
    return f"{root} @ {commit}{' (modified)' if dirty else ''}"


def recorded_settings(settings: Any) -> tuple[dict[str, Any], list[str]]:
    """Every `rag_*` setting and the embedding provider, and those not at their default."""
    fields = type(settings).model_fields
    names = [
        n
        for n in fields
        if (n.startswith("rag_") or n == "embedding_provider") and n not in _NOT_RETRIEVAL
    ]
    values = {n: getattr(settings, n) for n in names}
    changed = [n for n in names if values[n] != fields[n].default]
    values["embedding_model"] = getattr(settings, "embedding_model_name", None)
    return values, changed


@contextlib.contextmanager
def work_folder(path: str | None, prefix: str) -> Iterator[Path]:
    """`path` (created), or a temporary folder removed afterwards."""
    if path:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)
