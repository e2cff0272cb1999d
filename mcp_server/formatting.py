"""Text the tools return to the LLM, in the spec's wording (specs 000/002/003).

Pure functions over the KnowledgeBase's result objects; they only read attributes, so
this module stays cheap to import (no LlamaIndex, no Chroma).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rag_app.markdown_fences import open_block, opening
from rag_app.write_wait import WriteWait

if TYPE_CHECKING:
    from rag_app.results import (
        CrawlSummary,
        Hit,
        IngestResult,
        KBStats,
        ReadResult,
        RefreshSummary,
        RetrievalResult,
    )

NO_HITS = "該当する情報が見つかりませんでした"
NO_MATCH = f"{NO_HITS}（質問に答える箇所は見当たりません）。"
WEAK_CANDIDATES = "関連の薄い候補（参考。本文は rag_read で読めます）:"
VECTOR_SECTION = "ベクトル検索の結果"
BM25_SECTION = "BM25 キーワード検索の結果"
MAX_LISTED_SOURCES = 20
MAX_LISTED_ERRORS = 10


def format_search(result: RetrievalResult) -> str:
    """The `rag_search` text: spec form, or two labelled sections in separate mode.

    Separate mode does not repeat in the BM25 section a chunk the vector section shows;
    the hits it does show keep their rank in the BM25 list (the `rank` of
    `bm25_hits` in the structured content), so a gap says what was left out.
    Hits the answer's character budget left no room for are counted in a last line.
    When the no-match rule declined the search (`result.confident` False), the answer
    says so and lists the nearest hits as pointers only, without their passages, so
    nothing reads as a confident answer.
    """

    if not result.confident and (result.hits or result.vector_hits or result.bm25_hits):
        return _format_no_match(result)
    if result.mode != "separate":
        if not result.hits:
            return NO_HITS
        return result.context + (f"\n\n{over_budget(result.left_out)}" if result.left_out else "")
    if not result.vector_hits and not result.bm25_hits:
        return NO_HITS
    shown = {h.node_id for h in result.vector_hits}
    vector = list(enumerate(result.vector_hits, 1))
    bm25_new = [(r, h) for r, h in enumerate(result.bm25_hits, 1) if h.node_id not in shown]
    repeated = len(result.bm25_hits) - len(bm25_new)
    vector_body = _ranked_hits(vector) if vector else "（該当なし）"
    if bm25_new:
        bm25_body = _ranked_hits(bm25_new)
    else:
        bm25_body = "（該当なし）" if not result.bm25_hits else ""
    if repeated:
        note = f"（ベクトル検索の結果と同じチャンク {repeated} 件は省略）"
        bm25_body = f"{bm25_body}\n\n{note}" if bm25_body else note
    return (
        f"# {VECTOR_SECTION} ({len(result.vector_hits)}件)\n\n{vector_body}\n\n"
        f"# {BM25_SECTION} ({len(result.bm25_hits)}件)\n\n{bm25_body}"
    )


def over_budget(left_out: int) -> str:
    """The note under hits the answer's character budget cut short: n_results is not
    what came back, and why."""
    return (
        f"（回答の文字数の上限に達したため、残りの {left_out} 件は省略しました。"
        "n_results を減らすと各結果の本文が長くなります）"
    )


def _ranked_hits(ranked: list[tuple[int, Hit]]) -> str:
    """Hits under their rank in their own list (`Hit.rank` when set, as `HitOut.ranked`
    numbers them), not their position among the hits shown."""
    from rag_app.results import format_hit

    return "\n\n".join(format_hit(h, h.rank or rank) for rank, h in ranked)


def _format_no_match(result: RetrievalResult) -> str:
    """`NO_MATCH`, then one line per nearest hit: rank, title › heading path, the chunk's
    number when another line names the same place (three chunks of one section read as
    one pointer three times), URL."""
    from rag_app.results import hit_place

    hits = result.hits or [*result.vector_hits, *result.bm25_hits]
    first = {h.node_id: h for h in reversed(hits)}  # each chunk once, at its first place
    hits = [first.pop(h.node_id) for h in hits if h.node_id in first]
    lines = [NO_MATCH, "", WEAK_CANDIDATES]
    places = [(hit_place(h), h.source_url) for h in hits]
    for rank, (h, (place, url)) in enumerate(zip(hits, places, strict=True), 1):
        if places.count((place, url)) > 1:
            place = f"{place} (チャンク {h.chunk_index})".lstrip()
        lines.append(f"- [{rank}] {place + ' — ' if place else ''}{url}")
    return "\n".join(lines)


MAX_LISTED_SECTIONS = 30
"""Headings listed on the first page of a `rag_read` of a whole source."""


def format_read(page: ReadResult) -> str:
    """`## Source: <url>` (title, section, character range), the text, then how to go on."""
    section = page.section.split(" > ") if page.section else []
    if section and section[0] == page.title:  # named with the page title in front
        section = section[1:]
    where = " › ".join(p for p in (page.title, *section) if p)
    end = page.next_offset if page.next_offset is not None else page.total_chars
    head = f"## Source: {page.source}\n{where + ' · ' if where else ''}"
    head += f"{page.offset:,}–{end:,} / {page.total_chars:,} 文字"
    lines = [head, "", *_as_code_where_code(page)]
    if not page.section and len(page.sections) > 1 and page.offset == 0:
        # the first page of a whole source names its sections, long or short (an error
        # for an unknown section sends the model here for them)
        # one per line: a heading may itself hold " / " (`Input / Output`)
        lines += ["", "見出し:", *(f"- {p}" for p in page.sections[:MAX_LISTED_SECTIONS])]
        if len(page.sections) > MAX_LISTED_SECTIONS:
            lines.append(f"- …他 {len(page.sections) - MAX_LISTED_SECTIONS}件")
    if page.next_offset is not None:
        lines += ["", f"（続きあり: offset={page.next_offset} で続きを読めます）"]
    return "\n".join(lines)


def _as_code_where_code(page: ReadResult) -> list[str]:
    """The page's text, opened by the fence line of a code block it starts inside and
    closed where it ends inside one: a page cut inside code shows it as code, and its notes
    after it are not read as code (the structured `text` stays exactly the stored text)."""
    lines = [page.code_fence, page.text] if page.code_fence else [page.text]
    if fence := open_block("\n".join(lines)):
        lines.append(opening(fence)[1])
    return lines


def format_add(result: IngestResult) -> str:
    """`ページを取り込みました: <url> (8チャンク)` (spec 002)."""
    note = "、変更なし" if result.unchanged else ""
    return f"ページを取り込みました: {result.source} ({result.chunks}チャンク{note})"


def crawl_error_pairs(summary: CrawlSummary) -> list[tuple[str, str]]:
    """(url, reason) for each failed page, whatever keys the summary used."""
    pairs: list[tuple[str, str]] = []
    for detail in summary.error_details:
        url = str(detail.get("url") or detail.get("source") or "")
        reason = str(detail.get("error") or detail.get("reason") or detail.get("message") or "")
        pairs.append((url, reason))
    return pairs


def format_crawl(summary: CrawlSummary) -> str:
    """`完了: 15ページ / 128チャンク / エラー: 2件` plus unchanged pages and error reasons."""
    lines = summary.report_lines()
    pairs = crawl_error_pairs(summary)
    if pairs:
        lines.append("エラーの詳細:")
        lines += [f"- {url}: {reason}" for url, reason in pairs[:MAX_LISTED_ERRORS]]
        if len(pairs) > MAX_LISTED_ERRORS:
            lines.append(f"- …他 {len(pairs) - MAX_LISTED_ERRORS}件")
    return "\n".join(lines)


def crawl_progress_message(done: int, total: int | None) -> str:
    """Progress text while a crawl runs (spec 002: `5ページ取得中...`)."""
    if total is None:
        return "クロールを開始しました... (リンク収集中)"
    return f"{done}/{total}ページ取得中..."


def refresh_progress_message(done: int, total: int | None) -> str:
    """Progress text while a refresh re-checks the stored pages."""
    if total is None:
        return "保存済みページの確認を開始しました..."
    return f"{done}/{total}ページ確認中..."


def format_refresh(summary: RefreshSummary) -> str:
    """`更新確認: N ページ / 変更なし … / 更新 … / 削除 … / エラー …` plus details."""
    lines = [
        f"更新確認: {summary.checked}ページ / 変更なし: {summary.unchanged} / "
        f"更新: {summary.updated} / 移動: {summary.moved} / 削除: {summary.removed} / "
        f"エラー: {summary.errors}件",
        f"埋め込んだチャンク: {summary.embedded}",
    ]
    if summary.joined:  # another client's refresh was running: its summary, not a second run
        lines.insert(0, "実行中の更新確認に合流しました（その結果です）。")
    lines += [
        f"- 移動 (canonical URL の変更): {m['from']} → {m['to']}"
        for m in summary.moved_pages[:MAX_LISTED_ERRORS]
    ]
    lines += [f"- 削除 (404/410): {url}" for url in summary.removed_urls[:MAX_LISTED_ERRORS]]
    pairs = [(d.get("url", ""), d.get("reason", "")) for d in summary.error_details]
    if pairs:
        lines.append("エラーの詳細:")
        lines += [f"- {url}: {reason}" for url, reason in pairs[:MAX_LISTED_ERRORS]]
    return "\n".join(lines)


_KINDS = {"crawl": "クロール", "refresh": "更新確認"}
JOB_STATES = {"running": "実行中", "done": "完了", "failed": "失敗", "cancelled": "中止"}


def job_target(job: dict[str, Any]) -> str:
    """What a job works on, for the Japanese text: a crawl's URL, or (a refresh's
    `REFRESH_TARGET`, English in the job's record) the stored web pages in Japanese."""
    from rag_app.jobs import REFRESH_TARGET, REFRESH_TARGET_JA

    target = str(job.get("target", ""))
    return REFRESH_TARGET_JA if target == REFRESH_TARGET else target


