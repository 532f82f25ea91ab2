"""The derived NTK hierarchy: forward equations, book forms (corrected), spec tables, bad input.

Independent sources: the exact per-network derivatives of ``effth.simulation.ntk`` (backprop and
forward tangents, verified there against finite differences), the book's printed recursions as
extracted in the spec (with its errata), and the spec's numeric tables.
"""

import numpy as np
import pytest
import sympy as sp

import effth
from effth.activations import get_activation
from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.indices import alpha, ell
from effth.algebra.ntk_tensors import (DDNTKR, DDNTKS, DDNTKT, DDNTKU, DNTKP, DNTKQ, FrozenNTK,
                                       NTKPreactD, NTKPreactF, NTKVarianceA, NTKVarianceB)
from effth.algebra.tensors import FourPointVertex, Kernel, KernelMatrix
from effth.errors import DomainError
from effth.simulation.ntk import empirical_ntk
from effth.pdlt import RATIO, derive_ntk, learning_rates, ntk_flow
from effth.pdlt.derivation.ntk_forward import LAMBDA_B, LAMBDA_W, forward_numeric
from effth.pdlt.derivation.pipeline import CW

KM = KernelMatrix(Kernel, ell)


def E(*factors):
    return GaussianExpectation(sp.Mul(*factors), KM)


# ----------------------------------------------------------------- forward equations
@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_forward_equations_reproduce_exact_derivatives(act):
    """The typed forward equations (8.12), (11.24), (∞.169), (∞.170) iterate the exact tensors."""
    rng = np.random.default_rng(3)
    widths = (3, 5, 4, 3)
    X = rng.normal(size=(2, widths[0]))
    params = [(rng.normal(size=(widths[k], widths[k - 1])) / np.sqrt(widths[k - 1]),
               0.3 * rng.normal(size=widths[k])) for k in range(1, 4)]
    lb, lw = [0.7, 1.3, 0.4], [1.1, 0.6, 1.7]
    a = get_activation(act)
    derivs = [a.numpy(k) for k in range(4)]
    res = [empirical_ntk(params[:k], X, act, lambda_b=lb[:k], lambda_w=lw[:k],
                         outputs=range(widths[k]), order=3) for k in (1, 2, 3)]
    for layer in (1, 2):
        lo, hi = res[layer - 1], res[layer]
        prev = {"H": lo.H, "dH": lo.dH, "ddI": lo.ddIH, "ddII": lo.ddIIH}
        W = params[layer][0]
        for kind, exact in (("H", hi.H), ("dH", hi.dH), ("ddI", hi.ddIH), ("ddII", hi.ddIIH)):
            got = forward_numeric(kind, W, lo.z, prev, derivs, lb[layer], lw[layer])
            np.testing.assert_allclose(got, exact, rtol=1e-9, atol=1e-11 * np.abs(exact).max(),
                                       err_msg=f"{kind} at layer {layer + 1}")


def test_forward_equation_with_the_printed_sigma_prime_typo_fails():
    """(11.16)/(11.19) print sigma' for the undifferentiated sigma: the check must catch that."""
    rng = np.random.default_rng(4)
    widths = (2, 4, 3)
    X = rng.normal(size=(2, 2))
    params = [(rng.normal(size=(widths[k], widths[k - 1])) / np.sqrt(widths[k - 1]),
               0.3 * rng.normal(size=widths[k])) for k in (1, 2)]
    a = get_activation("tanh")
    derivs = [a.numpy(k) for k in range(4)]
    lo = empirical_ntk(params[:1], X, "tanh", outputs=range(4), order=2)
    hi = empirical_ntk(params, X, "tanh", outputs=range(3), order=2)
    good = forward_numeric("dH", params[1][0], lo.z, {"H": lo.H, "dH": lo.dH}, derivs, 1.0, 1.0)
    bad_derivs = [derivs[1], derivs[1], derivs[2], derivs[3]]     # sigma -> sigma' everywhere
    bad = forward_numeric("dH", params[1][0], lo.z, {"H": lo.H, "dH": lo.dH}, bad_derivs, 1.0, 1.0)
    assert np.allclose(good, hi.dH, rtol=1e-9, atol=1e-12)
    assert not np.allclose(bad, hi.dH, rtol=1e-3)


