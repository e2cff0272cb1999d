"""BM25 on disk: immutable segments listed by an atomically replaced manifest.

- a **snapshot** segment holds the compacted postings as arrays (ids, sources, document
  lengths, CSC postings, vocabulary): loading it is a few array reads, no per-chunk
  parsing, so start-up stays well under a second at 100k chunks;
- a **delta** segment holds what changed since the previous save (deleted ids, new
  vocabulary, new documents as term bags).

Every file is written under a temp name, fsynced and renamed; replacing
`manifest.json` is the commit point, so a crash leaves the old or the new index.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rag_app.index.bm25_postings import Bag, Postings

FORMAT_NAME = "rag-bm25"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SEGMENT_PREFIX = "seg-"
SEGMENT_SUFFIX = ".npz"
TMP_PREFIX = ".tmp-"


def _json_bytes(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode(), dtype=np.uint8)


def _json_of(array: np.ndarray) -> Any:
    return json.loads(array.tobytes())


def segment_name(generation: int) -> str:
    return f"{SEGMENT_PREFIX}{generation:08d}{SEGMENT_SUFFIX}"


def snapshot_arrays(p: Postings) -> dict[str, np.ndarray]:
    """A compacted `Postings` as arrays (call `p.compact()` first)."""
    if not p.is_compact():
        raise ValueError("snapshot needs compacted postings")
    table: dict[str, int] = {}
    src_idx = np.fromiter(
        (-1 if s is None else table.setdefault(s, len(table)) for s in p.slot_sources),
        np.int32,
        p.n_slots,
    )
    n = p.n_slots
    return {
        "header": _json_bytes({"kind": "snapshot", "count": n, "vocab_size": len(p.terms)}),
        "ids": _json_bytes(p.slot_ids),
        "sources": _json_bytes(list(table)),
        "src_idx": src_idx,
        "doc_len": p.doc_len[:n].copy(),
        "indptr": p.indptr,
        "post_slots": p.post_slots,
        "post_tfs": p.post_tfs,
        "vocab": _json_bytes(p.terms),
    }


def delta_arrays(
    deleted: list[str],
    added: list[tuple[str, str | None, Bag]],
    vocab_start: int,
    vocab: list[str],
) -> dict[str, np.ndarray]:
    """Changes since the previous save: deletes first, then new documents."""
    header = {
        "kind": "delta",
        "deleted": deleted,
        "vocab_start": vocab_start,
        "vocab": vocab,
        "ids": [a[0] for a in added],
        "sources": [a[1] for a in added],
    }
    counts = np.fromiter((len(a[2][0]) for a in added), np.int64, len(added))
    offsets = np.zeros(len(added) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    empty = np.empty(0, np.int32)
    return {
        "header": _json_bytes(header),
        "offsets": offsets,
        "terms": np.concatenate([a[2][0] for a in added]) if added else empty,
        "tfs": np.concatenate([a[2][1] for a in added]) if added else empty,
    }


def atomic_write(directory: Path, name: str, write: Callable[[BinaryIO], None]) -> None:
    """Write a file under a temp name, fsync it, rename it into place, fsync the folder."""
    tmp = directory / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / name)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)


def write_segment(directory: Path, name: str, arrays: dict[str, np.ndarray]) -> None:
    """Write one immutable segment."""
    atomic_write(directory, name, lambda fh: np.savez(fh, **arrays))


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Atomically replace the manifest: the commit point of a save."""
    data = json.dumps(manifest, indent=1, ensure_ascii=False).encode()
    atomic_write(directory, MANIFEST, lambda fh: fh.write(data))  # type: ignore[func-returns-value]


def read_manifest(directory: Path) -> dict[str, Any]:
    manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT_NAME or manifest.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"format {manifest.get('format')!r} version {manifest.get('version')!r} "
            f"is not {FORMAT_NAME!r} version {FORMAT_VERSION}"
        )
    for name in manifest["segments"]:
        if not str(name).startswith(SEGMENT_PREFIX) or "/" in name or "\\" in name:
            raise ValueError(f"bad segment name {name!r}")
    return manifest


def apply_segment(p: Postings, path: Path, first: bool) -> set[str]:
    """Apply one segment to `p`; returns the ids it touches. The first must be a snapshot."""
    with np.load(path, allow_pickle=False) as arrays:
        header = _json_of(arrays["header"])
        if header["kind"] == "snapshot":
            if not first:
                raise ValueError(f"segment {path.name}: a snapshot must come first")
            vocab = _json_of(arrays["vocab"])
            if len(vocab) != header["vocab_size"]:
                raise ValueError(f"segment {path.name} is inconsistent")
            p.extend_vocab(0, vocab)
            table = _json_of(arrays["sources"])
            ids = [str(i) for i in _json_of(arrays["ids"])]
            src_idx = arrays["src_idx"]
            if len(ids) != header["count"] or len(src_idx) != len(ids):
                raise ValueError(f"segment {path.name} is inconsistent")
            sources = [None if k < 0 else table[k] for k in src_idx.tolist()]
            p.load_snapshot(
                ids, sources, arrays["doc_len"], arrays["indptr"],
                arrays["post_slots"], arrays["post_tfs"],
            )  # fmt: skip
            return set()
        if header["kind"] != "delta" or first:
            raise ValueError(f"segment {path.name} of kind {header['kind']!r} is out of place")
        offsets, terms, tfs = arrays["offsets"], arrays["terms"], arrays["tfs"]
    ids, sources = header["ids"], header["sources"]
    if len(ids) != len(sources) or len(offsets) != len(ids) + 1:
        raise ValueError(f"segment {path.name} is inconsistent")
    for doc_id in header["deleted"]:
        p.remove(doc_id)
    p.extend_vocab(int(header["vocab_start"]), header["vocab"])
    if len(terms) and (terms.min() < 0 or terms.max() >= len(p.terms)):
        raise ValueError(f"segment {path.name} refers to unknown terms")
    for i, (doc_id, source) in enumerate(zip(ids, sources, strict=True)):
        start, end = int(offsets[i]), int(offsets[i + 1])
        bag = terms[start:end].astype(np.int32), tfs[start:end].astype(np.int32)
        p.add(str(doc_id), source, bag, postings=False)  # the loader compacts at the end
    return {str(i) for i in header["deleted"]} | {str(i) for i in ids}


def remove_stale_files(directory: Path, keep: set[str]) -> None:
    """Delete segments the manifest no longer lists and temp files of dead saves."""
    for entry in directory.iterdir():
        stale = entry.name.startswith(SEGMENT_PREFIX) and entry.name not in keep
        if stale or entry.name.startswith(TMP_PREFIX):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def fsync_dir(path: Path) -> None:
    """Make renames inside `path` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
