"""Property-based checks of the public entry points (hypothesis, small example counts).

Symmetries the theory must have whatever the input: swap symmetries of K, G¹ and V, the
permutation equivariance of every result under a relabelling of the inputs, evenness of the DMFT
in γ₀, closed forms equal to quadrature, the kernel recursion equal to an independent one written
here (PDLT (4.118) with a trapezoidal Gaussian rule / the arc-cosine kernel), and the homogeneity of
the kernel of positively homogeneous activations. No reference number comes from effth.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effth as et

SMALL = settings(max_examples=6, deadline=None)
TINY = settings(max_examples=3, deadline=None)

seeds = st.integers(0, 2**32 - 1)


def psd(seed: int, n: int, lo: float = 0.3, hi: float = 1.8) -> np.ndarray:
    """A random n x n covariance with eigenvalues in [lo, hi]."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    out = (q * rng.uniform(lo, hi, size=n)) @ q.T
    return 0.5 * (out + out.T)


def permute(a: np.ndarray, p: np.ndarray, axes: tuple[int, ...] | None = None) -> np.ndarray:
    """``a`` with the sample permutation ``p`` applied along ``axes`` (default: every axis)."""
    for ax in range(a.ndim) if axes is None else axes:
        a = np.take(a, p, axis=ax)
    return a


def close(a, b, rtol: float) -> None:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(float(np.max(np.abs(b))), 1e-300)
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale)


def v_pair_symmetric(V: np.ndarray, rtol: float) -> None:
    """V_{(a1a2)(a3a4)} = V_{(a2a1)(a3a4)} = V_{(a1a2)(a4a3)} = V_{(a3a4)(a1a2)} (8 elements)."""
    for perm in ((1, 0, 2, 3), (0, 1, 3, 2), (2, 3, 0, 1), (3, 2, 1, 0), (2, 3, 1, 0), (3, 2, 0, 1),
                 (1, 0, 3, 2)):
        close(np.transpose(V, perm), V, rtol)


# ----------------------------------------------------------------------------- flow symmetries
@SMALL
@given(seed=seeds, perm=st.permutations(range(3)), act=st.sampled_from(["tanh", "relu", "gelu", "erf"]),
       depth=st.integers(2, 4), c_b=st.sampled_from([0.0, 0.2]))
def test_flow_swap_symmetries_and_permutations(seed, perm, act, depth, c_b):
    K1 = psd(seed, 3)
    kw = dict(depth=depth, activation=act, c_w=1.3, c_b=c_b)
    fl = et.flow(K1=K1, **kw)
    p = np.array(perm)
    flp = et.flow(K1=permute(K1, p), **kw)
    assert tuple(fl.layers) == tuple(range(1, depth + 1))
    for layer in fl.layers:
        K, G1, V = (fl.value(n, layer=layer) for n in ("K", "G1", "V"))
        close(K, K.T, 1e-12)
        close(G1, G1.T, 1e-12)
        v_pair_symmetric(V, 1e-10)
        for name, a in (("K", K), ("G1", G1), ("V", V)):
            close(flp.value(name, layer=layer), permute(a, p), 1e-8)


@TINY
@given(seed=seeds, perm=st.permutations(range(3)))
def test_ntk_flow_theta_symmetric_and_permutes(seed, perm):
    K1, Th1 = psd(seed, 3), psd(seed + 1, 3)
    p = np.array(perm)
    kw = dict(depth=3, activation="tanh", c_w=1.0, c_b=0.1)
    nf = et.ntk_flow(K1=K1, Theta1=Th1, **kw)
    nfp = et.ntk_flow(K1=permute(K1, p), Theta1=permute(Th1, p), **kw)
    for layer in nf.layers:
        Th = nf.value("Theta", layer=layer)
        close(Th, Th.T, 1e-12)
        close(nfp.value("Theta", layer=layer), permute(Th, p), 1e-8)
        for name in ("A", "B", "D", "F"):
            close(nfp.value(name, layer=layer), permute(nf.value(name, layer=layer), p), 1e-8)


