"""Answer evaluation: does what `rag_search` returns contain the answer an LLM needs?

    python -m eval.answer_eval SET_DIR [--persist-dir DIR] [--output-dir DIR]
                               [--n-results N] [--html-root DIR] [--limit N]

SET_DIR holds `site.json` (the Debian package, its version, HTML root and optionally
`settings` the site needs, e.g. a higher `rag_max_chunks_per_source`), `pages.txt`
(the indexed pages, relative to the HTML root) and `questions.jsonl` (one question a
line: `id`, `query`, `kind`, `page`, `answer`, optionally `also`: other forms the same
answer takes, e.g. a table row as a pipe row and as `column: value` lines). The listed
pages are copied into a folder that keeps their relative paths (inside `--persist-dir`
when given, so a second run embeds nothing; else a temporary folder) and indexed with
`KnowledgeBase.index_dir`, exactly as `rag index` indexes a user's folder. Every question
is asked with `KnowledgeBase.retrieve(query)` on the shipped defaults (what `rag_search` does when
the LLM gives no `n_results` or `mode`) and the returned text is built by the MCP
server's own `mcp_server.formatting.format_search`, so the score is about the exact text
the LLM receives. Only the public KnowledgeBase API and that function are used.

Per kind and overall (answerable questions; `none` questions have no page or answer):

- `page@1` / `page@5`: the top hit / one of the top five comes from the answering page
  (the hit's `source_url` ends with the page's path). When the shipped result count is
  below five, a second `retrieve(query, 5)` gives the ranking for `page@5` only;
- `answer_in_output`: the answer string is in the returned text, compared after NFKC
  with all whitespace removed (extraction may re-wrap lines and drops code indentation);
- `chars`: mean length of the returned text; `ms`: mean wall time of retrieve + format;
- `confident`: share of questions that got at least one hit that the no-match rule
  (`rag_app.index.no_match`) did not decline. For `none` questions that is the
  `confident_rate`; for answerable ones, one minus what the rule costs. The top hit's
  scores, the rule's evidence (`rag_app.index.no_match.Evidence`) and a what-if table
  over cut-offs are in the report, so the rule's cut-off is calibrated on them (run with
  `RAG_NO_MATCH_CUTOFF=10` to record all the evidence of every question).

A reused `--persist-dir` keeps the chunks it was built with: `index_dir` skips files
whose mtime has not changed, so measure a code change in a fresh folder (the runner warns
when the folder was built by other code).

`report.json` (config, index, metrics, every question with its hits' sources and scores,
the returned text and whether the answer was found) and `report.md` (tables per kind,
score distributions and the first 10 misses per kind with what was returned) go to
`--output-dir` (default `.tmp/answer-eval/<set name>`). Exit codes: 0 done, 2 something to
fix (bad set, missing HTML root, settings, store), one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shutil
import statistics
import sys
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from eval.output_checks import count_defects
from eval.run_info import code_version, recorded_settings, work_folder
from rag_app.index.no_match import Evidence

DEFAULT_OUTPUT_ROOT = Path(".tmp") / "answer-eval"
RANK_K = 5
MISSES_SHOWN = 10
EXIT_OK, EXIT_ERROR = 0, 2
KINDS = ("prose", "code", "table", "concept", "none")
ANSWERABLE = tuple(k for k in KINDS if k != "none")
PREVIEW_CHARS = 400


class SetError(Exception):
    """The set folder, its files or its HTML root are missing or malformed."""


# --- text matching ----------------------------------------------------------------------
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """NFKC with every whitespace run made one space (for display and comparison)."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def squash(text: str) -> str:
    """NFKC with all whitespace removed: line wraps and lost indentation do not matter."""
    return _SPACE.sub("", unicodedata.normalize("NFKC", text))


def answer_found(answer: str, text: str) -> bool:
    """Whether `answer` appears in `text` (NFKC, whitespace-insensitive). Empty never does."""
    needle = squash(answer)
    return bool(needle) and needle in squash(text)


def page_of_url(source_url: str) -> str:
    """The decoded path of a hit's source URL (`file:///tmp/x/library/json.html` → path)."""
    parsed = urlparse(source_url)
    return unquote(parsed.path if parsed.scheme else source_url)


