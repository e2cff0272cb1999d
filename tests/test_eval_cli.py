"""`rag-eval`: evaluate against the committed baseline, regressions, errors, sweep.

Everything runs in-process through `eval.cli.main` on the real pipeline (builtin
embeddings, Chroma, BM25). The fixture knowledge base is built once per module and
reused by every run, as `--persist-dir` promises.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import rag_app.index.hybrid_retriever as hybrid_module
import rag_app.ingest_transforms as ingest_transforms
from eval.baseline import load_baseline
from eval.candidates import cc_ranker, fetch_candidates, rrf_ranker
from eval.cli import main, run
from eval.data import DOCUMENTS as DOCUMENTS_NAME
from eval.data import QUESTIONS, data_path
from eval.datasets import EvalQuery, load_spec_dataset, load_spec_documents
from eval.embedding_cache import CachedEmbedding
from eval.knowledge_builder import build_knowledge_base, eval_settings
from rag_app.config import load_settings
from rag_app.index.fusion import FusedScore, fuse

REPO = Path(__file__).resolve().parent.parent
DATASET = data_path(QUESTIONS)
DOCUMENTS = data_path(DOCUMENTS_NAME)
BASELINE = REPO / "tests" / "fixtures" / "rag" / "baseline.json"
_ENV_VARS = ("EMBEDDING_PROVIDER", "CHROMA_HOST", "RAG_VECTOR_WEIGHT", "RAG_BM25_K1", "RAG_BM25_B")


@pytest.fixture(scope="module")
def persist_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A test knowledge base built once with the shipped chunking (via init-test-db)."""
    folder = tmp_path_factory.mktemp("eval-db")
    with pytest.MonkeyPatch.context() as mp:
        for var in _ENV_VARS:
            mp.delenv(var, raising=False)
        mp.chdir(folder)
        defaults = load_settings()
        code = run(
            [
                "init-test-db",
                "--chunk-size",
                str(defaults.rag_chunk_size),
                "--chunk-overlap",
                str(defaults.rag_chunk_overlap),
                "--persist-dir",
                str(folder / "db"),
                "--fixture",
                str(DOCUMENTS),
            ]
        )
    assert code == 0
    yield folder / "db"


def _defaults_args() -> list[str]:
    s = load_settings()
    return [
        "--chunk-size",
        str(s.rag_chunk_size),
        "--chunk-overlap",
        str(s.rag_chunk_overlap),
        "--vector-weight",
        str(s.rag_vector_weight),
    ]


def _evaluate(persist_dir: Path, out: Path, *extra: str, bundled: bool = False) -> list[str]:
    """`evaluate` argv; `bundled`: leave the dataset and documents to the defaults."""
    data = [] if bundled else ["--dataset", str(DATASET), "--fixture", str(DOCUMENTS)]
    return [
        "evaluate",
        *_defaults_args(),
        *data,
        "--persist-dir",
        str(persist_dir),
        "--output-dir",
        str(out),
        *extra,
    ]


