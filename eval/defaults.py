"""Default paths and thresholds of `rag-eval`, in a module that imports nothing heavy.

The argument parser shows them in `--help`, which must not wait for LlamaIndex.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_OUTPUT_DIR = ".tmp/rag-evaluation"
DEFAULT_TEST_DB = ".tmp/test_chroma_db"
DEFAULT_SWEEP_DIR = ".tmp/rag-sweep"
DEFAULT_CACHE_FILE = Path(".tmp") / "embedding-cache.sqlite"
DEFAULT_REGRESSION_THRESHOLD = 0.1
BASELINE_NAME = "baseline.json"
