"""Background jobs of the store's owner: long crawls and refreshes that outlive a request.

A job runs as an asyncio task in the owner process; any client lists jobs with their
progress, waits for one, or cancels one. Cancelling stops a job at its next await
(within a second or two: fetches are cancelled, a store write in progress is finished
first), and keeps every page committed before it. Finished jobs are kept for a while
so their summary can still be read. With a journal (the store service keeps one), a job
the owner did not finish is run again under its id by the next owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rag_app.errors import RAGError
from rag_app.job_journal import JobJournal
from rag_app.limits import MAX_JOB_ID_CHARS, MAX_RUNNING_JOBS, shorten
from rag_app.write_wait import NOTICE, WriteWait

logger = logging.getLogger(__name__)

REFRESH_TARGET = "stored web pages"
"""The `target` of every refresh job (kept in English in the job records and structured
output, which clients read; the tools' Japanese text shows `REFRESH_TARGET_JA`)."""
REFRESH_TARGET_JA = "保存済みのWebページ全体"

KEEP_FINISHED = 50
"""Finished jobs remembered (the oldest are forgotten first)."""
CANCEL_WAIT_SEC = 2.0
MAX_CRASHES = 3
"""A journaled job whose owner ended abnormally (killed, crashed) this many times while
it ran is not resumed again: it may be what brings the owner down. Clean stops do not count."""
Progress = Callable[[int, int], None]
Work = Callable[[Progress, "Job"], Awaitable[dict[str, Any]]]
"""A job's body: gets a progress callback and its job (to publish a live summary in)."""


class UnknownJobError(RAGError):
    """No job has this id (or it was forgotten)."""


@dataclass
class Job:
    """One job's state, as every client sees it."""

    id: str
    kind: str
    target: str
    state: str = "running"
    """running, done, failed or cancelled."""
    done: int = 0
    total: int = 0
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    result: dict[str, Any] = field(default_factory=dict)
    """The summary once the job has ended (partial after a cancel)."""
    live: Any = field(default=None, repr=False)
    """The summary object the work fills in as it goes (anything with `to_dict()`)."""
    error: str = ""
    attempt: int = 1
    """1 for a new job; 2 or more when a restarted owner runs it again."""
    resume_later: bool = field(default=False, repr=False)
    """Cancelled by the owner stopping (not by a user): its journal record stays."""
    interrupted: bool = False
    """Cancelled by the Ctrl-C of the client that started it, not by a user's cancel: a
    client that joined it and still waits starts its own."""
    waiting: WriteWait | None = None
    """What the job's write waits for (a restore or a reindex holds the writes), if any."""
    checkpoint: Callable[[dict[str, Any]], None] = field(default=lambda _state: None, repr=False)
    """Records where the work stands in the job's journal entry (for a resume)."""
    task: asyncio.Task[Any] | None = field(default=None, repr=False)
    changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.summary(),
            "error": self.error,
            "attempt": self.attempt,
            "interrupted": self.interrupted,
            "resumes": self.resume_later and self.state == "cancelled",
            "waiting": self.waiting.to_dict() if self.waiting else None,
        }

    def summary(self) -> dict[str, Any]:
        """The result, or what the running work has published so far."""
        if self.result or self.live is None:
            return dict(self.result)
        return dict(self.live.to_dict())

    @property
    def running(self) -> bool:
        return self.state == "running"

    def _touch(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


def outcome_of(job: dict[str, Any]) -> dict[str, Any]:
    """A finished job's result (from its `to_dict()`, as clients get it), or its failure or
    cancellation as the one-line `RAGError` it was."""
    kind, job_id = job.get("kind", "job"), job.get("id", "")
    if job.get("state") == "done":
        return dict(job.get("result") or {})
    if job.get("state") == "cancelled":
        done = job.get("result") or {}
        stored = done.get("pages_crawled", done.get("updated", 0))
        if job.get("resumes"):  # not a user's cancel: the next owner runs it on
            raise RAGError(
                f"The {kind} job {job_id} was interrupted by the store service stopping "
                f"({stored} pages kept); the next start of the service resumes it: follow "
                "it with `rag jobs` (rag_jobs) instead of starting it again."
            )
        raise RAGError(
            f"The {kind} job {job_id} was cancelled; what it committed is kept ({stored} pages)."
        )
    raise RAGError(job.get("error") or f"The {kind} job {job_id} failed.")


class JobRegistry:
    """The owner's jobs: start, list, wait for and cancel them."""

    def __init__(self, settle: Callable[[], Awaitable[None]] | None = None) -> None:
        self._jobs: dict[str, Job] = {}
        self._settle = settle
        """Waits for writes a cancelled job had under way (they finish, and are counted)."""
        self.journal: JobJournal | None = None
        """Where unfinished jobs are recorded (set by a long-lived owner)."""
        self.stopping = False
        """The owner is stopping: no new job starts."""

    @property
    def running(self) -> int:
        """How many jobs are running."""
        return sum(job.running for job in self._jobs.values())

    def start(
        self,
        kind: str,
        target: str,
        work: Work,
        *,
        spec: dict[str, Any] | None = None,
        job_id: str | None = None,
        attempt: int = 1,
        crashes: int = 0,
    ) -> Job:
        """Run `work` in the background as a new job; with `spec` (what runs it again) it
        is journaled until it ends, so that a restarted owner resumes it."""
        if self.stopping:
            raise RAGError("The store service is stopping; start the job again in a moment.")
        if job_id is None and self.running >= MAX_RUNNING_JOBS:  # a resumed one always runs
            raise RAGError(
                f"{MAX_RUNNING_JOBS} jobs are running already; wait for one to finish or "
                "cancel one (rag jobs --cancel ID, or the rag_jobs tool)."
            )
        job = Job(id=job_id or secrets.token_hex(4), kind=kind, target=target, attempt=attempt)
        self._jobs[job.id] = job
        self._forget_old()
        journal = self.journal if spec is not None else None
        record = {**(spec or {}), "kind": kind, "attempt": attempt, "crashes": crashes}
        if journal is not None:
            journal.record(job.id, record)

            def checkpoint(state: dict[str, Any]) -> None:
                if job.running:
                    record["checkpoint"] = state
                    journal.record(job.id, record)
                elif job.state == "cancelled" and job.resume_later:  # a write that ended
                    record["checkpoint"] = state  # after a clean stop: resumed with it
                    journal.record(job.id, {**record, "clean_stop": True})

            job.checkpoint = checkpoint

        def progress(done: int, total: int) -> None:
            job.done, job.total = done, total
            job._touch()

        def waiting(wait: WriteWait | None) -> None:
            job.waiting = wait
            job._touch()

        async def run() -> None:
            NOTICE.set(waiting)  # the job's own task: not the request that started it
            try:
                job.result = await work(progress, job)
                job.state = "done"
            except asyncio.CancelledError:
                job.state = "cancelled"  # `live` stays the result: late commits still count
            except RAGError as err:
                job.state, job.error = "failed", str(err)
            except Exception as err:
                logger.exception("Job %s (%s %s) failed", job.id, kind, target)
                job.state = "failed"
                job.error = f"Unexpected error ({type(err).__name__}); see the service log."
            finally:
                job.finished_at = time.time()
                if journal is None:
                    pass
                elif job.state == "cancelled" and job.resume_later:  # a clean stop: stays
                    journal.record(job.id, {**record, "clean_stop": True})
                else:
                    journal.remove(job.id)  # ended (done, failed, cancelled by a user)
                job._touch()

        job.task = asyncio.create_task(run())

        def never_ran(task: asyncio.Task[None]) -> None:
            """A job cancelled before its task first ran never reaches `run`'s ending."""
            if task.cancelled() and job.state == "running":
                job.state, job.finished_at = "cancelled", time.time()
                if journal is not None and not job.resume_later:
                    journal.remove(job.id)  # a user's cancel ends it for good
                job._touch()

        job.task.add_done_callback(never_ran)
        logger.info("Job %s started: %s %s", job.id, kind, target)
        return job

    def running_of(self, kind: str) -> Job | None:
        """The running job of this kind, if any (the oldest), not one being cancelled."""
        return next(
            (
                j
                for j in self._jobs.values()
                if j.running and j.kind == kind and not (j.task and j.task.cancelling())
            ),
            None,
        )

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id.strip())
        if job is None:
            raise UnknownJobError(
                f"There is no job {shorten(job_id, MAX_JOB_ID_CHARS)!r}; list the jobs with "
                "`rag jobs` (or rag_jobs)."
            )
        return job

    def outcome(self, job: Job) -> dict[str, Any]:
        """A finished job's result, or its failure as the one-line error it was."""
        return outcome_of(job.to_dict())

    def list(self) -> list[Job]:
        """Running jobs first, then the most recent."""
        return sorted(self._jobs.values(), key=lambda j: (not j.running, -j.started_at))

    async def wait(self, job: Job, progress: Progress | None = None) -> Job:
        """Wait until `job` ends, passing on its progress (and to `write_wait.NOTICE`
        what its write waits for)."""
        notice, told = NOTICE.get(), None
        if notice is not None and job.waiting is not None:  # joined while it waits
            told = job.waiting
            notice(told)
        shown: tuple[int, int] | None = None
        while job.running:
            changed = job.changed
            await changed.wait()
            if progress is not None and job.running:
                shown = (job.done, job.total)
                progress(*shown)
            if notice is not None and job.waiting != told:
                told = job.waiting
                notice(told)
        last = (job.done, job.total)
        if progress is not None and job.state == "done" and job.total and shown != last:
            progress(*last)  # the last count, which came with the end
        return job

    async def cancel(
        self, job_id: str, *, resume_later: bool = False, interrupted: bool = False
    ) -> Job:
        """Stop a running job (waits up to `CANCEL_WAIT_SEC` for it to wind down); with
        `resume_later` (the owner is stopping) its journal record stays; `interrupted`:
        its starter's Ctrl-C, not a user's cancel."""
        job = self.get(job_id)
        if job.running and job.task is not None:
            if job.task.cancelling() and not job.resume_later:
                resume_later = False  # a user's cancel under way stays final
            if job.task.cancelling() and not job.interrupted:
                interrupted = False  # so does a user's cancel over a Ctrl-C
            job.resume_later = resume_later
            job.interrupted = interrupted
            deadline = time.monotonic() + CANCEL_WAIT_SEC
            job.task.cancel()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(job.task), CANCEL_WAIT_SEC)
                if self._settle is not None:
                    left = max(0.0, deadline - time.monotonic())
                    await asyncio.wait_for(asyncio.shield(self._settle()), left)
        return job

    async def cancel_all(self) -> None:
        """Cancel every running job (the owner is stopping: journaled jobs stay recorded,
        for the next owner to resume)."""
        self.stopping = True
        for job in self.list():
            if job.running:
                await self.cancel(job.id, resume_later=True)

    def record_failed(
        self, job_id: str, kind: str, target: str, error: str, attempt: int = 1
    ) -> Job:
        """List a job that could not run again (a resume refused) as failed, with why:
        its client was told of it and looks for it in `rag jobs`."""
        now = time.time()
        job = Job(
            id=job_id, kind=kind, target=target, state="failed", error=error,
            attempt=attempt, started_at=now, finished_at=now,
        )  # fmt: skip
        self._jobs[job_id] = job
        self._forget_old()
        return job

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if not j.running]
        finished.sort(key=lambda j: j.finished_at or 0)
        for job in finished[: max(0, len(finished) - KEEP_FINISHED)]:
            del self._jobs[job.id]


__all__ = ["CANCEL_WAIT_SEC", "MAX_CRASHES", "Job", "JobRegistry", "UnknownJobError", "outcome_of"]
