"""Plain result types returned by the KnowledgeBase (easy to print, serialise, test)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from rag_app.errors import RAGError
from rag_app.limits import MAX_LISTED_FILE_ERRORS
from rag_app.markdown_fences import Fences

if TYPE_CHECKING:  # results are also built by light clients that never import LlamaIndex
    from llama_index.core.schema import NodeWithScore

SCORE_KEYS = ("vector_distance", "bm25_score", "combined_score")
SEARCH_MODES: tuple[str, ...] = ("fused", "vector", "bm25", "separate")


def check_search_mode(mode: str | None) -> None:
    """Refuse a search mode that is not one of `SEARCH_MODES` in one sentence; None means
    the default, but an empty string is no mode (it is not "leave it out")."""
    if mode is not None and mode not in SEARCH_MODES:
        raise RAGError(f"Unknown search mode {mode!r}; use one of {', '.join(SEARCH_MODES)}.")


@dataclass
class Hit:
    """One retrieved chunk with where it came from and every score."""

    node_id: str
    text: str
    source_url: str
    title: str
    heading_path: str
    content_type: str
    chunk_index: int
    vector_distance: float | None
    bm25_score: float | None
    combined_score: float
    metadata: dict[str, Any] = field(default_factory=dict)
    rank: int = 0
    passage: str = ""
    """The hit widened to its passage (`rag_app.passages`); empty when not expanded."""
    passage_chunks: list[int] = field(default_factory=list)

    @classmethod
    def from_node(cls, nws: NodeWithScore) -> Hit:
        meta = dict(nws.node.metadata)
        combined = meta.get("combined_score")
        return cls(
            node_id=nws.node.node_id,
            text=nws.node.get_content(),
            source_url=str(meta.get("source_url", "")),
            title=str(meta.get("title", "")),
            heading_path=str(meta.get("heading_path", "")),
            content_type=str(meta.get("content_type", "")),
            chunk_index=int(meta.get("chunk_index", 0) or 0),
            vector_distance=meta.get("vector_distance"),
            bm25_score=meta.get("bm25_score"),
            combined_score=float(combined if combined is not None else (nws.score or 0.0)),
            metadata={k: v for k, v in meta.items() if k not in SCORE_KEYS},
        )

    @property
    def page(self) -> int | None:
        """The page of a PDF the chunk comes from (`rag_app.parsing.pages`), else None."""
        value = self.metadata.get("page")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hit:
        return cls(**_known(cls, data))


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def unique_sources(hits: list[Hit]) -> list[str]:
    """Source URLs in rank order, each once."""
    return list(dict.fromkeys(h.source_url for h in hits if h.source_url))


HIT_HEADING_LEVEL = 2
"""Every hit starts with `## [rank] Source: <url>`; headings inside a passage are demoted
below this level so none of them reads as the start of another hit."""
_SHALLOW_HEADING = re.compile(rf"^#{{1,{HIT_HEADING_LEVEL}}}(?=\s)")


def demote_headings(text: str) -> str:
    """Markdown headings of level 1–2 outside code fences become level 3, and a code block
    the text leaves open is closed, so that nothing after it (the next hit) reads as code."""
    fences = Fences()
    out: list[str] = []
    for line in text.split("\n"):
        if not fences.step(line):
            line = _SHALLOW_HEADING.sub("#" * (HIT_HEADING_LEVEL + 1), line)
        out.append(line)
    if fences.inside:
        out.append(fences.marker)
    return "\n".join(out)


def _scores(h: Hit) -> str:
    parts = [f"スコア {h.combined_score:.3f}"]
    if h.vector_distance is not None:
        parts.append(f"ベクトル距離 {h.vector_distance:.3f}")
    if h.bm25_score is not None:
        parts.append(f"BM25 {h.bm25_score:.2f}")
    return " / ".join(parts)


def hit_place(h: Hit) -> str:
    """Where a hit is: `title › heading › subheading` (an h1 repeating the title once)."""
    path = h.heading_path.split(" > ") if h.heading_path else []
    if path and path[0] == h.title:  # an h1 that repeats the page title
        path = path[1:]
    return " › ".join(p for p in (h.title, *path) if p)


def _hit_header(h: Hit, rank: int) -> str:
    """A hit's heading lines: `## [rank] Source: <url>`, then its place (title › heading
    path, and the page of a PDF) and scores."""
    place = hit_place(h)
    page = f"p. {h.page}" if h.page is not None else ""
    about = " · ".join(p for p in (place, page, _scores(h)) if p)
    return f"{'#' * HIT_HEADING_LEVEL} [{rank}] Source: {h.source_url}\n{about}"


def format_hit(h: Hit, rank: int) -> str:
    """One hit: its heading lines (`_hit_header`), a blank line, then its passage (or
    chunk text)."""
    return f"{_hit_header(h, rank)}\n\n{demote_headings(h.passage or h.text)}"


def hit_overhead(h: Hit) -> int:
    """Characters a hit adds to the answer besides its passage: its heading lines (with a
    two-digit rank), the blank line under them and the one that separates it from the
    next hit."""
    return len(_hit_header(h, 99)) + 4


def format_context(hits: list[Hit]) -> str:
    """Every hit in rank order (spec's `## Source: <url>` with its rank in front)."""
    return "\n\n".join(format_hit(h, h.rank or i) for i, h in enumerate(hits, 1))


@dataclass
class RetrievalResult:
    """A search: ranked hits, the raw per-side lists (separate mode), timings (ms), and
    whether the hits answer the query at all (`confident`, `rag_app.index.no_match`;
    `evidence`: what the rule saw, `rag_app.index.no_match.Evidence`)."""

    query: str
    mode: str
    hits: list[Hit]
    vector_hits: list[Hit] = field(default_factory=list)
    bm25_hits: list[Hit] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    confident: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)
    left_out: int = 0
    """Hits asked for (`n_results`) that the answer's character budget (`rag_answer_chars`)
    left no room for (`rag_app.passages.left_out_by_budget`)."""

    @property
    def context(self) -> str:
        """Formatted text for an LLM; empty string when nothing matched (AC19)."""
        return format_context(self.hits)

    @property
    def sources(self) -> list[str]:
        return unique_sources(self.hits or [*self.vector_hits, *self.bm25_hits])

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "hits": [h.to_dict() for h in self.hits],
            "vector_hits": [h.to_dict() for h in self.vector_hits],
            "bm25_hits": [h.to_dict() for h in self.bm25_hits],
            "sources": self.sources,
            "timings_ms": {k: round(v, 2) for k, v in self.timings.items()},
            "confident": self.confident,
            "evidence": self.evidence,
            "left_out": self.left_out,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetrievalResult:
        return cls(
            query=data["query"],
            mode=data["mode"],
            hits=[Hit.from_dict(h) for h in data.get("hits", [])],
            vector_hits=[Hit.from_dict(h) for h in data.get("vector_hits", [])],
            bm25_hits=[Hit.from_dict(h) for h in data.get("bm25_hits", [])],
            timings=dict(data.get("timings_ms", {})),
            confident=bool(data.get("confident", True)),
            evidence=dict(data.get("evidence") or {}),
            left_out=int(data.get("left_out") or 0),
        )