def _exit_code(argv: Sequence[str]) -> int:
    """Run the console-script entry point and return its exit status."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    return int(exc.value.code or 0)


# --- evaluate -------------------------------------------------------------------------


def test_defaults_pass_the_committed_baseline(
    persist_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    argv = _evaluate(
        persist_dir, out, "--baseline-file", str(BASELINE), "--fail-on-regression", bundled=True
    )
    assert _exit_code(argv) == 0  # from a temporary working folder: the bundled data
    printed = capsys.readouterr()
    assert "no regression" in printed.out
    assert "13 reused" in printed.err  # the module's knowledge base was reused, not rebuilt
    queries = len(load_spec_dataset(DATASET))  # progress: plain lines when not a terminal
    assert f"Evaluating: {queries}/{queries} queries" in printed.err
    assert "\r" not in printed.err and "it/s" not in printed.err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["summary"]["queries"] == len(load_spec_dataset(DATASET))
    assert report["baseline_comparison"]["regressed"] is False
    assert report["metrics"]["mrr"] >= 0.9
    assert report["config"]["dataset"] == "eval/data/rag_evaluation_dataset.json"
    assert report["config"]["extra"]["documents"] == "eval/data/rag_test_documents.json"
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "## Baseline comparison" in markdown and "りゅうおう" in markdown


def test_committed_baseline_matches_the_fixture() -> None:
    baseline = load_baseline(BASELINE)
    queries = {q.id for q in load_spec_dataset(DATASET)}
    assert set(baseline.hits) <= queries
    assert baseline.config["dataset"] == "eval/data/rag_evaluation_dataset.json"
    assert baseline.metrics["ndcg"] >= 0.9 and baseline.metrics["mrr"] >= 0.9


def test_broken_fusion_is_a_regression(
    persist_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def worst_first(*args: Any, n_results: int, **kwargs: Any) -> list[FusedScore]:
        ranked = fuse(*args, n_results=10_000, **kwargs)
        return list(reversed(ranked))[:n_results]

    monkeypatch.setattr(hybrid_module, "fuse", worst_first)
    out = tmp_path / "report"
    argv = _evaluate(persist_dir, out, "--baseline-file", str(BASELINE), "--fail-on-regression")
    assert _exit_code(argv) == 1
    printed = capsys.readouterr().out
    assert "REGRESSION" in printed and "dropped by" in printed
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["baseline_comparison"]["regressed"] is True
    assert report["baseline_comparison"]["lost_queries"]


def test_tampered_baseline_fails_only_with_fail_on_regression(
    persist_dir: Path, tmp_path: Path
) -> None:
    data = json.loads(BASELINE.read_text(encoding="utf-8"))
    data["metrics"]["f1"] = 1.0  # impossible with 5 results and mostly one expected page
    tampered = tmp_path / "baseline.json"
    tampered.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "report"
    base = _evaluate(persist_dir, out, "--baseline-file", str(tampered))
    assert _exit_code(base) == 0  # reported, not failed
    assert json.loads((out / "report.json").read_text())["baseline_comparison"]["regressed"]
    assert _exit_code([*base, "--fail-on-regression"]) == 1
    loose = [*base, "--fail-on-regression", "--regression-threshold", "0.95"]
    assert _exit_code(loose) == 0


def test_save_baseline_then_compare(persist_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert run(_evaluate(persist_dir, out, "--save-baseline")) == 0
    saved = load_baseline(out / "baseline.json")
    assert saved.config["vector_weight"] == load_settings().rag_vector_weight
    target = tmp_path / "b" / "mine.json"
    assert run(_evaluate(persist_dir, out, "--save-baseline", "--baseline-file", str(target))) == 0
    assert load_baseline(target).metrics == saved.metrics
    again = _evaluate(persist_dir, out, "--baseline-file", str(target), "--fail-on-regression")
    assert run(again) == 0


def test_threshold_and_n_results_reach_the_report(persist_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert run(_evaluate(persist_dir, out, "--n-results", "3", "--threshold", "0.05")) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert (report["config"]["n_results"], report["config"]["k"]) == (3, 3)
    assert report["config"]["threshold"] == 0.05
    # a cosine distance of 0.05 lets almost no vector hit through: fewer sources come back
    assert all(len(q["retrieved_sources"]) <= 3 for q in report["queries"])


# --- errors: one line, exit 2 ---------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "is not valid JSON"),
        ('{"items": []}', '"queries" list'),
        ('{"queries": [{"id": "q1"}]}', "query #1"),
    ],
)
def test_bad_dataset_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, needle: str
) -> None:
    bad = tmp_path / "dataset.json"
    bad.write_text(content, encoding="utf-8")
    argv = ["evaluate", *_defaults_args(), "--dataset", str(bad), "--fixture", str(DOCUMENTS)]
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--baseline-file", "missing.json"], "does not exist"),
        (["--limit", "5"], "--jsquad"),
    ],
)
def test_bad_options_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    argv = ["evaluate", *_defaults_args(), "--dataset", str(DATASET), "--fixture", str(DOCUMENTS)]
    assert run([*argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_overlap_not_below_size_and_bad_weight_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", "--chunk-size", "100", "--chunk-overlap", "100", "--vector-weight", "0.5"]
    assert run(argv) == 2
    assert (
        "--chunk-overlap (100) must be smaller than --chunk-size (100)" in capsys.readouterr().err
    )
    bad_weight = ["evaluate", "--chunk-size", "100", "--chunk-overlap", "10", "--vector-weight"]
    assert run([*bad_weight, "1.5"]) == 2
    assert "between 0.0 and 1.0" in capsys.readouterr().err
    assert run(["evaluate", "--chunk-size", "100"]) == 2  # required options missing


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--alphas", "0,1.5", "within 0..1"),
        ("--alphas", "a:b", "comma list"),
        ("--k1", "-1", "0 or more"),
        ("--b", "2", "within 0..1"),
        ("--chunkings", "200:200", "smaller than the size"),
    ],
)
def test_bad_sweep_grids_are_rejected(
    capsys: pytest.CaptureFixture[str], option: str, value: str, needle: str
) -> None:
    assert run(["sweep", option, value]) == 2
    assert needle in capsys.readouterr().err


# --- JSQuAD-format folders ------------------------------------------------------------


@pytest.fixture
def jsonl_dir(tmp_path: Path) -> Path:
    """A miniature corpus.jsonl + queries.jsonl pair in the JSQuAD conversion's format."""
    folder = tmp_path / "mini-jsquad"
    folder.mkdir()
    passages = [
        ("梅雨#0", "梅雨", "梅雨は東アジアで5月から7月にかけて見られる雨の多い期間である。"),
        ("富士山#0", "富士山", "富士山は静岡県と山梨県にまたがる日本最高峰の活火山である。"),
        ("将棋#0", "将棋", "将棋は二人で行うボードゲームで、王将を詰ませた方が勝ちとなる。"),
    ]
    questions = [
        ("q1", "梅雨が見られるのはどの地域？", "梅雨#0"),
        ("q2", "日本で一番高い山はどこにある？", "富士山#0"),
        ("q3", "王将を詰ませると勝つゲームは？", "将棋#0"),
        ("q4", "雨の多い期間は何月から何月？", "梅雨#0"),
    ]
    rows = [
        json.dumps({"id": i, "title": t, "text": x}, ensure_ascii=False) for i, t, x in passages
    ]
    (folder / "corpus.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    qrows = [
        json.dumps({"id": i, "query": q, "relevant": [r], "answers": []}, ensure_ascii=False)
        for i, q, r in questions
    ]
    (folder / "queries.jsonl").write_text("\n".join(qrows) + "\n", encoding="utf-8")
    return folder


