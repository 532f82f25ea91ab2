"""The fast paths of effth.numerics.sample_tables: bucketed four-point rules, threaded chunks,
adaptive first refinement, closed-form pair tables by blocks.

Corners: results independent of the thread count (bit for bit), per-entry agreement with
``gaussian_expectation`` at rtol 1e-10 on generic and nearly singular kernels (duplicated,
collinear and zero inputs), the vectorized step rule against the scalar one, closed forms against
the dispatcher.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from effth import gaussian_expectation, get_activation
from effth.numerics import sample_tables as st
from effth.numerics.sample_tables import closed_pair_tables, four_point_table


def _kernel(N, seed, scale=1.0, dim=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, dim))
    K = scale * X @ X.T / dim
    return 0.5 * (K + K.T)


def _singular_kernel(seed=3):
    """7 inputs: generic ones, a duplicate of input 0, an input collinear (x -> -0.5 x) to
    input 1, a zero input, and one nearly collinear (1e-6) to input 2."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((7, 5))
    X[3] = X[0]
    X[4] = -0.5 * X[1]
    X[5] = 0.0
    X[6] = X[2] + 1e-6 * rng.standard_normal(5)
    return X @ X.T / 5


def _reference(K, act, m):
    d = sorted(set(m))
    f = [(d.index(i), "sigma", 0) for i in m]
    return float(gaussian_expectation(f, K[np.ix_(d, d)], act, method="quadrature", rtol=1e-10))


@pytest.mark.parametrize("act", ["tanh", "gelu", "sin"])
def test_four_point_thread_count_does_not_change_the_table(act, monkeypatch):
    """Each chunk is computed as in the serial loop: 1 and 2 threads agree bit for bit."""
    a = get_activation(act)
    K = _kernel(7, 0, scale=0.8)
    out = []
    for n in ("1", "2"):
        monkeypatch.setenv("EFFTH_THREADS", n)
        out.append(four_point_table(K, a, rtol=1e-8))
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


@pytest.mark.parametrize("which", ["generic", "singular"])
@pytest.mark.parametrize("act", ["tanh", "gelu"])
def test_four_point_against_per_entry_quadrature(act, which):
    """rtol 1e-8 on every pattern of multiplicities, including duplicated, collinear, zero and
    nearly collinear inputs (exact limits: a zero-variance direction gets one node)."""
    a = get_activation(act)
    K = _kernel(6, 1, scale=1.2) if which == "generic" else _singular_kernel()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F, _ = four_point_table(K, a, rtol=1e-8)
    top = np.abs(F).max()
    rng = np.random.default_rng(5)
    sets = list(itertools.combinations_with_replacement(range(K.shape[0]), 4))
    picks = [sets[i] for i in rng.choice(len(sets), 14, replace=False)]
    if which == "singular":
        picks += [(0, 1, 3, 4), (1, 2, 4, 6), (0, 2, 5, 6), (3, 3, 4, 5), (2, 6, 6, 1)]
    for m in picks:
        ref = _reference(K, a, m)
        assert abs(F[m] - ref) <= 1e-8 * max(abs(ref), 1e-3 * top), (m, F[m], ref)
        for p in set(itertools.permutations(m)):
            assert F[p] == F[m]


@pytest.mark.filterwarnings("ignore::effth.errors.AccuracyWarning")  # the reference: ~1e-9 here
def test_four_point_refinement_meets_rtol_on_a_large_kernel():
    """A kernel of scale 2 (pole-limited steps: many entries refined) still meets rtol."""
    a = get_activation("tanh")
    K = _kernel(5, 7, scale=2.0)
    F, _ = four_point_table(K, a, rtol=1e-8)
    for m in [(0, 1, 2, 3), (1, 2, 3, 4), (0, 0, 2, 4), (1, 1, 3, 3)]:
        ref = _reference(K, a, m)
        assert abs(F[m] - ref) <= 1e-8 * max(abs(ref), 1e-3 * np.abs(F).max())


@pytest.mark.parametrize("act", ["tanh", "gelu", "sin", "sigmoid"])
def test_vectorized_step_matches_scalar_rule(act):
    a = get_activation(act)
    sc = np.concatenate([[0.0, 1e-9], np.geomspace(1e-4, 30.0, 60)])
    for nfac in (2, 4):
        h = st._steps(sc, a, 1e-8, nfac)
        ref = np.array([st._step(float(v), a, 1e-8, nfac) for v in sc])
        np.testing.assert_allclose(h, ref, rtol=1e-14)


