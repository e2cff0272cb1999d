"""Site crawls as users run them: real `rag` processes and the real `rag-mcp` over stdio,
all clients of one store owner, against a static site served on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from rag_app.crawl.scope import page_key
from rag_app.job_journal import JOURNAL_FILE
from tests.docs_site import IN_SCOPE
from tests.processes import (
    owner_pid,
    rag,
    rag_async,
    rag_json,
    rag_mcp,
    store_env,
    text_of,
    wait_gone,
)
from tests.static_site import StaticSite, page


def stored_keys(env: dict[str, str], site: StaticSite) -> set[str]:
    sources = rag_json(env, "stats")["sources"]
    return {page_key(s).removeprefix(site.base) for s in sources}


EXPECTED = {page_key("http://h" + p).removeprefix("http://h") for p in IN_SCOPE}


def crawl_docs(env: dict[str, str], site: StaticSite) -> None:
    """`rag crawl` of the whole docs tree (missing.html fails: a partial failure, 3)."""
    done = rag(env, "crawl", site.url("/docs/"), "--max-depth", "10", "--exclude", "_static")
    assert done.returncode == 3, done.stderr


def refresh_held_at(
    env: dict[str, str], site: StaticSite, held: threading.Event, victim: str
) -> str:
    """Crawl the docs, then start a background `rag refresh` and wait until it asks for
    `victim` (held open by `held`); the refresh job's id."""
    held.set()  # open during the crawl
    crawl_docs(env, site)
    held.clear()
    site.requests.clear()
    started = rag(env, "refresh", "--background")
    found = re.search(r"job ([0-9a-f]{8})", started.stdout)
    assert started.returncode == 0 and found, started.stdout
    deadline = time.monotonic() + 60
    while victim not in site.paths():
        assert time.monotonic() < deadline
        time.sleep(0.05)  # the refresh waits for the held page's answer
    return found.group(1)


def recorded_checkpoint(journal: Path, job_id: str) -> dict[str, Any]:
    """The crawl checkpoint the owner last wrote in its job journal (empty counts before)."""
    try:
        record = json.loads(journal.read_text(encoding="utf-8"))[job_id]
    except (FileNotFoundError, KeyError, ValueError):
        return {"done": 0, "pending": []}
    return record.get("checkpoint", {"done": 0, "pending": []})


def test_rag_crawl_refresh_and_jobs_from_the_command_line(tmp_path: Path, site: StaticSite) -> None:
    env = store_env(tmp_path)
    try:
        done = rag(env, "crawl", site.url("/docs/"), "--max-depth", "10", "--exclude", "_static")
        assert done.returncode == 3, done.stderr  # missing.html failed: a partial failure
        assert done.stdout.startswith(f"完了: {len(IN_SCOPE)}ページ / "), done.stdout
        assert "missing.html" in done.stderr and "Traceback" not in done.stderr
        assert stored_keys(env, site) == EXPECTED

        started = rag(
            env, "crawl", site.url("/docs/"), "--max-depth", "10", "-x", "_static", "--background"
        )
        assert started.returncode == 0, started.stderr
        job_id = re.search(r"ジョブ ([0-9a-f]{8})", started.stdout)
        assert job_id, started.stdout
        waited = rag(env, "jobs", "--wait", job_id.group(1), "--json")
        assert waited.returncode == 0, waited.stderr
        job = json.loads(waited.stdout)
        assert job["state"] == "done" and job["result"]["unchanged"] == len(IN_SCOPE), job
        listed = rag_json(env, "jobs")
        assert [j["id"] for j in listed[:2]] == [job["id"], listed[1]["id"]]
        assert all(j["state"] == "done" for j in listed)

        (site.root / "docs/guide/deep/b.html").unlink()
        refreshed = rag(env, "refresh")
        assert refreshed.returncode == 0, refreshed.stderr
        counts = "unchanged=7 updated=0 moved=0 removed=1 errors=0 (chunks embedded: 0)"
        assert counts in refreshed.stdout, refreshed.stdout
        assert stored_keys(env, site) == EXPECTED - {"/docs/guide/deep/b.html"}

        bad = rag(env, "crawl", site.url("/docs/"), "--max-depth", "0")
        assert bad.returncode == 2 and "原因: max_depth" in bad.stderr, bad.stderr
        unknown = rag(env, "jobs", "--cancel", "feedbeef")
        assert unknown.returncode == 1 and "There is no job" in unknown.stderr
        hostile = rag(env, "jobs", "--cancel", "x" * 100_000)
        assert hostile.returncode == 1 and "There is no job" in hostile.stderr
        assert len(hostile.stderr) < 1000, len(hostile.stderr)  # the id is not echoed whole
        empty = rag(env, "jobs", "--cancel", "")
        assert empty.returncode != 0 and "--cancel needs a job id" in empty.stderr
    finally:
        rag(env, "service", "stop")


