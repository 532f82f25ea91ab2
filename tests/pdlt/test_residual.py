"""Residual MLPs (PDLT app. B): derived recursions vs the book's (B.11), (B.24), (B.26), (B.29)
and vs simulated residual networks; the optimal aspect ratio (A.72)-(A.73), (B.36).

Corners: *derived* (``derive_initialization(..., residual=True)``, the one pipeline with skip
legs); *published* (``_book_residual.py``, the book's printed equations typed in NumPy, and the
book's numbers); *measured* (``simulate_ensemble`` of residual networks, which never imports the
theory).  The doubt the derivation settles: a skip connection with a non-odd activation gives an
O(1/n) third cumulant T, which (B.24) drops; the simulation sides with the derivation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.indices import alpha, c_b, c_w, ell
from effth.algebra.tensors import Kernel, KernelMatrix, ThreePointVertex
from effth.arch import MLP
from effth.errors import DomainError
from effth.pdlt import derive_initialization, mlp_flow
from effth.pdlt.derivation.pipeline import GAMMA, XI
from effth.pdlt.residual import (mutual_information, optimal_aspect_ratio, optimal_gamma,
                                 residual_branch_gain, residual_criticality, residual_nu)
from effth.simulation import simulate_ensemble

from ._book_residual import book_nu, book_V, book_V_single

K2 = np.array([[1.0, 0.4], [0.4, 0.8]])


# ------------------------------------------------------------------------ derived vs printed
@pytest.mark.parametrize("stat", ["K", "G1", "V"])
def test_gamma_zero_is_the_plain_mlp(stat):
    res = derive_initialization(stat, residual=True).expr
    plain = derive_initialization(stat).expr
    zero_T = {t: 0 for t in res.atoms(ThreePointVertex)}
    assert sp.expand(res.subs({GAMMA: 0, XI: 1}).xreplace(zero_T) - plain) == 0


def test_kernel_recursion_is_B11():
    a1, a2 = alpha(1), alpha(2)
    K = KernelMatrix(Kernel, ell)
    want = (XI**2 * (c_b(ell + 1) + c_w(ell + 1) * GaussianExpectation(sigma(a1) * sigma(a2), K))
            + GAMMA**2 * Kernel(a1, a2, ell))
    assert sp.expand(derive_initialization("K", residual=True).expr - want) == 0


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_vertex_equals_B24_where_T_vanishes(act):
    rng = np.random.default_rng(3)
    from ._book import random_vertex
    V = random_vertex(rng, 2, 0.2)
    got = derive_initialization("V", residual=True).evaluate(K2, V, activation=act, c_w=1.1,
                                                             gamma=0.6)
    want = book_V(K2, V, act, 1.1, 0.6)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("act", ["relu", "gelu", "tanh"])
def test_single_input_equals_B26_where_T_vanishes(act):
    got = derive_initialization("V", residual=True).evaluate(
        np.array([[0.7]]), np.full((1,) * 4, 0.3), activation=act, c_w=1.3, gamma=0.6)
    assert got.ravel()[0] == pytest.approx(book_V_single(0.7, 0.3, act, 1.3, 0.6), rel=1e-8)


def test_third_cumulant_vanishes_for_odd_activations_only():
    rec = derive_initialization("T", residual=True)
    K = np.array([[0.7]])
    assert abs(rec.evaluate(K, activation="tanh", c_w=1.0, gamma=0.5).ravel()[0]) < 1e-14
    # ReLU source: gamma C_W <sigma sigma z>, with <z^3 theta(z)> = 2 K^{3/2}/sqrt(2 pi) by hand
    src = 0.5 * 1.0 * 2 * 0.7**1.5 / math.sqrt(2 * math.pi)
    assert rec.evaluate(K, activation="relu", c_w=1.0, gamma=0.5).ravel()[0] == pytest.approx(src, rel=1e-12)


# ------------------------------------------------------------------------ criticality and nu
@pytest.mark.parametrize("act,crit0", [("relu", 2.0), ("tanh", 1.0), ("linear", 1.0)])
def test_residual_criticality_B20_B21(act, crit0):
    for g in (0.0, 0.5, 0.8):
        c = residual_criticality(act, g)
        assert c.c_w == pytest.approx((1 - g * g) * crit0, rel=1e-12)
    # the derived kernel map at C_W(gamma): K' = K (scale-invariant), dK'/dK -> 1 (K*=0)
    rec = derive_initialization("K", residual=True)
    c = residual_criticality(act, 0.5)
    Kp = lambda k: rec.evaluate(np.array([[k]]), activation=act, c_w=c.c_w, gamma=0.5).ravel()[0]
    k = 1.0 if act != "tanh" else 1e-6
    assert (Kp(k * 1.001) - Kp(k * 0.999)) / (0.002 * k) == pytest.approx(1.0, abs=2e-4)


def test_linear_nu_matches_B29_printed_values():
    """Linear networks: T = 0, V = (l-1) nu K^2 exactly; PDLT §B.3: 2, 1.875, 1.1808, 0.687800."""
    for g, printed in zip((0.0, 0.5, 0.8, 0.9), (2.0, 1.875, 1.1808, 0.6878)):
        nu = residual_nu("linear", g, depth=4)
        assert nu == pytest.approx(printed, abs=1e-4)
        assert nu == pytest.approx(book_nu(g, 1.0, 1.0), rel=1e-10)


def test_relu_nu_exceeds_B29_by_the_third_cumulant():
    """gamma = 0: the book's nu = 5.  gamma > 0: the derived T terms add, by hand from the single-input
    reductions (V' gains 4 chi_par C_W <sigma sigma'> T, T* = 4 gamma (1+gamma) K^{3/2}/sqrt(2 pi)),
    (16/pi) gamma (1+gamma)(1-gamma^2); the book's (B.29) value is (1-gamma^2)(5-gamma^2) = 3.5625 at 0.5.
    This is the cumulant closure (Mehler orders m <= 2); the exact history value is larger
    (tests/pdlt/test_residual_history.py)."""
    assert residual_nu("relu", 0.0, depth=4) == pytest.approx(5.0, rel=1e-10)
    assert residual_nu("relu", 0.0, depth=4, closure="cumulant") == pytest.approx(5.0, rel=1e-10)
    g = 0.5
    nu = residual_nu("relu", g, depth=40, closure="cumulant")
    assert book_nu(g) == pytest.approx(3.5625)
    assert nu == pytest.approx(book_nu(g) + 16 / math.pi * g * (1 + g) * (1 - g * g), rel=1e-9)


def test_leaky_relu_nu_printed_and_corrected():
    """Leaky ReLU (a_- = 0.1): at gamma = 0 the printed nu = 4.882364 (§A.4); at gamma = 0.5 the derived
    flow equals the corrected scale-invariant (B.29), re-derived by hand from the single-input
    reductions: (1-g^2)[(1-g^2)(3A4/A2^2 - 1) + 4g^2 + (4/pi) g (1+g) (a_+^2 - a_-^2)^2 / A2^2]."""
    from effth.activations import get_activation
    act = get_activation("leaky_relu", slope=0.1)
    assert residual_nu(act, 0.0, depth=4) == pytest.approx(4.882364, abs=1e-6)
    g, A2, A4 = 0.5, (1 + 0.01) / 2, (1 + 1e-4) / 2
    corrected = (1 - g * g) * ((1 - g * g) * (3 * A4 / A2**2 - 1) + 4 * g * g
                               + 4 / math.pi * g * (1 + g) * (1 - 0.01) ** 2 / A2**2)
    assert residual_nu(act, g, depth=40, closure="cumulant") == pytest.approx(corrected, rel=1e-9)


# ------------------------------------------------------------------------ measured
def _relu_layer3(n, networks, seed):
    net = MLP("relu", depth=4, widths=n, c_w=1.5, gamma=0.5)
    X = np.array([[1.0, 0.3, -0.5]])
    st = simulate_ensemble(net, X, networks=networks, seed=seed, method="conditional", layers=[3])
    return st, mlp_flow(net, X), X


def test_residual_relu_vertex_against_simulation_and_the_book():
    """V^{(3)} of residual ReLU networks (gamma = 0.5, critical C_W = 1.5): the measured V - V_derived
    falls like 1/n (fitted slope), the intercept of a c0 + c1/n fit is 0 within 4.5 SE; with the
    book's (B.26) (no T) or 0.9 x derived the intercept is many SE away."""
    widths = (16, 32, 64)
    meas, err = [], []
    for n in widths:
        st, flow, X = _relu_layer3(n, 150_000, 10 + n)
        meas.append(st.value("V", 3).ravel()[0])
        err.append(st.stderr("V", 3).ravel()[0])
    meas, err = np.array(meas), np.array(err)
    derived = flow["V"][2].ravel()[0]
    K1 = 1.5 * float((X @ X.T).ravel()[0]) / 3
    V2 = book_V_single(K1, 0.0, "relu", 1.5, 0.5)
    book = book_V_single(K1, V2, "relu", 1.5, 0.5)        # K stays K1 at criticality

    def intercept(theory):
        A = np.stack([np.ones(3), 1.0 / np.array(widths)], 1) / err[:, None]
        coef, *_ = np.linalg.lstsq(A, (meas - theory) / err, rcond=None)
        cov = np.linalg.inv(A.T @ A)
        return coef[0] / math.sqrt(cov[0, 0])

    assert abs(intercept(derived)) < 4.5
    assert abs(intercept(book)) > 10
    assert abs(intercept(0.9 * derived)) > 4.5
    slope = np.polyfit(np.log(widths), np.log(meas - derived), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.25)


