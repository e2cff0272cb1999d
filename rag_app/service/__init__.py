"""The store service: one owner process per store, every other process its client.

`connect(settings)` finds the running owner of the configured store (or starts one)
and returns a `StoreClient` with the KnowledgeBase's methods. See
docs/architecture.md for the processes and who owns what.

`StoreClient` (and with it aiohttp) is imported on first use: a `rag` command that has
to start the service starts it first and imports its HTTP client while the service opens.
"""

from typing import TYPE_CHECKING, Any

from rag_app.service.launcher import connect, service_status, stop_service

if TYPE_CHECKING:
    from rag_app.service.client import StoreClient

__all__ = ["StoreClient", "connect", "service_status", "stop_service"]


def __getattr__(name: str) -> Any:
    if name == "StoreClient":
        from rag_app.service.client import StoreClient

        return StoreClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
