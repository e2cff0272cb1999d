"""Evaluation datasets: queries with their expected sources, and the documents to index.

Two formats are read:

- the spec's JSON files: `{"queries": [{"id", "query", "expected_sources", ...}]}`
  (`eval/data/rag_evaluation_dataset.json`) and
  `{"documents": [{"source", "title", "text"}]}` (`eval/data/rag_test_documents.json`);
- a JSONL passage-retrieval pair such as the JSQuAD conversion: `corpus.jsonl`
  (`{"id", "title", "text"}`, the id is the source) and `queries.jsonl`
  (`{"id", "query", "relevant": [ids], "answers": [...]}`).

Every problem with a file is a `DatasetError` whose message names the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_app.errors import RAGError

JSQUAD_DIR_ENV = "RAG_EVAL_DATA_DIR"
"""Environment variable naming a JSONL dataset directory (used when no path is given)."""

_REPO_ROOT = Path(__file__).resolve().parent.parent
_SIBLING_JSQUAD_DIR = Path("..") / "shared" / "eval-data" / "jsquad-valid"


class DatasetError(RAGError):
    """An evaluation dataset or document file is missing, unreadable or malformed."""


@dataclass
class EvalQuery:
    """One evaluation query; no expected sources means nothing relevant exists."""

    id: str
    query: str
    expected_sources: list[str]
    negative_sources: list[str] = field(default_factory=list)
    expected_keywords: list[str] = field(default_factory=list)
    category: str | None = None
    notes: str | None = None


@dataclass
class EvalDocument:
    """One document to index for evaluation; `source` is what retrieval reports."""

    source: str
    title: str
    text: str


def load_spec_dataset(path: str | os.PathLike[str]) -> list[EvalQuery]:
    """Read the spec's evaluation dataset JSON (`{"queries": [...]}`)."""
    file = Path(path)
    items = _top_level_list(_read_json(file, "evaluation dataset"), "queries", file)
    queries = [_spec_query(item, index, file) for index, item in enumerate(items)]
    _require_unique([q.id for q in queries], "query id", file)
    return queries


def load_spec_documents(path: str | os.PathLike[str]) -> list[EvalDocument]:
    """Read the spec's test documents JSON (`{"documents": [...]}`)."""
    file = Path(path)
    items = _top_level_list(_read_json(file, "test documents file"), "documents", file)
    documents = [_spec_document(item, index, file) for index, item in enumerate(items)]
    _require_unique([d.source for d in documents], "document source", file)
    return documents


