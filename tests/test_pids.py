"""`alive`: an exited process not yet reaped (a zombie) counts as gone."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_app.pids import alive
from rag_app.service.launcher import SPAWN_NOTE
from tests.processes import rag, store_env


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="zombies are told apart through /proc")
def test_an_exited_process_nobody_reaped_yet_is_not_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        os.kill(proc.pid, 0)  # still there for the kernel: a zombie until waited for
        assert not alive(proc.pid)
    finally:
        proc.wait()
    assert not alive(proc.pid)


def test_a_running_process_is_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not alive(proc.pid)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="zombies are told apart through /proc")
def test_a_killed_process_is_gone_only_once_its_sockets_are_closed() -> None:
    """A killed process with threads: its first thread is a zombie before the others
    have exited and closed its listening socket; only then does `alive` say gone."""
    child = (
        "import socket, threading, time, sys\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "for _ in range(16): threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
        port = int(proc.stdout.readline())
        proc.kill()
        while alive(proc.pid):
            time.sleep(0.001)
        with socket.socket() as again:  # no SO_REUSEADDR: a listener left would refuse it
            again.bind(("127.0.0.1", port))
        proc.wait()
        proc.stdout.close()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="zombies are told apart through /proc")
def test_a_service_that_exited_unreaped_is_started_again_at_once(tmp_path: Path) -> None:
    """A client's note says a service was started a moment ago, and that process has
    exited but nobody reaped it (as under a PID 1 that reaps late): the next `rag`
    command starts a new service instead of waiting for the dead one to get ready."""
    env = store_env(tmp_path, RAG_SERVICE_START_TIMEOUT_SEC="60")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    while alive(dead.pid):
        time.sleep(0.01)
    try:
        primary = tmp_path / "chroma_db"
        primary.mkdir()
        note = {"pid": dead.pid, "time": time.time()}
        (primary / SPAWN_NOTE).write_text(json.dumps(note), encoding="utf-8")
        start = time.monotonic()
        done = rag(env, "stats")
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - start < 30  # it did not wait out the 60 s start limit
    finally:
        dead.wait()
