"""A refresh's checkpoint survives the journal round trip, and a damaged one is refused
(the resumed refresh then counts from zero) instead of being trusted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rag_app.refresh_checkpoint import RefreshCheckpoint

GOOD: dict[str, Any] = {
    "removed_urls": ["https://docs.example/a.html"],
    "moved_pages": [{"from": "https://docs.example/p0", "to": "https://docs.example/zero"}],
    "updated_urls": ["https://docs.example/b.html"],
    "created_urls": ["https://docs.example/zero"],
    "embedded": 12,
    "chunks_stored": 14,
}


def test_a_checkpoint_survives_the_journal() -> None:
    parsed = RefreshCheckpoint.parse(json.loads(json.dumps(GOOD)))
    assert parsed is not None and parsed.to_dict() == GOOD


@pytest.mark.parametrize(
    "damage",
    [
        {"removed_urls": "https://docs.example/a.html"},
        {"removed_urls": ["javascript:alert(1)"]},
        {"updated_urls": [None]},
        {"created_urls": ["file:///etc/passwd"]},
        {"moved_pages": [{"from": "https://docs.example/p0"}]},
        {"moved_pages": [{"from": "https://a/", "to": "https://b/", "extra": "x"}]},
        {"embedded": -1},
        {"chunks_stored": "14"},
        {"embedded": True},
    ],
)
def test_a_damaged_checkpoint_is_refused(
    damage: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    assert RefreshCheckpoint.parse({**GOOD, **damage}) is None
    assert "unusable" in caplog.text


def test_no_checkpoint_and_not_a_mapping() -> None:
    assert RefreshCheckpoint.parse(None) is None
    assert RefreshCheckpoint.parse(["removed_urls"]) is None
