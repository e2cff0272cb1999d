"""A crawl's scope and page keys read a path as a web server resolves it: no spelling of
a URL outside the start folder (dot segments, encoded or not, doubled or back slashes)
gets in, and one page has one key however its path is spelled."""

from __future__ import annotations

import pytest

from rag_app.crawl.scope import CrawlScope, page_key, served_path

SCOPE = CrawlScope.build("http://docs.example/docs/index.html")


@pytest.mark.parametrize(
    "url",
    [
        "http://docs.example/docs/../private/notes",
        "http://docs.example/docs/%2e%2e/private/notes",
        "http://docs.example/docs/%2E%2e%2fprivate",
        "http://docs.example//private/docs/notes",
        "http://docs.example/docs/..%2f..%2fetc/passwd",
        "http://docs.example/docs/a\\..\\..\\private",
        "http://docs.example:8080/docs/a.html",
        "http://other.example/docs/a.html",
    ],
)
def test_no_spelling_of_a_url_outside_the_folder_is_in_scope(url: str) -> None:
    assert not SCOPE.admits(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://docs.example/docs/a.html",
        "http://docs.example/docs/./guide/../a.html",
        "http://docs.example/docs//guide/a.html",
        "http://docs.example/docs",
        "https://docs.example/docs/",
    ],
)
def test_spellings_inside_the_folder_stay_in_scope(url: str) -> None:
    assert SCOPE.admits(url)


def test_one_page_one_key_however_its_path_is_spelled() -> None:
    keys = {
        page_key(u)
        for u in (
            "http://docs.example/docs/a.html",
            "http://docs.example/docs/./a.html",
            "http://docs.example/docs//a.html",
            "http://docs.example/docs/x/%2e%2e/a.html",
            "http://docs.example:80/docs/a.html#top",
        )
    }
    assert keys == {"http://docs.example/docs/a.html"}
    assert page_key("http://docs.example//private/docs/a.html") != page_key(
        "http://docs.example/docs/a.html"
    )


@pytest.mark.parametrize(
    ("path", "served"),
    [("", "/"), ("/docs/", "/docs/"), ("/docs/x/..", "/docs/"), ("/..", "/"), ("/a//b", "/a/b")],
)
def test_served_path(path: str, served: str) -> None:
    assert served_path(path) == served
