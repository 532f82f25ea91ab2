"""The gamma0-series of deep nonlinear networks above gamma0^2, printed as derived formulas.

derived  -- the printed terms (Gaussian moments x time networks, from the field expansion and the
            Price expansion of the corrected sources) evaluated on their own moments;
measured -- the numeric engine (formal sources on Smolyak rules, `deep_jets`), an independent
            implementation: the printed system must reproduce it to <= 1e-10 relative at gamma0^4
            (L = 2, 3; tanh, erf), responses included;
published/known -- at gamma0^2 the derived terms equal the moment table of
            `formulas_nonlinear` (Bordelon & Pehlevan (2022), App. P.2-P.6); with phi = id the deep
            linear series.  One coefficient x 0.9 or one dropped term is rejected.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.dmft import gamma0_series
from effth.dmft.series.formulas_deep import DeepSeriesFormulas, deep_series_formulas, derive_deep_terms
from effth.errors import DomainError
from effth.printing.formula import document
from effth.printing.tex import compile_tex, have_pdflatex

KX1, Y1 = np.array([[0.8]]), np.array([1.0])


def _rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def _engine(L, act, T, order=4):
    return gamma0_series(kernel=KX1, y=Y1, hidden_layers=L, activation=act, eta=0.1, steps=T,
                         order=order, closure="ntk", nodes=160)


def _errors(ev, ser, order=4):
    err = {}
    for k in range(0, order + 1, 2):
        for name in ("phi", "g", "ntk", "f"):
            ref = np.asarray(ser.coefficient(k, name))
            ref = ref[:, :, 0, :, 0] if name in ("phi", "g") else ref.reshape(ev[name][k // 2].shape)
            err[(name, k)] = _rel(ev[name][k // 2], ref)
    for name in ("A", "B"):
        R = np.asarray(ser.lazy_responses[name + "_series"])[:, :, :, 0, :, 0]
        for k in range(R.shape[0] if R.shape[1] else 0):          # L = 1: no inner responses
            err[(name, 2 * k)] = _rel(ev[name][k, 1:R.shape[1] + 1], R[k])
    return err


@pytest.mark.parametrize("L,act", [(2, "tanh"), (3, "erf")])
def test_printed_gamma0_4_system_reproduces_the_engine(L, act):
    T = 4
    ev = deep_series_formulas(4, L).evaluate(KX1, Y1, activation=act, eta=0.1, steps=T)
    err = _errors(ev, _engine(L, act, T))
    assert max(err.values()) < 1e-10, err


@pytest.mark.parametrize("L,act", [(3, "tanh"), (2, "erf"), (1, "tanh")])
def test_printed_gamma0_4_system_more_cases(L, act, opt_in_slow):
    T = 6
    ev = deep_series_formulas(4, L).evaluate(KX1, Y1, activation=act, eta=0.1, steps=T)
    err = _errors(ev, _engine(L, act, T))
    assert max(err.values()) < 1e-10, err


def test_order_2_terms_equal_the_moment_table():
    """The derived gamma0^2 terms against the moment form of formulas_nonlinear."""
    from effth.dmft.series.formulas_nonlinear import deep_nonlinear_formulas
    a = deep_series_formulas(2, 3).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6)
    b = deep_nonlinear_formulas(3).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6)
    for name in ("phi", "g", "ntk", "f"):
        assert _rel(a[name][1], b[name][1]) < 1e-13, name


def test_phi_identity_gives_the_deep_linear_series():
    """phi(z) = z: only <phi^2> = Phi and moments of phi' (= 1) survive; the printed gamma0^4
    system must give the exact deep linear coefficients (NTK closure)."""
    def ident(ds, var):
        ds = tuple(ds)
        if any(d >= 2 for d in ds):
            return 0.0
        zeros = ds.count(0)
        return 0.0 if zeros % 2 else float(np.prod(np.arange(zeros - 1, 0, -2))) * var ** (zeros // 2)

    ev = deep_series_formulas(4, 2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6, moment=ident)
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=2, eta=0.1, steps=6, order=4, closure="ntk")
    assert _rel(ev["ntk"][2], ser.coefficient(4, "ntk")[:, 0, 0]) < 1e-12
    assert _rel(ev["f"][2], ser.coefficient(4, "f")[:, 0]) < 1e-12


def test_a_wrong_term_is_rejected():
    T = 4
    ser = _engine(2, "tanh", T)
    good = deep_series_formulas(4, 2)
    printed = good.printed_terms()
    for how in ("scale", "drop"):
        terms = {k: dict(v) for k, v in printed.items()}
        key = max(terms[("g", 4)], key=lambda k: len(k[2]))        # one of the deepest networks
        if how == "scale":
            terms[("g", 4)][key] *= 0.9
        else:
            del terms[("g", 4)][key]

        class Bad(DeepSeriesFormulas):
            def printed_terms(self):
                return terms

        ev = Bad(4, 2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=T)
        err = _errors(ev, ser)
        assert err[("ntk", 4)] > 1e-6, (how, err[("ntk", 4)])
        assert err[("ntk", 2)] < 1e-10                     # lower orders untouched


def test_terms_are_derived_not_tabulated():
    d = derive_deep_terms(4)
    assert {k for k in d} >= {("phi", 4), ("g", 4), ("A", 2), ("B", 2)}
    # every gamma0^4 kernel term carries four powers of gamma0: drivers C~, D~ (one each, order m
    # counting m more) and source corrections Phi_m, G_m (m each)
    for q in ("phi", "g"):
        for (mom, p, net), c in d[(q, 4)].items():
            power = sum(1 + int(n[1:]) if n[0] in "CD" else int(n[1:]) for n, _, _ in net if n != "I")
            assert power == 4, net


def test_text_and_latex_print_every_symbol_without_structural_placeholders():
    fm = deep_series_formulas(4, 3, activation="tanh")
    text, tex = fm.text(), fm.latex(env="align*")
    assert "\\" not in text
    for bad in ("Price", "cdots", "sum_(i+j", r"\sum_{i+j", "GaussianExpectation", "Symbol("):
        assert bad not in text and bad not in tex, bad
    for defined in ("c_m(t) = sum_s C~^l_m(t,s)", "d_m(t) = sum_s D~^l_m(t,s)", "Theta(t>s) = 1",
                    "<F>_l = E[F(phi(u)", "A^0_m = 0", "NTK closure"):
        assert defined in text, defined
    for lhs in ("Phihat^l_4(t,s) = ", "Ghat^l_4(t,s) = ", "K_4(t) = ", "Delta_4(t_(i+1)) = ",
                "A^l_2(t,s) = ", "B^(l-1)_2(t,s) = ", "C~^l_2(t,s) = "):
        assert lhs in text, lhs
    assert r"\hat\Phi^{\ell}_{4}(t,s)&=" in tex


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_gamma0_4_document_compiles():
    run = compile_tex(document([deep_series_formulas(4, 3, activation="tanh")]))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0, run.overfull


def test_cli_prints_the_gamma0_4_formulas():
    from tests.test_cli import run
    code, text = run("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh")
    assert code == 0 and r"\hat\Phi^{\ell}_{4}(t,s)&=" in text and "given as numbers" not in text
    for bad in (r"\mathrm{Price}", r"\cdots", r"\sum_{i+j"):
        assert bad not in text
    code, text = run("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh", "--format", "text")
    assert code == 0 and "\\" not in text and "Ghat^l_4(t,s) = " in text


def test_api_latex_is_the_same_system():
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=2, activation="tanh", eta=0.1, steps=3,
                        order=4, closure="ntk")
    assert ser.latex(4, "f") == deep_series_formulas(4, 2, activation="tanh").latex(env="aligned")


def test_bad_input():
    with pytest.raises(DomainError, match="even"):
        deep_series_formulas(3)
    with pytest.raises(DomainError, match="hidden_layers"):
        deep_series_formulas(4, 0)
    with pytest.raises(DomainError, match="one input"):
        deep_series_formulas(4, 2).evaluate(np.eye(2), np.ones(2), activation="tanh", eta=0.1, steps=3)
    with pytest.raises(DomainError):
        deep_series_formulas(4, 2).evaluate(KX1, Y1, activation="relu", eta=0.1, steps=3)
