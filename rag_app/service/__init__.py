"""The store service: one owner process per store, every other process its client.

`connect(settings)` finds the running owner of the configured store (or starts one)
and returns a `StoreClient` with the KnowledgeBase's methods. See
docs/architecture.md for the processes and who owns what.
"""

from rag_app.service.client import StoreClient
from rag_app.service.launcher import connect, service_status, stop_service

__all__ = ["StoreClient", "connect", "service_status", "stop_service"]
