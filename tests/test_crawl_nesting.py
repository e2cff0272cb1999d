"""The cost of building a page's tree, read before it is built."""

from __future__ import annotations

import pytest

from rag_app.crawl.exceptions import PageTooDeepError
from rag_app.crawl.html_text import html_to_text
from rag_app.crawl.nesting import MAX_TREE_STEPS, tree_steps


def test_text_after_a_child_costs_its_depth() -> None:
    assert tree_steps("<div><p>a</p>b</div>") == 1  # `b` lands in a div that holds <p>
    assert tree_steps("<div><div><p>a</p>b</div></div>") == 2
    assert tree_steps("<p>a<p>b<p>c") == 0  # unclosed <p>: each text is a first child
    assert tree_steps("<ol><li><pre>c</pre>t<li><pre>c</pre>t") == 2 + 3


def test_end_tags_close_as_html_parser_does() -> None:
    # </div> closes the <p>s opened after it; a stray </i> closes nothing
    assert tree_steps("<div><p>a<p>b</div></i><div><p>x</p>y</div>") == 1
    # a comment and a void element fill their parent; script text is not markup
    assert tree_steps("<div><!-- c -->x</div>") == 1
    assert tree_steps("<div><br>x</div>") == 1
    assert tree_steps("<div><script>a</b>c<p></script>x</div>") == 1


def test_hostile_shapes_stop_at_the_limit() -> None:
    deep = "<html><body>" + "<ol><li><pre>c</pre>t" * 650_000  # 5 MB: hours to build
    assert tree_steps(deep) == MAX_TREE_STEPS + 1
    assert tree_steps("<a" * 100_000) == 0 and tree_steps("<!--" * 100_000) == 0


def test_a_page_too_costly_to_build_is_refused_and_deep_cheap_pages_are_read() -> None:
    deep = "<html><body>" + "<ol><li><pre>c</pre>t" * 20_000  # took 74 s
    with pytest.raises(PageTooDeepError, match=r"https://x\.test/deep\.html .* skipped"):
        html_to_text(deep, "https://x.test/deep.html")
    sloppy = "<html><body>" + "".join(f"<p>段落{i}" for i in range(20_000))
    text = html_to_text(sloppy).text
    assert "段落0" in text and "段落19999" in text
