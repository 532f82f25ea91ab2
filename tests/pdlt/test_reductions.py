"""Single-input and second-layer forms obtained from the derived recursions by substitution."""

from __future__ import annotations

import pytest
import sympy as sp

from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.indices import alpha
from effth.algebra.tensors import FourPointVertex, NLOMetric
from effth.pdlt import RATIO
from effth.pdlt.derivation.pipeline import CB, CW, KMAT
from effth.pdlt.initialization.reductions import CHI_PARALLEL, J_OVER_K2, second_layer, single_input

from ._book import chi_forms, single_input_atoms

a = alpha(1)


def _atom(*orders):
    return GaussianExpectation(sp.Mul(*[sigma(a, o) for o in orders]), KMAT)


def test_single_input_is_the_book_chi_form_symbolically():
    rv = single_input("V").expr
    Vl = [t for t in rv.atoms(FourPointVertex)][0]
    book_V = RATIO * CHI_PARALLEL**2 * Vl + CW**2 * (_atom(0, 0, 0, 0) - _atom(0, 0) ** 2)
    assert sp.expand(rv - book_V) == 0
    rg = single_input("G1").expr
    Gl = [t for t in rg.atoms(NLOMetric)][0]
    Vg = [t for t in rg.atoms(FourPointVertex)][0]
    assert sp.expand(rg - RATIO * (CHI_PARALLEL * Gl + J_OVER_K2 * Vg / 8)) == 0
    assert sp.expand(single_input("K").expr - (CB + CW * _atom(0, 0))) == 0


@pytest.mark.parametrize("act", ["tanh", "erf"])
def test_single_input_numbers_against_spec_chi_forms(act):
    """chi_par and j from their book definitions (z-weighted atoms) reproduce the reference numbers."""
    K, V, G1, cw, cb, rho = 0.8, 0.4, -0.1, 1.4, 0.05, 2.0
    chi, j, e = single_input_atoms(K, act, cw)
    Kn, Vn, Gn = chi_forms(K, V, G1, act, cw, cb, rho)
    rv = single_input("V").expr
    vals = {CHI_PARALLEL: chi, J_OVER_K2: j / K**2, RATIO: rho, CW: cw, CB: cb,
            _atom(0, 0, 0, 0): e(4), _atom(0, 0): e(2)}
    vals.update({t: V for t in rv.atoms(FourPointVertex)})
    assert float(rv.xreplace(vals)) == pytest.approx(Vn, rel=1e-10)
    rg = single_input("G1").expr
    vals.update({t: V for t in rg.atoms(FourPointVertex)})
    vals.update({t: G1 for t in rg.atoms(NLOMetric)})
    assert float(rg.xreplace(vals)) == pytest.approx(Gn, rel=1e-10)


def test_second_layer_exact_forms():
    assert second_layer("G1").expr == 0
    v2 = second_layer("V").expr
    assert not v2.atoms(FourPointVertex) and not v2.atoms(NLOMetric)
    assert "V^{(2)}" in second_layer("V").latex()


def test_cli_flags(capsys):
    from effth.cli import main

    assert main(["derive", "G1", "--single-input"]) == 0
    out = capsys.readouterr().out
    assert r"\chi_{\parallel}" in out and "j^{(\\ell)}" in out
    assert main(["derive", "V", "--second-layer", "--format", "text"]) == 0
    assert "FourPointVertex" not in capsys.readouterr().out
    assert main(["derive", "V", "--second-layer", "--single-input"]) == 2


def test_effth_derive_dispatch():
    import effth as et
    from effth.errors import DomainError

    assert et.derive("V").expr == et.derive_initialization("V").expr
    assert et.derive("G1", special="second-layer").expr == 0
    assert et.derive("V", special="single-input").expr == single_input("V").expr
    with pytest.raises(DomainError, match="special"):
        et.derive("V", special="third-layer")
