"""What a cold start loads before its first search (README "Cold start"): the store
service opens without the crawler's HTML parser, and a `rag` command that must start the
service starts it before importing its own HTTP client. Proved by what is imported, not
by timing (`bench/cold_start.py` measures the seconds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _python(code: str, tmp_path: Path) -> dict[str, object]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "CHROMA"))},
        "PYTHONPATH": str(REPO),
        "CHROMADB_PERSIST_DIR": str(tmp_path / "chroma"),
        "BM25_PERSIST_DIR": str(tmp_path / "bm25"),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_service_opens_a_store_without_the_html_parser(tmp_path: Path) -> None:
    code = """
import asyncio, json, sys
from rag_app.config import load_settings
from rag_app.service import server
from rag_app.knowledge import KnowledgeBase

async def main():
    kb = KnowledgeBase(load_settings(), take_ownership=True)
    await kb.open()
    await kb.ingest_text("notes/a.md", "# A\\n\\nSome text about the harbour.")
    hits = await kb.retrieve("harbour")
    before = sorted(m for m in ("bs4", "soupsieve") if m in sys.modules)
    kb.crawler()  # the first fetch loads it
    after = sorted(m for m in ("bs4", "soupsieve") if m in sys.modules)
    await kb.aclose()
    print(json.dumps({"hits": len(hits.hits), "before": before, "after": after}))

asyncio.run(main())
"""
    seen = _python(code, tmp_path)
    assert seen == {"hits": 1, "before": [], "after": ["bs4", "soupsieve"]}


def test_a_cold_command_starts_the_service_before_loading_its_http_client(
    tmp_path: Path,
) -> None:
    code = """
import json, sys
from rag_app.service import launcher

def spawn(settings, primary):
    print(json.dumps({"aiohttp_at_spawn": "aiohttp" in sys.modules}), flush=True)
    raise SystemExit(0)

launcher._spawn = spawn
from rag_app.cli import main
main(["search", "harbour"])
"""
    assert _python(code, tmp_path) == {"aiohttp_at_spawn": False}


def test_the_crawl_package_names_load_on_first_use() -> None:
    import rag_app.crawl as crawl
    from rag_app.crawl.crawler import WebCrawler

    assert sorted(crawl.__all__) == sorted(crawl._WHERE)
    assert crawl.WebCrawler is WebCrawler
    for name in crawl.__all__:
        assert getattr(crawl, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        crawl.Nope  # noqa: B018


def test_rag_mcp_starts_the_service_before_importing_the_mcp_sdk(tmp_path: Path) -> None:
    code = """
import json, sys
from rag_app.service import launcher

def spawn(settings, primary):
    print(json.dumps({"mcp_at_spawn": "mcp" in sys.modules}), flush=True)
    raise SystemExit(0)

launcher._spawn = spawn
from mcp_server.__main__ import main
main([])
"""
    assert _python(code, tmp_path) == {"mcp_at_spawn": False}


def test_an_early_start_that_cannot_happen_is_left_to_the_first_call(tmp_path: Path) -> None:
    """A store folder that cannot be used: `start_soon` says nothing and starts nothing;
    the first tool call reports it (tested with the real server elsewhere)."""
    from rag_app.config import load_settings
    from rag_app.service.launcher import start_soon

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    settings = load_settings(
        chromadb_persist_dir=str(blocker / "chroma"), bm25_persist_dir=str(tmp_path / "bm25")
    )
    start_soon(settings)  # no exception
    assert not (tmp_path / "bm25" / ".rag-spawn.json").exists()


def test_rag_mcp_over_http_starts_no_service_before_its_own_checks(tmp_path: Path) -> None:
    """A public bind without a token is refused (exit 2): no store service was started."""
    code = """
import json, sys
from rag_app.service import launcher

spawned = []
launcher._spawn = lambda settings, primary: spawned.append(primary)
from mcp_server.__main__ import main
try:
    main(["--transport", "streamable-http", "--host", "0.0.0.0", "--port", "0"])
except SystemExit as exit_:
    print(json.dumps({"code": exit_.code, "spawned": len(spawned)}), flush=True)
"""
    assert _python(code, tmp_path) == {"code": 2, "spawned": 0}