def test_residual_relu_three_point_vertex_against_simulation():
    st, flow, _ = _relu_layer3(32, 150_000, 7)
    T, Te = 32 * st.value("kappa3_cross", 3).ravel()[0], 32 * st.stderr("kappa3_cross", 3).ravel()[0]
    assert abs(T - flow["T"][2].ravel()[0]) < 4.5 * Te
    assert abs(T - 0.9 * flow["T"][2].ravel()[0]) > 4.5 * Te


# ------------------------------------------------------------------------ aspect ratio
def test_optimal_aspect_ratio_book_table():
    """PDLT (A.73): r* for n_L = 2, 4, 10 at nu = 2/3, 2, 5; I* (A.74) at n_L = 2 is 1/1014."""
    for nL, row in ((2, (3 / 13, 1 / 13, 2 / 65)), (4, (3 / 16, 1 / 16, 1 / 40)), (10, (0.12, 0.04, 0.016))):
        for nu, r in zip((2 / 3, 2.0, 5.0), row):
            assert optimal_aspect_ratio(nu, n_out=nL) == pytest.approx(r, rel=1e-12)
    r = optimal_aspect_ratio(5.0, n_out=2)
    assert mutual_information(5.0 * r, n_out=2) == pytest.approx(1 / 1014, rel=1e-12)
    assert mutual_information(2 / 3 * 0.1, m1=1, m2=1) == pytest.approx(3.9506e-4, rel=1e-4)


