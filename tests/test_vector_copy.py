"""The durable vector copy: kept in step with Chroma, filled for older stores, and the
source of a damaged index's vectors (the salvage itself runs in real processes in
`tests/adversarial/test_storage_faults.py`)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rag_app.config import RAGSettings
from rag_app.index.vector_copy import FILE, VectorCopy, model_key, staged
from rag_app.knowledge import KnowledgeBase
from tests.conftest import CountingEmbedding
from tests.hnsw_files import hold_the_first_restored_write

KEY = model_key("m", 4)


def test_vectors_come_back_bit_for_bit(tmp_path: Path) -> None:
    copy = VectorCopy(tmp_path / FILE)
    vectors = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    copy.put(KEY, ["a", "b", "c"], vectors)
    got = copy.get(KEY, ["a", "c", "zz"], 4)
    assert set(got) == {"a", "c"}
    assert np.array_equal(np.asarray(got["c"], dtype=np.float32), vectors[2])
    assert copy.get(model_key("m", 8), ["a"], 8) == {}  # another model's vectors are not ours
    copy.delete(KEY, ["a"])
    assert copy.ids(KEY) == {"b", "c"} and copy.count(KEY) == 2


def test_a_wrong_length_or_non_finite_vector_is_not_returned(tmp_path: Path) -> None:
    copy = VectorCopy(tmp_path / FILE)
    copy.put(KEY, ["ok", "nan"], [[1.0, 0, 0, 0], [float("nan"), 0, 0, 0]])
    with sqlite3.connect(tmp_path / FILE) as db:
        (model,) = db.execute("SELECT id FROM models WHERE name = ?", (KEY,)).fetchone()
        db.execute("INSERT INTO vectors VALUES (?, 'short', ?)", (model, b"\x00" * 12))
        db.execute("INSERT INTO vectors VALUES (?, 'text', 'not bytes')", (model,))
    assert set(copy.get(KEY, ["ok", "nan", "short", "text"], 4)) == {"ok"}


def test_keep_forgets_other_models_and_chunks_gone(tmp_path: Path) -> None:
    copy = VectorCopy(tmp_path / FILE)
    other = model_key("old", 4)
    copy.put(other, ["a", "b"], [[1.0, 0, 0, 0]] * 2)
    copy.put(KEY, ["a", "b", "c"], [[0, 1.0, 0, 0]] * 3)
    copy.keep(KEY, ["a", "c"])
    assert copy.count(other) == 0 and copy.ids(KEY) == {"a", "c"}


def test_an_unreadable_file_is_set_aside_and_begun_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / FILE).write_bytes(b"this is no database\x00" * 400)
    with caplog.at_level(logging.WARNING):
        copy = VectorCopy(tmp_path / FILE)
    copy.put(KEY, ["a"], [[1.0, 0, 0, 0]])
    assert copy.count(KEY) == 1
    aside = list(tmp_path.glob(f"{FILE}.damaged-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is no database")
    assert "set aside" in caplog.text


def test_a_failing_write_turns_the_copy_off_without_failing_the_caller(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = VectorCopy(tmp_path / FILE)
    copy.put(KEY, ["a"], [[1.0, 0, 0, 0]])
    copy._db = sqlite3.connect(  # a database that refuses writes, as a full disk would
        f"file:{tmp_path / FILE}?mode=ro", uri=True, check_same_thread=False
    )
    with caplog.at_level(logging.WARNING):
        copy.put(KEY, ["b"], [[0, 1.0, 0, 0]])  # no exception
    assert not copy.usable and "vector copy is off" in caplog.text
    assert copy.get(KEY, ["a"], 4) == {} and copy.count(KEY) == 0  # off: asks nothing
    assert VectorCopy(tmp_path / FILE).ids(KEY) == {"a"}  # what it held is still there


def _notes(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (root / f"n{i}.md").write_text(
            f"# Note {i}\n\nvcword{i} is written here, with more words about topic {i}.\n",
            encoding="utf-8",
        )
    return root


def _copy_rows(settings: RAGSettings) -> dict[str, bytes]:
    with sqlite3.connect(Path(settings.chromadb_persist_dir) / FILE) as db:
        return dict(db.execute("SELECT id, vector FROM vectors"))


async def _indexed_store(
    settings: RAGSettings, embed: CountingEmbedding, tmp_path: Path, notes: int
) -> tuple[set[str], str]:
    """A closed store holding `notes` notes: its chunk ids and the copy's model key."""
    kb = KnowledgeBase(settings, embed_model=embed)
    await kb.open()
    await kb.index_dir(_notes(tmp_path / "notes", notes))
    ids, key = kb.store.chroma.all_ids(), kb.store.chroma.copy_key
    await kb.aclose()
    return ids, key


