"""Chunk text as stored in Chroma: non-ASCII text as ASCII escapes, read back exactly.

Chroma's embedded client spends ~18 µs per non-ASCII character of every string it writes
(its Rust side formats each string character by character; ASCII takes a fast path), so a
200-character Japanese chunk cost 8.3 ms to upsert against 3.7 ms with the same text
written as `\\uXXXX` escapes (`bench/chroma_write_cost.py`). The embedded client holds the
GIL for the whole call, so that time also stalled searches during an ingest. Reads are not
affected either way.

A chunk written this way carries `ENCODED_KEY` in its metadata; in such a chunk a stored
text that starts with `PREFIX` is the escaped form and any other is the text itself (ASCII
text is stored as it is; a text that itself starts with `PREFIX` is escaped too). A chunk
without the key, written before this encoding, is read exactly as stored, whatever its
text starts with. Outside this project, `codecs.decode(stored[len(PREFIX):],
"unicode_escape")` reads an escaped text.

The node JSON LlamaIndex keeps in each chunk's metadata (`_node_content`, written with
`ensure_ascii=False`) is written with JSON's own escapes instead: the same JSON to any
reader, LlamaIndex's `metadata_dict_to_node` included, which takes a node's metadata from
it. The flat copies of the metadata are the few `FLAT_KEYS` (every key costs each read and
write); the heading path among them (a chunk's Japanese headings cost more than its text)
is encoded like the text, the keys Chroma filters on are not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.utils import node_to_metadata_dict

PREFIX = "rag-u:"
ENCODED_KEY = "rag_stored_text"
"""Flat metadata key (value 1) of a chunk whose text and flat values `encode` wrote."""
RAW_KEYS = frozenset({"source_url", "document_id"})
"""Flat metadata kept as it is: `where` filters match these (the source's URL or path)."""
FLAT_KEYS = frozenset({"source_url", "chunk_index", "heading_path", "document_id", "page"})
"""The flat copies of a chunk's metadata kept beside its node JSON: those `where` filters
match (`source_url`, `chunk_index`; `document_id` for LlamaIndex's delete by document)
and the heading path and a PDF chunk's page, which passages read without parsing the
JSON. Chroma charges every read and write for each key a chunk has: 7 keys (8 with a
page) instead of LlamaIndex's 15 made reads of 50
chunks 3.6–4.6 → 2.1–2.3 ms and writes 1.59 → 1.34 ms a chunk
(`bench/chunk_metadata_cost.py`). The node JSON holds all of it either way."""


def encode(text: str) -> str:
    """What Chroma stores for `text` (ASCII)."""
    if text.isascii() and not text.startswith(PREFIX):
        return text
    return PREFIX + text.encode("unicode_escape").decode("ascii")


def decode(stored: str | None, meta: Any) -> str:
    """The text `encode` stored, for a chunk with metadata `meta`; a chunk written before
    the encoding (no `ENCODED_KEY`) comes back exactly as stored."""
    if not stored:
        return ""
    if not stored.startswith(PREFIX) or not isinstance(meta, Mapping) or not meta.get(ENCODED_KEY):
        return stored
    try:
        return stored[len(PREFIX) :].encode("ascii").decode("unicode_escape")
    except UnicodeError:  # not something `encode` wrote (edited by hand): shown as stored
        return stored


def ascii_metadata(node: BaseNode) -> dict[str, Any]:
    """LlamaIndex's Chroma metadata for `node` in ASCII, with only the `FLAT_KEYS` of its
    flat copies: its node JSON with JSON escapes, flat string values `encode`d, except
    those Chroma filters on (`RAW_KEYS`), and the `ENCODED_KEY` mark."""
    full = node_to_metadata_dict(node, remove_text=True, flat_metadata=True)
    meta = {k: v for k, v in full.items() if k in FLAT_KEYS or k.startswith("_node_")}
    for key, value in meta.items():
        if not isinstance(value, str) or key in RAW_KEYS:
            continue
        if key == "_node_content":
            if not value.isascii():
                meta[key] = json.dumps(json.loads(value))
        else:
            meta[key] = encode(value)
    meta[ENCODED_KEY] = 1
    return meta