def test_integer_power_by_multiplication():
    rng = np.random.default_rng(0)
    f = rng.standard_normal((6, 3, 4))
    p = np.array([1, 2, 3, 4, 2, 1])
    np.testing.assert_allclose(st._ipow(f, p), f ** p[:, None, None], rtol=1e-15)
    assert st._ipow(f, np.ones(6, int)) is f


def test_first_refinement_ladder():
    """The step divisor from the error model, rounded up to the ladder; 1.5 if the model fails."""
    I = np.ones(4)
    t = np.full(4, 1e-8)
    e = np.array([1.5e-8, 1e-7, 1e-5, 2.0])
    m = st._first_refinement(e, t, I)
    assert list(m) == sorted(m) and m[0] == 1.1 and m[-1] == 1.5
    # below the cap the divisor suffices in the model e(h/m) = (e/I)^m I
    lt, le = np.log(0.5 * t[:2]), np.log(e[:2])
    assert np.all(m[:2] * le <= lt) and m[2] == 1.5


@pytest.mark.parametrize("act", ["erf", "relu", "sin"])
def test_closed_pair_tables_blocks_and_symmetry(act):
    """Blocks of the upper triangle of any size give the same tables up to rounding (SIMD
    remainders), exactly symmetric for a symmetric kernel."""
    a = get_activation(act)
    K = _kernel(37, 2, scale=1.3)
    res = [closed_pair_tables(K, a, [(0, 0), (1, 1)], rows=rows) for rows in (1 << 16, 100)]
    for o in res[0]:
        np.testing.assert_allclose(res[1][o], res[0][o], rtol=1e-14, atol=1e-15 * np.abs(res[0][o]).max())
        assert np.array_equal(res[0][o], res[0][o].T) and np.array_equal(res[1][o], res[1][o].T)


def test_closed_pair_tables_drop_a_non_finite_order():
    """A non-finite off-diagonal entry drops its order (and the transpose): the caller falls
    back to quadrature."""
    a = get_activation("erf")
    K = _kernel(5, 2)
    K[1, 3] = K[3, 1] = np.inf                # <sigma' sigma'> = 4/pi / sqrt(... - 4 K^2): NaN
    assert set(closed_pair_tables(K, a, [(0, 0), (1, 1)])) == {(0, 0)}
    assert set(closed_pair_tables(_kernel(5, 2), a, [(0, 0), (1, 1)])) == {(0, 0), (1, 1)}


@pytest.mark.parametrize("act", ["erf", "relu"])
def test_closed_pair_tables_against_gaussian_expectation(act):
    a = get_activation(act)
    K = _singular_kernel()[:5, :5] + 0.05      # duplicated and collinear inputs, all > 0
    T = closed_pair_tables(K, a, [(0, 0), (1, 1)])
    for (p, q), tab in T.items():
        for i, j in [(0, 1), (0, 3), (1, 4), (2, 2), (4, 2)]:
            sub = K[np.ix_([i, j], [i, j])]
            ref = float(gaussian_expectation([(0, "sigma", p), (1, "sigma", q)], sub, a, rtol=1e-13))
            assert abs(tab[i, j] - ref) <= 1e-12 * max(abs(ref), 1.0), ((p, q), i, j)


@pytest.mark.parametrize("N", [1, 2, 5])
def test_multiset_index_against_sorting(N):
    idx, sets = st.multiset_index(N)
    for t in itertools.product(range(N), repeat=4):
        assert sets[idx[t]] == tuple(sorted(t))


@pytest.mark.parametrize("act", ["erf", "sin"])
def test_four_point_nearly_collinear_inputs_keep_their_digits(act):
    """Inputs collinear to 1e-7: the conditional variance of one given the other is a Schur
    complement that loses its digits when formed from K (the previous geometry was off by up to
    2.5e-6 relative for erf, with an error estimate of 1e-18); the eigen-factor geometry keeps
    every entry within rtol of the per-entry quadrature."""
    a = get_activation(act)
    rng = np.random.default_rng(8)
    X = rng.standard_normal((6, 5))
    X[5] = X[2] + 1e-7 * rng.standard_normal(5)
    K = X @ X.T / 5
    K = 0.5 * (K + K.T)
    F, _ = four_point_table(K, a, rtol=1e-8)
    top = np.abs(F).max()
    for rest in itertools.combinations_with_replacement(range(6), 2):
        m = tuple(sorted((2, 5) + rest))
        ref = _reference(K, a, m)
        assert abs(F[m] - ref) <= 1e-8 * max(abs(ref), 1e-3 * top), (m, F[m], ref)
