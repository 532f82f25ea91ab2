"""Render the printed forms of V and A shown in ``docs/latex.md`` with a real TeX run.

Each image is the package's own LaTeX (``Recursion.latex(form, env="align*")``) compiled by
``pdlatex`` and rasterized by Ghostscript, so the page shows exactly what a user pastes.

Usage::

    python docs/render_formulas.py        # writes docs/figures/latex_*.png

Needs ``pdflatex`` with the ``standalone`` class (Debian: texlive-latex-extra) and ``gs``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "figures"

#: (file stem, statistic, special, form)
CASES = [
    ("latex_V_edgeworth", "V", None, "edgeworth"),
    ("latex_V_book", "V", None, "book"),
    ("latex_V_compact", "V", None, "compact"),
    ("latex_V_single_input", "V", "single-input", "edgeworth"),
    ("latex_A_edgeworth", "A", None, "edgeworth"),
    ("latex_A_compact", "A", None, "compact"),
    ("latex_A_single_input", "A", "single-input", "compact"),
]


def _formula(stat: str, special):
    if stat in ("K", "V", "G1"):
        from effth.pdlt.initialization import derive
        return derive(stat, special=special).formula()
    from effth.pdlt.ntk import derive_ntk
    return derive_ntk(stat, special=special).formula()


def render(stem: str, stat: str, special, form: str) -> Path:
    tex = _formula(stat, special).latex(form, env="align*")
    doc = "\n".join([r"\documentclass[varwidth=17cm,border=6pt]{standalone}",
                     r"\usepackage{amsmath,amssymb}", r"\begin{document}", tex, r"\end{document}", ""])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "f.tex").write_text(doc)
        subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "f.tex"], cwd=tmp,
                       check=True, capture_output=True)
        out = OUT / f"{stem}.png"
        subprocess.run(["gs", "-q", "-dSAFER", "-dBATCH", "-dNOPAUSE", "-sDEVICE=png16m", "-r130",
                        "-dTextAlphaBits=4", "-dGraphicsAlphaBits=4", f"-sOutputFile={out}",
                        str(Path(tmp) / "f.pdf")], check=True)
    return out


def main() -> int:
    if shutil.which("pdflatex") is None or shutil.which("gs") is None:
        print("needs pdflatex and gs on PATH", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        print(render(*case).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
