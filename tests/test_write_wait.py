"""A write that waits behind a reindex (or a restore) says why, in every front end."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_server.progress import Heartbeat
from rag_app.console import wait_printer
from rag_app.knowledge import KnowledgeBase
from rag_app.write_wait import NOTICE, WriteWait
from tests.conftest import CountingEmbedding
from tests.hnsw_files import hold_the_first_restored_write


async def test_a_write_behind_a_reindex_is_told_why_then_goes_on(
    kb: KnowledgeBase, counting_embed: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reindex is held at its first write into the new collection; a page written
    meanwhile waits for it, is told so with the reindex's count (and again as it moves),
    is told when its turn comes, and is stored after the reindex."""
    for i in range(3):
        await kb.ingest_text(f"https://example.com/{i}", f"# 見出し{i}\n\n本文その{i}。" * 5)
    stored = kb.store.count()
    held, release = hold_the_first_restored_write(monkeypatch)
    reindex = asyncio.create_task(kb.reindex())
    notes: list[WriteWait | None] = []
    try:
        assert await asyncio.to_thread(held.wait, 60)

        async def write() -> Any:
            NOTICE.set(notes.append)  # this task only, as a request's task in the service
            return await kb.ingest_text("https://example.com/late", "# 後から\n\n待った一行。")

        late = asyncio.create_task(write())
        for _ in range(100):
            if notes:
                break
            await asyncio.sleep(0.05)
        assert notes and notes[0] == WriteWait("reindex", 0, 0), notes
        assert not late.done()  # it waits for the reindex
    finally:
        release.set()
    assert await reindex == stored
    result = await late
    assert result.chunks >= 1 and notes[-1] is None
    assert all(n is None or n.kind == "reindex" for n in notes)
    assert kb.write_wait() is None
    assert "https://example.com/late" in (await kb.stats()).sources


async def test_a_write_that_does_not_wait_is_told_nothing(kb: KnowledgeBase) -> None:
    notes: list[WriteWait | None] = []
    NOTICE.set(notes.append)
    await kb.ingest_text("https://example.com/a", "# 一つ\n\n待たない。")
    assert notes == []


def test_the_wire_form_round_trips_and_a_malformed_one_is_none() -> None:
    wait = WriteWait("restore", 448, 4000)
    assert WriteWait.from_dict(wait.to_dict()) == wait
    for bad in (None, "restore", {"kind": "drop"}, {"kind": "reindex", "done": "x"}):
        assert WriteWait.from_dict(bad) is None
    assert "(448/4,000 chunks)" in wait.english() and "(448/4000チャンク)" in wait.japanese()