@dataclass
class IngestResult:
    """Outcome of ingesting one source."""

    source: str
    chunks: int
    embedded: int = 0
    removed: int = 0
    unchanged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IngestResult:
        return cls(**_known(cls, data))


@dataclass
class DirIndexSummary:
    """Outcome of `index_dir` (spec 001 §3.2)."""

    added: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    chunks: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    """(file, reason) of the first `MAX_LISTED_FILE_ERRORS` files that failed."""
    empty: int = 0
    """Files with no text to store (nothing is stored for them, so they are not added)."""
    failed: int = 0
    """Files that failed, listed or not."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(file, reason) of files left out on purpose (links out of the folder), the first
    `MAX_LISTED_FILE_ERRORS`: not failures."""
    skipped_count: int = 0
    """Files left out on purpose, listed or not."""

    def failure(self, path: str, reason: str) -> None:
        """Count a failed file; list it while the list is short (a folder of a million
        broken files must not make an answer of a million lines)."""
        self.failed += 1
        if len(self.errors) < MAX_LISTED_FILE_ERRORS:
            self.errors.append((path, reason))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DirIndexSummary:
        known = _known(cls, data)
        known["errors"] = [(str(a), str(b)) for a, b in known.get("errors", [])]
        known["skipped"] = [(str(a), str(b)) for a, b in known.get("skipped", [])]
        known.setdefault("failed", len(known["errors"]))  # from an older service
        return cls(**known)


@dataclass
class CrawlSummary:
    """Outcome of a crawl (spec 000 format, plus what a site crawl skipped and why)."""

    pages_crawled: int = 0
    chunks_stored: int = 0
    errors: int = 0
    unchanged: int = 0
    error_details: list[dict[str, str]] = field(default_factory=list)
    duplicates: int = 0
    """Pages already taken under another URL (redirect, canonical link, same text)."""
    over_cap: int = 0
    """Pages left out because of the page limit."""
    out_of_scope: int = 0
    """Links to other sites or outside the start directory, not followed."""
    filtered: int = 0
    """Links left out by the include/exclude patterns or a page's `noindex`."""
    removed: int = 0
    """Stored pages found gone (404/410) and removed (`prune`)."""

    def report_lines(self, ended: str = "完了") -> list[str]:
        """The summary line in the specification's words, then the counts beside it
        (`ended`: 中止 for a crawl cancelled, with what it stored before)."""
        lines = [
            f"{ended}: {self.pages_crawled}ページ / {self.chunks_stored}チャンク / "
            f"エラー: {self.errors}件"
        ]
        extra = [
            ("変更なし (再埋め込みなし)", self.unchanged),
            ("重複 (別URLで取得済み)", self.duplicates),
            ("ページ上限で未取得", self.over_cap),
            ("範囲外のリンク", self.out_of_scope),
            ("パターン・noindexで除外", self.filtered),
            ("削除 (404/410)", self.removed),
        ]
        return lines + [f"{label}: {count}" for label, count in extra if count]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CrawlSummary:
        return cls(**_known(cls, data))


