"""Documented size limits on user input: each one bounds what a single input can cost."""

from __future__ import annotations

import re

MAX_QUERY_CHARS = 2000  # a search query (rag search, rag_search)
MAX_URL_CHARS = 2048  # a URL to add or crawl
MAX_PATTERN_CHARS = 500  # a crawl URL pattern (regular expression)
MAX_CRAWL_PAGES = 10_000  # pages one crawl may fetch (max_pages, RAG_MAX_CRAWL_PAGES)
MAX_REJOINS = 3  # a waited-for refresh starts again after the job it joined was cancelled
MAX_CRAWL_DELAY_SEC = 3600.0  # RAG_CRAWL_DELAY_SEC; Crawl-delay stops far below it
MAX_SOURCE_CHARS = 4096  # a source URL or file path to delete
MAX_JOB_ID_CHARS = 64  # a job id (ours are 8 hex digits)
MAX_RUNNING_JOBS = 16  # crawl and refresh jobs running at once in one store service
TOKENIZER_PIECE_CHARS = 20_000  # MeCab is fed text in pieces no longer than this
MAX_TITLE_CHARS = 200  # a page title, as prefixed to every chunk of the page
MAX_HEADING_CHARS = 200  # one heading
MAX_PATH_CHARS = 500  # a whole heading path (breadcrumb)
MAX_CHUNKS_PER_SOURCE_DEFAULT = 5000  # RAG_MAX_CHUNKS_PER_SOURCE
ELLIPSIS = "…"


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in `…` when it was cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """`text` with lone surrogates (which UTF-8, MeCab and the embedding model cannot
    take) as U+FFFD. Python makes them of bytes that are not UTF-8 in a command-line
    argument, and JSON's `\\ud800` escapes make them too."""
    return _SURROGATE.sub("\ufffd", text)


MAX_READ_CHARS = 50_000  # one rag_read page
MAX_LISTED_FILE_ERRORS = 1000  # failed files listed by name in one folder's index summary


MERGED_CELL_REPEAT_CHARS = 100
"""A table cell spanning columns (HTML `colspan`, Word `gridSpan`/`vMerge`) has its text
repeated in each cell it covers only up to this length (a title row, a shared value); a
longer one repeated 50 times turned a 4.8 MB page into 240 MB of text."""


def spread_cell(text: str, span: int) -> list[str]:
    """A merged cell's text for each of the `span` cells it covers (`MERGED_CELL_REPEAT_CHARS`)."""
    if len(text) <= MERGED_CELL_REPEAT_CHARS:
        return [text] * span
    return [text, *[""] * (span - 1)]