def test_the_console_says_it_once_then_every_30_s(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr("rag_app.console.time.monotonic", lambda: clock[0])
    show = wait_printer(japanese=False)
    show(WriteWait("restore", 1, 10))
    show(WriteWait("restore", 2, 10))  # 0 s later: not again
    clock[0] += 31
    show(WriteWait("restore", 5, 10))
    show(None)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "(1/10 chunks)" in lines[0] and "(5/10 chunks)" in lines[1]
    wait_printer(japanese=True)(WriteWait("reindex", 1, 2))
    assert capsys.readouterr().err.startswith("待機中: 再埋め込み")


async def test_an_mcp_tool_s_progress_says_what_its_write_waits_for() -> None:
    """Inside `Heartbeat` the tool's `NOTICE` changes the progress message at once (in
    the tool's language), and the message returns to the tool's own once the wait ends."""
    sent: list[tuple[float, float | None, str | None]] = []

    async def send(value: float, total: float | None, message: str | None) -> None:
        sent.append((value, total, message))

    async with Heartbeat(send, lambda d, t: "取得中", interval=60, tick=0.01, total=1) as beat:
        notice = NOTICE.get()
        assert notice is not None
        notice(WriteWait("restore", 3, 9))
        await asyncio.sleep(0.05)
        notice(None)
        await asyncio.sleep(0.05)
        beat.update(1, 1)
    assert NOTICE.get() is None  # reset on leaving
    messages = [m for _, _, m in sent]
    assert messages[0] == "取得中"
    assert any(
        m and m.startswith("待機中: 損傷したベクトル索引を復元中 (3/9チャンク)") for m in messages
    )
    assert messages[-1] == "取得中" and len(sent) >= 3
    values = [v for v, _, _ in sent]
    assert values == sorted(values) and len(set(values)) == len(values)  # always more


async def test_a_job_s_waiting_write_reaches_whoever_waits_for_the_job() -> None:
    """A crawl or refresh job writes in its own task: what its write waits for is kept on
    the job (`rag jobs` shows it) and passed to a client following the job, not to the
    request that started it."""
    from rag_app.jobs import JobRegistry

    registry = JobRegistry()
    go = asyncio.Event()
    starter: list[WriteWait | None] = []
    NOTICE.set(starter.append)  # the starting request's

    async def work(progress: Any, job: Any) -> dict[str, Any]:
        notice = NOTICE.get()
        assert notice is not None and notice is not starter.append
        notice(WriteWait("restore", 10, 40))  # as `_locked` does while it waits
        await go.wait()
        notice(None)
        progress(1, 1)
        return {"pages_crawled": 1}

    job = registry.start("crawl", "https://example.com/", work)
    await asyncio.sleep(0.05)
    assert job.to_dict()["waiting"] == {"kind": "restore", "done": 10, "total": 40}
    follower: list[WriteWait | None] = []

    async def follow() -> Any:
        NOTICE.set(follower.append)
        return await registry.wait(job)

    waiting = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    go.set()
    await waiting
    assert follower == [WriteWait("restore", 10, 40), None]
    assert starter == [] and job.to_dict()["waiting"] is None


async def test_a_notice_that_fails_does_not_fail_or_lock_the_write(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A front end whose note raises (a closed stderr) still gets its write stored, and
    the next write is not locked out."""
    await kb.ingest_text("https://example.com/0", "# 見出し\n\n本文。" * 5)
    held, release = hold_the_first_restored_write(monkeypatch)
    reindex = asyncio.create_task(kb.reindex())

    calls: list[WriteWait | None] = []

    def broken(wait: WriteWait | None) -> None:
        calls.append(wait)
        raise OSError("stderr is gone")

    async def write(url: str) -> Any:
        NOTICE.set(broken)
        return await kb.ingest_text(url, "# 後\n\n一行。")

    try:
        assert await asyncio.to_thread(held.wait, 60)
        late = asyncio.create_task(write("https://example.com/late"))
        await asyncio.sleep(0.5)
    finally:
        release.set()
    await reindex
    assert (await late).chunks >= 1 and calls and calls[-1] is None  # told, and it failed
    assert (await asyncio.wait_for(write("https://example.com/next"), 30)).chunks >= 1


async def test_the_note_travels_from_the_service_to_a_client_and_its_mcp_progress(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store service's reply stream carries the wait (`{"waiting": ...}` lines) to a
    `StoreClient`, whose caller's `NOTICE` gets it: here an MCP tool's `Heartbeat`, whose
    progress message then says what the delete waits for; a `rag reindex` or `rag check`
    waiting behind the same reindex is told too."""
    from aiohttp import web

    from rag_app.service.client import StoreClient
    from rag_app.service.server import StoreService

    await kb.ingest_text("https://example.com/gone", "# 消す\n\n消えるページ。" * 5)
    service = StoreService(kb.settings)
    service.kb = kb
    service.ready.set()
    runner = web.AppRunner(service._app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = StoreClient(kb.settings, {"port": port, "token": service.token})
    held, release = hold_the_first_restored_write(monkeypatch)
    reindex = asyncio.create_task(kb.reindex())
    sent: list[str | None] = []
    others: list[WriteWait | None] = []

    async def send(_value: float, _total: float | None, message: str | None) -> None:
        sent.append(message)

    async def delete() -> int:
        async with Heartbeat(send, lambda d, t: "削除中...", interval=60, tick=0.01, total=1):
            return await client.delete_source("https://example.com/gone")

    async def check() -> Any:
        NOTICE.set(others.append)
        return await kb.check()

    try:
        assert await asyncio.to_thread(held.wait, 60)
        deleting = asyncio.create_task(delete())
        checking = asyncio.create_task(check())
        for _ in range(100):
            if any(m and m.startswith("待機中: 再埋め込み") for m in sent) and others:
                break
            await asyncio.sleep(0.05)
        assert not deleting.done() and not checking.done()
        from rag_app.service.launcher import _health

        health = await _health({"port": port, "token": service.token})
        assert health is not None and health["writes_held"]["kind"] == "reindex", health
        release.set()
        await reindex
        assert await deleting >= 1
        await checking
    finally:
        release.set()
        await client.aclose()
        await runner.cleanup()
    assert "待機中: 再埋め込み（reindex）中のため、完了後に書き込みます" in sent, sent
    assert sent[0] == "削除中..." and sent[-1] == "削除中..."  # before and after the wait
    assert others[0] is not None and others[0].kind == "reindex" and others[-1] is None
    assert service._writes_held() is None


@pytest.mark.parametrize(
    ("health", "said"),
    [
        (
            {"restoring": [5, 40], "writes_held": {"kind": "restore", "done": 5, "total": 40}},
            "restoring the vector index after damage: 5 of 40 chunks (writes wait for it)",
        ),
        (
            {"restoring": None, "writes_held": {"kind": "reindex", "done": 64, "total": 1000}},
            "a reindex is re-embedding the store: 64 of 1,000 chunks (writes wait for it)",
        ),
        ({"restoring": None, "writes_held": None}, ""),
    ],
)
async def test_rag_service_status_says_what_holds_the_writes(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    health: dict[str, Any],
    said: str,
) -> None:
    import argparse

    import rag_app.service as service
    from rag_app.cli import _cmd_service
    from rag_app.config import load_settings

    async def status(_settings: Any) -> dict[str, Any]:
        return {"state": "ready", "pid": 1, "port": 2, "folder": "f", "inflight": 0, **health}

    monkeypatch.setattr(service, "service_status", status)
    args = argparse.Namespace(action="status", json=False)
    assert await _cmd_service(load_settings(), args) == 0
    line = capsys.readouterr().out
    assert (said in line) if said else ("wait" not in line), line


def test_rag_jobs_and_rag_jobs_tool_show_what_a_job_s_write_waits_for() -> None:
    from mcp_server.formatting import format_jobs
    from rag_app.cli import _job_line

    job = {
        "id": "1a2b3c4d",
        "kind": "crawl",
        "target": "https://ex.test/",
        "state": "running",
        "done": 3,
        "total": 10,
        "error": "",
        "result": {},
        "attempt": 1,
        "waiting": {"kind": "restore", "done": 64, "total": 4000},
    }
    assert "(waiting: the store is restoring its vector index after damage (64/4,000 chunks)" in (
        _job_line(job)
    )
    assert "(待機中: 損傷したベクトル索引を復元中 (64/4000チャンク)" in format_jobs([job])
    quiet = {**job, "waiting": None}
    assert "wait" not in _job_line(quiet) and "待機中" not in format_jobs([quiet])
