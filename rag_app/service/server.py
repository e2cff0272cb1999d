"""The store service: the one process that owns a store and serves every other one.

It holds the owner lock of the store's folders, one KnowledgeBase (model, Chroma
client, BM25 index, crawler) and answers JSON-lines requests on a loopback port
that only holders of the token (published in the owner file, mode 0600) may use.
A client that disconnects does not cancel work in progress: what it started is
committed by the store exactly as if it had stayed — except an add or an index whose
client asked for it (`rag`'s Ctrl-C, `STOPS_WITH_CLIENT`): no further file or page is
started, and the write under way finishes.

    python -m rag_app.service.server        # what `connect()` starts in the background
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from rag_app.blas_threads import single_blas_thread
from rag_app.config import RAGSettings, SettingsError, load_settings
from rag_app.errors import RAGError, StoreBusyError
from rag_app.owner_lock import INFO_NAME, StoreOwnerLock, read_info
from rag_app.service import fields, protocol
from rag_app.service.connection_cap import ConnectionCap
from rag_app.startup_gc import started, starting
from rag_app.storage_errors import storage_error
from rag_app.write_wait import NOTICE, Notice, WriteWait

logger = logging.getLogger("rag_app.service")

Progress = Callable[[int, int], None]
Work = Callable[[dict[str, Any], Progress], Awaitable[Any]]
GRACE_SEC = 10.0
HEARTBEAT_SEC = 5.0
STOPS_WITH_CLIENT = frozenset({"index", "add"})
"""Requests stopped when their client goes away, if the client asked (`stop_if_gone`:
Ctrl-C on `rag index` / `rag add` means stop). Others, and these for other clients (an
MCP client's time limit cancels its call too), finish their work."""
IDLE_CONNECTION_SEC = 30.0
"""An idle connection is closed after this long (aiohttp's own default is an hour, so
connections that never send a request could use up the service's file descriptors).
Longer than aiohttp clients keep an idle connection (15 s), so a client's request never
meets a connection the service is closing."""
LOCK_WATCH_SEC = 2.0

"""How often the owner checks that its lock files are still the ones it locked."""
VECTOR_CHECK_PENDING = ".rag-vector-check-pending"
"""In the store folder while the vector index still needs checking after an abnormal stop."""
FAILED_LINGER_SEC = 3.0  # a line at least this often, so clients can tell slow from gone


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-knowledge")
    except PackageNotFoundError:
        return "0"


class StoreService:
    """Owns one store for as long as it runs; stops when told, on SIGTERM, or when idle."""

    def __init__(self, settings: RAGSettings) -> None:
        self.settings = settings
        self.token = secrets.token_urlsafe(32)
        self.connections = ConnectionCap()
        self.kb: Any = None
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.inflight = 0
        self.last_activity = time.monotonic()
        self.open_error: BaseException | None = None
        self.heal_marker: Path | None = None  # see _heal_marker
        self.published: dict[str, Any] = {}  # what `_publish` last wrote

    # ------------------------------------------------------------- lifecycle
    async def run(self) -> int:
        lock = StoreOwnerLock.for_settings(self.settings)
        try:
            lock.acquire(timeout=2.0)  # a client probing the lock holds it for a moment
        except StoreBusyError as err:
            print(f"rag-store: {err}", file=sys.stderr)
            return 3
        self.heal_marker = self._heal_marker(lock)
        runner = self._runner()
        await runner.setup()
        assert runner.server is not None
        self.connections.install(runner.server)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        info = {
            "pid": os.getpid(),
            "port": port,
            "token": self.token,
            "state": "starting",
            "version": _version(),
            "protocol": protocol.PROTOCOL_VERSION,
            "fingerprint": protocol.fingerprint(self.settings),
            "started": time.time(),
        }
        self._publish(lock, info)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        logger.info("Store service %d on 127.0.0.1:%d for %s", os.getpid(), port, lock.primary)
        watcher = asyncio.create_task(self._idle_watch())
        guard = asyncio.create_task(self._lock_watch(lock))
        code = 0
        try:
            await self._open()
            self.last_activity = time.monotonic()  # idle counts from ready, not from start
            self._publish(lock, {**info, "state": "ready"})
            await self.stop.wait()
        except BaseException as err:  # opening failed: say so to waiting clients, then exit
            mapped = storage_error(err, self.settings) if isinstance(err, Exception) else None
            logger.error("The store could not be opened: %s", mapped or err)
            self._publish(lock, {**info, "state": "failed", "error": str(mapped or err)})
            await asyncio.sleep(FAILED_LINGER_SEC)  # waiting clients read why, then we go
            code = 1
        finally:
            stopping = time.monotonic()
            if self.kb is not None:
                await self.kb.cancel_jobs()  # what they committed stays
            await self._drain()
            watcher.cancel()
            guard.cancel()
            lock.clear_info()
            await runner.cleanup()
            wedged = self.inflight > 0 or self._write_in_progress()
            if self.kb is not None and not wedged:
                chunks = self._chunk_collection()
                await self.kb.aclose()
                if chunks is not None:
                    await self._save_vector_index(chunks, time.monotonic() - stopping)
            if wedged:  # work still runs in a thread: exit holding the lock (the OS drops it)
                if not self.settings.chroma_host:  # as good as a kill: the next start checks
                    (lock.primary / VECTOR_CHECK_PENDING).touch()
                logger.error("Store service %d stopped with work in progress.", os.getpid())
                if self.kb is not None:  # a job that stopped late: its record still lands
                    self.kb.flush_journal(2.0)
                logging.shutdown()
                os._exit(75)
            lock.release()
            logger.info("Store service %d stopped.", os.getpid())
        return code

    def _heal_marker(self, lock: StoreOwnerLock) -> Path | None:
        """The pending-check file when the vector index must be checked at open: the
        previous owner was killed (its details are still published: a clean stop removes
        them), or exited with a write stuck, or a check it started did not finish. An
        embedded store only: a Chroma server's index is not hurt by a client's kill."""
        if self.settings.chroma_host:
            return None
        marker = lock.primary / VECTOR_CHECK_PENDING
        previous = read_info(lock.primary)
        if not (previous.get("pid") or marker.exists()):
            return None
        marker.touch()  # until the check has gone through every chunk
        logger.warning(
            "The previous store service (process %s) ended without closing the store; "
            "checking its vector index.",
            previous.get("pid", "?"),
        )
        return marker

    async def _save_vector_index(self, chunks: str, stopping_sec: float) -> None:
        """Save Chroma's HNSW files for the next start (`hnsw_save`), unless a background
        thread still uses Chroma or the stop (jobs, draining, closing) already took long:
        a supervisor's kill during the save could damage them."""
        from rag_app.index.hnsw_save import SAVE_AT_STOP_LATE_SEC, save_at_stop

        if self.kb.threads_left or stopping_sec > SAVE_AT_STOP_LATE_SEC:
            logger.info(
                "Chroma's vector index not saved at the stop (stopping took %.1f s; still "
                "running: %s).",
                stopping_sec,
                ", ".join(self.kb.threads_left) or "nothing",
            )
            return
        await asyncio.to_thread(save_at_stop, self.settings.chromadb_persist_dir, chunks)

    def _chunk_collection(self) -> str | None:
        """The open embedded store's chunk collection (None with a Chroma server)."""
        store = getattr(self.kb, "_store", None) if self.kb is not None else None
        if store is None or self.settings.chroma_host:
            return None
        return str(store.chroma.collection.name)

    def _write_in_progress(self) -> bool:
        store = getattr(self.kb, "_store", None) if self.kb is not None else None
        return getattr(store, "write_started", None) is not None

    async def _open(self) -> None:
        def build() -> Any:
            from rag_app.knowledge import KnowledgeBase

            kb = KnowledgeBase(self.settings, take_ownership=False)
            kb.heal_marker = self.heal_marker
            return kb

        try:
            kb = await asyncio.to_thread(build)
            await kb.open(allow_model_mismatch=True)  # `rag reindex` must be able to run
        except BaseException as err:
            self.open_error = err
            self.ready.set()
            raise
        finally:
            started()  # the open index is long-lived: frozen, never rescanned
        self.kb = kb
        kb.store.stall_exit_sec = self.settings.rag_store_stall_sec
        self.ready.set()
        try:
            await kb.resume_jobs()  # crawls and refreshes a previous owner did not finish
        except Exception:  # the store is open and serving: a bad job record must not stop it
            logger.exception("Unfinished jobs could not be resumed.")

    async def _idle_watch(self) -> None:
        """Stop after RAG_SERVICE_IDLE_SEC without requests (0 = never)."""
        idle = self.settings.rag_service_idle_sec
        while idle > 0:
            await asyncio.sleep(min(5.0, idle))
            if self.kb is not None and self.kb.running_jobs:
                self.last_activity = time.monotonic()  # a running crawl is activity
            if not self.ready.is_set():
                continue  # opening is not idleness (a small RAG_SERVICE_IDLE_SEC)
            if self.inflight == 0 and time.monotonic() - self.last_activity > idle:
                logger.info("Idle for %.0f s: stopping.", idle)
                self.stop.set()
                return

    def _publish(self, lock: StoreOwnerLock, info: dict[str, Any]) -> None:
        """Publish how to reach this owner, and keep it to publish again (`_lock_watch`)."""
        self.published = info
        lock.write_info(info)

    async def _lock_watch(self, lock: StoreOwnerLock) -> None:
        """Exit at once when the store's folder is removed or replaced under this owner
        (`StoreOwnerLock.intact`): the next client locks a new file there and starts a
        second owner, and two owners must never write one store. Exiting as a kill
        would (no closing writes) is what the store is built to recover from."""
        while True:
            await asyncio.sleep(LOCK_WATCH_SEC)
            if (folder := lock.changed()) is not None:
                logger.error(
                    "The store folder %s was removed or replaced while this service owned "
                    "it; stopping at once (the next command starts a new store service).",
                    folder,
                )
                logging.shutdown()
                os._exit(75)
            try:
                if lock.republish(self.published):
                    logger.warning("%s was removed; written again.", INFO_NAME)
            except OSError as err:
                logger.warning("Could not write %s again: %s", INFO_NAME, err)

    async def _drain(self) -> None:
        deadline = time.monotonic() + GRACE_SEC
        while self.inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    # ----------------------------------------------------------------- HTTP
    def _runner(self) -> web.AppRunner:
        """The HTTP server; a connection idle (no request, or a request that never
        completes) for `IDLE_CONNECTION_SEC` is closed."""
        return web.AppRunner(
            self._app(),
            handle_signals=False,
            access_log=None,
            keepalive_timeout=IDLE_CONNECTION_SEC,
        )

    def _app(self) -> web.Application:
        app = web.Application(
            middlewares=[self.connections.middleware, self._auth], client_max_size=1024 * 1024
        )
        app.router.add_get(f"{protocol.API}/health", self._health)
        routes: dict[str, Work] = {
            "search": self._search,
            "add": self._add,
            "crawl": self._crawl,
            "refresh": self._refresh,
            "jobs": self._jobs,
            "job_cancel": self._job_cancel,
            "job_wait": self._job_wait,
            "index": self._index,
            "delete": self._delete,
            "stats": self._stats,
            "read": self._read,
            "check": self._check,
            "reindex": self._reindex,
        }
        for name, work in routes.items():
            app.router.add_post(
                f"{protocol.API}/{name}",
                self._endpoint(work, stops_with_client=name in STOPS_WITH_CLIENT),
            )
        app.router.add_post(f"{protocol.API}/shutdown", self._shutdown)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == f"{protocol.API}/health":
            return await handler(request)  # answers only with a proof of the token
        # a header that is not UTF-8 arrives with surrogate escapes: compared as the bytes sent
        given = request.headers.get(protocol.TOKEN_HEADER, "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, f"Bearer {self.token}".encode()):
            return web.json_response({"error": "unauthorised"}, status=401)
        self.connections.trust(request.transport)
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        state = "ready" if self.kb is not None else "failed" if self.open_error else "starting"
        if self.stop.is_set():
            state = "stopping"  # clients wait for the next owner
        nonce = request.query.get("nonce", "")[:128]
        return web.json_response(
            {
                "proof": protocol.proof(self.token, nonce),
                "state": state,
                "pid": os.getpid(),
                "inflight": self.inflight,
                "jobs": self.kb.running_jobs if self.kb is not None else 0,
                "restoring": list(self.kb.restoring) if self.kb and self.kb.restoring else None,
                "writes_held": self._writes_held(),
                "error": str(self.open_error) if self.open_error else None,
                # clients of this version compare the owner file's; a client started
                # before an upgrade still reads this one (without it, it would stop and
                # restart the service at every call)
                "fingerprint": protocol.fingerprint(self.settings),
            }
        )

    def _writes_held(self) -> dict[str, Any] | None:
        """What holds the writes for long (a restore or a reindex), for `rag service status`."""
        wait = self.kb.write_wait() if self.kb is not None else None
        return wait.to_dict() if wait is not None else None

    async def _shutdown(self, _request: web.Request) -> web.Response:
        self.stop.set()
        return web.json_response({"stopping": True, "inflight": self.inflight})

    def _endpoint(
        self, work: Work, *, stops_with_client: bool = False
    ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """One request's handler; with `stops_with_client` and a client that asked for it
        (`stop_if_gone`), the work is cancelled once its client has gone (noticed at the
        next progress line or heartbeat): the writes it had under way finish
        (`KnowledgeBase._locked`), nothing further starts."""

        async def handle(request: web.Request) -> web.StreamResponse:
            if self.stop.is_set():  # not started: the client sends it to the next owner
                return web.json_response({"error": "stopping"}, status=protocol.STOPPING_STATUS)
            self.last_activity = time.monotonic()
            try:  # a body that stops coming in is given up (it would also hold the stop)
                async with asyncio.timeout(IDLE_CONNECTION_SEC):
                    raw = await request.read()
            except TimeoutError:
                return web.json_response({"error": "request body timed out"}, status=408)
            try:  # the bytes as JSON whatever the declared charset; nesting too deep fails too
                body = json.loads(raw)
                if not isinstance(body, dict):
                    raise ValueError("not an object")
            except (ValueError, RecursionError):
                return web.json_response({"error": "bad request"}, status=400)
            stops = stops_with_client and body.get("stop_if_gone") is True
            response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
            await response.prepare(request)
            queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
            open_ = [True]  # a job started by this request outlives it: its notes go nowhere

            def waiting(wait: WriteWait | None) -> None:
                if open_[0]:
                    queue.put_nowait(("waiting", wait.to_dict() if wait else None))

            task = asyncio.create_task(
                self._run(work, body, lambda d, t: queue.put_nowait(("progress", (d, t))), waiting)
            )
            alive, gone = True, False
            while not task.done():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait(
                    {task, getter}, timeout=HEARTBEAT_SEC, return_when=asyncio.FIRST_COMPLETED
                )
                if not getter.done():
                    getter.cancel()
                    if task.done():
                        break
                    alive = alive and await _write(response, protocol.line("heartbeat", True))
                else:
                    alive = alive and await _write(response, protocol.line(*getter.result()))
                if not alive and stops and not task.done():
                    logger.info("Its client went away: stopping the request %s.", request.path)
                    task.cancel()
                    gone = True
            open_[0] = False
            if gone and task.cancelled():  # stopped for a client that left: nobody to tell
                return response
            err = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if err is None:
                payload = protocol.line("result", task.result())
            else:
                if not isinstance(err, RAGError):
                    logger.error("Request failed", exc_info=err)
                payload = protocol.line("error", protocol.error_payload(err))
            if alive and await _write(response, payload):
                await response.write_eof()
            return response

        return handle

    async def _run(
        self, work: Work, body: dict[str, Any], progress: Progress, waiting: Notice
    ) -> Any:
        """Run one request to its end even if its client goes away; a write that waits
        behind a restore or a reindex says so (`write_wait`)."""
        self.inflight += 1
        NOTICE.set(waiting)  # this request's task only
        try:
            await self.ready.wait()
            if self.kb is None:
                raise RAGError(f"The knowledge base could not be opened: {self.open_error}")
            return await work(body, progress)
        finally:
            self.inflight -= 1
            self.last_activity = time.monotonic()

    # ------------------------------------------------------------- requests
    async def _search(self, body: dict[str, Any], _progress: Progress) -> Any:
        result = await self.kb.retrieve(
            fields.text(body, "query"),
            n_results=body.get("n_results"),  # both checked by `retrieve` (one line)
            mode=fields.nullable_text(body, "mode"),  # "" is refused, not the default
            options=body.get("options") or None,
            source=fields.optional_text(body, "source"),
        )
        return result.to_dict()

    async def _read(self, body: dict[str, Any], _progress: Progress) -> Any:
        result = await self.kb.read_source(
            fields.text(body, "source"),
            section=fields.text(body, "section"),
            offset=fields.whole(body, "offset", 0),
            max_chars=fields.integer(body, "max_chars"),
        )
        return result.to_dict()

    async def _add(self, body: dict[str, Any], _progress: Progress) -> Any:
        result = await self.kb.ingest_page(
            fields.text(body, "url"), prune=fields.flag(body, "prune")
        )
        return result.to_dict()

    async def _crawl(self, body: dict[str, Any], progress: Progress) -> Any:
        from rag_app.crawl_options import CrawlOptions

        options = CrawlOptions(
            max_depth=fields.whole(body, "max_depth", 1),  # a 0 sent is refused, not made 1
            max_pages=fields.integer(body, "max_pages"),
            exclude=fields.text(body, "exclude"),
            sitemap=fields.flag(body, "sitemap"),
            prune=fields.flag(body, "prune"),
        )
        job = await self.kb.start_crawl(
            fields.text(body, "url"), fields.text(body, "pattern"), options=options
        )
        return await self._job(job, body, progress)

    async def _refresh(self, body: dict[str, Any], progress: Progress) -> Any:
        if body.get("background"):
            return {"job": await self.kb.start_refresh()}
        return await self.kb.refresh_in_job(progress)

    async def _job(self, job: dict[str, Any], body: dict[str, Any], progress: Progress) -> Any:
        """With `background`, the job at once; else its result once it ends (it goes on
        if this client leaves; `rag jobs` shows it)."""
        if body.get("background"):
            return {"job": job}
        return await self.kb.job_result(job["id"], progress)

    async def _jobs(self, _body: dict[str, Any], _progress: Progress) -> Any:
        return {"jobs": await self.kb.jobs()}

    async def _job_cancel(self, body: dict[str, Any], _progress: Progress) -> Any:
        job_id, interrupted = fields.text(body, "id"), fields.flag(body, "interrupted")
        return {"job": await self.kb.cancel_job(job_id, interrupted=interrupted)}

    async def _job_wait(self, body: dict[str, Any], progress: Progress) -> Any:
        return {"job": await self.kb.wait_job(fields.text(body, "id"), progress)}

    async def _index(self, body: dict[str, Any], progress: Progress) -> Any:
        folder = fields.absolute_path(body, "directory")
        summary = await self.kb.index_dir(folder, progress=progress)
        return summary.to_dict()

    async def _delete(self, body: dict[str, Any], _progress: Progress) -> Any:
        source, folder = fields.absolute_path(body, "source"), fields.flag(body, "folder")
        return {"deleted": await self.kb.delete_source(source, folder=folder)}

    async def _stats(self, body: dict[str, Any], _progress: Progress) -> Any:
        offset, limit = fields.whole(body, "offset", 0), fields.integer(body, "limit")
        return (await self.kb.stats(offset, limit)).to_dict()

    async def _check(self, body: dict[str, Any], _progress: Progress) -> Any:
        return (await self.kb.check(repair=fields.flag(body, "repair"))).to_dict()

    async def _reindex(self, _body: dict[str, Any], progress: Progress) -> Any:
        return {"count": await self.kb.reindex(progress=progress)}


async def _write(response: web.StreamResponse, data: bytes) -> bool:
    """Write to a client that may have gone away; False once it has."""
    try:
        await response.write(data)
    except (ConnectionError, RuntimeError):
        return False
    return True


def main() -> None:
    """Entry point: `python -m rag_app.service.server` (settings from env and .env)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = load_settings()
    except SettingsError as err:
        print(f"rag-store: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    prepare_process()
    raise SystemExit(asyncio.run(StoreService(settings).run()))


def prepare_process() -> None:
    """What the process that runs a store service sets first (`main`, `rag service run`)."""
    # Hand the GIL over sooner: a search waiting behind ingest threads' Python code
    # gets it within 1 ms instead of 5 ms per hand-over.
    sys.setswitchinterval(0.001)
    single_blas_thread()
    starting()  # the cyclic GC is back once the store is open (`StoreService._open`)


if __name__ == "__main__":
    main()
