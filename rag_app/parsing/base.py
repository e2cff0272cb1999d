"""ChunkingNodeParser: the LlamaIndex NodeParser shared by all chunkers in this package.

Subclasses only say how a text becomes `Chunk`s (`split_chunks`); this class turns them
into `TextNode`s linked to their source document, numbers them (`chunk_index`, 0..n-1 in
document order) and copies the document's metadata onto every node. Which keys appear in
the embedded and LLM text is set by `metadata_modes.set_metadata_modes` (title and heading
path; table rows embed their text alone). A document `title` is capped at
`MAX_TITLE_CHARS` on its nodes (it is prefixed to each).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeRelationship, TextNode
from llama_index.core.utils import get_tqdm_iterable

from rag_app.parsing.chunk import MAX_TITLE_CHARS, Chunk, shorten
from rag_app.parsing.metadata_modes import set_metadata_modes


def inherited_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A document's metadata for its nodes, with a string `title` capped."""
    inherited = dict(metadata)
    title = inherited.get("title")
    if isinstance(title, str):
        inherited["title"] = shorten(title, MAX_TITLE_CHARS)
    return inherited


def check_sizes(chunk_size: int, chunk_overlap: int) -> None:
    """Raise ValueError (one sentence) for sizes that cannot produce chunks."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1 character, got {chunk_size}.")
    if not 0 <= chunk_overlap < chunk_size:
        raise ValueError(
            f"chunk_overlap ({chunk_overlap}) must be between 0 and chunk_size "
            f"({chunk_size}) - 1; lower the overlap or raise the chunk size."
        )


class ChunkingNodeParser(NodeParser):
    """A NodeParser whose splitting is a pure `text -> list[Chunk]` function."""

    @abstractmethod
    def split_chunks(self, text: str) -> list[Chunk]:
        """The chunks of one document's text, in document order (never empty ones)."""

    def _build_nodes(self, chunks: Sequence[Chunk], source: BaseNode) -> list[TextNode]:
        relationships = {NodeRelationship.SOURCE: source.as_related_node_info()}
        inherited = inherited_metadata(source.metadata) if self.include_metadata else {}
        nodes: list[TextNode] = []
        for index, chunk in enumerate(chunks):
            node = TextNode(
                id_=self.id_func(index, source),
                text=chunk.text,
                metadata={**inherited, **chunk.metadata(index)},
                relationships=dict(relationships),
            )
            nodes.append(node)
        set_metadata_modes(nodes)
        return nodes

    def _parse_nodes(
        self,
        nodes: Sequence[BaseNode],
        show_progress: bool = False,
        **kwargs: Any,
    ) -> list[BaseNode]:
        parsed: list[BaseNode] = []
        for node in get_tqdm_iterable(nodes, show_progress, "Parsing nodes"):
            chunks = self.split_chunks(node.get_content(metadata_mode=MetadataMode.NONE))
            parsed.extend(self._build_nodes(chunks, node))
        return parsed

    def get_nodes_from_documents(
        self,
        documents: Sequence[Document],
        show_progress: bool = False,
        **kwargs: Any,
    ) -> list[BaseNode]:
        """Parse documents; metadata merged in afterwards follows the same modes."""
        nodes = super().get_nodes_from_documents(documents, show_progress, **kwargs)
        set_metadata_modes(nodes)
        return nodes

    async def aget_nodes_from_documents(
        self,
        documents: Sequence[Document],
        show_progress: bool = False,
        **kwargs: Any,
    ) -> list[BaseNode]:
        nodes = await super().aget_nodes_from_documents(documents, show_progress, **kwargs)
        set_metadata_modes(nodes)
        return nodes


class SizedNodeParser(ChunkingNodeParser):
    """A ChunkingNodeParser with a validated `chunk_size` / `chunk_overlap` pair."""

    chunk_size: int = 200
    chunk_overlap: int = 30

    def __init__(self, chunk_size: int = 200, chunk_overlap: int = 30, **kwargs: Any) -> None:
        check_sizes(chunk_size, chunk_overlap)
        super().__init__(chunk_size=chunk_size, chunk_overlap=chunk_overlap, **kwargs)