async def test_rag_crawl_job_over_stdio_is_seen_and_cancelled_by_other_clients(
    tmp_path: Path, site: StaticSite
) -> None:
    held = site.hold("/docs/guide/deep/b.html")  # the crawl cannot end before the cancel
    env = store_env(tmp_path, RAG_CRAWL_DELAY_SEC="0.5", RAG_CRAWL_TIMEOUT_SEC="300")
    try:
        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            started = await client.call_tool(
                "rag_crawl", {"url": site.url("/docs/"), "max_depth": 10, "exclude": "_static"}
            )
            assert not started.is_error, text_of(started)
            job = started.structured_content
            assert job is not None and job["state"] == "running" and job["job_id"]
            assert job["job_id"] in text_of(started) and "rag_jobs" in text_of(started)
            deadline = time.monotonic() + 60
            while True:  # another process sees the job and its progress
                listed = rag_json(env, "jobs")
                mine = next(j for j in listed if j["id"] == job["job_id"])
                if mine["result"].get("pages_crawled", 0) >= 2:
                    break
                assert mine["state"] == "running" and time.monotonic() < deadline, mine
                time.sleep(0.2)
            searched = await client.call_tool("rag_search", {"query": "kettle"})
            assert not searched.is_error  # searches are answered while the job runs
            began = time.monotonic()
            cancelled = await client.call_tool("rag_jobs", {"cancel": job["job_id"]})
            took = time.monotonic() - began
            assert not cancelled.is_error, text_of(cancelled)
            jobs = cancelled.structured_content
            assert jobs is not None
            state = next(j for j in jobs["jobs"] if j["id"] == job["job_id"])
            assert state["state"] == "cancelled" and took < 2.5, (state, took)
            assert "中止" in text_of(cancelled)
        kept = stored_keys(env, site)
        assert 2 <= len(kept) < len(EXPECTED) and kept <= EXPECTED
        assert state["result"]["pages_crawled"] == len(kept)
        check = rag(env, "check")
        assert check.returncode == 0 and check.stdout.startswith("consistent"), check.stdout
    finally:
        held.set()
        rag(env, "service", "stop")


def test_ctrl_c_on_rag_crawl_cancels_its_job_and_keeps_the_stored_pages(
    tmp_path: Path, site: StaticSite
) -> None:
    # The last page waits until the test lets it go, so the crawl cannot end before Ctrl-C
    # however slowly the `rag jobs` processes below start on a busy machine. The crawl's
    # fetch timeout is above the hold, so the held page does not fail instead.
    held = site.hold("/docs/guide/deep/b.html")
    env = store_env(tmp_path, RAG_CRAWL_DELAY_SEC="0.2", RAG_CRAWL_TIMEOUT_SEC="300")
    try:
        crawl = rag_async(
            env, "crawl", site.url("/docs/"), "--max-depth", "10", "-x", "_static", ctrl_c=True
        )
        deadline = time.monotonic() + 60
        while not [j for j in rag_json(env, "jobs") if j["result"].get("pages_crawled")]:
            assert time.monotonic() < deadline and crawl.poll() is None
            time.sleep(0.2)
        crawl.send_signal(signal.SIGINT)
        # `rag crawl` returns once its job has stopped (it waits up to 30 s for a slow stop)
        _out, err = crawl.communicate(timeout=45)
        assert crawl.returncode == 130 and "Traceback" not in err, err
        job = rag_json(env, "jobs")[0]
        assert job["state"] == "cancelled", job
        kept = stored_keys(env, site)
        assert 1 <= len(kept) < len(EXPECTED) and job["result"]["pages_crawled"] == len(kept)
        assert "/docs/guide/deep/b.html" not in kept  # its fetch was under way: cancelled
    finally:
        held.set()
        rag(env, "service", "stop")


