"""StructuredNodeParser: routes each part of a document to the right chunker.

The document is split into heading sections; each section body into paragraphs
(blank-line separated, fenced code kept whole). A paragraph that `detect_content_type`
calls TABLE or MIXED is searched for tables; table rows go to the table chunker (their
`heading_path` is the enclosing section's, plus the table caption), everything else to the
heading chunker (inside a section) or the prose chunker (before the first heading).
A text with page breaks (PDF text) is chunked page by page (`pages`). Nodes come out in
document order with one continuous `chunk_index`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rag_app.config import RAGSettings
from rag_app.markdown_fences import Fences, opening
from rag_app.parsing.base import SizedNodeParser, check_sizes
from rag_app.parsing.chunk import Chunk, MetadataValue
from rag_app.parsing.content_type import ContentType, detect_content_type
from rag_app.parsing.headings import Section, section_chunks, split_sections
from rag_app.parsing.pages import PAGE_BREAK, paged_chunks
from rag_app.parsing.prose import prose_chunks
from rag_app.parsing.tables import Table, caption_of, split_table_blocks, table_chunks

CODE_BLOCK_CHARS = 1200
"""A fenced code block up to this long (or the chunk size, if larger) is one chunk."""


class CodeBlock(str):
    """A fenced code block of a section body, fences included."""


def _paragraphs(text: str) -> list[tuple[str, bool]]:
    """(paragraph, is_code) pairs; a fenced code block is one paragraph."""
    paragraphs: list[tuple[str, bool]] = []
    current: list[str] = []
    fences = Fences()

    def flush(is_code: bool) -> None:
        if "\n".join(current).strip():
            paragraphs.append(("\n".join(current), is_code))
        current.clear()

    for line in text.split("\n"):
        was_inside = fences.inside
        if fences.step(line):
            if not was_inside:
                flush(False)  # the paragraph before the opening fence
            current.append(line)
            if was_inside and not fences.inside:
                flush(True)  # the closing fence ends the block
        elif not line.strip():
            flush(False)
        else:
            current.append(line)
    flush(fences.inside)
    return paragraphs


MAX_FENCE_CHARS = 80
"""A code block's fence line, as each of its pieces repeats it, is cut to this length."""


def code_chunks(
    block: str,
    chunk_size: int,
    code_block_chars: int,
    heading_path: str = "",
    heading_level: int = 0,
    extra: dict[str, MetadataValue] | None = None,
) -> list[Chunk]:
    """CODE chunks: the whole block when it fits `max(chunk_size, code_block_chars)`,
    else pieces cut at line ends, each inside the block's own fences (language kept).
    Indentation is never touched; only a single line longer than the limit is cut."""
    limit = max(chunk_size, code_block_chars)
    meta = dict(extra or {})
    if len(block) <= limit:
        return [Chunk(block, ContentType.CODE, heading_path, heading_level, meta)]
    open_line, run = opening(block)
    lines = block.split("\n")[1:]
    if lines and lines[-1].strip().startswith(run[0] * 3):
        lines = lines[:-1]
    # Every piece repeats the fences: cut them, or a long info string or fence run made
    # the chunk text grow with the square of the block (a 100 KB info string, 3,490 pieces).
    open_line, run = open_line[:MAX_FENCE_CHARS], run[:MAX_FENCE_CHARS]
    room = max(limit - len(open_line) - len(run) - 2, 20)
    pieces: list[list[str]] = [[]]
    size = 0
    for line in lines:
        while len(line) > room:  # one overlong line: cut it
            pieces.append([line[:room]])
            line = line[room:]
            size = room
        if pieces[-1] and size + len(line) + 1 > room:
            pieces.append([])
            size = 0
        pieces[-1].append(line)
        size += len(line) + 1
    return [
        Chunk(f"{open_line}\n" + "\n".join(p) + f"\n{run}", ContentType.CODE, heading_path,
              heading_level, meta)
        for p in pieces
        if any(x.strip() for x in p)
    ]  # fmt: skip


