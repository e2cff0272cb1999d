"""Settings: every value the example settings document is accepted; nonsense is one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_app.config import SettingsError, load_settings
from rag_app.data import ENV_EXAMPLE, data_path
from tests.processes import RAG, full_env, rag, store_env

EXAMPLE = data_path(ENV_EXAMPLE)
LINE = re.compile(r"^#?\s*([A-Z][A-Z0-9_]+)=(.*)$")


def documented() -> list[tuple[str, str]]:
    """Every NAME=value of the example settings, commented-out ones included."""
    out = []
    for raw in EXAMPLE.read_text(encoding="utf-8").splitlines():
        match = LINE.match(raw.strip())
        if match:
            out.append((match.group(1), match.group(2).strip()))
    return out


def test_every_documented_value_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    values = documented()
    assert len(values) > 40
    for name, value in values:
        if name in ("EMBEDDING_PROVIDER", "RAG_URL_SAFETY_CHECK"):
            continue  # their documented values need a key; each is checked alone below
        monkeypatch.setenv(name, value)
    load_settings()
    for name, value in values:  # and each one alone, empty values included
        monkeypatch.setenv(name, value)
        if name == "EMBEDDING_PROVIDER" and value == "online":
            continue
        load_settings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RAG_VECTOR_WEIGHT", "inf"),
        ("RAG_CRAWL_TIMEOUT_SEC", "inf"),
        ("RAG_CRAWL_DELAY_SEC", "nan"),
        ("RAG_BM25_K1", "-1"),
        ("RAG_CHUNK_SIZE", "ten"),
        ("RAG_COLLECTION_NAME", "a"),
        ("RAG_COLLECTION_NAME", "bad name/with slash"),
        ("RAG_SERVICE_IDLE_SEC", "-5"),
        ("RAG_CHUNK_OVERLAP", "500"),
    ],
)
def test_nonsense_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "\n" not in message and (name in message or "RAG_CHUNK" in message), message


def test_the_command_line_says_it_in_one_line(tmp_path: Path) -> None:
    for name, value in (("RAG_VECTOR_WEIGHT", "inf"), ("CHROMADB_PERSIST_DIR", "/proc/nope")):
        env = full_env({name: value, "BM25_PERSIST_DIR": str(tmp_path / "bm25")})
        done = subprocess.run([RAG, "stats"], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1 and name in done.stderr, done.stderr


@pytest.mark.parametrize("kind", ["not utf-8", "named pipe"])
def test_a_hostile_settings_file_is_one_line_from_rag_and_rag_mcp(
    tmp_path: Path, kind: str
) -> None:
    """The real commands, started in a folder whose .env is not UTF-8 (a 60-75-line
    traceback before) or a named pipe (both hung for good before)."""
    if kind == "named pipe":
        os.mkfifo(tmp_path / ".env")
    else:
        (tmp_path / ".env").write_bytes("RAG_USER_AGENT=Bot-caf\u00e9\n".encode("latin-1"))
    env = full_env({"BM25_PERSIST_DIR": str(tmp_path / "bm25")})
    for command in ([RAG, "stats"], [sys.executable, "-m", "mcp_server"]):
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, cwd=tmp_path,
            stdin=subprocess.DEVNULL, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0 and done.stdout == "", (command, done.stdout)
        assert done.stderr.count("\n") == 1 and ".env" in done.stderr, done.stderr


def test_a_service_idle_time_shorter_than_its_start_still_serves(tmp_path: Path) -> None:
    """RAG_SERVICE_IDLE_SEC counts from the moment the service is ready: with 1 s, the
    time it took to open counted as idle and it stopped before answering (2 of 3 runs)."""
    env = store_env(tmp_path, RAG_SERVICE_IDLE_SEC="1")
    for _ in range(2):
        done = rag(env, "stats")
        assert done.returncode == 0, done.stderr
        time.sleep(2.5)  # it stops meanwhile; the next command starts it again
