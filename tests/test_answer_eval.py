"""eval.answer_eval: scoring helpers, the question files, and (where the Debian HTML is
installed) that every answer really is in its page's extracted text.

No network, no embeddings: the runner itself is exercised by `python -m eval.answer_eval`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from eval.answer_eval import (
    KINDS,
    Question,
    Report,
    SetError,
    answer_found,
    distribution,
    kind_counts,
    load_pages,
    load_questions,
    load_set,
    normalize,
    page_matches,
    page_of_url,
    parse_question,
    relative_page,
    score_question,
    squash,
)

SETS = Path(__file__).resolve().parent.parent / "eval" / "sets"
DOC_SETS = ("docs-py", "docs-ja")
MIN_TOTAL, MIN_CODE, MIN_TABLE, MIN_NONE_PER_SITE = 70, 12, 8, 5
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


# --- normalisation and matching -----------------------------------------------------------
def test_normalize_nfkc_and_whitespace() -> None:
    assert normalize("  ＡＢＣ\u3000１２３\n\tx ") == "ABC 123 x"
    assert normalize("…") == "..."


def test_squash_removes_all_whitespace() -> None:
    assert squash("a b\n c\u3000ｄ") == "abcd"


def test_answer_found_ignores_wrapping_indentation_and_signature_spacing() -> None:
    text = "def f(a, L=[]):\nL.append(a)\nreturn L"
    assert answer_found("def f(a, L=[]):\n    L.append(a)", text)
    extracted = "json. dumps ( obj , * , skipkeys = False , ensure_ascii = True )"
    assert answer_found("json.dumps(obj, *, skipkeys=False", extracted)
    assert answer_found("長さが 最低 5 文字あり", "長さが\n最低 5 文字あり かつ")
    assert answer_found("001, 002, …, 366", "| 001, 002, ..., 366 |")  # NFKC on both sides


def test_answer_found_is_exact_otherwise() -> None:
    assert not answer_found("Path.resolve()", "Path.absolute()")
    assert not answer_found("postoffice", "PostOffice")  # case matters
    assert not answer_found("", "anything")
    assert not answer_found("   ", "anything")


def test_page_of_url_decodes() -> None:
    assert page_of_url("file:///tmp/x/library/my%20page.html") == "/tmp/x/library/my page.html"
    assert page_of_url("library/json.html") == "library/json.html"


def test_page_matches_whole_path_segments() -> None:
    url = "file:///tmp/rag-answers-1/pages/docs-py/library/json.html"
    assert page_matches(url, "library/json.html")
    assert page_matches(url, "json.html")
    assert not page_matches(url, "son.html")
    assert not page_matches(url, "library/json.htm")
    assert not page_matches(url, "")
    assert page_matches("http://127.0.0.1:8000/library/json.html", "library/json.html")
    assert page_matches("library/json.html", "library/json.html")


def test_relative_page_prefers_the_longest_listed_page() -> None:
    pages = ["index.html", "tutorial/index.html"]
    assert relative_page("file:///x/tutorial/index.html", pages) == "tutorial/index.html"
    assert relative_page("file:///x/index.html", pages) == "index.html"
    assert relative_page("file:///x/other.html", pages) == "file:///x/other.html"


# --- question parsing ---------------------------------------------------------------------
def test_parse_question_accepts_answerable_and_none() -> None:
    q = parse_question({"id": "a", "query": "q", "kind": "code", "page": "p.html", "answer": "x"})
    assert q == Question("a", "q", "code", "p.html", "x")
    n = parse_question({"id": "b", "query": "q", "kind": "none", "page": "", "answer": ""})
    assert n.kind == "none"


def test_an_answer_may_take_other_forms() -> None:
    # a table row as its chunk shows it, or as the page's pipe table does
    row = {"id": "t", "query": "q", "kind": "table", "page": "p"}
    q = parse_question(
        {
            **row,
            "answer": "JSON: number (real)\nPython: float",
            "also": ["| number (real) | float |"],
        }
    )
    assert q.found_in("| JSON | Python |\n| --- | --- |\n| number (real) | float |")
    assert q.found_in("JSON: number (real)\nPython: float\nJSON: true")
    assert not q.found_in("JSON: number (real)\nPython: int")
    alone = parse_question({**row, "answer": "JSON: number (real)\nPython: float"})
    assert not alone.found_in("| number (real) | float |")


@pytest.mark.parametrize(
    "row",
    [
        {"id": "a", "query": "q", "kind": "poem", "page": "p", "answer": "x"},
        {"id": "a", "query": "q", "kind": "none", "page": "p", "answer": ""},
        {"id": "a", "query": "q", "kind": "prose", "page": "", "answer": "x"},
        {"id": "a", "query": "q", "kind": "prose", "page": "p", "answer": " "},
        {"id": "a", "query": " ", "kind": "prose", "page": "p", "answer": "x"},
        {"id": "a", "query": "q", "kind": "prose", "page": "p"},
        {"id": "a", "query": "q", "kind": "prose", "page": "p", "answer": "x", "also": "y"},
        {"id": "a", "query": "q", "kind": "prose", "page": "p", "answer": "x", "also": [""]},
        {"id": "a", "query": "q", "kind": "none", "page": "", "answer": "", "also": ["y"]},
        ["not", "an", "object"],
    ],
)
def test_parse_question_rejects(row: object) -> None:
    with pytest.raises(ValueError):
        parse_question(row)


def test_load_questions_names_the_line(tmp_path: Path) -> None:
    file = tmp_path / "questions.jsonl"
    good = {"id": "a", "query": "q", "kind": "prose", "page": "p.html", "answer": "x"}
    file.write_text(json.dumps(good) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(SetError, match="line 2"):
        load_questions(file)
    file.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n", encoding="utf-8")
    with pytest.raises(SetError, match="used twice"):
        load_questions(file)
    file.write_text(json.dumps(good) + "\n", encoding="utf-8")
    with pytest.raises(SetError, match=r"not in pages\.txt"):
        load_questions(file, ["other.html"])


def test_load_pages_rejects_escapes(tmp_path: Path) -> None:
    file = tmp_path / "pages.txt"
    file.write_text("# comment\n\na.html\n../etc/passwd\n", encoding="utf-8")
    with pytest.raises(SetError, match="not a relative path"):
        load_pages(file)
    file.write_text("a.html\n\n# c\nb/c.html\n", encoding="utf-8")
    assert load_pages(file) == ["a.html", "b/c.html"]


# --- scoring ------------------------------------------------------------------------------
def _hit(url: str, text: str, combined: float, distance: float | None) -> SimpleNamespace:
    return SimpleNamespace(
        source_url=url,
        text=text,
        heading_path="H",
        chunk_index=0,
        combined_score=combined,
        vector_distance=distance,
        bm25_score=1.0,
    )


def test_score_question_and_report() -> None:
    pages = ["a.html", "b.html"]
    hits = [
        _hit("file:///s/b.html", "nothing", 1.0, 0.2),
        _hit("file:///s/a.html", "the x", 0.5, 0.3),
    ]
    question = Question("q1", "query?", "code", "a.html", "x")
    output = "## Source: file:///s/b.html\nnothing\n\n## Source: file:///s/a.html\nthe x"
    sources = [h.source_url for h in hits]
    found = {"declined": False, "evidence": {"excess": 1.0, "unseen": ["tkinter"]}}
    result = score_question(question, hits, output, sources, pages, 12.5, found)
    assert result.page_rank == 2
    assert result.metrics() == {"page@1": 0.0, "page@5": 1.0, "answer_in_output": 1.0}
    assert [h.source for h in result.hits] == ["b.html", "a.html"]
    assert [h.has_answer for h in result.hits] == [False, True]
    none_q = Question("n1", "unrelated?", "none", "", "")
    weak = {"declined": False, "evidence": {"excess": -0.9, "unseen": ["moodle"]}}
    none_r = score_question(none_q, hits[:1], "## Source: …", sources[:1], pages, 10.0, weak)
    assert none_r.confident and not none_r.answer_in_output
    declined = score_question(none_q, hits[:1], "…", sources[:1], pages, 1.0, {"declined": True})
    assert not declined.confident
    empty = score_question(none_q, [], "該当する情報が見つかりませんでした", [], pages, 9.0)
    assert not empty.confident and empty.top is None

    config = {
        "set": "t",
        "site": {"package": "p", "version": "1", "html_root": "/x"},
        "questions_in_set": 3,
        "n_results": "default (3)",
        "mode": "default (fused)",
        "formatter": "f",
        "defaults": True,
        "changed": [],
        "site_settings": {},
        "code": "here",
        "wall_seconds": 1.0,
    }
    index = {"pages": 2, "chunks": 4, "added": 2, "unchanged": 0, "seconds": 0.5}
    report = Report(config, index, [result, none_r, empty])
    assert report.groups["code"].metrics["answer_in_output"] == 1.0
    assert report.groups["none"].confident == 0.5
    assert report.groups["none"].metrics["page@1"] is None
    assert report.groups["all"].n == 3
    data = report.to_json()
    assert data["confident_rate_none"] == 0.5
    assert data["top_hit_scores"]["none"]["vector_distance"]["n"] == 1
    assert data["questions"][0]["top_vector_distance"] == 0.2
    shown = "## [1] Source: a\nA › B\n\n```\nx = 1\n```\n### B\nprose\n\n## [2] Source: b\nC\n\nok"
    odd = score_question(none_q, [], shown, [], pages, 1.0)
    assert Report(config, index, [odd]).to_json()["output_defects"] == {
        "hits": 2,
        "with_any": 1,
        "heading_below_top": 1,
        "unclosed_fence": 0,
        "behind_marker": 0,
        "bare_item_number": 0,
    }
    md = report.markdown()
    assert f"with_any {data['output_defects']['with_any']}" in md
    assert "| code | 1 |" in md and "n1" in md
    rows = {row["cutoff"]: row for row in report.cutoffs}
    assert rows[-1.0] == {
        "cutoff": -1.0,
        "none_silenced": 0.5,  # the question with no hit at all
        "answerable_lost": 0.0,
        "answer_returned_lost": 0.0,
    }
    assert rows[-0.8]["none_silenced"] == 1.0  # excess -0.9 with a word the store lacks
    assert rows[0.4]["answerable_lost"] == 0.0  # excess 1.0 stays above every cut-off
    assert "| -0.80 | 1.000 |" in md


def test_distribution() -> None:
    assert distribution([]) == {"n": 0}
    d = distribution([0.3, None, 0.1, 0.2])
    assert d["n"] == 3 and d["min"] == 0.1 and d["median"] == 0.2 and d["max"] == 0.3


# --- the question files ---------------------------------------------------------------------
@pytest.mark.parametrize("name", DOC_SETS)
def test_set_parses_with_minimums(name: str) -> None:
    docs = load_set(SETS / name)
    counts = kind_counts(docs.questions)
    assert counts["none"] >= MIN_NONE_PER_SITE, counts
    assert all(counts[k] for k in KINDS), counts
    assert {"package", "version", "html_root"} <= set(docs.site)
    for q in docs.questions:
        if q.kind != "none":
            assert q.page in docs.pages
        if name == "docs-ja":
            assert JAPANESE.search(q.query), q.id
        else:
            assert not JAPANESE.search(q.query), q.id


def test_sets_together_meet_the_minimums() -> None:
    every = [q for name in DOC_SETS for q in load_set(SETS / name).questions]
    counts = kind_counts(every)
    assert len(every) >= MIN_TOTAL
    assert counts["code"] >= MIN_CODE
    assert counts["table"] >= MIN_TABLE
    assert len({q.id for q in every}) == len(every)


def _page_text(path: Path) -> str:
    from rag_app.local_files import read_local_document

    return read_local_document(path)[1]


@pytest.mark.parametrize("name", DOC_SETS)
def test_answers_are_in_the_extracted_page_text(name: str) -> None:
    """The project's own extraction (what `rag index` stores) holds every answer."""
    docs = load_set(SETS / name)
    if not docs.html_root.is_dir():
        pytest.skip(f"{docs.html_root} is not installed ({docs.site.get('install')})")
    pages = sorted({q.page for q in docs.questions if q.kind != "none"})
    # In this process: a process pool forked from a test worker that runs threads could
    # hang on a lock held at the fork (seen once: workers idle for 20 min).
    texts = {page: _page_text(docs.html_root / page) for page in pages}
    missing = [
        f"{q.id}: {q.answer!r} not in {q.page}"
        for q in docs.questions
        if q.kind != "none" and not q.found_in(texts[q.page])
    ]
    assert not missing, "\n".join(missing)


def test_reused_work_folder_built_by_other_code_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eval.answer_eval import _check_marker

    _check_marker(tmp_path, "repo @ abc", verbose=True)
    _check_marker(tmp_path, "repo @ abc", verbose=True)
    assert capsys.readouterr().err == ""
    _check_marker(tmp_path, "repo @ def", verbose=True)
    assert "indexed by repo @ abc" in capsys.readouterr().err
