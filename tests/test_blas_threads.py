"""The store service runs numpy's BLAS on one thread (see rag_app/blas_threads.py)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, threadpoolctl
from rag_app.blas_threads import single_blas_thread
single_blas_thread()
print(json.dumps([i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if i["user_api"] == "blas"]))
"""


def test_single_blas_thread_limits_numpys_blas_in_a_fresh_process() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    threads = json.loads(out.stdout)
    assert threads and all(n == 1 for n in threads)