async def _open_until_the_copy_holds(
    settings: RAGSettings, embed: CountingEmbedding, ids: set[str]
) -> None:
    """Open the store; its background fill must make the copy's ids `ids` within 30 s."""
    kb = KnowledgeBase(settings, embed_model=embed)
    await kb.open()
    try:
        deadline = time.monotonic() + 30
        while set(_copy_rows(settings)) != ids and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(_copy_rows(settings)) == ids
    finally:
        await kb.aclose()


async def test_every_write_and_delete_reaches_the_copy(kb: KnowledgeBase, tmp_path: Path) -> None:
    notes = _notes(tmp_path / "notes", 5)
    await kb.index_dir(notes)
    chroma = kb.store.chroma.collection.get(include=["embeddings"])
    rows = _copy_rows(kb.settings)
    assert set(rows) == set(chroma["ids"])
    for i, vec in zip(chroma["ids"], chroma["embeddings"], strict=True):  # Chroma keeps
        kept = np.frombuffer(rows[i], dtype="<f4")  # them unit length: the copy as given
        assert np.allclose(kept / np.linalg.norm(kept), vec, rtol=0, atol=1e-6)
    gone = set(kb.store.chroma.ids_for_source((notes / "n1.md").as_uri()))
    await kb.delete_source(str(notes / "n1.md"))
    left = set(_copy_rows(kb.settings))
    assert gone and not gone & left and left == set(kb.store.chroma.all_ids())


