"""Connect to the store in the background so the server answers `initialize` at once.

The store is owned by one process (the store service, started on first use); every
`rag-mcp` is a light client of it, so any number of MCP clients share one model, one
index and every write. Starting the owner takes seconds; MCP clients expect the
handshake in well under that. The loader starts connecting as soon as the server starts
and every tool call awaits the same attempt. A failed attempt is reported to the call
that waited for it, and the next call tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rag_app.config import RAGSettings

if TYPE_CHECKING:
    from rag_app.knowledge import KnowledgeBase

logger = logging.getLogger("mcp_server.loader")

KnowledgeBaseFactory = Callable[[], Awaitable["KnowledgeBase"]]


async def open_knowledge_base(settings: RAGSettings) -> KnowledgeBase:
    """A client of the store's owner process (started if none runs)."""
    from rag_app.service import connect

    return await connect(settings)


class KnowledgeBaseLoader:
    """One shared, lazily opened KnowledgeBase; `get()` waits for it."""

    def __init__(self, factory: KnowledgeBaseFactory) -> None:
        self._factory = factory
        self._task: asyncio.Task[KnowledgeBase] | None = None
        self._kb: KnowledgeBase | None = None

    def start(self) -> None:
        """Begin opening in the background (idempotent while an attempt is running)."""
        if self._kb is None and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._factory(), name="open-knowledge-base")
            self._task.add_done_callback(self._log_outcome)

    @staticmethod
    def _log_outcome(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            logger.info("Knowledge base is open.")
        else:
            logger.warning("Knowledge base could not be opened: %s", exc)

    def _needs_attempt(self) -> bool:
        task = self._task
        return task is None or (task.done() and (task.cancelled() or task.exception() is not None))

    async def get(self) -> KnowledgeBase:
        """The open KnowledgeBase; raises what opening raised (the next call retries)."""
        if self._kb is not None:
            return self._kb
        if self._needs_attempt():
            if self._task is not None:
                logger.info("Retrying to open the knowledge base.")
            self._task = None
            self.start()
        task = self._task
        assert task is not None
        # shield: a client cancelling its request must not cancel the shared attempt.
        self._kb = await asyncio.shield(task)
        return self._kb

    async def aclose(self) -> None:
        """Stop an unfinished attempt and release the KnowledgeBase."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._kb is not None:
            await self._kb.aclose()
            self._kb = None
