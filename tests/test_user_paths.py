"""What a user does first, through real `rag` processes and the real `rag-mcp` over
stdio: name a stored URL or file the way it was given, read a PDF hit's page, crawl with
a pattern, cancel a crawl, index a folder again or after removing it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path

from tests.document_files import pdf_bytes
from tests.processes import rag, rag_async, rag_json, rag_mcp, store_env, text_of
from tests.static_site import page, serve_folder, write_site


def _sources(env: dict[str, str]) -> list[str]:
    return rag_json(env, "stats")["sources"]


def _hits_with(env: dict[str, str], word: str) -> list[str]:
    """The sources of the hits whose text holds `word` (the JSON also echoes the query)."""
    hits = rag_json(env, "search", word, "-n", "5")["hits"]
    return [h["source_url"] for h in hits if word in h["text"]]


def _touch_later(path: Path) -> None:
    """A new mtime the server's Last-Modified shows (no 304 for a changed page)."""
    later = time.time() + 5
    os.utime(path, (later, later))


def test_add_then_read_and_delete_with_the_same_url(tmp_path: Path) -> None:
    """`rag add URL` stores a URL with a space or Japanese in its path percent-encoded;
    `rag read URL` and `rag delete URL` take the very same string (they said it was not
    in the knowledge base)."""
    root = tmp_path / "site"
    write_site(
        root,
        {
            "docs/page one.html": page("Space", "spacepageword lives here."),
            "docs/日本語ページ.html": page("日本語", "ユニーク語はかきくけこです。"),
        },
    )
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        for name in ("page one.html", "日本語ページ.html"):
            url = site.url(f"/docs/{name}")
            added = rag(env, "add", url)
            assert added.returncode == 0, added.stderr
            read = rag(env, "read", url)
            assert read.returncode == 0, f"rag read {url!r}: {read.stderr}"
            deleted = rag(env, "delete", url)
            assert deleted.returncode == 0, f"rag delete {url!r}: {deleted.stderr}"
    assert _sources(env) == []


def test_mcp_read_and_delete_take_the_url_rag_add_took(tmp_path: Path) -> None:
    """Over MCP, an LLM passes rag_read / rag_delete the URL it gave rag_add."""
    root = tmp_path / "site"
    write_site(root, {"docs/日本語ページ.html": page("日本語", "ユニーク語はかきくけこです。")})
    env = store_env(tmp_path)

    async def run(url: str) -> tuple[str, str]:
        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            added = await client.call_tool("rag_add", {"url": url})
            assert not added.is_error, text_of(added)
            read = await client.call_tool("rag_read", {"source": url})
            deleted = await client.call_tool("rag_delete", {"url": url})
            return text_of(read), text_of(deleted)

    with serve_folder(root) as site:
        read, deleted = asyncio.run(run(site.url("/docs/日本語ページ.html")))
    assert "かきくけこ" in read, read
    assert deleted.startswith("削除しました"), deleted


def test_delete_a_removed_file_by_its_relative_path(tmp_path: Path) -> None:
    """Remove a file, then `rag delete notes/gone.md`: a relative path names the file in the
    caller's folder whether or not it still exists (it was made absolute only while the
    file existed, so the removed file could not be dropped that way)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "gone.md").write_text("# Gone\n\ngonefileword.\n", encoding="utf-8")
    (notes / "kept.md").write_text("# Kept\n\nkeptfileword.\n", encoding="utf-8")
    env = store_env(tmp_path, CWD=str(tmp_path))
    assert rag(env, "index", "notes").returncode == 0
    assert rag(env, "read", "notes/gone.md").returncode == 0  # while it exists
    (notes / "gone.md").unlink()
    read = rag(env, "read", "notes/gone.md")
    assert read.returncode == 0, read.stderr
    deleted = rag(env, "delete", "notes/gone.md")
    assert deleted.returncode == 0, deleted.stderr
    assert _sources(env) == [(notes / "kept.md").as_uri()]


def test_a_pdf_hit_passage_stays_on_its_page(tmp_path: Path) -> None:
    """A PDF hit's passage stays on its page: a page-2 hit headed `p. 2` does not take in
    page 1's text (a PDF has no headings, so its pages made one section)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "manual.pdf").write_bytes(
        pdf_bytes(
            [
                ["Chapter one: the quuxinator", "It spins at 300 rpm."],
                ["Chapter two: maintenance", "Oil the zorblax bearing monthly."],
            ],
            title="Quux Manual",
        )
    )
    env = store_env(tmp_path)
    assert rag(env, "index", str(notes)).returncode == 0
    found = rag(env, "search", "zorblax bearing", "-n", "1", "--full")
    assert found.returncode == 0, found.stderr
    assert "p. 2" in found.stdout, found.stdout
    assert "300 rpm" not in found.stdout, found.stdout


