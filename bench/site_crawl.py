"""Crawl a real documentation site served on loopback: coverage, refresh, and where the
time goes, against the embedder's own throughput on the same chunks.

Not a test. Copies an HTML documentation folder (e.g. a Debian package's manual) to a
temporary folder, writes a sitemap.xml listing every page and a robots.txt naming it,
serves it with `python -m http.server --bind 127.0.0.1`, then with the builtin model
and a fresh store:

1. crawls from the root (recursive, within the root folder) and times it, summing the
   busy time of each stage: fetch (HTTP), parse (HTML → text, chunking), embed, store
   (BM25 tokens + Chroma + BM25 write);
2. embeds the very texts the crawl embedded, alone, in full batches: the embedder's own
   throughput, the floor a crawl cannot beat; prints crawl ÷ embedder;
3. crawls again from the sitemap (every listed page must come back, nothing embedded);
4. refreshes with nothing changed (conditional requests only, no embedding);
5. deletes 5 pages from the served folder and refreshes (exactly those removed).

    python bench/site_crawl.py /usr/share/doc/aptitude/html/ja [--load 2] [--max-pages N]

`--load N` runs N busy processes beside it (a loaded machine); `--embed random` swaps the
model for instant random vectors (coverage of a big site in minutes; no throughput ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_app.config import load_settings  # noqa: E402
from rag_app.crawl.crawler import WebCrawler  # noqa: E402
from rag_app.crawl.fetcher import HttpFetcher  # noqa: E402
from rag_app.crawl_options import CrawlOptions  # noqa: E402
from rag_app.embedding import builtin  # noqa: E402
from rag_app.index.store import KnowledgeStore  # noqa: E402
from rag_app.knowledge import KnowledgeBase  # noqa: E402
from rag_app.parsing.router import StructuredNodeParser  # noqa: E402

BUSY: dict[str, float] = defaultdict(float)
EMBEDDED: list[str] = []
_LOCK = threading.Lock()


def _add(stage: str, seconds: float) -> None:
    with _LOCK:
        BUSY[stage] += seconds


def _timed_sync(cls: type, name: str, stage: str) -> None:
    real = getattr(cls, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            _add(stage, time.perf_counter() - start)

    setattr(cls, name, wrapper)


def _timed_async(cls: type, name: str, stage: str) -> None:
    real = getattr(cls, name)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await real(*args, **kwargs)
        finally:
            _add(stage, time.perf_counter() - start)

    setattr(cls, name, wrapper)


def instrument() -> None:
    """Sum each stage's busy time (threads and awaits of one crawl overlap)."""
    _timed_async(HttpFetcher, "get", "fetch")
    _timed_sync(WebCrawler, "_build_page", "parse")
    _timed_sync(StructuredNodeParser, "__call__", "parse")
    _timed_sync(KnowledgeStore, "tokenize", "store")
    _timed_sync(KnowledgeStore, "replace_source", "store")
    real = builtin.BuiltinE5Embedding._encode

    def encode(self: Any, texts: Any, is_query: bool) -> Any:
        start = time.perf_counter()
        try:
            return real(self, texts, is_query)
        finally:
            if not is_query:
                _add("embed", time.perf_counter() - start)
                with _LOCK:
                    EMBEDDED.extend(texts)

    builtin.BuiltinE5Embedding._encode = encode  # type: ignore[method-assign]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def copy_site(source: Path, target: Path) -> list[str]:
    """Copy the manual (symlinks followed); return its HTML pages' paths."""
    shutil.copytree(source, target, symlinks=False, ignore_dangling_symlinks=True)
    return sorted(
        "/" + p.relative_to(target).as_posix() for p in target.rglob("*.html") if p.is_file()
    )


@contextmanager
def serve(folder: Path, log: Path) -> Iterator[str]:
    port = free_port()
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    try:
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def statuses(log: Path, since: int) -> tuple[list[tuple[str, int]], int]:
    """(path, status) of each request logged after byte `since`, and the new end."""
    text = log.read_text(errors="replace")
    found = re.findall(r'"GET (\S+) HTTP/1\.[01]" (\d{3})', text[since:])
    return [(path, int(code)) for path, code in found], len(text)


def burn(stop: Any) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


@contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """`count` processes that keep a core busy each while the block runs (a loaded machine)."""
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=burn, args=(stop,)) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        stop.set()
        for hog in hogs:
            hog.join()


