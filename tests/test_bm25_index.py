"""BM25Index: search, upserts, deletes, persistence, recovery, and the retriever."""

from __future__ import annotations

import json
import logging
import random
import threading
from pathlib import Path

import bm25s
import numpy as np
import pytest

from rag_app.index import bm25_index as bm25_module
from rag_app.index import bm25_segments
from rag_app.index.bm25_index import BM25Document, BM25Index, FieldWeights

MONSTERS = [
    ("t1", "名前: りゅうおう HP: 90 MP: 75", "https://game.test/monsters"),
    ("t2", "名前: スライム HP: 8 MP: 0", "https://game.test/monsters"),
    ("t3", "名前: ドラキー HP: 12 MP: 3", "https://game.test/monsters"),
    ("p1", "スライムの攻撃力は低いが、群れで現れる。", "https://game.test/guide"),
    ("p2", "はぐれメタルは経験値が高い。メタルスライムも同じ。", "https://game.test/guide"),
    ("e1", "Python asyncio makes HTTP servers easy to write.", "https://dev.test/asyncio"),
]


def docs_of(rows: list[tuple[str, str, str]]) -> list[BM25Document]:
    return [BM25Document(i, text, src) for i, text, src in rows]


def space_tokenizer(text: str) -> list[str]:
    return text.split()


@pytest.fixture
def index() -> BM25Index:
    idx = BM25Index(None)
    idx.add(docs_of(MONSTERS))
    return idx


def test_add_search_delete(index: BM25Index) -> None:
    assert len(index) == 6
    hits = index.search("りゅうおう", 5)
    assert hits[0][0] == "t1"
    assert all(score > 0 for _, score in hits)
    assert index.search("asyncio", 3)[0][0] == "e1"
    assert index.delete_ids(["t1", "nope"]) == 1
    assert [i for i, _ in index.search("りゅうおう", 5)] == []
    assert len(index) == 5
    assert "t1" not in index.ids()


def test_results_sorted_positive_and_capped(index: BM25Index) -> None:
    hits = index.search("スライム HP", 10)
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)
    assert {"t1", "t2", "t3", "p1", "p2"} <= {i for i, _ in hits}
    assert len(index.search("スライム HP", 2)) == 2
    assert index.search("スライム", 0) == []
    assert index.search("存在しない単語ですよ", 5) == []
    assert index.search("", 5) == []


def test_score_order_follows_tf_and_length() -> None:
    idx = BM25Index(None, tokenizer=space_tokenizer)
    idx.add(
        [
            BM25Document("twice-short", "slime slime king"),
            BM25Document("once-long", "slime a b c d e f g h i j k l"),
            BM25Document("none", "golem dragon"),
            BM25Document("other", "castle town"),
        ]
    )
    hits = idx.search("slime", 10)
    assert [i for i, _ in hits] == ["twice-short", "once-long"]
    assert hits[0][1] > hits[1][1] > 0


def test_scores_match_bm25s_lucene() -> None:
    rng = random.Random(3)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 25))) for _ in range(60)]
    idx = BM25Index(None, k1=2.5, b=0.5, tokenizer=space_tokenizer)
    idx.add([BM25Document(f"d{i}", t) for i, t in enumerate(texts)])
    ref = bm25s.BM25(k1=2.5, b=0.5, method="lucene")
    ref.index([t.split() for t in texts], show_progress=False)
    for query in (["w1"], ["w2", "w7"], ["w3", "w3", "w30"], ["w39", "w0", "w5", "w11"]):
        expected = ref.get_scores(query)
        got = dict(idx.search(" ".join(query), 100))
        for i, score in enumerate(expected):
            if score > 0:
                assert got[f"d{i}"] == pytest.approx(float(score), rel=1e-5)
            else:
                assert f"d{i}" not in got


def test_upsert_replaces(index: BM25Index) -> None:
    index.add([BM25Document("t2", "名前: ゴーレム HP: 70", "https://other.test")])
    assert len(index) == 6
    assert "t2" not in [i for i, _ in index.search("スライム", 10)]
    assert index.search("ゴーレム", 3)[0][0] == "t2"
    assert index.ids_for_source("https://other.test") == ["t2"]
    assert index.sources()["https://game.test/monsters"] == 2


