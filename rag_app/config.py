"""RAGSettings: every setting in one place, read from env > `.env` > defaults.

Invalid values fail at start-up with one sentence naming the variable
(`SettingsError`), never a pydantic traceback.
"""

from __future__ import annotations

import os
import re
import stat
from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rag_app.limits import MAX_CHUNKS_PER_SOURCE_DEFAULT, MAX_CRAWL_DELAY_SEC

EmbeddingProvider = Literal["builtin", "local", "online"]
BUILTIN_MODEL_NAME = "multilingual-e5-small"
DEFAULT_LMSTUDIO_BASE_URL = "http://localhost:1234/v1"
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,198}[A-Za-z0-9]")


class SettingsError(ValueError):
    """A setting is invalid; the message is one sentence naming the variable."""


class RAGSettings(BaseSettings):
    """All knobs of the knowledge base; names follow the environment variables."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        allow_inf_nan=False,
    )

    # Embedding
    embedding_provider: EmbeddingProvider = "builtin"
    embedding_model_local: str = "nomic-embed-text"
    embedding_model_online: str = "text-embedding-3-small"
    embedding_prefix_enabled: bool = True
    embedding_batch_size: int = Field(100, ge=1, le=100)
    embedding_timeout_sec: float = Field(60.0, gt=0, le=3600)
    embedding_max_retries: int = Field(3, ge=0, le=10)
    rag_ingest_nice: int = Field(0, ge=0, le=19)
    lmstudio_base_url: str = DEFAULT_LMSTUDIO_BASE_URL
    openai_api_key: str = ""
    openai_base_url: str | None = None

    # Storage
    chromadb_persist_dir: str = "./chroma_db"
    bm25_persist_dir: str = "./bm25_index"
    chroma_host: str | None = None
    chroma_port: int = Field(8000, ge=1, le=65535)
    rag_collection_name: str = "knowledge"

    # Chunking
    rag_chunk_size: int = Field(200, ge=20, le=8000)
    rag_chunk_overlap: int = Field(30, ge=0, le=7999)
    rag_parse_timeout_sec: float = Field(30.0, gt=0, le=3600)
    rag_max_chunks_per_source: int = Field(MAX_CHUNKS_PER_SOURCE_DEFAULT, ge=1, le=1_000_000)
    rag_code_block_chars: int = Field(1200, ge=100, le=8000)
    rag_embed_context: bool = True

    # Documents (PDF, Word .docx): what reading one may cost
    rag_max_pdf_pages: int = Field(1000, ge=1, le=100_000)
    rag_max_document_chars: int = Field(2_000_000, ge=1000, le=100_000_000)
    rag_max_docx_unzipped_bytes: int = Field(100 * 1024 * 1024, ge=1024 * 1024, le=4 * 1024**3)

    # Retrieval
    rag_retrieval_count: int = Field(3, ge=1, le=100)
    rag_similarity_threshold: float | None = Field(None, ge=0.0, le=2.0)
    rag_hybrid_search_enabled: bool = True
    rag_vector_weight: float = Field(0.50, ge=0.0, le=1.0)
    rag_bm25_k1: float = Field(0.5, ge=0.0, le=100.0)
    rag_bm25_b: float = Field(0.50, ge=0.0, le=1.0)
    rag_bm25_gram_weight: float = Field(0.5, ge=0.0, le=10.0)
    rag_bm25_bound_weight: float = Field(1.0, ge=0.0, le=10.0)
    rag_bm25_context_weight: float = Field(1.0, ge=0.0, le=10.0)
    rag_bm25_key_weight: float = Field(2.0, ge=0.0, le=10.0)
    rag_hnsw_ef_search: int = Field(400, ge=10, le=10000)
    rag_exact_search_max_chunks: int = Field(20_000, ge=0, le=1_000_000)
    rag_rows_in_memory_max_chunks: int = Field(100_000, ge=0, le=1_000_000)
    rag_fusion_normalization: Literal["min-max", "z-score", "dbsf"] = "min-max"
    rag_passage_chars: int = Field(1200, ge=0, le=100_000)
    rag_answer_chars: int = Field(3000, ge=100, le=1_000_000)
    rag_read_chars: int = Field(4000, ge=100, le=50_000)
    rag_min_combined_score: float | None = Field(None, ge=0.0, le=1.0)
    rag_no_match_cutoff: float | None = Field(-0.7, ge=-10.0, le=10.0)

    # Crawling
    rag_max_crawl_pages: int = Field(50, ge=1, le=10000)
    rag_crawl_delay_sec: float = Field(1.0, ge=0.0, le=MAX_CRAWL_DELAY_SEC)
    rag_crawl_timeout_sec: float = Field(30.0, gt=0, le=3600)
    rag_crawl_concurrency: int = Field(4, ge=1, le=64)
    rag_max_page_bytes: int = Field(5 * 1024 * 1024, ge=1024, le=1024**3)
    rag_follow_redirects: bool = False
    rag_allow_private_network: bool = False
    rag_user_agent: str = "RagKnowledgeBot/0.1"
    rag_respect_robots_txt: bool = True
    rag_robots_txt_cache_ttl: int = Field(3600, ge=0, le=30 * 24 * 3600)

    # URL safety (Google Safe Browsing Lookup API v4)
    rag_url_safety_check: bool = False
    google_safe_browsing_api_key: str = ""
    rag_url_safety_cache_ttl: int = Field(300, ge=0, le=30 * 24 * 3600)
    rag_url_safety_fail_open: bool = True
    rag_url_safety_timeout: float = Field(5.0, gt=0, le=600)
    rag_url_safety_api_url: str = "https://safebrowsing.googleapis.com/v4/threatMatches:find"

    # Store service (one owner process per store; see docs/architecture.md)
    rag_service_idle_sec: float = Field(900.0, ge=0, le=7 * 24 * 3600)
    rag_service_start_timeout_sec: float = Field(120.0, gt=0, le=3600)
    rag_store_stall_sec: float = Field(120.0, ge=5, le=3600)
    rag_reindex_grace_sec: float = Field(30.0, ge=0, le=600)
    rag_chroma_timeout_sec: float = Field(120.0, gt=0, le=3600)

    # rag-mcp over streamable HTTP: bearer token (required off loopback), extra Host names
    rag_mcp_token: str = ""
    rag_mcp_allowed_hosts: str = ""

    # Diagnostics
    rag_debug_log_enabled: bool = False

    @field_validator(
        "rag_similarity_threshold", "rag_min_combined_score", "rag_no_match_cutoff",
        "chroma_host", "openai_base_url",
        mode="before",
    )  # fmt: skip
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`NAME=` (as env.example documents for optional settings) means "not set"."""
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("openai_base_url", "lmstudio_base_url", "rag_url_safety_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        """An endpoint the embedding or Safe Browsing client calls: said at start, not
        as the HTTP library's words at the first call."""
        if value is None:
            return value
        try:
            parts = urlsplit(value)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
        except ValueError:
            ok = False
        if not ok:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value

    @field_validator("rag_user_agent")
    @classmethod
    def _header_value(cls, value: str) -> str:
        """Sent as an HTTP header with every request: a control character (a pasted
        line end) made every fetch fail."""
        if (
            not value.strip()
            or len(value) > 256
            or any(ord(c) < 32 or ord(c) == 127 for c in value)
        ):
            raise ValueError("must be one line of 1-256 printable characters")
        return value

    @field_validator("bm25_persist_dir")
    @classmethod
    def _a_folder(cls, value: str) -> str:
        """An empty BM25 folder kept the index in memory only."""
        if not value.strip():
            raise ValueError("must name a folder (empty keeps nothing where the next start looks)")
        return value

    @field_validator("rag_collection_name")
    @classmethod
    def _collection_name(cls, value: str) -> str:
        if (
            not _COLLECTION_NAME.fullmatch(value)
            or ".." in value
            or re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", value)
        ):  # Chroma's own rule for collection names
            raise ValueError(
                "use 3-200 letters, digits, '.', '_' or '-', starting and ending with a "
                "letter or digit, with no '..', and not an IPv4 address"
            )
        return value

    @model_validator(mode="after")
    def _check_combinations(self) -> RAGSettings:
        if not self.chromadb_persist_dir.strip() and not self.chroma_host:
            raise ValueError(
                "CHROMADB_PERSIST_DIR is empty; name the folder of the embedded store (or set "
                "CHROMA_HOST to use a Chroma server)"
            )
        if self.rag_chunk_overlap >= self.rag_chunk_size:
            raise ValueError(
                f"RAG_CHUNK_OVERLAP ({self.rag_chunk_overlap}) must be smaller than "
                f"RAG_CHUNK_SIZE ({self.rag_chunk_size})"
            )
        if self.embedding_provider == "online" and not self.openai_api_key:
            raise ValueError(
                "EMBEDDING_PROVIDER=online needs OPENAI_API_KEY; set it or use "
                "EMBEDDING_PROVIDER=builtin"
            )
        if self.rag_url_safety_check and not self.google_safe_browsing_api_key:
            raise ValueError(
                "RAG_URL_SAFETY_CHECK=true needs GOOGLE_SAFE_BROWSING_API_KEY; set it or "
                "turn the check off"
            )
        return self

    @property
    def embedding_model_name(self) -> str:
        """The model the collection is built with (recorded in its metadata)."""
        if self.embedding_provider == "builtin":
            return BUILTIN_MODEL_NAME
        if self.embedding_provider == "local":
            return self.embedding_model_local
        return self.embedding_model_online


# Settings a client sends with each search: they shape one query, not the store, so a
# running store service answers with the asking process's values.
RETRIEVAL_SETTINGS: tuple[str, ...] = (
    "rag_retrieval_count",
    "rag_similarity_threshold",
    "rag_hybrid_search_enabled",
    "rag_vector_weight",
    "rag_bm25_k1",
    "rag_bm25_b",
    "rag_bm25_gram_weight",
    "rag_bm25_bound_weight",
    "rag_bm25_context_weight",
    "rag_bm25_key_weight",
    "rag_fusion_normalization",
    "rag_min_combined_score",
    "rag_passage_chars",
    "rag_answer_chars",
    "rag_no_match_cutoff",
    "rag_debug_log_enabled",
)


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "__root__"]
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if not loc:
        return f"Invalid setting: {msg}."
    name = loc[0].upper()
    value = first.get("input")
    return f"Invalid setting {name}={value!r}: {msg}."


