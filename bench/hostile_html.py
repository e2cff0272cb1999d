"""What hostile HTML costs to parse and extract, at a size and at four times that size.

Not a test. For each page shape (deep nesting, void tags, unclosed constructs, entities)
prints the seconds of stock BeautifulSoup (`html.parser`), of `parse_html` and of the
whole extraction (`html_to_text`) at `n` and `4n` repeats, and the growth: about 4 is
linear, about 16 quadratic. Also the extraction of real manual pages, if installed, per
MB, as the baseline a hostile page is compared with:

    python bench/hostile_html.py [--n 5000] [--no-stock]
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bs4 import BeautifulSoup  # noqa: E402

from rag_app.crawl.html_text import html_to_text  # noqa: E402
from rag_app.crawl.soup import parse_html  # noqa: E402

SHAPES: dict[str, Callable[[int], str]] = {
    "nested lists with code": lambda n: "<ol><li><pre>c</pre>t" * n,
    "nested divs with text": lambda n: "<div>a<b>b</b>c" * n,
    "nested quotes": lambda n: "<blockquote><p>a<pre>x</pre>" * n,
    "nested tables": lambda n: "<table><tr><td>x" * n,
    "void tags, then end tags": lambda n: "<br>" * n + "</x>" * n,
    "lines ending in <br>": lambda n: "text <a href='#'>link</a><br>\n" * n,
    "unmatched end tags": lambda n: "<p>x" + "</span>" * (2 * n),
    "removed siblings": lambda n: "<p>" + "<script></script>x" * n,
    "nested permalinks": lambda n: "<div>" + "<a class=headerlink href=#a>x" * n,
    "unterminated tail": lambda n: "<p>x</p>" + "<a " * (n // 2),
    "unclosed comment": lambda n: "<!--" + "a" * (20 * n),
    "bare <": lambda n: "<" * (10 * n),
    "bare &": lambda n: "&" * (10 * n),
}

MANUALS = (
    "/usr/share/doc/python3.11/html/library/*.html",
    "/usr/share/doc/aptitude/html/ja/*.html",
)


def seconds(work: Callable[[str], object], *pages: str) -> float:
    started = time.perf_counter()
    for page in pages:
        work(page)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="repeats of each shape's unit")
    parser.add_argument("--no-stock", action="store_true", help="skip stock BeautifulSoup")
    args = parser.parse_args()
    files = sorted(f for pattern in MANUALS for f in glob.glob(pattern))
    if files:
        pages = [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]
        mb = sum(len(p.encode()) for p in pages) / 1e6
        spent = seconds(html_to_text, *pages)
        print(f"real manual pages: {len(pages)} pages, {mb:.1f} MB, {spent / mb:.2f} s/MB")
    print(
        f"{'shape':26} {'chars at 4n':>11}  {'stock 4n s (×)':>16} {'parse 4n s (×)':>16}"
        f" {'extract 4n s (×)':>17} {'extract s/MB':>12}"
    )
    for name, shape in SHAPES.items():
        small, large = shape(args.n), shape(4 * args.n)
        cells = []
        runs: list[Callable[[str], object]] = [parse_html, html_to_text]
        if not args.no_stock:
            runs.insert(0, lambda page: BeautifulSoup(page, "html.parser"))
        for run in runs:
            run(small)  # warm-up: the first call of a shape pays imports and caches
            a, b = seconds(run, small), seconds(run, large)
            cells.append(f"{b:8.2f} ({b / max(a, 1e-4):4.1f})")
        if args.no_stock:
            cells.insert(0, "")
        mb = len(large.encode()) / 1e6
        print(
            f"{name:26} {len(large):11,}  {cells[0]:>16} {cells[1]:>16} {cells[2]:>17}"
            f" {float(cells[2].split()[0]) / mb:12.2f}"
        )


if __name__ == "__main__":
    main()