def test_delete_source_and_sources(index: BM25Index) -> None:
    assert index.sources() == {
        "https://game.test/monsters": 3,
        "https://game.test/guide": 2,
        "https://dev.test/asyncio": 1,
    }
    assert index.delete_source("https://game.test/monsters") == 3
    assert index.delete_source("https://game.test/monsters") == 0
    assert index.ids() == {"p1", "p2", "e1"}
    assert "https://game.test/monsters" not in index.sources()


def test_ids_for_source_and_membership(index: BM25Index) -> None:
    assert index.ids_for_source("https://game.test/monsters") == ["t1", "t2", "t3"]
    assert index.ids_for_source("https://nowhere.test") == []
    assert "p1" in index and "missing" not in index


def test_replace_source_is_one_step(index: BM25Index) -> None:
    written, removed = index.replace_source(
        "https://game.test/monsters",
        [BM25Document("t1", "名前: りゅうおう HP: 90 MP: 75", "https://game.test/monsters"),
         BM25Document("t9", "名前: ゴーレム HP: 70", "https://game.test/monsters")],
    )  # fmt: skip
    assert (written, removed) == (1, 2)  # t1 kept as is, t9 new, t2 + t3 gone
    assert index.ids_for_source("https://game.test/monsters") == ["t1", "t9"]
    assert index.search("ゴーレム", 3)[0][0] == "t9"
    assert index.search("ドラキー", 3) == []


def test_per_query_k1_b_match_an_index_built_with_them(index: BM25Index) -> None:
    other = BM25Index(None, k1=1.2, b=0.75)
    other.add(docs_of(MONSTERS))
    assert index.search("スライム HP", 5, k1=1.2, b=0.75) == other.search("スライム HP", 5)


def test_rejects_bad_documents() -> None:
    idx = BM25Index(None)
    with pytest.raises(ValueError, match="source"):
        idx.add([BM25Document("x", "text", ["bad"])])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="id"):
        idx.add([BM25Document("", "text")])
    assert len(idx) == 0


def test_clear_and_rebuild(index: BM25Index) -> None:
    index.clear()
    assert len(index) == 0
    assert index.search("スライム", 5) == []
    assert index.rebuild(docs_of(MONSTERS[:3])) == 3
    assert index.search("りゅうおう", 5)[0][0] == "t1"


