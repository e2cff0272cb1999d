"""Table-row lookup evaluation: does search put the row that answers the question first?

    python -m eval.row_lookup SET_DIR [--persist-dir DIR] [--output-dir DIR]
                              [--n-results 5] [--limit N] [--mode fused]

SET_DIR is a folder written by `eval.table_sets` (`pages/*.html` + `queries.jsonl`). The
pages are indexed with `KnowledgeBase.index_dir`, exactly as `rag index` indexes a
user's folder, and every question is asked with `KnowledgeBase.retrieve` on the settings
from the environment (the shipped defaults unless RAG_* variables say otherwise; the report
records them). Only the public KnowledgeBase API is used, so the runner keeps working while
parsing and retrieval internals change.

A hit *is the asked row* when it comes from the question's page, holds the row key and
every answer as whole values (NFKC; `41` does not match `412`, `スライム` does not match
`スライムベス`: `eval.table_sets.row_matches`) and holds the name of no other row of that
page (a chunk of several rows is not the row). Per category and overall:

- `row@1`: the top hit is the asked row; `row@5`: one of the top five is;
- `MRR`: 1 / rank of the asked row within the returned hits (0 when absent);
- `page@1`: the top hit comes from the right page;
- `declined`: the no-match rule (`RAG_NO_MATCH_CUTOFF`) answered "nothing found" (what
  the rule costs: every question here has an answer);
- `ms`: mean wall time of one `retrieve` call.

The Markdown table is printed; `report.json` (config, metrics, every question's rank and
top hit) and `report.md` (tables and the first 10 misses of each category with the top
hit's first line) go to `--output-dir` (default `.tmp/row-lookup/<set name>`).
Exit codes: 0 done, 2 something to fix (bad set folder, settings, store), one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import html.parser
import json
import logging
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from eval.datasets import DatasetError
from eval.run_info import code_version, recorded_settings, work_folder
from eval.table_sets import Question, contains_value, row_matches
from rag_app.errors import RAGError

DEFAULT_OUTPUT_ROOT = Path(".tmp") / "row-lookup"
TOP_K = 5
MISSES_SHOWN = 10
EXIT_OK, EXIT_ERROR = 0, 2
MODES = ("fused", "vector", "bm25")
METRICS = ("row@1", "row@5", "mrr", "page@1", "declined")


# --- the set ----------------------------------------------------------------------------
RowQuestion = Question
"""One line of `queries.jsonl` (the generator's own question type)."""


def load_questions(set_dir: str | Path) -> list[RowQuestion]:
    """The set's questions; a `DatasetError` names the file and line of any problem."""
    folder = Path(set_dir)
    file = folder / "queries.jsonl"
    pages = folder / "pages"
    if not file.is_file() or not pages.is_dir():
        raise DatasetError(
            f"{folder} is not a table set: it needs queries.jsonl and a pages/ folder "
            "(write one with `python -m eval.table_sets`)."
        )
    questions: list[RowQuestion] = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            question = RowQuestion(
                id=str(row["id"]),
                query=str(row["query"]),
                category=str(row["category"]),
                page=str(row["page"]),
                row_key=str(row["row_key"]),
                answers=tuple(str(a) for a in row["answers"]),
                variant=str(row.get("variant", "")),
            )
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise DatasetError(f"{file} line {number} is not a question ({err}).") from None
        if not (pages / question.page).is_file():
            raise DatasetError(f"{file} line {number}: page {question.page} is not in {pages}.")
        questions.append(question)
    if not questions:
        raise DatasetError(f"{file} holds no questions.")
    return questions


class _RowNames(html.parser.HTMLParser):
    """Collects the text of every `<th scope="row">` (the row's name cell)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self._inside = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "th" and ("scope", "row") in attrs:
            self._inside = True
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "th" and self._inside:
            self._inside = False
            self.names.append("".join(self._text).strip())

    def handle_data(self, data: str) -> None:
        if self._inside:
            self._text.append(data)


def page_row_names(pages_dir: str | Path) -> dict[str, list[str]]:
    """Page file name → the names of its rows (from the pages themselves)."""
    names: dict[str, list[str]] = {}
    for page in sorted(Path(pages_dir).glob("*.htm*")):
        parser = _RowNames()
        parser.feed(page.read_text(encoding="utf-8"))
        names[page.name] = parser.names
    return names


def select(questions: list[RowQuestion], limit: int | None) -> list[RowQuestion]:
    """`limit` questions spread evenly over the file (every category keeps its share)."""
    if limit is None or limit >= len(questions):
        return questions
    return [questions[i * len(questions) // limit] for i in range(limit)]


# --- scoring ------------------------------------------------------------------------------
def page_of(source_url: str) -> str:
    """The file name a hit's source points at (`file:///…/pages/x.html` → `x.html`)."""
    return unquote(urlparse(source_url).path).rstrip("/").rsplit("/", 1)[-1]


def is_row(text: str, page: str, question: RowQuestion, others: Sequence[str] = ()) -> bool:
    """Whether a hit (its text and page) is the row `question` asks for."""
    if page != question.page or not row_matches(text, question.row_key, question.answers):
        return False
    return not any(contains_value(text, name) for name in others if name != question.row_key)


def row_rank(
    hits: Sequence[tuple[str, str]], question: RowQuestion, others: Sequence[str] = ()
) -> int | None:
    """1-based rank of the asked row among `(text, page)` hits, or None."""
    for rank, (text, page) in enumerate(hits, 1):
        if is_row(text, page, question, others):
            return rank
    return None


@dataclass
class QuestionResult:
    id: str
    category: str
    page: str
    query: str
    row_key: str
    answers: list[str]
    variant: str
    rank: int | None
    page_at_1: bool
    ms: float
    top_page: str
    top_text: str
    declined: bool = False  # the no-match rule answered "nothing found"
    evidence: dict[str, Any] = field(default_factory=dict)  # what the rule saw

    def metrics(self) -> dict[str, float]:
        rank = self.rank
        return {
            "row@1": float(rank == 1),
            "row@5": float(rank is not None and rank <= TOP_K),
            "mrr": 1.0 / rank if rank else 0.0,
            "page@1": float(self.page_at_1),
            "declined": float(self.declined),
        }


def score(
    question: RowQuestion,
    hits: Sequence[tuple[str, str]],
    ms: float,
    others: Sequence[str],
    declined: bool = False,
    evidence: dict[str, Any] | None = None,
) -> QuestionResult:
    """Score one question's hits (`(text, page)`, best first); `declined`: the no-match
    rule said nothing answers it."""
    top_text, top_page = hits[0] if hits else ("", "")
    return QuestionResult(
        id=question.id,
        category=question.category,
        page=question.page,
        query=question.query,
        row_key=question.row_key,
        answers=list(question.answers),
        variant=question.variant,
        rank=row_rank(hits, question, others),
        page_at_1=top_page == question.page,
        ms=round(ms, 2),
        top_page=top_page,
        top_text=top_text,
        declined=declined,
        evidence=dict(evidence or {}),
    )


@dataclass
class Group:
    """Means over a group of questions."""

    n: int
    metrics: dict[str, float]
    ms: float

    @classmethod
    def of(cls, results: Sequence[QuestionResult]) -> Group:
        n = len(results)
        sums = dict.fromkeys(METRICS, 0.0)
        for result in results:
            for name, value in result.metrics().items():
                sums[name] += value
        return cls(
            n=n,
            metrics={k: round(v / n, 4) if n else 0.0 for k, v in sums.items()},
            ms=round(sum(r.ms for r in results) / n, 1) if n else 0.0,
        )


def summarize(results: Sequence[QuestionResult], key: str) -> dict[str, Group]:
    """Groups by `key` (an attribute of QuestionResult), in first-seen order, plus `all`."""
    groups: dict[str, list[QuestionResult]] = {}
    for result in results:
        groups.setdefault(str(getattr(result, key)), []).append(result)
    out = {name: Group.of(members) for name, members in groups.items()}
    out["all"] = Group.of(results)
    return out


# --- report -------------------------------------------------------------------------------
@dataclass
class Report:
    config: dict[str, Any]
    index: dict[str, Any]
    results: list[QuestionResult]
    by_category: dict[str, Group] = field(init=False)
    by_page: dict[str, Group] = field(init=False)

    def __post_init__(self) -> None:
        self.by_category = summarize(self.results, "category")
        self.by_page = summarize(self.results, "page")

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "index": self.index,
            "by_category": {k: asdict(v) for k, v in self.by_category.items()},
            "by_page": {k: asdict(v) for k, v in self.by_page.items()},
            "questions": [asdict(r) for r in self.results],
        }

    def table(self, groups: dict[str, Group], label: str) -> str:
        lines = [
            f"| {label} | n | row@1 | row@5 | MRR | page@1 | declined | ms/query |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, group in groups.items():
            m = group.metrics
            cells = [
                f"**{name}**" if name == "all" else name,
                str(group.n),
                f"{m['row@1']:.3f}",
                f"{m['row@5']:.3f}",
                f"{m['mrr']:.3f}",
                f"{m['page@1']:.3f}",
                f"{m['declined']:.3f}",
                f"{group.ms:.1f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def markdown(self) -> str:
        c, ix = self.config, self.index
        out = [
            f"# Table-row lookup: {c['set']}",
            "",
            f"- questions: {len(self.results)} of {c['questions_in_set']}; pages: {ix['pages']}, "
            f"chunks: {ix['chunks']}; indexed in {ix['seconds']:.1f} s "
            f"({ix['added']} added, {ix['unchanged']} unchanged)",
            f"- retrieval: mode {c['mode']}, n_results {c['n_results']}, "
            + ", ".join(f"{k} {v}" for k, v in c["settings"].items()),
            f"- shipped defaults: {'yes' if c['defaults'] else 'NO: ' + ', '.join(c['changed'])}",
            f"- code: {c['code']}",
            "",
            "## By category",
            "",
            self.table(self.by_category, "category"),
            "",
            "## By page",
            "",
            self.table(self.by_page, "page"),
            "",
            f"## First {MISSES_SHOWN} misses per category (row@1)",
        ]
        for category in self.by_category:
            if category == "all":
                continue
            misses = [r for r in self.results if r.category == category and r.rank != 1]
            out += ["", f"### {category} ({len(misses)} misses)", ""]
            if not misses:
                out.append("none")
                continue
            out += [
                "| id | query | expected row → answers | rank | top hit |",
                "| --- | --- | --- | ---: | --- |",
            ]
            for r in misses[:MISSES_SHOWN]:
                expected = f"{r.row_key} → {', '.join(r.answers)}"
                top = f"{r.top_page}: {preview(r.top_text)}" if r.top_page else "(no hit)"
                rank = str(r.rank) if r.rank else "–"
                cells = [r.id, r.query, expected, rank, top]
                out.append("| " + " | ".join(_cell(x) for x in cells) + " |")
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


def preview(text: str, limit: int = 90) -> str:
    """The chunk's first line; a short first line (`No.: 57`) is followed by the next."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    shown = lines[0] if len(lines[0]) >= 20 or len(lines) == 1 else f"{lines[0]} / {lines[1]}"
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --- running ------------------------------------------------------------------------------
def _settings(persist_dir: Path, set_name: str) -> Any:
    from rag_app.config import load_settings

    name = "rows-" + re.sub(r"[^A-Za-z0-9._-]+", "-", set_name).strip("-._")
    return load_settings(
        chromadb_persist_dir=str(persist_dir),
        bm25_persist_dir=str(persist_dir / f"bm25-{name}"),
        rag_collection_name=name[:60],
    )


async def run_set(
    set_dir: str | Path,
    *,
    persist_dir: str | None = None,
    n_results: int = TOP_K,
    limit: int | None = None,
    mode: str = "fused",
    verbose: bool = True,
) -> Report:
    """Index the set's pages into a knowledge base and score every (selected) question."""
    from eval.progress import progress_bar
    from rag_app.knowledge import KnowledgeBase

    folder = Path(set_dir).resolve()
    every = load_questions(folder)
    questions = select(every, limit)
    names = page_row_names(folder / "pages")
    with work_folder(persist_dir, "rag-rows-") as store:
        settings = _settings(store, folder.name)
        kb = KnowledgeBase(settings)
        try:
            await kb.open()
            started = time.perf_counter()
            with progress_bar("Indexing", "page") as update:
                summary = await kb.index_dir(folder / "pages", progress=update)
            seconds = time.perf_counter() - started
            if summary.errors:
                first, reason = summary.errors[0]
                raise RAGError(f"{summary.failed} page(s) failed to index, e.g. {first}: {reason}")
            index = {
                "pages": summary.added + summary.updated + summary.unchanged,
                "chunks": summary.chunks,
                "added": summary.added,
                "unchanged": summary.unchanged,
                "seconds": round(seconds, 2),
            }
            if verbose:
                print(
                    f"Indexed {index['pages']} pages, {index['chunks']} chunks in "
                    f"{seconds:.1f} s; asking {len(questions)} questions ({mode}).",
                    file=sys.stderr,
                )
            results: list[QuestionResult] = []
            with progress_bar("Asking", "query") as update:
                for done, question in enumerate(questions, 1):
                    t0 = time.perf_counter()
                    found = await kb.retrieve(question.query, n_results, mode)
                    ms = (time.perf_counter() - t0) * 1000
                    hits = [(hit.text, page_of(hit.source_url)) for hit in found.hits]
                    others = names.get(question.page, [])
                    declined = not found.confident
                    results.append(score(question, hits, ms, others, declined, found.evidence))
                    update(done, len(questions))
        finally:
            await kb.aclose()
    recorded, changed = recorded_settings(settings)
    config = {
        "set": folder.name,
        "set_dir": str(folder),
        "questions_in_set": len(every),
        "limit": limit,
        "n_results": n_results,
        "mode": mode,
        "settings": recorded,
        "defaults": not changed,
        "changed": changed,
        "code": code_version(),
        "persist_dir": persist_dir or "(temporary)",
    }
    return Report(config, index, results)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m eval.row_lookup",
        description="Score table-row lookup on a set written by eval.table_sets.",
    )
    p.add_argument("set_dir", help="folder with pages/ and queries.jsonl")
    p.add_argument("--persist-dir", default=None, help="Chroma/BM25 folder (default: temp dir)")
    p.add_argument(
        "--output-dir", default=None, help=f"report folder (default {DEFAULT_OUTPUT_ROOT}/<set>)"
    )
    p.add_argument("--n-results", type=_positive, default=TOP_K, help="hits per question")
    p.add_argument("--limit", type=_positive, default=None, help="ask N questions, spread evenly")
    p.add_argument("--mode", choices=MODES, default="fused", help="search mode (default fused)")
    p.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    return p


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
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

    try:
        report = asyncio.run(
            run_set(
                args.set_dir,
                persist_dir=args.persist_dir,
                n_results=args.n_results,
                limit=args.limit,
                mode=args.mode,
            )
        )
    except (RAGError, SettingsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    output = args.output_dir or str(DEFAULT_OUTPUT_ROOT / report.config["set"])
    written = report.write(output)
    print(report.table(report.by_category, "category"))
    print(f"Reports: {', '.join(str(p) for p in written)}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> None:
    raise SystemExit(run(argv))


if __name__ == "__main__":
    main()
