"""Find the owner of a store, or start one, and hand back a client.

The owner publishes `{pid, port, token, state, fingerprint}` in `.rag-owner.json` in
the store's first folder while it holds the owner lock. A client:

1. reads that file and asks the owner for its health (ready → connect);
2. finds no live owner (the lock is free) → starts `python -m rag_app.service.server`
   in the background with this process's settings, then waits until it is ready;
3. finds an owner running with other store settings → asks an idle one to stop and
   starts one with its own (a busy one is reported, never interrupted).

Starting is serialised by a spawn lock plus a spawn note, so many clients starting
at once start one owner.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from rag_app.config import RAGSettings
from rag_app.errors import ServiceError
from rag_app.owner_lock import LOCK_NAME, prepare_dirs, read_info, state_dirs
from rag_app.pids import alive
from rag_app.service import protocol

SPAWN_LOCK = ".rag-spawn.lock"
SPAWN_NOTE = ".rag-spawn.json"
LOG_NAME = ".rag-service.log"
PID_MAX = 4_194_304  # Linux's highest pid_max: a larger number in an owner file is not one
LOG_MAX_BYTES = 5 * 1024 * 1024
POLL_SEC = 0.1
STARTING_POLL_SEC = 0.01
"""While the owner's file says it is starting, the file alone is read this often (a
health request each POLL_SEC): a new `rag` command meets the ready owner within 10 ms,
not up to 100 ms later."""


def _owner_lock_free(dirs: list[Path]) -> bool:
    """True when no process holds the store (probed by taking and dropping the lock)."""
    for d in dirs:
        lock = FileLock(d / LOCK_NAME, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return False
        lock.release()
    return True


def service_env(settings: RAGSettings) -> dict[str, str]:
    """This process's environment with every setting spelled out (paths made absolute)."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if value is None:
            env.pop(name.upper(), None)
            continue
        if name in ("chromadb_persist_dir", "bm25_persist_dir") and value:
            value = str(Path(value).expanduser().resolve())
        env[name.upper()] = json.dumps(value) if isinstance(value, bool) else str(value)
    return env


async def _health(info: dict[str, Any], timeout: float = 2.0) -> dict[str, Any] | None:
    """The owner's health answer, or None when it cannot be reached or cannot prove that
    it holds the token (a process that took over a dead owner's port is not trusted, and
    is never sent the token)."""
    import aiohttp

    nonce = secrets.token_hex(16)
    url = f"http://127.0.0.1:{int(info.get('port', 0))}{protocol.API}/health?nonce={nonce}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url) as resp,
        ):
            if resp.status != 200:
                return None
            data = await resp.json()
    except (aiohttp.ClientError, TimeoutError, ValueError, OSError):
        return None
    if not isinstance(data, dict):
        return None
    expected = protocol.proof(str(info.get("token", "")), nonce)
    if not hmac.compare_digest(str(data.get("proof", "")), expected):
        return None
    return data


async def _post_shutdown(info: dict[str, Any]) -> None:
    import aiohttp

    url = f"http://127.0.0.1:{int(info.get('port', 0))}{protocol.API}/shutdown"
    headers = {protocol.TOKEN_HEADER: f"Bearer {info.get('token', '')}"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.post(url, headers=headers) as resp,
        ):
            await resp.read()
    except (aiohttp.ClientError, TimeoutError, OSError):
        pass


def _log_tail(primary: Path) -> str:
    """Why the owner stopped: its last ERROR line (without time and level), if any."""
    try:
        lines = (primary / LOG_NAME).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for text in reversed(lines[-200:]):
        if " ERROR " in text:
            return text.split(": ", 1)[-1].strip()
        if text.startswith("rag-store: "):
            return text.removeprefix("rag-store: ").strip()
    return ""


def _spawn(settings: RAGSettings, primary: Path) -> subprocess.Popen[bytes] | None:
    """Start an owner unless one is starting already (serialised across processes)."""
    with FileLock(primary / SPAWN_LOCK, timeout=30):
        note = primary / SPAWN_NOTE
        try:
            seen = json.loads(note.read_text(encoding="utf-8"))
            recent = time.time() - float(seen["time"]) < settings.rag_service_start_timeout_sec
            if recent and alive(int(seen["pid"])):
                return None  # another client started one a moment ago
        except (OSError, ValueError, KeyError, TypeError):
            pass
        if not _owner_lock_free(state_dirs(settings)):
            return None
        log_path = primary / LOG_NAME
        if log_path.exists() and log_path.stat().st_size > LOG_MAX_BYTES:
            log_path.replace(log_path.with_suffix(".log.1"))
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rag_app.service.server"],
                env=service_env(settings),
                cwd=primary,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # outlives this client, ignores its Ctrl-C
            )
        note.write_text(json.dumps({"pid": proc.pid, "time": time.time()}), encoding="utf-8")
        return proc


def start_soon(settings: RAGSettings) -> None:
    """Start the store's owner now when none runs, without waiting for it: a server that
    imports its own libraries next (`rag-mcp`: the MCP SDK) does so while the owner opens
    the store, on another core. Never raises: `find_owner` says what is wrong later."""
    try:
        dirs = prepare_dirs(settings)
        if _owner_lock_free(dirs):
            _spawn(settings, dirs[0])
    except Exception as err:  # a bad folder, a lock timeout: reported by the first call
        logging.getLogger(__name__).debug("The store service was not started early: %s", err)