def _random_ops_corpus(seed: int) -> tuple[BM25Index, dict[str, BM25Document]]:
    """Apply a random mix of adds, upserts and deletes; return the index and the truth."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(120)]
    live: dict[str, BM25Document] = {}
    idx = BM25Index(None, tokenizer=space_tokenizer)
    for step in range(150):
        batch = []
        for _ in range(rng.randint(1, 8)):
            doc_id = f"d{rng.randint(0, 400)}"
            text = " ".join(rng.choices(words, k=rng.randint(0, 30)))
            batch.append(BM25Document(doc_id, text, f"s{rng.randint(0, 20)}"))
        idx.add(batch)
        live.update({d.id: d for d in batch})
        if step % 3 == 0:
            gone = rng.sample(sorted(live), k=min(len(live), rng.randint(1, 6)))
            assert idx.delete_ids(gone) == len(gone)
            for doc_id in gone:
                del live[doc_id]
        if step == 70:
            idx._p.compact()  # exercise search across compacted + delta postings
    return idx, live


def test_incremental_equals_from_scratch() -> None:
    incremental, live = _random_ops_corpus(11)
    scratch = BM25Index(None, tokenizer=space_tokenizer)
    scratch.rebuild(live.values())
    assert incremental.ids() == scratch.ids() == set(live)
    assert incremental.sources() == scratch.sources()
    rng = random.Random(5)
    for _ in range(40):
        query = " ".join(f"w{rng.randint(0, 125)}" for _ in range(rng.randint(1, 4)))
        a, b = incremental.search(query, 15), scratch.search(query, 15)
        assert [i for i, _ in a] == [i for i, _ in b]
        assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-12)


def test_persistence_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "bm25"
    first = BM25Index(path)
    assert not path.exists()  # created on first write only
    first.add(docs_of(MONSTERS))
    first.delete_ids(["t3"])
    first.add([BM25Document("t2", "名前: ゴーレム HP: 70", "https://x.test")])
    second = BM25Index(path)
    assert second.needs_rebuild is False
    assert second.ids() == first.ids()
    assert second.sources() == first.sources()
    assert second.ids_for_source("https://x.test") == ["t2"]
    for query in ("りゅうおう", "スライム HP", "ゴーレム", "asyncio"):
        assert second.search(query, 10) == first.search(query, 10)
    second.delete_source("https://game.test/guide")
    third = BM25Index(path)
    assert third.ids() == {"t1", "t2", "e1"}


@pytest.mark.parametrize("slack", [1000, 0])
def test_segment_merges_keep_disk_equal_to_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slack: int
) -> None:
    # slack 1000: small segments merged into base + tail; slack 0: frequent full snapshots.
    monkeypatch.setattr(bm25_module, "MAX_SEGMENTS", 3)
    monkeypatch.setattr(bm25_module, "FULL_SNAPSHOT_SLACK", slack)
    path = tmp_path / "bm25"
    idx = BM25Index(path, tokenizer=space_tokenizer)
    rng = random.Random(slack)
    words = [f"w{i}" for i in range(15)]
    for step in range(30):
        if step % 4 == 3:
            idx.delete_ids(rng.sample(sorted(idx.ids()), k=2))
        else:
            doc_id = f"d{rng.randint(0, 12)}"  # often an upsert
            text = " ".join(rng.choices(words, k=rng.randint(1, 6)))
            idx.add([BM25Document(doc_id, text, f"s{step % 3}")])
        segments = [p for p in path.iterdir() if p.name.startswith("seg-")]
        assert 1 <= len(segments) <= 3
        reopened = BM25Index(path, tokenizer=space_tokenizer)
        assert reopened.ids() == idx.ids()
        assert reopened.sources() == idx.sources()
        for word in words[:5]:
            assert reopened.search(word, 20) == idx.search(word, 20)


def test_saves_leave_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "bm25"
    idx = BM25Index(path)
    idx.add(docs_of(MONSTERS))
    idx.delete_source("https://dev.test/asyncio")
    idx.clear()
    idx.rebuild(docs_of(MONSTERS))
    names = sorted(p.name for p in path.iterdir())
    assert names == ["manifest.json", names[1]]
    assert names[1].startswith("seg-")
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_failed_save_keeps_previous_index(tmp_path: Path, monkeypatch, caplog) -> None:
    path = tmp_path / "bm25"
    BM25Index(path).add(docs_of(MONSTERS[:3]))
    idx = BM25Index(path)

    def boom(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(bm25_segments, "write_manifest", boom)
    with caplog.at_level(logging.WARNING):
        idx.add(docs_of(MONSTERS[3:]))  # segment written, commit point fails
    assert "could not be saved" in caplog.text
    assert len(idx) == 6  # memory is fine
    monkeypatch.undo()
    reopened = BM25Index(path)
    assert reopened.ids() == {"t1", "t2", "t3"}  # the old, complete state
    assert reopened.needs_rebuild is False
    assert reopened.search("りゅうおう", 3)[0][0] == "t1"
    idx.save()  # the pending changes are written once the disk works again
    assert BM25Index(path).ids() == {d[0] for d in MONSTERS}


def _saved(tmp_path: Path) -> Path:
    path = tmp_path / "bm25"
    BM25Index(path).add(docs_of(MONSTERS))
    return path


def _assert_empty_and_flagged(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        idx = BM25Index(path)
    assert len(idx) == 0
    assert idx.needs_rebuild is True
    assert any(r.levelno == logging.WARNING and "rebuilt" in r.message for r in caplog.records)
    idx.rebuild(docs_of(MONSTERS))
    assert idx.needs_rebuild is False
    reopened = BM25Index(path)
    assert reopened.needs_rebuild is False
    assert len(reopened) == len(MONSTERS)


def test_corrupt_manifest_starts_empty_and_flags_rebuild(tmp_path: Path, caplog) -> None:
    path = _saved(tmp_path)
    (path / "manifest.json").write_text("{not json", encoding="utf-8")
    _assert_empty_and_flagged(path, caplog)


def test_corrupt_segment_starts_empty_and_flags_rebuild(tmp_path: Path, caplog) -> None:
    path = _saved(tmp_path)
    (segment,) = [p for p in path.iterdir() if p.name.startswith("seg-")]
    segment.write_bytes(b"\x00garbage")
    _assert_empty_and_flagged(path, caplog)


def test_truncated_segment_starts_empty(tmp_path: Path, caplog) -> None:
    path = _saved(tmp_path)
    (segment,) = [p for p in path.iterdir() if p.name.startswith("seg-")]
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])
    _assert_empty_and_flagged(path, caplog)


def test_missing_segment_starts_empty(tmp_path: Path, caplog) -> None:
    path = _saved(tmp_path)
    for segment in path.glob("seg-*"):
        segment.unlink()
    _assert_empty_and_flagged(path, caplog)


def test_manifest_count_mismatch_starts_empty(tmp_path: Path, caplog) -> None:
    path = _saved(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    manifest["doc_count"] += 1
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    _assert_empty_and_flagged(path, caplog)


def test_version_mismatch_starts_empty_and_flags_rebuild(tmp_path: Path, caplog) -> None:
    path = _saved(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    manifest["version"] = 999
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    _assert_empty_and_flagged(path, caplog)


def test_foreign_directory_content_flags_rebuild(tmp_path: Path, caplog) -> None:
    path = tmp_path / "bm25"
    path.mkdir()
    (path / "metadata.json").write_text("{}", encoding="utf-8")  # an older format
    _assert_empty_and_flagged(path, caplog)


def test_missing_or_empty_dir_is_a_fresh_index(tmp_path: Path, caplog) -> None:
    (tmp_path / "empty").mkdir()
    with caplog.at_level(logging.WARNING):
        for path in (tmp_path / "missing", tmp_path / "empty"):
            idx = BM25Index(path)
            assert len(idx) == 0
            assert idx.needs_rebuild is False
    assert not caplog.records


def test_tokenizer_change_flags_rebuild(tmp_path: Path, caplog) -> None:
    path = tmp_path / "bm25"
    BM25Index(path, tokenizer=space_tokenizer).add(
        [BM25Document("a", "Alpha beta"), BM25Document("b", "gamma"), BM25Document("c", "x")]
    )

    def upper(text: str) -> list[str]:
        return text.upper().split()

    with caplog.at_level(logging.WARNING):
        idx = BM25Index(path, tokenizer=upper)
    assert "tokenizer" in caplog.text
    assert idx.needs_rebuild is True  # the text lives in Chroma: the store re-tokenises it
    assert len(idx) == 0


def test_in_memory_index_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    idx = BM25Index(None)
    idx.add(docs_of(MONSTERS))
    idx.delete_source("https://dev.test/asyncio")
    idx.save()
    assert list(tmp_path.iterdir()) == []
    assert idx.search("スライム", 1)


def test_concurrent_writers_and_readers() -> None:
    idx = BM25Index(None, tokenizer=space_tokenizer)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for k in range(60):
                idx.add([BM25Document(f"{w}-{k}", f"slime w{w} n{k}", f"s{w}")])
                if k % 10 == 9:
                    idx.delete_ids([f"{w}-{k - 5}"])
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    def reader() -> None:
        try:
            for _ in range(200):
                for doc_id, score in idx.search("slime w1", 5):
                    assert score > 0 and doc_id
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(idx) == 3 * (60 - 6)
    assert idx.sources() == {"s0": 54, "s1": 54, "s2": 54}


def test_scores_are_plain_floats(index: BM25Index) -> None:
    for _, score in index.search("スライム HP", 5):
        assert type(score) is float
    assert not isinstance(index.search("スライム", 1)[0][1], np.floating)


def test_cursor_is_saved_with_the_index(tmp_path: Path) -> None:
    path = tmp_path / "bm25"
    idx = BM25Index(path)
    idx.add(docs_of(MONSTERS))
    idx.set_cursor({"ts": 123, "seen": ["a"]})
    assert BM25Index(path).cursor == {"ts": 123, "seen": ["a"]}
    idx.delete_ids(["t1"])  # a delta segment keeps the cursor too
    reopened = BM25Index(path)
    assert reopened.cursor == {"ts": 123, "seen": ["a"]}
    assert "t1" not in reopened


def test_context_field_is_searched_with_its_weight() -> None:
    idx = BM25Index(None)
    idx.add(
        [
            BM25Document("row", "名前: スライム HP: 8", "s", context="モンスター一覧"),
            BM25Document("other", "名前: ドラキー HP: 12", "s2", context="呪文一覧"),
        ]
    )
    # the title word finds the row through its context field only
    assert [i for i, _ in idx.search("モンスター")] == ["row"]
    assert idx.search("モンスター", fields=FieldWeights(context=0.0)) == []
    half = idx.search("モンスター", fields=FieldWeights(context=0.5))[0][1]
    full = idx.search("モンスター", fields=FieldWeights(context=1.0))[0][1]
    assert 0 < half < full


def test_a_title_word_counts_once_per_chunk_across_fields() -> None:
    # BM25F: "モンスター" is in every row's title, so its IDF is low for the intro
    # paragraph too; the row's own number decides.
    idx = BM25Index(None)
    intro = "草原に出現するモンスターの一覧です。No.は図鑑番号です。"
    docs = [BM25Document("intro", intro, "s", context="草原のモンスター図鑑")]
    docs += [
        BM25Document(f"r{n}", f"No.: {n}\n名前: ネーム{n}", "s", context="草原のモンスター図鑑")
        for n in range(1, 40)
    ]
    idx.add(docs)
    assert idx.search("草原のモンスター一覧でNo.16のモンスターは？")[0][0] == "r16"


def test_hiragana_and_typo_queries_find_a_katakana_name_through_grams() -> None:
    idx = BM25Index(None)
    idx.add(docs_of(MONSTERS))
    assert {i for i, _ in idx.search("すらいむ", top_k=2)} == {"t2", "p1"}
    assert idx.search("どらき")[0][0] == "t3"  # hiragana, long vowel left out
    assert idx.search("ドラギー")[0][0] == "t3"  # one character wrong
    assert idx.search("すらいむ", fields=FieldWeights(gram=0.0)) == []


def test_bound_terms_pick_the_row_with_that_number() -> None:
    idx = BM25Index(None)
    rows = [
        BM25Document(f"r{n}", f"No.: {n}\n名前: モンスター{n}\nHP: {n * 7}", "s")
        for n in range(1, 60)
    ]
    idx.add(rows)
    assert idx.search("No.57 のモンスターは？")[0][0] == "r57"
    assert idx.search("HPが 399 のモンスター")[0][0] == "r57"


def test_code_name_finds_its_own_entry() -> None:
    """`bisect.bisect_left` asks for the entry that defines it, not the next one, which
    only mentions it but holds `bisect` and `left` more often (MeCab's cut)."""
    idx = BM25Index(None)
    idx.add(
        [
            BM25Document("left", "bisect.bisect_left(a, x, lo=0): Locate the insertion point."),
            BM25Document(
                "right",
                "bisect.bisect_right(a, x): Similar to bisect_left(), but returns an insertion "
                "point to the right of (not the left of) entries; bisect.bisect is an alias.",
            ),
            BM25Document("other", "The heapq module keeps a list in heap order."),
        ]
    )
    assert idx.search("What is the signature of bisect.bisect_left?", 3)[0][0] == "left"
    assert idx.search("bisect_right", 3)[0][0] == "right"


def test_quoted_one_character_key_finds_its_row() -> None:
    """Format codes are rows keyed by one character; case tells `n` from `N`, and the
    code's letter in prose elsewhere does not compete with a quoted key."""
    idx = BM25Index(None)
    idx.add(
        [
            BM25Document("n", "Format: n\nC Type: ssize_t, Python type: integer", key="n"),
            BM25Document("N", "Format: N\nC Type: size_t, Python type: integer", key="N"),
            BM25Document("bang", "Character: !\nByte order: network (= big-endian)", key="!"),
            BM25Document("at", "Character: @\nByte order: native", key="@"),
            BM25Document(
                "notes",
                "The 'n' and 'N' conversion codes are only available for the native size "
                "(n bytes for n items): a format character and its C type.",
            ),
        ]
        + [
            BM25Document(c, f"Format: {c}\nC Type: {t}, Python type: integer", key=c)
            for c, t in zip(
                "bBhHiIlLqQ", ["char", "uchar", "short", "ushort", "int"] * 2, strict=True
            )
        ]
        + [
            BM25Document(f"prose{k}", f"Each format character {k} selects a C type; see n.")
            for k in range(10)
        ]
    )
    assert idx.search("Which C type does the format character 'n' correspond to?", 3)[0][0] == "n"
    assert idx.search("Which C type does the format character 'N' correspond to?", 3)[0][0] == "N"
    assert idx.search("Which byte order does the '!' character select?", 3)[0][0] == "bang"