@SMALL
@given(seed=seeds, perm=st.permutations(range(4)), act=st.sampled_from(["tanh", "relu"]))
def test_simulate_ensemble_permutes_with_the_same_seed(seed, perm, act):
    X = np.random.default_rng(seed).standard_normal((4, 3))
    p = np.array(perm)
    net = et.MLP(act, depth=3, widths=6, c_w=1.5, c_b=0.1)
    a = et.simulate_ensemble(net, X, networks=30, seed=seed)
    b = et.simulate_ensemble(net, X[p], networks=30, seed=seed)
    for layer in (1, 2, 3):
        for name in ("G", "V"):
            close(b.value(name, layer=layer), permute(a.value(name, layer=layer), p), 1e-10)
            close(b.stderr(name, layer=layer), permute(a.stderr(name, layer=layer), p), 1e-8)


@SMALL
@given(seed=seeds, perm=st.permutations(range(3)), hidden=st.integers(1, 3))
def test_solve_deep_linear_permutes(seed, perm, hidden):
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((3, 4)), rng.standard_normal(3)
    p = np.array(perm)
    kw = dict(hidden_layers=hidden, gamma0=0.8, eta=0.05, steps=6)
    a = et.dmft.solve_deep_linear(X, y, **kw)
    b = et.dmft.solve_deep_linear(X[p], y[p], **kw)
    close(b.value("f"), permute(a.value("f"), p, axes=(1,)), 1e-10)
    for layer in a.layers:
        close(b.value("phi", layer=layer), permute(a.value("phi", layer=layer), p, axes=(1, 3)), 1e-10)


# ----------------------------------------------------------------------------- evenness in gamma0
@SMALL
@given(seed=seeds, g=st.floats(0.05, 1.5), hidden=st.integers(1, 3))
def test_deep_linear_dmft_is_even_in_gamma0(seed, g, hidden):
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((3, 4)), rng.standard_normal(3)
    kw = dict(hidden_layers=hidden, eta=0.1, steps=6)
    a = et.dmft.solve_deep_linear(X, y, gamma0=g, **kw)
    b = et.dmft.solve_deep_linear(X, y, gamma0=-g, **kw)
    close(b.f, a.f, 1e-10)
    close(b.phi, a.phi, 1e-10)
    close(b.g, a.g, 1e-10)


@TINY
@given(seed=seeds, g=st.floats(0.1, 1.0), act=st.sampled_from(["tanh", "erf", "gelu"]))
def test_two_layer_dmft_is_even_in_gamma0(seed, g, act):
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((2, 4)), rng.standard_normal(2)
    # evenness holds for any symmetric rule in r: the default rule without its accuracy check
    kw = dict(eta=0.1, steps=5, activation=act, quad_tol=None)
    a = et.dmft.solve_two_layer(X, y, gamma0=g, **kw)
    b = et.dmft.solve_two_layer(X, y, gamma0=-g, **kw)
    close(b.f, a.f, 1e-10)
    close(b.phi, a.phi, 1e-10)


@TINY
@given(seed=seeds, hidden=st.integers(1, 3))
def test_gamma0_series_odd_coefficients_vanish(seed, hidden):
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((3, 4)), rng.standard_normal(3)
    ser = et.dmft.gamma0_series(X, y, hidden_layers=hidden, eta=0.1, steps=6, order=4)
    assert ser.odd_residual == 0.0 or abs(ser.odd_residual) < 1e-12
    for k in (1, 3):
        assert np.max(np.abs(ser.coefficient(k, "f"))) < 1e-14
        assert np.max(np.abs(ser.coefficient(k, "ntk"))) < 1e-14
    for g in (0.3, 0.9):
        close(ser.evaluate(-g, 4, "f"), ser.evaluate(g, 4, "f"), 1e-13)


