"""The `rag` command end to end (real model, real stores, temp directories)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rag_app import cli
from rag_app.cli import main
from tests.conftest import SAMPLES


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CHROMADB_PERSIST_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("BM25_PERSIST_DIR", str(tmp_path / "b"))
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    return docs


def test_index_search_stats_delete(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(env)]) == 0
    assert "added=4" in capsys.readouterr().out
    assert main(["search", "りゅうおう", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "1. combined=" in out and "monsters.md" in out and "名前: りゅうおう" in out
    assert main(["search", "りゅうおう", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hits"][0]["text"].startswith("名前: りゅうおう")
    assert main(["search", "スライム", "--mode", "separate"]) == 0
    out = capsys.readouterr().out
    assert "Vector results" in out and "BM25 results" in out
    assert main(["stats"]) == 0
    assert "ソースURL数: 4" in capsys.readouterr().out
    assert main(["delete", str(env / "items.md")]) == 0
    assert "削除しました" in capsys.readouterr().out
    assert main(["stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_count"] == 3


def test_a_file_name_with_a_line_break_is_listed_on_one_line(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing file named `evil\nerror: fake.md` printed as two lines, the second a
    forged error; names and reasons are printed with control characters escaped."""
    (env / "evil\nerror: fake.md").write_bytes(b"\x00" * 64)
    (env / "bell\x1b[2J.md").write_bytes(b"\x00" * 64)
    assert main(["index", str(env)]) == cli.EXIT_PARTIAL
    err = capsys.readouterr().err.splitlines()
    listed = [line for line in err if "fake.md" in line or "bell" in line]
    assert len(listed) == 2, err
    assert all(line.startswith("  error: ") for line in listed)
    assert any("evil\\nerror: fake.md" in line for line in listed)
    assert not any("\x1b" in line for line in err)


def test_terminal_commands_in_stored_text_are_printed_as_escapes(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A page or file holding ESC sequences (clear the screen, set the window title) had
    them printed raw by `rag search` and `rag read`, so a crawled page ran commands in the
    user's terminal."""
    note = env / "escapes.md"
    note.write_text(
        "# Kettle \x1b]0;owned\x07 guide\n\nThe zebrakettle \x1b[2J boils water.\n\nLine two.\n"
    )
    assert main(["index", str(env)]) == 0
    capsys.readouterr()
    for argv in (
        ["search", "zebrakettle"],
        ["search", "zebrakettle", "--full"],
        ["read", str(note)],
    ):
        assert main(argv) == 0
        out = capsys.readouterr()
        printed = out.out + out.err
        assert "zebrakettle" in printed, argv
        assert "\x1b" not in printed and "\x07" not in printed, argv
        assert "\\x1b[2J" in printed, argv
    assert main(["read", str(note)]) == 0
    assert "\n\nLine two." in capsys.readouterr().out  # a page read whole keeps its lines


def test_bad_input_is_one_line_and_nonzero(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(env / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert main(["search", "  "]) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["delete", "https://nowhere.example/x"]) == 1
    err = capsys.readouterr().err  # a command with Japanese texts frames its errors in Japanese
    assert err.startswith("エラー: 削除に失敗しました。 原因: Nothing is stored"), err
    assert main(["crawl", "https://nowhere.example/", "--max-depth", "0"]) == 2
    assert capsys.readouterr().err.startswith("エラー: クロールに失敗しました。 原因: max_depth")
    # usage errors the command line itself shows are 2, before any store is opened
    for argv, said in [
        (["crawl", "https://nowhere.example/", "("], "not a valid regular expression"),
        (["crawl", "https://nowhere.example/", "-x", "(?=a)"], "exclude pattern uses"),
        (["read", "https://nowhere.example/x", "--offset", "-5"], "--offset must be 0"),
        (["read", "https://nowhere.example/x", "--max-chars", "50"], "--max-chars must be"),
        (["index", ""], "the folder is empty"),  # it indexed the current folder
        (["delete", ""], "The source is empty"),
        (["search", "x", "--source", ""], "--source filter is empty"),  # it searched all
        (["search", "あ" * 2500], "the limit is 2,000"),  # 1 before, an empty query 2
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def test_invalid_setting_fails_with_one_line(
    env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAG_CHUNK_OVERLAP", "500")
    assert main(["stats"]) == 1
    err = capsys.readouterr().err
    assert "RAG_CHUNK_OVERLAP" in err and err.count("\n") == 1


class _SlowToStop:
    """A store whose job keeps running past the owner's 2 s cancel wait (a page still
    being stored), then stops."""

    def __init__(self) -> None:
        self.state = "running"
        self.calls: list[str] = []

    async def wait_job(self, job_id: str, progress: Any = None) -> dict[str, Any]:
        self.calls.append("wait")
        if not self.calls.count("cancel"):
            await asyncio.sleep(3600)  # the user's wait, cut by Ctrl-C
        await asyncio.sleep(0.2)
        self.state = "cancelled"
        return {"id": job_id, "state": self.state}

    async def cancel_job(self, job_id: str, **_kw: Any) -> dict[str, Any]:
        self.calls.append("cancel")
        return {"id": job_id, "state": self.state}


class _SlowToAnswer:
    """A store that has started the job when a Ctrl-C comes, before its answer is read."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}

    async def start_crawl(self, url: str, pattern: str = "", **_kw: Any) -> dict[str, Any]:
        self.jobs["j2"] = "running"  # the owner has started it ...
        await asyncio.sleep(0.3)  # ... and its answer is on its way
        return {"id": "j2", "state": "running"}

    async def cancel_job(self, job_id: str, **_kw: Any) -> dict[str, Any]:
        self.jobs[job_id] = "cancelled"
        return {"id": job_id, "state": "cancelled"}


async def test_ctrl_c_while_the_job_is_being_started_stops_it() -> None:
    kb = _SlowToAnswer()
    args = cli.build_parser().parse_args(["crawl", "http://127.0.0.1:1/docs/"])
    crawl = asyncio.ensure_future(cli._cmd_crawl(kb, args))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    crawl.cancel()  # what asyncio.run does on Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await crawl
    assert kb.jobs == {"j2": "cancelled"}  # not left running with no one following it


async def test_ctrl_c_returns_once_the_job_has_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    kb = _SlowToStop()
    job = cli._follow_job(kb, {"id": "j1"}, "d", "page", "stopping")  # type: ignore[arg-type]
    follow = asyncio.ensure_future(job)
    await asyncio.sleep(0.05)
    follow.cancel()  # what asyncio.run does on Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await follow
    assert kb.calls == ["wait", "cancel", "wait"] and kb.state == "cancelled"
    assert "stopping" in capsys.readouterr().err