def test_a_crawl_cut_off_by_a_killed_owner_is_resumed_by_the_next_one(
    tmp_path: Path, site: StaticSite
) -> None:
    held = site.hold("/docs/guide/deep/b.html")  # the crawl cannot end before the kill
    env = store_env(tmp_path, RAG_CRAWL_DELAY_SEC="0.5", RAG_CRAWL_TIMEOUT_SEC="300")
    try:
        started = rag(
            env, "crawl", site.url("/docs/"), "--max-depth", "10", "-x", "_static", "--background"
        )
        assert started.returncode == 0, started.stderr
        found = re.search(r"ジョブ ([0-9a-f]{8})", started.stdout)
        assert found, started.stdout
        job_id = found.group(1)
        journal = tmp_path / "chroma_db" / JOURNAL_FILE
        deadline = time.monotonic() + 60
        while (checkpoint := recorded_checkpoint(journal, job_id))["done"] < 3:
            assert time.monotonic() < deadline, checkpoint
            time.sleep(0.1)
        pid = owner_pid(env)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # mid-crawl: the job never ended
        wait_gone(pid)
        held.set()
        checkpoint = recorded_checkpoint(journal, job_id)  # the last one before the kill
        queued = {page_key(url) for url, _depth in checkpoint["pending"]}
        finished = {page_key(site.url(p)) for p in site.paths() if p != "/robots.txt"} - queued
        assert len(finished) >= 3, (finished, checkpoint)
        site.requests.clear()

        listed = rag_json(env, "jobs")  # a new owner starts, and goes on with the job
        assert [(j["id"], j["attempt"]) for j in listed] == [(job_id, 2)], listed
        waited = rag(env, "jobs", "--wait", job_id, "--json")
        assert waited.returncode == 0, waited.stderr
        assert json.loads(waited.stdout)["state"] == "done", waited.stdout
        assert stored_keys(env, site) == EXPECTED
        again = {page_key(site.url(p)) for p in site.paths() if p != "/robots.txt"}
        assert not again & finished, f"pages finished before the kill fetched again: {again}"

        rag(env, "service", "stop")  # a finished job is not run again by the next owner
        assert all(j["id"] != job_id for j in rag_json(env, "jobs"))
        check = rag(env, "check")
        assert check.returncode == 0 and check.stdout.startswith("consistent"), check.stdout
    finally:
        held.set()
        rag(env, "service", "stop")


