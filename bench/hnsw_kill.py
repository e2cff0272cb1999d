"""Kill -9 a Chroma writer at random moments: how often is the next open refused?

Not a test. Builds a base store (a writer adding batches of 64 random 384-dim vectors for
4 s, then returning normally), then per round: copies it (with `--grow`, keeps the one
store instead, so it grows over the killed rounds), starts the writer on it, kills it
with SIGKILL 0.3–3 s in, and opens the store in a new process (count, one query, a read
of the newest vectors). Chroma saves its HNSW files every `sync_threshold`
new vectors; a kill during a save can leave them damaged, and the open then fails.
Compare thresholds in separate runs (the project keeps Chroma's default, 1,000; README
"Cold start"):

    python bench/hnsw_kill.py --threshold 100 --rounds 40
    python bench/hnsw_kill.py --threshold 1000 --rounds 40 [--grow]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WRITER = r"""
import sys, time, numpy as np, chromadb
from rag_app.index.chroma_store import HNSW_BUILD
client = chromadb.PersistentClient(path=sys.argv[1])
hnsw = {**HNSW_BUILD, "ef_search": 400, "sync_threshold": int(sys.argv[2])}
col = client.get_or_create_collection(
    "kbase", configuration={"hnsw": hnsw}, embedding_function=None)
rng = np.random.default_rng(time.time_ns() % 2**32)
i = col.count()
print("ready", flush=True)
until = time.monotonic() + float(sys.argv[3])
while time.monotonic() < until:
    v = rng.normal(size=(64, 384)).astype(np.float32)
    col.upsert(ids=[f"c{i + k}" for k in range(64)], embeddings=v.tolist(), documents=["x"] * 64)
    i += 64
"""

CHECK = r"""
import sys, json, numpy as np, chromadb
try:
    col = chromadb.PersistentClient(path=sys.argv[1]).get_collection("kbase")
    n = col.count()
    col.query(query_embeddings=[np.ones(384).tolist()], n_results=5)
    col.get(limit=50, offset=max(0, n - 50), include=["embeddings"])
    print(json.dumps({"ok": True, "vectors": n}))
except Exception as err:
    print(json.dumps({"ok": False, "error": str(err)[:200]}))
"""


def _writer(path: Path, threshold: int, seconds: float = 3600.0) -> subprocess.Popen[str]:
    """A writer adding vectors to the store at `path` for `seconds`."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(threshold), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # "ready": the collection is open
    return proc


def _check(path: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(path)], capture_output=True, text=True, timeout=300
    )
    lines = done.stdout.strip().splitlines()
    if lines:
        return dict(json.loads(lines[-1]))
    return {"ok": False, "error": f"exit {done.returncode}: {done.stderr[-200:]}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threshold", type=int, default=1000, help="Chroma's sync_threshold")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--grow", action="store_true", help="one store over all rounds")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        base, copy = Path(tmp) / "base", Path(tmp) / "round"
        proc = _writer(base, args.threshold, seconds=4.0)
        proc.wait(120)
        print(f"base store: {_check(base)}")
        refused = 0
        for n in range(args.rounds):
            if not args.grow or not copy.exists():
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(base, copy)
            proc = _writer(copy, args.threshold)
            time.sleep(rng.uniform(0.3, 3.0))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            result = _check(copy)
            refused += not result["ok"]
            print(f"round {n}: {result}", flush=True)
    print(f"sync_threshold {args.threshold}: the next open failed after {refused} of "
          f"{args.rounds} kills")  # fmt: skip


if __name__ == "__main__":
    main()
