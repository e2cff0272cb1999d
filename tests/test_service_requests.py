"""The store service's HTTP API against requests no client of ours sends, and a client
reading answers larger than a socket buffer: one-line errors, no tracebacks, no hang."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from rag_app.config import RAGSettings
from rag_app.errors import RAGError, ServiceError
from rag_app.knowledge import KnowledgeBase
from rag_app.results import DirIndexSummary, KBStats
from rag_app.service import protocol
from rag_app.service.client import StoreClient
from rag_app.service.server import StoreService


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


async def _capped(kb: KnowledgeBase, limit: int) -> tuple[StoreService, web.AppRunner, int]:
    """A serving StoreService whose connections are capped at `limit`, as `run` wires it."""
    from rag_app.service.connection_cap import ConnectionCap

    svc = StoreService(kb.settings)
    svc.connections = ConnectionCap(limit=limit)
    svc.kb = kb
    svc.ready.set()
    runner = svc._runner()
    await runner.setup()
    assert runner.server is not None
    svc.connections.install(runner.server)
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return svc, runner, runner.addresses[0][1]


@pytest.fixture
async def service(kb: KnowledgeBase) -> AsyncIterator[tuple[StoreService, int]]:
    svc = StoreService(kb.settings)
    svc.kb = kb
    svc.ready.set()
    runner, port = await _serve(svc._app())
    try:
        yield svc, port
    finally:
        await runner.cleanup()


async def _post(
    port: int, path: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"http://127.0.0.1:{port}{protocol.API}/{path}", data=data, headers=headers or {}
        ) as r,
    ):
        raw = await r.text()
    lines = []
    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(line))
    return r.status, lines, raw


def _auth(svc: StoreService, **extra: str) -> dict[str, str]:
    return {protocol.TOKEN_HEADER: f"Bearer {svc.token}", **extra}


async def test_a_token_that_is_not_utf8_is_refused_without_a_traceback(
    service: tuple[StoreService, int], caplog: pytest.LogCaptureFixture
) -> None:
    _svc, port = service
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: \xff\xfe\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    assert b" 401 " in status_line, status_line
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "body, headers, expected",
    [
        (b"[" * 200_000, {}, 400),  # nested past the recursion limit
        (b"\xff\xfe{", {}, 400),
        (b"[1, 2]", {}, 400),
        # a charset Python does not know: the body is read as JSON bytes all the same
        (b"{}", {"Content-Type": "application/json; charset=x-nope"}, 200),
    ],
)
async def test_a_body_that_is_not_a_json_object_is_a_bad_request(
    service: tuple[StoreService, int],
    caplog: pytest.LogCaptureFixture,
    body: bytes,
    headers: dict[str, str],
    expected: int,
) -> None:
    svc, port = service
    status, _lines, _raw = await _post(port, "stats", body, _auth(svc, **headers))
    assert status == expected
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("search", {"query": "x", "source": ["a"]}, "source"),
        ("search", {"query": 5}, "query"),
        ("read", {"source": "https://example.com/", "offset": "abc"}, "offset"),
        ("read", {"source": "https://example.com/", "max_chars": "500"}, "max_chars"),
        ("crawl", {"url": "https://example.com/", "max_depth": "abc"}, "max_depth"),
        ("crawl", {"url": "https://example.com/", "max_pages": True}, "max_pages"),
        ("crawl", {"url": "https://example.com/", "max_depth": 0}, "max_depth"),  # not made 1
        ("crawl", {"url": "https://example.com/", "max_pages": 0}, "max_pages"),
        ("delete", {"source": "..", "folder": True}, "source"),
        ("index", {"directory": "notes"}, "directory"),
    ],
)
async def test_a_field_of_the_wrong_type_or_form_is_named_in_a_one_line_error(
    service: tuple[StoreService, int],
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    """The service stays up, logs no traceback, and a relative path is never read against
    the service's own folder (a raw `delete .. folder=true` removed the whole store)."""
    svc, port = service
    await svc.kb.ingest_text("https://example.com/kept", "# 残る\n\n残るページ。")
    status, lines, raw = await _post(port, path, json.dumps(body).encode(), _auth(svc))
    assert status == 200
    error = lines[-1].get("error")
    assert error and field in error["message"] and error["user_error"], raw
    assert "\n" not in error["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert (await svc.kb.stats()).total_chunks >= 1


async def test_an_answer_of_several_megabytes_is_read_and_one_too_large_is_one_line(
    settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rag stats` of a store with thousands of long source URLs answers one JSON line of
    several MiB (it broke at 2 MiB, aiohttp's line limit for the client's buffer)."""
    sources = [f"https://example.com/{'p' * 900}/{i}" for i in range(1500)]
    stats = KBStats(
        total_chunks=1500,
        sources=sources,
        embedding_model="m",
        embedding_dimension=384,
        bm25_documents=1500,
        vector_store="v",
        bm25_dir="b",
        source_chunks=dict.fromkeys(sources, 1),
        source_dates=dict.fromkeys(sources, "2026-01-01T00:00:00Z"),
    )
    payload = protocol.line("result", stats.to_dict())
    assert len(payload) > 2 << 20

    async def answer(_request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(_request)
        await response.write(protocol.line("heartbeat", True))
        await response.write(payload)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post(f"{protocol.API}/stats", answer)
    runner, port = await _serve(app)
    client = StoreClient(settings, {"port": port, "token": "t"})
    try:
        got = await client.stats()
        assert got.sources == sources and got.source_chunks[sources[-1]] == 1
        monkeypatch.setattr("rag_app.service.client.MAX_REPLY_LINE", 1 << 20)
        with pytest.raises(ServiceError, match="larger than 1 MiB"):
            await client.stats()
    finally:
        await client.aclose()
        await runner.cleanup()


def test_a_folder_index_lists_at_most_a_thousand_failed_files_and_counts_them_all() -> None:
    from rag_app.limits import MAX_LISTED_FILE_ERRORS

    summary = DirIndexSummary()
    for i in range(MAX_LISTED_FILE_ERRORS + 250):
        summary.failure(f"/f/{i}.docx", "not a Word file")
    assert summary.failed == MAX_LISTED_FILE_ERRORS + 250
    assert len(summary.errors) == MAX_LISTED_FILE_ERRORS
    again = DirIndexSummary.from_dict(json.loads(json.dumps(summary.to_dict())))
    assert again.failed == summary.failed and again.errors == summary.errors
    older = DirIndexSummary.from_dict({"errors": [["/a", "b"]]})  # an older service's answer
    assert older.failed == 1


def test_bad_request_error_is_a_user_error() -> None:
    from rag_app.service.fields import BadRequestError, integer

    with pytest.raises(BadRequestError):
        integer({"n": False}, "n")
    assert issubclass(BadRequestError, RAGError)


async def test_idle_connections_are_closed_and_a_long_request_is_not(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections that send nothing, or half a request, are closed after
    `IDLE_CONNECTION_SEC` (they stayed open for an hour: anyone on the machine could hold
    the service's file descriptors); a request answered for longer than that (a delete
    waiting behind a reindex) is not cut."""
    from rag_app.service import server
    from tests.hnsw_files import hold_the_first_restored_write

    monkeypatch.setattr(server, "IDLE_CONNECTION_SEC", 0.5)
    await kb.ingest_text("https://example.com/gone", "# 消す\n\n消えるページ。" * 5)
    svc = StoreService(kb.settings)
    svc.kb = kb
    svc.ready.set()
    runner = svc._runner()
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    client = StoreClient(kb.settings, {"port": port, "token": svc.token})
    held, release = hold_the_first_restored_write(monkeypatch)
    reindex = asyncio.create_task(kb.reindex())
    try:
        silent = await asyncio.open_connection("127.0.0.1", port)
        half = await asyncio.open_connection("127.0.0.1", port)
        half[1].write(b"POST /v1/stats HTTP/1.1\r\nHost: x\r\n")
        assert await asyncio.to_thread(held.wait, 60)
        deleting = asyncio.create_task(client.delete_source("https://example.com/gone"))
        for reader, _writer in (silent, half):
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the service
        assert not deleting.done()
        await asyncio.sleep(1.0)  # the delete's stream outlives the idle limit
        release.set()
        await reindex
        assert await deleting >= 1
    finally:
        release.set()
        await client.aclose()
        await runner.cleanup()


async def test_a_flood_of_connections_closes_idle_ones_never_one_being_answered(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the cap, the connection idle the longest is closed to make room: a local
    process opening connections without a request can neither use up the service's file
    descriptors nor lock clients out, and a request being answered keeps its connection."""
    from tests.hnsw_files import hold_the_first_restored_write

    await kb.ingest_text("https://example.com/gone", "# 消す\n\n消えるページ。" * 5)
    svc, runner, port = await _capped(kb, 8)
    client = StoreClient(kb.settings, {"port": port, "token": svc.token})
    held, release = hold_the_first_restored_write(monkeypatch)
    reindex = asyncio.create_task(kb.reindex())
    flood = []
    try:
        assert await asyncio.to_thread(held.wait, 60)
        deleting = asyncio.create_task(client.delete_source("https://example.com/gone"))
        await asyncio.sleep(0.5)  # its request is being answered (waiting for the reindex)
        for _ in range(30):
            flood.append(await asyncio.open_connection("127.0.0.1", port))
        flood[-1][1].write(b"POST /v1/stats HTTP/1.1\r\nHost: x\r\n")  # half a request
        await asyncio.sleep(0.2)
        assert len(svc.connections.open) <= 8
        for reader, _writer in flood[:20]:  # the oldest idle ones were closed
            assert await asyncio.wait_for(reader.read(), 5) == b""
        other = StoreClient(kb.settings, {"port": port, "token": svc.token})
        try:
            assert (await other.stats()).total_chunks >= 1  # a new client gets in
        finally:
            await other.aclose()
        assert not deleting.done()
        release.set()
        await reindex
        assert await deleting >= 1  # the connection being answered was never closed
        assert svc.connections.closed >= 20
    finally:
        release.set()
        for _reader, writer in flood:
            writer.close()
        await client.aclose()
        await runner.cleanup()


async def test_a_flood_closes_connections_that_never_showed_the_token_first(
    kb: KnowledgeBase,
) -> None:
    """Connections that never showed the token are closed first: a client's requests
    (each on a connection of its own, none left idle in a pool where the cap could close
    it under the next request, which failed that request) go through a flood."""
    svc, runner, port = await _capped(kb, 8)
    client = StoreClient(kb.settings, {"port": port, "token": svc.token})
    flood = []
    try:
        for round_ in range(3):
            await kb.ingest_text(f"https://example.com/{round_}", "# 頁\n\n本文です。" * 5)
            assert (await client.stats()).total_chunks >= 1
            for _ in range(20):  # never show the token
                flood.append(await asyncio.open_connection("127.0.0.1", port))
            health = flood[-1][1]
            health.write(f"GET {protocol.API}/health HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await asyncio.sleep(0.2)
            assert await client.delete_source(f"https://example.com/{round_}") >= 1
        assert svc.connections.closed >= 3 * 20 - 8
    finally:
        for _reader, writer in flood:
            writer.close()
        await client.aclose()
        await runner.cleanup()


def _pipeline_without_reading(port: int, connections: int, deadline: float) -> list[Any]:
    """Connections that each send ~2 MB of pipelined health requests and never read the
    answers (a small receive window): the service's answers pile up unsent."""
    import socket

    request = f"GET {protocol.API}/health?nonce={'x' * 128} HTTP/1.1\r\nHost: x\r\n\r\n"
    data = request.encode() * 12_000
    socks = []
    for _ in range(connections):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        sock.connect(("127.0.0.1", port))
        sock.settimeout(0.2)
        sent, until = 0, min(deadline, time.monotonic() + 1.0)
        while sent < len(data) and time.monotonic() < until:
            try:
                sent += sock.send(data[sent:])
            except TimeoutError:
                continue
            except OSError:
                break  # closed by the service
        socks.append(sock)
    return socks


async def test_a_connection_closed_to_make_room_goes_even_with_answers_unsent(
    kb: KnowledgeBase,
) -> None:
    """Closing a connection whose answers its peer never reads waits for them to be sent:
    it stayed open, no longer counted, and the cap could be passed without the token."""
    svc, runner, port = await _capped(kb, 4)
    socks: list[Any] = []
    try:
        deadline = time.monotonic() + 8
        socks = await asyncio.to_thread(_pipeline_without_reading, port, 10, deadline)
        await asyncio.sleep(0.5)
        assert svc.connections.closed >= 6
        assert len(runner.server.connections) <= 4  # what aiohttp still holds open
    finally:
        for sock in socks:
            sock.close()
        await runner.cleanup()


async def test_an_index_whose_client_goes_away_stops_after_the_file_being_written(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """Ctrl-C on `rag index` printed "interrupted" while the service went on through the
    whole folder (a folder deleted just after came back). Now the index stops at its next
    file once its client has gone; what was written stays, and the next run finishes."""
    from tests.processes import write_notes

    folder = tmp_path / "many"
    files = write_notes(folder, "cg", 40)
    svc = StoreService(kb.settings)
    svc.kb = kb
    svc.ready.set()
    runner, port = await _serve(svc._app())
    client = StoreClient(kb.settings, {"port": port, "token": svc.token})
    client.stop_work_if_gone = True  # as `rag` asks; `rag-mcp` does not
    try:
        indexing = asyncio.create_task(client.index_dir(str(folder)))
        for _ in range(600):
            if any(s.startswith(folder.as_uri()) for s in (await kb.stats()).sources):
                break
            await asyncio.sleep(0.05)
        indexing.cancel()  # the client leaves, as Ctrl-C does
        with pytest.raises(asyncio.CancelledError):
            await indexing
        await asyncio.sleep(1.5)  # a progress line or two: the service notices
        first = len([s for s in (await kb.stats()).sources if s.startswith(folder.as_uri())])
        await asyncio.sleep(1.5)
        later = len([s for s in (await kb.stats()).sources if s.startswith(folder.as_uri())])
        assert 1 <= first == later < len(files), (first, later)
        again = await client.index_dir(str(folder))
        assert again.added == len(files) - later and again.failed == 0, again
    finally:
        await client.aclose()
        await runner.cleanup()


async def test_an_empty_search_mode_is_refused_not_read_as_the_default(
    service: tuple[StoreService, int],
) -> None:
    """`mode: ""` is no mode: the service passes it on and the search refuses it, as it
    does any unknown mode; a missing or null mode is still the default."""
    svc, port = service
    await svc.kb.ingest_text("https://example.com/a", "# りゅうおう\n\nりゅうおう の しろ。")
    client = StoreClient(svc.kb.settings, {"port": port, "token": svc.token})
    try:
        with pytest.raises(RAGError, match=r"Unknown search mode ''; use one of fused"):
            await client.retrieve("りゅうおう", mode="")
        assert (await client.retrieve("りゅうおう", mode=None)).hits
    finally:
        await client.aclose()


async def test_stats_travel_one_page_at_a_time(service: tuple[StoreService, int]) -> None:
    """`rag_stats` asks the service for its page only (the whole list of sources went to
    every caller, and broke past aiohttp's 2 MiB line with ~6,000 long URLs)."""
    from mcp_server.formatting import format_stats
    from mcp_server.schemas import StatsOutput

    svc, port = service
    urls = [f"https://example.com/{i}" for i in range(5)]
    for url in urls:
        await svc.kb.ingest_text(url, f"# {url}\n\n本文。")
    client = StoreClient(svc.kb.settings, {"port": port, "token": svc.token})
    try:
        page = await client.stats(2, 2)
        whole = await client.stats()
    finally:
        await client.aclose()
    assert page.sources == sorted(urls)[2:4] and page.source_count == 5
    assert set(page.source_chunks) == set(page.sources) == set(page.source_dates)
    assert whole.sources == sorted(urls) and whole.source_count == 5
    text = format_stats(page, 2, 2)
    assert "ソースURL数: 5" in text and "(3–4件目 / 5件)" in text and "offset=4" in text
    out = StatsOutput.of(page, 2, 2)
    assert out.sources == sorted(urls)[2:4] and out.source_count == 5 and out.offset == 2


async def test_a_body_that_stops_coming_is_given_up(
    service: tuple[StoreService, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose body stops halfway (token given) is answered 408 after the idle
    limit instead of holding its connection, and the service's stop, for good."""
    from rag_app.service import server

    monkeypatch.setattr(server, "IDLE_CONNECTION_SEC", 0.5)
    svc, port = service
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST /v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {svc.token}\r\n"
        "Content-Length: 100\r\n\r\n{".encode()
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    assert b" 408 " in status_line, status_line


async def test_a_large_stats_page_reads_every_record_instead_of_naming_them(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `STATS_PAGE_READ_MAX` sources a page's records are not read by id (a query
    naming 100,000 ids can pass SQLite's variable limit); the dates are the same."""
    import rag_app.knowledge as knowledge

    for i in range(3):
        await kb.ingest_text(f"https://example.com/{i}", f"# {i}\n\n本文。")
    small = await kb.stats(0, 3)
    asked: list[int] = []
    real = kb.store.chroma.get_sources
    monkeypatch.setattr(kb.store.chroma, "get_sources", lambda ids: asked.append(1) or real(ids))
    monkeypatch.setattr(knowledge, "STATS_PAGE_READ_MAX", 2)
    large = await kb.stats(0, 3)
    assert asked == [] and large.source_dates == small.source_dates
    assert all(small.source_dates.values())


async def test_a_call_is_answered_beside_more_long_calls_than_a_connection_pool_holds(
    settings: RAGSettings,
) -> None:
    """One client (`rag-mcp` over HTTP serves many) with 110 calls waiting on jobs: with
    aiohttp's default pool of 100 connections the 111th call, a search, waited for one
    of them to end (a waited crawl: hours). A stand-in service on loopback answers
    `slow` only when released and `fast` at once."""
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        while not release.is_set():
            await response.write(protocol.line("heartbeat", True))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 0.5)
        await response.write(protocol.line("result", "slow"))
        return response

    async def fast(_request: web.Request) -> web.Response:
        return web.Response(body=protocol.line("result", "fast"))

    app = web.Application()
    app.router.add_post(f"{protocol.API}/slow", slow)
    app.router.add_post(f"{protocol.API}/fast", fast)
    runner, port = await _serve(app)
    client = StoreClient(settings, {"port": port, "token": "t", "pid": 1})
    try:
        waits = [asyncio.create_task(client._call("slow", {}, safe=True)) for _ in range(110)]
        await asyncio.sleep(1.0)
        started = time.monotonic()
        assert await asyncio.wait_for(client._call("fast", {}, safe=True), 10) == "fast"
        assert time.monotonic() - started < 2
        release.set()
        assert await asyncio.gather(*waits) == ["slow"] * 110
    finally:
        release.set()
        await client.aclose()
        await runner.cleanup()


async def test_a_connection_closed_before_the_answer_began_is_sent_again_even_for_a_write(
    settings: RAGSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service sends its answer's headers before it starts any work, so a connection
    closed before them (its connection cap full, or a stop) did nothing: a write is sent
    again instead of failing as "stopped while handling". A stand-in service on loopback
    closes the first two; one that closes every one gives a sentence saying nothing was
    done."""
    calls = {"write": 0, "never": 0}

    async def write(request: web.Request) -> web.Response:
        calls["write"] += 1
        if calls["write"] <= 2:
            assert request.transport is not None
            request.transport.close()  # as the connection cap does: no answer at all
        return web.Response(body=protocol.line("result", "stored"))

    async def never(request: web.Request) -> web.Response:
        calls["never"] += 1
        assert request.transport is not None
        request.transport.close()
        return web.Response(body=b"")

    app = web.Application()
    app.router.add_post(f"{protocol.API}/write", write)
    app.router.add_post(f"{protocol.API}/never", never)
    runner, port = await _serve(app)
    client = StoreClient(settings, {"port": port, "token": "t", "pid": 1})

    async def same_owner() -> None:  # the stand-in is the only owner there is
        return None

    monkeypatch.setattr(client, "_reconnect", same_owner)
    try:
        assert await client._call("write", {}, safe=False) == "stored"
        assert calls["write"] == 3
        with pytest.raises(ServiceError, match="before it took the request, 4 times"):
            await client._call("never", {}, safe=False)
        assert calls["never"] == 4
    finally:
        await client.aclose()
        await runner.cleanup()
