"""Starting a job from a client that may be interrupted meanwhile (Ctrl-C on `rag crawl`
or `rag refresh`): the job it started is cancelled too — what it stored stays — unless
the start joined another client's job."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

STOP_WAIT_SEC = 30.0
"""After a cancel, how long a start is let finish (its answer names the job to stop)."""


async def start_job(kb: Any, start: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Start a job. A cancel while the owner is starting it stops it too: the start is let
    finish, then the job is cancelled, unless it was another client's job this start
    joined."""
    starting = asyncio.ensure_future(start)
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # the service went away: nothing to stop
            job = await asyncio.wait_for(starting, STOP_WAIT_SEC)
            if not job.get("joined"):
                await asyncio.shield(kb.cancel_job(job["id"], interrupted=True))
        raise


__all__ = ["STOP_WAIT_SEC", "start_job"]
