"""Shared-node tables of Gaussian expectations over all sample subsets (effth.numerics.sample_tables).

Corners: exact Wick sums for sigma = z (published: Isserlis), the per-entry quadrature of
``gaussian_expectation`` at rtol 1e-12 (independent rules in another basis), symmetry and
singular kernels.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from effth import get_activation, gaussian_expectation
from effth.errors import DomainError
from effth.numerics.sample_tables import four_point_table, pair_tables, parity

SMOOTH = ["tanh", "erf", "gelu", "swish", "softplus", "sin"]


def _kernel(N, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, N + 2))
    return scale * X @ X.T / (N + 2) + 0.05


def _reference_four(K, act, m, rtol=1e-12):
    d = sorted(set(m))
    f = [(d.index(i), "sigma", 0) for i in m]
    return float(gaussian_expectation(f, K[np.ix_(d, d)], act, method="quadrature", rtol=rtol))


def test_linear_is_isserlis():
    """sigma = z: <z_a z_b z_c z_d> = K_ab K_cd + K_ac K_bd + K_ad K_bc exactly (Wick)."""
    K = _kernel(5, 0)
    F, _ = four_point_table(K, get_activation("linear"), rtol=1e-10)
    W = (np.einsum("ab,cd->abcd", K, K) + np.einsum("ac,bd->abcd", K, K)
         + np.einsum("ad,bc->abcd", K, K))
    np.testing.assert_allclose(F, W, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("act", SMOOTH)
def test_four_point_against_per_entry_quadrature(act):
    a = get_activation(act)
    K = _kernel(5, 1, scale=1.5)
    F, E = four_point_table(K, a, rtol=1e-9)
    worst = 0.0
    for m in [(0, 1, 2, 3), (1, 2, 3, 4), (0, 0, 1, 2), (2, 3, 3, 4), (0, 0, 1, 1), (4, 4, 4, 1), (3, 3, 3, 3)]:
        ref = _reference_four(K, a, m)
        worst = max(worst, abs(F[m] - ref) / max(abs(ref), 1e-3))
    assert worst < 1e-8


def test_four_point_full_symmetry_and_singular_kernel():
    a = get_activation("tanh")
    K = _kernel(4, 2)
    K = np.pad(K, ((0, 1), (0, 1)))
    K[4, :], K[:, 4] = K[1, :], K[:, 1]
    K[4, 4] = K[1, 1]                          # sample 4 duplicates sample 1 (rank-deficient)
    F, _ = four_point_table(K, a, rtol=1e-9)
    for p in itertools.permutations(range(4)):
        np.testing.assert_array_equal(F, F.transpose(p))
    assert F[0, 1, 2, 3] == pytest.approx(F[0, 4, 2, 3], rel=1e-9)
    assert F[0, 1, 4, 3] == pytest.approx(_reference_four(K[:4, :4], a, (0, 1, 1, 3)), rel=1e-9)


@pytest.mark.parametrize("act", ["tanh", "gelu"])
def test_pair_tables_against_per_entry(act):
    a = get_activation(act)
    K = _kernel(4, 3)
    orders = [(0, 0), (1, 1), (2, 0), (2, 2), (3, 1), (4, 0)]
    T, E = pair_tables(K, a, orders, rtol=1e-10)
    assert set(T) >= {(0, 2), (1, 3), (0, 4)}                 # transposes come along
    for (p, q) in orders:
        for (i, j) in [(0, 1), (2, 1), (3, 3)]:
            sub = K[np.ix_([i, j], [i, j])]
            ref = gaussian_expectation([(0, "sigma", p), (1, "sigma", q)], sub, a, rtol=1e-12)
            assert T[p, q][i, j] == pytest.approx(float(ref), rel=1e-9, abs=1e-12)
            assert T[q, p][j, i] == T[p, q][i, j]


def test_small_kernels_deep_layers():
    """Kernels that shrink with depth (tanh at criticality) stay accurate: the Gaussian floor."""
    a = get_activation("tanh")
    K = _kernel(4, 4, scale=0.03)
    F, _ = four_point_table(K, a, rtol=1e-8)
    for m in [(0, 1, 2, 3), (0, 0, 1, 2)]:
        ref = _reference_four(K, a, m)
        assert F[m] == pytest.approx(ref, rel=1e-8)


def test_parity():
    assert parity(get_activation("tanh")) == -1
    assert parity(get_activation("cos")) == 1
    assert parity(get_activation("gelu")) == 0


def test_kinked_rejected():
    with pytest.raises(DomainError, match="smooth"):
        four_point_table(np.eye(2), get_activation("relu"))
    with pytest.raises(DomainError, match="square"):
        pair_tables(np.ones(3), get_activation("tanh"), [(0, 0)])


@pytest.mark.filterwarnings("ignore::effth.errors.AccuracyWarning")  # reference: ~1e-9 at scale 2
@pytest.mark.parametrize("scale", [0.3, 2.0])
@pytest.mark.parametrize("act", ["tanh", "erf"])
def test_rtol_met_across_kernel_scales(act, scale):
    """rtol 1e-8 holds at small kernels (deep layers: Gaussian-limited steps, poles of order 4
    from nearly collinear samples) and large ones (pole-limited steps)."""
    a = get_activation(act)
    K = _kernel(5, 7, scale=scale)
    F, _ = four_point_table(K, a, rtol=1e-8)
    for m in [(0, 1, 2, 3), (1, 2, 3, 4), (0, 0, 2, 4)]:
        ref = _reference_four(K, a, m, rtol=1e-10)
        assert abs(F[m] - ref) <= 1e-8 * max(abs(ref), 1e-3 * abs(F).max())


def test_entries_that_vanish_by_symmetry_raise_no_accuracy_warning():
    """Orthogonal inputs make the odd four-point entries exactly 0; their 1e-18 absolute error
    used to be judged against a relative tolerance and raised AccuracyWarning."""
    import warnings
    from effth.activations import get_activation
    from effth.numerics.sample_tables import four_point_table
    K = np.diag([0.5, 0.7])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F, E = four_point_table(K, get_activation("tanh"), rtol=1e-8)
    assert abs(F[0, 0, 0, 1]) < 1e-15 and F[0, 0, 1, 1] > 0


def _mehler_kernel():
    """12 inputs: generic pairs, a nearly collinear pair, an antipodal pair, a zero input."""
    rng = np.random.default_rng(11)
    X = rng.standard_normal((12, 6))
    X[5] = X[4] * (1 + 1e-7)
    X[7] = -X[6]
    X[9] = 0.0
    return X @ X.T / 6


@pytest.mark.filterwarnings("ignore::effth.errors.AccuracyWarning")  # the reference at a zero input: 5e-18 abs
@pytest.mark.parametrize("act", ["tanh", "sigmoid", "swish"])
def test_mehler_series_against_per_entry_quadrature(act):
    """The series path (Hermite projections + Horner in rho) against the independent 2-D
    quadrature of gaussian_expectation at rtol 1e-12, entry by entry, with its error estimate an
    upper bound of the actual error."""
    a = get_activation(act)
    K = _mehler_kernel()
    orders = [(0, 0), (1, 1), (0, 1)]
    T, E = pair_tables(K, a, orders, rtol=1e-10)
    for (p, q) in orders:
        for (i, j) in [(0, 1), (2, 3), (4, 5), (6, 7), (9, 3), (8, 8), (1, 10)]:
            sub = K[np.ix_([i, j], [i, j])]
            ref = float(gaussian_expectation([(0, "sigma", p), (1, "sigma", q)], sub, a, rtol=1e-12))
            err = abs(T[p, q][i, j] - ref)
            assert err <= 1e-9 * max(abs(ref), 1e-3), (p, q, i, j, err)
            assert err <= E[p, q][i, j] + 1e-13 * max(abs(ref), 1.0), (p, q, i, j, err, E[p, q][i, j])


def test_mehler_truncation_bound_sends_pairs_to_quadrature(monkeypatch):
    """A series cut at degree 6 cannot certify the strongly correlated pairs: their bound
    |rho|^7 sqrt(t_a t_b) exceeds rtol, so they go to quadrature, and the table still matches
    the pure-quadrature path; without the bound (accepting the degree-6 sums) it would not."""
    import effth.numerics.sample_tables as st
    a = get_activation("tanh")
    K = 1.5 * _mehler_kernel()
    ref, _ = pair_tables(K, a, [(0, 0)], rtol=1e-10, mehler=False)
    monkeypatch.setattr(st, "_MEHLER_DEGREES", (6,))
    T, _ = pair_tables(K, a, [(0, 0)], rtol=1e-10)
    np.testing.assert_allclose(T[0, 0], ref[0, 0], rtol=1e-9, atol=1e-12)
    # what the truncated series alone gives on the nearly collinear pair: visibly wrong
    x, sw, psi = st._hermite_functions(6, 76)
    sd = np.sqrt(np.diag(K))[[4, 5]]
    c = (a.numpy(0)(sd[:, None] * x) * sw) @ psi.T
    rho = K[4, 5] / (sd[0] * sd[1])
    naive = sum(c[0, k] * c[1, k] * rho ** k for k in range(7))
    assert abs(naive - ref[0, 0][4, 5]) > 1e-4 * abs(ref[0, 0][4, 5])


def test_mehler_saturated_kernels_fall_back():
    """tanh on a kernel of scale 20 (saturated): the Hermite series converges too slowly near
    rho = 1, and those pairs are computed by quadrature (same values as mehler=False)."""
    a = get_activation("tanh")
    K = 20.0 * _kernel(6, 5)
    T, _ = pair_tables(K, a, [(0, 0), (1, 1)], rtol=1e-10)
    R, _ = pair_tables(K, a, [(0, 0), (1, 1)], rtol=1e-10, mehler=False)
    for o in T:
        np.testing.assert_allclose(T[o], R[o], rtol=1e-9, atol=1e-13)