def split_blocks(text: str) -> list[str | Table]:
    """Prose strings, `CodeBlock`s and `Table`s of a section body, in order; prose runs
    merged.

    A short one-line paragraph right above a table (how the crawler writes `<caption>`)
    becomes that table's caption, unless the table already has one.
    """
    blocks: list[str | Table] = []
    prose: list[str] = []  # joined once per run: repeated concatenation would be quadratic
    previous = ""
    for paragraph, is_code in _paragraphs(text):
        if is_code:
            if prose:
                blocks.append("\n\n".join(prose))
                prose = []
            blocks.append(CodeBlock(paragraph.strip()))
            previous = ""
            continue
        tabular = detect_content_type(paragraph) is not ContentType.PROSE
        for block in split_table_blocks(paragraph) if tabular else [paragraph.strip()]:
            if isinstance(block, str):
                prose.append(block)
                continue
            if block.start == 0 and not block.caption:
                block = replace(block, caption=caption_of(previous))
            if prose:
                blocks.append("\n\n".join(prose))
                prose = []
            blocks.append(block)
        previous = paragraph.strip()
    if prose:
        blocks.append("\n\n".join(prose))
    return blocks


def _section_extra(section: Section) -> dict[str, MetadataValue]:
    if not section.level:
        return {}
    return {"heading": section.heading, "parent_headings": section.parent_path}


def structured_chunks(
    text: str,
    chunk_size: int = 200,
    chunk_overlap: int = 30,
    code_block_chars: int = CODE_BLOCK_CHARS,
) -> list[Chunk]:
    """All chunks of `text`: heading sections, table rows, code blocks and prose, in
    document order; a paged text (form feeds, `pages`) page by page, each chunk with its
    `page`."""
    check_sizes(chunk_size, chunk_overlap)
    if PAGE_BREAK in text:
        return paged_chunks(
            text, lambda page: structured_chunks(page, chunk_size, chunk_overlap, code_block_chars)
        )
    chunks: list[Chunk] = []
    for section in split_sections(text):
        if section.level and not section.body:
            chunks.extend(section_chunks(section, chunk_size, chunk_overlap))
            continue
        for block in split_blocks(section.body):
            if isinstance(block, CodeBlock):
                chunks.extend(
                    code_chunks(
                        block,
                        chunk_size,
                        code_block_chars,
                        section.heading_path,
                        section.level,
                        _section_extra(section),
                    )
                )
            elif isinstance(block, Table):
                chunks.extend(
                    table_chunks(
                        block,
                        chunk_size,
                        section.heading_path,
                        section.level,
                        _section_extra(section),
                    )
                )
            elif section.level:
                chunks.extend(section_chunks(section, chunk_size, chunk_overlap, block))
            else:
                chunks.extend(prose_chunks(block, chunk_size, chunk_overlap))
    return chunks


class StructuredNodeParser(SizedNodeParser):
    """The default NodeParser: headings, tables and prose, each chunked its own way."""

    code_block_chars: int = CODE_BLOCK_CHARS

    @classmethod
    def from_settings(cls, settings: RAGSettings, **kwargs: Any) -> StructuredNodeParser:
        """Sizes from `RAG_CHUNK_SIZE` / `RAG_CHUNK_OVERLAP` / `RAG_CODE_BLOCK_CHARS`, the
        caps from `RAG_MAX_CHUNKS_PER_SOURCE` and twice `RAG_MAX_DOCUMENT_CHARS` (the
        chunks' text: overlaps and repeated row names add to a document's own)."""
        kwargs.setdefault("code_block_chars", settings.rag_code_block_chars)
        kwargs.setdefault("max_chunks", settings.rag_max_chunks_per_source)
        kwargs.setdefault("max_chunk_chars", 2 * settings.rag_max_document_chars)
        return cls(settings.rag_chunk_size, settings.rag_chunk_overlap, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "StructuredNodeParser"

    def least_chunks(self, text: str) -> int:
        """Every page holding text makes a chunk at least: a page of a million form feeds
        between letters is refused before ~10 s/MB of chunking."""
        if PAGE_BREAK not in text:
            return 0
        return sum(1 for page in text.split(PAGE_BREAK) if page.strip())

    def split_chunks(self, text: str) -> list[Chunk]:
        return structured_chunks(text, self.chunk_size, self.chunk_overlap, self.code_block_chars)