def _check_env_file(path: Path) -> None:
    """A `.env` that is a named pipe or a device would be read forever (a folder is
    passed over by the reader, as a missing file is)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if path.resolve() == Path(os.devnull):
        return  # a .env blanked out by a link to /dev/null reads empty
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise SettingsError(
            f"The settings file {path} is not a regular file; remove or replace it."
        )


def load_settings(**overrides: object) -> RAGSettings:
    """Build settings or raise `SettingsError` with one clear sentence."""
    _check_env_file(Path(".env"))
    try:
        return RAGSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as err:
        raise SettingsError(_one_line(err)) from None
    except UnicodeDecodeError as err:  # python-dotenv reads .env as UTF-8
        raise SettingsError(
            f"The settings file .env is not UTF-8 text (byte 0x{err.object[err.start]:02x} at "
            f"offset {err.start}); save it as UTF-8."
        ) from None
    except OSError as err:  # .env is a folder, unreadable, ...
        raise SettingsError(
            f"The settings file .env cannot be read ({err.strerror or err}); fix or remove it."
        ) from None


def with_options(settings: RAGSettings, options: dict[str, object]) -> RAGSettings:
    """`settings` with a client's retrieval settings (`RETRIEVAL_SETTINGS`) on top,
    validated like the settings themselves (`SettingsError` with one sentence): a search
    option is as untrusted as any other input."""
    update = {k: v for k, v in options.items() if k in RETRIEVAL_SETTINGS}
    if not update:
        return settings
    try:
        return RAGSettings.model_validate({**settings.model_dump(), **update})
    except ValidationError as err:
        raise SettingsError(_one_line(err)) from None


@lru_cache(maxsize=1)
def get_settings() -> RAGSettings:
    """Process-wide settings (cached)."""
    return load_settings()
