"""What a user does first, through real `rag` processes and the real `rag-mcp` over
stdio: name a stored URL or file the way it was given, read a PDF hit's page."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.document_files import pdf_bytes
from tests.processes import rag, rag_json, rag_mcp, store_env, text_of
from tests.static_site import page, serve_folder, write_site


def _sources(env: dict[str, str]) -> list[str]:
    return rag_json(env, "stats")["sources"]


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
