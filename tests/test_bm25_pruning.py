"""BM25 top-k pruning (MaxScore): the same results as scoring every document, and common
terms are looked up at the candidates instead of walked."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from rag_app.index import bm25_postings
from rag_app.index.bm25_index import BM25Document, BM25Index
from rag_app.index.bm25_postings import Postings

WORDS = [f"w{i}" for i in range(400)]
WEIGHTS = [1.0 / (rank + 1) for rank in range(len(WORDS))]  # Zipf: a few very common words


@pytest.fixture(autouse=True)
def prune_small_corpora(monkeypatch) -> None:
    """These corpora are small enough to score exhaustively; prune them anyway."""
    monkeypatch.setattr(bm25_postings, "PRUNE_FROM", 0)


def space_tokenizer(text: str) -> list[str]:
    return text.split()


def make_doc(rng: random.Random, doc_id: str, source: str) -> BM25Document:
    body = " ".join(rng.choices(WORDS, WEIGHTS, k=rng.randint(3, 14)))
    context = " ".join(rng.choices(WORDS, WEIGHTS, k=2)) if rng.random() < 0.5 else ""
    return BM25Document(doc_id, body, source, context=context)


def reference(index: BM25Index, docs: dict[str, BM25Document], query: str):
    """Every live document scored in plain Python (BM25F: field frequencies add up)."""
    k1, b = index.k1, index.b
    terms = index._query_terms(query, None)
    names = index._p.terms
    bags = {i: Counter(index.document_tokens(d)) for i, d in docs.items()}
    lengths = {i: sum(bag.values()) for i, bag in bags.items()}
    avg = sum(lengths.values()) / len(lengths)
    scores: dict[str, float] = {}
    for weight, fields in terms:
        tokens = [(names[t], fw) for t, fw in fields]
        holders = [i for i, bag in bags.items() if any(bag[tok] for tok, _ in tokens)]
        df = len(holders)
        idf = math.log(1.0 + (len(docs) - df + 0.5) / (df + 0.5))
        for i in holders:
            tf = sum(bags[i][tok] * fw for tok, fw in tokens)
            norm = k1 * (1.0 - b + b * lengths[i] / avg)
            scores[i] = scores.get(i, 0.0) + weight * idf * tf / (tf + norm)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def assert_same_top(got: list[tuple[str, float]], want: list[tuple[str, float]], k: int) -> None:
    want = want[:k]
    assert len(got) == len(want)
    for (_, g), (_, w) in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=1e-9, abs=1e-12)
    if want:  # ids must agree except among documents tied with the last one
        last = want[-1][1]
        sure = {i for i, s in want if s > last + 1e-9}
        assert sure <= {i for i, _ in got}


def indexed_pages(rng: random.Random, pages: int) -> tuple[BM25Index, dict[str, BM25Document]]:
    """An index of `pages` sources of 10 chunks each, and the chunks it holds by id."""
    index = BM25Index(None, tokenizer=space_tokenizer)
    docs: dict[str, BM25Document] = {}
    for page in range(pages):
        batch = [make_doc(rng, f"p{page}#{i}", f"https://s.test/{page}") for i in range(10)]
        index.add(batch)
        docs.update((d.id, d) for d in batch)
    return index, docs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pruned_search_equals_scoring_every_document(seed: int) -> None:
    rng = random.Random(seed)
    index, docs = indexed_pages(rng, 120)
    for page in rng.sample(range(120), 15):  # tombstones
        index.delete_source(f"https://s.test/{page}")
        docs = {i: d for i, d in docs.items() if d.source != f"https://s.test/{page}"}
    index._p.compact()
    for n in range(40):  # a delta on top of the compacted postings, and some replacements
        doc = make_doc(rng, f"late{n}" if n % 2 else next(iter(docs)), "https://s.test/late")
        index.add([doc])
        docs[doc.id] = doc
    for _ in range(150):
        words = rng.choices(WORDS, WEIGHTS, k=rng.randint(1, 5))
        if rng.random() < 0.3:
            words.append(rng.choice(WORDS[200:]))  # a rare word beside common ones
        query = " ".join(words)
        k = rng.choice([1, 5, 30])
        assert_same_top(index.search(query, k), reference(index, docs, query), k)


def test_scores_follow_every_change_between_searches() -> None:
    """The per-slot length norms are kept between searches: each add, delete, compaction
    and other k1/b must be seen by the very next search."""
    rng = random.Random(7)
    index, docs = indexed_pages(rng, 30)
    queries = [" ".join(rng.choices(WORDS, WEIGHTS, k=3)) for _ in range(5)]

    def check(k1: float | None = None, b: float | None = None) -> None:
        for query in queries:
            got = index.search(query, 10, k1=k1, b=b)
            old = index.k1, index.b
            index.k1, index.b = k1 or index.k1, b or index.b
            want = reference(index, docs, query)
            index.k1, index.b = old
            assert_same_top(got, want, 10)

    check()
    long_doc = BM25Document("long", " ".join(WORDS[:300]), "https://s.test/long")
    index.add([long_doc])  # moves the average length: every norm changes
    docs["long"] = long_doc
    check()
    index.delete_source("https://s.test/3")
    docs = {i: d for i, d in docs.items() if d.source != "https://s.test/3"}
    check()
    index._p.compact()
    check()
    check(k1=1.5, b=0.9)
    check()


def test_scoped_search_equals_scoring_the_scope() -> None:
    rng = random.Random(5)
    index, docs = indexed_pages(rng, 60)
    for scope in (["https://s.test/3"], [f"https://s.test/{p}" for p in range(40)]):
        for _ in range(40):
            query = " ".join(rng.choices(WORDS, WEIGHTS, k=rng.randint(1, 4)))
            want = [(i, s) for i, s in reference(index, docs, query)
                    if docs[i].source in scope]  # fmt: skip
            assert_same_top(index.search(query, 10, sources=scope), want, 10)


def test_a_common_term_beside_a_rare_one_is_looked_up_not_walked(monkeypatch) -> None:
    index = BM25Index(None, tokenizer=space_tokenizer)
    index.add([BM25Document(f"d{i}", "common " * (1 + i % 3), "s") for i in range(2000)])
    index.add([BM25Document(f"r{i}", "common rare", "s") for i in range(3)])
    walked: list[int] = []
    full = Postings._full

    def spy(self, term, k1, b):
        walked.append(term.df)
        return full(self, term, k1, b)

    monkeypatch.setattr(Postings, "_full", spy)
    hits = index.search("rare common", 3)
    assert sorted(i for i, _ in hits) == ["r0", "r1", "r2"]
    assert walked and max(walked) == 3  # the 2,003 postings of "common" were never walked
