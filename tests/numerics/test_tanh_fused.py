"""The compiled tanh kernels of the atom tables against the NumPy path they replace.

Two kinds of check: on the *same* rules and geometry the kernels (the outer grid and the smoothed
line) must reproduce the NumPy path's fine sum, step-2h sum and E|f| scale to rounding (any slip
in a derivative, a weight, a node selection or a pair index shows as an O(1) difference); through the public tables, values must
agree with the NumPy path within the requested accuracy (the two paths bucket subsets
differently, so their rules differ) and the kernels must actually be the path taken.  The
independent references (per-entry Gaussian expectations, the tensor-grid path) of
``test_atom_tables.py`` run through the kernels too.
"""

import itertools

import numpy as np
import pytest

import effth.numerics.atom_tables as at
from effth.activations import get_activation
from effth.numerics import _tanh_fused as tf
from effth.numerics.sample_tables import _coarse, _fold, _rule, _split

pytest.importorskip("numba")

TANH = get_activation("tanh")


def _geometry(k, B, seed, collinear=False):
    """_split of B random k x k kernels (unit scale; optionally one nearly collinear pair)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, k, 4))
    if collinear:
        X[:, 1] = X[:, 0] + 1e-5 * X[:, 2]
    K = X @ np.swapaxes(X, 1, 2) / 4
    return _split(K)


def _rules(steps, X=6.5, fold=False):
    out = []
    for h in steps:
        x, w = _rule(h, X)
        out.append((x, w, _coarse(w)))
    if fold:
        out[0] = _fold(*out[0][:2])
    return out


def _both(monkeypatch, *args):
    monkeypatch.setenv("EFFTH_FUSED", "1")
    calls = []
    real = tf.fused_sums

    def spy(*a, **k):
        out = real(*a, **k)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(at, "fused_sums", spy)
    fused = at._rotated(*args)
    monkeypatch.setenv("EFFTH_FUSED", "0")
    ref = at._rotated(*args)
    assert calls == [True, False]                  # the kernel ran, then the NumPy path
    return fused, ref


@pytest.mark.parametrize("fold,collinear", [(False, False), (True, False), (True, True)])
def test_four_samples_same_rules_as_numpy(monkeypatch, fold, collinear):
    """r = 3: every combo of single derivatives of order <= 3 (all 16 pairs of the x3 sums), fine,
    step-2h and E|f| sums equal to rounding; steps of the benchmark's size (25-31 nodes); also
    with a nearly collinear pair of samples (a near-zero coordinate scale)."""
    _, A, c, s = _geometry(4, 7, seed=1, collinear=collinear)
    combos = sorted(set(itertools.product([(0,), (1,), (2,), (3,)], repeat=4)))[::5]
    combos = at._close(combos)
    rules = _rules([0.42, 0.47, 0.53], fold=fold)
    yrule = _rules([0.45])[0]
    (f, fc, fa), (r, rc, ra) = _both(monkeypatch, TANH, A, c, s, combos, rules, yrule)
    scale = np.abs(ra).max(axis=0)
    for a, b in ((f, r), (fc, rc), (fa, ra)):
        assert np.all(np.abs(a - b) <= 1e-13 * scale)
    assert np.all(np.isfinite(f))


def test_three_samples_products_same_rules_as_numpy(monkeypatch):
    """r = 2: factor functions that are products of derivatives at one sample (three samples
    carry four factors), including a one-node direction (a zero-variance coordinate)."""
    _, A, c, s = _geometry(3, 9, seed=2)
    fns = [(0,), (1,), (3,), (0, 2), (1, 1), (1, 3)]
    combos = at._close({(fns[0], fns[4], fns[1]), (fns[3], fns[1], fns[2]), (fns[5], fns[0], fns[0]),
                        (fns[2], fns[2], fns[4])})
    for steps in ([0.4, 0.5], [0.45, np.inf]):
        rules = _rules(steps)
        yrule = _rules([0.5])[0]
        (f, fc, fa), (r, rc, ra) = _both(monkeypatch, TANH, A, c, s, combos, rules, yrule)
        scale = np.abs(ra).max(axis=0)
        for a, b in ((f, r), (fc, rc), (fa, ra)):
            assert np.all(np.abs(a - b) <= 1e-13 * scale)


def test_where_the_kernels_do_not_apply():
    """Other activations, orders above 3, products at four samples, and grids whose exponentials
    could overflow go to the NumPy path; EFFTH_FUSED=0 switches the kernels off."""
    assert tf.applies(TANH, [(0,), (3,)], 3) and tf.applies(TANH, [(0, 1), (2,)], 2)
    assert not tf.applies(get_activation("gelu"), [(0,), (1,)], 3)
    assert not tf.applies(TANH, [(0,), (4,)], 3)
    assert not tf.applies(TANH, [(0, 1), (2,)], 3)
    assert not tf.applies(TANH, [(0,), (1,)], 1)
    x = np.linspace(-7.0, 7.0, 5)
    A = np.eye(3)[None] * 20.0
    assert tf.in_range(A, [x, x, x])
    assert not tf.in_range(A * 2.0, [x, x, x])           # |2 z| up to 2 * 40 * 7 * 3 > 354
    assert tf.fused_sums(TANH, A * 2.0, [(x, x, x)] * 3, [(0,)], [(0, 0, 0)],
                         (slice(None),) * 3) is None


def test_tables_fused_against_numpy_path(monkeypatch):
    """Public tables over six inputs (a duplicated and a nearly collinear pair among them): the
    kernels' tables agree with the NumPy path's within the accuracy asked for, and the kernels
    evaluate every subset of three and four samples."""
    X = np.random.default_rng(3).standard_normal((6, 4))
    X[4] = X[0]
    X[5] = X[1] + 1e-6 * X[2]
    K = 0.8 * X @ X.T / 4 + 0.05
    pats = [((0, 0), (1, 1), (2, 2), (3, 3)), ((0, 1), (1, 1), (2, 1), (3, 1)),
            ((0, 3), (1, 0), (2, 2), (3, 1)), ((0, 1), (0, 1), (1, 2), (2, 0))]
    from effth.numerics import _tanh_kernels as kern

    ran = {"cube": 0, "square": 0}
    for name in ran:
        real = getattr(kern, "_" + name)

        def spy(*a, _real=real, _name=name):
            ran[_name] += a[0].shape[0]
            return _real(*a)

        monkeypatch.setattr(kern, "_" + name, spy)
    monkeypatch.setenv("EFFTH_FUSED", "1")
    new = at.AtomTables(K, "tanh", rtol=1e-10).tables(pats)
    assert ran["cube"] >= 15 and ran["square"] >= 20          # C(6, 4) and C(6, 3) subsets
    monkeypatch.setenv("EFFTH_FUSED", "0")
    old = at.AtomTables(K, "tanh", rtol=1e-10).tables(pats)
    for a, b in zip(new, old):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * np.abs(b).max())


def test_zero_input_gives_exact_zeros(monkeypatch):
    """A zero input makes sigma(z) = tanh(0) vanish identically: the kernels must give exact zeros
    there (tanh z = 1 - 2/(1 + e^{2z}) is exactly 0 at z = 0), or the error estimate of those
    atoms, relative to their own E|f| ~ 1e-17, is rounding noise and forces refinements and an
    AccuracyWarning (one division shared by both variables did that)."""
    import warnings

    from effth.errors import AccuracyWarning

    X = np.random.default_rng(11).standard_normal((5, 4))
    X[3] = 0.0
    K = X @ X.T / 4
    pats = [((0, 0), (1, 1), (2, 2), (3, 3)), ((0, 0), (1, 0), (2, 0), (3, 0))]
    monkeypatch.setenv("EFFTH_FUSED", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        t = at.AtomTables(K, "tanh", rtol=1e-9)
        tabs = t.tables(pats)
    assert t.max_error <= 1e-9
    for tab in tabs:                       # label 0 carries sigma itself: sigma(z_3) = 0
        assert np.all(tab[3] == 0.0)


def test_four_point_table_four_distinct_kernel_matches_numpy_path(monkeypatch):
    """The four-point table's four-distinct-sample grid (``sample_tables._fused_four``, tanh by
    per-coordinate exponentials) against the NumPy path of the same rules: every entry of the
    (N,)*4 table within 1e-14 of the table's largest entry, the error estimates too; the kernel is
    the path taken, and a kernel that used the step-2h x_3 weights for the fine sum would be
    off by far more (1e-6).  A zero input (row 6) gives exact zeros, as in NumPy."""
    import effth.numerics.sample_tables as st
    rng = np.random.default_rng(3)
    X = rng.standard_normal((7, 5))
    X[6] = 0.0
    K = X @ X.T / 5
    calls = []
    real = st._fused_four

    def spy(*a):
        out = real(*a)
        calls.append(out is not None)
        return out
    monkeypatch.setattr(st, "_fused_four", spy)
    F, FE = st.four_point_table(K, TANH, rtol=1e-8)
    assert calls and all(calls)
    assert np.all(F[:6, :6, :6, 6] == 0.0)
    monkeypatch.setattr(st, "_fused_four", lambda *a: None)
    G, GE = st.four_point_table(K, TANH, rtol=1e-8)
    scale = np.max(np.abs(G))
    assert np.max(np.abs(F - G)) < 1e-14 * scale
    assert np.max(np.abs(FE - GE)) < 1e-14 * scale

    def wrong(A, Po, act, rules):
        (x1, w1, c1), (x2, w2, c2), (x3, w3, c3) = rules
        return real(A, Po, act, [(x1, w1, c1), (x2, w2, c2), (x3, _coarse(w3), c3)])
    monkeypatch.setattr(st, "_fused_four", wrong)
    H, _ = st.four_point_table(K, TANH, rtol=1e-8)
    assert np.max(np.abs(H - G)) > 1e-6 * scale
