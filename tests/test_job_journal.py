"""The job journal: unfinished jobs survive their owner; ended ones are forgotten."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rag_app.errors import RAGError
from rag_app.job_journal import JOURNAL_FILE, JobJournal
from rag_app.jobs import Job, JobRegistry, Progress
from rag_app.limits import MAX_RUNNING_JOBS


async def _forever(_progress: Progress, _job: Job) -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {}


async def _quick(_progress: Progress, _job: Job) -> dict[str, Any]:
    return {"ok": 1}


async def test_only_jobs_cut_off_by_a_shutdown_stay_recorded(tmp_path: Path) -> None:
    registry = JobRegistry()
    registry.journal = JobJournal(tmp_path)
    done = registry.start("crawl", "a", _quick, spec={"url": "a"})
    user = registry.start("crawl", "b", _forever, spec={"url": "b"})
    cut = registry.start("refresh", "c", _forever, spec={}, job_id="cafe0001", attempt=2)
    plain = registry.start("crawl", "d", _forever)  # no spec: never recorded
    assert set(registry.journal.pending()) == {done.id, user.id, cut.id}
    await registry.wait(done)
    await registry.cancel(user.id)  # a user's cancel ends the job for good
    await registry.cancel_all()  # the owner stops: the rest stay, for the next owner
    assert registry.journal.pending() == {
        "cafe0001": {"kind": "refresh", "attempt": 2, "crashes": 0, "clean_stop": True}
    }
    assert plain.state == "cancelled" and cut.to_dict()["attempt"] == 2
    with pytest.raises(RAGError, match="stopping"):  # no job starts once stopping
        registry.start("crawl", "e", _quick, spec={"url": "e"})


async def _stubborn(_progress: Progress, _job: Job) -> dict[str, Any]:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.3)  # winds down slowly, as a crawl finishing a write does
        raise
    return {}


async def test_a_users_cancel_stays_final_when_a_shutdown_follows(tmp_path: Path) -> None:
    registry = JobRegistry()
    registry.journal = JobJournal(tmp_path)
    job = registry.start("crawl", "a", _stubborn, spec={"url": "a"})
    await asyncio.sleep(0)
    assert job.task is not None
    job.task.cancel()  # a user's cancel, still winding down ...
    await registry.cancel_all()  # ... when the owner stops
    assert job.state == "cancelled" and registry.journal.pending() == {}


def test_an_unreadable_record_is_set_aside_not_fatal(tmp_path: Path) -> None:
    (tmp_path / JOURNAL_FILE).write_text("{not json", encoding="utf-8")
    journal = JobJournal(tmp_path)
    assert journal.pending() == {}
    assert (tmp_path / (JOURNAL_FILE + ".unreadable")).exists()
    journal.record("beef0002", {"kind": "crawl", "url": "u"})
    assert journal.flush()
    assert JobJournal(tmp_path).pending() == {"beef0002": {"kind": "crawl", "url": "u"}}
    (tmp_path / JOURNAL_FILE).write_text('["a list"]', encoding="utf-8")
    assert JobJournal(tmp_path).pending() == {}


def test_a_slow_disk_does_not_hold_up_the_caller_and_the_latest_state_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = JobJournal(tmp_path)
    real = journal._replace
    release = threading.Event()

    def slow(data: bytes) -> None:  # an fsync stuck behind another process's writeback
        release.wait(10)
        real(data)

    monkeypatch.setattr(journal, "_replace", slow)
    began = time.monotonic()
    for n in range(50):  # a crawl's checkpoints, on the owner's event loop
        journal.record("cafe0003", {"kind": "crawl", "checkpoint": {"done": n}})
    journal.remove("cafe0003")
    journal.record("cafe0004", {"kind": "refresh"})
    assert time.monotonic() - began < 1.0
    assert not journal.flush(timeout=0.2)  # still on its way
    release.set()
    assert journal.flush(timeout=10)
    assert JobJournal(tmp_path).pending() == {"cafe0004": {"kind": "refresh"}}


def test_the_file_holds_exactly_the_entries_after_updates_and_removals(tmp_path: Path) -> None:
    """Each entry is encoded when it changes and the file joins them: updates, removals
    and the bound on entries all land as they would from one encoding of everything."""
    journal = JobJournal(tmp_path)
    for i in range(5):
        journal.record(f"job{i}", {"kind": "crawl", "checkpoint": {"done": i}})
    journal.record("job1", {"kind": "crawl", "checkpoint": {"done": 99, "note": "日本語"}})
    journal.remove("job3")
    journal.remove("never-there")
    assert journal.flush()
    on_disk = json.loads(journal.path.read_text(encoding="utf-8"))
    assert on_disk == journal.pending()
    assert list(on_disk) == ["job0", "job1", "job2", "job4"]
    assert on_disk["job1"]["checkpoint"]["note"] == "日本語"
    reopened = JobJournal(tmp_path)
    reopened.record("job9", {"kind": "refresh"})
    assert reopened.flush()
    assert list(json.loads(reopened.path.read_text(encoding="utf-8"))) == [
        "job0", "job1", "job2", "job4", "job9",
    ]  # fmt: skip


async def test_at_most_a_bounded_number_of_jobs_run_at_once() -> None:
    """Each job holds a crawl's state and its task: a client starting hundreds is told
    to wait, and a job resumed by a restarted owner always runs."""
    registry = JobRegistry()
    jobs = [registry.start("crawl", f"u{i}", _forever) for i in range(MAX_RUNNING_JOBS)]
    with pytest.raises(RAGError, match="jobs are running already") as info:
        registry.start("crawl", "one more", _forever)
    assert "\n" not in str(info.value)
    resumed = registry.start("refresh", "r", _forever, job_id="cafe0002", attempt=2)
    assert resumed.running
    await registry.cancel(jobs[0].id)
    await registry.cancel(resumed.id)
    assert registry.start("crawl", "now", _forever).running  # room again
    await registry.cancel_all()


async def test_a_job_cancelled_before_it_first_ran_ends_cancelled(tmp_path: Path) -> None:
    registry = JobRegistry()
    registry.journal = JobJournal(tmp_path)
    job = registry.start("crawl", "a", _forever, spec={"url": "a"})
    await registry.cancel(job.id)  # in the same turn of the loop: its task never ran
    assert job.state == "cancelled" and registry.running == 0
    assert registry.journal.pending() == {}


async def test_a_job_that_cannot_run_again_is_listed_as_failed_with_why(kb: Any) -> None:
    """A journaled job the next owner refuses (its URL is refused under this owner's
    settings) or gives up on (it was running at too many crashes) is listed as failed
    with the reason: it vanished, and its client had been told its id."""
    from rag_app.jobs import MAX_CRASHES
    from rag_app.owner_lock import state_dirs

    journal = JobJournal(state_dirs(kb.settings)[0])
    journal.record("dead0001", {"kind": "crawl", "url": "http://127.0.0.1:9/x", "attempt": 1})
    journal.record(
        "dead0002",
        {"kind": "crawl", "url": "https://example.com/", "attempt": 3, "crashes": MAX_CRASHES},
    )
    assert journal.flush()
    assert await kb.resume_jobs() == []
    jobs = {j["id"]: j for j in await kb.jobs()}
    assert jobs["dead0001"]["state"] == "failed", jobs
    assert (
        "Could not be resumed" in jobs["dead0001"]["error"]
        and "127.0.0.1" in jobs["dead0001"]["error"]
    )
    assert jobs["dead0002"]["state"] == "failed"
    assert "ended abnormally" in jobs["dead0002"]["error"], jobs["dead0002"]
    assert jobs["dead0002"]["target"] == "https://example.com/"
    kb.flush_journal()
    assert JobJournal(state_dirs(kb.settings)[0]).pending() == {}  # not tried again


async def test_a_waited_job_cut_off_by_the_owner_stopping_says_it_resumes() -> None:
    """The client waiting for a job the stopping owner cuts off is told it resumes with
    the next owner (it was told "cancelled", started it again, and ran it twice); a
    user's cancel still says cancelled."""
    registry = JobRegistry()
    stopped = registry.start("crawl", "https://example.com/", _forever, spec={"url": "u"})
    user = registry.start("crawl", "https://example.org/", _forever, spec={"url": "v"})
    await asyncio.sleep(0)
    await registry.cancel(user.id)
    await registry.cancel_all()
    with pytest.raises(RAGError, match="interrupted by the store service stopping") as cut:
        registry.outcome(await registry.wait(stopped))
    assert stopped.id in str(cut.value) and "rag jobs" in str(cut.value)
    with pytest.raises(RAGError, match="was cancelled; what it committed is kept"):
        registry.outcome(await registry.wait(user))