def page_matches(source_url: str, page: str) -> bool:
    """Whether a hit's source is the page (`library/json.html`): its path ends with it."""
    if not page:
        return False
    path = page_of_url(source_url)
    page = page.lstrip("/")
    return path == page or path.endswith("/" + page)


def relative_page(source_url: str, pages: Sequence[str]) -> str:
    """The listed page a source URL belongs to (longest match), else the URL itself."""
    best = ""
    for page in pages:
        if page_matches(source_url, page) and len(page) > len(best):
            best = page
    return best or source_url


# --- the set ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    """One line of `questions.jsonl`."""

    id: str
    query: str
    kind: str
    page: str
    answer: str
    also: tuple[str, ...] = ()

    def found_in(self, text: str) -> bool:
        """Whether the answer, in any of its forms, is in `text`."""
        return any(answer_found(form, text) for form in (self.answer, *self.also))


@dataclass(frozen=True)
class DocSet:
    name: str
    folder: Path
    site: dict[str, Any]
    pages: list[str]
    questions: list[Question]

    @property
    def html_root(self) -> Path:
        return Path(str(self.site.get("html_root", "")))


def load_pages(file: Path) -> list[str]:
    """`pages.txt`: one relative path a line; blank lines and `#` comments skipped."""
    if not file.is_file():
        raise SetError(f"{file} is missing; list the pages to index there, one a line.")
    pages: list[str] = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("/") or ".." in Path(line).parts:
            raise SetError(f"{file} line {number}: {line!r} is not a relative path.")
        pages.append(line)
    if not pages:
        raise SetError(f"{file} lists no pages.")
    if len(set(pages)) != len(pages):
        raise SetError(f"{file} lists a page twice.")
    return pages


def parse_question(row: Any) -> Question:
    """A question from one decoded JSON line; ValueError says what is wrong."""
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in ("id", "query", "kind", "page", "answer") if k not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    also = row.get("also", [])
    if not isinstance(also, list) or not all(isinstance(a, str) and a.strip() for a in also):
        raise ValueError("also is a list of non-empty strings")
    q = Question(*(str(row[k]) for k in ("id", "query", "kind", "page", "answer")), tuple(also))
    if not q.id or not q.query.strip():
        raise ValueError("empty id or query")
    if q.kind not in KINDS:
        raise ValueError(f"kind {q.kind!r} is not one of {', '.join(KINDS)}")
    if q.kind == "none" and (q.page or q.answer or q.also):
        raise ValueError("a none question has an empty page and answer")
    if q.kind != "none" and not (q.page and q.answer.strip()):
        raise ValueError("an answerable question needs a page and an answer")
    return q


def load_questions(file: Path, pages: Sequence[str] | None = None) -> list[Question]:
    """`questions.jsonl`; a SetError names the file and line of any problem."""
    if not file.is_file():
        raise SetError(f"{file} is missing.")
    listed = set(pages or ())
    questions: list[Question] = []
    seen: set[str] = set()
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = parse_question(json.loads(line))
        except (json.JSONDecodeError, ValueError) as err:
            raise SetError(f"{file} line {number} is not a question: {err}.") from None
        if q.id in seen:
            raise SetError(f"{file} line {number}: id {q.id} is used twice.")
        if pages is not None and q.page and q.page not in listed:
            raise SetError(f"{file} line {number}: page {q.page} is not in pages.txt.")
        seen.add(q.id)
        questions.append(q)
    if not questions:
        raise SetError(f"{file} holds no questions.")
    return questions


