r"""Running a real TeX engine on what effth writes: the check that printed LaTeX compiles.

:func:`compile_tex` runs ``pdflatex`` (when it is on ``PATH``) on a document in a temporary
directory and reports errors and overfull boxes; the test suite runs it on every ``.tex`` the
package writes (``effth derive --standalone``, the report's ``recursions.tex``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TexRun", "compile_tex", "have_pdflatex"]


@dataclass(frozen=True)
class TexRun:
    """What ``pdflatex`` said about a document.

    Attributes
    ----------
    ok : bool
        Compiled without error (a PDF was written).
    errors : list of str
        The ``! ...`` lines of the log.
    overfull : list of float
        Overfull box amounts in points, one per box.
    log : str
    pdf : bytes or None
    """

    ok: bool
    errors: list = field(default_factory=list)
    overfull: list = field(default_factory=list)
    log: str = ""
    pdf: bytes | None = None

    @property
    def worst_overfull(self) -> float:
        """The widest overfull box, in pt (0 if none)."""
        return max(self.overfull, default=0.0)


def have_pdflatex() -> bool:
    """Whether ``pdflatex`` is on ``PATH``."""
    return shutil.which("pdflatex") is not None


def compile_tex(source: str, *, timeout: float = 120.0, keep: str | Path | None = None) -> TexRun:
    """Compile ``source`` with ``pdflatex -halt-on-error`` and parse its log.

    Parameters
    ----------
    source : str
        A complete LaTeX document.
    timeout : float
        Seconds before the run is abandoned (reported as an error).
    keep : path, optional
        Write the ``.tex``, ``.log`` and ``.pdf`` there as well.
    """
    exe = shutil.which("pdflatex")
    if exe is None:
        raise FileNotFoundError("pdflatex is not on PATH (Debian: texlive-latex-base, "
                                "texlive-latex-recommended)")
    with tempfile.TemporaryDirectory() as tmp:
        tex = Path(tmp) / "doc.tex"
        tex.write_text(source)
        try:
            subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", tex.name],
                           cwd=tmp, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return TexRun(False, [f"pdflatex took more than {timeout:g} s"])
        log_path = Path(tmp) / "doc.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        pdf_path = Path(tmp) / "doc.pdf"
        pdf = pdf_path.read_bytes() if pdf_path.exists() else None
        if keep is not None:
            keep = Path(keep)
            keep.mkdir(parents=True, exist_ok=True)
            for name in ("doc.tex", "doc.log", "doc.pdf"):
                if (Path(tmp) / name).exists():
                    shutil.copy(Path(tmp) / name, keep / name)
    errors = [ln for ln in log.splitlines() if ln.startswith("!")]
    overfull = [float(m) for m in re.findall(r"Overfull \\[hv]box \(([\d.]+)pt too", log)]
    return TexRun(pdf is not None and not errors, errors, overfull, log, pdf)