def test_a_page_deleted_with_rag_delete_while_rag_refresh_runs_stays_deleted(
    tmp_path: Path, site: StaticSite
) -> None:
    """Real processes: a background refresh in the store service, `rag delete` from a
    terminal while the refresh holds the changed page's answer; the refresh then must
    not store the page again (it used to bring it back)."""
    env = store_env(tmp_path, RAG_CRAWL_CONCURRENCY="1")
    victim = "/docs/guide/install.html"
    held = site.hold(victim)
    held.set()  # open during the crawl
    try:
        crawl_docs(env, site)
        changed = site.root / victim.lstrip("/")
        changed.write_text(page("Install", "Install the kettle from the source tarball."))
        future = time.time() + 5
        os.utime(changed, (future, future))  # newer than the stored Last-Modified
        held.clear()
        site.requests.clear()
        started = rag(env, "refresh", "--background")
        assert started.returncode == 0, started.stderr
        job_id = re.search(r"job ([0-9a-f]{8})", started.stdout)
        assert job_id, started.stdout
        deadline = time.monotonic() + 60
        while victim not in site.paths() and time.monotonic() < deadline:
            time.sleep(0.05)  # the refresh is waiting for the changed page's answer
        assert victim in site.paths()
        deleted = rag(env, "delete", site.url(victim))
        assert deleted.returncode == 0, deleted.stderr
        held.set()
        waited = rag(env, "jobs", "--wait", job_id.group(1), "--json")
        job = json.loads(waited.stdout)
        assert job["state"] == "done", job
        assert site.url(victim) not in rag_json(env, "stats")["sources"]
        reasons = [d["reason"] for d in job["result"]["error_details"]]
        assert any("deleted while it was being refreshed" in r for r in reasons), job
        assert rag_json(env, "check")["ok"]
    finally:
        held.set()
        rag(env, "service", "stop")


def test_a_second_rag_refresh_joins_the_running_one_and_its_ctrl_c_leaves_it_running(
    tmp_path: Path, site: StaticSite
) -> None:
    """While a background refresh runs, `rag refresh` in a terminal follows that job
    instead of fetching every page again, and its Ctrl-C stops the following only: the
    other client's refresh goes on and ends with each page checked once."""
    env = store_env(tmp_path, RAG_CRAWL_CONCURRENCY="1")
    victim = "/docs/guide/install.html"
    held = site.hold(victim)
    try:
        job_id = refresh_held_at(env, site, held, victim)
        again = rag(env, "refresh", "--background")
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(f"A refresh is already running: job {job_id}"), again.stdout
        follower = rag_async(env, "refresh", ctrl_c=True)
        err_lines: list[str] = []
        reader = threading.Thread(target=lambda: err_lines.extend(follower.stderr or ()))
        reader.start()
        deadline = time.monotonic() + 60
        while not any("already running" in line for line in err_lines):
            assert time.monotonic() < deadline and follower.poll() is None, err_lines
            time.sleep(0.05)
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=45)
        reader.join(timeout=10)
        err = "".join(err_lines)
        assert follower.returncode == 130 and "Traceback" not in err, err
        assert rag_json(env, "jobs")[0]["state"] == "running"
        held.set()
        waited = rag(env, "jobs", "--wait", job_id, "--json")
        job = json.loads(waited.stdout)
        assert job["state"] == "done", job
        stored = len(rag_json(env, "stats")["sources"])
        assert job["result"]["checked"] == stored, job
        asked = [p for p in site.paths() if p != "/robots.txt"]
        assert len(asked) == len(set(asked)) == stored, asked  # each page once, not twice
    finally:
        held.set()
        rag(env, "service", "stop")


