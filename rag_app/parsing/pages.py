"""Page breaks: a form feed (U+000C) in a document's text starts a new page.

PDF text is written page after page with a form feed between pages (as `pdftotext`
does, and as paged plain-text files such as RFCs already are). The chunker cuts each page
on its own, so no chunk straddles two pages, and adds `page` (1-based) to every chunk's
metadata: a hit can then say where in the document it was found. A text without a form
feed has no pages and its chunks carry no `page` key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rag_app.parsing.chunk import Chunk

PAGE_BREAK = "\f"


def paged_chunks(text: str, chunk_page: Callable[[str], list[Chunk]]) -> list[Chunk]:
    """`chunk_page` applied to every page of `text`, each chunk tagged with its page."""
    chunks: list[Chunk] = []
    for number, page in enumerate(text.split(PAGE_BREAK), start=1):
        if page.strip():
            chunks.extend(
                replace(chunk, extra={**chunk.extra, "page": number}) for chunk in chunk_page(page)
            )
    return chunks
