"""Settings: precedence and one-line errors naming the variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rag_app.config import SettingsError, load_settings


def test_defaults() -> None:
    s = load_settings()
    assert s.embedding_provider == "builtin"
    assert (s.rag_chunk_size, s.rag_chunk_overlap, s.rag_retrieval_count) == (200, 30, 3)
    assert s.rag_allow_private_network is False


def test_env_beats_dotenv_beats_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("RAG_CHUNK_SIZE=300\nRAG_RETRIEVAL_COUNT=7\n")
    monkeypatch.setenv("RAG_CHUNK_SIZE", "400")
    s = load_settings()
    assert s.rag_chunk_size == 400
    assert s.rag_retrieval_count == 7


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"RAG_CHUNK_OVERLAP": "200"}, "RAG_CHUNK_OVERLAP"),
        ({"RAG_VECTOR_WEIGHT": "1.5"}, "RAG_VECTOR_WEIGHT"),
        ({"RAG_VECTOR_WEIGHT": "-0.1"}, "RAG_VECTOR_WEIGHT"),
        ({"RAG_SIMILARITY_THRESHOLD": "2.5"}, "RAG_SIMILARITY_THRESHOLD"),
        ({"EMBEDDING_PROVIDER": "magic"}, "EMBEDDING_PROVIDER"),
        ({"EMBEDDING_PROVIDER": "online"}, "OPENAI_API_KEY"),
        ({"RAG_CHUNK_SIZE": "abc"}, "RAG_CHUNK_SIZE"),
        ({"CHROMADB_PERSIST_DIR": ""}, "CHROMADB_PERSIST_DIR"),  # Chroma wrote to /
        ({"RAG_USER_AGENT": "Bot/1\r\n"}, "RAG_USER_AGENT"),  # every fetch failed
        ({"RAG_COLLECTION_NAME": "a..b"}, "RAG_COLLECTION_NAME"),  # Chroma refused it later
        ({"RAG_COLLECTION_NAME": "127.0.0.1"}, "RAG_COLLECTION_NAME"),
        ({"OPENAI_BASE_URL": "::::"}, "OPENAI_BASE_URL"),
        ({"LMSTUDIO_BASE_URL": "localhost:1234/v1"}, "LMSTUDIO_BASE_URL"),
        ({"BM25_PERSIST_DIR": " "}, "BM25_PERSIST_DIR"),  # kept in memory only
        ({"RAG_REINDEX_GRACE_SEC": "-1"}, "RAG_REINDEX_GRACE_SEC"),
    ],
)
def test_invalid_values_fail_with_one_sentence(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], name: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert name in message and "\n" not in message


def test_env_example_lists_every_setting() -> None:
    import re

    from rag_app.config import RAGSettings
    from rag_app.data import ENV_EXAMPLE, data_path
    from slack_router.settings import SlackSettings

    example = data_path(ENV_EXAMPLE).read_text()
    listed = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", example, flags=re.MULTILINE))
    fields = {*RAGSettings.model_fields, *SlackSettings.model_fields}
    assert listed == {name.upper() for name in fields}


def test_a_settings_file_that_is_not_utf8_is_one_sentence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_bytes("RAG_USER_AGENT=Bot-caf\u00e9\n".encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert ".env" in message and "UTF-8" in message and "\n" not in message


def test_a_settings_file_that_is_a_named_pipe_is_one_sentence_not_a_hang(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    os.mkfifo(tmp_path / ".env")  # reading it would wait for a writer for good
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert ".env" in str(info.value) and "regular file" in str(info.value)


def test_values_that_worked_before_still_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A .env blanked out by a link to /dev/null; no Chroma folder with a Chroma server."""
    (tmp_path / ".env").symlink_to(os.devnull)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHROMA_HOST", "127.0.0.1")
    monkeypatch.setenv("CHROMADB_PERSIST_DIR", "")
    assert load_settings().chroma_host == "127.0.0.1"
