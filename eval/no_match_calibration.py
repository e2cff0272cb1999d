"""Calibration table of the no-match rule over several evaluation runs.

    python -m eval.no_match_calibration [--cutoffs=-1,-0.7,-0.5,0] \\
        docs-ja=.tmp/ae-ja-cal/report.json:.tmp/ae-ja-off/report.json \\
        docs-py=.tmp/ae-py-cal/report.json:.tmp/ae-py-off/report.json \\
        ja-tables=.tmp/rl-ja-cal/report.json en-tables=.tmp/rl-en-cal/report.json

Each argument is NAME=EVIDENCE[:OFF]. EVIDENCE is the `report.json` of a run with
`RAG_NO_MATCH_CUTOFF=10`, which records every question's evidence: `eval.answer_eval`
(docs sets) or `eval.row_lookup` (table sets). OFF, for a docs set, is a run with the rule
off (`RAG_NO_MATCH_CUTOFF=`), which says which answers the output held. Per cut-off, the
table gives the no-answer questions declined and the found answers (docs) or right top
rows (tables) that the rule would decline, as `Evidence.declines` decides, so the figures
in docs/evaluation.md can be recomputed after any change of the rule's constants.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag_app.index.no_match import Evidence

DEFAULT_CUTOFFS = (-1.0, -0.7, -0.5, 0.0)


def load_set(evidence_file: str, off_file: str | None) -> list[dict[str, Any]]:
    """Questions as {none, good, evidence}: `good` = the answer was in the output (docs,
    from the run with the rule off) or the top hit was the asked row (tables)."""
    questions = json.loads(Path(evidence_file).read_text(encoding="utf-8"))["questions"]
    off: dict[str, Any] = {}
    if off_file:
        off = {q["id"]: q for q in json.loads(Path(off_file).read_text())["questions"]}
    rows = []
    for q in questions:
        if "kind" in q:  # an answer_eval report
            good = off.get(q["id"], q).get("answer_in_output", False)
            rows.append({"none": q["kind"] == "none", "good": good, "evidence": q["evidence"]})
        else:  # a row_lookup report
            rows.append({"none": False, "good": q["rank"] == 1, "evidence": q["evidence"]})
    return rows


def cell(rows: list[dict[str, Any]], cutoff: float) -> str:
    def declined(row: dict[str, Any]) -> bool:
        return Evidence(**row["evidence"]).declines(cutoff)

    none = [r for r in rows if r["none"]]
    good = [r for r in rows if not r["none"] and r["good"]]
    lost = f"{sum(map(declined, good))} of {len(good)}"
    return f"{sum(map(declined, none))} of {len(none)} / {lost}" if none else lost


def table(sets: dict[str, list[dict[str, Any]]], cutoffs: Sequence[float]) -> str:
    head = "| cut-off | " + " | ".join(
        f"{name}: {'no-answer declined / ' if any(r['none'] for r in rows) else ''}"
        "good answers declined"
        for name, rows in sets.items()
    )
    lines = [head + " |", "| ---: |" + " ---: |" * len(sets)]
    for t in cutoffs:
        lines.append(f"| {t:g} | " + " | ".join(cell(r, t) for r in sets.values()) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m eval.no_match_calibration", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("runs", nargs="+", help="NAME=EVIDENCE_REPORT[:RULE_OFF_REPORT]")
    ap.add_argument("--cutoffs", default=",".join(f"{c:g}" for c in DEFAULT_CUTOFFS))
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cutoffs = [float(c) for c in args.cutoffs.split(",")]
        sets = {}
        for run in args.runs:
            name, _, files = run.partition("=")
            evidence_file, _, off_file = files.partition(":")
            sets[name] = load_set(evidence_file, off_file or None)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(sets, cutoffs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
