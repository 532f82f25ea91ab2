"""Execute every notebook in notebooks/ as a user would (small sizes: CI is set for the kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("CI", "true")  # notebooks pick small sizes when CI is set
    monkeypatch.setenv("PYTHONWARNINGS", "error::RuntimeWarning")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError with the traceback of a failing cell


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_rendered(path: Path) -> None:
    """Readers browse the stored notebooks: every code cell that runs carries its outputs, no
    stored output is an error, and every figure the notebook draws is stored as an image
    (``python docs/render_notebooks.py`` refreshes them)."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert code, f"{path.name} has no code"
    assert all(c.get("execution_count") for c in code), f"{path.name} is stored unexecuted"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"], f"{path.name} stores an error"
    draws = sum(("plt." in c.source or ".plot(" in c.source) for c in code)
    images = sum(("image/png" in o.get("data", {})) for o in outputs)
    assert images >= min(draws, 1), f"{path.name} draws figures but stores none"