def test_recrawl_of_a_page_now_identical_to_another_does_not_keep_its_old_text(
    tmp_path: Path,
) -> None:
    """b.html changes on the site to the same text as a.html: the re-crawl counts it as a
    duplicate and removes b.html's stored copy, whose text the site no longer has (it
    was kept, and searches answered from it)."""
    root = tmp_path / "site"
    a = page("Same", "alpha original text alphaword.")
    write_site(
        root,
        {
            "dd/index.html": page("DD", "index", links=["a.html", "b.html"]),
            "dd/a.html": a,
            "dd/b.html": page("Same", "beta old text betaword."),
        },
    )
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        first = rag(env, "crawl", site.url("/dd/index.html"))
        assert first.returncode == 0, first.stderr
        (root / "dd/b.html").write_text(a, encoding="utf-8")
        second = rag(env, "crawl", site.url("/dd/index.html"))
        assert second.returncode == 0, second.stderr
        b_url = site.url("/dd/b.html")
        stored = rag(env, "read", b_url)
    # either b.html holds what the site serves now, or it is gone (a duplicate of a.html)
    assert "betaword" not in stored.stdout, (second.stdout, stored.stdout)


def test_pages_left_by_the_page_limit_counts_pages_not_links(tmp_path: Path) -> None:
    """Six pages in scope, each linking to every other; `--max-pages 2` fetches two, so at
    most four are left out (the count was every link met after the limit: 12)."""
    root = tmp_path / "site"
    names = ["index.html", *(f"p{i}.html" for i in range(1, 6))]
    links = [*names, "https://example.org/out.html"]
    write_site(root, {f"g/{n}": page(n, f"body of {n} word{n[:2]}", links=links) for n in names})
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        done = rag(env, "crawl", site.url("/g/index.html"), "--max-depth", "3", "--max-pages", "2")
    assert done.returncode == 0, done.stderr
    match = re.search(r"ページ上限で未取得: (\d+)", done.stdout)
    left = int(match.group(1)) if match else 0
    assert left <= len(names) - 2, done.stdout


def test_rag_crawl_cancelled_by_another_client_reports_what_it_stored(tmp_path: Path) -> None:
    """`rag jobs --cancel` of a crawl that `rag crawl` follows: `rag crawl` says it was
    cancelled and how many pages it stored, not that it failed."""
    root = tmp_path / "site"
    names = [f"p{i}.html" for i in range(8)]
    pages = {f"c/{n}": page(n, f"text of page {n} unique{n[:2]}") for n in names}
    pages["c/index.html"] = page("Index", "index", links=names)
    write_site(root, pages)
    env = store_env(tmp_path, RAG_CRAWL_CONCURRENCY="1")
    with serve_folder(root) as site:
        gate = site.hold("/c/p5.html")
        proc = rag_async(env, "crawl", site.url("/c/index.html"))
        try:
            deadline = time.monotonic() + 120
            while "/c/p5.html" not in site.paths():
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
            job = next(j for j in rag_json(env, "jobs") if j["state"] == "running")
            cancelled = rag(env, "jobs", "--cancel", job["id"])
            assert cancelled.returncode == 0, cancelled.stderr
        finally:
            gate.set()
        out, err = proc.communicate(timeout=120)
    stored = len(_sources(env))
    assert stored > 0
    assert "失敗" not in err, err
    assert f"{stored}ページ" in out + err, (out, err)