# ----------------------------------------------------------------- book forms (general)
a1, a2, a3, a4 = (alpha(k) for k in range(1, 5))
S0 = lambda x: sigma(x, 0)  # noqa: E731
S1 = lambda x: sigma(x, 1)  # noqa: E731
S2 = lambda x: sigma(x, 2)  # noqa: E731
S3 = lambda x: sigma(x, 3)  # noqa: E731
Th = lambda x, y: FrozenNTK(x, y, ell)  # noqa: E731
rho = RATIO


def _same(derived, book):
    assert sp.expand(derived - book) == 0, sp.expand(derived - book)


def test_theta_is_8_63():
    _same(derive_ntk("Theta").expr, LAMBDA_B + LAMBDA_W * E(S0(a1), S0(a2)) + CW * E(S1(a1), S1(a2)) * Th(a1, a2))


def test_B_is_8_89():
    book = CW**2 * (E(S1(a1), S1(a2), S1(a3), S1(a4)) * Th(a1, a3) * Th(a2, a4)
                    + rho * E(S1(a1), S1(a2)) * E(S1(a3), S1(a4)) * NTKVarianceB(a1, a2, a3, a4, ell))
    _same(derive_ntk("B").expr, book)


def test_F_is_8_79_with_stein():
    """(8.79) with sum G^{beta gamma} <z_beta f> = <d_gamma f> (spec chinf §3.3)."""
    F = lambda p, q, r, s: NTKPreactF(p, q, r, s, ell)  # noqa: E731
    d1 = {a1: E(S1(a1), S1(a2)), a2: E(S0(a1), S2(a2))}        # <d_g (sigma_a1 sigma'_a2)>
    d2 = {a3: E(S1(a3), S1(a4)), a4: E(S0(a3), S2(a4))}
    book = CW**2 * E(S0(a1), S0(a3), S1(a2), S1(a4)) * Th(a2, a4)
    for g1, v1 in d1.items():
        for g2, v2 in d2.items():
            book += rho * CW**2 * v1 * v2 * F(g1, a2, g2, a4)
    _same(derive_ntk("F").expr, book)


def test_P_is_the_corrected_11_49():
    P = lambda p, q, r, s: DNTKP(p, q, r, s, ell)  # noqa: E731
    book = (CW**2 * E(S2(a1), S1(a2), S1(a3), S0(a4)) * Th(a1, a2) * Th(a1, a3)
            + rho * CW**2 * E(S1(a2), S1(a3)) * (E(S2(a1), S0(a4)) * P(a1, a2, a3, a1)
                                                 + E(S1(a1), S1(a4)) * P(a1, a2, a3, a4)
                                                 + E(S2(a1), S0(a4)) * NTKVarianceB(a1, a1, a2, a3, ell)))
    _same(derive_ntk("P").expr, book)
    printed = book.xreplace({E(S2(a1), S0(a4)): E(S2(a1), S1(a4))})    # (11.49) as printed
    assert sp.expand(derive_ntk("P").expr - printed) != 0


def test_U_and_S_are_inf_176_and_inf_174_leading_parts():
    U = derive_ntk("U").expr     # U_{d1 d4 d2 d3} with (a1, a2, a3, a4) = (d1, d4, d2, d3)
    d1, d4, d2, d3 = a1, a2, a3, a4
    book = (CW**2 * E(S2(d1), S2(d2), S1(d3), S1(d4)) * Th(d1, d2) * Th(d1, d3) * Th(d2, d4)
            + rho * CW**2 * E(S1(d1), S1(d4)) * E(S1(d2), S1(d3)) * DDNTKU(d1, d4, d2, d3, ell))
    _same(U, book)
    S = derive_ntk("S").expr
    assert S.has(DDNTKS(a1, a2, a3, a4, ell)) and S.has(NTKVarianceB(a1, a2, a3, a4, ell))


# ----------------------------------------------------------------- single input vs chapters 9, 11, ∞
x = alpha(1)
s, s1, s2, s3 = S0(x), S1(x), S2(x), S3(x)
V = FourPointVertex(x, x, x, x, ell)
T0 = FrozenNTK(x, x, ell)
g = E(s, s)
chi_perp = CW * E(s1, s1)
chi_par = CW * (E(s1, s1) + E(s, s2))                 # (C_W/K)<z sigma sigma'> by Stein
h = CW / 2 * (E(s2, s2) + E(s1, s3))                  # (C_W/2K)<z sigma' sigma''> by Stein
zss1 = E(s2, s) + E(s1, s1)                           # <z sigma' sigma>/K
zs1s2 = E(s3, s1) + E(s2, s2)                         # <z sigma'' sigma'>/K
r = LAMBDA_W / CW


