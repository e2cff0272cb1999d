"""Search latency while a large ingest runs in the same store service, against idle.

Not a test. Starts a store service on a temporary store, indexes a base folder, then
times searches through a client (the way `rag-mcp` asks): first with nothing else
running (idle), then while `rag index` embeds a large folder (busy). Prints p50/p95
of both and the busy/idle ratio (idle: searches before and after the ingest, since the
machine's speed drifts), and the ingest's own throughput.

    python bench/search_during_ingest.py [--files 120] [--searches 100] [--paragraphs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_app.config import load_settings  # noqa: E402
from rag_app.service import connect, stop_service  # noqa: E402

QUERIES = ["りゅうおうのHP", "京都の寺院", "asyncio timeout", "スライムの攻撃力", "料理と季節"]
TOPICS = [
    "京都の寺院",
    "東京の天気",
    "大阪の料理",
    "勇者の剣",
    "スライムの群れ",
    "asyncio の使い方",
]


def write_folder(folder: Path, files: int, paragraphs: int, seed: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for i in range(files):
        parts = [f"# 文書 {seed}-{i}"]
        for k in range(paragraphs):
            topic = TOPICS[int(rng.integers(len(TOPICS)))]
            parts.append(
                f"{topic}について、第{k}節では歴史と現在を説明する。{topic}は多くの人に知られて"
                f"おり、季節ごとに異なる表情を見せる。番号 {seed}-{i}-{k} の記録。"
            )
        (folder / f"doc{i:04d}.md").write_text("\n\n".join(parts), encoding="utf-8")


STEPS: dict[str, dict[str, list[float]]] = {"idle": {}, "busy": {}}
"""Each search's step timings inside the service (ms), by phase and step."""


async def search_loop(
    client: object, until: subprocess.Popen[bytes] | None, n: int, phase: str = ""
) -> list[float]:
    times: list[float] = []
    i = 0
    while (until is None and i < n) or (until is not None and until.poll() is None):
        t0 = time.perf_counter()
        result = await client.retrieve(QUERIES[i % len(QUERIES)], n_results=3)  # type: ignore[attr-defined]
        times.append((time.perf_counter() - t0) * 1000)
        if phase:
            for step, ms in result.timings.items():
                STEPS[phase].setdefault(step, []).append(ms)
        i += 1
        await asyncio.sleep(0.05)
    return times


async def main_async(files: int, searches: int, paragraphs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ.update(
            CHROMADB_PERSIST_DIR=str(root / "chroma"),
            BM25_PERSIST_DIR=str(root / "bm25"),
            RAG_SERVICE_IDLE_SEC="600",
        )
        settings = load_settings()
        write_folder(root / "base", 30, 6, seed=1)
        write_folder(root / "big", files, paragraphs, seed=2)
        rag = str(Path(sys.executable).parent / "rag")
        subprocess.run([rag, "index", str(root / "base")], check=True, capture_output=True)
        client = await connect(settings)
        await search_loop(client, None, 10)  # warm
        idle = await search_loop(client, None, searches, "idle")
        t0 = time.perf_counter()
        proc = subprocess.Popen([rag, "index", str(root / "big")], stdout=subprocess.PIPE)
        busy = await search_loop(client, proc, 0, "busy")
        out, _ = proc.communicate()
        ingest_s = time.perf_counter() - t0
        chunks = int(out.decode().rsplit("chunks=", 1)[1].split()[0])
        after = await search_loop(client, None, searches, "idle")  # the machine drifts
        await client.aclose()
        await stop_service(settings)
    print(f"idle before / after the ingest: p95 {np.percentile(idle, 95):.1f} / "
          f"{np.percentile(after, 95):.1f} ms")  # fmt: skip
    idle = idle + after
    p = {k: float(np.percentile(v, q)) for k, v in (("idle", idle), ("busy", busy)) for q in (95,)}
    print(f"idle: {len(idle)} searches, p50 {np.percentile(idle, 50):.1f} ms, "
          f"p95 {p['idle']:.1f} ms")  # fmt: skip
    print(f"busy: {len(busy)} searches during the ingest, p50 {np.percentile(busy, 50):.1f} ms, "
          f"p95 {p['busy']:.1f} ms")  # fmt: skip
    print(f"busy p95 / idle p95 = {p['busy'] / p['idle']:.2f}  (target ≤ 2.0)")
    for step in STEPS["busy"]:
        idle_ms, busy_ms = STEPS["idle"].get(step, [0.0]), STEPS["busy"][step]
        print(f"  {step}: p50 / p95 idle {np.percentile(idle_ms, 50):.1f} / "
              f"{np.percentile(idle_ms, 95):.1f} ms, busy {np.percentile(busy_ms, 50):.1f} / "
              f"{np.percentile(busy_ms, 95):.1f} ms")  # fmt: skip
    print(f"ingest: {chunks} chunks in {ingest_s:.1f} s = {chunks / ingest_s:.1f} chunks/s "
          "while answering the searches")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=120)
    ap.add_argument("--searches", type=int, default=100)
    ap.add_argument("--paragraphs", type=int, default=10, help="per file (~2 per chunk)")
    args = ap.parse_args()
    asyncio.run(main_async(args.files, args.searches, args.paragraphs))


if __name__ == "__main__":
    main()
