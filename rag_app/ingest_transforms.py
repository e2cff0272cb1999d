"""IngestionPipeline steps after parsing: stable chunk ids, then embed only what is new.

Stable ids (source + text) mean an unchanged chunk keeps its id, so its stored
embedding is reused and re-ingesting unchanged text costs no embedding call.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    RelatedNodeInfo,
    RelatedNodeType,
    TransformComponent,
)
from pydantic import ConfigDict, PrivateAttr

EmbeddingLookup = Callable[[Sequence[str]], dict[str, list[float]]]


def chunk_id(source: str, text: str, occurrence: int) -> str:
    """Deterministic id of the `occurrence`-th chunk with this text in this source."""
    digest = hashlib.sha256(f"{source}\x00{occurrence}\x00{text}".encode()).hexdigest()
    return digest[:32]


def embed_text(node: BaseNode) -> str:
    """What is embedded for a chunk: its EMBED-mode content (see `metadata_modes`)."""
    return node.get_content(metadata_mode=MetadataMode.EMBED)


class AssignStableIds(TransformComponent):
    """Give every node an id derived from its source and text, and point its links to
    its neighbours (LlamaIndex's previous/next relationships) at their new ids."""

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        seen: dict[tuple[str, str], int] = {}
        new_ids: dict[str, str] = {}
        for node in nodes:
            source = str(node.metadata.get("source_url", ""))
            text = embed_text(node)  # a new title or heading path means a new embedding
            n = seen.get((source, text), 0)
            seen[(source, text)] = n + 1
            new_ids[node.id_] = node.id_ = chunk_id(source, text, n)
        for node in nodes:
            node.relationships = {
                kind: _link(info, new_ids) for kind, info in node.relationships.items()
            }
        return nodes


def _link(info: RelatedNodeType, new_ids: dict[str, str]) -> RelatedNodeType:
    """A relationship by id alone, under the id the related chunk is stored with.

    LlamaIndex links each chunk to its neighbours by the ids they had before
    `AssignStableIds` (so the links named chunks that were never stored) and copies the
    source's and each neighbour's metadata into it (the chunk's own metadata holds it
    all): the node JSON stored with each of docs-py's chunks was 2,853 characters, 1,699
    without the copies, 115 MB fewer at 100,000 chunks (`bench/chunk_metadata_cost.py`;
    reads and writes cost the same within its noise)."""
    if isinstance(info, list):
        return [_link(one, new_ids) for one in info]
    return RelatedNodeInfo(
        node_id=new_ids.get(info.node_id, info.node_id), node_type=info.node_type, hash=info.hash
    )


class EmbedMissing(TransformComponent):
    """Embed nodes whose id has no stored embedding; reuse stored ones for the rest."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _embed_model: BaseEmbedding = PrivateAttr()
    _lookup: EmbeddingLookup = PrivateAttr()
    _embedded: int = PrivateAttr(default=0)

    def __init__(self, embed_model: BaseEmbedding, lookup: EmbeddingLookup) -> None:
        super().__init__()
        self._embed_model = embed_model
        self._lookup = lookup

    @property
    def embedded(self) -> int:
        """How many texts the last call sent to the embedding model."""
        return self._embedded

    def _reuse(self, nodes: Sequence[BaseNode]) -> list[BaseNode]:
        stored = self._lookup([n.node_id for n in nodes])
        todo: list[BaseNode] = []
        for node in nodes:
            if node.node_id in stored:
                node.embedding = stored[node.node_id]
            else:
                todo.append(node)
        return todo

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        todo = self._reuse(nodes)
        self._embedded = len(todo)
        if todo:
            vectors = self._embed_model.get_text_embedding_batch([embed_text(n) for n in todo])
            for node, vec in zip(todo, vectors, strict=True):
                node.embedding = vec
        return nodes

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        todo = await asyncio.to_thread(self._reuse, nodes)
        self._embedded = len(todo)
        if todo:
            vectors = await self._embed_model.aget_text_embedding_batch(
                [embed_text(n) for n in todo]
            )
            for node, vec in zip(todo, vectors, strict=True):
                node.embedding = vec
        return nodes
