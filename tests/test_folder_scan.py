"""Indexing a folder that holds what real folders hold: a file whose name or message reads
like a storage fault, folders that cannot be listed, very deep trees, links out of it."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from rag_app.config import RAGSettings
from rag_app.knowledge import KnowledgeBase
from rag_app.local_files import scan_dir
from tests.conftest import CountingEmbedding


def note(path: Path, word: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {word}\n\n{word} について書かれたメモです。\n", encoding="utf-8")
    return path


async def stored(kb: KnowledgeBase) -> set[str]:
    return set((await kb.stats()).sources)


async def test_a_bad_file_named_like_a_storage_fault_is_listed_and_the_rest_indexed(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """A binary file named `readonly-notes.md` stopped the whole folder with "the store
    folder cannot be written": its refusal names the file, and the text was matched."""
    folder = tmp_path / "docs"
    first, last = note(folder / "a.md", "いちばん"), note(folder / "z.md", "さいご")
    (folder / "readonly-notes.md").write_bytes(b"\x00" * 2000)
    summary = await kb.index_dir(folder)
    assert summary.added == 2 and summary.failed == 1, summary
    assert "readonly-notes.md" in summary.errors[0][0]
    assert {first.as_uri(), last.as_uri()} <= await stored(kb)


async def test_a_folder_that_cannot_be_listed_keeps_what_was_stored_from_it(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subfolder the walk cannot open (permissions; root here reads every folder, so the
    refusal is injected) was taken for empty and its stored files were pruned."""
    folder = tmp_path / "docs"
    note(folder / "open.md", "ひらいた")
    closed = note(folder / "closed" / "c.md", "とじた")
    assert (await kb.index_dir(folder)).added == 2
    real = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) == folder / "closed":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    summary = await kb.index_dir(folder)
    assert summary.deleted == 0 and summary.failed == 1, summary
    assert "Permission denied" in summary.errors[0][1]
    assert closed.as_uri() in await stored(kb)


def test_a_very_deep_tree_is_walked_and_a_path_too_long_is_reported() -> None:
    """1,100 levels (a recursive walk raised RecursionError and indexed nothing) and a
    folder whose path passes the system's limit (listed as unreadable, not fatal). Built
    and removed level by level through directory descriptors, outside pytest's temporary
    folders: no path-based tool copes with it, and pytest's clean-up of a tree left by a
    killed run would fail every later session."""
    root = Path(tempfile.mkdtemp(prefix="rag-deep-tree-")) / "docs"
    note(root / "top.md", "うえ")
    made: list[tuple[int, str]] = []  # (descriptor of the parent, name), top down
    fds = [os.open(root, os.O_DIRECTORY)]
    try:
        for name in ["x"] * 1100 + ["y" * 200] * 12:  # then past PATH_MAX (4,096)
            os.mkdir(name, dir_fd=fds[-1])
            made.append((fds[-1], name))
            fds.append(os.open(name, os.O_DIRECTORY, dir_fd=fds[-1]))
            if len(made) == 1100:
                leaf = os.open("d.md", os.O_WRONLY | os.O_CREAT, dir_fd=fds[-1])
                os.write(leaf, "# そこ\n\nいちばん深いメモ。\n".encode())
                os.close(leaf)
        scan = scan_dir(root.resolve())
        names = [p.name for p in scan.files]
        assert names.count("top.md") == 1 and names.count("d.md") == 1, names
        assert scan.unreadable and all("too long" in why for why in scan.unreadable.values())
    finally:
        if len(fds) > 1100:
            os.unlink("d.md", dir_fd=fds[1100])
        for parent, name in reversed(made):
            os.rmdir(name, dir_fd=parent)
        for fd in fds:
            os.close(fd)
        (root / "top.md").unlink()
        root.rmdir()
        root.parent.rmdir()


async def test_a_link_to_a_file_outside_the_folder_is_not_read(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """A `.txt` link to a file elsewhere (a key, /proc/self/status) was read and served;
    a link to a file inside the folder still is."""
    folder = tmp_path / "docs"
    inside = note(folder / "real.md", "ほんもの")
    secret = note(tmp_path / "elsewhere" / "secret.md", "ひみつ")
    (folder / "leak.md").symlink_to(secret)
    (folder / "alias.md").symlink_to(inside)
    (folder / "hidden.md").symlink_to(folder / ".git" / "key.md")  # inside, but hidden
    note(folder / ".git" / "key.md", "かぎ")
    (folder / "loop.md").symlink_to(folder / "loop.md")  # nothing to read, as before
    summary = await kb.index_dir(folder)
    assert summary.failed == 0, summary  # left out on purpose: exit 0, not 3
    reasons = dict(summary.skipped)
    assert "outside the folder" in reasons[str(folder / "leak.md")]
    assert "hidden file" in reasons[str(folder / "hidden.md")]
    assert len(reasons) == 2, reasons
    sources = await stored(kb)
    assert (folder / "hidden.md").as_uri() not in sources
    assert (folder / "leak.md").as_uri() not in sources and secret.as_uri() not in sources
    assert {inside.as_uri(), (folder / "alias.md").as_uri()} <= sources


async def test_a_link_that_cannot_be_checked_keeps_its_stored_copy(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link whose target cannot be looked at (permissions, a network mount's I/O error;
    injected: root reads everything) is listed as unreadable and its stored copy kept; it
    was passed over as a loop and pruned."""
    folder = tmp_path / "docs"
    target = note(folder / "real.md", "ほんもの")
    link = folder / "link.md"
    link.symlink_to(target)
    assert (await kb.index_dir(folder)).added == 2
    real = os.scandir

    class Entry:
        def __init__(self, entry: Any) -> None:
            self._entry = entry
            self.name, self.path = entry.name, entry.path

        def is_dir(self, **kw: Any) -> bool:
            return bool(self._entry.is_dir(**kw))

        def is_symlink(self) -> bool:
            return bool(self._entry.is_symlink())

        def is_file(self) -> bool:
            if self.name == "link.md":
                raise PermissionError(13, "Permission denied")
            return bool(self._entry.is_file())

    class Listing:
        def __init__(self, path: Any) -> None:
            self._it = real(path)

        def __enter__(self) -> list[Entry]:
            return [Entry(e) for e in self._it.__enter__()]

        def __exit__(self, *exc: Any) -> None:
            self._it.__exit__(*exc)

    monkeypatch.setattr(os, "scandir", Listing)
    summary = await kb.index_dir(folder)
    assert summary.deleted == 0 and summary.failed == 1, summary
    assert link.as_uri() in await stored(kb)


async def test_skipped_links_past_the_listed_ones_are_counted(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_app import knowledge

    monkeypatch.setattr(knowledge, "MAX_LISTED_FILE_ERRORS", 2)
    folder = tmp_path / "docs"
    note(folder / "real.md", "ほんもの")
    outside = note(tmp_path / "elsewhere" / "x.md", "そと")
    for i in range(5):
        (folder / f"leak{i}.md").symlink_to(outside)
    summary = await kb.index_dir(folder)
    assert len(summary.skipped) == 2 and summary.skipped_count == 5, summary


class Overlapping(CountingEmbedding):
    """Counts how many files' embeddings are under way at once (each takes 0.2 s)."""

    _running: int = PrivateAttr(default=0)
    _most: int = PrivateAttr(default=0)

    async def _aget_text_embeddings(self, texts: Sequence[str]) -> list[list[float]]:  # type: ignore[override]
        self._running += 1
        self._most = max(self._most, self._running)
        try:
            await asyncio.sleep(0.2)
            return await super()._aget_text_embeddings(texts)
        finally:
            self._running -= 1


async def test_files_of_a_folder_are_indexed_side_by_side_and_listed_in_order(
    settings: RAGSettings, builtin_embed: BaseEmbedding, tmp_path: Path
) -> None:
    """One file at a time, a file's reading and store write never overlapped another's
    embedding (a folder of small files ran at 0.72–0.83 of the embedder's throughput)."""
    folder = tmp_path / "notes"
    words = ["あお", "あか", "きいろ", "みどり", "しろ", "くろ"]
    for i, word in enumerate(words):
        note(folder / f"{i}.md", word)
    for name in ("b-bad.md", "a-bad.md", "a/x.md", "a b.md"):  # scan order: a/x.md first
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_bytes(b"\x00" * 2000)
    model = Overlapping(builtin_embed)
    kb = KnowledgeBase(settings, embed_model=model)
    try:
        summary = await kb.index_dir(folder)
        assert summary.added == len(words) and summary.failed == 4, summary
        listed = [Path(path).relative_to(folder).as_posix() for path, _ in summary.errors]
        assert listed == ["a/x.md", "a b.md", "a-bad.md", "b-bad.md"], listed
        assert model._most >= 2, model._most
        hit = (await kb.retrieve("みどり", n_results=1, mode="bm25")).hits[0]
        assert hit.source_url == (folder / "3.md").as_uri()
    finally:
        await kb.aclose()


async def test_the_folders_first_failures_are_listed_whichever_finish_first(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the listing limit, the failures listed were the first to finish: a slow one
    early in the folder (a long PDF) was left out for later quick ones."""
    import rag_app.knowledge as knowledge

    folder = tmp_path / "bad"
    for i in range(6):
        (folder / f"f{i}.md").parent.mkdir(exist_ok=True)
        (folder / f"f{i}.md").write_bytes(b"\x00" * 200)
    real = knowledge.fetch_file

    async def slow_first(file: Path, *args: Any, **kwargs: Any) -> Any:
        if file.name == "f0.md":
            await asyncio.sleep(0.5)
        return await real(file, *args, **kwargs)

    monkeypatch.setattr(knowledge, "fetch_file", slow_first)
    monkeypatch.setattr(knowledge, "MAX_LISTED_FILE_ERRORS", 3)
    summary = await kb.index_dir(folder)
    assert summary.failed == 6
    assert [Path(path).name for path, _ in summary.errors] == ["f0.md", "f1.md", "f2.md"]


async def test_a_file_that_became_a_link_out_of_the_folder_is_not_read(tmp_path: Path) -> None:
    """The scan checks links, but a file swapped for a link to a file elsewhere after it
    was read through it and served."""
    from rag_app.errors import RAGError
    from rag_app.fetching import Gone, fetch_file

    folder, secret = tmp_path / "notes", tmp_path / "secret.md"
    secret.write_text("# key\n\nSECRETTOKEN private\n", encoding="utf-8")
    inside = note(folder / "inside.md", "なかみ")
    (folder / "swapped.md").symlink_to(secret)  # as if swapped after the scan
    (folder / "alias.md").symlink_to(inside)
    with pytest.raises(RAGError, match="outside the folder"):
        await fetch_file(folder / "swapped.md", None, within=folder)
    assert "なかみ" in (await fetch_file(folder / "alias.md", None, within=folder)).text
    (folder / "now-a-folder.md").mkdir()  # a file replaced by a folder since the scan
    assert isinstance(await fetch_file(folder / "now-a-folder.md", None, within=folder), Gone)


def test_a_file_swapped_between_its_open_and_the_check_is_not_read(tmp_path: Path) -> None:
    """The file opened is the one checked: a swap after the open is caught as well."""
    from rag_app.errors import RAGError
    from rag_app.local_files import read_bytes_limited

    folder, secret = tmp_path / "notes", tmp_path / "secret.md"
    secret.write_text("SECRETTOKEN private\n", encoding="utf-8")
    target = note(folder / "zz.md", "もと")
    real_open = Path.open

    def open_then_swap(self: Path, *args: Any, **kwargs: Any) -> Any:
        opened = real_open(secret if self == target else self, *args, **kwargs)
        return opened  # what was opened is the secret; the path still names the note

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "open", open_then_swap)
        with pytest.raises(RAGError, match="changed while it was being read"):
            read_bytes_limited(target, within=folder)
    assert read_bytes_limited(target, within=folder).startswith("# もと".encode())


def test_a_real_rag_index_does_not_serve_a_file_swapped_for_a_link_mid_run(
    tmp_path: Path,
) -> None:
    """Real processes: once the first file of a real `rag index` is done (the folder has
    been listed), the last file is swapped for a link to a key file elsewhere; the run
    must not store the key, and says why it left the file out."""
    import subprocess

    from tests.processes import RAG, full_env, rag, store_env, write_notes

    env = store_env(tmp_path)
    folder = tmp_path / "notes"
    write_notes(folder, "n", 40)
    last = note(folder / "zz.md", "さいご")
    secret = tmp_path / "key.md"
    secret.write_text("# key\n\nSECRETTOKEN private\n", encoding="utf-8")
    run = subprocess.Popen(
        [RAG, "index", str(folder)], env=full_env(env), stderr=subprocess.PIPE, text=True
    )
    try:
        assert run.stderr is not None
        first = run.stderr.readline()  # `Indexing: 1/41 files`: listed, one file done
        assert first.startswith("Indexing: "), first
        last.unlink()
        last.symlink_to(secret)
        rest = run.stderr.read()
        run.wait(120)
    finally:
        run.kill()
    assert "zz.md" in rest and "outside the folder" in rest, rest
    found = rag(env, "search", "SECRETTOKEN", "--mode", "bm25", "--json")
    assert found.returncode == 0, found.stderr
    assert not json.loads(found.stdout)["hits"], found.stdout[-500:]
    rag(env, "service", "stop")
