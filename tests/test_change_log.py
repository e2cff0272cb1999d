"""The change log's read position (`Cursor`) on a real Chroma: no writer's entries are
skipped because another machine's clock runs ahead."""

from __future__ import annotations

from pathlib import Path

import chromadb
import pytest

from rag_app.index import change_log
from rag_app.index.change_log import ChangeLog, Cursor


def test_a_machine_whose_clock_runs_ahead_hides_no_other_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = chromadb.PersistentClient(path=str(tmp_path))
    b, c = ChangeLog(client, "knowledge"), ChangeLog(client, "knowledge")
    reader = Cursor()
    b.append(["b1"], "write")
    real = change_log.now_ms
    monkeypatch.setattr(change_log, "now_ms", lambda: real() + 5 * 60_000)
    c.append(["c1"], "write")  # written 5 minutes "in the future"
    monkeypatch.setattr(change_log, "now_ms", real)
    seen = reader.pending(b)
    assert [e.source for e in seen] == ["b1", "c1"]
    reader.advance(seen)
    b.append(["b2"], "write")  # a known writer, clock right
    assert [e.source for e in reader.pending(b)] == ["b2"]
    reader.advance(reader.pending(b))
    assert reader.pending(b) == []
