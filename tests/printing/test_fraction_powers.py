r"""No power of a fraction is printed without parentheses: ``\frac{n_\ell}{n_{\ell-1}}^{2}`` reads
as :math:`n_\ell/n_{\ell-1}^2`.  Checked over every derived object in every form: the NTK-hierarchy
objects in tests/printing/test_formulas.py, the six-point recursion (where the width ratio
:math:`n_\ell/n_{\ell-1}` enters squared, PDLT epilogue (ε.20)) in tests/pdlt/test_six_point.py
and here."""

from __future__ import annotations

import re

import sympy as sp

from effth.pdlt import derive_six_point_vertex
from effth.pdlt.derivation.pipeline import RATIO
from effth.printing import latex


def bare_fraction_powers(tex: str) -> list:
    r"""Every ``\frac{..}{..}^`` in ``tex`` (braces balanced), with some context."""
    out = []
    for m in re.finditer(r"\\[td]?frac(?=\{)", tex):
        i = m.end()
        for _ in range(2):
            if i >= len(tex) or tex[i] != "{":
                break
            depth = 0
            for j in range(i, len(tex)):
                depth += {"{": 1, "}": -1}.get(tex[j], 0)
                if depth == 0:
                    break
            i = j + 1
        else:
            if tex[i:i + 1] == "^":
                out.append(tex[max(0, m.start() - 20):i + 5])
    return out


def test_the_finder_finds_a_bare_power():
    assert bare_fraction_powers(r"3 \frac{n_{\ell}}{n_{\ell-1}}^{2} V") != []
    assert bare_fraction_powers(r"\frac{a^{2}}{b}") == []
    assert bare_fraction_powers(r"\left(\frac{a}{b}\right)^{2}") == []


def test_a_power_of_the_width_ratio_is_parenthesised():
    x = sp.Symbol("x")
    assert latex(RATIO ** 2) == r"\left(\frac{n_{\ell}}{n_{\ell-1}}\right)^{2}"
    assert bare_fraction_powers(latex(3 * RATIO ** 2 * x / 7)) == []
    assert bare_fraction_powers(latex(RATIO ** -2)) == []
    assert latex(RATIO) == r"\frac{n_{\ell}}{n_{\ell-1}}"


def test_six_point_full_recursion(opt_in_slow):
    e, _ = derive_six_point_vertex(False)                  # about a minute
    assert bare_fraction_powers(latex(e)) == []
