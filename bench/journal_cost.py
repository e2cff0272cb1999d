"""What a crawl's checkpoint costs the owner's event loop, with 1 and 4 big crawls.

Not a test. Journals N crawls of 10,000 pages (their checkpoints: seen and pending URLs,
error details, ~2 MB each), then times `JobJournal.record` of one of them (what a
checkpoint does on the event loop) against the baseline of encoding every job's entry
each time (what the journal did before), in the same run.

    python bench/journal_cost.py [--pages 10000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rag_app.job_journal import JobJournal


def spec(pages: int, k: int) -> dict[str, Any]:
    urls = [f"https://docs{k}.example/en/latest/section-{i}/page-{i}.html" for i in range(pages)]
    errors = [{"url": u, "reason": f"HTTP 404 for {u}", "gone": "true"} for u in urls[::5]]
    return {
        "url": urls[0],
        "kind": "crawl",
        "attempt": 1,
        "checkpoint": {
            "start": urls[0],
            "seen": urls,
            "pending": [[u, 2] for u in urls],
            "summary": {"error_details": errors},
        },
    }


def median_ms(fn: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    for jobs in (1, 4):
        with tempfile.TemporaryDirectory() as tmp:
            journal = JobJournal(Path(tmp))
            for k in range(jobs):
                journal.record(f"job{k}", spec(args.pages, k))
            changed = spec(args.pages, 0)
            entries = journal.pending()
            baseline = median_ms(
                lambda e=entries: json.dumps(e, ensure_ascii=False).encode("utf-8"), args.rounds
            )
            ours = median_ms(lambda j=journal, c=changed: j.record("job0", c), args.rounds)
            journal.flush()
            size = journal.path.stat().st_size / 1e6
            print(
                f"{jobs} crawl(s) of {args.pages:,} pages ({size:.1f} MB journal): one "
                f"checkpoint {ours:.1f} ms, encoding every job {baseline:.1f} ms, "
                f"ratio {ours / baseline:.2f}"
            )


if __name__ == "__main__":
    main()
