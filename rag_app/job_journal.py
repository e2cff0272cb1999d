"""The owner's record of running jobs, so a crawl or refresh outlives a restart.

A job is written here when it starts and removed when it ends (done, failed, or
cancelled by a user). A job the owner did not finish (killed, crashed, stopped with
the machine) is still listed at the next start, and the new owner runs it again under
the same id: pages committed before are unchanged, so they cost a conditional request
and no embedding. Writes replace the file atomically; an unreadable file is set aside
with a warning, never an error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from rag_app.index.bm25_segments import atomic_write

logger = logging.getLogger(__name__)

JOURNAL_FILE = ".rag-jobs.json"
"""In the store's folder; the `.rag-` prefix marks files that are not index data."""
MAX_ENTRIES = 100
"""Running jobs remembered at most (a bound on what a start may resume)."""


class JobJournal:
    """`{job id: spec}` of unfinished jobs in one JSON file, read once when opened (the
    owner is its only writer) and rewritten on every change."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / JOURNAL_FILE
        self._entries = self._read()

    def pending(self) -> dict[str, dict[str, Any]]:
        """Unfinished jobs in start order."""
        return dict(self._entries)

    def record(self, job_id: str, spec: dict[str, Any]) -> None:
        """Remember a started job (its kind and the arguments that run it again)."""
        self._entries[job_id] = spec
        self._entries = dict(list(self._entries.items())[-MAX_ENTRIES:])
        self._write()

    def remove(self, job_id: str) -> None:
        """Forget a job that ended."""
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

    def _write(self) -> None:
        data = json.dumps(self._entries, ensure_ascii=False).encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path.parent, self.path.name, lambda fh: fh.write(data))
        except OSError as err:  # a full disk must not fail the crawl itself
            logger.warning("Could not update the job record %s (%s); a restart will not "
                           "resume these jobs.", self.path, err)  # fmt: skip

    def _set_aside(self, err: Exception) -> None:
        aside = self.path.with_name(self.path.name + ".unreadable")
        logger.warning("The job record %s is unreadable (%s); moved to %s, no job is resumed.",
                       self.path, err, aside.name)  # fmt: skip
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)


__all__ = ["JOURNAL_FILE", "JobJournal"]
