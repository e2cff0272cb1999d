"""The no-match rule: a search with nothing that answers it says so instead of three
confident-looking hits (`rag_app.index.no_match`)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from mcp_server.formatting import NO_MATCH, format_search
from mcp_server.schemas import SearchOutput
from rag_app.config import RAGSettings
from rag_app.index import no_match
from rag_app.index.bm25_index import BM25Document, BM25Index
from rag_app.index.exact_vectors import ExactVectors, Spread
from rag_app.index.tokenizer import stem
from rag_app.knowledge import KnowledgeBase
from rag_app.results import RetrievalResult
from tests.conftest import SAMPLES, CountingEmbedding


def test_spread_is_the_similarity_mean_and_deviation_of_the_rows_searched() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((120, 6)).astype(np.float32)
    sources = [f"s{i % 4}" for i in range(120)]
    exact = ExactVectors(6)
    exact.upsert([f"c{i:03d}" for i in range(120)], vectors, sources)
    q = rng.standard_normal(6).astype(np.float32)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit.astype(np.float64) @ (q / np.linalg.norm(q)).astype(np.float64)
    got = exact.query(q, 5)
    assert got.spread is not None and got.spread.count == 120
    assert got.spread.mean == pytest.approx(sims.mean(), abs=1e-5)
    assert got.spread.std == pytest.approx(sims.std(), abs=1e-5)
    assert got.hits == exact.search(q, 5)
    inside = np.array([s in ("s1", "s3") for s in sources])
    scoped = exact.query(q, 5, sources=["s1", "s3"]).spread
    assert scoped is not None and scoped.count == 60
    assert scoped.mean == pytest.approx(sims[inside].mean(), abs=1e-5)
    best = 1.0 - float(sims.max())
    assert got.spread.z(best) == pytest.approx((sims.max() - sims.mean()) / sims.std(), abs=1e-4)
    assert ExactVectors(6).query(q, 5).spread is None


def test_unseen_words_are_the_words_no_live_chunk_holds() -> None:
    index = BM25Index(None)
    index.add(
        [
            BM25Document("a", "python asyncio coroutine tasks gather", "s"),
            BM25Document("b", "python asyncio timeout cancel", "s"),
            BM25Document("c", "python dictionary keys values", "s", context="collections guide"),
        ]
    )
    assert index.unseen_words("asyncio gather") == []
    assert index.unseen_words("asyncio tkinter window") == ["tkinter", "window"]
    assert index.unseen_words("collections guide") == []  # the context field counts
    index.delete_ids(["a"])
    assert index.unseen_words("gather coroutine python") == ["gather", stem("coroutine")]
    assert index.unseen_words("。、") == []


def test_spread_excess_is_the_z_score_beyond_the_expected_best_of_n() -> None:
    spread = Spread(mean=0.80, std=0.02, count=1000)
    assert spread.excess(1 - 0.90) == pytest.approx(5.0 - math.sqrt(2 * math.log(1000)))
    assert Spread(0.8, 0.0, 1000).excess(0.1) is None


def test_the_rule_declines_only_a_weak_best_hit_the_lexical_evidence_does_not_vouch_for() -> None:
    spread = Spread(mean=0.80, std=0.02, count=1000)  # the best of 1000 lies ~3.72 sd up
    weak = no_match.excess_of(1 - 0.86, spread)  # -0.72
    strong = no_match.excess_of(1 - 0.90, spread)  # +1.28
    assert weak == pytest.approx(3.0 - math.sqrt(2 * math.log(1000)), abs=1e-3)
    evidence = no_match.Evidence
    assert evidence(weak).declines(-0.5)  # nothing looked up yet counts against the hits
    assert evidence(weak, ["tkinter"], None, None).declines(-0.5)
    assert not evidence(weak, [], None, None).declines(-0.5)  # every word is known
    assert not evidence(strong, ["tkinter"]).declines(-0.5)
    assert not evidence(weak, ["tkinter"]).declines(None)  # None turns the rule off
    rare, common = no_match.RARE_DF, no_match.RARE_DF + 1
    assert not evidence(weak, ["listed"], rare).declines(-0.5)  # a shared rare term
    assert evidence(weak, ["listed"], common).declines(-0.5)
    lead = no_match.BM25_LEAD
    assert not evidence(weak, ["listed"], common, lead).declines(-0.5)  # BM25 found it
    assert evidence(weak, ["listed"], common, lead - 0.01).declines(-0.5)
    assert not evidence(None, ["tkinter"]).declines(-0.5)  # no vector evidence
    small = Spread(mean=0.80, std=0.02, count=no_match.MIN_CHUNKS - 1)
    assert no_match.excess_of(1 - 0.86, small) is None  # too few chunks to tell
    assert no_match.excess_of(1 - 0.86, Spread(0.8, 0.0, 500)) is None
    assert no_match.excess_of(None, spread) is None
    assert no_match.excess_of(1 - 0.86, Spread(float("nan"), float("nan"), 500)) is None


def test_code_the_store_never_mentions_declines_whatever_the_vector_side_says() -> None:
    assert no_match.named_code("How do I patch with unittest.mock.patch or settimeout()?") == [
        "unittest.mock.patch",
        "settimeout",
    ]
    assert no_match.named_code("What is the shared_memory of os.path.join()?") == [
        "shared_memory",
        "os.path.join",
    ]
    assert no_match.named_code("e.g. version 3.11.2, plain words (and brackets) ()") == []
    evidence = no_match.Evidence
    strong = 4.5  # the vector side is sure
    unknown = evidence(strong, ["settimeout"], 1, 99.0, ["settimeout"], ["settimeout"])
    assert unknown.declines(-0.7)
    assert not evidence(strong, [], 1, 99.0, ["settimeout"], []).declines(-0.7)  # known
    mixed = ["asyncio.gather", "my_tasks"]  # one held name: the other is the user's own
    assert not evidence(strong, ["my_tasks"], 1, 99.0, mixed, ["my_tasks"]).declines(-0.7)
    assert not evidence(strong, None, None, None, ["settimeout"], ["settimeout"]).declines(None)
    assert not evidence(None, None, None, None, ["settimeout"], ["settimeout"]).declines(-0.7)


def test_code_is_known_by_its_leaf_however_qualified() -> None:
    index = BM25Index(None)
    index.add(
        [
            BM25Document("a", "Path.read_text(encoding=None): return the file's text", "s"),
            BM25Document("b", "os.path.join(a, *p) joins; json.load(fp) reads data", "s"),
            BM25Document("c", "socket timeouts", "s", context="Socket Objects"),
            BM25Document("d", "A patch is applied; patched functions", "s"),
        ]
    )
    names = [
        "pathlib.path.read_text",  # more qualified than the docs
        "os.path",  # less qualified: its leaf is a word of the docs
        "data.json",
        "thanks.how",  # a missing space: a stop word is known
        "unittest.mock.patch",  # `patch` is a word of the docs, `mock` is not
        "shared_memory",
        "settimeout",
        "socket.timeout",  # both parts held, one in a heading
    ]
    assert index.unknown_code(names) == ["unittest.mock.patch", "shared_memory", "settimeout"]
    index.delete_ids(["a"])
    assert "pathlib.path.read_text" in index.unknown_code(["pathlib.path.read_text"])


def test_bm25_lead_is_the_best_score_over_the_second() -> None:
    assert no_match.bm25_lead([2.0, 8.0, 4.0]) == 2.0
    assert no_match.bm25_lead([3.0]) == 99.0
    assert no_match.bm25_lead([]) is None


def test_rarest_match_is_the_smallest_document_frequency_shared_with_a_hit() -> None:
    index = BM25Index(None)
    index.add([BM25Document(f"d{i}", f"common word{i} shared{i % 2}", "s") for i in range(6)])
    assert index.rarest_match("common word3", ["d3"]) == 1  # word3 is in d3 alone
    assert index.rarest_match("common word3", ["d4"]) == 6  # d4 shares only "common"
    assert index.rarest_match("shared1 common", ["d1"]) == 3
    assert index.rarest_match("nothing here", ["d1"]) is None
    assert index.rarest_match("common", []) is None


async def test_a_declined_search_says_so_and_points_without_passages(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(no_match, "MIN_CHUNKS", 5)  # the samples are 19 chunks,
    monkeypatch.setattr(no_match, "RARE_DF", 0)  # where any shared term is a rare one
    monkeypatch.setattr(no_match, "BM25_LEAD", 1000.0)  # and one BM25 match leads by far
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    try:
        await kb.index_dir(SAMPLES)
        strict = {"rag_no_match_cutoff": 10.0}  # every best hit is "weak": words decide
        declined = await kb.retrieve(
            "How do I make a tkinter window with a button?", options=strict
        )
        assert not declined.confident and declined.evidence["excess"] is not None and declined.hits
        named = await kb.retrieve("りゅうおう", options=strict)
        assert named.confident  # the store holds every word of it
        never = await kb.retrieve(
            "How do I make a tkinter window with a button?", options={"rag_no_match_cutoff": None}
        )
        assert never.confident and never.evidence["excess"] is not None
        bm25_only = await kb.retrieve("tkinter window", mode="bm25", options=strict)
        assert bm25_only.confident and bm25_only.evidence["excess"] is None
        vector = await kb.retrieve(
            "How do I make a tkinter window with a button?", mode="vector", options=strict
        )
        assert not vector.confident  # judged like a fused search, BM25 asked for its lead
        assert vector.evidence["bm25_lead"] is not None
        separate = await kb.retrieve(
            "How do I make a tkinter window with a button?", mode="separate", options=strict
        )
        assert not separate.confident
        lenient = await kb.retrieve(
            "How do I make a tkinter window with a button?", options={"rag_no_match_cutoff": -9.0}
        )
        assert lenient.confident and lenient.evidence["unseen"] is None  # nothing looked up
        assert lenient.hits[0].passage  # a confident hit is widened to its passage
        lenient_cutoff = {"rag_no_match_cutoff": -9.0}
        unknown_code = await kb.retrieve("りゅうおうを tkinter.Button() で", options=lenient_cutoff)
        assert not unknown_code.confident  # names code no chunk holds, however lenient
        assert unknown_code.evidence["unseen_code"] == ["tkinter.button"]
        mixed = await kb.retrieve("asyncio.gather() で my_tasks を集める", options=lenient_cutoff)
        assert mixed.confident and mixed.evidence["unseen_code"] == ["my_tasks"]
        known_code = await kb.retrieve(
            "How does asyncio.gather() collect results?", options=lenient_cutoff
        )
        assert known_code.confident and known_code.evidence["unseen_code"] == []
    finally:
        await kb.aclose()

    assert not declined.hits[0].passage  # a declined search is not widened
    assert format_search(separate).startswith(NO_MATCH)
    assert "# ベクトル検索の結果" not in format_search(separate)
    text = format_search(declined)
    assert text.startswith(NO_MATCH)
    assert "## [" not in text  # no hit reads as an answer
    assert all(h.source_url in text for h in declined.hits)
    assert len(text) < 200 * len(declined.hits) + len(NO_MATCH) + 100
    assert format_search(named).startswith("## [1] Source:")
    assert SearchOutput.of(declined).confident is False
    again = RetrievalResult.from_dict(declined.to_dict())
    assert not again.confident and again.evidence == declined.evidence


def test_an_evaluation_names_the_answerable_queries_the_rule_declined() -> None:
    from eval.commands import no_match_declined
    from eval.datasets import EvalQuery
    from eval.report import EvaluationConfig

    evidence = no_match.Evidence
    queries = [
        EvalQuery("a", "weak and unvouched?", ["p#0"]),
        EvalQuery("b", "strong?", ["p#1"]),
        EvalQuery("c", "tkinter?", []),  # no answer: declining it costs nothing
    ]
    verdicts = {
        "weak and unvouched?": (evidence(-2.0, ["unvouch"], 40, 1.0), []),
        "strong?": (evidence(1.0), ["p#1"]),
        "tkinter?": (evidence(-2.0, ["tkinter"], 40, 1.0), []),
    }
    declined = no_match_declined(queries, verdicts, -0.7)
    assert [d["query"] for d in declined] == ["weak and unvouched?"]
    assert declined[0]["unseen"] == ["unvouch"] and declined[0]["excess"] == -2.0
    config = EvaluationConfig("set", 3, 3, 200, 30, 0.5, None, {"no_match_declined": declined})
    assert "no_match_declined" not in config.describe()  # the one-line summary stays one line


ANSWERABLE = [
    "What equation did Schrödinger write?",  # the store writes the name with its umlaut
    "How shoudl I change the port of the server?",  # a typo of a stop word
    "Where is the config file that sets the port?",  # the store writes configuration
    "How do I close a popup window?",  # the store writes pop-up
]


@pytest.mark.parametrize("query", ANSWERABLE)
async def test_a_question_the_store_answers_in_other_words_is_not_declined(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    query: str,
) -> None:
    """Words a word list does not know (config, popup, a name with a diacritic, a typo)
    are not names the store never mentions: a rule declining such queries whatever the
    scores was measured and taken out (docs/evaluation.md)."""
    monkeypatch.setattr(no_match, "MIN_CHUNKS", 1)  # measure the spread on a small store
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "physics.md").write_text(
        "# Quantum mechanics\n\n## Wave equation\n\n"
        "Erwin Schrödinger wrote the wave equation in 1926.\n"
    )
    (docs / "server.md").write_text(
        "# Server\n\n## Port\n\nEdit the configuration file to change the port the server "
        "listens on.\n\n## Dialogs\n\nClose a pop-up window with the Escape key.\n"
    )
    shutil.copy(SAMPLES / "kyoto.html", docs / "kyoto.html")
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    try:
        await kb.index_dir(docs)
        result = await kb.retrieve(query)
    finally:
        await kb.aclose()
    assert result.evidence["excess"] is not None  # the rule did judge it
    assert result.confident, result.evidence
