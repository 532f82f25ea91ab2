"""The quadrivariate orthant probability (Plackett's reduction to 1-D integrals) against
independent references: exact values (equicorrelation 1/2, block-diagonal products, duplicated
and antipodal pairs, zero variances), a 30-digit adaptive integration of the derivative along
the path, and Monte Carlo."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from effth.numerics._closed._orthant import orthant3_probability, orthant4_probability


def _p2(r):
    return 0.25 + math.asin(r) / (2 * math.pi)


def _corr(X):
    K = X @ X.T
    d = np.sqrt(np.diag(K))
    return K / np.outer(d, d)


def _path_reference(R, dps=30):
    """P(R) = 1/16 + int_0^1 sum_{i<j} rho_ij phi_2(0, 0; t rho_ij) P(w_k, w_l > 0 | w_i = w_j = 0)
    dt along R(t) = I + t (R - I), by mpmath's adaptive tanh-sinh rule in t (the conditional
    bivariate probability from a 30-digit Schur complement, not from the closed N_kl)."""
    mp.mp.dps = dps
    R = mp.matrix(R.tolist())
    tot = mp.mpf(1) / 16
    for i, j in ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)):
        k, l = (m for m in range(4) if m not in (i, j))

        def f(t, i=i, j=j, k=k, l=l):
            Rt = mp.matrix(4, 4)
            for p in range(4):
                for q in range(4):
                    Rt[p, q] = 1 if p == q else t * R[p, q]
            A = mp.matrix([[Rt[i, i], Rt[i, j]], [Rt[j, i], Rt[j, j]]])
            C = mp.matrix([[Rt[k, i], Rt[k, j]], [Rt[l, i], Rt[l, j]]])
            Sc = mp.matrix([[Rt[k, k], Rt[k, l]], [Rt[l, k], Rt[l, l]]]) - C * mp.inverse(A) * C.T
            # a rank-deficient float R is PSD only to rounding: clamp the Schur complement
            v = max(Sc[0, 0] * Sc[1, 1], mp.mpf(0))
            rc = max(-1, min(1, Sc[0, 1] / mp.sqrt(v))) if v > 0 else mp.sign(Sc[0, 1])
            dens = 1 / (2 * mp.pi * mp.sqrt(1 - (t * R[i, j]) ** 2))
            return R[i, j] * dens * (mp.mpf(1) / 4 + mp.asin(rc) / (2 * mp.pi))

        tot += mp.quad(f, [0, 1])
    return float(tot)


def test_equicorrelation_half_is_one_fifth():
    R = np.full((4, 4), 0.5)
    np.fill_diagonal(R, 1.0)
    assert abs(orthant4_probability(R) - 0.2) < 1e-15
    # a wrong reduction (Sheppard's three-variable form carried over, no pair integrals) misses
    naive = 1 / 16 + 6 * math.asin(0.5) / (8 * math.pi)
    assert abs(naive - 0.2) > 1e-2


def test_block_diagonal_is_a_product():
    R = np.eye(4)
    R[0, 1] = R[1, 0] = 0.7
    R[2, 3] = R[3, 2] = -0.4
    S = R * np.outer([1.0, 2.0, 0.5, 3.0], [1.0, 2.0, 0.5, 3.0])
    assert abs(orthant4_probability(S) - _p2(0.7) * _p2(-0.4)) < 1e-15


def test_degenerate_limits():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4, 5))
    X[1] = X[0]
    K = X @ X.T
    three = K[np.ix_([0, 2, 3], [0, 2, 3])]
    assert abs(orthant4_probability(K) - orthant3_probability(three)) < 1e-15
    X[1] = -X[0]
    assert orthant4_probability(X @ X.T) == 0.0
    X = rng.normal(size=(4, 5))
    X[2] = 0.0
    K = X @ X.T
    assert abs(orthant4_probability(K) - 0.5 * orthant3_probability(K[np.ix_([0, 1, 3], [0, 1, 3])])) < 1e-15
    # the regular simplex: w_1 + ... + w_4 = 0, so the orthant is empty
    R = np.full((4, 4), -1 / 3)
    np.fill_diagonal(R, 1.0)
    assert abs(orthant4_probability(R)) < 1e-14


@pytest.mark.parametrize("dim,dup", [(6, 0.0), (3, 0.0), (2, 0.0), (5, 1e-6), (3, 1e-4)])
def test_against_adaptive_path_integral(dim, dup):
    """Full rank, rank 3, rank 2 and nearly duplicated samples. For the near duplicates the
    tolerance is the conditioning of P in the float correlation: dP/drho ~ 1/(2 pi sqrt(1-rho^2))
    times rounding 2e-16."""
    rng = np.random.default_rng(dim + int(1e7 * dup))
    X = rng.normal(size=(4, dim))
    if dup:
        X[1] = X[0] + dup * rng.normal(size=dim)
    R = _corr(X)
    ref = _path_reference(R)
    tol = 1e-15 + 4e-16 / math.sqrt(max(1 - R[0, 1] ** 2, 1e-300)) / (2 * math.pi) * 10
    assert abs(orthant4_probability(R) - ref) < tol


def test_near_duplicate_continuity():
    """As two samples merge the probability tends to the three-variable one, linearly."""
    rng = np.random.default_rng(3)
    X0, e = rng.normal(size=(4, 5)), rng.normal(size=5)
    three = None
    gaps = []
    for dl in (1e-2, 1e-3, 1e-4):
        X = X0.copy()
        X[1] = X[0] + dl * e
        K = X @ X.T
        three = orthant3_probability(K[np.ix_([0, 2, 3], [0, 2, 3])])
        gaps.append(abs(orthant4_probability(K) - three))
    assert gaps[1] / gaps[0] == pytest.approx(0.1, rel=0.05)
    assert gaps[2] / gaps[1] == pytest.approx(0.1, rel=0.05)


def test_monte_carlo_and_batch():
    rng = np.random.default_rng(5)
    Ks = np.stack([(lambda A: A @ A.T)(rng.normal(size=(4, d))) for d in (3, 4, 8)])
    P = orthant4_probability(Ks)
    assert P.shape == (3,)
    for K, p in zip(Ks, P):
        w = rng.multivariate_normal(np.zeros(4), K, size=400_000)
        hits = np.all(w > 0, axis=1)
        se = math.sqrt(p * (1 - p) / len(w))
        assert abs(hits.mean() - p) <= 5 * se      # P = 0 (an empty cone) is exact for both


def test_compiled_pair_integrals_match_the_numpy_path(monkeypatch):
    """The numba loop of the six pair integrals evaluates the NumPy path's rules term by term:
    on full-rank, nearly singular (rank-2 plus 1e-9) and sign-mixed correlations the two agree
    to rounding (1e-15 absolute), and a pairing left out (five of six) would be off by 1e-3."""
    from effth.numerics._closed import _orthant as o
    if o._compiled_orthant4() is None:
        pytest.skip("numba not installed")
    rng = np.random.default_rng(5)
    A = rng.standard_normal((600, 4, 6))
    B = rng.standard_normal((300, 4, 2))
    S = np.concatenate([A @ A.transpose(0, 2, 1), B @ B.transpose(0, 2, 1) + 1e-9 * np.eye(4)])
    fast = orthant4_probability(S)
    monkeypatch.setenv("EFFTH_FUSED", "0")
    slow = orthant4_probability(S)
    assert np.max(np.abs(fast - slow)) < 1e-15
    monkeypatch.setattr(o, "_PAIRINGS", o._PAIRINGS[:5])
    assert np.max(np.abs(orthant4_probability(S) - slow)) > 1e-3