async def find_owner(settings: RAGSettings) -> dict[str, Any]:
    """The ready owner's published details, starting an owner if there is none."""
    dirs = prepare_dirs(settings)
    primary = dirs[0]
    mine = protocol.fingerprint(settings)
    deadline = time.monotonic() + settings.rag_service_start_timeout_sec
    proc: subprocess.Popen[bytes] | None = None
    asked_to_stop = False
    checked = 0.0
    while True:
        info = read_info(primary)
        if (
            info.get("state") == "starting"
            and time.monotonic() - checked < POLL_SEC
            and int(info.get("pid") or 0) > 0
            and alive(int(info["pid"]))
        ):
            await asyncio.sleep(STARTING_POLL_SEC)
            continue
        checked = time.monotonic()
        if info.get("state") == "failed" and info.get("pid") and alive(int(info["pid"])):
            raise ServiceError(
                f"The store service could not open the knowledge base: {info.get('error')}"
            )
        health = await _health(info) if info else None
        if health is not None:
            state = health.get("state")
            if state == "ready":
                # the owner file's settings: the health answer proved it is that owner's
                diff = protocol.differences(mine, dict(info.get("fingerprint") or {}))
                if not diff:
                    return info
                if not asked_to_stop:  # an idle owner with other settings makes way
                    jobs = health.get("jobs")  # a crawl it runs would be cut off
                    if isinstance(jobs, int) and jobs > 0:
                        raise ServiceError(
                            f"The store service (pid {info.get('pid')}) for {primary} runs with "
                            f"other settings ({', '.join(diff[:4])}) and is running {jobs} "
                            "job(s) (a crawl or a refresh); run this command with the same "
                            "settings as the one that started them, or wait until they end "
                            "(`rag jobs` with those settings lists and cancels them)."
                        )
                    if health.get("inflight"):
                        raise ServiceError(
                            f"The store service (pid {info.get('pid')}) for {primary} runs with "
                            f"other settings ({', '.join(diff[:4])}) and is busy; wait for it "
                            "to finish or stop it with `rag service stop`."
                        )
                    await _post_shutdown(info)
                    asked_to_stop = True
            elif state == "failed":
                raise ServiceError(
                    f"The store service could not open the knowledge base: {health.get('error')}"
                )
        elif await asyncio.to_thread(_owner_lock_free, dirs):
            if proc is not None and proc.poll() is not None and proc.returncode != 3:
                reason = _log_tail(primary) or f"it exited with status {proc.returncode}"
                raise ServiceError(f"The store service did not start: {reason}")
            started = await asyncio.to_thread(_spawn, settings, primary)
            proc = started or proc
        if time.monotonic() > deadline:
            raise ServiceError(
                f"No store service answered for {primary} within "
                f"{settings.rag_service_start_timeout_sec:.0f} s; see {primary / LOG_NAME} "
                "(or raise RAG_SERVICE_START_TIMEOUT_SEC)."
            )
        await asyncio.sleep(POLL_SEC)


async def connect(settings: RAGSettings) -> Any:
    """A client of the store's owner (started if needed) with the KnowledgeBase's methods."""
    info = await find_owner(settings)  # first: a service to start starts sooner
    from rag_app.service.client import StoreClient

    return StoreClient(settings, info)


async def service_status(settings: RAGSettings) -> dict[str, Any] | None:
    """The running owner's details and health; None when no service runs; `state` "not
    answering" when the live process its owner file names holds the store and does not
    answer (stopped, hung). The store held with no such file is not a service answering
    or failing to: one stopping (its file goes first), a script holding the store
    in-process, or a new owner about to write its file (given a moment) — None."""
    dirs = state_dirs(settings)
    for attempt in range(3):
        info = read_info(dirs[0])
        health = await _health(info) if info else None
        if health is not None:
            public = {k: v for k, v in info.items() if k != "token"}
            return {**public, **health, "folder": str(dirs[0])}
        if await asyncio.to_thread(_owner_lock_free, dirs):
            return None
        if _live_pid(info) is not None:
            return _not_answering(info, dirs[0])
        if attempt < 2:
            await asyncio.sleep(0.3)
    return None


def _live_pid(info: dict[str, Any] | None) -> int | None:
    """The pid an owner file names, when it is a running process."""
    pid = info.get("pid") if info else None
    if type(pid) is not int or not 0 < pid <= PID_MAX:
        return None
    return pid if alive(pid) else None


def _not_answering(info: dict[str, Any] | None, primary: Path) -> dict[str, Any]:
    return {
        "state": "not answering",
        "pid": (info or {}).get("pid"),
        "folder": str(primary),
        "log": str(primary / LOG_NAME),
    }


def not_answering_text(status: dict[str, Any]) -> str:
    who = f"Process {status['pid']}" if status.get("pid") else "A process"
    return (
        f"{who} holds the store in {status['folder']} but its store service does not "
        f"answer (stopped or hung?); see {status['log']}."
    )


async def stop_service(settings: RAGSettings, timeout: float = 30.0) -> bool:
    """Ask the running owner to stop and wait until it has; False when none was running."""
    status = await service_status(settings)
    if status is None:
        return False
    if status["state"] == "not answering":
        raise ServiceError(not_answering_text(status))
    info = read_info(state_dirs(settings)[0]) or {}
    await _post_shutdown(info)
    dirs = state_dirs(settings)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(_owner_lock_free, dirs):
            return True
        await asyncio.sleep(POLL_SEC)
    raise ServiceError(
        f"The store service (pid {info.get('pid')}) did not stop within {timeout:.0f} s."
    )
