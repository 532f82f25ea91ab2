"""The printed gamma0-series equations (effth.dmft.series.formulas) against the numeric series.

(a) the printed equations, evaluated by whole-grid matrix algebra, against (b) the time-stepping
engine (deep_linear_series_arrays, truncated power-series arithmetic, through gamma0_series), and
at order 2 against (c) the closed form rational in L of Bordelon & Pehlevan (2022), eqs.
(144)-(147) with the corrected prefactor L(L+1)^2(L+2)/12, on discrete lazy time functions.
Tolerance: 1e-12 relative (both sides are float64 round-off); a formula with one coefficient
changed by 10 % is shown to miss by many orders of magnitude more.
"""

from __future__ import annotations

import dataclasses
import io
from fractions import Fraction

import numpy as np
import pytest

from effth.cli import main
from effth.dmft import gamma0_series
from effth.dmft.series.formulas import Term, deep_linear_formulas
from effth.dmft.series.leading import deep_linear_order2_numeric, lazy_time_functions_discrete
from effth.errors import DomainError
from effth.printing.formula import document
from effth.printing.tex import compile_tex, have_pdflatex


def _data(n=3, P=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4)) / 2
    return X @ X.T + 0.3 * np.eye(n), rng.standard_normal(P)


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


NAMES = {"H": "phi", "G": "g", "ntk": "ntk", "f": "f", "delta": "delta", "loss": "loss"}


@pytest.mark.parametrize("L,closure,gi", [(1, "exact", False), (2, "exact", False),
                                          (3, "exact", False), (3, "ntk", False),
                                          (2, "ntk", True), (3, "exact", True)])
