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

from rag_app.errors import RAGError
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


POSITION_WINDOW = 32_768
"""How far past the last chunk found a chunk's text is looked for in its document."""


class TooManyChunksError(RAGError):
    """A document makes more chunks than `RAG_MAX_CHUNKS_PER_SOURCE` allows."""

    def __init__(self, source: str, count: int, cap: int, *, at_least: bool = False) -> None:
        makes = f"makes at least {count:,}" if at_least else f"makes {count:,}"
        super().__init__(
            f"{source} {makes} chunks, more than RAG_MAX_CHUNKS_PER_SOURCE "
            f"({cap:,}), so it was skipped; raise the setting to index it."
        )


class TooMuchChunkTextError(RAGError):
    """A document's chunks hold more text than twice `RAG_MAX_DOCUMENT_CHARS`."""

    def __init__(self, source: str, chars: int, cap: int) -> None:
        super().__init__(
            f"{source} makes {chars:,} characters of chunks, more than twice "
            f"RAG_MAX_DOCUMENT_CHARS ({cap:,}), so it was skipped; raise the setting to "
            "index it."
        )


class ChunkingNodeParser(NodeParser):
    """A NodeParser whose splitting is a pure `text -> list[Chunk]` function."""

    max_chunks: int | None = None
    """A document that makes more chunks is refused (`TooManyChunksError`); None: no cap."""
    max_chunk_chars: int | None = None
    """A document whose chunks hold more characters is refused (`TooMuchChunkTextError`):
    what embedding it costs grows with that text; None: no cap."""

    def least_chunks(self, text: str) -> int:
        """A cheap lower bound on how many chunks `text` makes, to refuse it unsplit."""
        return 0

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
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            least = self.least_chunks(text)
            if self.max_chunks is not None and least > self.max_chunks:
                raise TooManyChunksError(node.node_id, least, self.max_chunks, at_least=True)
            chunks = self.split_chunks(text)
            if self.max_chunks is not None and len(chunks) > self.max_chunks:
                # before building nodes (~0.1 ms each): a page of a million tiny chunks
                # would take minutes to be refused afterwards
                raise TooManyChunksError(node.node_id, len(chunks), self.max_chunks)
            if self.max_chunk_chars is not None:
                chars = sum(len(c.text) for c in chunks)
                if chars > self.max_chunk_chars:
                    raise TooMuchChunkTextError(node.node_id, chars, self.max_chunk_chars)
            parsed.extend(self._build_nodes(chunks, node))
        return parsed

    def _postprocess_parsed_nodes(
        self, nodes: list[BaseNode], parent_doc_map: dict[str, Document]
    ) -> list[BaseNode]:
        """LlamaIndex's post-processing, with each chunk looked up in its document only
        within `POSITION_WINDOW` characters of the last one found.

        LlamaIndex searches the whole rest of the document for each chunk's text to set
        `start_char_idx`. Chunks the chunker rewrote (table rows as `column: value`,
        re-fenced code, prose joined with its overlap) are not in it, so each such search
        ran to the document's end: a 3 MB page of prose took 42 s. Such a chunk has no
        position, as before; a verbatim one further than the window has none either."""
        found_at: dict[str, int] = {}
        for node in nodes:
            doc = parent_doc_map.get(node.ref_doc_id or "")
            if doc is None or not isinstance(node, TextNode):
                continue
            content = node.get_content(metadata_mode=MetadataMode.NONE)
            start = found_at.get(doc.id_, 0)
            at = doc.text.find(content, start, start + len(content) + POSITION_WINDOW)
            if at >= 0:
                node.start_char_idx, node.end_char_idx = at, at + len(content)
                found_at[doc.id_] = at + 1
        nodes = super()._postprocess_parsed_nodes(nodes, {})  # links and node metadata
        for node in nodes:
            doc = parent_doc_map.get(node.ref_doc_id or "")
            if doc is None:
                continue
            if doc.source_node is not None:
                node.relationships[NodeRelationship.SOURCE] = doc.source_node
            if self.include_metadata:
                node.metadata = {**doc.metadata, **node.metadata}
        return nodes

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
