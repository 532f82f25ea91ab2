"""The residual-MLP recursions (PDLT appendix B) print like the others: every form compiles
without an overfull box (the residual V holds a factor, an expectation of a sum, wider than a
line: it is broken inside its sum), the text is plain, and the forms still equal the derivation."""

from __future__ import annotations

import re

import pytest

from effth.pdlt.initialization.recursions import derive_initialization
from effth.printing.formula import FORMS, document, rendered_width
from effth.printing.tex import compile_tex, have_pdflatex


def _formulas():
    return [derive_initialization(name, residual=True).formula() for name in ("K", "V", "T")]


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
@pytest.mark.parametrize("form", ["edgeworth", "compact"])
def test_residual_documents_compile_without_overfull_boxes(form):
    run = compile_tex(document(_formulas(), title="residual", form=form))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0, run.overfull


def test_residual_rows_fit_and_text_is_plain():
    for f in _formulas():
        assert f.check()
        for form in FORMS:
            rows = f.latex(form, env="align").split("\\\\")
            body = [r for r in rows if r"\text{where" not in r and "phantom" not in r]
            assert max(rendered_width(r.split("&", 1)[-1]) for r in body) <= 66, form
        txt = f.text()
        assert "\\" not in txt and not re.search(r"[A-Z][a-z]+[A-Z][a-zA-Z]*\(", txt)