def load_jsquad(
    directory: str | os.PathLike[str], limit: int | None = None
) -> tuple[list[EvalDocument], list[EvalQuery]]:
    """Read `corpus.jsonl` and `queries.jsonl` from a directory: (documents, queries).

    All passages are returned, so retrieval always searches the whole corpus. `limit`
    keeps that many queries spread evenly over the file (not the first ones, which would
    all be about the first few articles); the choice is deterministic.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise DatasetError(
            f"Evaluation data directory {folder} does not exist; pass the folder that "
            "holds corpus.jsonl and queries.jsonl."
        )
    if limit is not None and limit < 1:
        raise DatasetError(f"The query limit for {folder} must be at least 1, got {limit}.")
    corpus_file = folder / "corpus.jsonl"
    documents = [
        EvalDocument(
            source=_field(row, "id", line, corpus_file),
            title=_optional(row, "title", line, corpus_file) or "",
            text=_field(row, "text", line, corpus_file),
        )
        for line, row in _read_jsonl(corpus_file)
    ]
    _require_unique([d.source for d in documents], "passage id", corpus_file)
    queries_file = folder / "queries.jsonl"
    queries = [_jsquad_query(row, line, queries_file) for line, row in _read_jsonl(queries_file)]
    _require_unique([q.id for q in queries], "query id", queries_file)
    if limit is not None and limit < len(queries):
        queries = [queries[i * len(queries) // limit] for i in range(limit)]
    return documents, queries


def find_jsquad_dir() -> Path | None:
    """Where the JSQuAD JSONL pair is, or None when it is nowhere to be found.

    Looks at `RAG_EVAL_DATA_DIR` first, then `../shared/eval-data/jsquad-valid` beside
    the repository (where the project keeps it); tests skip when this returns None.
    """
    configured = os.environ.get(JSQUAD_DIR_ENV)
    candidates = [Path(configured)] if configured else []
    candidates.append(_REPO_ROOT / _SIBLING_JSQUAD_DIR)
    for candidate in candidates:
        if (candidate / "corpus.jsonl").is_file() and (candidate / "queries.jsonl").is_file():
            return candidate
    return None


def unknown_sources(queries: list[EvalQuery], documents: list[EvalDocument]) -> list[str]:
    """Expected or negative sources that no document has (a dataset/documents mismatch)."""
    known = {d.source for d in documents}
    missing: dict[str, None] = {}
    for query in queries:
        for source in [*query.expected_sources, *query.negative_sources]:
            if source not in known:
                missing[source] = None
    return list(missing)


def _read_json(file: Path, what: str) -> Any:
    text = _read_text(file, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DatasetError(
            f"The {what} {file} is not valid JSON ({err.msg} at line {err.lineno}, "
            f"column {err.colno}); fix the file."
        ) from None


def _read_text(file: Path, what: str) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"The {what} {file} does not exist; check the path.") from None
    except IsADirectoryError:
        raise DatasetError(f"The {what} {file} is a directory, not a file.") from None
    except UnicodeDecodeError:
        raise DatasetError(f"The {what} {file} is not UTF-8 text; save it as UTF-8.") from None
    except OSError as err:
        raise DatasetError(f"The {what} {file} cannot be read ({err.strerror}).") from None


def _read_jsonl(file: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    rows = 0
    for line, raw in enumerate(_read_text(file, "dataset file").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as err:
            raise DatasetError(
                f"Line {line} of {file} is not valid JSON ({err.msg}); fix the file."
            ) from None
        if not isinstance(row, dict):
            raise DatasetError(f"Line {line} of {file} is not a JSON object; fix the file.")
        rows += 1
        yield line, row
    if rows == 0:
        raise DatasetError(f"The dataset file {file} is empty; it needs one JSON object a line.")


def _top_level_list(data: Any, key: str, file: Path) -> list[Any]:
    if not isinstance(data, dict) or key not in data:
        raise DatasetError(f'{file} must be a JSON object with a "{key}" list; fix the file.')
    items = data[key]
    if not isinstance(items, list):
        raise DatasetError(f'The "{key}" entry of {file} must be a list; fix the file.')
    if not items:
        raise DatasetError(f'The "{key}" list of {file} is empty; add at least one entry.')
    return items


def _spec_query(item: Any, index: int, file: Path) -> EvalQuery:
    where = f"query #{index + 1}"
    if not isinstance(item, dict):
        raise DatasetError(f"The {where} in {file} is not a JSON object; fix the file.")
    return EvalQuery(
        id=_field(item, "id", where, file),
        query=_field(item, "query", where, file),
        expected_sources=_str_list(item, "expected_sources", where, file, required=True),
        negative_sources=_str_list(item, "negative_sources", where, file),
        expected_keywords=_str_list(item, "expected_keywords", where, file),
        category=_optional(item, "category", where, file),
        notes=_optional(item, "notes", where, file),
    )


def _spec_document(item: Any, index: int, file: Path) -> EvalDocument:
    where = f"document #{index + 1}"
    if not isinstance(item, dict):
        raise DatasetError(f"The {where} in {file} is not a JSON object; fix the file.")
    return EvalDocument(
        source=_field(item, "source", where, file),
        title=_optional(item, "title", where, file) or "",
        text=_field(item, "text", where, file),
    )


def _jsquad_query(row: dict[str, Any], line: int, file: Path) -> EvalQuery:
    relevant = _str_list(row, "relevant", line, file, required=True)
    if not relevant:
        raise DatasetError(f'Line {line} of {file} has an empty "relevant" list; fix the file.')
    return EvalQuery(
        id=_field(row, "id", line, file),
        query=_field(row, "query", line, file),
        expected_sources=relevant,
        expected_keywords=list(dict.fromkeys(_str_list(row, "answers", line, file))),
    )


def _location(where: str | int, file: Path) -> str:
    return f"line {where} of {file}" if isinstance(where, int) else f"{where} in {file}"


def _field(item: dict[str, Any], key: str, where: str | int, file: Path) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(
            f'The "{key}" field of {_location(where, file)} must be a non-empty string; '
            "fix the file."
        )
    return value


def _optional(item: dict[str, Any], key: str, where: str | int, file: Path) -> str | None:
    value = item.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DatasetError(
            f'The "{key}" field of {_location(where, file)} must be a string; fix the file.'
        )
    return value or None


def _str_list(
    item: dict[str, Any], key: str, where: str | int, file: Path, *, required: bool = False
) -> list[str]:
    if key not in item and not required:
        return []
    value = item.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DatasetError(
            f'The "{key}" field of {_location(where, file)} must be a list of non-empty '
            "strings; fix the file."
        )
    return list(value)


def _require_unique(values: list[str], what: str, file: Path) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise DatasetError(f"The {what} {value!r} appears twice in {file}; make it unique.")
        seen.add(value)