def test_gamma0_series_two_layer_tanh_odd_orders_vanish():
    K, y = np.array([[1.2]]), np.array([1.0])
    ser = et.dmft.gamma0_series(kernel=K, y=y, hidden_layers=1, eta=0.1, steps=4, order=2, activation="tanh",
                                nodes=12)
    assert abs(ser.odd_residual) < 1e-12
    assert np.max(np.abs(ser.coefficient(1, "f"))) < 1e-12
    close(ser.evaluate(-0.4, 2, "f"), ser.evaluate(0.4, 2, "f"), 1e-13)


# ----------------------------------------------------------------------------- closed form = quadrature
ATOMS = [
    [(0, "sigma", 0), (1, "sigma", 0)],
    [(0, "sigma", 1), (1, "sigma", 1)],
    [(0, "sigma", 0), (0, "sigma", 0)],
    [(0, "sigma", 0), (1, "z", 1)],
    [(0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 0)],
    [(0, "sigma", 0), (0, "sigma", 0), (1, "sigma", 0), (1, "sigma", 0)],
]
CLOSED_ACTS = ["relu", "leaky_relu", "abs", "erf", "gelu", "linear", "sin", "cos", "step"]


CLOSED_PAIRS = [(act, atom) for act in CLOSED_ACTS for atom in ATOMS
                if et.has_closed_form(et.get_activation(act), atom)]


def test_closed_pairs_cover_the_families():
    assert {act for act, _ in CLOSED_PAIRS} == set(CLOSED_ACTS)
    assert len(CLOSED_PAIRS) >= 35


@settings(max_examples=30, deadline=None)
@given(seed=seeds, pair=st.sampled_from(CLOSED_PAIRS))
def test_closed_form_equals_quadrature(seed, pair):
    act, atom = pair
    k = 1 + max(s for s, _, _ in atom)
    K = psd(seed, k)
    closed = float(et.gaussian_expectation(atom, K, act, method="closed"))
    quad = float(et.gaussian_expectation(atom, K, act, method="quadrature"))
    assert closed == pytest.approx(quad, rel=1e-8, abs=1e-12)


# ----------------------------------------------------------------------------- an independent recursion
# The standard normal on a trapezoidal grid: for an integrand analytic in a strip |Im u| < d the
# error is O(exp(-2 pi d / h)); tanh(sqrt(K) u) has d = pi / (2 sqrt(K)), so h = 0.05 gives ~1e-14
# for K <= 4 (120-node Gauss-Hermite, numpy.polynomial.hermite_e.hermegauss, is only good to 1e-8
# at K = 2.4: tanh's poles near the real axis slow it down).
_H = 0.05
_U = np.arange(-11.0, 11.0 + _H / 2, _H)
_W = _H * np.exp(-_U ** 2 / 2) / np.sqrt(2 * np.pi)


def trapezoid_two_point(f, K: np.ndarray) -> np.ndarray:
    """<f(z_a) f(z_b)> for z ~ N(0, K), every pair (a, b), by the 2-d trapezoidal rule on blocks."""
    N = K.shape[0]
    out = np.empty((N, N))
    u, v = np.meshgrid(_U, _U, indexing="ij")
    w = np.outer(_W, _W)
    for a in range(N):
        out[a, a] = np.sum(_W * f(np.sqrt(K[a, a]) * _U) ** 2)
        for b in range(a + 1, N):
            kaa, kab, kbb = K[a, a], K[a, b], K[b, b]
            za = np.sqrt(kaa) * u                              # Cholesky of the 2x2 block
            zb = kab / np.sqrt(kaa) * u + np.sqrt(max(kbb - kab ** 2 / kaa, 0.0)) * v
            out[a, b] = out[b, a] = np.sum(w * f(za) * f(zb))
    return out


