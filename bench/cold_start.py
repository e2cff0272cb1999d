"""Cold start of the store service on a big store: the service as shipped (cyclic GC off
until the store is open) against the same service with the GC on all along, alternating.

Not a test. Each round starts a store service on the store (no other running), waits
until it says ready, then answers one `rag search` from a new process; the service's
log splits the open into its steps (the builtin model loads in the warm-up before
ready: import 0.06 s, load 0.01 s, a first query 0.05 s). Ratios are shipped ÷ GC-on in
the same run. Ends with
true cold `rag search` runs (each starts the service itself), as a user meets them, each
followed by a warm one, and as many launches of `rag-mcp` over stdio to its first
answer. A store built here has a source record per page, as an ingest leaves it.

    python bench/cold_start.py --build 100000 [--keep DIR] [--rounds 4]
    python bench/cold_start.py --store DIR [--rounds 4]     # a store --keep left
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from shared_store import build, env_for  # noqa: E402

BIN = Path(sys.executable).parent
SHIPPED = [sys.executable, "-m", "rag_app.service.server"]
GC_ON = [  # the same service, its gc.disable() made a no-op
    sys.executable,
    "-c",
    "import gc, runpy; gc.disable = lambda: None; "
    "runpy.run_module('rag_app.service.server', run_name='__main__')",
]
QUERY = "りゅうおうのHP"


def _state(chroma: Path) -> str:
    try:
        return str(json.loads((chroma / ".rag-owner.json").read_text())["state"])
    except (OSError, ValueError, KeyError):
        return ""


def _stop(env: dict[str, str]) -> None:
    subprocess.run([str(BIN / "rag"), "service", "stop"], env=env, capture_output=True)


def one_start(command: list[str], folder: Path, env: dict[str, str]) -> dict[str, float]:
    """Seconds until the service is ready and until a new `rag search` answered, and the
    open's steps from its log."""
    chroma = folder / "chroma"
    log = chroma / ".rag-service.log"
    log.unlink(missing_ok=True)
    t0 = time.perf_counter()
    with log.open("ab") as out:
        proc = subprocess.Popen(command, env=env, cwd=chroma, stdout=out, stderr=out)
    while _state(chroma) != "ready":
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited: {log.read_text()[-800:]}")
        time.sleep(0.005)
    ready = time.perf_counter() - t0
    done = subprocess.run(
        [str(BIN / "rag"), "search", QUERY], env=env, capture_output=True, text=True
    )
    answered = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-500:])
    _stop(env)
    proc.wait(30)
    row = {"ready": ready, "answered": answered}
    opened = [ln for ln in log.read_text().splitlines() if "Opened" in ln][-1]
    for part in opened.split("(", 1)[1].rstrip(")").split(", "):
        name, value, _ = part.split(" ")
        row[name] = float(value)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="", help="a store folder --keep left")
    ap.add_argument("--build", type=int, default=0, help="build a store of this many chunks")
    ap.add_argument("--keep", default="", help="build into this folder and keep it")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.store or args.keep or Path(tmp) / "store").resolve()
        if not args.store:
            folder.mkdir(parents=True, exist_ok=True)
            asyncio.run(build(folder, args.build))
        env = env_for(folder)
        _stop(env)
        rows: dict[str, list[dict[str, float]]] = {"shipped": [], "gc on": []}
        for _ in range(args.rounds):
            rows["shipped"].append(one_start(SHIPPED, folder, env))
            rows["gc on"].append(one_start(GC_ON, folder, env))
        med = {
            name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            for name, runs in rows.items()
        }
        for name, m in med.items():
            parts = ", ".join(f"{k} {v:.2f}" for k, v in m.items())
            print(f"{name:8s} median of {args.rounds} (s): {parts}")
        for name, runs in rows.items():
            print(f"{name:8s} each round, ready: " + " ".join(f"{r['ready']:.2f}" for r in runs))
        for k in ("ready", "answered"):
            print(f"shipped / gc on, {k}: {med['shipped'][k] / med['gc on'][k]:.2f}")
        cold, warm = [], []
        for _ in range(args.rounds):
            _stop(env)
            time.sleep(0.5)  # the stopped service's files settle
            cold.append(_timed_search(env))
            warm.append(_timed_search(env))
        _stop(env)
        print(f"a cold `rag search` (it starts the service), median of {args.rounds}: "
              f"{statistics.median(cold):.2f} s (each: {' '.join(f'{c:.2f}' for c in cold)}); "
              f"then a warm one (service running): {statistics.median(warm):.2f} s")  # fmt: skip
        mcp = []
        for _ in range(args.rounds):
            _stop(env)
            time.sleep(0.5)
            mcp.append(asyncio.run(_mcp_first_answer(env)))
        _stop(env)
        print(f"a new `rag-mcp` over stdio, no service running: `initialize` answered after "
              f"{statistics.median(i for i, _ in mcp):.2f} s, its first `rag_search` after "
              f"{statistics.median(a for _, a in mcp):.2f} s (median of {args.rounds}; each: "
              f"{' '.join(f'{a:.2f}' for _, a in mcp)})")  # fmt: skip


async def _mcp_first_answer(env: dict[str, str]) -> tuple[float, float]:
    """Launch `rag-mcp` as an MCP client does: seconds to `initialize`, and to the answer
    of the first `rag_search`."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=str(BIN / "rag-mcp"), args=[], env=env)
    t0 = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            ready = time.perf_counter() - t0
            result = await session.call_tool("rag_search", {"query": QUERY})
            if result.is_error:
                raise RuntimeError(str(result.content)[:500])
            return ready, time.perf_counter() - t0


def _timed_search(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([str(BIN / "rag"), "search", QUERY], env=env, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-500:])
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
