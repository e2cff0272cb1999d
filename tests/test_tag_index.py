"""TagIndex: one walk answers the extraction's element lookups, removals included."""

from __future__ import annotations

from bs4 import BeautifulSoup

from rag_app.crawl.tag_index import TagIndex

PAGE = """<html><head><title>T</title><link rel=canonical href=/c></head><body>
<nav><a href=/n>n</a><div hidden><a href=/h>h</a></div></nav>
<main><a href=/m>m</a><a>no href</a><form><h2>kept</h2></form></main>
<footer><main>inner</main></footer></body></html>"""


def test_lookups_follow_document_order_and_attributes() -> None:
    tags = TagIndex(BeautifulSoup(PAGE, "html.parser"))
    assert [a["href"] for a in tags.having("a", "href")] == ["/n", "/h", "/m"]
    assert [t.name for t in tags.named({"nav", "main", "footer"})] == [
        "nav",
        "main",
        "footer",
        "main",
    ]
    assert tags.first("title") is not None and tags.first("article") is None


def test_removed_elements_and_their_contents_are_skipped() -> None:
    soup = BeautifulSoup(PAGE, "html.parser")
    tags = TagIndex(soup)
    nav, footer = tags.first("nav"), tags.first("footer")
    hidden = [t for t in tags.live() if "hidden" in t.attrs]
    tags.remove([nav, footer, *hidden])  # the hidden div is inside nav: removed once
    assert [a["href"] for a in tags.having("a", "href")] == ["/m"]
    assert len(tags.named("main")) == 1  # the <main> inside the footer is gone
    assert "inner" not in soup.get_text() and "kept" in soup.get_text()
    assert all(t.name for t in tags.live())  # no decomposed element is handed out