def test_printed_equations_reproduce_the_numeric_series(L, closure, gi):
    kx, y = _data(seed=L)
    eta, T, order = 0.06, 6, 6
    ser = gamma0_series(kernel=kx, y=y, hidden_layers=L, eta=eta, steps=T, order=order,
                        closure=closure, gradient_independent=gi)
    fm = deep_linear_formulas(order, hidden_layers=L, closure=closure, gradient_independent=gi)
    ev = fm.evaluate(kx, y, eta=eta, steps=T)
    for key, name in NAMES.items():
        for m in range(order // 2 + 1):
            ref = ser.coefficient(2 * m, name)
            assert np.max(np.abs(ref)) > 0 or m > 0
            assert _rel(ev[key][m], ref) < 1e-12, (key, m)


def test_order2_equations_equal_the_closed_form_rational_in_L():
    """Order 2 of the printed system = B&P (144)-(147) corrected: a_l, b_l, c_l, d_l and the NTK
    prefactor L(L+1)^2(L+2)/12 (20 at L = 3), with the discrete v_a, v_ab of the lazy Euler error."""
    kx, y = _data(n=2, P=2, seed=7)
    eta, T = 0.05, 7
    for L in (1, 2, 3, 4):
        ev = deep_linear_formulas(2, hidden_layers=L, closure="ntk").evaluate(kx, y, eta=eta, steps=T)
        _, v, vv = lazy_time_functions_discrete((L + 1) * kx, y, eta, T)
        H2, G2, K2 = deep_linear_order2_numeric(kx, v[:, None, :], vv[:, None], v[None, :, :],
                                                vv[None, :], hidden_layers=L)
        assert _rel(ev["H"][1], np.einsum("tslmn->ltmsn", H2)) < 1e-12
        assert _rel(ev["G"][1], np.einsum("tsl->lts", G2)) < 1e-12
        assert _rel(ev["ntk"][1], np.einsum("ttmn->tmn", K2)) < 1e-12
    # the prefactor by hand: L = 3 -> 3*16*5/12 = 20 (K2 above uses the sympy sum)
    assert Fraction(3 * 16 * 5, 12) == 20


def test_a_wrong_coefficient_is_rejected():
    """Y's 1/2 G C^T changed to 0.45: the evaluated series misses by > 1e-4 (the check bites)."""
    kx, y = _data(seed=3)
    fm = deep_linear_formulas(4, hidden_layers=2)
    ser = gamma0_series(kernel=kx, y=y, hidden_layers=2, eta=0.06, steps=6, order=4)
    bad = {}
    for m, eqs in fm.equations.items():
        bad[m] = [dataclasses.replace(e, terms=tuple(
            Term(Fraction(9, 20), t.factors, t.transpose) if t.coef == Fraction(1, 2) else t
            for t in e.terms)) if e.lhs.base == "Y" else e for e in eqs]
    wrong = dataclasses.replace(fm, equations=bad).evaluate(kx, y, eta=0.06, steps=6)
    assert _rel(wrong["ntk"][2], ser.coefficient(4, "ntk")) > 1e-4
    # and a dropped term (the A^{l-1} response in C^l)
    drop = {m: [dataclasses.replace(e, terms=e.terms[1:]) if e.lhs.base == "C" else e for e in eqs]
            for m, eqs in fm.equations.items()}
    wrong = dataclasses.replace(fm, equations=drop).evaluate(kx, y, eta=0.06, steps=6)
    assert _rel(wrong["f"][2], ser.coefficient(4, "f")) > 1e-4


def test_text_and_latex_forms():
    fm = deep_linear_formulas(6, hidden_layers=3)
    text, tex = fm.text(), fm.latex()
    assert "\\" not in text and "cdots" not in text
    for bad in (r"\cdots", r"\mathrm{Price}", r"\sum_{i+j"):
        assert bad not in tex
    # every matrix symbol used is defined in the 'where' block
    for sym in ("H^{\\ell}", "G^{\\ell}", "A^{\\ell}", "B^{\\ell}", "C^{\\ell}", "M^{\\ell}",
                "Y^{\\ell}", "Z^{\\ell}", r"\mathcal{C}[X", r"\mathcal{D}[X", "K^{x}_{(t", r"\mathbf{1}_{ts}"):
        assert sym in tex.split(r"\text{where}")[1], sym
    assert "C^l_0 = l Cdrive[Kx, Delta_0],  D^l_0 = (L+1-l) Ddrive[1, Delta_0]" in text


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_latex_compiles_with_pdflatex():
    run = compile_tex(document([deep_linear_formulas(6, hidden_layers=3),
                                deep_linear_formulas(4, closure="ntk", gradient_independent=True)]))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0


def _cli(*argv):
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_cli_prints_the_equations():
    code, text = _cli("gamma0", "--order", "6", "--hidden-layers", "3")
    assert code == 0 and text.startswith(r"\begin{aligned}")
    assert r"\cdots" not in text and "Price" not in text
    assert r"H^{\ell}_{6}&=H^{\ell-1}_{6}" in text
    code, text = _cli("gamma0", "--order", "4", "--depth", "3", "--format", "text", "--closure", "ntk")
    assert code == 0 and "\\" not in text
    assert "f_4(t_(i+1)) = f_4(t_i) + eta [K_0(t_i) Delta_4(t_i)" in text


def test_bad_input():
    with pytest.raises(DomainError, match="even"):
        deep_linear_formulas(3)
    with pytest.raises(DomainError, match="closure"):
        deep_linear_formulas(4, closure="euler")
    with pytest.raises(DomainError, match="hidden_layers="):
        deep_linear_formulas(4).evaluate(np.eye(2), np.ones(2), eta=0.1, steps=3)


# ---------------------------------------------------------------------- deep nonlinear, one input
from effth.dmft.series.deep_nonlinear import deep_nonlinear_order2_arrays  # noqa: E402
from effth.dmft.series.formulas_nonlinear import deep_nonlinear_formulas  # noqa: E402

KX1, Y1 = np.array([[0.8]]), np.array([1.0])


@pytest.mark.parametrize("act,L", [("tanh", 1), ("tanh", 2), ("tanh", 3), ("erf", 2),
                                   ("gelu", 3), ("softplus", 2)])
def test_nonlinear_moment_formulas_reproduce_the_engine(act, L):
    eta, T = 0.1, 8
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=L, activation=act, eta=eta, steps=T,
                        order=2, closure="ntk", nodes=96)
    ev = deep_nonlinear_formulas(L).evaluate(KX1, Y1, activation=act, eta=eta, steps=T)
    for key, name in (("phi", "phi"), ("g", "g")):
        for m in (0, 1):
            ref = ser.coefficient(2 * m, name)[:, :, 0, :, 0]
            assert _rel(ev[key][m], ref) < 1e-12, (key, m)
    for key in ("ntk", "f", "delta"):
        ref = ser.coefficient(2, key)
        assert _rel(ev[key][1], ref.reshape(ev[key][1].shape)) < 1e-12, key