def test_index_of_an_unchanged_folder_with_an_empty_file_adds_nothing(tmp_path: Path) -> None:
    """An empty file is stored as nothing: an unchanged folder's `rag index` counts it as
    empty, not as added at every run."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nsome text alphaword.\n", encoding="utf-8")
    (notes / "empty.md").write_text("", encoding="utf-8")
    env = store_env(tmp_path)
    first = rag(env, "index", str(notes))
    assert first.returncode == 0, first.stderr
    again = rag(env, "index", str(notes))
    assert again.returncode == 0, again.stderr
    assert "added=0 " in again.stdout, again.stdout
    assert "unchanged=1 " in again.stdout and "empty=1" in again.stdout, again.stdout


def test_index_of_a_folder_that_was_removed_prunes_or_says_how(tmp_path: Path) -> None:
    """A folder indexed, then removed: `rag index <folder>` says how many of its files are
    still stored and how to remove them; `rag delete <folder>` says it is a folder, and
    `rag delete -r <folder>` removes them (a typed `rag delete .` removes nothing)."""
    notes = tmp_path / "old notes"
    notes.mkdir()
    for i in range(3):
        (notes / f"n{i}.md").write_text(f"# N{i}\n\nnote {i} word{i}.\n", encoding="utf-8")
    env = store_env(tmp_path)
    assert rag(env, "index", str(notes)).returncode == 0
    shutil.rmtree(notes)
    again = rag(env, "index", str(notes))
    assert "3 files indexed from it are still stored" in again.stderr, again.stderr
    plain = rag(env, "delete", str(notes))
    assert plain.returncode == 1 and "rag delete -r" in plain.stderr, plain.stderr
    assert len(_sources(env)) == 3
    deleted = rag(env, "delete", "-r", str(notes))
    left = _sources(env)
    assert deleted.returncode == 0 and left == [], (deleted.stderr, left)


def test_rag_read_lists_the_sections_its_error_promises(tmp_path: Path) -> None:
    """`rag read SRC --section X` with a wrong name sends the user to the section list;
    `rag read SRC` prints it (only `--json` had it)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    body = "\n\n".join(
        f"段落{i}: これは長い説明文の一部で、内容を埋めるための文章です。" * 3 for i in range(40)
    )
    (notes / "long.md").write_text(
        f"# Guide\n\n## Intro\n\n{body}\n\n## Appendix Zeta\n\nlast part.\n", encoding="utf-8"
    )
    env = store_env(tmp_path)
    assert rag(env, "index", str(notes)).returncode == 0
    source = str(notes / "long.md")
    wrong = rag(env, "read", source, "--section", "Nope")
    assert wrong.returncode == 1
    assert "listed when it is read without one" in wrong.stderr, wrong.stderr
    whole = rag(env, "read", source)
    assert whole.returncode == 0, whole.stderr
    assert "Appendix Zeta" in whole.stdout + whole.stderr, whole.stderr


def test_crawl_pattern_matches_the_url_as_written(tmp_path: Path) -> None:
    """A crawl pattern matches the URL as written too (`ページ`), not only its
    percent-encoded form."""
    root = tmp_path / "site"
    write_site(
        root,
        {
            "j/index.html": page("Index", "links", links=["日本語ページ.html", "other.html"]),
            "j/日本語ページ.html": page("日本語", "ユニーク語はかきくけこです。"),
            "j/other.html": page("Other", "other text."),
        },
    )
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        done = rag(env, "crawl", site.url("/j/index.html"), "ページ")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("完了: 1ページ"), done.stdout


def test_crawl_pattern_after_the_options(tmp_path: Path) -> None:
    """`rag crawl URL --max-depth 2 PATTERN`: the pattern after the options is taken
    (it was a usage error)."""
    root = tmp_path / "site"
    write_site(
        root,
        {
            "k/index.html": page("Index", "links", links=["a.html", "b.txt"]),
            "k/a.html": page("A", "text a."),
        },
    )
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        done = rag(env, "crawl", site.url("/k/index.html"), "--max-depth", "2", r"\.html$")
    assert done.returncode == 0, done.stderr


