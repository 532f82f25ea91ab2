"""Execute the notebooks in ``notebooks/`` and store their outputs in place.

The notebooks are kept in the repository *with* their outputs and figures, so that a reader
browsing them (on a code host, or in the docs site built from them) sees what they show without
running anything.  ``tests/test_notebooks.py`` executes them again on every test run and checks
that the stored copies carry outputs.

Usage::

    python docs/render_notebooks.py            # all notebooks, the sizes a user gets
    python docs/render_notebooks.py 05_dmft    # the ones whose name contains "05_dmft"
    CI=true python docs/render_notebooks.py    # the small sizes the test suite uses
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render(path: Path) -> float:
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    os.environ.setdefault("EFFTH_PROGRESS", "0")
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if argv:
        paths = [p for p in paths if any(a in p.name for a in argv)]
    for p in paths:
        print(f"{p.name}: {render(p):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