def test_optimal_gamma_book_table_Kstar0():
    """PDLT §B.3, n_L = 2, K* = 0 class with the printed nu = (2/3)(1 - gamma^4) (B.35):
    r*(gamma) and gamma*(r)."""
    nu = lambda g: 2 / 3 * (1 - g**4)
    for g, r in zip((0.0, 0.5, 0.8, 0.9), (0.230769, 0.246154, 0.390869, 0.671036)):
        assert optimal_aspect_ratio(nu(g), n_out=2) == pytest.approx(r, abs=1e-6)
    for r, g in zip((0.5, 1.0, 5.0), (0.856621, 0.936514, 0.988256)):
        assert optimal_gamma(r, nu, n_out=2) == pytest.approx(g, abs=1e-6)
    assert optimal_gamma(0.1, nu, n_out=2) == 0.0      # below r*(0): no skip helps


def test_optimal_gamma_book_table_relu_printed_nu():
    """PDLT §B.3 ReLU numbers (n_L = 2) with the printed nu = (1 - gamma^2)(5 - gamma^2) of (B.29)."""
    for r, g in zip((0.05, 0.1, 1.0), (0.582882, 0.804118, 0.980766)):
        assert optimal_gamma(r, book_nu, n_out=2) == pytest.approx(g, abs=1e-6)


def test_branch_gain_B45_spec_values():
    """PDLT (B.45) positive root: 0.866025 and 0.587883 (§B.4 test values); and it preserves (B.44)."""
    assert residual_branch_gain(0.5, 1.0, 1.0) == pytest.approx(math.sqrt(0.75), rel=1e-12)
    xi = residual_branch_gain(0.5, 1.0, 2.0, 0.1)
    assert xi == pytest.approx(0.587883, abs=1e-6)
    assert 0.25 * 1.0 + 2 * 0.5 * xi * 0.1 + xi**2 * 2.0 == pytest.approx(1.0, rel=1e-12)