def test_an_mcp_client_cannot_delete_a_whole_folder(tmp_path: Path) -> None:
    """`rag delete -r <folder>` in a terminal removes the folder's files; `rag_delete` of an
    MCP client deletes one source only, so a model cannot wipe a folder (or `/`) by
    naming it."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(2):
        (notes / f"n{i}.md").write_text(f"# N{i}\n\nnote {i} word{i}.\n", encoding="utf-8")
    env = store_env(tmp_path)
    assert rag(env, "index", str(notes)).returncode == 0

    async def run() -> list[str]:
        async with rag_mcp(env, tmp_path / "mcp.log") as client:
            answers = []
            for target in (str(notes), "/"):
                result = await client.call_tool("rag_delete", {"url": target})
                assert result.is_error, text_of(result)
                answers.append(text_of(result))
            return answers

    answers = asyncio.run(run())
    assert all("Nothing is stored" in a for a in answers), answers
    assert len(_sources(env)) == 2


def test_recrawl_after_two_pages_swap_text_keeps_both(tmp_path: Path) -> None:
    """a.html and b.html swap their texts on the site: each page's new text is the other's
    stored text, and the re-crawl keeps both, updated (a re-crawl once removed both)."""
    root = tmp_path / "site"
    a_text, b_text = "alpha text alphaword.", "beta text betaword."
    write_site(
        root,
        {
            "sw/index.html": page("SW", "index", links=["a.html", "b.html"]),
            "sw/a.html": page("A", a_text),
            "sw/b.html": page("B", b_text),  # swapped below, titles and all
        },
    )
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        first = rag(env, "crawl", site.url("/sw/index.html"))
        assert first.returncode == 0, first.stderr
        (root / "sw/a.html").write_text(page("B", b_text), encoding="utf-8")
        (root / "sw/b.html").write_text(page("A", a_text), encoding="utf-8")
        _touch_later(root / "sw/a.html")
        _touch_later(root / "sw/b.html")
        second = rag(env, "crawl", site.url("/sw/index.html"))
        assert second.returncode == 0, second.stderr
        a_read = rag(env, "read", site.url("/sw/a.html"))
        b_read = rag(env, "read", site.url("/sw/b.html"))
    left = _sources(env)
    assert site.url("/sw/a.html") in left and site.url("/sw/b.html") in left, (
        second.stdout,
        left,
    )
    assert "betaword" in a_read.stdout and "alphaword" in b_read.stdout, (a_read, b_read)


def test_recrawl_after_text_moves_to_another_page_keeps_it(tmp_path: Path) -> None:
    """A news page's text moves to an archive page (which had other text) and the news page
    gets new text: both are updated, the moved text stays searchable."""
    root = tmp_path / "site"
    write_site(
        root,
        {
            "nw/index.html": page("NW", "index", links=["latest.html", "archive.html"]),
            "nw/latest.html": page("Latest", "news of march marchword."),
            "nw/archive.html": page("Archive", "news of february februaryword."),
        },
    )
    env = store_env(tmp_path)
    with serve_folder(root) as site:
        first = rag(env, "crawl", site.url("/nw/index.html"))
        assert first.returncode == 0, first.stderr
        (root / "nw/archive.html").write_text(
            page("Latest", "news of march marchword."), encoding="utf-8"
        )
        (root / "nw/latest.html").write_text(
            page("Latest", "news of april aprilword."), encoding="utf-8"
        )
        _touch_later(root / "nw/archive.html")
        _touch_later(root / "nw/latest.html")
        second = rag(env, "crawl", site.url("/nw/index.html"))
        assert second.returncode == 0, second.stderr
        found = _hits_with(env, "marchword")
    assert site.url("/nw/archive.html") in _sources(env), second.stdout
    assert found == [site.url("/nw/archive.html")], (second.stdout, found)


def test_read_and_delete_take_a_url_as_given_to_rag_add(tmp_path: Path) -> None:
    """`rag read` / `rag delete` take a URL as it was given to `rag add`, which normalises
    it (a bare site gets its `/`, a fragment is dropped, brackets are encoded)."""
    root = tmp_path / "site"
    write_site(
        root,
        {
            "index.html": page("Home", "homepageword here."),
            "docs/a.html": page("A", "fragmentpageword here."),
            "docs/v[1].html": page("V1", "bracketpageword here."),
        },
    )
    env = store_env(tmp_path)
    failures = []
    with serve_folder(root) as site:
        for url in (site.base, site.url("/docs/a.html#install"), site.url("/docs/v[1].html")):
            added = rag(env, "add", url)
            assert added.returncode == 0, added.stderr
            read = rag(env, "read", url)
            deleted = rag(env, "delete", url)
            if read.returncode or deleted.returncode:
                failures.append((url, read.stderr.strip(), deleted.stderr.strip()))
    assert failures == [], (failures, _sources(env))


def test_recrawl_keeps_a_page_whose_new_text_a_noindex_page_also_has(tmp_path: Path) -> None:
    """article.html and its `noindex` print version are updated together: the article is
    updated, not lost to the print version that claimed its text first."""
    root = tmp_path / "site"
    noindex = '<meta name="robots" content="noindex">'
    write_site(
        root,
        {
            "pr/index.html": page("PR", "index", links=["article.html", "print.html"]),
            "pr/article.html": page("Article", "first version oldversionword."),
            "pr/print.html": page("Article", "first version oldversionword.", head=noindex),
        },
    )
    env = store_env(tmp_path, RAG_CRAWL_CONCURRENCY="1")
    with serve_folder(root) as site:
        first = rag(env, "crawl", site.url("/pr/index.html"))
        assert first.returncode == 0, first.stderr
        assert site.url("/pr/article.html") in _sources(env), first.stdout
        (root / "pr/index.html").write_text(
            page("PR", "index", links=["print.html", "article.html"]), encoding="utf-8"
        )
        (root / "pr/article.html").write_text(
            page("Article", "second version newversionword."), encoding="utf-8"
        )
        (root / "pr/print.html").write_text(
            page("Article", "second version newversionword.", head=noindex), encoding="utf-8"
        )
        for name in ("index.html", "article.html", "print.html"):
            _touch_later(root / "pr" / name)
        second = rag(env, "crawl", site.url("/pr/index.html"))
        assert second.returncode == 0, second.stderr
        found = _hits_with(env, "newversionword")
    assert site.url("/pr/article.html") in _sources(env), second.stdout
    assert found == [site.url("/pr/article.html")], (second.stdout, found)
