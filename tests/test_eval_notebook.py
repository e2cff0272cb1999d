"""The evaluation notebook runs top to bottom (so it cannot rot) within its time budget."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "eval" / "notebooks" / "retrieval_evaluation.ipynb"
CELL_TIMEOUT_SEC = 120  # generous: the whole notebook takes well under a minute


def _text_outputs(notebook: nbformat.NotebookNode) -> str:
    parts: list[str] = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            data = output.get("data", {})
            parts.append(data.get("text/markdown", "") or data.get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.slow
def test_notebook_executes_and_reports_metrics() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"), (
        "commit the notebook without outputs"
    )
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_SEC,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError with the failing cell on any error
    text = _text_outputs(notebook)
    assert "eval.metrics agrees with LlamaIndex" in text
    assert "| α | hit rate | MRR | nDCG |" in text
    for alpha in ("| 0.0 |", "| 0.5 |", "| 1.0 |"):
        assert alpha in text
    assert "notebook ran in" in text
