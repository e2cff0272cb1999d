"""Shared fixtures: isolated settings, a real KnowledgeBase on the builtin model."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from rag_app.config import RAGSettings, load_settings
from rag_app.data import SAMPLES as SAMPLES_NAME
from rag_app.data import data_path
from rag_app.pids import alive as running

REPO = Path(__file__).resolve().parent.parent
SAMPLES = data_path(SAMPLES_NAME)

_SETTING_VARS = (
    "EMBEDDING_PROVIDER",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CHROMA_HOST",
    "CHROMADB_PERSIST_DIR",
    "BM25_PERSIST_DIR",
    "RAG_VECTOR_WEIGHT",
    "RAG_HYBRID_SEARCH_ENABLED",
    "RAG_SIMILARITY_THRESHOLD",
    "RAG_MIN_COMBINED_SCORE",
    "RAG_CHUNK_SIZE",
    "RAG_CHUNK_OVERLAP",
    "RAG_RETRIEVAL_COUNT",
    "RAG_DEBUG_LOG_ENABLED",
)


@pytest.fixture(autouse=True)
def _isolate_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No developer `.env` or RAG_* variable leaks into a test; cwd is a temp dir; a
    store service a test started is stopped when it ends."""
    for var in _SETTING_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAG_SERVICE_IDLE_SEC", "120")
    monkeypatch.chdir(tmp_path)
    yield
    stop_services_under(tmp_path)


def stop_services_under(root: Path, timeout: float = 15.0) -> None:
    """SIGTERM every store service whose owner file lies under `root`, and wait for it."""
    import json
    import os
    import signal
    import time

    pids = []
    for info in root.rglob(".rag-owner.json"):
        try:
            pids.append(int(json.loads(info.read_text(encoding="utf-8"))["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    for note in root.rglob(".rag-spawn.json"):
        try:
            pids.append(int(json.loads(note.read_text(encoding="utf-8"))["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    alive = []
    for pid in set(pids):
        try:
            os.kill(pid, signal.SIGTERM)
            alive.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout
    for pid in alive:
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):  # a child of this process: reap it
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            if not running(pid):  # exited (a zombie PID 1 reaps later counts as gone)
                break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def settings(tmp_path: Path) -> RAGSettings:
    return load_settings(
        chromadb_persist_dir=str(tmp_path / "chroma_db"),
        bm25_persist_dir=str(tmp_path / "bm25_index"),
    )


class CountingEmbedding(BaseEmbedding):
    """Delegates to a real model and counts how many texts were embedded."""

    _inner: BaseEmbedding = PrivateAttr()
    _texts: int = PrivateAttr(default=0)

    def __init__(self, inner: BaseEmbedding, **kwargs: Any) -> None:
        super().__init__(model_name=inner.model_name, **kwargs)
        self._inner = inner

    @property
    def texts(self) -> int:
        return self._texts

    @property
    def dimension(self) -> int:
        return int(getattr(self._inner, "dimension", 0)) or len(
            self._inner.get_query_embedding("probe")
        )

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await self._inner.aget_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self._texts += 1
        return self._inner.get_text_embedding(text)

    def _get_text_embeddings(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        self._texts += len(texts)
        return self._inner.get_text_embedding_batch(list(texts))

    async def _aget_text_embeddings(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        self._texts += len(texts)
        return await self._inner.aget_text_embedding_batch(list(texts))


class MemoEmbedding(BaseEmbedding):
    """The real builtin model, memoised per text so a test session embeds each text once."""

    _inner: BaseEmbedding = PrivateAttr()
    _memo: dict[tuple[bool, str], list[float]] = PrivateAttr(default_factory=dict)

    def __init__(self, inner: BaseEmbedding, **kwargs: Any) -> None:
        super().__init__(model_name=inner.model_name, **kwargs)
        self._inner = inner

    @property
    def dimension(self) -> int:
        return int(getattr(self._inner, "dimension", 384))

    def _get_query_embedding(self, query: str) -> list[float]:
        key = (True, query)
        if key not in self._memo:
            self._memo[key] = self._inner.get_query_embedding(query)
        return self._memo[key]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        key = (True, query)
        if key not in self._memo:
            self._memo[key] = await self._inner.aget_query_embedding(query)
        return self._memo[key]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        todo = [t for t in dict.fromkeys(texts) if (False, t) not in self._memo]
        if todo:
            vecs = self._inner.get_text_embedding_batch(todo)
            self._memo.update({(False, t): v for t, v in zip(todo, vecs, strict=True)})
        return [self._memo[(False, t)] for t in texts]

    async def _aget_text_embeddings(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        todo = [t for t in dict.fromkeys(texts) if (False, t) not in self._memo]
        if todo:
            vecs = await self._inner.aget_text_embedding_batch(todo)
            self._memo.update({(False, t): v for t, v in zip(todo, vecs, strict=True)})
        return [self._memo[(False, t)] for t in texts]


@pytest.fixture(scope="session")
def builtin_embed() -> BaseEmbedding:
    from rag_app.embeddings import get_embed_model

    return MemoEmbedding(get_embed_model(load_settings()))


@pytest.fixture
def counting_embed(builtin_embed: BaseEmbedding) -> CountingEmbedding:
    return CountingEmbedding(builtin_embed)


@pytest.fixture
async def kb(settings: RAGSettings, counting_embed: CountingEmbedding) -> AsyncIterator[Any]:
    from rag_app.knowledge import KnowledgeBase

    base = KnowledgeBase(settings, embed_model=counting_embed)
    await base.open()
    yield base
    await base.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
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


from tests.docs_site import site  # noqa: E402, F401 (the served documentation tree)
