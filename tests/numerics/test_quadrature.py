"""Quadrature kernels: reference values, exactness, singular kernels, properties."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effth.activations import get_activation
from effth.errors import ConvergenceError
from effth.numerics import gaussian_expectation
from effth.numerics.quadrature import quadrature_expectation

Q = dict(method="quadrature")

# seed §5.1 table: (activation, params, K, <s>, <s^2>, <s^4>, <s^2 (z^2 - K)>)
TABLE = [
    ("relu", {}, 1.0, 0.3989422804, 0.5, 1.5, 1.0),
    ("relu", {}, 0.5, 0.2820947918, 0.25, 0.375, 0.25),
    ("leaky_relu", {"slope": 0.1}, 1.0, 0.3590480524, 0.505, 1.50015, 1.01),
    ("perceptron", {}, 1.0, 0.5, 0.5, 0.5, 0.0),
    ("sigmoid", {}, 1.0, 0.5, 0.2933790359, 0.1315943131, 0.06239648396),
    ("tanh", {}, 1.0, 0.0, 0.3942944904, 0.2529918832, 0.3635953763),
    ("tanh", {}, 0.5, 0.0, 0.2736763079, 0.1397784092, 0.1623149980),
    ("sin", {}, 1.0, 0.0, 0.4323323584, 0.3073742912, 0.2706705665),
    ("softplus", {}, 1.0, 0.8060591833, 0.9212459089, 2.337752154, 0.9066039450),
    ("swish", {}, 1.0, 0.2066209641, 0.3557755198, 0.9191644113, 0.8343605183),
    ("gelu", {}, 1.0, 0.2820947918, 0.4252214826, 1.304679097, 0.9729604975),
    ("linear", {}, 1.0, 0.0, 1.0, 3.0, 2.0),
]


@pytest.mark.parametrize("name,params,K,m1,m2,m4,mz", TABLE)
def test_seed_table(name, params, K, m1, m2, m4, mz):
    act = get_activation(name, **params)
    s = (0, "sigma", 0)
    KK = [[K]]
    got = [gaussian_expectation([s], KK, act, **Q),
           gaussian_expectation([s, s], KK, act, **Q),
           gaussian_expectation([s] * 4, KK, act, **Q),
           gaussian_expectation([s, s, (0, "z", 2)], KK, act, **Q) - K * gaussian_expectation([s, s], KK, act, **Q)]
    for g, ref in zip(got, [m1, m2, m4, mz]):
        assert abs(float(g) - ref) <= 6e-10 * max(abs(ref), 1.0), (name, g, ref)


def test_sin_closed_forms_batch():
    K = np.array([[[1.0, 0.3], [0.3, 0.7]], [[2.0, -1.0], [-1.0, 1.5]], [[0.4, 0.4], [0.4, 0.4]]])
    v = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K, "sin", **Q)
    ref = np.exp(-(K[:, 0, 0] + K[:, 1, 1]) / 2) * np.sinh(K[:, 0, 1])
    np.testing.assert_allclose(v, ref, rtol=1e-10)
    k1 = np.array([0.3, 1.0, 2.0])[:, None, None]
    v4 = gaussian_expectation([(0, "sigma", 0)] * 4, k1, "sin", **Q)
    np.testing.assert_allclose(v4, (3 - 4 * np.exp(-2 * k1[:, 0, 0]) + np.exp(-8 * k1[:, 0, 0])) / 8, rtol=1e-10)


def _relu_arccos(K):
    k11, k22, k12 = K[..., 0, 0], K[..., 1, 1], K[..., 0, 1]
    c = np.clip(k12 / np.sqrt(k11 * k22), -1, 1)
    th = np.arccos(c)
    s1 = np.sqrt(k11 * k22) / (2 * np.pi) * (np.sin(th) + (np.pi - th) * c)
    s2 = k11 * k22 / (2 * np.pi) * (3 * np.sin(th) * c + (np.pi - th) * (1 + 2 * c * c))
    return s1, s2, th


def test_relu_and_step_two_slot_kinked_path():
    K = np.array([[[1.0, 0.3], [0.3, 0.8]], [[2.0, -1.2], [-1.2, 1.0]], [[1.0, 0.999], [0.999, 1.0]]])
    s1, s2, th = _relu_arccos(K)
    f1 = [(0, "sigma", 0), (1, "sigma", 0)]
    f2 = f1 + f1
    np.testing.assert_allclose(gaussian_expectation(f1, K, "relu", **Q), s1, rtol=1e-10)
    np.testing.assert_allclose(gaussian_expectation(f2, K, "relu", **Q), s2, rtol=1e-10)
    np.testing.assert_allclose(gaussian_expectation(f1, K, "step", **Q), (np.pi - th) / (2 * np.pi), rtol=1e-10)


def test_kinked_with_mean_and_z_powers():
    mu, K = 0.7, 0.5
    s = math.sqrt(K)
    phi = math.exp(-0.5 * (mu / s) ** 2) / math.sqrt(2 * math.pi)
    Phi = 0.5 * (1 + math.erf(mu / s / math.sqrt(2)))
    ref = mu * Phi + s * phi
    v = gaussian_expectation([(0, "sigma", 0)], [[K]], "relu", mean=[mu], **Q)
    assert float(v) == pytest.approx(ref, rel=1e-11)
    v2 = gaussian_expectation([(0, "sigma", 1), (0, "z", 1)], [[K]], "relu", **Q)   # E[Theta(z) z]
    assert float(v2) == pytest.approx(math.sqrt(K / (2 * math.pi)), rel=1e-11)


def test_vanishing_kernel_tanh_fixed_point():
    for eps in (1e-8, 1e-12, 1e-16):
        v = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[eps]], "tanh", **Q)
        assert np.isfinite(v) and float(v) == pytest.approx(eps * (1 - 2 * eps), rel=1e-9)
        K2 = eps * np.array([[1.0, 0.5], [0.5, 1.0]])
        v2 = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K2, "tanh", **Q)
        assert float(v2) == pytest.approx(0.5 * eps, rel=1e-6)
        v3 = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K2, "relu", **Q)
        assert float(v3) == pytest.approx(float(_relu_arccos(K2)[0]), rel=1e-9)
    assert float(gaussian_expectation([(0, "sigma", 0)] * 2, [[0.0]], "tanh", **Q)) == 0.0
    assert float(gaussian_expectation([(0, "sigma", 0)] * 2, np.zeros((2, 2))[:1, :1], "relu", **Q)) == 0.0
    assert float(gaussian_expectation([(0, "sigma", 1)], [[0.0]], "tanh", **Q)) == 1.0


@pytest.mark.parametrize("name", ["tanh", "gelu", "relu", "step"])
def test_duplicated_samples_equal_merged_atom(name):
    A = np.array([[1.0, 0.0], [0.4, 0.8], [1.0, 0.0]])     # z2 == z0
    K3 = A @ A.T
    v3 = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 0)], K3, name, **Q)
    v2 = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0), (1, "sigma", 0)], K3[:2, :2], name, **Q)
    assert float(v3) == pytest.approx(float(v2), rel=1e-10, abs=1e-13)
    Kdup = np.ones((2, 2)) * 1.3                              # fully duplicated 2-slot
    v = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], Kdup, name, **Q)
    w = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[1.3]], name, **Q)
    assert float(v) == pytest.approx(float(w), rel=1e-10)


# ------------------------------------------------------------- polynomials
def _wick(labels: tuple, K) -> Fraction:
    @lru_cache(maxsize=None)
    def rec(ls: tuple) -> Fraction:
        if not ls:
            return Fraction(1)
        if len(ls) % 2:
            return Fraction(0)
        a, rest = ls[0], ls[1:]
        return sum((K[a][rest[i]] * rec(rest[:i] + rest[i + 1:]) for i in range(len(rest))), Fraction(0))
    return rec(tuple(sorted(labels)))


def _poly_terms(coeffs, order):
    c = [Fraction(x) for x in coeffs]
    for _ in range(order):
        c = [c[i] * i for i in range(1, len(c))] or [Fraction(0)]
    return [(ck, k) for k, ck in enumerate(c) if ck != 0]


def _wick_expectation(factors, coeffs, K):
    per = []
    for s, kind, o in factors:
        per.append([(Fraction(1), [s] * o)] if kind == "z" else [(cf, [s] * p) for cf, p in _poly_terms(coeffs, o)])
    tot = Fraction(0)
    for combo in itertools.product(*per):
        cf = Fraction(1)
        labels: list[int] = []
        for c, ls in combo:
            cf *= c
            labels += ls
        tot += cf * _wick(tuple(labels), K)
    return tot


@pytest.mark.parametrize("factors", [
    [(0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 0)],
    [(0, "sigma", 0), (0, "sigma", 1), (1, "sigma", 0), (2, "z", 2)],
    [(0, "sigma", 0), (1, "sigma", 2), (2, "sigma", 0), (3, "sigma", 0)],
    [(0, "sigma", 0), (0, "sigma", 0), (1, "sigma", 0), (1, "z", 1)],
])
def test_polynomial_exact_vs_wick(factors):
    coeffs = (Fraction(1, 2), Fraction(-1), Fraction(1, 3), Fraction(2, 5))
    Kq = [[Fraction(2), Fraction(1, 2), Fraction(1, 3), Fraction(-1, 5)],
          [Fraction(1, 2), Fraction(1), Fraction(1, 4), Fraction(1, 7)],
          [Fraction(1, 3), Fraction(1, 4), Fraction(3, 2), Fraction(1, 6)],
          [Fraction(-1, 5), Fraction(1, 7), Fraction(1, 6), Fraction(1)]]
    k = 1 + max(s for s, _, _ in factors)
    Kq = [row[:k] for row in Kq[:k]]
    ref = float(_wick_expectation(factors, coeffs, Kq))
    act = get_activation("polynomial", coeffs=tuple(float(c) for c in coeffs))
    v = gaussian_expectation(factors, np.array(Kq, dtype=float), act, **Q)
    assert float(v) == pytest.approx(ref, rel=1e-13, abs=1e-13)


# ------------------------------------------------------------- properties
def _psd(draw_vals, k, scale):
    M = np.array(draw_vals, dtype=float).reshape(k, k)
    return scale * (M @ M.T / k) + 0.15 * np.eye(k)


SMOOTH = ["tanh", "gelu", "softplus", "erf", "sin", "swish", "sigmoid"]


@settings(derandomize=True, max_examples=12, deadline=None)
@given(k=st.integers(1, 3), vals=st.lists(st.floats(-1, 1), min_size=9, max_size=9),
       name=st.sampled_from(SMOOTH), b=st.integers(0, 2))
def test_stein_identity(k, vals, name, b):
    b = b % k
    K = _psd(vals[:k * k], k, 1.2)
    F = [(s, "sigma", 0) for s in range(k)]
    lhs = gaussian_expectation(F + [(b, "z", 1)], K, name, **Q)
    rhs = 0.0
    for c in range(k):
        dF = [(s, "sigma", 1 if s == c else 0) for s in range(k)]
        rhs += K[b, c] * gaussian_expectation(dF, K, name, **Q)
    scale = float(gaussian_expectation([(s, "sigma", 0) for s in range(k)] * 2, K, name, **Q)) ** 0.5
    assert abs(float(lhs) - float(rhs)) <= 1e-9 * max(abs(float(lhs)), scale * math.sqrt(K[b, b]))


@settings(derandomize=True, max_examples=10, deadline=None)
@given(vals=st.lists(st.floats(-1, 1), min_size=9, max_size=9), name=st.sampled_from(SMOOTH + ["relu"]),
       perm=st.permutations([0, 1, 2]))
def test_permutation_symmetry(vals, name, perm):
    K = _psd(vals, 3, 1.0)
    F = [(0, "sigma", 0), (1, "sigma", 1), (2, "sigma", 0), (2, "z", 1)]
    v = gaussian_expectation(F, K, name, **Q)
    inv = np.argsort(perm)                    # new slot i is old slot perm[i]
    Fp = [(int(inv[s]), kd, o) for s, kd, o in F]
    Kp = K[np.ix_(perm, perm)]
    vp = gaussian_expectation(Fp, Kp, name, **Q)
    assert float(vp) == pytest.approx(float(v), rel=1e-10, abs=1e-13)


@settings(derandomize=True, max_examples=10, deadline=None)
@given(vals=st.lists(st.floats(-1, 1), min_size=4, max_size=4), name=st.sampled_from(SMOOTH + ["relu"]))
def test_rank_deficient_consistency(vals, name):
    K2 = _psd(vals, 2, 1.0)
    J = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # slot 2 duplicates slot 1
    K3 = J @ K2 @ J.T
    v3 = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 1)], K3, name, **Q)
    v2 = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0), (1, "sigma", 1)], K2, name, **Q)
    assert float(v3) == pytest.approx(float(v2), rel=1e-10, abs=1e-13)


# ------------------------------------------------------------- mechanics
def test_batch_shapes_and_chunking():
    rng = np.random.default_rng(3)
    k = rng.uniform(0.1, 2.0, size=(30, 100))
    K = k[..., None, None]
    v = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], K, "tanh", **Q)
    assert v.shape == (30, 100)
    loop = [float(gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[x]], "tanh", **Q))
            for x in k.ravel()[:5]]
    np.testing.assert_allclose(v.ravel()[:5], loop, rtol=1e-11)
    K2 = np.broadcast_to(np.array([[1.0, 0.2], [0.2, 0.5]]), (2, 3, 2, 2))
    assert gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K2, "relu", **Q).shape == (2, 3)


def test_convergence_error_and_info():
    act = get_activation("tanh")
    with pytest.raises(ConvergenceError, match="rtol"):
        quadrature_expectation([(0, "sigma", 0)] * 2, np.array([[9.0]]), act, rtol=1e-13, max_nodes=20)
    v, e, n = quadrature_expectation([(0, "sigma", 0)] * 2, np.array([[1.0]]), act, return_info=True)
    assert e <= 1e-10 * v and n > 10
    v, e = gaussian_expectation([(0, "sigma", 0)] * 2, [[1.0]], "tanh", return_error=True, **Q)
    assert 0 <= float(e) <= 1e-10


def test_loose_rtol_uses_fewer_nodes():
    act = get_activation("tanh")
    K = np.array([[1.0, 0.3], [0.3, 1.2]])
    F = [(0, "sigma", 0), (1, "sigma", 0)]
    v1, _, n1 = quadrature_expectation(F, K, act, rtol=1e-6, return_info=True)
    v2, _, n2 = quadrature_expectation(F, K, act, rtol=1e-12, return_info=True)
    assert n1 < n2 and abs(v1 - v2) <= 1e-6 * abs(v2)


def test_anisotropic_kernel_keeps_its_small_direction():
    """Slot scales 1e-8 and 1e8 with correlation 0.25: rank decisions are made on the correlation
    matrix (once the small eigenvalue was dropped relative to lambda_max: ReLU gave 0.125)."""
    K = np.array([[1e-8, 0.25], [0.25, 1e8]])
    for factors in ([(0, "sigma", 0), (1, "sigma", 0)], [(0, "sigma", 1), (1, "sigma", 1)]):
        for act in ("relu", "step"):
            q = float(gaussian_expectation(factors, K, act, method="quadrature"))
            c = float(gaussian_expectation(factors, K, act, method="closed"))
            assert q == pytest.approx(c, rel=1e-10), (act, factors)


@pytest.mark.parametrize("eps", [1e-6, 1e-9, 1e-12])
def test_nearly_duplicated_inputs_with_kinks(eps):
    """rho = 1 - eps: the orthant probability has infinite slope at rho = 1, so a missed inner
    feature of width sqrt(eps) once cost 2e-7; graded sub-intervals resolve it."""
    K = np.array([[1.0, 1.0 - eps], [1.0 - eps, 1.0]])
    for factors in ([(0, "sigma", 1), (1, "sigma", 1)], [(0, "sigma", 0), (1, "sigma", 0)]):
        q = float(gaussian_expectation(factors, K, "relu", method="quadrature"))
        c = float(gaussian_expectation(factors, K, "relu", method="closed"))
        assert abs(q - c) < 1e-10, (eps, factors, q, c)