def test_evaluate_jsquad_folder_with_limit(jsonl_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    argv = ["evaluate", "--chunk-size", "200", "--chunk-overlap", "30", "--vector-weight", "0.5"]
    argv += ["--jsquad", str(jsonl_dir), "--limit", "2", "--output-dir", str(out)]
    assert run(argv) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["config"]["dataset"] == "jsquad:mini-jsquad (2 queries)"
    assert [q["id"] for q in report["queries"]] == ["q1", "q3"]  # spread evenly, not q1, q2
    assert report["metrics"]["hit_rate"] == 1.0
    assert (tmp_path / ".tmp" / "embedding-cache.sqlite").is_file()  # cwd-relative default


def test_sweep_writes_csv_and_plot_with_the_best_alpha(
    jsonl_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    argv = ["sweep", "--jsquad", str(jsonl_dir), "--alphas", "0:1:0.5", "--output-dir", str(out)]
    assert run([*argv, "--chunkings", "200:30,100:10", "--k1", "1.2,2.5"]) == 0
    with (out / "sweep.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    # 2 chunkings x 2 k1 x (vector, bm25, rrf + 3 alphas for each of 3 normalisations)
    assert len(rows) == 2 * 2 * (3 + 3 * 3)
    assert {r["method"] for r in rows} == {"vector", "bm25", "rrf", "cc", "cc-z", "cc-dbsf"}
    cc = [r for r in rows if r["method"] == "cc"]
    assert sorted({r["alpha"] for r in cc}) == ["0", "0.5", "1"]
    assert {r["chunk_size"] for r in rows} == {"200", "100"}
    assert all(0.0 <= float(r["ndcg_at_10"]) <= 1.0 for r in rows)
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Best: CC α=" in capsys.readouterr().out


# --- offline re-fusion equals the live retriever ---------------------------------------


async def test_refused_candidates_match_the_live_retriever(
    persist_dir: Path, builtin_embed: Any
) -> None:
    defaults = load_settings()
    settings = eval_settings(persist_dir, defaults.rag_chunk_size, defaults.rag_chunk_overlap)
    kb, summary = await build_knowledge_base(
        load_spec_documents(DOCUMENTS), settings, embed_model=builtin_embed
    )
    assert summary.added == 0  # reused
    queries = [q for q in load_spec_dataset(DATASET) if q.expected_sources][:8]
    candidates = await fetch_candidates(kb, queries, n_results=5)
    for alpha in (0.0, 0.4, 1.0):
        kb.settings.rag_vector_weight = alpha
        rank = cc_ranker(5, alpha)
        for item in candidates.items:
            live = await kb.retrieve(item.query.query, 5)
            assert rank(item) == [h.node_id for h in live.hits], (alpha, item.query.query)
    both = EvalQuery("x", "りゅうおう", [])
    only = await fetch_candidates(kb, [both], n_results=5)
    fused = rrf_ranker(5)(only.items[0])
    assert fused and set(fused) <= set(only.items[0].vector) | set(only.items[0].bm25)
    await kb.aclose()


def test_each_chunking_and_embedding_text_gets_its_own_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = eval_settings(tmp_path, 200, 30)
    assert first.rag_collection_name.startswith("eval-c200-o30-")
    assert first.chromadb_persist_dir == str(tmp_path)
    assert eval_settings(tmp_path, 200, 30).rag_collection_name == first.rag_collection_name
    assert eval_settings(tmp_path, 300, 30).rag_collection_name.startswith("eval-c300-o30-")
    changed = eval_settings(tmp_path, 200, 30, rag_embed_context=False)
    assert changed.rag_collection_name != first.rag_collection_name  # never reuse stale vectors
    assert changed.bm25_persist_dir != first.bm25_persist_dir
    monkeypatch.setattr(ingest_transforms, "embed_text", lambda node: "other " + node.text)
    assert eval_settings(tmp_path, 200, 30).rag_collection_name != first.rag_collection_name


async def test_embedding_cache_serves_repeats(tmp_path: Path, builtin_embed: Any) -> None:
    cache = CachedEmbedding(builtin_embed, tmp_path / "cache.sqlite")
    first = await cache.aget_text_embedding_batch(["梅雨の季節", "富士山"])
    assert (cache.hits, cache.misses) == (0, 2)
    reopened = CachedEmbedding(builtin_embed, tmp_path / "cache.sqlite")
    again = reopened.get_text_embedding_batch(["富士山", "梅雨の季節"])
    assert (reopened.hits, reopened.misses) == (2, 0)
    assert again[1] == pytest.approx(first[0], abs=1e-6)
    query = reopened.get_query_embedding("富士山")  # queries are cached apart from passages
    assert reopened.misses == 1 and query != pytest.approx(again[0], abs=1e-6)