def arccos_relu(K: np.ndarray) -> np.ndarray:
    """<relu(z_a) relu(z_b)> = sqrt(K_aa K_bb) (sin t + (pi - t) cos t) / (2 pi) (Cho & Saul 2009)."""
    d = np.sqrt(np.diag(K))
    c = np.clip(K / np.outer(d, d), -1.0, 1.0)
    t = np.arccos(c)
    return np.outer(d, d) * (np.sin(t) + (np.pi - t) * c) / (2 * np.pi)


def kernel_recursion(K1: np.ndarray, depth: int, two_point, c_w: float, c_b: float) -> list[np.ndarray]:
    """K^{(l+1)} = C_b + C_W <sigma sigma>_{K^{(l)}}, PDLT (4.118); returns K^{(1)}..K^{(L)}."""
    Ks = [K1]
    for _ in range(depth - 1):
        Ks.append(c_b + c_w * two_point(Ks[-1]))
    return Ks


@SMALL
@given(seed=seeds, act=st.sampled_from(["tanh", "relu"]), depth=st.integers(2, 6),
       c_w=st.floats(0.5, 2.5), c_b=st.floats(0.0, 0.5))
def test_flow_kernel_equals_independent_recursion(seed, act, depth, c_w, c_b):
    K1 = psd(seed, 3)
    two_point = arccos_relu if act == "relu" else (lambda K: trapezoid_two_point(np.tanh, K))
    ref = kernel_recursion(K1, depth, two_point, c_w, c_b)
    fl = et.flow(K1=K1, depth=depth, activation=act, c_w=c_w, c_b=c_b)
    for layer, K in zip(range(1, depth + 1), ref):
        close(fl.value("K", layer=layer), K, 1e-8)


@SMALL
@given(seed=seeds, c_w=st.floats(0.5, 2.0), c_b=st.floats(0.0, 0.5))
def test_first_layer_kernel_from_inputs(seed, c_w, c_b):
    """K^{(1)} = C_b + C_W x.x/n_0 (PDLT (4.31))."""
    X = np.random.default_rng(seed).standard_normal((3, 5))
    fl = et.flow(et.MLP("tanh", depth=2, widths=10, c_w=c_w, c_b=c_b), X)
    close(fl.value("K", layer=1), c_b + c_w * X @ X.T / 5, 1e-12)
    close(fl.value("K", layer=2), c_b + c_w * trapezoid_two_point(np.tanh, c_b + c_w * X @ X.T / 5), 1e-8)


# ----------------------------------------------------------------------------- homogeneity
@SMALL
@given(seed=seeds, act=st.sampled_from(["relu", "linear", "leaky_relu"]), depth=st.integers(2, 4),
       scale=st.floats(1e-3, 1e3))
def test_homogeneous_activation_kernel_scales_linearly(seed, act, depth, scale):
    K1 = psd(seed, 3)
    kw = dict(depth=depth, activation=act, c_w=1.7, c_b=0.0)
    a = et.flow(K1=K1, **kw)
    b = et.flow(K1=scale * K1, **kw)
    for layer in a.layers:
        close(b.value("K", layer=layer), scale * a.value("K", layer=layer), 1e-9)
        close(b.value("V", layer=layer), scale ** 2 * a.value("V", layer=layer), 1e-8)
        if layer > 2:
            close(b.value("G1", layer=layer), scale * a.value("G1", layer=layer), 1e-8)


@SMALL
@given(seed=seeds, scale=st.floats(0.1, 10.0))
def test_homogeneous_kernel_scales_with_input_scale(seed, scale):
    X = np.random.default_rng(seed).standard_normal((3, 4))
    net = et.MLP("relu", depth=3, widths=10, c_w=2.0, c_b=0.0)
    a, b = et.flow(net, X), et.flow(net, scale * X)
    for layer in a.layers:
        close(b.value("K", layer=layer), scale ** 2 * a.value("K", layer=layer), 1e-9)
