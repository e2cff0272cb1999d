"""StoreClient: the KnowledgeBase's methods, answered by the store's owner process.

Results come back as the same dataclasses the KnowledgeBase returns, and errors as
the same one-sentence `RAGError`s, so the CLI and the MCP tools work unchanged on
either. If the owner has gone away (stopped when idle, killed), the client finds or
starts a new one and retries a request that had not reached it; a request cut off
in the middle is reported, never silently repeated.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from rag_app.config import RAGSettings
from rag_app.crawl_options import CrawlOptions
from rag_app.errors import RAGError, ServiceError
from rag_app.results import (
    CheckReport,
    CrawlSummary,
    DirIndexSummary,
    IngestResult,
    KBStats,
    ReadResult,
    RefreshSummary,
    RetrievalResult,
)
from rag_app.service import protocol
from rag_app.source_scope import local_uri, source_key
from rag_app.write_wait import NOTICE, WriteWait

Progress = Callable[[int, int], None]
MAX_REPLY_LINE = 256 << 20
"""The longest line of a reply read (a result: `rag stats` of 100,000 sources is ~30 MB)."""
logger = logging.getLogger(__name__)


class _Lost(Exception):
    """The connection broke after the request was sent."""


class _NotStarted(Exception):
    """The owner did not start the request (it is stopping, or it closed the connection
    before its answer's headers: its connections were all in use, or it died): the same
    or the next owner may take it, a write too."""


NOT_STARTED_RETRIES = 3
"""Owners a request not started is sent to before giving up (each found by `find_owner`,
which waits for a stopping owner to go and starts the next)."""


def _tell(show: Callable[..., None], *args: Any) -> None:
    """Pass on progress or a waiting note; a display that fails (stderr gone, disk full)
    must not turn a write the service goes on with into an error here."""
    try:
        show(*args)
    except Exception as err:
        logger.debug("Could not show progress: %s", err)


class StoreClient:
    """A connection to the owner of one store."""

    def __init__(self, settings: RAGSettings, info: dict[str, Any]) -> None:
        self.settings = settings
        self._info = info
        self._session: aiohttp.ClientSession | None = None
        self.stop_work_if_gone = False
        """Ask the service to stop an add or an index once this client has gone: set by
        `rag`, whose Ctrl-C means stop. Not by `rag-mcp`: an MCP client also cancels a
        call when its own time limit runs out, which says nothing about the work."""

    @property
    def owner_pid(self) -> int:
        return int(self._info.get("pid", 0))

    def _url(self, name: str) -> str:
        return f"http://127.0.0.1:{int(self._info['port'])}{protocol.API}/{name}"

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # The service sends a line at least every few seconds (progress or heartbeat),
            # so silence this long means it hangs.
            silent = max(60.0, 2 * self.settings.rag_store_stall_sec)
            # No pool limit: a waited crawl holds its connection for hours, and aiohttp's
            # default of 100 left the 101st call (a search) waiting for one to end. Each
            # request has a connection of its own (loopback: ~0.1 ms to open), so none sits
            # idle where the service's connection cap could close it under a new request.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=silent),
                read_bufsize=1 << 20,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _reconnect(self) -> None:
        from rag_app.service.launcher import find_owner

        self._info = await find_owner(self.settings)

    async def _call(
        self, name: str, body: dict[str, Any], progress: Progress | None = None, *, safe: bool
    ) -> Any:
        """POST one request; `safe` requests (reads) are retried once if cut off, and any
        request a stopping owner did not start goes to the next owner."""
        not_started = 0
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._post(name, body, progress)
            except _NotStarted:
                not_started += 1
                attempt -= 1  # nothing was done: it does not count as a try
                if not_started > NOT_STARTED_RETRIES:
                    raise ServiceError(
                        "The store service closed the connection before it took the request, "
                        f"{NOT_STARTED_RETRIES + 1} times (it was stopping, or all its "
                        "connections were in use); nothing was done. Run the command again."
                    ) from None
                await asyncio.sleep(0.25 * not_started)  # a busy owner frees a connection
            except (aiohttp.ClientConnectorError, _Unauthorised):
                if attempt == 2:
                    raise ServiceError(
                        "The store service cannot be reached; run the command again (it is "
                        "restarted on demand) or see `rag service status`."
                    ) from None
            except _Lost:
                if attempt == 2 or not safe:
                    raise ServiceError(
                        "The store service stopped while handling the request; what it had "
                        "committed is kept. Run the command again."
                    ) from None
            await self._reconnect()

    async def _post(self, name: str, body: dict[str, Any], progress: Progress | None) -> Any:
        headers = {protocol.TOKEN_HEADER: f"Bearer {self._info.get('token', '')}"}
        answered = False  # the service sends its headers before it starts any work
        try:
            async with self._get_session().post(self._url(name), json=body, headers=headers) as r:
                answered = True
                if r.status == 401:
                    raise _Unauthorised
                if r.status == protocol.STOPPING_STATUS:
                    raise _NotStarted
                if r.status != 200:
                    raise ServiceError(f"The store service refused the request (HTTP {r.status}).")
                while raw := await r.content.readline(max_line_length=MAX_REPLY_LINE):
                    if not raw.strip():
                        continue
                    message = json.loads(raw)
                    if "heartbeat" in message:
                        continue
                    if "waiting" in message:
                        if (notice := NOTICE.get()) is not None:
                            _tell(notice, WriteWait.from_dict(message["waiting"]))
                        continue
                    if "progress" in message:
                        if progress is not None:
                            done, total = message["progress"]
                            _tell(progress, int(done), int(total))
                    elif "result" in message:
                        return message["result"]
                    elif "error" in message:
                        raise protocol.error_from(message["error"])
        except (aiohttp.ClientConnectorError, RAGError, _Unauthorised, _NotStarted):
            raise
        except LineTooLong:
            raise ServiceError(
                f"The store service's answer is larger than {MAX_REPLY_LINE >> 20} MiB and "
                "was not read; what the request did stands."
            ) from None
        except TimeoutError:
            raise ServiceError(
                "The store service stopped answering; see `rag service status` and its log "
                "(.rag-service.log in the store folder)."
            ) from None
        except (aiohttp.ClientError, ConnectionError, ValueError) as err:
            if not answered:  # closed before its headers: nothing was started
                raise _NotStarted from err
            raise _Lost from err
        raise _Lost

    # ------------------------------------------------------------- the API
    async def open(self) -> StoreClient:
        return self

    async def retrieve(
        self,
        query: str,
        n_results: int | None = None,
        mode: str | None = None,
        *,
        source: str | None = None,
    ) -> RetrievalResult:
        body = {
            "query": query,
            "n_results": n_results,
            "mode": mode,
            "options": protocol.retrieval_options(self.settings),
            "source": local_uri(source) if source else source,
        }
        return RetrievalResult.from_dict(await self._call("search", body, safe=True))

    async def ingest_page(self, url: str, *, prune: bool = False) -> IngestResult:
        body = {"url": url, "prune": prune, "stop_if_gone": self.stop_work_if_gone}
        data = await self._call("add", body, safe=False)
        return IngestResult.from_dict(data)

    async def ingest_from_index(
        self,
        url: str,
        pattern: str = "",
        progress: Progress | None = None,
        *,
        prune: bool = False,
        options: CrawlOptions | None = None,
    ) -> CrawlSummary:
        body = self._crawl_body(url, pattern, prune, options)
        return CrawlSummary.from_dict(await self._call("crawl", body, progress, safe=False))

    @staticmethod
    def _crawl_body(
        url: str, pattern: str, prune: bool, options: CrawlOptions | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"url": url, "pattern": pattern, "prune": prune}
        if options is not None:
            body.update(
                max_depth=options.max_depth,
                max_pages=options.max_pages,
                exclude=options.exclude,
                sitemap=options.sitemap,
                prune=prune or options.prune,
            )
        return body

    async def start_crawl(
        self, url: str, pattern: str = "", *, options: CrawlOptions | None = None
    ) -> dict[str, Any]:
        """Start a crawl job in the store's owner and return the job at once."""
        body = {**self._crawl_body(url, pattern, False, options), "background": True}
        return dict((await self._call("crawl", body, safe=False))["job"])

    async def refresh(self, progress: Progress | None = None) -> RefreshSummary:
        return RefreshSummary.from_dict(await self._call("refresh", {}, progress, safe=False))

    async def start_refresh(self) -> dict[str, Any]:
        """Start a refresh job and return the job at once."""
        return dict((await self._call("refresh", {"background": True}, safe=False))["job"])

    async def jobs(self) -> list[dict[str, Any]]:
        """Running and recent jobs of the store's owner, running ones first."""
        return list((await self._call("jobs", {}, safe=True))["jobs"])

    async def cancel_job(self, job_id: str, *, interrupted: bool = False) -> dict[str, Any]:
        """Cancel a job; returns it once it has stopped (or after 2 s). `interrupted`: this
        client started it and was interrupted (Ctrl-C), not a user's cancel."""
        body = {"id": job_id, "interrupted": interrupted}
        return dict((await self._call("job_cancel", body, safe=True))["job"])

    async def wait_job(self, job_id: str, progress: Progress | None = None) -> dict[str, Any]:
        """Wait for a job to end, passing on its progress."""
        data = await self._call("job_wait", {"id": job_id}, progress, safe=True)
        return dict(data["job"])

    async def index_dir(
        self, path: str | Path, progress: Progress | None = None
    ) -> DirIndexSummary:
        folder = str(Path(path).expanduser().resolve())
        body = {"directory": folder, "stop_if_gone": self.stop_work_if_gone}
        data = await self._call("index", body, progress, safe=False)
        return DirIndexSummary.from_dict(data)

    async def delete_source(self, source: str, *, folder: bool = False) -> int:
        body = {"source": source_key(source.strip()), "folder": folder}
        return int((await self._call("delete", body, safe=False))["deleted"])

    async def read_source(
        self,
        source: str,
        *,
        section: str = "",
        offset: int = 0,
        max_chars: int | None = None,
    ) -> ReadResult:
        body = {
            "source": source_key(source.strip()),
            "section": section,
            "offset": offset,
            "max_chars": max_chars or self.settings.rag_read_chars,
        }
        return ReadResult.from_dict(await self._call("read", body, safe=True))

    async def stats(self, offset: int = 0, limit: int | None = None) -> KBStats:
        body = {"offset": offset, "limit": limit}
        return KBStats.from_dict(await self._call("stats", body, safe=True))

    async def check(self, repair: bool = False) -> CheckReport:
        return CheckReport.from_dict(await self._call("check", {"repair": repair}, safe=not repair))

    async def reindex(self, progress: Progress | None = None) -> int:
        return int((await self._call("reindex", {}, progress, safe=False))["count"])


class _Unauthorised(Exception):
    """The token is not the owner's any more (a new owner took over)."""
