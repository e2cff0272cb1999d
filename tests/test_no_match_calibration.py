"""The calibration table recomputes the no-match rule's decisions from recorded evidence."""

from __future__ import annotations

import json
from pathlib import Path

from eval.no_match_calibration import main

WEAK = {"excess": -0.9, "unseen": ["moodle"], "rarest_match": 40, "bm25_lead": 1.05}
STRONG = {"excess": 1.5, "unseen": None, "rarest_match": None, "bm25_lead": None}
LOOKUP = {"excess": -0.9, "unseen": ["listed"], "rarest_match": 1, "bm25_lead": 3.0}


def _write(path: Path, questions: list[dict]) -> str:
    path.write_text(json.dumps({"questions": questions}), encoding="utf-8")
    return str(path)


def test_table_counts_declined_no_answer_and_lost_answers(tmp_path: Path, capsys) -> None:
    docs = _write(
        tmp_path / "docs.json",
        [
            {"id": "n1", "kind": "none", "answer_in_output": False, "evidence": WEAK},
            {"id": "a1", "kind": "prose", "answer_in_output": False, "evidence": WEAK},
            {"id": "a2", "kind": "code", "answer_in_output": True, "evidence": STRONG},
        ],
    )
    off = _write(tmp_path / "off.json", [{"id": "a1", "kind": "prose", "answer_in_output": True}])
    rows = _write(
        tmp_path / "rows.json",
        [
            {"rank": 1, "evidence": LOOKUP},
            {"rank": 1, "evidence": WEAK},
            {"rank": 3, "evidence": WEAK},
        ],
    )
    assert main([f"docs={docs}:{off}", f"rows={rows}", "--cutoffs=-1,-0.7"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| -1 | 0 of 1 / 0 of 2 | 0 of 2 |"
    # at -0.7 the weak no-answer question and the weak found answer (from the rule-off run)
    # are declined; the row BM25 pins down is kept, the weak right row is not
    assert out[3] == "| -0.7 | 1 of 1 / 1 of 2 | 1 of 2 |"
    assert main([f"docs={tmp_path / 'missing.json'}"]) == 2