def test_branch_gain_is_redundant_for_an_mlp_block():
    """(B.6): xi only rescales C_W and C_b; the derived V with xi equals the one with xi = 1 and
    xi^2 C_W, xi^2 C_b (one input, T and V nonzero)."""
    rec = derive_initialization("V", residual=True)
    K, V, T = np.array([[0.7]]), np.full((1,) * 4, 0.3), np.full((1,) * 3, 0.2)
    a = rec.evaluate(K, V, T=T, activation="gelu", c_w=1.2, c_b=0.1, xi=0.8, gamma=0.6)
    b = rec.evaluate(K, V, T=T, activation="gelu", c_w=1.2 * 0.64, c_b=0.1 * 0.64, gamma=0.6)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_bad_input():
    with pytest.raises(DomainError, match="Cauchy"):
        residual_branch_gain(0.5, 1.0, 1.0, 2.0)
    with pytest.raises(DomainError, match="gamma"):
        residual_criticality("relu", 1.0)
    with pytest.raises(DomainError, match="class"):
        residual_criticality("step", 0.5)
    with pytest.raises(DomainError, match="nu"):
        optimal_aspect_ratio(0.0, n_out=2)
    with pytest.raises(DomainError, match="n_out"):
        optimal_aspect_ratio(5.0, n_out=2, m1=1, m2=1)
    with pytest.raises(DomainError, match="residual"):
        derive_initialization("V").evaluate(K2, gamma=0.5, activation="tanh")
    with pytest.raises(DomainError, match="T exists"):
        derive_initialization("T")
    with pytest.raises(DomainError, match="n_2 = n_1"):
        MLP("relu", depth=4, widths=[8, 16, 16], gamma=0.5)
    import effth as et
    resnet = MLP("relu", depth=4, widths=8, c_w=1.5, gamma=0.5)
    assert et.derive("T", net=resnet).residual
    with pytest.raises(DomainError, match="plain-MLP form"):
        et.derive("V", special="single-input", net=resnet)
    with pytest.raises(DomainError, match="plain MLP"):
        et.flow(resnet, np.ones((1, 2)))
    with pytest.raises(DomainError, match="first and the output"):
        MLP("relu", depth=3, widths=8, gamma=[0.5, 0.5, 0.0])


@pytest.mark.parametrize("method", ["conditional", pytest.param("weights", marks=pytest.mark.slow)])
def test_branch_gain_in_simulated_networks(method):
    """xi != 1 in the simulator, literal weights or conditional sampling: G of layer 3 (ReLU,
    gamma = 0.5, xi = 0.8, xi^2 C_W = 1.5) is the derived K + G1/n within 4.5 SE, K alone rejected."""
    net = MLP("relu", depth=4, widths=16, c_w=1.5 / 0.64, gamma=0.5, xi=0.8)
    X = np.array([[1.0, 0.3, -0.5]])
    st = simulate_ensemble(net, X, networks=200_000, seed=11, method=method, layers=[3])
    f = mlp_flow(net, X)
    G, Ge = st.value("G", 3).ravel()[0], st.stderr("G", 3).ravel()[0]
    K, G1 = f["K"][2].ravel()[0], f["G1"][2].ravel()[0]
    assert abs(G - K - G1 / 16) < 4.5 * Ge
    assert abs(G - K) > 4.5 * Ge


@pytest.mark.slow
@pytest.mark.parametrize("act, gamma", [("tanh", 0.5), ("gelu", 0.9)])
def test_residual_vertex_closure_is_the_truncated_mehler_series(opt_in_slow, act, gamma):
    """V at layer 3 (skip at layer 2, C_W = 1, K1 = 1): the derived value equals a hand-derived
    V3 whose history covariance Cov_J[sigma^2(z2), sigma^2(z1)] is cut at Mehler order 2, to 1e-7;
    the exact V3 is larger by more than 1% (tanh 1.5%: the p = 4 term, which (B.24) drops for odd
    sigma too; GELU 3.1%).  Simulation (docs/residual.md, GELU gamma = 0.9, n = 32-128, 300 000
    networks): intercept -0.3 SE from the exact V3, +7.5 SE from the derived one."""
    from ._residual_ntk_oracle import depth3_vertex

    net, x = MLP(act, depth=3, widths=32, gamma=gamma), np.array([[1.0]])
    got = float(mlp_flow(net, x, closure="cumulant")["V"][2].ravel()[0])
    assert abs(got - depth3_vertex(act, gamma, truncate=True)) < 1e-7 * got
    assert depth3_vertex(act, gamma) > 1.01 * got
    exact = float(mlp_flow(net, x)["V"][2].ravel()[0])          # closure="history", the default
    assert abs(exact - depth3_vertex(act, gamma)) < 1e-7 * exact