def test_a_refresh_cut_off_by_a_killed_owner_reports_the_whole_jobs_work(
    tmp_path: Path, site: StaticSite
) -> None:
    """kill -9 of the owner between two removals of a refresh: the next owner resumes it,
    and its summary counts what the first attempt did too (it started over: the page
    removed before the kill was missing, the page updated before counted unchanged)."""
    env = store_env(tmp_path, RAG_CRAWL_CONCURRENCY="1", RAG_CRAWL_DELAY_SEC="0")
    try:
        crawl_docs(env, site)
        pages = len(rag_json(env, "stats")["sources"])
        first, second = "/docs/guide/deep/a.html", "/docs/guide/deep/b.html"
        (site.root / first.lstrip("/")).unlink()
        (site.root / second.lstrip("/")).unlink()
        changed = site.root / "docs/guide/usage.html"
        changed.write_text(page("Usage", "Fill the kettle with cold water only."))
        future = time.time() + 5
        os.utime(changed, (future, future))  # newer than the stored Last-Modified
        held = site.hold(second, after=1)  # its second ask, right before its removal
        started = rag(env, "refresh", "--background")
        found = re.search(r"job ([0-9a-f]{8})", started.stdout)
        assert started.returncode == 0 and found, started.stdout
        job_id = found.group(1)
        journal = tmp_path / "chroma_db" / JOURNAL_FILE
        deadline = time.monotonic() + 60
        while site.paths().count(second) < 2 or not recorded_checkpoint(journal, job_id).get(
            "removed_urls"
        ):
            assert time.monotonic() < deadline, recorded_checkpoint(journal, job_id)
            time.sleep(0.05)
        checkpoint = recorded_checkpoint(journal, job_id)
        assert checkpoint["removed_urls"] == [site.url(first)], checkpoint
        assert checkpoint["updated_urls"] == [site.url("/docs/guide/usage.html")], checkpoint
        pid = owner_pid(env)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        held.set()

        listed = rag_json(env, "jobs")  # a new owner resumes the refresh
        assert [(j["id"], j["attempt"]) for j in listed] == [(job_id, 2)], listed
        waited = rag(env, "jobs", "--wait", job_id, "--json")
        job = json.loads(waited.stdout)
        assert job["state"] == "done", job
        result = job["result"]
        assert result["removed_urls"] == [site.url(first), site.url(second)], result
        assert (result["removed"], result["updated"], result["errors"]) == (2, 1, 0), result
        assert result["checked"] == pages, result
        assert result["unchanged"] == pages - 3, result
        assert len(rag_json(env, "stats")["sources"]) == pages - 2
    finally:
        for event in site.held.values():
            event.set()
        rag(env, "service", "stop")


def test_ctrl_c_at_any_moment_of_rag_crawls_start_leaves_no_job_running(
    tmp_path: Path, site: StaticSite
) -> None:
    """Ctrl-C while `rag crawl` is still starting (the store service starting, the job
    being started in it, its first page asked): whenever it comes, no crawl is left
    running in the service with no one following it."""
    held = site.hold("/docs/")  # the start page: no crawl can end by itself
    env = store_env(tmp_path, RAG_CRAWL_TIMEOUT_SEC="300")
    try:
        for delay in (0.3, 1.0, 2.0, 4.0):
            crawl = rag_async(env, "crawl", site.url("/docs/"), "--max-depth", "3", ctrl_c=True)
            time.sleep(delay)
            crawl.send_signal(signal.SIGINT)
            _out, err = crawl.communicate(timeout=60)
            assert crawl.returncode in (130, 1), (delay, crawl.returncode, err)
            assert "Traceback" not in err, err
            if owner_pid(env) is None:
                continue  # stopped before the service was asked for anything
            running = [j for j in rag_json(env, "jobs") if j["state"] == "running"]
            assert not running, (delay, running)
    finally:
        held.set()
        rag(env, "service", "stop")


