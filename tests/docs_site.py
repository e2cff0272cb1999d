"""Test data: a small documentation tree with every trap a site crawl meets, and the
`site` fixture that serves it on loopback (used by in-process and process tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.static_site import StaticSite, page, serve_folder, write_site

IN_SCOPE = {
    "/docs/index.html",
    "/docs/guide/index.html",
    "/docs/guide/install.html",
    "/docs/guide/usage.html",
    "/docs/guide/deep/a.html",
    "/docs/guide/deep/b.html",
    "/docs/api/index.html",
    "/docs/api/functions.html",
}
"""Pages a recursive crawl from /docs/ must store (each exactly once)."""


def docs_site(root: Path, base: str) -> None:
    """A small documentation tree with every trap a site crawl meets."""
    write_site(
        root,
        {
            "/docs/index.html": page(
                "Docs home",
                "Welcome to the kettle documentation.",
                links=[
                    "guide/",
                    "guide/index.html#top",
                    "./guide/install.html",
                    "api/",
                    "../outside.html",
                    "http://external.invalid/page.html",
                    "mailto:docs@example.com",
                    "_static/theme.html",
                    "private.html",
                    "missing.html",
                ],
            ),
            "/docs/guide/index.html": page(
                "Guide", "The guide explains boiling.", links=["install.html", "usage.html", "../"]
            ),
            "/docs/guide/install.html": page(
                "Install", "Install the kettle with pip install kettle.", links=["usage.html"]
            ),
            "/docs/guide/usage.html": page(
                "Usage", "Fill the kettle, press the switch.", links=["deep/a.html"]
            ),
            "/docs/guide/deep/a.html": page(
                "Deep A", "Descaling with citric acid.", links=["b.html"]
            ),
            "/docs/guide/deep/b.html": page("Deep B", "Warranty lasts two years.", links=[]),
            "/docs/api/index.html": page(
                "API", "The kettle API.", links=["functions.html", "print.html", "copy.html"]
            ),
            "/docs/api/functions.html": page("Functions", "boil(temperature) heats water."),
            "/docs/api/print.html": page(
                "Functions (print)",
                "Printable: boil(temperature) heats water, print layout.",
                head=f'<link rel="canonical" href="{base}/docs/api/functions.html">',
            ),
            "/docs/api/copy.html": page("Functions", "boil(temperature) heats water."),
            "/docs/_static/theme.html": page("Theme", "Theme internals."),
            "/docs/private.html": page(
                "Private", "Drafts.", head='<meta name="robots" content="noindex, nofollow">'
            ),
            "/outside.html": page("Outside", "Not part of the docs."),
        },
    )


@pytest.fixture
def site(tmp_path: Path) -> Iterator[StaticSite]:
    root = tmp_path / "site"
    root.mkdir()
    with serve_folder(root) as served:
        docs_site(root, served.base)
        yield served
