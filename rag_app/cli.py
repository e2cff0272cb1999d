"""The `rag` command: index, add, crawl, refresh, jobs, search, read, delete, stats, check,
reindex, service.

Every command talks to the store's one owner process (the store service), which it
starts on first use; nothing heavy is imported before the arguments are read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from rag_app.completion import SHELLS
from rag_app.console import VersionAction, guarded, printable, progress_reporter, wait_printer
from rag_app.crawl_options import MAX_DEPTH, CrawlOptions
from rag_app.errors import RAGError
from rag_app.failure_text import failure_line
from rag_app.limits import (
    MAX_CRAWL_PAGES,
    MAX_QUERY_CHARS,
    MAX_READ_CHARS,
    MAX_REJOINS,
    without_surrogates,
)
from rag_app.results import SEARCH_MODES, CrawlSummary, RefreshSummary
from rag_app.write_wait import NOTICE, WriteWait

if TYPE_CHECKING:  # settings (pydantic) and asyncio are imported after the arguments are read
    from rag_app.config import RAGSettings
    from rag_app.results import Hit, RetrievalResult

KnowledgeBase = Any  # a StoreClient (or an in-process KnowledgeBase): the same methods

PREVIEW_CHARS = 80
JAPANESE_COMMANDS = frozenset({"add", "crawl", "delete", "stats"})
"""Commands that print the specification's bot texts speak Japanese throughout, their
errors in the MCP tools' form (`rag_app.failure_text`); every other command speaks
English. A cause from a lower layer (an HTTP status, a check's sentence) is quoted as it is."""
NO_MATCH_NOTE = "no confident match: these are only the nearest chunks"
# Exit codes: 0 ok, 1 error, 2 usage, 3 partial failure (some files or pages failed), 130 Ctrl-C
EXIT_PARTIAL = 3


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _print_hits(title: str, hits: Sequence[Hit], side: str = "fused") -> None:
    """One block of hits; the first score named is the one the list is ranked by."""
    print(title)
    if not hits:
        print("  no results")
        return
    for rank, h in enumerate(hits, 1):
        where = f" [{h.heading_path}]" if h.heading_path else ""
        distance, bm25 = _fmt(h.vector_distance), _fmt(h.bm25_score, 2)
        if side == "vector":
            scores = f"distance={distance} bm25={bm25}"
        elif side == "bm25":
            scores = f"bm25={bm25} distance={distance}"
        else:
            scores = f"combined={_fmt(h.combined_score)} distance={distance} bm25={bm25}"
        print(printable(f"  {rank}. {scores}  {h.source_url}{where}"))
        print(f"     {printable(_preview(h.text))}")


def print_result(result: RetrievalResult) -> None:
    """Human-readable search output: rank, scores, source, preview."""
    if result.mode == "separate":
        _print_hits(f"Vector results for {result.query!r}:", result.vector_hits, "vector")
        _print_hits(f"BM25 results for {result.query!r}:", result.bm25_hits, "bm25")
    else:
        title = f"Results for {result.query!r} ({result.mode}):"
        _print_hits(title, result.hits, result.mode)
    if not result.confident:
        print(f"  {NO_MATCH_NOTE} (excess={_fmt(result.evidence.get('excess'), 2)})")
    total = result.timings.get("total")
    if total is not None:
        print(f"  ({total:.1f} ms)")


async def _cmd_index(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    update, close = progress_reporter("Indexing", "file")
    try:
        summary = await kb.index_dir(args.directory, progress=update)
    finally:
        close()
    print(
        f"Indexed {args.directory}: added={summary.added} updated={summary.updated} "
        f"deleted={summary.deleted} unchanged={summary.unchanged} chunks={summary.chunks}"
        + (f" empty={summary.empty}" if summary.empty else "")
    )
    for path, reason in summary.skipped:
        print(f"  skipped: {printable(f'{path}: {reason}')}", file=sys.stderr)
    if (unlisted := summary.skipped_count - len(summary.skipped)) > 0:
        print(f"  … and {unlisted:,} more files skipped", file=sys.stderr)
    for path, reason in summary.errors:
        print(f"  error: {printable(f'{path}: {reason}')}", file=sys.stderr)
    if (unlisted := summary.failed - len(summary.errors)) > 0:
        print(f"  … and {unlisted:,} more files failed (see the service log)", file=sys.stderr)
    return EXIT_PARTIAL if summary.failed or summary.errors else 0


async def _cmd_add(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    try:
        result = await kb.ingest_page(args.url, prune=args.prune)
    except RAGError as err:
        print(failure_line("add", err, args.url), file=sys.stderr)
        return 1
    note = " (変更なし、再埋め込みなし)" if result.unchanged else ""
    print(f"ページを取り込みました: {result.source} ({result.chunks}チャンク){note}")
    return 0


def _crawl_options(args: argparse.Namespace) -> CrawlOptions:
    return CrawlOptions(
        max_depth=args.max_depth,
        max_pages=args.max_pages,
        exclude=args.exclude,
        sitemap=args.sitemap,
        prune=args.prune,
    )


STOP_WAIT_SEC = 30.0
"""After Ctrl-C, how long `rag crawl`/`rag refresh` waits for its job to stop (a page
being stored is finished first); a second Ctrl-C leaves at once."""


async def _follow_job(
    kb: KnowledgeBase,
    job: dict[str, Any],
    desc: str,
    unit: str,
    stopping: str = "",
    *,
    cancel: bool = True,
) -> dict[str, Any]:
    """Wait for a job with a progress bar; Ctrl-C cancels the job (committed work stays)
    and returns once it has stopped, so the next `rag jobs` shows it cancelled. Without
    `cancel` (a job another client started, `rag jobs --wait`) Ctrl-C stops the wait only."""
    import asyncio

    update, close = progress_reporter(desc, unit)
    try:
        return await kb.wait_job(job["id"], progress=update)
    except asyncio.CancelledError:
        close()
        if not cancel:
            raise
        stopped = await asyncio.shield(kb.cancel_job(job["id"], interrupted=True))
        if stopped["state"] == "running":
            print(stopping or "Stopping the job...", file=sys.stderr, flush=True)
            with contextlib.suppress(Exception):  # e.g. the service went away: still 130
                await asyncio.shield(asyncio.wait_for(kb.wait_job(job["id"]), STOP_WAIT_SEC))
        raise
    finally:
        close()


async def _start_job(kb: KnowledgeBase, start: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Start a job. A Ctrl-C while the owner is starting it stops it too: the start is let
    finish (its answer names the job), then the job is cancelled, unless it was another
    client's job that this start joined."""
    import asyncio

    starting = asyncio.ensure_future(start)
    try:
        return await asyncio.shield(starting)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # the service went away: nothing to stop
            job = await asyncio.wait_for(starting, STOP_WAIT_SEC)
            if not job.get("joined"):
                await asyncio.shield(kb.cancel_job(job["id"], interrupted=True))
        raise


async def _cmd_crawl(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    job = await _start_job(kb, kb.start_crawl(args.url, args.pattern, options=_crawl_options(args)))
    if args.background:
        print(f"クロールをバックグラウンドで開始しました: ジョブ {job['id']} ({job['target']})")
        print(f"  進み具合: rag jobs / 中止: rag jobs --cancel {job['id']}")
        return 0
    print("クロールを開始しました... (リンク収集中)", file=sys.stderr)
    job = await _follow_job(
        kb, job, "クロール中", "ページ", "クロールを止めています (保存中のページは書き終えます)..."
    )
    if job["state"] == "cancelled":  # by another client: what it stored stays
        stopped = CrawlSummary.from_dict(job["result"]).report_lines("中止")
        print("\n  ".join(stopped))
        print("クロールは中止されました (保存済みのページは残ります)。", file=sys.stderr)
        return 1
    if job["state"] != "done":
        print(failure_line("crawl", job["error"] or "ジョブが中止されました"), file=sys.stderr)
        return 1
    summary = CrawlSummary.from_dict(job["result"])
    print("\n  ".join(summary.report_lines()))
    for detail in summary.error_details:
        print("  エラー: " + printable(f"{detail['url']}: {detail['reason']}"), file=sys.stderr)
    return EXIT_PARTIAL if summary.errors else 0


async def _cmd_refresh(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    job = await _start_job(kb, kb.start_refresh())
    joined = f"A refresh is already running: job {job['id']}"
    if args.background:
        started = f"Refresh started in the background: job {job['id']}"
        print(joined if job.get("joined") else started)
        print(f"  progress: rag jobs / cancel: rag jobs --cancel {job['id']}")
        return 0
    for rounds in range(1, MAX_REJOINS + 1):
        if job.get("joined"):
            print(f"{joined}; following it (Ctrl-C stops following, not the refresh).",
                  file=sys.stderr)  # fmt: skip
        followed = await _follow_job(
            kb, job, "Refreshing", "page",
            "Stopping the refresh (a page being stored is finished)...",
            cancel=not job.get("joined"),
        )  # fmt: skip
        interrupted = followed["state"] == "cancelled" and followed.get("interrupted")
        if not (job.get("joined") and interrupted) or rounds == MAX_REJOINS:
            break  # done, failed, cancelled by a user (or by its starter too often)
        print("The refresh it followed was interrupted by the client that started it; "
              "starting one.", file=sys.stderr)  # fmt: skip
        job = await _start_job(kb, kb.start_refresh())
        joined = f"A refresh is already running: job {job['id']}"
    job = followed
    if job["state"] != "done":
        print(f"error: the refresh did not finish: {job['error'] or 'cancelled'}", file=sys.stderr)
        return 1
    r = RefreshSummary.from_dict(job["result"])
    print(
        f"Refreshed {r.checked} web pages: unchanged={r.unchanged} updated={r.updated} "
        f"moved={r.moved} removed={r.removed} errors={r.errors} (chunks embedded: {r.embedded})"
    )
    for moved in r.moved_pages:
        print(f"  moved (canonical URL changed): {moved['from']} -> {moved['to']}")
    for url in r.removed_urls:
        print(f"  removed (gone): {url}")
    for detail in r.error_details:
        print("  error: " + printable(f"{detail['url']}: {detail['reason']}"), file=sys.stderr)
    return EXIT_PARTIAL if r.errors else 0


def _job_line(job: dict[str, Any]) -> str:
    total = f"/{job['total']}" if job["total"] else ""
    line = f"{job['id']}  {job['kind']:<8} {job['state']:<9} {job['done']}{total}  {job['target']}"
    if job.get("attempt", 1) > 1:
        line += f"  (resumed after a restart, attempt {job['attempt']})"
    if job["error"]:
        line += f"  ({job['error']})"
    if (wait := WriteWait.from_dict(job.get("waiting"))) is not None:
        line += f"  ({wait.english()})"
    return line


async def _cmd_jobs(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    if args.cancel is not None:
        if not args.cancel.strip():
            raise RAGError("--cancel needs a job id; list the jobs with `rag jobs`.")
        job = await kb.cancel_job(args.cancel)
        print(f"{job['id']}: {job['state']}")
        return 0 if job["state"] != "running" else 1
    if args.wait:
        job = await _follow_job(kb, {"id": args.wait}, "Waiting", "page", cancel=False)
        print(json.dumps(job, ensure_ascii=False, indent=2) if args.json else _job_line(job))
        return 0 if job["state"] == "done" else 1
    jobs = await kb.jobs()
    if args.json:
        print(json.dumps(jobs, ensure_ascii=False, indent=2))
    elif not jobs:
        print("no jobs")
    for job in [] if args.json else jobs:
        print(_job_line(job))
    return 0


async def _cmd_search(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    result = await kb.retrieve(args.query, n_results=args.n, mode=args.mode, source=args.source)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    elif args.full:
        if not result.confident:
            print(NO_MATCH_NOTE, file=sys.stderr)
        print(printable(result.context or "no results", lines=True))
    else:
        print_result(result)
    return 0


LISTED_SECTIONS = 30
"""Sections `rag read` names after the first page of a whole source."""


async def _cmd_read(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    page = await kb.read_source(
        args.source, section=args.section, offset=args.offset, max_chars=args.max_chars
    )
    if args.json:
        print(json.dumps(page.to_dict(), ensure_ascii=False, indent=2))
        return 0
    print(printable(page.text, lines=True))
    if not page.section and len(page.sections) > 1 and page.offset == 0:
        shown = page.sections[:LISTED_SECTIONS]
        more = len(page.sections) - len(shown)
        print(
            f"\n(sections: {printable(' / '.join(shown))}"
            f"{f' / … {more} more (--json)' if more else ''}; "
            "read one with --section)",
            file=sys.stderr,
        )
    if page.next_offset is not None:
        print(
            f"\n(characters {page.offset:,}–{page.next_offset:,} of {page.total_chars:,}; "
            f"continue with --offset {page.next_offset})",
            file=sys.stderr,
        )
    return 0


async def _cmd_delete(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    removed = await kb.delete_source(args.source, folder=args.recursive)
    print(f"削除しました: {args.source} ({removed}チャンク)")
    return 0


async def _cmd_stats(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    stats = await kb.stats()
    if args.json:
        print(json.dumps(stats.to_dict(), ensure_ascii=False, indent=2))
        return 0
    print("ナレッジベース統計:")
    print(f"     総チャンク数: {stats.total_chunks}")
    print(f"     ソースURL数: {len(stats.sources)}")
    print(f"     埋め込みモデル: {stats.embedding_model} ({stats.embedding_dimension}次元)")
    print(f"     BM25 文書数: {stats.bm25_documents}")
    print(f"     ベクトルストア: {stats.vector_store}")
    for src in stats.sources:
        print(f"       - {printable(src)}")
    return 0


async def _cmd_reindex(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    update, close = progress_reporter("Re-embedding", "chunk")
    try:
        count = await kb.reindex(progress=update)
    finally:
        close()
    print(f"Re-embedded {count} chunks with {kb.settings.embedding_model_name}.")
    return 0


async def _cmd_check(kb: KnowledgeBase, args: argparse.Namespace) -> int:
    report = await kb.check(repair=args.repair)
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        state = "consistent" if report.ok else "repaired" if report.repaired else "INCONSISTENT"
        print(
            f"{state}: chunks={report.chunks} bm25={report.bm25_documents} "
            f"missing_in_bm25={report.missing_in_bm25} extra_in_bm25={report.extra_in_bm25} "
            f"orphan_records={len(report.orphan_records)} "
            f"unrecorded_sources={len(report.unrecorded_sources)} "
            f"mixed_sources={len(report.mixed_sources)} "
            f"unfindable_by_vector={report.unfindable_by_vector}/{report.vector_checked}"
            + (
                f" missing_in_vector_copy={report.missing_in_vector_copy}"
                if report.missing_in_vector_copy is not None
                else " vector_copy=off"
                if report.vector_copy == "off"
                else ""
            )
        )
        for source in report.to_index_again:
            print(f"  to be stored again by the next index, crawl or refresh: {source}")
    return 0 if report.ok or report.repaired else 1


async def _cmd_service(settings: RAGSettings, args: argparse.Namespace) -> int:
    from rag_app.service import service_status, stop_service
    from rag_app.service.launcher import not_answering_text

    if args.action == "run":
        from rag_app.service.server import StoreService, prepare_process

        prepare_process()
        return await StoreService(settings).run()
    if args.action == "stop":
        stopped = await stop_service(settings)
        print("stopped" if stopped else "not running")
        return 0
    status = await service_status(settings)
    if status is None:
        print("not running")
        return 0 if args.action == "status" else 1
    if args.json:
        print(json.dumps(status, ensure_ascii=False, indent=2))
    elif status["state"] == "not answering":
        print(not_answering_text(status))
    else:
        line = (
            f"{status['state']}: pid {status['pid']} on 127.0.0.1:{status['port']} "
            f"for {status['folder']} ({status['inflight']} requests in flight)"
        )
        if restoring := status.get("restoring"):
            done, total = restoring
            line += "; restoring the vector index after damage: " + (
                f"{done:,} of {total:,} chunks (writes wait for it)" if total else "starting"
            )
        elif (held := WriteWait.from_dict(status.get("writes_held"))) is not None:
            line += "; a reindex is re-embedding the store: " + (
                f"{held.done:,} of {held.total:,} chunks (writes wait for it)"
                if held.total
                else "starting"
            )
        print(line)
    return 1 if status["state"] == "not answering" else 0


COMMANDS: dict[str, Callable[[KnowledgeBase, argparse.Namespace], Awaitable[int]]] = {
    "index": _cmd_index,
    "add": _cmd_add,
    "crawl": _cmd_crawl,
    "refresh": _cmd_refresh,
    "jobs": _cmd_jobs,
    "search": _cmd_search,
    "read": _cmd_read,
    "delete": _cmd_delete,
    "stats": _cmd_stats,
    "reindex": _cmd_reindex,
    "check": _cmd_check,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rag", description="Knowledge base: index, crawl and search web pages and documents."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO messages")
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "index",
        help="index a folder of .md/.markdown/.html/.htm/.txt/.pdf/.docx files (incremental)",
    )
    p.add_argument("directory", help="the folder to index (its subfolders too)")

    p = sub.add_parser("add", help="fetch one web page and add it")
    p.add_argument("url", help="the page to fetch (http or https)")
    p.add_argument("--prune", action="store_true", help="remove the page if it is gone (404/410)")

    p = sub.add_parser(
        "crawl",
        help="add the pages linked from an index page, or a whole site (--max-depth, --sitemap)",
        description="Depth 1 (the default) adds the same-site pages an index page links to. "
        "A larger --max-depth follows links further within the start page's site and folder; "
        "--sitemap starts from the site's sitemaps. Ctrl-C cancels; stored pages stay.",
    )
    p.add_argument("url", help="the index page or site root to start from")
    p.add_argument("pattern", nargs="?", default="", help="regex the page URLs must match")
    p.add_argument(
        "--max-depth", type=int, default=1, help=f"link levels to follow, 1-{MAX_DEPTH} (1)"
    )
    p.add_argument(
        "--max-pages", type=int, default=None, help="pages to fetch at most (RAG_MAX_CRAWL_PAGES)"
    )
    p.add_argument("-x", "--exclude", default="", help="regex of page URLs to leave out")
    p.add_argument("--sitemap", action="store_true", help="start from the site's sitemaps")
    p.add_argument("--prune", action="store_true", help="remove known pages that are gone")
    p.add_argument(
        "--background", action="store_true", help="start a job and return (see `rag jobs`)"
    )

    p = sub.add_parser(
        "refresh", help="re-check every stored web page; re-ingest changed, remove gone ones"
    )
    p.add_argument(
        "--background", action="store_true", help="start a job and return (see `rag jobs`)"
    )

    p = sub.add_parser("jobs", help="list crawl and refresh jobs, wait for one, or cancel one")
    p.add_argument("--cancel", metavar="ID", help="stop this job (keeps its pages)")
    p.add_argument("--wait", metavar="ID", default="", help="wait for this job to end")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("search", help="search the knowledge base")
    p.add_argument("query", help="words, a question or an exact name to look for")
    p.add_argument("-n", type=int, default=None, help="number of results (RAG_RETRIEVAL_COUNT)")
    p.add_argument(
        "--mode",
        choices=SEARCH_MODES,
        default=None,
        help="fused (vector and BM25 combined; the default), vector or bm25 alone, "
        "or separate: both lists side by side",
    )
    p.add_argument(
        "--source", default=None, help="only this site, URL prefix or folder (e.g. docs.python.org)"
    )
    p.add_argument("--full", action="store_true", help="print each hit's whole passage")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("read", help="print a stored source (or one section) in reading order")
    p.add_argument("source", help="a URL or file path as listed by `rag stats`")
    p.add_argument("--section", default="", help="heading path (A > B) or heading to read")
    p.add_argument("--offset", type=int, default=0, help="start at this character")
    p.add_argument("--max-chars", type=int, default=None, help="page size (RAG_READ_CHARS)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("delete", help="delete a source (URL or file path)")
    p.add_argument("source", help="a URL or file path as listed by `rag stats`")
    p.add_argument(
        "-r",
        "--recursive",
        action="store_true",
        help="a folder: delete every file indexed from it",
    )

    p = sub.add_parser("stats", help="show totals and sources")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    sub.add_parser("reindex", help="re-embed stored text after an embedding model change")

    p = sub.add_parser("check", help="compare the keyword index with Chroma chunk by chunk")
    p.add_argument("--repair", action="store_true", help="fix what differs (from Chroma)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("service", help="the background process that owns the store")
    p.add_argument("action", choices=("status", "stop", "run"), help="run: in the foreground")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("completion", help="print a shell completion script (see README)")
    p.add_argument("shell", choices=SHELLS)
    return parser


def _configure_logging(verbose: bool, debug: bool) -> None:
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("rag_app").setLevel(level)


async def _run(args: argparse.Namespace) -> int:
    from rag_app.config import load_settings

    settings = load_settings()
    _configure_logging(args.verbose, settings.rag_debug_log_enabled)
    if args.command == "service":
        return await _cmd_service(settings, args)
    from rag_app.service import connect

    kb = await connect(settings)
    kb.stop_work_if_gone = True  # Ctrl-C on `rag index` / `rag add` stops the work too
    NOTICE.set(wait_printer(args.command in JAPANESE_COMMANDS))
    try:
        return await COMMANDS[args.command](kb, args)
    finally:
        await kb.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `rag`; errors are one line on stderr and a non-zero exit
    (0 ok, 1 error, 2 usage, 3 partial failure, 130 interrupted)."""
    args = list(sys.argv[1:] if argv is None else argv)
    japanese = next((a for a in args if not a.startswith("-")), "") in JAPANESE_COMMANDS
    return guarded(lambda: _main(args), "中断しました" if japanese else "interrupted")


def _error(command: str, err: BaseException) -> str:
    """One line for a failed command, in the command's language."""
    return failure_line(command, err) if command in JAPANESE_COMMANDS else f"error: {err}"


def _usage_error(args: argparse.Namespace) -> str | None:
    """The one line for an argument argparse lets through but no store could take."""
    if getattr(args, "query", None) is not None:
        if not args.query.strip():
            return "error: the query is empty; type what you are looking for."
        if len(args.query) > MAX_QUERY_CHARS:
            return (
                f"error: the query is {len(args.query):,} characters long; the limit is "
                f"{MAX_QUERY_CHARS:,}. Shorten it."
            )
    if getattr(args, "n", None) is not None and not 1 <= args.n <= 100:
        return "error: -n must be between 1 and 100."
    if getattr(args, "source", None) is not None and not args.source.strip():
        what = "source" if args.command in ("read", "delete") else "--source filter"
        return _error(
            args.command, RAGError(f"The {what} is empty; name one (rag stats lists them).")
        )
    if args.command == "index" and not args.directory.strip():
        return "error: the folder is empty; name the folder to index (`.` for this one)."
    if args.command == "crawl":
        from rag_app.crawl.url_match import compile_pattern

        try:
            _crawl_options(args).validated(1, MAX_CRAWL_PAGES)
            compile_pattern(args.pattern)
            compile_pattern(args.exclude, "exclude")
        except RAGError as err:
            return _error("crawl", err)
    if args.command == "read" and args.offset < 0:
        return f"error: --offset must be 0 or more, got {args.offset}."
    if args.command == "read" and not (
        args.max_chars is None or 100 <= args.max_chars <= MAX_READ_CHARS
    ):
        return (
            f"error: --max-chars must be between 100 and {MAX_READ_CHARS:,}, got {args.max_chars}."
        )
    return None


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "crawl" and not args.pattern and len(extra) == 1 and extra[0][:1] != "-":
        args.pattern = extra.pop()  # `rag crawl URL --max-depth 2 PATTERN`: options first
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "completion":
        from rag_app.completion import completion_script

        print(completion_script(parser, args.shell), end="")
        return 0
    for name in ("query", "url", "pattern", "exclude", "source"):  # a byte that is not UTF-8
        value = getattr(args, name, None)
        if isinstance(value, str) and (name != "source" or "://" in value):  # paths keep theirs
            setattr(args, name, without_surrogates(value))
    usage = _usage_error(args)
    if usage is not None:  # the command line itself is wrong: 2, before any store opens
        print(usage, file=sys.stderr)
        return 2
    import asyncio

    from rag_app.config import SettingsError

    try:
        return asyncio.run(_run(args))
    except (RAGError, SettingsError) as err:
        print(_error(args.command, err), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
