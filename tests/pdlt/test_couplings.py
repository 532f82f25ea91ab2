"""Couplings g, v of the quartic action from K, V, G1 by matching the derived action moments."""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import DomainError
from effth.pdlt.initialization.couplings import _expanded, _numeric, couplings

from ._book import random_vertex


def _inputs(N, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, N + 2))
    K = X @ X.T / (N + 2) + 0.2 * np.eye(N)
    G1 = rng.standard_normal((N, N))
    return K, random_vertex(rng, N), 0.5 * (G1 + G1.T)


@pytest.mark.parametrize("N", [1, 2])
def test_equal_book_4108_and_raised_vertex(N):
    K, V, G1 = _inputs(N, N)
    n_l, n_prev = 7.0, 5.0
    c = couplings(K, V, G1, n_l, n_prev)
    Ki = np.linalg.inv(K)
    g108 = K + (G1 - n_l / 2 * np.einsum("cd,abcd->ab", Ki, V) - np.einsum("cd,acbd->ab", Ki, V)) / n_prev
    np.testing.assert_allclose(c["g_lower"], g108, rtol=0, atol=1e-12)
    v482 = np.einsum("ai,bj,ck,dl,ijkl->abcd", Ki, Ki, Ki, Ki, V) / n_prev
    np.testing.assert_allclose(c["v"], v482, rtol=0, atol=1e-12 * np.abs(v482).max())


def test_raised_4109_holds_to_first_order():
    """g^{-1} - K^{-1} equals (4.109)/n up to O(1/n^2): the residual falls 4x when n_{l-1} doubles
    (m = n_l neurons in the action held fixed: the spectator term is O(m/n))."""
    K, V, G1 = _inputs(2, 9)
    Ki = np.linalg.inv(K)
    res = []
    m = 2.0
    for n in (100.0, 200.0, 400.0):
        c = couplings(K, V, G1, n_l=m, n_prev=n)
        f109 = (-Ki @ G1 @ Ki + np.einsum("cd,abcd->ab", K, (m / 2) * np.einsum(
            "ai,bj,ck,dl,ijkl->abcd", Ki, Ki, Ki, Ki, V)) + np.einsum(
            "cd,acbd->ab", K, np.einsum("ai,bj,ck,dl,ijkl->abcd", Ki, Ki, Ki, Ki, V))) / n
        res.append(np.abs(c["g_upper"] - Ki - f109).max())
    slopes = np.log2(np.array(res[:-1]) / np.array(res[1:]))
    assert np.all(np.abs(slopes - 2.0) < 0.15), (res, slopes)


def test_closed_loop_and_single_input_consistency():
    """Put g, v back into the derived action moments: K + G1/n and V/n come back to O(1/n^2);
    single input: E[z^2] = g + (m+2) v g^3/2 (PDLT (4.47), lower-g form)."""
    N, n_l = 2, 2.0
    K, V, G1 = _inputs(N, 4)
    a, two, four = _expanded(N)
    e2, e4 = [], []
    for n in (100.0, 200.0, 400.0):
        c = couplings(K, V, G1, n_l, n)
        E2 = np.array([[_numeric(two, a, (p, q), c["g_lower"], c["v"], n_l) for q in range(N)]
                       for p in range(N)])
        e2.append(np.abs(E2 - K - G1 / n).max())
        e4.append(max(abs(_numeric(four, a, t, c["g_lower"], c["v"], n_l) - V[t] / n)
                      for t in [(0, 1, 1, 0), (0, 0, 1, 1), (0, 0, 0, 1)]))
    for e in (e2, e4):                       # both residuals are O(1/n^2)
        slopes = np.log2(np.array(e[:-1]) / np.array(e[1:]))
        assert np.all(np.abs(slopes - 2.0) < 0.2), (e, slopes)
    k, v1, g1 = np.array([[0.7]]), np.full((1, 1, 1, 1), 0.3), np.zeros((1, 1))
    c = couplings(k, v1, g1, n_l=3.0, n_prev=10.0)
    g, v = c["g_lower"][0, 0], c["v"][0, 0, 0, 0]
    a1, two1, _ = _expanded(1)
    assert _numeric(two1, a1, (0, 0), c["g_lower"], c["v"], 3.0) == pytest.approx(
        g + (3.0 + 2) * v * g**3 / 2, rel=1e-12)


def test_bad_input():
    K, V, G1 = _inputs(2, 1)
    with pytest.raises(DomainError, match="invertible"):
        couplings(np.ones((2, 2)), V, G1, 5, 5)
    with pytest.raises(DomainError, match="widths"):
        couplings(K, V, G1, 0, 5)
    with pytest.raises(DomainError, match="shapes"):
        couplings(K, V[0], G1, 5, 5)