def format_job_started(job: dict[str, Any]) -> str:
    """The answer of a tool that started a background job."""
    kind = _KINDS.get(job["kind"], job["kind"])
    started = "はすでに実行中です" if job.get("joined") else "を開始しました"
    return (
        f"{kind}{started} (ジョブID: {job['id']}, 対象: {job_target(job)})。\n"
        f"進み具合と結果は rag_jobs で確認できます。中止するには rag_jobs に "
        f'cancel="{job["id"]}" を渡してください。'
    )


SUMMARY_LABELS = {
    "running": "途中経過",
    "done": "完了",
    "failed": "失敗時点",
    "cancelled": "中止時点",
}
"""What a job's counts are, by its state: a running or stopped job's are not a result."""


def _job_summary(job: dict[str, Any]) -> str:
    """A job's counts under the label of its state (`SUMMARY_LABELS`). A failed job's
    page errors are said only when there were some: its own failure is the `原因`
    that follows, and `エラー: 0件` beside it would read as a clean run."""
    result = job.get("result") or {}
    if not result or job["kind"] not in _KINDS:
        return ""
    label = SUMMARY_LABELS.get(job["state"], job["state"])
    errors = int(result.get("errors", 0) or 0)
    if job["kind"] == "crawl":
        counts = (
            f"{result.get('pages_crawled', 0)}ページ / {result.get('chunks_stored', 0)}チャンク"
        )
    else:
        counts = (
            f"変更なし: {result.get('unchanged', 0)} / 更新: {result.get('updated', 0)}"
            f" / 削除: {result.get('removed', 0)}"
        )
    if errors or job["state"] != "failed":
        counts += f" / エラー: {errors}件"
    return f"{label}: {counts}"


