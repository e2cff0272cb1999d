"""Source filters: a site, a URL prefix or a folder names exactly the sources within it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_app.errors import RAGError
from rag_app.source_scope import MAX_SCOPED_SOURCES, matches, resolve


def test_site_prefix_and_folder(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    stored = [
        "https://docs.example.com/guide/a.html",
        "https://docs.example.com/api/b.html",
        "https://blog.example.com/post",
        "https://docs.example.com.evil.test/x",
        (notes / "a.md").as_uri(),
        (tmp_path / "notes-old" / "b.md").as_uri(),
    ]
    assert resolve("docs.example.com", stored) == stored[:2][::-1]
    assert resolve("example.com", stored) == sorted(stored[:3])  # subdomains belong to the site
    assert resolve("https://docs.example.com/guide/", stored) == [stored[0]]
    assert resolve(str(notes), stored) == [stored[4]]  # not notes-old
    assert resolve(notes.as_uri(), stored) == [stored[4]]
    assert not matches("docs.example.com", "https://docs.example.com.evil.test/x")


def test_a_site_with_its_port() -> None:
    stored = [
        "http://127.0.0.1:8765/a.html",
        "http://127.0.0.1:9000/b.html",
        "http://user@docs.example.com:8080/c.html",
        "http://docs.example.com/d.html",
    ]
    assert resolve("127.0.0.1:8765", stored) == [stored[0]]
    assert resolve("127.0.0.1", stored) == stored[:2]
    assert resolve("example.com:8080", stored) == [stored[2]]  # a subdomain, the same port
    for wrong in ("127.0.0.1:87", "0.0.1:8765", "0.0.1", "127.0.0.1:876"):
        assert not matches(wrong, stored[0]), wrong
    assert matches("docs.example.com:80", stored[3])  # the scheme's default port
    assert matches("example.com:443", "https://Docs.Example.com/x")
    for scope in ("::1", "[::1]"):  # an IPv6 address names itself on any port
        assert matches(scope, "http://[::1]:8080/a") and matches(scope, "http://[::1]/a")
    assert matches("[::1]:8080", "http://[::1]:8080/a")
    assert not matches("[::1]:8080", "http://[::1]/a")


def test_one_sentence_errors() -> None:
    with pytest.raises(RAGError, match=r"No stored source matches 'nothing\.test'"):
        resolve("nothing.test", ["https://a.test/"])
    with pytest.raises(RAGError, match="empty"):
        resolve("  ", ["https://a.test/"])
    with pytest.raises(RAGError, match="longer than"):
        resolve("x" * 5000, ["https://a.test/"])
    for broken in ("http://[::1", "http://[::1/docs", "https://a.test:99999/"):
        with pytest.raises(RAGError, match=r"No stored source matches"):  # not ValueError
            resolve(broken, ["https://a.test/", "http://[::1]/docs/a"])
    many = [f"https://big.test/{i}" for i in range(MAX_SCOPED_SOURCES + 1)]
    with pytest.raises(RAGError, match="narrower"):
        resolve("big.test", many)


def test_a_url_scope_holds_what_lies_under_it_not_its_siblings() -> None:
    stored = [
        "https://a.example/docs",
        "https://a.example/docs/intro",
        "https://a.example/docs?page=2",
        "https://a.example/docs-old",
        "https://a.example/docs-old/x",
        "https://a.example/v1/a",
        "https://a.example/v10/a",
    ]
    assert resolve("https://a.example/docs", stored) == stored[:3]
    assert resolve("https://a.example/v1", stored) == ["https://a.example/v1/a"]
    with pytest.raises(RAGError, match="No stored source matches"):
        resolve("https://a.example/docs-", stored)  # not a path boundary
    assert resolve("https://a.example/", stored) == sorted(stored)


def test_a_path_the_system_refuses_is_one_sentence() -> None:
    from rag_app.source_scope import local_uri

    for bad in ("/a\x00b", "./x\x00", "~\x00", "y" * 300, "/tmp/" + "z" * 300):
        with pytest.raises(RAGError, match="not a valid path or URL"):
            local_uri(bad)


def test_a_url_scope_as_people_type_it() -> None:
    """Scheme and host in any case, a fragment: as `rag_read` and `rag_delete` take them;
    only the start of a scheme (`h`, `http:/`) matched every web page and is refused."""
    stored = ["http://127.0.0.1:18765/guide/gamma.html", "https://docs.example.com/a"]
    for scope in ("HTTP://127.0.0.1:18765/guide/gamma.html", stored[0] + "#frag"):
        assert resolve(scope, stored) == [stored[0]], scope
    assert resolve("https://Docs.Example.com/", stored) == [stored[1]]
    for scope in ("h", "ht", "http", "http:/", "HTTPS:", "file:"):
        with pytest.raises(RAGError, match="only the start of a URL"):
            resolve(scope, stored)


def test_a_folder_named_like_a_scheme_is_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "http").mkdir()
    stored = [(tmp_path / "http" / "a.md").as_uri(), "https://docs.example.com/a"]
    assert resolve("http", stored) == [stored[0]]
