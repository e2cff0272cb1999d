"""The server's typed lifespan context: one KnowledgeBase shared by every tool call.

The lifespan only starts opening the KnowledgeBase (in the background) and returns at
once, so `initialize` is answered while Chroma, LlamaIndex and the model load.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from mcp_server.loader import KnowledgeBaseFactory, KnowledgeBaseLoader, open_knowledge_base
from rag_app.config import RAGSettings

if TYPE_CHECKING:
    from rag_app.knowledge import KnowledgeBase

DEFAULT_HEARTBEAT_SEC = 2.0


@dataclass
class AppContext:
    """What tools reach through `ctx.request_context.lifespan_context`."""

    settings: RAGSettings
    loader: KnowledgeBaseLoader
    heartbeat_sec: float = DEFAULT_HEARTBEAT_SEC

    async def knowledge_base(self) -> KnowledgeBase:
        """The shared KnowledgeBase, waiting for it to finish opening if needed."""
        return await self.loader.get()


Lifespan = Callable[[Any], AbstractAsyncContextManager[AppContext]]


def make_lifespan(
    settings: RAGSettings,
    factory: KnowledgeBaseFactory | None = None,
    *,
    heartbeat_sec: float = DEFAULT_HEARTBEAT_SEC,
) -> Lifespan:
    """A lifespan that owns one KnowledgeBase: opened in the background, closed at exit."""

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[AppContext]:
        loader = KnowledgeBaseLoader(factory or partial(open_knowledge_base, settings))
        loader.start()
        try:
            yield AppContext(settings=settings, loader=loader, heartbeat_sec=heartbeat_sec)
        finally:
            await loader.aclose()

    return lifespan
