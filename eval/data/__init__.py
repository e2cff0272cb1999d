"""The evaluation fixture shipped inside the package: 13 short documents and the 21
questions asked about them, which `rag-eval evaluate`, `init-test-db` and the notebook
use by default; found through `importlib.resources`, so any working directory works."""

from __future__ import annotations

from pathlib import Path

from rag_app.data import bundled_path

QUESTIONS = "rag_evaluation_dataset.json"
DOCUMENTS = "rag_test_documents.json"


def data_path(name: str) -> Path:
    """One of this folder's files (`QUESTIONS`, `DOCUMENTS`)."""
    return bundled_path(__name__, name)
