"""A (nearly) full disk under the store: a write is refused before any work, and a
storage failure there is reported as the full disk it is.

The free space is stood in for (`free_bytes`): filling a real disk needs a file system
of its own, which an unprivileged test run cannot mount.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from chromadb.errors import InternalError

from rag_app import storage_errors
from rag_app.config import RAGSettings
from rag_app.errors import StoreUnavailableError
from rag_app.knowledge import KnowledgeBase
from rag_app.storage_errors import MIN_FREE_BYTES, free_bytes, storage_error
from tests.conftest import CountingEmbedding

CHROMA_ON_A_FULL_DISK = InternalError(
    "Error in compaction: Failed to apply logs to the metadata segment"
)  # what Chroma's own layer raised on a full tmpfs, with no ENOSPC in it


def test_free_bytes_reads_the_nearest_existing_folder(tmp_path: Path) -> None:
    assert free_bytes(tmp_path / "not" / "yet") == free_bytes(tmp_path) > 0


def test_a_chroma_failure_on_a_nearly_full_disk_is_named_as_the_full_disk(
    settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert storage_error(CHROMA_ON_A_FULL_DISK, settings) is None  # space to spare: as is
    monkeypatch.setattr(storage_errors, "free_bytes", lambda _folder: 5 * 1024 * 1024)
    mapped = storage_error(CHROMA_ON_A_FULL_DISK, settings)
    assert mapped is not None and "is (nearly) full; free some space" in str(mapped)
    assert settings.chromadb_persist_dir in str(mapped)  # the folder whose disk it is
    assert storage_error(ValueError("a bug, not the disk"), settings) is None
    read_only = storage_error(OSError(errno.EROFS, "Read-only file system"), settings)
    assert read_only is not None and "cannot be written" in str(read_only)  # its own cause


def test_on_a_chroma_server_a_nearly_full_disk_names_the_bm25_folder(
    settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = settings.model_copy(update={"chroma_host": "chroma.test", "chroma_port": 8000})
    monkeypatch.setattr(storage_errors, "free_bytes", lambda _folder: 5 * 1024 * 1024)
    refused = storage_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused"), server)
    assert refused is not None and "cannot be reached" in str(refused)
    full = storage_error(CHROMA_ON_A_FULL_DISK, server)
    assert full is not None and server.bm25_persist_dir in str(full)
    assert "Chroma server" not in str(full)


async def test_a_write_is_refused_before_any_work_while_the_disk_is_nearly_full(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nnotes about kettles.\n", encoding="utf-8")
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    try:
        low = MIN_FREE_BYTES - 1
        monkeypatch.setattr(storage_errors, "free_bytes", lambda _folder: low)
        with pytest.raises(StoreUnavailableError, match=r"has 63 MB free, less than the 64 MB"):
            await kb.index_dir(notes)
        assert counting_embed.texts == 0 and (await kb.stats()).total_chunks == 0
        monkeypatch.undo()
        assert (await kb.index_dir(notes)).added == 1
    finally:
        await kb.aclose()