async def test_a_store_without_a_copy_gets_one_at_open(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    ids, _ = await _indexed_store(settings, counting_embed, tmp_path, 6)
    (Path(settings.chromadb_persist_dir) / FILE).unlink()  # a store from before the copy
    await _open_until_the_copy_holds(settings, counting_embed, ids)


async def test_an_open_drops_vectors_of_chunks_chroma_no_longer_has(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    ids, key = await _indexed_store(settings, counting_embed, tmp_path, 3)
    copy = VectorCopy(Path(settings.chromadb_persist_dir) / FILE)
    copy.put(key, ["gone-1", "gone-2"], [[0.5] * 384] * 2)  # as a kill between the writes
    copy.close()
    await _open_until_the_copy_holds(settings, counting_embed, ids)


async def test_a_reindex_embeds_anew_unless_restoring(
    kb: KnowledgeBase, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    await kb.index_dir(_notes(tmp_path / "notes", 4))
    chunks = kb.store.count()
    before = counting_embed.texts
    assert await kb.reindex() == chunks
    assert counting_embed.texts - before == chunks and kb.reembedded == chunks
    before = counting_embed.texts
    assert await kb.reindex(reuse_copy=True) == chunks
    assert counting_embed.texts == before and kb.reembedded == 0
    assert set(_copy_rows(kb.settings)) == kb.store.chroma.all_ids()
    hits = (await kb.retrieve("vcword2 is written here", mode="vector")).hits
    assert hits and "vcword2" in hits[0].text


@pytest.mark.parametrize(
    "layout",
    [
        ["CREATE TABLE vectors (model TEXT, id TEXT, vector BLOB)", "PRAGMA user_version = 7"],
        [  # this format's number, but no models table
            "CREATE TABLE vectors (model INTEGER, id TEXT, vector BLOB, UNIQUE (model, id))",
            "CREATE TABLE state (key TEXT PRIMARY KEY, value INTEGER)",
            "PRAGMA user_version = 1",
        ],
        [  # no vector column: every write would fail, in every process
            "CREATE TABLE models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
            "CREATE TABLE vectors (model INTEGER, id TEXT, UNIQUE (model, id))",
            "CREATE TABLE state (key TEXT PRIMARY KEY, value INTEGER)",
            "PRAGMA user_version = 1",
        ],
        [  # vectors without the unique (model, id): duplicates would pile up
            "CREATE TABLE models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
            "CREATE TABLE vectors (model INTEGER, id TEXT, vector BLOB)",
            "CREATE TABLE state (key TEXT PRIMARY KEY, value INTEGER)",
            "PRAGMA user_version = 1",
        ],
    ],
)
def test_a_file_of_another_layout_is_set_aside(tmp_path: Path, layout: list[str]) -> None:
    with sqlite3.connect(tmp_path / FILE) as db:
        for statement in layout:
            db.execute(statement)
    copy = VectorCopy(tmp_path / FILE)
    copy.put(KEY, ["a"], [[1.0, 0, 0, 0]])
    copy.put(KEY, ["a"], [[0, 1.0, 0, 0]])
    assert copy.usable and copy.ids(KEY) == {"a"} and copy.count(KEY) == 1
    assert len(list(tmp_path.glob(f"{FILE}.damaged-*"))) == 1


def test_a_copy_from_the_first_release_of_the_format_is_kept(tmp_path: Path) -> None:
    """Its layout had no state table yet: added, nothing set aside, rows kept."""
    with sqlite3.connect(tmp_path / FILE) as db:
        db.execute("CREATE TABLE models (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
        db.execute(
            "CREATE TABLE vectors (model INTEGER NOT NULL, id TEXT NOT NULL, "
            "vector BLOB NOT NULL, UNIQUE (model, id))"
        )
        db.execute("INSERT INTO models VALUES (1, ?)", (KEY,))
        db.execute("INSERT INTO vectors VALUES (1, 'a', ?)", (np.ones(4, "<f4").tobytes(),))
        db.execute("PRAGMA user_version = 1")
    copy = VectorCopy(tmp_path / FILE)
    assert copy.ids(KEY) == {"a"} and not copy.was_clean
    assert not list(tmp_path.glob(f"{FILE}.damaged-*"))


def test_rows_a_stopped_reindex_staged_are_dropped_at_the_next_open(tmp_path: Path) -> None:
    copy = VectorCopy(tmp_path / FILE)
    copy.put(KEY, ["a"], [[1.0, 0, 0, 0]])
    copy.put(staged(KEY), ["a", "b"], [[0, 1.0, 0, 0]] * 2)
    copy._db = None  # the process ended mid-reindex
    again = VectorCopy(tmp_path / FILE)
    assert again.count(staged(KEY)) == 0 and again.ids(KEY) == {"a"}
    again.put(staged(KEY), ["a"], [[0, 0, 1.0, 0]])
    again.promote(KEY)  # a reindex's switch
    assert again.get(KEY, ["a"], 4) == {"a": [0, 0, 1.0, 0]} and again.count(staged(KEY)) == 0


def test_a_file_that_cannot_be_opened_now_turns_the_copy_off_and_is_kept(
    tmp_path: Path,
) -> None:
    (tmp_path / FILE).mkdir()  # e.g. no permission, a lock, an I/O error: not the file's fault
    assert VectorCopy.for_store(tmp_path) is None
    assert (tmp_path / FILE).is_dir() and not list(tmp_path.glob(f"{FILE}.damaged-*"))


def test_a_clean_close_is_recorded_and_an_unclean_one_is_not(tmp_path: Path) -> None:
    copy = VectorCopy(tmp_path / FILE)
    assert not copy.was_clean and copy.incomplete  # a new file: nothing to trust yet
    copy.put(KEY, ["a"], [[1.0, 0, 0, 0]])
    copy.close()  # never compared with Chroma (e.g. an open that failed): still unclean
    assert not VectorCopy(tmp_path / FILE).was_clean
    copy = VectorCopy(tmp_path / FILE)
    copy.incomplete = False  # as a full comparison with Chroma leaves it
    copy.close()
    again = VectorCopy(tmp_path / FILE)
    assert again.was_clean and not again.incomplete
    again.incomplete = True  # e.g. a fill stopped part-way
    again.close()
    assert not VectorCopy(tmp_path / FILE).was_clean  # and still open: a kill looks the same
    assert not VectorCopy(tmp_path / FILE).was_clean


async def test_check_counts_what_the_copy_lacks_and_repair_fills_it(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    await kb.index_dir(_notes(tmp_path / "notes", 3))
    assert (await kb.check()).missing_in_vector_copy == 0
    with sqlite3.connect(Path(kb.settings.chromadb_persist_dir) / FILE) as db:
        db.execute("DELETE FROM vectors WHERE id IN (SELECT id FROM vectors LIMIT 2)")
    report = await kb.check()
    assert report.missing_in_vector_copy == 2 and report.ok  # searches never use the copy
    assert (await kb.check(repair=True)).repaired
    assert (await kb.check()).missing_in_vector_copy == 0
    assert set(_copy_rows(kb.settings)) == kb.store.chroma.all_ids()


async def test_after_an_unclean_close_the_copy_is_compared_id_by_id(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    """A stale row and a missing one leave the counts equal: only the full comparison an
    unclean close asks for finds them."""
    ids, key = await _indexed_store(settings, counting_embed, tmp_path, 3)
    with sqlite3.connect(Path(settings.chromadb_persist_dir) / FILE) as db:
        db.execute("DELETE FROM vectors WHERE id = ?", (sorted(ids)[0],))
        db.execute("UPDATE state SET value = 0 WHERE key = 'clean'")  # as a kill leaves it
    copy = VectorCopy(Path(settings.chromadb_persist_dir) / FILE)
    copy.put(key, ["stale"], [[0.5] * 384])
    copy._db = None  # gone without a clean close
    await _open_until_the_copy_holds(settings, counting_embed, ids)


async def test_a_store_opened_with_another_model_keeps_its_vectors_under_their_own_model(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    """A store whose chunks were embedded by another model (opened for `rag reindex`):
    its vectors are kept under that model, and never restored as the configured one's."""
    import chromadb
    from chromadb.api.shared_system_client import SharedSystemClient

    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    await kb.index_dir(_notes(tmp_path / "notes", 3))
    chunks, configured = kb.store.count(), kb.store.chroma.copy_key
    await kb.aclose()
    (Path(settings.chromadb_persist_dir) / FILE).unlink()
    SharedSystemClient.clear_system_cache()
    client = chromadb.PersistentClient(path=settings.chromadb_persist_dir)
    client.get_collection("knowledge").modify(
        metadata={"embedding_model": "an-older-model", "embedding_dimension": 384}
    )
    del client
    SharedSystemClient.clear_system_cache()
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open(allow_model_mismatch=True)
    try:
        older = model_key("an-older-model", 384)
        assert kb.store.chroma.copy_key == older
        for thread in kb._background:
            thread.join(30)
        copy = VectorCopy(Path(settings.chromadb_persist_dir) / FILE)
        assert copy.count(older) == chunks and copy.count(configured) == 0
        copy.close()
        assert await kb.reindex(reuse_copy=True) == chunks
        assert kb.reembedded == chunks  # none of the older model's vectors were taken
    finally:
        await kb.aclose()
    names = sqlite3.connect(Path(settings.chromadb_persist_dir) / FILE).execute(
        "SELECT name FROM models"
    )
    assert [n for (n,) in names] == [configured]


async def test_a_reindex_stopped_part_way_leaves_the_live_vectors_as_they_were(
    kb: KnowledgeBase,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await kb.index_dir(_notes(tmp_path / "notes", 70))
    chunks = kb.store.count()
    assert chunks > 64  # two batches at least
    before = _copy_rows(kb.settings)
    inner = type(counting_embed)._get_text_embeddings
    embedded = {"n": 0}

    def failing(self: CountingEmbedding, texts: list[str]) -> list[list[float]]:
        if embedded["n"] >= 64:  # after the first batch of the reindex was written
            raise RuntimeError("the embedding server went away")
        embedded["n"] += len(texts)
        return [[-x for x in v] for v in inner(self, texts)]  # other vectors, same model name

    monkeypatch.setattr(type(counting_embed), "_get_text_embeddings", failing)
    with pytest.raises(Exception, match="went away"):
        await kb.reindex()
    with sqlite3.connect(Path(kb.settings.chromadb_persist_dir) / FILE) as db:
        live = dict(
            db.execute(
                "SELECT v.id, v.vector FROM vectors v JOIN models m ON v.model = m.id "
                "WHERE m.name = ?",
                (kb.store.chroma.copy_key,),
            )
        )
        staged = db.execute("SELECT count(*) FROM vectors").fetchone()[0] - len(live)
    assert live == before and staged == 64  # written, but not as the live vectors
    monkeypatch.undo()
    assert await kb.reindex() == chunks
    names = sqlite3.connect(Path(kb.settings.chromadb_persist_dir) / FILE).execute(
        "SELECT name FROM models"
    )
    assert [n for (n,) in names] == [kb.store.chroma.copy_key]
    assert set(_copy_rows(kb.settings)) == kb.store.chroma.all_ids()


async def test_a_reindex_leaves_the_copy_whole_for_a_clean_close(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    await kb.index_dir(_notes(tmp_path / "notes", 2))
    copy = kb.store.vector_copy
    assert copy is not None
    copy.incomplete = True  # as after an unclean close, before the fill compared
    await kb.reindex()
    assert not copy.incomplete


async def test_a_set_aside_collection_without_real_vectors_holds_nothing_off(
    settings: RAGSettings, counting_embed: CountingEmbedding, tmp_path: Path
) -> None:
    """Sources and change-log collections hold placeholder vectors: listed as pending
    after their index was set aside, they must not stop the copy's fill for good."""
    from rag_app.index.vector_salvage import mark_pending, pending

    ids, _ = await _indexed_store(settings, counting_embed, tmp_path, 2)
    (Path(settings.chromadb_persist_dir) / FILE).unlink()
    mark_pending(settings.chromadb_persist_dir, ["knowledge_sources"])
    await _open_until_the_copy_holds(settings, counting_embed, ids)
    assert pending(settings.chromadb_persist_dir) == []


RESTORE_QUERY = "vcword2 is written here"


async def _damaged_store(
    settings: RAGSettings, embed: CountingEmbedding, tmp_path: Path
) -> tuple[list[str], set[str]]:
    """A closed store of 6 notes whose HNSW files Chroma can no longer load: the vector
    hits for RESTORE_QUERY before the damage, and the chunk ids."""
    from chromadb.api.shared_system_client import SharedSystemClient

    from tests.hnsw_files import persist_hnsw_then_drop_the_filler

    kb = KnowledgeBase(settings, embed_model=embed)
    await kb.open()
    await kb.index_dir(_notes(tmp_path / "notes", 6))
    before = [h.node_id for h in (await kb.retrieve(RESTORE_QUERY, mode="vector")).hits]
    ids = kb.store.chroma.all_ids()
    await kb.aclose()
    SharedSystemClient.clear_system_cache()
    folder = persist_hnsw_then_drop_the_filler(Path(settings.chromadb_persist_dir))
    (folder / "header.bin").write_bytes(b"\x00garbage" * 12)  # Chroma cannot load it now
    return before, ids


@pytest.mark.parametrize("exact_limit", [20_000, 3, 0])
async def test_vector_searches_answer_from_the_copy_while_a_set_aside_index_is_restored(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    exact_limit: int,
) -> None:
    """Chroma's HNSW files damaged on disk: the store opens with them set aside and
    restores the vectors from the copy (6 min at 100k chunks). Searches made meanwhile,
    the restore held at its first write, find by vector what they found before the damage
    (the emptied index found nothing), whatever RAG_EXACT_SEARCH_MAX_CHUNKS says, and the
    same after the restore; the no-match rule stays off meanwhile, as it was before the
    copy answered. With exact search off (0) the copy is not held in memory."""

    settings = settings.model_copy(update={"rag_exact_search_max_chunks": exact_limit})
    before, _ids = await _damaged_store(settings, counting_embed, tmp_path)
    held, release = hold_the_first_restored_write(monkeypatch)
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    try:
        assert kb.vectors_set_aside
        assert await asyncio.to_thread(held.wait, 60)
        assert kb.restoring == (0, 0)  # held at its first write (`rag service status`)
        during = [h.node_id for h in (await kb.retrieve(RESTORE_QUERY, mode="vector")).hits]
        vector = counting_embed.get_query_embedding(RESTORE_QUERY)
        found = kb.store.query_vectors(vector, 3)
        if exact_limit:
            assert during == before
            assert len(kb.store.chroma.exact or []) == 6
            assert found.spread is None  # the no-match rule stays off meanwhile
        else:
            assert during == [] and kb.store.chroma.exact is None
        release.set()
        assert kb._reembedding is not None
        await kb._reembedding
        assert not kb.vectors_set_aside and kb.reembedded == 0 and kb.restoring is None
        after = await kb.retrieve(RESTORE_QUERY, mode="vector")
        assert [h.node_id for h in after.hits] == before
    finally:
        release.set()
        await kb.aclose()


@pytest.mark.parametrize("exact_limit", [20_000, 3])
async def test_a_failed_restore_keeps_answering_from_the_copy(
    settings: RAGSettings,
    counting_embed: CountingEmbedding,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    exact_limit: int,
) -> None:
    """The copy lacks a chunk and the embedding provider is down: the restore fails (the
    next start tries again), and vector searches go on answering from the copy — also
    after the provider is back and a page is written (a store above the exact-search
    limit kept it too), during the `rag reindex` the error message suggests, and until
    that reindex takes over."""

    settings = settings.model_copy(update={"rag_exact_search_max_chunks": exact_limit})
    before, ids = await _damaged_store(settings, counting_embed, tmp_path)
    lost = before[0]
    with sqlite3.connect(Path(settings.chromadb_persist_dir) / FILE) as db:
        db.execute("DELETE FROM vectors WHERE id = ?", (lost,))

    def down(texts: list[str]) -> list[list[float]]:
        raise RuntimeError("the embedding provider is down")

    monkeypatch.setattr(counting_embed, "_get_text_embeddings", down)
    kb = KnowledgeBase(settings, embed_model=counting_embed)
    await kb.open()
    held, release = threading.Event(), threading.Event()
    try:
        assert kb._reembedding is not None
        await kb._reembedding
        assert kb.vectors_set_aside  # still to do
        during = [h.node_id for h in (await kb.retrieve(RESTORE_QUERY, mode="vector")).hits]
        assert during and lost not in during
        assert during[: len(before) - 1] == [i for i in before if i != lost]
        assert len(kb.store.chroma.exact or []) == len(ids) - 1
        stop = threading.Event()
        stop.set()
        key = kb.store.chroma.copy_key
        assert kb.store.search_the_copy(key, stop) == 0  # a closing store stops it

        monkeypatch.undo()  # the provider is back: a page is written
        (tmp_path / "more").mkdir()
        (tmp_path / "more" / "late.md").write_text(
            "# Late\n\nlatecomer words about a lighthouse keeper.\n", encoding="utf-8"
        )
        await kb.index_dir(tmp_path / "more")
        assert len(kb.store.chroma.exact or []) == len(ids)
        late = (await kb.retrieve("a lighthouse keeper", mode="vector")).hits
        assert late and "lighthouse" in late[0].text

        held, release = hold_the_first_restored_write(monkeypatch)
        reindex = asyncio.create_task(kb.reindex())
        assert await asyncio.to_thread(held.wait, 60)
        meanwhile = await kb.retrieve(RESTORE_QUERY, mode="vector")
        assert [h.node_id for h in meanwhile.hits][: len(before) - 1] == [
            i for i in before if i != lost
        ]
        release.set()
        assert await reindex == len(ids) + 1
        assert not kb.vectors_set_aside
        after = [h.node_id for h in (await kb.retrieve(RESTORE_QUERY, mode="vector")).hits]
        assert after[: len(before)] == before  # the lost chunk embedded again
    finally:
        release.set()
        await kb.aclose()