def load_set(set_dir: str | Path, html_root: str | None = None) -> DocSet:
    folder = Path(set_dir).resolve()
    site_file = folder / "site.json"
    try:
        site = json.loads(site_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise SetError(f"{site_file} is missing or not JSON ({err}).") from None
    if html_root:
        site["html_root"] = html_root
    pages = load_pages(folder / "pages.txt")
    questions = load_questions(folder / "questions.jsonl", pages)
    return DocSet(folder.name, folder, site, pages, questions)


def kind_counts(questions: Sequence[Question]) -> dict[str, int]:
    return {kind: sum(q.kind == kind for q in questions) for kind in KINDS}


def select(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """`limit` questions spread evenly over the file (all when None)."""
    if not limit or limit >= len(questions):
        return list(questions)
    step = len(questions) / limit
    return [questions[int(i * step)] for i in range(limit)]


def stage_pages(docs: DocSet, target: Path) -> Path:
    """Copy the set's pages under `target`, keeping relative paths and mtimes.

    An up-to-date copy (same size and mtime) is left alone, so a reused knowledge base
    sees unchanged files; pages no longer listed are removed."""
    root = docs.html_root
    if not root.is_dir():
        hint = docs.site.get("install") or f"install the package {docs.site.get('package')}"
        raise SetError(f"HTML root {root} is not there; {hint} (or pass --html-root).")
    target.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for page in docs.pages:
        src = root / page
        if not src.is_file():
            raise SetError(f"{src} is listed in pages.txt but is not a file under {root}.")
        dst = target / page
        wanted.add(dst.resolve())
        st = src.stat()
        if dst.is_file():
            dt = dst.stat()
            if dt.st_size == st.st_size and int(dt.st_mtime) == int(st.st_mtime):
                continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for stale in [p for p in target.rglob("*") if p.is_file()]:
        if stale.resolve() not in wanted:
            stale.unlink()
    return target


# --- scoring ----------------------------------------------------------------------------
@dataclass
class HitRecord:
    rank: int
    source: str
    heading_path: str
    chunk_index: int
    combined_score: float
    vector_distance: float | None
    bm25_score: float | None
    chars: int
    has_answer: bool


@dataclass
class QuestionResult:
    id: str
    kind: str
    query: str
    page: str
    answer: str
    also: list[str]  # other forms of the answer that count as found
    hits: list[HitRecord]  # what rag_search returned (shipped n_results)
    ranking: list[str]  # pages of the top RANK_K hits (for page@5)
    page_rank: int | None  # 1-based rank of the answering page within `ranking`
    answer_in_output: bool
    output_chars: int
    ms: float
    output: str
    declined: bool = False  # the no-match rule said nothing answers it
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def confident(self) -> bool:
        return bool(self.hits) and not self.declined

    @property
    def top(self) -> HitRecord | None:
        return self.hits[0] if self.hits else None

    def metrics(self) -> dict[str, float]:
        rank = self.page_rank
        return {
            "page@1": float(rank == 1),
            "page@5": float(rank is not None and rank <= RANK_K),
            "answer_in_output": float(self.answer_in_output),
        }

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["confident"] = self.confident
        top = self.top
        out["top_combined_score"] = top.combined_score if top else None
        out["top_vector_distance"] = top.vector_distance if top else None
        out["top_bm25_score"] = top.bm25_score if top else None
        return out


def score_question(
    question: Question,
    hits: Sequence[Any],
    output: str,
    ranking_sources: Sequence[str],
    pages: Sequence[str],
    ms: float,
    evidence: dict[str, Any] | None = None,
) -> QuestionResult:
    """Score one question: `hits` are the returned Hit objects, `output` the tool's text,
    `ranking_sources` the source URLs of the top RANK_K hits, best first; `evidence`
    the no-match rule's (`declined`, `evidence`)."""
    records = [
        HitRecord(
            rank=rank,
            source=relative_page(h.source_url, pages),
            heading_path=h.heading_path,
            chunk_index=h.chunk_index,
            combined_score=round(float(h.combined_score), 6),
            vector_distance=None if h.vector_distance is None else round(h.vector_distance, 6),
            bm25_score=None if h.bm25_score is None else round(h.bm25_score, 6),
            chars=len(h.text),
            has_answer=question.found_in(h.text),
        )
        for rank, h in enumerate(hits, 1)
    ]
    ranking = [relative_page(src, pages) for src in ranking_sources[:RANK_K]]
    top_sources = ranking_sources[:RANK_K]
    page_rank = next(
        (r for r, src in enumerate(top_sources, 1) if page_matches(src, question.page)), None
    )
    return QuestionResult(
        id=question.id,
        kind=question.kind,
        query=question.query,
        page=question.page,
        answer=question.answer,
        also=list(question.also),
        hits=records,
        ranking=ranking,
        page_rank=page_rank,
        answer_in_output=question.found_in(output) if question.answer else False,
        output_chars=len(output),
        ms=round(ms, 2),
        **(evidence or {}),
        output=output,
    )


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


@dataclass
class Group:
    """Means over a group of questions (page/answer metrics only for answerable ones)."""

    n: int
    metrics: dict[str, float | None]
    chars: float
    confident: float
    ms: float

    @classmethod
    def of(cls, results: Sequence[QuestionResult]) -> Group:
        answerable = [r for r in results if r.kind != "none"]
        metrics: dict[str, float | None] = {}
        for name in ("page@1", "page@5", "answer_in_output"):
            metrics[name] = _mean([r.metrics()[name] for r in answerable]) if answerable else None
        return cls(
            n=len(results),
            metrics=metrics,
            chars=round(_mean([r.output_chars for r in results]), 1),
            confident=_mean([float(r.confident) for r in results]),
            ms=round(_mean([r.ms for r in results]), 1),
        )


def summarize(results: Sequence[QuestionResult]) -> dict[str, Group]:
    """Per kind (in KINDS order), then `answerable` and `all`."""
    out = {kind: Group.of([r for r in results if r.kind == kind]) for kind in KINDS}
    out = {k: g for k, g in out.items() if g.n}
    out["answerable"] = Group.of([r for r in results if r.kind != "none"])
    out["all"] = Group.of(results)
    return out


def distribution(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """n, min, p10, p25, median, p75, p90, max of the non-None values."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return {"n": 0}

    def q(p: float) -> float:
        return round(vals[min(len(vals) - 1, max(0, round(p * (len(vals) - 1))))], 4)

    return {
        "n": len(vals),
        "min": round(vals[0], 4),
        "p10": q(0.10),
        "p25": q(0.25),
        "median": round(statistics.median(vals), 4),
        "p75": q(0.75),
        "p90": q(0.90),
        "max": round(vals[-1], 4),
    }


def top_score_distributions(results: Sequence[QuestionResult]) -> dict[str, dict[str, Any]]:
    """The top hit's scores for answerable vs none questions (for calibrating a cut-off)."""
    groups = {
        "answerable": [r for r in results if r.kind != "none"],
        "answerable, answer returned": [r for r in results if r.answer_in_output],
        "none": [r for r in results if r.kind == "none"],
    }
    out: dict[str, dict[str, Any]] = {}
    for name, members in groups.items():
        tops = [r.top for r in members]
        out[name] = {
            "combined_score": distribution([t.combined_score if t else None for t in tops]),
            "vector_distance": distribution([t.vector_distance if t else None for t in tops]),
            "bm25_score": distribution([t.bm25_score if t else None for t in tops]),
        }
    return out


CUTOFF_GRID = (-1.0, -0.8, -0.7, -0.6, -0.4, -0.2, 0.0, 0.4)


def no_match_cutoffs(results: Sequence[QuestionResult]) -> list[dict[str, Any]]:
    """What-if on the recorded evidence: the no-match rule at cut-off t declines a
    question as `Evidence.declines(t)` says on its recorded evidence. Per t: the share of
    none questions declined and of answerable questions (and of those whose answer was
    returned) it would decline. Exact for t up to the run's cut-off (all the evidence is
    recorded at `RAG_NO_MATCH_CUTOFF=10`); "answer returned" counts what this run
    returned, so compare with a run with the rule off."""
    if not any(r.evidence.get("excess") is not None for r in results):
        return []

    def kept(r: QuestionResult, t: float) -> bool:
        return bool(r.hits) and not Evidence(**r.evidence).declines(t)

    groups = {
        "none_silenced": ([r for r in results if r.kind == "none"], False),
        "answerable_lost": ([r for r in results if r.kind != "none"], True),
        "answer_returned_lost": ([r for r in results if r.answer_in_output], True),
    }
    rows = []
    for t in CUTOFF_GRID:
        row: dict[str, Any] = {"cutoff": t}
        for name, (members, _) in groups.items():
            dropped = [r for r in members if not kept(r, t)]
            row[name] = round(len(dropped) / len(members), 4) if members else None
        rows.append(row)
    return rows


# --- report -------------------------------------------------------------------------------
@dataclass
class Report:
    config: dict[str, Any]
    index: dict[str, Any]
    results: list[QuestionResult]
    groups: dict[str, Group] = field(init=False)
    scores: dict[str, dict[str, Any]] = field(init=False)
    cutoffs: list[dict[str, Any]] = field(init=False)
    defects: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.defects = count_defects(r.output for r in self.results)
        self.groups = summarize(self.results)
        self.scores = top_score_distributions(self.results)
        self.cutoffs = no_match_cutoffs(self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "index": self.index,
            "by_kind": {k: asdict(v) for k, v in self.groups.items()},
            "confident_rate_none": self.groups["none"].confident if "none" in self.groups else None,
            "top_hit_scores": self.scores,
            "no_match_what_if": self.cutoffs,
            "output_defects": self.defects,
            "questions": [r.to_json() for r in self.results],
        }

    def table(self) -> str:
        lines = [
            "| kind | n | page@1 | page@5 | answer_in_output | chars | confident | ms/query |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]

        def num(value: float | None) -> str:
            return "–" if value is None else f"{value:.3f}"

        for name, g in self.groups.items():
            m = g.metrics
            cells = [
                f"**{name}**" if name in ("answerable", "all") else name,
                str(g.n),
                num(m["page@1"]),
                num(m["page@5"]),
                num(m["answer_in_output"]),
                f"{g.chars:.0f}",
                f"{g.confident:.3f}",
                f"{g.ms:.1f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def score_table(self) -> str:
        cols = ("n", "min", "p10", "p25", "median", "p75", "p90", "max")
        lines = [
            "| questions | top-hit score | " + " | ".join(cols) + " |",
            "| --- | --- | " + " | ".join("---:" for _ in cols) + " |",
        ]
        for group, by_score in self.scores.items():
            for score_name, dist in by_score.items():
                cells = [group, score_name] + [str(dist.get(c, "–")) for c in cols]
                lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def cutoff_table(self) -> str:
        lines = [
            "| cut-off | none declined | answerable declined | answer-returned declined |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for row in self.cutoffs:
            cells = [f"{row['cutoff']:.2f}"] + [
                "–" if row[k] is None else f"{row[k]:.3f}"
                for k in ("none_silenced", "answerable_lost", "answer_returned_lost")
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def markdown(self) -> str:
        c, ix = self.config, self.index
        site = c["site"]
        overrides = ", ".join(f"{k}={v}" for k, v in c["site_settings"].items())
        out = [
            f"# Answer evaluation: {c['set']}",
            "",
            f"- site: {site.get('package')} {site.get('version')} ({site.get('html_root')})",
            f"- questions: {len(self.results)} of {c['questions_in_set']}; pages: {ix['pages']}, "
            f"chunks: {ix['chunks']}; indexed in {ix['seconds']:.1f} s "
            f"({ix['added']} added, {ix['unchanged']} unchanged)",
            f"- retrieval: n_results {c['n_results']}, mode {c['mode']} "
            f"(page@5 from a second retrieve of {RANK_K} when n_results < {RANK_K}); "
            f"formatting: {c['formatter']}",
            f"- shipped defaults: {'yes' if c['defaults'] else 'NO: ' + ', '.join(c['changed'])}"
            + (f" (set by site.json: {overrides})" if overrides else ""),
            f"- code: {c['code']}",
            f"- wall time: {c['wall_seconds']:.1f} s in all",
            "",
            "## By kind",
            "",
            "page@k and answer_in_output over answerable questions; `confident` = share of "
            "questions with hits the no-match rule did not decline (for `none`: the "
            "confident_rate).",
            "",
            self.table(),
            "",
            "Hits whose text an LLM would have to guess around (`eval/output_checks.py`): "
            + ", ".join(f"{k} {v}" for k, v in self.defects.items())
            + ".",
            "",
            "## Top hit's scores: answerable vs none questions",
            "",
            self.score_table(),
            "",
            "What-if, on these numbers: the no-match rule at other cut-offs (declines when "
            "the best vector hit's excess is below the cut-off and the lexical evidence "
            "does not vouch for the hits; `rag_app.index.no_match`). Record all the "
            "evidence with RAG_NO_MATCH_CUTOFF=10.",
            "",
            self.cutoff_table(),
            "",
            f"## First {MISSES_SHOWN} misses per kind",
            "",
            "A miss is an answerable question whose answer is not in the returned text, or a "
            "`none` question that got hits.",
        ]
        for kind in KINDS:
            members = [r for r in self.results if r.kind == kind]
            if not members:
                continue
            if kind == "none":
                misses = [r for r in members if r.confident]
            else:
                misses = [r for r in members if not r.answer_in_output]
            out += ["", f"### {kind} ({len(misses)} of {len(members)} missed)", ""]
            if not misses:
                out.append("none")
                continue
            for r in misses[:MISSES_SHOWN]:
                top = r.top
                scores = (
                    f"combined {top.combined_score:.3f}, distance "
                    f"{_fmt(top.vector_distance)}, bm25 {_fmt(top.bm25_score)}"
                    if top
                    else "no hit"
                )
                out += [
                    f"- **{r.id}** {r.query}",
                    "  - expected: "
                    + " or ".join(f"`{normalize(a)}`" for a in (r.answer, *r.also))
                    + f" in {r.page}"
                    if r.answer
                    else "  - expected: no hit",
                    f"  - page rank: {r.page_rank or '–'}; top-{RANK_K} pages: "
                    + (", ".join(r.ranking) or "none"),
                    f"  - top hit: {scores}; returned {r.output_chars} chars:",
                    "",
                    "    ```text",
                    *("    " + line for line in _truncate(r.output).splitlines()),
                    "    ```",
                ]
        return "\n".join(out) + "\n"

    def write(self, output_dir: str | Path) -> list[Path]:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        json_path = folder / "report.json"
        md_path = folder / "report.md"
        json_path.write_text(
            json.dumps(self.to_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
        md_path.write_text(self.markdown(), encoding="utf-8")
        return [json_path, md_path]


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _truncate(text: str, limit: int = PREVIEW_CHARS) -> str:
    text = text.replace("```", "'''")
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- running ------------------------------------------------------------------------------
def _settings(persist_dir: Path, set_name: str, overrides: dict[str, Any]) -> Any:
    """Settings from the environment, on the set's own store, plus the site's overrides."""
    from rag_app.config import load_settings

    name = "answers-" + re.sub(r"[^A-Za-z0-9._-]+", "-", set_name).strip("-._")
    return load_settings(
        **overrides,
        chromadb_persist_dir=str(persist_dir / "store"),
        bm25_persist_dir=str(persist_dir / "store" / f"bm25-{name}"),
        rag_collection_name=name[:60],
    )


_MARKER = "answer-eval.json"


def _check_marker(work: Path, code: str, verbose: bool) -> None:
    """Warn when a reused work folder was indexed by other code; record this code."""
    marker = work / _MARKER
    try:
        built_by = json.loads(marker.read_text(encoding="utf-8")).get("code")
    except (OSError, ValueError, AttributeError):
        built_by = None
    if built_by and built_by != code and verbose:
        print(
            f"warning: {work} was indexed by {built_by}; unchanged pages keep those chunks. "
            "Use a fresh --persist-dir to measure a change in parsing or chunking.",
            file=sys.stderr,
        )
    if not built_by:
        marker.write_text(json.dumps({"code": code}) + "\n", encoding="utf-8")


async def run_set(
    set_dir: str | Path,
    *,
    persist_dir: str | None = None,
    n_results: int | None = None,
    html_root: str | None = None,
    limit: int | None = None,
    verbose: bool = True,
) -> Report:
    """Index the set's pages and score every (selected) question."""
    from eval.progress import progress_bar
    from mcp_server.formatting import format_search
    from rag_app.errors import RAGError
    from rag_app.knowledge import KnowledgeBase

    wall = time.perf_counter()
    docs = load_set(set_dir, html_root)
    questions = select(docs.questions, limit)
    code = code_version()
    with work_folder(persist_dir, "rag-answers-") as work:
        _check_marker(work, code, verbose)
        pages_dir = stage_pages(docs, work / "pages" / docs.name)
        site_settings = dict(docs.site.get("settings") or {})
        settings = _settings(work, docs.name, site_settings)
        shown = n_results or settings.rag_retrieval_count
        kb = KnowledgeBase(settings)
        try:
            await kb.open()
            started = time.perf_counter()
            with progress_bar("Indexing", "page") as update:
                summary = await kb.index_dir(pages_dir, progress=update)
            seconds = time.perf_counter() - started
            if summary.errors:
                first, reason = summary.errors[0]
                raise RAGError(f"{summary.failed} page(s) failed to index, e.g. {first}: {reason}")
            index = {
                "pages": summary.added + summary.updated + summary.unchanged,
                "chunks": summary.chunks,
                "added": summary.added,
                "updated": summary.updated,
                "unchanged": summary.unchanged,
                "seconds": round(seconds, 2),
            }
            if verbose:
                print(
                    f"Indexed {index['pages']} pages, {index['chunks']} chunks in "
                    f"{seconds:.1f} s; asking {len(questions)} questions.",
                    file=sys.stderr,
                )
            results: list[QuestionResult] = []
            mode = None
            with progress_bar("Asking", "query") as update:
                for done, question in enumerate(questions, 1):
                    t0 = time.perf_counter()
                    found = await kb.retrieve(question.query, n_results)
                    output = format_search(found)
                    ms = (time.perf_counter() - t0) * 1000
                    mode = found.mode
                    evidence = {"declined": not found.confident, "evidence": found.evidence}
                    if len(found.hits) >= RANK_K or shown >= RANK_K:
                        ranked = found.hits
                    else:
                        ranked = (await kb.retrieve(question.query, RANK_K)).hits
                    sources = [h.source_url for h in ranked]
                    results.append(
                        score_question(
                            question, found.hits, output, sources, docs.pages, ms, evidence
                        )
                    )
                    update(done, len(questions))
        finally:
            await kb.aclose()
    recorded, changed = recorded_settings(settings)
    config = {
        "set": docs.name,
        "set_dir": str(docs.folder),
        "site": docs.site,
        "questions_in_set": len(docs.questions),
        "kinds_in_set": kind_counts(docs.questions),
        "limit": limit,
        "n_results": n_results if n_results else f"default ({shown})",
        "mode": f"default ({mode})",
        "formatter": "mcp_server.formatting.format_search",
        "settings": recorded,
        "site_settings": site_settings,
        "defaults": not changed and n_results is None,
        "changed": changed + ([] if n_results is None else ["n_results"]),
        "code": code,
        "persist_dir": persist_dir or "(temporary)",
        "wall_seconds": round(time.perf_counter() - wall, 1),
    }
    return Report(config, index, results)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m eval.answer_eval",
        description="Score whether rag_search's returned text holds each question's answer.",
    )
    p.add_argument("set_dir", help="folder with site.json, pages.txt and questions.jsonl")
    p.add_argument(
        "--persist-dir",
        default=None,
        help="work folder (page copies + Chroma/BM25), reused between runs (default: temp dir)",
    )
    p.add_argument(
        "--output-dir", default=None, help=f"report folder (default {DEFAULT_OUTPUT_ROOT}/<set>)"
    )
    p.add_argument(
        "--n-results",
        type=_positive,
        default=None,
        help="hits per question (default: the shipped RAG_RETRIEVAL_COUNT, as rag_search)",
    )
    p.add_argument("--html-root", default=None, help="the pages' root (default: site.json's)")
    p.add_argument("--limit", type=_positive, default=None, help="ask N questions, spread evenly")
    p.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100, got {text}")
    return value


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("rag_app").setLevel(logging.INFO if args.verbose else logging.WARNING)
    from rag_app.config import SettingsError
    from rag_app.errors import RAGError

    try:
        report = asyncio.run(
            run_set(
                args.set_dir,
                persist_dir=args.persist_dir,
                n_results=args.n_results,
                html_root=args.html_root,
                limit=args.limit,
            )
        )
    except (SetError, RAGError, SettingsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    output = args.output_dir or str(DEFAULT_OUTPUT_ROOT / report.config["set"])
    written = report.write(output)
    print(report.table())
    print()
    print(report.score_table())
    print(f"Reports: {', '.join(str(p) for p in written)}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> None:
    raise SystemExit(run(argv))


if __name__ == "__main__":
    main()
