"""Micro-benchmark of BM25Index at scale (run by hand, not a test).

    python bench/bm25_scale.py [--docs 100000] [--rounds 30] [--queries 300]
    python bench/bm25_scale.py --docs 1000000 --pretokenized   # the keyword side at 1M

Builds a synthetic corpus of ~80-character Japanese/English chunks, then times:
adding one 20-chunk page (tokenise + index + save), deleting a page, queries
(p50/p95, and the same queries with every posting scored, no top-k pruning), loading
from disk, a forced full snapshot, a postings compaction, and in
the same run the alternatives on the same terms: SQLite FTS5 (`bm25()`, k1 1.2 and
b 0.75 fixed) and a from-scratch `bm25s` re-index from cached token ids.
`--pretokenized` skips the Japanese tokenizer (words are indexed as they were
generated) so that a million chunks build in minutes; the index does the same work.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import bm25s

from rag_app.index.bm25_index import BM25Document, BM25Index
from rag_app.index.tokenizer import get_tokenizer

KANJI = "竜王攻撃力経験値魔法使剣盾城町村山川海空火水風雷氷毒回復呪文装備武器防具宝箱鍵扉地下迷宮"
PARTICLES = ["の", "は", "が", "を", "に", "で", "と", "も", "から", "まで", "です。", "ます。"]
ENGLISH = str.split(
    "python asyncio server client index query vector token chunk crawl page link row"
)


def make_vocab(rng: random.Random) -> list[str]:
    """A few thousand words in kanji, katakana, hiragana, English and numbers."""
    words: set[str] = set()
    while len(words) < 6000:
        kind = rng.random()
        if kind < 0.35:
            words.add("".join(rng.choice(KANJI) for _ in range(rng.randint(2, 3))))
        elif kind < 0.65:
            words.add("".join(chr(rng.randint(0x30A2, 0x30F3)) for _ in range(rng.randint(3, 6))))
        elif kind < 0.8:
            words.add("".join(chr(rng.randint(0x3042, 0x3093)) for _ in range(rng.randint(3, 5))))
        elif kind < 0.92:
            words.add(rng.choice(ENGLISH) + str(rng.randint(0, 300)))
        else:
            words.add(str(rng.randint(0, 9999)))
    return sorted(words)


def make_text(rng: random.Random, vocab: list[str], weights: list[float], chars: int = 80) -> str:
    parts: list[str] = []
    size = 0
    while size < chars:
        word = rng.choices(vocab, cum_weights=weights)[0]
        sep = rng.choice(PARTICLES) if not word.isascii() else " "
        parts.append(word + sep)
        size += len(word) + len(sep)
    return "".join(parts)


def page(rng: random.Random, vocab: list[str], weights: list[float], n: int, url: str):
    return [BM25Document(f"{url}#{i}", make_text(rng, vocab, weights), url) for i in range(n)]


def words_only(text: str) -> list[str]:
    """The pre-tokenized path: generated words, particles dropped."""
    return [w for w in text.replace("。", " ").split() if w not in PARTICLES]


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fts5_rows(tmp, corpus, token_lists, queries, tokenizer, rng, vocab, weights, rounds):
    """SQLite FTS5 on the same terms (each term mapped to an ASCII surrogate)."""
    import sqlite3

    surrogate: dict[str, str] = {}

    def text_of(tokens: list[str]) -> str:
        return " ".join(surrogate.setdefault(t, f"t{len(surrogate)}") for t in tokens)

    db = tmp / "fts.sqlite"
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE VIRTUAL TABLE c USING fts5(id UNINDEXED, body, tokenize='ascii')")
    start = time.perf_counter()
    with con:
        con.executemany(
            "INSERT INTO c(id, body) VALUES (?, ?)",
            ((d.id, text_of(t)) for d, t in zip(corpus, token_lists, strict=True)),
        )
    build = time.perf_counter() - start
    rows = [("FTS5: build (same tokens)", f"{build:.1f} s, {db.stat().st_size / 1e6:.0f} MB")]
    add = []
    for r in range(rounds):
        docs = page(rng, vocab, weights, 20, f"https://example.test/fts{r}")

        def insert(docs=docs) -> None:
            with con:
                con.executemany(
                    "INSERT INTO c(id, body) VALUES (?, ?)",
                    ((d.id, text_of(tokenizer(d.text))) for d in docs),
                )

        add.append(timed(insert))
    rows.append(("FTS5: add 20-doc page incl. tokenise + commit", f"p50 {pct(add, 0.5):.1f} ms"))
    sql = "SELECT id, bm25(c) FROM c WHERE c MATCH ? ORDER BY bm25(c) LIMIT 30"

    def query(q: str) -> None:
        terms = [surrogate[t] for t in tokenizer(q) if t in surrogate]
        if terms:
            con.execute(sql, (" OR ".join(terms),)).fetchall()

    for q in queries[:20]:
        query(q)
    q_ms = [timed(lambda q=q: query(q)) for q in queries]
    rows.append(
        ("FTS5: search top-30 (OR of terms)",
         f"p50 {pct(q_ms, 0.5):.2f} ms, p95 {pct(q_ms, 0.95):.2f} ms")
    )  # fmt: skip
    con.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--pretokenized", action="store_true")
    args = parser.parse_args()
    if args.pretokenized:
        global PARTICLES
        PARTICLES = [" "]

    rng = random.Random(7)
    vocab = make_vocab(rng)
    weights = [1.0 / (rank + 1) ** 0.9 for rank in range(len(vocab))]
    rng.shuffle(weights)
    weights = list(itertools.accumulate(weights))  # cumulative: fast rng.choices
    tokenizer = words_only if args.pretokenized else get_tokenizer()
    rows: list[tuple[str, str]] = []

    corpus = [
        doc
        for p in range(args.docs // 20)
        for doc in page(rng, vocab, weights, 20, f"https://example.test/p{p}")
    ]
    t0 = time.perf_counter()
    token_lists = [tokenizer(doc.text) for doc in corpus]
    tok_s = time.perf_counter() - t0
    n_tokens = sum(map(len, token_lists))
    rows.append(
        (
            f"tokenise {len(corpus):,} docs",
            f"{tok_s:.1f} s ({n_tokens / tok_s:,.0f} tokens/s, "
            f"{sum(len(d.text) for d in corpus) / tok_s:,.0f} chars/s)",
        )
    )

    with tempfile.TemporaryDirectory() as tmp:
        persist = Path(tmp) / "bm25"
        index = BM25Index(persist, tokenizer=tokenizer)
        ms = timed(lambda: index.rebuild(corpus))
        rows.append((f"rebuild {len(index):,} docs + full save", f"{ms / 1000:.1f} s"))
        size = sum(f.stat().st_size for f in persist.rglob("*") if f.is_file())
        rows.append(("on-disk size", f"{size / 1e6:.1f} MB"))

        add_ms, tok_ms, save_ms, del_ms = [], [], [], []
        for r in range(args.rounds):
            docs = page(rng, vocab, weights, 20, f"https://example.test/new{r}")
            tok_ms.append(timed(lambda docs=docs: [tokenizer(d.text) for d in docs]))
            add_ms.append(timed(lambda docs=docs: index.add(docs)))
        for r in range(args.rounds):
            del_ms.append(timed(lambda r=r: index.delete_source(f"https://example.test/p{r}")))
        for _ in range(5):
            index._full_pending = True
            save_ms.append(timed(index.save))
        rows.append(
            (
                "add 20-doc page incl. tokenise + save",
                f"p50 {pct(add_ms, 0.5):.1f} ms, p95 {pct(add_ms, 0.95):.1f} ms, "
                f"max {max(add_ms):.1f} ms",
            )
        )
        rows.append(("  of which tokenise 20 docs", f"p50 {pct(tok_ms, 0.5):.1f} ms"))
        rows.append(
            (
                "delete_source (20 docs) incl. save",
                f"p50 {pct(del_ms, 0.5):.1f} ms, p95 {pct(del_ms, 0.95):.1f} ms",
            )
        )
        rows.append(("forced full snapshot save", f"p50 {statistics.median(save_ms):.0f} ms"))
        rows.append(("compaction of postings", f"{timed(index._p.compact):.0f} ms"))

        memory = BM25Index(None, tokenizer=tokenizer)
        memory.rebuild(corpus)
        mem_ms = []
        for r in range(args.rounds):
            docs = page(rng, vocab, weights, 20, f"https://example.test/mem{r}")
            mem_ms.append(timed(lambda docs=docs: memory.add(docs)))
        rows.append(
            ("add 20-doc page, in memory", f"p50 {pct(mem_ms, 0.5):.1f} ms, max {max(mem_ms):.1f}")
        )

        queries = []
        for _ in range(args.queries):
            words = rng.choices(vocab, cum_weights=weights, k=rng.randint(1, 4))
            queries.append(" ".join(words))
        p = index._p

        def exhaustive(q: str) -> None:  # the same query with every posting scored
            terms = p._query_terms(index._query_terms(q, None), index.k1, index.b)
            if terms:
                p._top(*p._accumulate([p._full(t, index.k1, index.b) for t in terms]), 30)

        for q in queries:  # warm-up: steady state, document frequencies cached
            index.search(q, 30)
        q_ms, e_ms = [], []
        for q in queries:  # interleaved, best of 3 each: both see the same machine
            q_ms.append(min(timed(lambda q=q: index.search(q, 30)) for _ in range(3)))
            e_ms.append(min(timed(lambda q=q: exhaustive(q)) for _ in range(3)))
        q_tok = [timed(lambda q=q: tokenizer(q)) for q in queries]
        rows.append(
            (
                f"search top-30 ({len(index):,} docs), best of 3 per query",
                f"p50 {pct(q_ms, 0.5):.2f} ms, p95 {pct(q_ms, 0.95):.2f} ms "
                f"(tokenise p50 {pct(q_tok, 0.5):.2f} ms)",
            )
        )
        rows.append(
            (
                "  same queries, every posting scored (no pruning)",
                f"p50 {pct(e_ms, 0.5):.2f} ms, p95 {pct(e_ms, 0.95):.2f} ms "
                f"(pruned/every: p50 {pct(q_ms, 0.5) / pct(e_ms, 0.5):.2f}, "
                f"p95 {pct(q_ms, 0.95) / pct(e_ms, 0.95):.2f})",
            )
        )
        reopened: list[BM25Index] = []
        ms = timed(lambda: reopened.append(BM25Index(persist, tokenizer=tokenizer)))
        same = reopened[0].search(queries[0], 10) == index.search(queries[0], 10)
        rows.append(("load from disk", f"{ms / 1000:.2f} s (same results: {same})"))
        rows.append(("process peak RSS", f"{peak_rss_mb():.0f} MB"))
        rows.extend(fts5_rows(Path(tmp), corpus, token_lists, queries, tokenizer, rng, vocab,
                              weights, args.rounds))  # fmt: skip

    ids = []
    vocab_ids: dict[str, int] = {}
    for tokens in token_lists:
        ids.append([vocab_ids.setdefault(t, len(vocab_ids)) for t in tokens])
    retriever = bm25s.BM25(k1=2.5, b=0.5, method="lucene")
    ms = timed(
        lambda: retriever.index(
            bm25s.tokenization.Tokenized(ids=ids, vocab=vocab_ids), show_progress=False
        )
    )
    rows.append(("alternative: bm25s re-index from cached ids", f"{ms / 1000:.2f} s"))
    q_ids = [retriever.get_tokens_ids(tokenizer(q)) for q in queries]
    bq = [timed(lambda q=q: retriever.get_scores(q) if q else None) for q in q_ids]
    rows.append(("alternative: bm25s get_scores", f"p50 {pct(bq, 0.5):.2f} ms"))

    width = max(len(name) for name, _ in rows)
    print(f"\n{'measure'.ljust(width)} | result")
    print(f"{'-' * width}-|-{'-' * 40}")
    for name, value in rows:
        print(f"{name.ljust(width)} | {value}")


if __name__ == "__main__":
    main()
