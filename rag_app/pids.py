"""Whether a process still runs: a zombie (exited, not yet reaped) counts as gone.

A service started with `start_new_session` outlives the process that spawned it and is
reaped by PID 1; in a container whose PID 1 reaps late or never (Docker without
`--init`), an exited service stays a zombie that `kill(pid, 0)` still finds. A process
has exited once every thread of it has: its first thread turns zombie before the others
have closed its files and sockets.
"""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while `pid` runs (or cannot be inspected); False once it exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # every thread of it: the first one is a zombie while the others still close
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:  # reaped meanwhile, or a system without /proc
        return not os.path.isdir("/proc")
    except OSError:
        return True
    return any(_runs(f"/proc/{pid}/task/{task}/stat") for task in tasks)


def _runs(stat_path: str) -> bool:
    try:
        with open(stat_path, "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
    except OSError:  # that thread is gone
        return False
    return state not in ([b"Z"], [b"X"])