def embed_alone(texts: list[str]) -> float:
    """Seconds the builtin model takes for `texts` alone, in its own batch size."""
    model = builtin.BuiltinE5Embedding()
    model._encode(texts[:8], False)  # warm
    start = time.perf_counter()
    model._encode(texts, False)
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="site-crawl-"))
    site = work / "site"
    pages = copy_site(Path(args.folder), site)
    log = work / "http.log"
    with serve(site, log) as base:
        urls = [base + p for p in pages]
        (site / "sitemap.xml").write_text(
            "<urlset>" + "".join(f"<url><loc>{u}</loc></url>" for u in urls) + "</urlset>"
        )
        (site / "robots.txt").write_text(f"User-agent: *\nSitemap: {base}/sitemap.xml\n")
        settings = load_settings(
            _env_file=None,
            chromadb_persist_dir=str(work / "chroma"),
            bm25_persist_dir=str(work / "bm25"),
            rag_allow_private_network=True,
            rag_crawl_delay_sec=0.0,
            rag_max_chunks_per_source=args.max_chunks,
        )
        model = None
        if args.embed == "random":  # coverage of a big site in minutes: no model time
            sys.path.insert(0, str(ROOT / "bench"))
            from search_latency import RandomEmbedding

            model = RandomEmbedding()
        kb = KnowledgeBase(settings, embed_model=model)
        await kb.open()
        start_url = base + (args.start or "/")
        options = CrawlOptions(max_depth=args.max_depth, max_pages=args.max_pages)
        begin = time.perf_counter()
        crawl = await kb.ingest_from_index(start_url, options=options)
        crawl_wall = time.perf_counter() - begin
        busy = dict(BUSY)
        texts = list(EMBEDDED)
        stored = {s.removeprefix(base) for s in (await kb.stats()).sources}
        listed = set(pages)
        from rag_app.crawl.scope import page_key

        def key(path: str) -> str:
            return page_key("http://h" + path).removeprefix("http://h")

        stored_keys, listed_keys = {key(p) for p in stored}, {key(p) for p in listed}

        embed_wall = embed_alone(texts) if texts and args.embed == "builtin" else 0.0
        if embed_wall:  # the throughput figures first: the checks below take a while
            print(
                f"crawl: {crawl.pages_crawled} pages, {len(texts)} chunks embedded in "
                f"{crawl_wall:.1f} s; embedder alone {embed_wall:.1f} s; crawl ÷ embedder "
                f"{embed_wall / crawl_wall:.3f}; busy s {busy}",
                flush=True,
            )
        _, mark = statuses(log, 0)

        EMBEDDED.clear()
        every = CrawlOptions(sitemap=True, max_pages=args.max_pages)
        sitemap = await kb.ingest_from_index(base + "/", options=every)
        sitemap_embedded = len(EMBEDDED)

        _, mark = statuses(log, 0)
        EMBEDDED.clear()
        quiet = await kb.refresh()
        refresh_requests, mark = statuses(log, mark)
        quiet_embedded = len(EMBEDDED)

        rng = random.Random(5)
        victims = rng.sample(sorted(p for p in stored if p.endswith(".html")), 5)
        for path in victims:
            (site / path.lstrip("/")).unlink()
        gone = await kb.refresh()
        removed = sorted(u.removeprefix(base) for u in gone.removed_urls)
        await kb.aclose()
    shutil.rmtree(work, ignore_errors=True)
    chunks = len(texts)
    crawl_rate = chunks / crawl_wall if crawl_wall else 0.0
    embed_rate = chunks / embed_wall if embed_wall else 0.0
    return {
        "folder": args.folder,
        "pages_listed": len(listed),
        "crawl": {
            "pages": crawl.pages_crawled,
            "errors": crawl.errors,
            "error_examples": crawl.error_details[:5],
            "duplicates": crawl.duplicates,
            "out_of_scope": crawl.out_of_scope,
            "wall_s": round(crawl_wall, 1),
            "pages_per_s": round(crawl.pages_crawled / crawl_wall, 2),
            "chunks_stored": crawl.chunks_stored,
            "chunks_embedded": chunks,
            "busy_s": {k: round(v, 1) for k, v in busy.items()},
            "busy_share_of_wall": {k: round(v / crawl_wall, 2) for k, v in busy.items()},
            "listed_not_stored": sorted(listed_keys - stored_keys)[:20],
            "listed_not_stored_count": len(listed_keys - stored_keys),
            "stored_not_listed": sorted(stored_keys - listed_keys),
        },
        "embedder_alone": {"wall_s": round(embed_wall, 1), "chunks_per_s": round(embed_rate, 1)},
        "crawl_vs_embedder": round(crawl_rate / embed_rate, 3) if embed_rate else None,
        "sitemap": {
            "listed": len(listed),
            "pages": sitemap.pages_crawled,
            "duplicates": sitemap.duplicates,
            "errors": sitemap.errors,
            "unchanged": sitemap.unchanged,
            "embedded": sitemap_embedded,
        },
        "refresh_unchanged": {
            "checked": quiet.checked,
            "unchanged": quiet.unchanged,
            "embedded_chunks": quiet_embedded,
            "embedded_chunks_reported": quiet.embedded,
            "requests": len(refresh_requests),
            "answered_304": sum(1 for _, code in refresh_requests if code == 304),
        },
        "refresh_after_deleting_5": {
            "deleted": sorted(victims),
            "removed": removed,
            "exactly_those": sorted(victims) == removed,
            "embedded_chunks": gone.embedded,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="an HTML documentation folder")
    parser.add_argument("--start", default="", help="start path under the folder (default /)")
    parser.add_argument("--max-depth", type=int, default=20)
    parser.add_argument("--max-pages", type=int, default=10_000)
    parser.add_argument("--max-chunks", type=int, default=20_000, help="chunks per page cap")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the crawl")
    parser.add_argument(
        "--embed",
        choices=("builtin", "random"),
        default="builtin",
        help="random: instant vectors, to check a big site's coverage without model time",
    )
    parser.add_argument("--json", default="", help="also write the report here")
    args = parser.parse_args()
    instrument()
    with busy_processes(args.load):
        report = asyncio.run(run(args))
    report["load_processes"] = args.load
    report["embed"] = args.embed
    text = json.dumps(report, ensure_ascii=False, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