@dataclass
class RefreshSummary:
    """Outcome of re-checking every stored web page (`rag refresh`)."""

    checked: int = 0
    unchanged: int = 0
    """Not modified (304) or the same text: nothing embedded."""
    updated: int = 0
    removed: int = 0
    """Gone (404/410) and removed from the store."""
    errors: int = 0
    chunks_stored: int = 0
    embedded: int = 0
    """Chunks that were embedded anew (0 when nothing changed)."""
    removed_urls: list[str] = field(default_factory=list)
    error_details: list[dict[str, str]] = field(default_factory=list)
    moved: int = 0
    """Stored again where the page now lives (its canonical URL changed), old copy dropped."""
    moved_pages: list[dict[str, str]] = field(default_factory=list)
    """`{"from": stored URL, "to": new URL}` for each moved page."""
    joined: bool = False
    """The refresh was already running when asked for: this is that job's summary."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RefreshSummary:
        return cls(**_known(cls, data))


@dataclass
class ReadResult:
    """`rag_read`: one page of a source's stored text in reading order."""

    source: str
    title: str
    section: str
    text: str
    offset: int
    next_offset: int | None
    total_chars: int
    sections: list[str] = field(default_factory=list)
    code_fence: str = ""
    """The opening fence line of a code block this page starts inside (the text before
    `offset` opened it), so that the page can be shown as code; empty when none is."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReadResult:
        return cls(**_known(cls, data))


@dataclass
class KBStats:
    """What is in the knowledge base."""

    total_chunks: int
    sources: list[str]
    embedding_model: str
    embedding_dimension: int
    bm25_documents: int
    vector_store: str
    bm25_dir: str
    source_chunks: dict[str, int] = field(default_factory=dict)
    """Chunks per source."""
    source_dates: dict[str, str] = field(default_factory=dict)
    """When each source was last indexed (ISO 8601, UTC)."""
    source_count: int = -1
    """Sources in all; `sources` may be one page of them, from `source_offset`."""
    source_offset: int = 0

    def __post_init__(self) -> None:
        if self.source_count < 0:
            self.source_count = self.source_offset + len(self.sources)

    def page(self, offset: int, limit: int) -> list[str]:
        """The sources from `offset` (a position among all of them), at most `limit`."""
        start = offset - self.source_offset
        return self.sources[start : start + limit] if start >= 0 else []

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KBStats:
        return cls(**_known(cls, data))


@dataclass
class CheckReport:
    """What a consistency check found: BM25 and Chroma hold the same chunks, and every
    source record has chunks."""

    chunks: int
    bm25_documents: int
    missing_in_bm25: int = 0
    extra_in_bm25: int = 0
    orphan_records: list[str] = field(default_factory=list)
    unrecorded_sources: list[str] = field(default_factory=list)
    """Sources with chunks and no record (a delete or a first write cut off by a crash):
    no refresh, folder delete or index finds them; a repair records them as changed."""
    mixed_sources: list[str] = field(default_factory=list)
    """Sources whose stored chunks are not the ones their record lists (two machines
    wrote one source at the same moment, each leaving its own version's chunks)."""
    to_index_again: list[str] = field(default_factory=list)
    """Sources whose record is marked changed (by a repair of the above, or after a write
    cut off between its chunks and its record): the next `rag index`, crawl or refresh
    stores each whole again, dropping chunks its record does not list. Not part of `ok`."""
    repaired: bool = False
    vector_checked: int = 0
    unfindable_by_vector: int = 0  # chunks their own embedding does not find (top 10, then 200)
    vector_copy: str | None = None  # "on", "off" (a failed write: until the next start), None
    missing_in_vector_copy: int | None = None
    """Chunks whose vector the durable copy lacks (None: no copy, as with a Chroma
    server, or off). Not part of `ok`: searches do not use it, and an open fills it."""

    @property
    def ok(self) -> bool:
        return not (
            self.missing_in_bm25
            or self.extra_in_bm25
            or self.orphan_records
            or self.unrecorded_sources
            or self.mixed_sources
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckReport:
        return cls(**_known(cls, data))
