"""The owner's record of running jobs, so a crawl or refresh outlives a restart.

A job is written here when it starts and removed when it ends (done, failed, or
cancelled by a user). A job the owner did not finish (killed, crashed, stopped with
the machine) is still listed at the next start, and the new owner runs it again under
the same id: pages committed before are unchanged, so they cost a conditional request
and no embedding. Writes replace the file atomically, in a thread of their own: an fsync
on a busy disk can take seconds, and the owner's event loop (searches, a cancel) must
not wait for it; the latest state is what gets written. An unreadable file is set aside
with a warning, never an error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from rag_app.index.bm25_segments import atomic_write

logger = logging.getLogger(__name__)

JOURNAL_FILE = ".rag-jobs.json"
"""In the store's folder; the `.rag-` prefix marks files that are not index data."""
MAX_ENTRIES = 100
"""Running jobs remembered at most (a bound on what a start may resume)."""
IDLE_SEC = 5.0
"""The writer thread ends after this long with nothing to write (a new write starts it)."""


class JobJournal:
    """`{job id: spec}` of unfinished jobs in one JSON file, read once when opened (the
    owner is its only writer) and rewritten on every change."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / JOURNAL_FILE
        self._entries = self._read()
        self._encoded: dict[str, str] = {}
        """Each entry as JSON, kept so that a change re-encodes only its own job (a crawl
        of 10,000 pages checkpoints ~2 MB a second; encoding every job each time, on the
        owner's event loop, cost 36 ms with four of them)."""
        self._cond = threading.Condition()
        self._queued: bytes | None = None
        self._wanted = 0
        """Generations asked for and written: `flush` waits until they meet."""
        self._written = 0
        self._writer: threading.Thread | None = None

    def pending(self) -> dict[str, dict[str, Any]]:
        """Unfinished jobs in start order."""
        return dict(self._entries)

    def record(self, job_id: str, spec: dict[str, Any]) -> None:
        """Remember a started job (its kind and the arguments that run it again)."""
        self._entries[job_id] = spec
        self._entries = dict(list(self._entries.items())[-MAX_ENTRIES:])
        self._encoded[job_id] = json.dumps(spec, ensure_ascii=False)
        self._write()

    def remove(self, job_id: str) -> None:
        """Forget a job that ended."""
        self._encoded.pop(job_id, None)
        if self._entries.pop(job_id, None) is not None:
            self._write()

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            self._set_aside(err)
            return {}
        if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
            self._set_aside(ValueError("not a mapping of job ids to specs"))
            return {}
        return {str(k): v for k, v in list(raw.items())[:MAX_ENTRIES]}

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every change so far is on disk (the owner is stopping)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._written >= self._wanted, timeout)

    def _write(self) -> None:
        """Queue the current entries for the writer thread (only the latest is written)."""
        parts = []
        for job_id, spec in self._entries.items():
            if job_id not in self._encoded:  # read at open: encoded on first write
                self._encoded[job_id] = json.dumps(spec, ensure_ascii=False)
            parts.append(f"{json.dumps(job_id, ensure_ascii=False)}: {self._encoded[job_id]}")
        for job_id in self._encoded.keys() - self._entries.keys():  # beyond MAX_ENTRIES
            del self._encoded[job_id]
        data = ("{" + ", ".join(parts) + "}").encode("utf-8")
        with self._cond:
            self._queued = data
            self._wanted += 1
            if self._writer is None:
                writer = threading.Thread(
                    target=self._write_queued, name="rag-job-journal", daemon=True
                )
                writer.start()  # if no thread can start, the next write tries again
                self._writer = writer
            self._cond.notify_all()

    def _write_queued(self) -> None:
        while True:
            with self._cond:
                if self._queued is None:
                    self._cond.wait(IDLE_SEC)
                if self._queued is None:  # idle: end; the next write starts a new thread
                    self._writer = None
                    return
                data, generation, self._queued = self._queued, self._wanted, None
            self._replace(data)
            with self._cond:
                self._written = generation
                self._cond.notify_all()

    def _replace(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path.parent, self.path.name, lambda fh: fh.write(data))
        except Exception as err:  # a full disk must not fail the crawl (nor end this thread)
            logger.warning("Could not update the job record %s (%s); a restart will not "
                           "resume these jobs.", self.path, err)  # fmt: skip

    def _set_aside(self, err: Exception) -> None:
        aside = self.path.with_name(self.path.name + ".unreadable")
        logger.warning("The job record %s is unreadable (%s); moved to %s, no job is resumed.",
                       self.path, err, aside.name)  # fmt: skip
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)


__all__ = ["JOURNAL_FILE", "JobJournal"]
