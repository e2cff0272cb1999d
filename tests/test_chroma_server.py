"""The knowledge base against a real `chroma run` server (CHROMA_HOST)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag_app.config import RAGSettings
from rag_app.knowledge import KnowledgeBase
from tests.conftest import SAMPLES, CountingEmbedding


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    exe = Path(sys.executable).parent / "chroma"
    if not exe.exists():
        found = shutil.which("chroma")
        if not found:
            pytest.skip("the `chroma` command is not installed")
        exe = Path(found)
    port = _free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("chroma server did not start") from None
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_ingest_and_search_through_chroma_server(
    chroma_server: int, settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    remote = settings.model_copy(update={"chroma_host": "127.0.0.1", "chroma_port": chroma_server})
    kb = KnowledgeBase(remote, embed_model=counting_embed)
    docs = tmp_path / "docs"
    shutil.copytree(SAMPLES, docs)
    summary = await kb.index_dir(docs)
    assert summary.added == 4
    stats = await kb.stats()
    assert stats.vector_store == f"chroma://127.0.0.1:{chroma_server}"
    assert stats.total_chunks == stats.bm25_documents > 0
    hit = (await kb.retrieve("りゅうおう")).hits[0]
    assert hit.text.startswith("名前: りゅうおう")
    # nothing was written to the local Chroma directory
    assert not Path(remote.chromadb_persist_dir).exists()
