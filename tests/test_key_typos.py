"""Row keys written with one typo are found, and never displace a key written exactly."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from rag_app.index import key_typos
from rag_app.index.bm25_index import BM25Document, BM25Index
from rag_app.index.key_typos import KeyVariants, query_spans, variants, within_one_edit
from tests.processes import rag, rag_json, store_env


def damerau_at_most_one(a: str, b: str) -> bool:
    """Brute force: `b` is reachable from `a` by exactly one edit of any kind."""
    alphabet = set(a) | set(b) | {"#"}
    edits = variants(a) - {a}
    edits |= {a[:i] + c + a[i + 1 :] for i in range(len(a)) for c in alphabet}
    edits |= {a[:i] + c + a[i:] for i in range(len(a) + 1) for c in alphabet}
    edits |= {a[:i] + a[i + 1] + a[i] + a[i + 2 :] for i in range(len(a) - 1)}
    return a != b and b in edits


def test_one_edit_agrees_with_brute_force() -> None:
    rng = random.Random(3)
    words = ["".join(rng.choice("abz") for _ in range(rng.randint(0, 5))) for _ in range(300)]
    for a, b in itertools.product(words[:60], words[:60]):
        assert within_one_edit(a, b) == damerau_at_most_one(a, b), (a, b)
    assert within_one_edit("brass", "barss") and within_one_edit("ゴブリン", "コブリン")
    assert not within_one_edit("abcd", "badc")


def test_spans_are_script_runs_not_glued_to_particles() -> None:
    texts = [t for _, _, t, _ in query_spans("ベミーゼージのMPを教えて")]
    assert "べみぜじ" in texts and "mp" in texts
    assert "べみぜじの" not in texts  # a span never ends with a one-character run
    latin = [t for _, _, t, _ in query_spans("Tell me the weight of the Helix M8 Pluw.")]
    assert "helix m8 pluw" in latin and "m8 pluw" in latin


def index_of(keys: list[str]) -> BM25Index:
    idx = BM25Index(None)
    idx.add(
        [BM25Document(f"r{i}", f"Model: {k}, Price: {100 + i}", key=k) for i, k in enumerate(keys)]
    )
    return idx


KEYS = ["Helix M8", "Helix M8 Plus", "Summit X13", "Summit X13 Studio", "Brass 5161",
        "Brass 5161 T6", "アイアンダガー", "アイアンダガー改", "ゼージ", "ベビーゼージ",
        "Ionix K4"]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "row"),
    [
        ("Tell me the weight of the Helix M8 Pluw.", "Helix M8 Plus"),  # not the exact Helix M8
        ("Tell me the storage of the Sumit X13.", "Summit X13"),  # not X13 Studio
        ("What is the cost of Barss 5161?", "Brass 5161"),  # swapped neighbours
        ("What price does the Inix K4 have?", "Ionix K4"),  # dropped letter
        ("ベミーゼージのMPを教えて", "ベビーゼージ"),  # not the exact ゼージ inside the run
        ("アイアンダガーの効果は？", "アイアンダガー"),  # exact stays: の is no typo of 改
        ("Helix M8 price?", "Helix M8"),
        ("Helix M8 Plus price?", "Helix M8 Plus"),
        ("Summit X13 Studio price?", "Summit X13 Studio"),
    ],
)
def test_the_named_row_comes_first(query: str, row: str) -> None:
    idx = index_of(KEYS)
    assert idx.search(query, top_k=3)[0][0] == f"r{KEYS.index(row)}", idx.search(query, top_k=3)


def test_without_table_rows_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    idx = BM25Index(None)
    idx.add([BM25Document("p1", "Helix M8 Plus is a phone"), BM25Document("p2", "Helix M8")])
    before = idx.search("Helix M8 Pluw", top_k=5)
    monkeypatch.setattr(KeyVariants, "candidates", lambda *_: pytest.fail("looked up"))
    assert idx.search("Helix M8 Pluw", top_k=5) == before


def test_variants_grow_with_the_vocabulary_and_survive_a_merge() -> None:
    keys = [f"Model{i:05d}" for i in range(400)]  # 400 × 11 variants: several merges
    idx = index_of(keys[:10])
    assert idx.search("Modle00003 price", top_k=1)[0][0] == "r3"
    idx.add(
        [BM25Document(f"r{i}", f"Model: {k}, Price: 1", key=k) for i, k in enumerate(keys[10:], 10)]
    )
    assert idx.search("Modle00321 price", top_k=1)[0][0] == "r321"
    near = {f"r{i}" for i, k in enumerate(keys) if within_one_edit("model0032", k.lower())}
    assert len(near) > 5  # model00032, model00132, model00320 …
    assert {i for i, _ in idx.search("Model0032 price", top_k=5)} <= near
    idx.clear()
    idx.add([BM25Document("n", "Model: Nova", key="Nova Z10")])
    assert idx.search("Nvoa Z10", top_k=1)[0][0] == "n"


def test_a_large_vocabulary_is_indexed_in_the_background(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_typos, "BACKGROUND_TERMS", 5)
    idx = index_of(KEYS)
    idx.search("Helix M8 price", top_k=1)  # starts the build; exact keys meanwhile
    idx._keys.join(10)
    assert not idx._keys.building and idx._keys.keys == len(KEYS) - 1  # ゼージ folds to ぜじ
    assert idx.search("Tell me the storage of the Sumit X13.", top_k=1)[0][0] == "r2"


def test_an_exact_key_stays_when_a_longer_fuzzy_match_is_elsewhere() -> None:
    idx = index_of(["Summit X13", "Summit X13 Pro", "Helix M8"])
    vocab = idx._p.vocab
    idx.search("warm", top_k=1)
    terms = idx._keys.matches(
        "Summit X13 vs Summit X13 Pr", idx._p.terms, ["@summit x13"], vocab.__contains__
    )
    assert set(terms) == {"@summit x13", "@summit x13 pro"}


def test_a_word_the_store_knows_is_not_corrected_and_short_words_are_left_alone() -> None:
    idx = BM25Index(None)
    idx.add(
        [
            BM25Document("row", "Command: exit, Effect: leaves", key="exit"),
            BM25Document("tokyo", "都市: 東京都, 人口: 14", key="東京都"),
            BM25Document("prose", "The interpreter exits when it reads an end-of-file."),
        ]
    )
    idx.search("warm", top_k=1)
    known = idx.knows_word
    assert idx._keys.matches("How do I make the interpreter exits?", idx._p.terms, [], known) == []
    idx.add([BM25Document("row2", "Command: the exit", key="the exit")])
    vocab_terms = {t for _, fields in idx._query_terms("the exits", None) for t, _ in fields}
    assert idx._p.vocab["@the exit"] not in vocab_terms  # a stop word is no unknown word
    assert idx._keys.matches("How do I ecit?", idx._p.terms, [], known) == ["@exit"]
    assert idx._keys.matches("東京の天気", idx._p.terms, [], known) == []  # 2 chars vs 3


def test_work_per_query_is_bounded_whatever_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    keys = ["".join(t) for t in itertools.product("a1b", alphabet, alphabet)][:3000]
    idx = BM25Index(None)
    idx.add([BM25Document(f"r{i}", "row", key=k) for i, k in enumerate(keys)])
    idx.search("warm", top_k=1)
    checks: list[int] = []
    real = key_typos.within_one_edit

    def counting(a: str, b: str) -> bool:
        checks.append(1)
        return real(a, b)

    monkeypatch.setattr(key_typos, "within_one_edit", counting)
    query = " ".join(["a1"] * 66) + " aab a1c"
    spans = {t for _, _, t, _ in key_typos.query_spans(query)}
    found = idx._keys.matches(query, idx._p.terms, [], lambda _w: False)
    assert len(found) <= key_typos.MAX_FUZZY
    assert len(checks) <= key_typos.MAX_CANDIDATES * len(spans)


def test_a_typo_in_a_row_name_is_found_through_the_store_service(tmp_path: Path) -> None:
    """Real `rag index` and `rag search` processes, clients of one store service: the
    service's BM25 matches the mistyped name to its row, and a name written exactly keeps
    its own row (not the longer one)."""
    folder = tmp_path / "pages"
    folder.mkdir()
    rows = "".join(
        f"<tr><td>{name}</td><td>{price}</td></tr>"
        for name, price in [("Summit X13", 1009), ("Summit X13 Studio", 2589), ("Helix M8", 959),
                            ("Helix M8 Plus", 1319), ("Vega S200", 1397)]
    )  # fmt: skip
    (folder / "laptops.html").write_text(
        "<html><head><title>Laptops</title></head><body><h1>Laptops</h1>"
        f"<table><tr><th>Model</th><th>Price (USD)</th></tr>{rows}</table></body></html>",
        encoding="utf-8",
    )
    env = store_env(tmp_path)
    try:
        indexed = rag(env, "index", str(folder))
        assert indexed.returncode == 0, indexed.stderr
        for query, row in [
            ("Sumit X13 price?", "Price (USD): 1009"),  # not Summit X13 Studio
            ("Helix M8 Pluw price?", "Price (USD): 1319"),  # Helix M8 Plus, not Helix M8
            ("Helix M8 price?", "Price (USD): 959"),
        ]:
            hits = rag_json(env, "search", query, "--mode", "bm25", "-n", "1")["hits"]
            assert hits and row in hits[0]["text"], (query, hits)
    finally:
        rag(env, "service", "stop")
