"""Evaluation dataset loaders: the spec's JSON files, the JSONL pair, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.data import DOCUMENTS as DOCUMENTS_NAME
from eval.data import QUESTIONS, data_path
from eval.datasets import (
    JSQUAD_DIR_ENV,
    DatasetError,
    EvalDocument,
    EvalQuery,
    find_jsquad_dir,
    load_jsquad,
    load_spec_dataset,
    load_spec_documents,
    unknown_sources,
)
from rag_app.errors import RAGError

DATASET = data_path(QUESTIONS)
DOCUMENTS = data_path(DOCUMENTS_NAME)
STATS_PAGE = "https://example.com/docs/game/monster-stats"


# --- the shipped fixtures ---------------------------------------------------------------


def test_fixture_documents_load() -> None:
    documents = load_spec_documents(DOCUMENTS)
    assert 10 <= len(documents) <= 15
    assert all(d.source.startswith("https://example.com/docs/") for d in documents)
    assert all(d.title and d.text for d in documents)
    by_source = {d.source: d for d in documents}
    stats = by_source[STATS_PAGE].text
    assert "| りゅうおう | 90 | 75 |" in stats
    assert "| スライム |" in stats
    assert "async def" in by_source["https://example.com/docs/python/async-await"].text
    english = [d for d in documents if d.text.isascii()]
    assert len(english) >= 2


def test_fixture_dataset_loads_and_matches_the_documents() -> None:
    queries = load_spec_dataset(DATASET)
    documents = load_spec_documents(DOCUMENTS)
    assert 18 <= len(queries) <= 25
    assert unknown_sources(queries, documents) == []
    categories = {q.category for q in queries}
    assert {"table", "exact", "semantic", "no_answer", "cross_lingual"} <= categories
    no_answer = [q for q in queries if not q.expected_sources]
    assert [q.category for q in no_answer] == ["no_answer"]
    first = queries[0]
    assert first == EvalQuery(
        id="q01",
        query="りゅうおう",
        expected_sources=[STATS_PAGE],
        expected_keywords=["りゅうおう", "HP", "MP"],
        category="table",
        notes="AC69: a name that appears only in one table row.",
    )
    assert any(q.negative_sources for q in queries)
    assert any(len(q.expected_sources) > 1 for q in queries)


def test_every_document_is_expected_by_some_query() -> None:
    expected = {s for q in load_spec_dataset(DATASET) for s in q.expected_sources}
    assert {d.source for d in load_spec_documents(DOCUMENTS)} == expected


def test_unknown_sources_lists_each_missing_source_once() -> None:
    queries = [
        EvalQuery("a", "q", ["s1", "gone"], negative_sources=["gone", "also-gone"]),
        EvalQuery("b", "q", ["gone"]),
    ]
    documents = [EvalDocument("s1", "t", "x")]
    assert unknown_sources(queries, documents) == ["gone", "also-gone"]


# --- bad spec files ---------------------------------------------------------------------


def _write(tmp_path: Path, content: object, name: str = "dataset.json") -> Path:
    path = tmp_path / name
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    path.write_text(text, encoding="utf-8")
    return path


def _query(**fields: object) -> dict[str, object]:
    return {"id": "q1", "query": "りゅうおう", "expected_sources": ["s"], **fields}


def _assert_clear_error(err: pytest.ExceptionInfo[DatasetError], path: Path, *words: str) -> None:
    message = str(err.value)
    assert isinstance(err.value, RAGError)
    assert str(path) in message
    assert "\n" not in message and "Traceback" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", ["not valid JSON", "line 1"]),
        ("", ["not valid JSON"]),
        ([_query()], ['"queries" list']),
        ({"cases": []}, ['"queries" list']),
        ({"queries": {"id": "q1"}}, ["must be a list"]),
        ({"queries": []}, ["is empty"]),
        ({"queries": ["q1"]}, ["query #1", "not a JSON object"]),
        ({"queries": [_query(), {"id": "q2", "query": "x"}]}, ["query #2", "expected_sources"]),
        ({"queries": [_query(expected_sources="s")]}, ["expected_sources", "list"]),
        ({"queries": [_query(expected_sources=["s", 3])]}, ["expected_sources"]),
        ({"queries": [_query(query="  ")]}, ['"query" field', "non-empty string"]),
        ({"queries": [_query(id=7)]}, ['"id" field']),
        ({"queries": [_query(category=3)]}, ['"category" field']),
        ({"queries": [_query(negative_sources=[None])]}, ["negative_sources"]),
        ({"queries": [_query(), _query()]}, ["'q1' appears twice"]),
    ],
)
def test_bad_dataset_files_raise_dataset_error(
    tmp_path: Path, content: object, words: list[str]
) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(DatasetError) as err:
        load_spec_dataset(path)
    _assert_clear_error(err, path, *words)


def test_missing_dataset_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(DatasetError) as err:
        load_spec_dataset(path)
    _assert_clear_error(err, path, "does not exist")


def test_dataset_path_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        load_spec_dataset(tmp_path)
    _assert_clear_error(err, tmp_path, "directory")


def test_non_utf8_dataset_file(tmp_path: Path) -> None:
    path = tmp_path / "sjis.json"
    path.write_bytes('{"queries": [{"id": "りゅうおう"}]}'.encode("shift_jis"))
    with pytest.raises(DatasetError) as err:
        load_spec_dataset(path)
    _assert_clear_error(err, path, "UTF-8")


def test_query_with_empty_expected_sources_is_allowed(tmp_path: Path) -> None:
    path = _write(tmp_path, {"queries": [_query(expected_sources=[], notes="none")]})
    (query,) = load_spec_dataset(path)
    assert query.expected_sources == []
    assert query.notes == "none"
    assert query.category is None


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ({"queries": []}, ['"documents" list']),
        ({"documents": []}, ["is empty"]),
        ({"documents": [{"source": "s", "title": "t"}]}, ["document #1", '"text" field']),
        ({"documents": [{"title": "t", "text": "x"}]}, ['"source" field']),
        ({"documents": [{"source": "s", "text": "x"}] * 2}, ["'s' appears twice"]),
    ],
)
def test_bad_document_files_raise_dataset_error(
    tmp_path: Path, content: object, words: list[str]
) -> None:
    path = _write(tmp_path, content, "docs.json")
    with pytest.raises(DatasetError) as err:
        load_spec_documents(path)
    _assert_clear_error(err, path, *words)


def test_document_title_is_optional(tmp_path: Path) -> None:
    path = _write(tmp_path, {"documents": [{"source": "s", "text": "本文"}]}, "docs.json")
    assert load_spec_documents(path) == [EvalDocument("s", "", "本文")]


# --- the JSONL pair ---------------------------------------------------------------------


def _jsonl(path: Path, rows: list[object]) -> None:
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _jsonl_dataset(tmp_path: Path, queries: int = 10) -> Path:
    _jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"id": "梅雨#0", "title": "梅雨", "text": "梅雨は東アジアの雨季である。"},
            {"id": "梅雨#1", "title": "梅雨", "text": "梅雨入りは春の終わりである。"},
        ],
    )
    _jsonl(
        tmp_path / "queries.jsonl",
        [
            {"id": f"q{i}", "query": f"質問{i}", "relevant": [f"梅雨#{i % 2}"], "answers": ["a"]}
            for i in range(queries)
        ],
    )
    return tmp_path


def test_load_jsquad_pair(tmp_path: Path) -> None:
    _jsonl_dataset(tmp_path, queries=3)
    documents, queries = load_jsquad(tmp_path)
    assert documents[0] == EvalDocument("梅雨#0", "梅雨", "梅雨は東アジアの雨季である。")
    assert [q.id for q in queries] == ["q0", "q1", "q2"]
    assert queries[1].expected_sources == ["梅雨#1"]
    assert queries[1].expected_keywords == ["a"]


def test_load_jsquad_limit_spreads_evenly(tmp_path: Path) -> None:
    _jsonl_dataset(tmp_path, queries=10)
    documents, queries = load_jsquad(tmp_path, limit=4)
    assert len(documents) == 2
    assert [q.id for q in queries] == ["q0", "q2", "q5", "q7"]
    _, every = load_jsquad(tmp_path, limit=50)
    assert len(every) == 10


def test_load_jsquad_answers_are_deduplicated(tmp_path: Path) -> None:
    _jsonl_dataset(tmp_path)
    row = {"id": "x", "query": "q", "relevant": ["梅雨#0"], "answers": ["雨季", "雨季", "梅雨"]}
    _jsonl(tmp_path / "queries.jsonl", [row])
    _, (query,) = load_jsquad(tmp_path)
    assert query.expected_keywords == ["雨季", "梅雨"]


def test_load_jsquad_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DatasetError) as err:
        load_jsquad(missing)
    _assert_clear_error(err, missing, "corpus.jsonl")


def test_load_jsquad_bad_limit(tmp_path: Path) -> None:
    _jsonl_dataset(tmp_path)
    with pytest.raises(DatasetError, match="at least 1"):
        load_jsquad(tmp_path, limit=0)


@pytest.mark.parametrize(
    ("name", "rows", "words"),
    [
        ("queries.jsonl", None, ["does not exist"]),
        ("queries.jsonl", [], ["is empty"]),
        ("queries.jsonl", ["{broken"], ["Line 1", "not valid JSON"]),
        ("queries.jsonl", ["[1, 2]"], ["Line 1", "not a JSON object"]),
        ("queries.jsonl", [{"id": "a", "query": "q", "relevant": []}], ['"relevant" list']),
        ("queries.jsonl", [{"id": "a", "query": "q"}], ["line 1", '"relevant"']),
        ("corpus.jsonl", [{"id": "p", "title": "t"}], ["line 1", '"text" field']),
        ("corpus.jsonl", [{"id": "p", "text": "x"}, {"id": "p", "text": "y"}], ["twice"]),
    ],
)
def test_bad_jsonl_files_raise_dataset_error(
    tmp_path: Path, name: str, rows: list[object] | None, words: list[str]
) -> None:
    _jsonl_dataset(tmp_path)
    path = tmp_path / name
    if rows is None:
        path.unlink()
    else:
        _jsonl(path, rows)
    with pytest.raises(DatasetError) as err:
        load_jsquad(tmp_path)
    _assert_clear_error(err, path, *words)


def test_find_jsquad_dir_prefers_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _jsonl_dataset(tmp_path)
    monkeypatch.setenv(JSQUAD_DIR_ENV, str(tmp_path))
    assert find_jsquad_dir() == tmp_path


def test_find_jsquad_dir_ignores_an_environment_path_without_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JSQUAD_DIR_ENV, str(tmp_path))
    found = find_jsquad_dir()
    assert found != tmp_path
    assert found is None or (found / "corpus.jsonl").is_file()


# --- the real JSQuAD conversion, when it is beside the repository -----------------------


@pytest.fixture(scope="module")
def jsquad_dir() -> Path:
    found = find_jsquad_dir()
    if found is None:
        pytest.skip(f"no JSQuAD data: set {JSQUAD_DIR_ENV} to the jsquad-valid folder")
    return found


def test_real_jsquad_loads(jsquad_dir: Path) -> None:
    documents, queries = load_jsquad(jsquad_dir)
    assert len(documents) == 1145
    assert len(queries) == 4442
    assert unknown_sources(queries, documents) == []
    assert all("#" in d.source for d in documents)


def test_real_jsquad_limit(jsquad_dir: Path) -> None:
    documents, queries = load_jsquad(jsquad_dir, limit=50)
    assert len(documents) == 1145
    assert len(queries) == 50
    assert len({q.expected_sources[0].split("#")[0] for q in queries}) > 10