def test_nonlinear_formulas_with_adaptive_quadrature_moments():
    """The moments from scipy's adaptive quadrature instead of the trapezoid rule: same numbers."""
    a = deep_nonlinear_formulas(2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6)
    b = deep_nonlinear_formulas(2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6,
                                            moment="quad")
    assert _rel(a["g"][1], b["g"][1]) < 1e-12 and _rel(a["ntk"][1], b["ntk"][1]) < 1e-12


def test_nonlinear_formulas_at_phi_identity_are_the_deep_linear_series():
    """phi(z) = z: <phi'^4> = 1, <phi phi'^2 phi''> = 0, <phi^2 phi'^2> = Phi, ... The moment
    formulas must give the deep linear gamma0^2 coefficients (an independent engine)."""
    ident = lambda ds, var: {(0, 0): var, (1, 1): 1.0, (1, 1, 1, 1): 1.0,  # noqa: E731
                             (0, 0, 1, 1): var}.get(tuple(ds), 0.0)
    for L in (2, 3):
        ev = deep_nonlinear_formulas(L).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=7,
                                                 moment=ident)
        ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=L, eta=0.1, steps=7, order=2,
                            closure="ntk")
        assert _rel(ev["phi"][1], ser.coefficient(2, "phi")[:, :, 0, :, 0]) < 1e-12
        assert _rel(ev["g"][1], ser.coefficient(2, "g")) < 1e-12
        assert _rel(ev["ntk"][1], ser.coefficient(2, "ntk")[:, 0, 0]) < 1e-12


def test_nonlinear_wrong_moment_coefficient_is_rejected():
    """<phi'^2 phi''^2> x 0.9 in G_2: the NTK coefficient misses by far more than 1e-12."""
    import effth.dmft.series.formulas_nonlinear as fn
    eta, T = 0.1, 8
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=2, activation="tanh", eta=eta, steps=T,
                        order=2, closure="ntk", nodes=96)
    good = fn._trapezoid_moment
    from effth.dmft.solvers.lazy import resolve_activation
    act = resolve_activation("tanh")
    fns = [act.numpy(k) for k in range(4)]
    bad = lambda ds, var: good(fns, ds, var) * (0.9 if tuple(ds) == (1, 1, 2, 2) else 1.0)  # noqa: E731
    ev = deep_nonlinear_formulas(2).evaluate(KX1, Y1, activation="tanh", eta=eta, steps=T,
                                             moment=bad)
    assert _rel(ev["ntk"][1], ser.coefficient(2, "ntk")[:, 0, 0]) > 1e-4


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_nonlinear_latex_compiles():
    run = compile_tex(document([deep_nonlinear_formulas(3, activation="tanh")]))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0


def test_cli_nonlinear_order2_prints_moments():
    code, text = _cli("gamma0", "--order", "2", "--depth", "3", "--activation", "tanh")
    assert code == 0 and r"\langle \phi'^{4}\rangle_{\ell}" in text and "Price" not in text
    code, text = _cli("gamma0", "--order", "2", "--depth", "3", "--activation", "tanh",
                      "--format", "text")
    assert code == 0 and "\\" not in text and "<phi'^2 phi''^2>_l" in text


@pytest.mark.parametrize("act,L", [("tanh", 2), ("erf", 3), ("gelu", 1)])
def test_several_input_atom_formulas_reproduce_the_engine(act, L):
    """Two inputs: the four-point-atom form (120-node trapezoid atoms) against the engine run with
    80 nodes per dimension (both converged far below 1e-12)."""
    from effth.dmft.series.formulas_nonlinear import evaluate_several_inputs
    kx, y, eta, T = np.array([[1.0, 0.4], [0.4, 0.8]]), np.array([1.0, -0.5]), 0.1, 5
    ref = deep_nonlinear_order2_arrays(kx, y, hidden_layers=L, activation=act, eta=eta, steps=T,
                                       nodes=80)
    ev = evaluate_several_inputs(kx, y, activation=act, eta=eta, steps=T, hidden_layers=L)
    assert _rel(ev["phi"], ref.phi[1].reshape(ev["phi"].shape)) < 1e-12
    assert _rel(ev["g"], ref.g[1].reshape(ev["g"].shape)) < 1e-12
    assert _rel(ev["ntk"], ref.ntk[1]) < 1e-12
