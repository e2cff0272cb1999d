"""Structure-aware chunking: content-type detection and LlamaIndex NodeParsers.

`StructuredNodeParser` is the one to use for ingestion; the prose, heading and table
parsers can also be used alone.
"""

from rag_app.parsing.base import ChunkingNodeParser
from rag_app.parsing.chunk import Chunk
from rag_app.parsing.content_type import ContentType, detect_content_type
from rag_app.parsing.headings import HeadingNodeParser, chunk_by_headings
from rag_app.parsing.prose import ProseNodeParser, chunk_text, split_prose
from rag_app.parsing.router import StructuredNodeParser, structured_chunks
from rag_app.parsing.tables import TableNodeParser, chunk_table_data

__all__ = [
    "Chunk",
    "ChunkingNodeParser",
    "ContentType",
    "HeadingNodeParser",
    "ProseNodeParser",
    "StructuredNodeParser",
    "TableNodeParser",
    "chunk_by_headings",
    "chunk_table_data",
    "chunk_text",
    "detect_content_type",
    "split_prose",
    "structured_chunks",
]
