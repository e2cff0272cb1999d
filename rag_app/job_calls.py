"""A client's call that starts a job and waits for it: cancelling the call (Ctrl-C on
`rag crawl`, an MCP client cancelling `rag_crawl` with wait=true or going away) cancels
the job too — what it stored stays — unless the call joined another client's job."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

from rag_app.jobs import Progress

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


async def wait_cancelling(
    kb: Any, job: dict[str, Any], progress: Progress | None = None
) -> dict[str, Any]:
    """Wait until `job` ends and return it; a cancelled wait cancels the job (unless it
    was joined) before the cancel goes on."""
    try:
        return dict(await kb.wait_job(job["id"], progress=progress))
    except asyncio.CancelledError:
        if not job.get("joined"):
            with contextlib.suppress(Exception):  # the service went away: nothing to stop
                await asyncio.shield(kb.cancel_job(job["id"], interrupted=True))
        raise


__all__ = ["STOP_WAIT_SEC", "start_job", "wait_cancelling"]
