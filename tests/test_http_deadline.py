"""`rag-mcp`'s HTTP protocol: a request arrives whole within its deadline or the
connection is closed; past the cap the oldest connection still waiting goes. A real
uvicorn server on loopback with short limits."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from mcp_server.http_deadline import DeadlineH11Protocol
from tests.test_mcp_http import free_port

DEADLINE = 0.6
CAP = 8
BIG = 4_000_000
HUGE = 12_000_000  # more than the kernel's socket buffers take (4 MB to send on Linux)


class Short(DeadlineH11Protocol):
    deadline_sec = DEADLINE
    max_connections = CAP


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/slow":
        await asyncio.sleep(3 * DEADLINE)  # answering takes longer than the deadline
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if scope["path"] == "/stream":  # its end waits until the peer has read the rest
        await send({"type": "http.response.body", "body": b"x" * HUGE, "more_body": True})
        body = b""
    elif scope["path"] in ("/big", "/huge"):  # whole at once: over while it is sent
        body = b"x" * (BIG if scope["path"] == "/big" else HUGE)
    await send({"type": "http.response.body", "body": b"ok " + body})


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, uvicorn.Server]]:
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=Short, log_level="error", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    yield port, server
    server.should_exit = True
    await asyncio.wait_for(task, 10)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """The server closed the connection (EOF or reset) within `seconds`."""
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def request(path: str, body: bytes = b"", keep_alive: bool = True) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    return (head + ("" if keep_alive else "Connection: close\r\n") + "\r\n").encode() + body


async def test_silent_half_sent_and_trickled_requests_are_closed_at_the_deadline(
    served: tuple[int, uvicorn.Server],
) -> None:
    port, _ = served
    silent, _w1 = await connect(port)
    half, w2 = await connect(port)
    w2.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Len")
    body, w3 = await connect(port)
    w3.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nfive ")
    trickle, w4 = await connect(port)
    started = time.monotonic()
    for byte in request("/", b"x" * 40):  # one byte every 50 ms: 4 s for the whole request
        if trickle.at_eof() or w4.is_closing():
            break
        try:
            w4.write(bytes([byte]))
            await w4.drain()
        except ConnectionError:
            break
        await asyncio.sleep(0.05)
        if time.monotonic() - started > 4 * DEADLINE:
            break
    assert await closed_within(trickle, 1.0), "bytes trickling in must not buy time"
    for reader in (silent, half, body):
        assert await closed_within(reader, 2 * DEADLINE)


async def test_whole_requests_slow_answers_and_kept_alive_connections_are_served(
    served: tuple[int, uvicorn.Server],
) -> None:
    port, _ = served
    reader, writer = await connect(port)
    writer.write(request("/slow", b"a"))  # answered after 3 deadlines: never cut
    assert b"ok a" in await asyncio.wait_for(reader.readuntil(b"ok a"), 10)
    await asyncio.sleep(DEADLINE / 2)  # idle between requests, within the deadline
    writer.write(request("/", b"b", keep_alive=False))
    assert b"ok b" in await asyncio.wait_for(reader.read(), 10)
    writer.close()


async def test_past_the_cap_the_oldest_waiting_connection_goes_and_clients_are_served(
    served: tuple[int, uvicorn.Server],
) -> None:
    port, server = served
    busy = [await connect(port) for _ in range(2)]
    for _, writer in busy:  # being answered: never closed to make room
        writer.write(request("/slow", b"busy"))
    await asyncio.sleep(0.1)
    flood = [await connect(port) for _ in range(3 * CAP)]
    await asyncio.sleep(0.1)
    assert len(server.server_state.connections) <= CAP
    reader, writer = await connect(port)
    writer.write(request("/", b"client", keep_alive=False))
    assert b"ok client" in await asyncio.wait_for(reader.read(), 10)
    for reader, _ in busy:
        assert b"ok busy" in await asyncio.wait_for(reader.readuntil(b"ok busy"), 10)
    closed = [await closed_within(r, 0.01) for r, _ in flood[:CAP]]
    assert all(closed), closed  # the oldest of the flood went first


def non_reader(port: int, path: str, keep_alive: bool = True) -> socket.socket:
    """Asks for a huge answer through a small receive window and never reads it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request(path, keep_alive=keep_alive))
    return sock


def slow_reader(port: int) -> tuple[int, float]:
    """Reads a big answer at ~2 MB/s through a small receive window, so most of it waits
    in the server's send buffer for longer than the deadline: (bytes of it, seconds)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request("/big"))  # kept alive: the deadline for a next request runs
    got, started = 0, time.monotonic()
    try:
        while got < BIG and (chunk := sock.recv(65536)):
            got += chunk.count(b"x")
            time.sleep(0.03)
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return got, time.monotonic() - started


async def test_a_peer_that_reads_no_answer_is_closed_and_a_slow_reader_gets_all(
    served: tuple[int, uvicorn.Server],
) -> None:
    port, server = served
    held = [non_reader(port, "/stream") for _ in range(CAP // 2)]  # the answer never ends
    # the answer ends and the server closes its side, with most of it still to send
    held += [non_reader(port, "/huge", keep_alive=False) for _ in range(CAP // 2)]
    for _ in range(250):  # each answer stuck in its send buffer
        if sum(c.unread() for c in server.server_state.connections) == CAP:
            break
        await asyncio.sleep(0.02)
    assert sum(c.unread() for c in server.server_state.connections) == CAP

    reader, writer = await connect(port)  # past the cap: a non-reader makes room
    writer.write(request("/", b"client", keep_alive=False))
    assert b"ok client" in await asyncio.wait_for(reader.read(), 10)

    got, took = await asyncio.to_thread(slow_reader, port)
    assert got == BIG and took > 2 * DEADLINE, (got, took)  # never cut, however slow
    for _ in range(200):  # the non-readers are closed without their reading anything
        if not server.server_state.connections:
            break
        await asyncio.sleep(0.02)
    assert not server.server_state.connections
    for sock in held:
        sock.close()


def test_a_real_rag_mcp_closes_what_never_sends_a_request(tmp_path: Any) -> None:
    """The shipped limits in the real `rag-mcp`: 300 silent connections, an MCP request
    answered beside them, and the server holding no more than its cap of them."""
    from mcp_server.http_deadline import MAX_CONNECTIONS
    from tests.adversarial.test_mcp_transport import post, start
    from tests.test_mcp_http import wait_for_port

    port = free_port()
    proc = start(tmp_path, "127.0.0.1", port)
    socks: list[socket.socket] = []
    try:
        wait_for_port(port, proc)
        for _ in range(MAX_CONNECTIONS + 44):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        assert post(port, {"Host": f"127.0.0.1:{port}"}) == 200
        gone = 0
        for s in socks:
            s.setblocking(False)
            try:
                gone += s.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                gone += 1
        assert gone >= 44, gone
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        proc.wait(timeout=10)