def format_jobs(jobs: list[dict[str, Any]]) -> str:
    """One line per job (running first), with the summary of finished ones."""
    if not jobs:
        return "ジョブはありません。"
    lines = []
    for job in jobs:
        kind = _KINDS.get(job["kind"], job["kind"])
        state = JOB_STATES.get(job["state"], job["state"])
        total = f"/{job['total']}" if job["total"] else ""
        line = f"- {job['id']} {kind} [{state}] {job['done']}{total}ページ: {job_target(job)}"
        if job.get("attempt", 1) > 1:  # run again by a restarted store service
            line += f" (再起動後に再開, {job['attempt']}回目)"
        if summary := _job_summary(job):
            line += f" — {summary}"
        if job.get("error"):
            line += f" (原因: {job['error']})"
        if (wait := WriteWait.from_dict(job.get("waiting"))) is not None:
            line += f" ({wait.japanese()})"
        lines.append(line)
    return "\n".join(lines)


def page_progress_message(done: int, total: int | None) -> str:
    """Progress text while `rag_add` fetches and stores its page."""
    return "ページを取り込みました" if total and done >= total else "ページを取得中..."


def delete_progress_message(done: int, total: int | None) -> str:
    """Progress text while `rag_delete` removes a source (one step; worth a message when
    the delete waits behind a restore or a reindex)."""
    return "削除しました" if total and done >= total else "削除中..."


def format_delete(source: str, chunks: int) -> str:
    """`削除しました: <url> (8チャンク)` (spec 002)."""
    return f"削除しました: {source} ({chunks}チャンク)"


def format_stats(stats: KBStats, offset: int = 0, limit: int = MAX_LISTED_SOURCES) -> str:
    """`ナレッジベース統計:` then totals (spec 002), the model, index sizes and one page of
    sources with their chunk counts and indexing dates."""
    pad = "     "
    lines = [
        "ナレッジベース統計:",
        f"{pad}総チャンク数: {stats.total_chunks}",
        f"{pad}ソースURL数: {stats.source_count}",
        f"{pad}埋め込みモデル: {stats.embedding_model} ({stats.embedding_dimension}次元)",
        f"{pad}BM25 文書数: {stats.bm25_documents}",
        f"{pad}ベクトルストア: {stats.vector_store}",
        f"{pad}BM25 インデックス: {stats.bm25_dir}",
    ]
    shown = stats.page(offset, limit)
    if shown:
        lines.append(
            f"{pad}ソースURL ({offset + 1}–{offset + len(shown)}件目 / {stats.source_count}件):"
        )
        for src in shown:
            chunks = stats.source_chunks.get(src)
            date = stats.source_dates.get(src, "")[:19].replace("T", " ")
            about = ", ".join(p for p in (f"{chunks}チャンク" if chunks else "", date) if p)
            lines.append(f"{pad}- {src}" + (f" ({about})" if about else ""))
        rest = stats.source_count - offset - len(shown)
        if rest > 0:
            lines.append(f"{pad}- …他 {rest}件 (offset={offset + len(shown)} で続きを表示)")
    return "\n".join(lines)