def _single(stat):
    return sp.expand(derive_ntk(stat, special="single-input").expr.subs(RATIO, 1))


def _t(cls):
    return cls(x, x, x, x, ell)


def test_single_input_matches_book_9_13_to_9_16():
    D, F, B, A = _t(NTKPreactD), _t(NTKPreactF), _t(NTKVarianceB), _t(NTKVarianceA)
    brV = CW**2 * E(s, s, s, s) - (CW * g)**2 + chi_par**2 * V
    brT = CW**2 * E(s, s, s1, s1) - CW * g * chi_perp + 2 * h * chi_par * V
    _same(_single("Theta"), LAMBDA_B + LAMBDA_W * g + chi_perp * T0)                          # (9.6)
    _same(_single("D"), chi_perp * chi_par * D + r * brV + T0 * brT)                           # (9.13)
    _same(_single("F"), chi_par**2 * F + CW**2 * E(s, s, s1, s1) * T0)                          # (9.14)
    _same(_single("B"), chi_perp**2 * B + CW**2 * E(s1, s1, s1, s1) * T0**2)                    # (9.15)
    _same(_single("A"), chi_perp**2 * A + r**2 * brV + 2 * r * T0 * brT + 2 * r * chi_perp * chi_par * D
          + 4 * h * chi_perp * T0 * D + T0**2 * (CW**2 * E(s1, s1, s1, s1) - chi_perp**2 + (2 * h)**2 * V))


def test_single_input_matches_book_11_55_11_56():
    P, Q, F, B = _t(DNTKP), _t(DNTKQ), _t(NTKPreactF), _t(NTKVarianceB)
    m = CW * chi_perp * E(s2, s) + chi_perp**2
    F_next = chi_par**2 * F + CW**2 * E(s, s, s1, s1) * T0
    _same(_single("P"), CW**2 * E(s2, s1, s1, s) * T0**2 + CW * chi_perp * E(s2, s) * B + m * P)
    _same(_single("Q"), CW**2 * E(s2, s1, s1, s) * T0**2 + r * F_next + 2 * h * chi_par * T0 * F + m * Q)


def test_single_input_matches_book_inf_14_to_inf_17():
    R, S, T, U = _t(DDNTKR), _t(DDNTKS), _t(DDNTKT), _t(DDNTKU)
    P, Q, F, B = _t(DNTKP), _t(DNTKQ), _t(NTKPreactF), _t(NTKVarianceB)
    lw = LAMBDA_W
    _same(_single("R"), chi_perp**2 * R + lw * CW * E(s2, s1, s1, s) * T0**2 + CW**2 * E(s3, s1, s1, s1) * T0**3
          + chi_perp * (lw * E(s2, s) + CW * T0 * E(s3, s1)) * (B + P)
          + chi_perp * (lw * E(s1, s1) + CW * T0 * E(s2, s2)) * P)
    _same(_single("S"), chi_perp**2 * S + CW * lw * E(s1, s1, s1, s1) * T0**2 + CW**2 * E(s2, s2, s1, s1) * T0**3
          + chi_perp * (lw * E(s1, s1) + CW * T0 * E(s2, s2)) * B)
    _same(_single("T"), chi_perp**2 * T + 2 * CW * lw * E(s2, s1, s1, s) * T0**2 + CW**2 * E(s2, s2, s1, s1) * T0**3
          + lw**2 * E(s1, s1, s, s) * T0 + (lw * zss1 + CW * T0 * zs1s2)**2 * F
          + 2 * chi_perp * (lw * (E(s2, s) + E(s1, s1)) + CW * T0 * (E(s3, s1) + E(s2, s2))) * Q)
    _same(_single("U"), chi_perp**2 * U + CW**2 * E(s2, s2, s1, s1) * T0**3)