def test_a_renamed_page_waiting_at_a_kill_is_stored_by_the_next_owner(
    tmp_path: Path, site: StaticSite
) -> None:
    """A page renamed on the site waits, at the re-crawl, for its old URL's answer; kill -9
    of the owner then: the next owner resumes the job, stores the page under its new URL,
    and the refresh that removes the old URL leaves its text stored."""
    env = store_env(tmp_path, RAG_CRAWL_DELAY_SEC="0.5", RAG_CRAWL_TIMEOUT_SEC="300")
    docs = site.root / "docs"
    try:
        crawl_docs(env, site)
        (docs / "guide" / "install.html").rename(docs / "guide" / "setup.html")
        for html_file in docs.rglob("*.html"):
            text = html_file.read_text(encoding="utf-8")
            html_file.write_text(text.replace("install.html", "setup.html"), encoding="utf-8")
        held = site.hold("/docs/guide/install.html")  # asked for setup.html's text: held
        started = rag(
            env, "crawl", site.url("/docs/"), "--max-depth", "10", "-x", "_static", "--background"
        )
        assert started.returncode == 0, started.stderr
        found = re.search(r"ジョブ ([0-9a-f]{8})", started.stdout)
        assert found, started.stdout
        journal = tmp_path / "chroma_db" / JOURNAL_FILE
        deadline = time.monotonic() + 60
        while not recorded_checkpoint(journal, found.group(1)).get("waiting"):
            assert time.monotonic() < deadline, recorded_checkpoint(journal, found.group(1))
            time.sleep(0.1)
        pid = owner_pid(env)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # setup.html waits on install.html's answer
        wait_gone(pid)
        held.set()

        rag_json(env, "jobs")  # a new owner starts, and goes on with the job
        waited = rag(env, "jobs", "--wait", found.group(1), "--json")
        assert waited.returncode == 0, waited.stderr
        assert "/docs/guide/setup.html" in stored_keys(env, site)
        refreshed = rag(env, "refresh")
        assert refreshed.returncode in (0, 3), refreshed.stderr
        keys = stored_keys(env, site)
        assert "/docs/guide/setup.html" in keys and "/docs/guide/install.html" not in keys, keys
        read = rag(env, "read", site.url("/docs/guide/setup.html"))
        assert "pip install kettle" in read.stdout, read.stdout
    finally:
        site.held.clear()
        rag(env, "service", "stop")


async def test_rag_refresh_waited_for_over_mcp_says_it_joined_the_running_one(
    tmp_path: Path, site: StaticSite
) -> None:
    """The real `rag-mcp`, asked `rag_refresh wait=true` while a `rag refresh` job runs:
    it answers with that job's summary and says it joined (it read like its own)."""
    env = store_env(tmp_path, RAG_CRAWL_CONCURRENCY="1")
    victim = "/docs/guide/install.html"
    held = site.hold(victim)
    try:
        job_id = refresh_held_at(env, site, held, victim)
        threading.Timer(2.0, held.set).start()  # once the MCP client is waiting
        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            answer = await client.call_tool("rag_refresh", {"wait": True})
        assert not answer.is_error, text_of(answer)
        assert text_of(answer).startswith("実行中の更新確認に合流しました"), text_of(answer)
        out = answer.structured_content or {}
        job = rag_json(env, "jobs")[0]
        assert job["id"] == job_id and job["state"] == "done", job
        assert out["joined"] is True and out["checked"] == job["result"]["checked"], out
    finally:
        held.set()
        rag(env, "service", "stop")


async def test_a_seventeenth_crawl_job_is_refused_over_stdio_until_one_ends(
    tmp_path: Path, site: StaticSite
) -> None:
    """The real `rag-mcp`: 16 crawl jobs held at their first page run at once; the 17th
    is refused in one sentence, and once one is cancelled a new one starts."""
    held = site.hold("/docs/")
    env = store_env(tmp_path, RAG_CRAWL_TIMEOUT_SEC="300")
    try:
        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            ids = []
            for i in range(16):
                args = {"url": site.url("/docs/"), "exclude": f"nothing{i}"}
                started = await client.call_tool("rag_crawl", args)
                assert not started.is_error, text_of(started)
                ids.append((started.structured_content or {})["job_id"])
            refused = await client.call_tool("rag_crawl", {"url": site.url("/docs/")})
            assert refused.is_error and "16 jobs are running already" in text_of(refused)
            assert "\n" not in text_of(refused).strip()
            cancelled = await client.call_tool("rag_jobs", {"cancel": ids[0]})
            assert not cancelled.is_error, text_of(cancelled)
            again = await client.call_tool("rag_crawl", {"url": site.url("/docs/")})
            assert not again.is_error, text_of(again)
            running = [j for j in rag_json(env, "jobs") if j["state"] == "running"]
            assert len(running) == 16
    finally:
        held.set()
        rag(env, "service", "stop")
