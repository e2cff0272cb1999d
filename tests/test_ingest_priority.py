"""RAG_INGEST_NICE: the CPU priority the document embedding lane takes."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from rag_app import background
from rag_app.config import SettingsError, load_settings
from rag_app.embeddings import get_embed_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux nice")


def _priority_after_lowering() -> int:
    seen: list[int] = []

    def lane() -> None:
        background.lower_priority()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    thread = threading.Thread(target=lane)
    thread.start()
    thread.join()
    return seen[0]


def test_the_setting_sets_the_lane_priority() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        get_embed_model(load_settings(_env_file=None, rag_ingest_nice=7))
        assert _priority_after_lowering() == max(base, 7)
        background.set_ingest_nice(19)
        assert _priority_after_lowering() == 19
        get_embed_model(load_settings(_env_file=None))
        assert _priority_after_lowering() == base  # the default 0 leaves the thread as it is
    finally:
        background.set_ingest_nice(0)


def test_out_of_range_values_are_refused() -> None:
    with pytest.raises(SettingsError, match="RAG_INGEST_NICE"):
        load_settings(_env_file=None, rag_ingest_nice=20)