def test_second_layer_has_no_layer_one_fluctuations():
    for stat in ("H1", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U"):
        e = derive_ntk(stat, special="second-layer").expr
        assert not e.has(RATIO) or stat in ("H1",), stat
    assert derive_ntk("H1", special="second-layer").expr == 0        # H^(2) is exact: no 1/n part


# ----------------------------------------------------------------- numbers: the spec's tables
def test_flow_reproduces_spec_chinf_table():
    """spec chinf §9.1: tanh, C_W=1, C_b=0, K1=1, lambda_b=1/l, lambda_W=1 (Theta1 = 2)."""
    L = 10
    fl = ntk_flow(K1=[[1.0]], Theta1=[[2.0]], depth=L, activation="tanh", c_w=1.0, c_b=0.0,
                  lambda_b=1.0 / np.arange(1, L + 1), lambda_w=1.0, rtol=1e-10)
    table = {2: (0.39429449, 1.82310030, 1.36603683, 0.15010191, -0.38274194, -0.23264003, -4.22529627,
                 2.44709882, 0.46568002, 1.08106199),
             3: (0.23645041, 1.73026832, 2.21289732, 0.16901848, -0.69045436, -0.31284439, -7.95434219,
                 4.74418839, 0.78268940, 1.46630984),
             5: (0.12790474, 1.63674240, 3.65727468, 0.17630370, -1.15411947, -0.45697492, -16.94707806,
                 9.91077299, 1.71551309, 1.83493009),
             10: (0.05801185, 1.55397299, 7.09889734, 0.17908584, -2.11041319, -0.84851793, -52.56308158,
                  28.07935514, 6.56915111, 2.23651839)}
    for layer, row in table.items():
        got = [float(np.ravel(fl[k][layer - 1])[0]) for k in ("K", "Theta", "B", "F", "P", "Q", "R", "S", "T", "U")]
        np.testing.assert_allclose(got, row, rtol=2e-8, atol=2e-8, err_msg=f"layer {layer}")
    # spec ch9-11 App. A fixture (same run, layer 2): D, A
    np.testing.assert_allclose([fl["D"][1].ravel()[0], fl["A"][1].ravel()[0]], [-0.118597, 0.168638], atol=1e-6)


def test_flow_reproduces_spec_ch8_tanh_table_and_relu_closed_forms():
    fl = ntk_flow(K1=[[1.0]], Theta1=[[2.0]], depth=8, activation="tanh", lambda_b=1.0, lambda_w=1.0)
    ref = {2: (2.32310, -0.11860, 0.15010, 0.16864, 1.36604), 5: (3.58272, -0.24139, 0.30605, 1.84517, 10.25063),
           8: (4.96649, -0.35802, 0.44758, 7.30331, 33.24753)}
    for layer, row in ref.items():
        got = [float(np.ravel(fl[k][layer - 1])[0]) for k in ("Theta", "D", "F", "A", "B")]
        np.testing.assert_allclose(got, row, atol=2e-5, err_msg=f"layer {layer}")
    # ReLU (C_W = 2, x2 = 1, lambda = 1): Theta = 2l, B = (1/3) 2^2 l(l-1)(2l-1) (spec ch5-8 §2.9)
    relu = ntk_flow(K1=[[2.0]], Theta1=[[2.0]], depth=8, activation="relu", c_w=2.0,
                    statistics=("Theta", "B"))
    lay = np.arange(1, 9)
    np.testing.assert_allclose(relu["Theta"].ravel(), 2 * lay, rtol=1e-10)
    np.testing.assert_allclose(relu["B"].ravel(), [0, 8, 40, 112, 240, 440, 728, 1120], rtol=1e-9, atol=1e-9)


def test_multi_input_flow_symmetries_and_single_input_consistency():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 4))
    net = effth.MLP("gelu", 3, c_w=1.983058257, c_b=0.1729223908)
    fl = ntk_flow(net, X, lambda_b=0.5, lambda_w=1.5)
    one = ntk_flow(net, X[:1], lambda_b=0.5, lambda_w=1.5)
    for k in ("Theta", "H1", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U"):
        full = fl[k][-1]
        np.testing.assert_allclose(full[(0,) * full.ndim], one[k][-1].ravel()[0], rtol=1e-7, atol=1e-10)
    B, F, T = fl["B"][-1], fl["F"][-1], fl["T"][-1]
    np.testing.assert_allclose(B, B.transpose(1, 0, 3, 2), rtol=1e-10)
    np.testing.assert_allclose(F, F.transpose(2, 3, 0, 1), rtol=1e-10)
    np.testing.assert_allclose(T, T.transpose(3, 2, 1, 0), rtol=1e-10)


# ----------------------------------------------------------------- learning rates, bad input
def test_learning_rate_prescriptions():
    lb, lw = learning_rates("scale-invariant", 4, 2.0, 3.0)
    np.testing.assert_allclose(lb, 0.5)
    np.testing.assert_allclose(lw, 0.75)
    lb, lw = learning_rates("k-star-zero", 5, 1.0, 1.0, p_perp=1.0)
    np.testing.assert_allclose(lb, 1 / np.arange(1, 6))
    np.testing.assert_allclose(lw, 1.0)
    with pytest.raises(DomainError):
        learning_rates("bogus", 3)
    # equivalence principle: with lambda ~ 1/L the ReLU NTK at the output is O(1) for any depth
    for L in (4, 16):
        lb, lw = learning_rates("scale-invariant", L)
        th = ntk_flow(K1=[[2.0]], Theta1=[[lb[0] + lw[0] * 1.0]], depth=L, activation="relu", c_w=2.0,
                      lambda_b=lb, lambda_w=lw, statistics=("Theta",))["Theta"][-1, 0, 0]
        assert th == pytest.approx(2.0, rel=1e-10)        # lambda_b + lambda_W A_2 K* with tilde = 1


def test_bad_input_is_reported():
    with pytest.raises(DomainError, match="kinked"):      # the ddNTKs of ReLU diverge (P, Q, D, A, F do not)
        ntk_flow(K1=[[2.0]], Theta1=[[2.0]], depth=3, activation="relu", c_w=2.0, statistics=("T",))
    with pytest.raises(DomainError, match="Theta1"):
        ntk_flow(K1=[[1.0]], depth=3, activation="tanh")
    with pytest.raises(DomainError):
        ntk_flow(K1=[[1.0, 0.0], [0.0, 1.0]], Theta1=[[1.0, 2.0], [2.0, 1.0]], depth=3, activation="tanh")
    with pytest.raises(DomainError):
        ntk_flow(K1=[[1.0]], Theta1=[[1.0]], depth=3, activation="tanh", lambda_w=-1.0)
    with pytest.raises(DomainError):
        derive_ntk("Z")
    with pytest.raises(DomainError):
        ntk_flow(K1=[[1.0]], Theta1=[[1.0]], depth=3, activation="tanh", statistics=("X",))


def test_latex_prints_every_recursion():
    for stat in ("Theta", "H1", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U"):
        tex = derive_ntk(stat).latex()
        assert tex.count("=") == 1 and r"\langle" in tex


# ----------------------------------------------------------------- multi-input: derived = printed
@pytest.mark.parametrize("act, cw, cb, N, nodes3, tol", [
    ("tanh", 1.2, 0.1, 2, 64, 5e-8),
    ("gelu", 1.983058257, 0.1729223908, 3, 128, 1e-6),
])
def test_multi_input_flow_equals_the_books_printed_recursions(act, cw, cb, N, nodes3, tol):
    """Independent NumPy implementation of (8.63), (8.77)-(8.97), (11.49) corrected, (11.52),
    (inf.172)-(inf.176) (tests/pdlt/_ntk_book.py), per-layer hyperparameters and widths."""
    from ._ntk_book import book_flow

    X = np.random.default_rng(5 + N).normal(size=(N, 4))
    lb, lw, rat = [0.7, 1.1, 0.5, 0.9], [1.3, 0.6, 1.4, 0.8], [1.0, 1.5, 0.7, 1.0]
    bk = book_flow(act, X, depth=4, c_w=cw, c_b=cb, lambda_b=lb, lambda_w=lw, ratios=rat, nodes3=nodes3)
    fl = ntk_flow(K1=bk["K"][0], Theta1=bk["Theta"][0], depth=4, activation=act, c_w=cw, c_b=cb,
                  lambda_b=lb, lambda_w=lw, ratios=rat[:3], rtol=1e-10)
    for k in ("K", "V", "Theta", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U"):
        for layer in (2, 4):
            ref = np.asarray(bk[k][layer - 1])
            np.testing.assert_allclose(fl[k][layer - 1], ref, rtol=0, atol=tol * np.abs(ref).max(),
                                       err_msg=f"{k} at layer {layer}")
