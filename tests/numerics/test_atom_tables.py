"""Atom tables against per-entry Gaussian expectations (independent quadrature paths)."""

import numpy as np
import pytest

from effth.errors import DomainError
from effth.numerics import gaussian_expectation
from effth.numerics.atom_tables import AtomTables


@pytest.mark.parametrize("act", ["tanh", "gelu", "softplus", "erf"])
def test_tables_match_gaussian_expectation(act):
    rng = np.random.default_rng(7)
    A = rng.normal(size=(3, 4))
    K = 1.2 * A @ A.T / 4
    t = AtomTables(K, act, rtol=1e-10)
    fac = ((0, 2), (1, 1), (2, 1), (3, 0))                   # <s''_a s'_b s'_c s_d>
    tab = t.table(fac)
    for idx in [(0, 1, 2, 0), (1, 1, 2, 2), (2, 0, 0, 1), (1, 1, 1, 1)]:
        samples = sorted(set(idx))
        slot = {s: i for i, s in enumerate(samples)}
        ref = gaussian_expectation([(slot[s], "sigma", o) for s, (_, o) in zip(idx, fac)],
                                   K[np.ix_(samples, samples)], act, rtol=1e-12)
        assert tab[idx] == pytest.approx(float(ref), rel=1e-8, abs=1e-11)
    # repeated label position: <s'''_a s'_a s'_b>
    tab2 = t.table(((0, 3), (0, 1), (1, 1)))
    ref = gaussian_expectation([(0, "sigma", 3), (0, "sigma", 1), (1, "sigma", 1)], K[np.ix_([1, 2], [1, 2])],
                               act, rtol=1e-12)
    assert tab2[1, 2] == pytest.approx(float(ref), rel=1e-8, abs=1e-11)


def test_singular_kernel_and_bad_input():
    x = np.array([1.0, 0.5])
    K = np.outer(x, x)                                          # rank one: z_2 = z_1 / 2
    t = AtomTables(K, "tanh", rtol=1e-10)
    v = t.values([((0, 1), (1, 1))])[0]                          # <s'(z) s'(z/2)>, z ~ N(0, 1)
    x_, w_ = np.polynomial.hermite_e.hermegauss(200)
    ref = np.sum(w_ / np.sqrt(2 * np.pi) / np.cosh(x_) ** 2 / np.cosh(x_ / 2) ** 2)
    assert v == pytest.approx(ref, rel=1e-9)
    with pytest.raises(DomainError, match="kinked"):
        AtomTables(np.eye(2), "relu")
    with pytest.raises(DomainError, match="PSD"):
        AtomTables(np.array([[1.0, 2.0], [2.0, 1.0]]), "tanh").values([((0, 0), (1, 0))])


# ---------------------------------------------------------------- the shared-node evaluator
# The factor patterns of the NTK-hierarchy recursions (PDLT ch. 8, 11, ∞): four labels with
# derivative orders up to 3, plus repeated-label patterns (several factors on one sample).
_FOUR = [((0, 0), (1, 0), (2, 0), (3, 0)), ((0, 0), (1, 0), (2, 1), (3, 1)),
         ((0, 1), (1, 0), (2, 1), (3, 2)), ((0, 1), (1, 1), (2, 1), (3, 1)),
         ((0, 2), (1, 1), (2, 1), (3, 2)), ((0, 3), (1, 1), (2, 1), (3, 1)),
         ((0, 2), (1, 1), (2, 0), (3, 1))]
_REPEATED = [((0, 3), (0, 1), (1, 1)), ((0, 2), (0, 2), (1, 0), (2, 1)), ((0, 1), (1, 2))]


def _entry_ref(K, fac, idx, act, rtol=1e-12):
    """<prod sigma^(o)(z_{idx})> by effth.gaussian_expectation on the entry's own sub-kernel."""
    labels = sorted({p for p, _ in fac})
    samples = sorted(set(idx))
    slot = {s: i for i, s in enumerate(samples)}
    where = dict(zip(labels, idx))
    return float(gaussian_expectation([(slot[where[p]], "sigma", o) for p, o in fac],
                                      K[np.ix_(samples, samples)], act, rtol=rtol))


@pytest.mark.parametrize("act", ["tanh", "gelu"])
def test_shared_matches_grid_reference(act):
    """Every entry of every pattern against the per-subset tensor-grid path (N = 3: its grids fit)."""
    rng = np.random.default_rng(11)
    A = rng.normal(size=(3, 5))
    K = 0.9 * A @ A.T / 5 + 0.05
    new = AtomTables(K, act, rtol=1e-10)
    ref = AtomTables(K, act, rtol=1e-10, method="grid")
    pats = _FOUR + _REPEATED
    for fac, tab in zip(pats, new.tables(pats)):
        old = ref.table(fac)
        assert tab.shape == old.shape
        np.testing.assert_allclose(tab, old, rtol=0, atol=1e-8 * max(np.abs(old).max(), 1e-4))
    assert new.max_error <= 1e-10


@pytest.mark.parametrize("act", ["tanh", "gelu"])
def test_four_distinct_samples_unit_scale(act):
    """Unit-scale inputs (the first-layer kernel of 4 random inputs): the tensor grid of four
    distinct samples exceeds its node cap; the shared path matches per-entry expectations."""
    X = np.random.default_rng(0).standard_normal((4, 4))
    K = X @ X.T / 4
    if act == "tanh":
        with pytest.raises(DomainError, match="nodes"):
            AtomTables(K, act, method="grid").table(_FOUR[0])
    t = AtomTables(K, act, rtol=1e-9)
    tabs = t.tables(_FOUR)
    for fac, tab, idx in [(_FOUR[5], tabs[5], (2, 0, 3, 1)), (_FOUR[4], tabs[4], (0, 1, 2, 3)),
                          (_FOUR[1], tabs[1], (3, 1, 1, 0))]:
        assert tab[idx] == pytest.approx(_entry_ref(K, fac, idx, act, rtol=1e-10), rel=1e-7, abs=1e-10)
    # a table is symmetric under permutations of labels with the same factor (orders 1, 1, 1)
    T = tabs[5]
    np.testing.assert_array_equal(T, np.transpose(T, (0, 2, 1, 3)))
    np.testing.assert_array_equal(T, np.transpose(T, (0, 3, 2, 1)))


def test_polynomial_activation_exact():
    """Polynomial sigma: Gauss-Hermite rules are exact; reference: a full 4-D Gauss-Hermite
    tensor rule on the Cholesky factor (exact for these degrees)."""
    act = "polynomial"
    from effth.activations import get_activation

    sig = get_activation(act, coeffs=(0.1, 1.0, 0.3, -0.2))
    rng = np.random.default_rng(5)
    A = rng.normal(size=(4, 4))
    K = A @ A.T / 4 + 0.1 * np.eye(4)
    t = AtomTables(K, sig, rtol=1e-12)
    x, w = np.polynomial.hermite_e.hermegauss(8)
    w = w / w.sum()
    L = np.linalg.cholesky(K)
    grids = np.meshgrid(*[x] * 4, indexing="ij")
    Z = L @ np.stack([g.ravel() for g in grids])
    W = np.prod(np.meshgrid(*[w] * 4, indexing="ij"), axis=0).ravel()
    for fac, tab in zip(_FOUR[:4], t.tables(_FOUR[:4])):
        idx = (0, 1, 2, 3)
        prod = np.prod([sig.numpy(o)(Z[i]) for i, (_, o) in zip(idx, fac)], axis=0)
        assert tab[idx] == pytest.approx(float(W @ prod), rel=1e-12, abs=1e-14)
    assert t.max_error < 1e-12


@pytest.mark.parametrize("case", ["duplicate", "zero", "collinear"])
def test_singular_kernels_match_grid(case):
    """Duplicated inputs, a zero input and nearly collinear inputs (sub-kernels singular or
    conditioned 1e-13): exact limits, against the tensor-grid path (eigen-factor, own nodes)."""
    X = np.random.default_rng(2).standard_normal((3, 4))
    if case == "duplicate":
        X[2] = X[0]
    elif case == "zero":
        X[1] = 0.0
    else:
        X[2] = X[0] + 1e-6 * X[1]
    K = 0.3 * X @ X.T / 4 + (0.0 if case == "zero" else 0.02)
    new = AtomTables(K, "tanh", rtol=1e-10)
    ref = AtomTables(K, "tanh", rtol=1e-10, method="grid")
    for fac, tab in zip(_FOUR, new.tables(_FOUR)):
        old = ref.table(fac)
        np.testing.assert_allclose(tab, old, rtol=0, atol=1e-8 * max(np.abs(old).max(), 1e-4))


def test_values_and_chunking_consistent(monkeypatch):
    """values() of single keys, and tables built in tiny memory chunks, agree with the tables."""
    import effth.numerics.atom_tables as at

    X = np.random.default_rng(4).standard_normal((5, 3))
    K = X @ X.T / 3
    tab = AtomTables(K, "gelu", rtol=1e-10).table(_FOUR[2])
    keys = [((0, 1), (1, 0), (2, 1), (4, 2)), ((3, 1), (3, 0), (3, 1), (3, 2)), ((1, 1), (1, 0), (2, 1), (0, 2))]
    vals = AtomTables(K, "gelu", rtol=1e-10).values(keys)
    for key, v in zip(keys, vals):
        assert v == pytest.approx(tab[tuple(s for s, _ in key)], rel=1e-9, abs=1e-12)
    monkeypatch.setattr(at, "_ELEMS", 1 << 9)        # one subset per chunk, every chunk its own rules
    small = AtomTables(K, "gelu", rtol=1e-10).table(_FOUR[2])
    np.testing.assert_allclose(small, tab, rtol=0, atol=1e-9 * np.abs(tab).max())


@pytest.mark.parametrize("fused", ["0", "1"])
def test_memory_bounded_by_chunks(monkeypatch, fused):
    """Scratch memory of a batch does not grow with the number of subsets (chunked; chunks of
    about one subset (NumPy path) or of a few (compiled kernels, bounded by the smoothed line)
    here, so that both batches span several)."""
    import tracemalloc

    import effth.numerics.atom_tables as at
    from effth.activations import get_activation

    monkeypatch.setattr(at, "_ELEMS", 1 << 13)
    monkeypatch.setenv("EFFTH_FUSED", fused)
    # one worker: with two, their chunks' scratch overlaps at random and the peak is two chunks
    monkeypatch.setenv("EFFTH_THREADS", "1")

    X = np.random.default_rng(6).standard_normal((8, 3))
    K = 0.1 * X @ X.T / 3
    act = get_activation("tanh")
    combos = at._close({((0,), (0,), (1,), (1,)), ((1,), (1,), (2,), (3,))})
    _, S = at._all_subsets(8, 4)
    peaks = []
    for B in ((10, 70) if fused == "0" else (35, 70)):
        at._atoms_group(K, S[:B], combos, act, 1e-8, 1.0)       # warm caches
        tracemalloc.start()
        at._atoms_group(K, S[:B], combos, act, 1e-8, 1.0)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0] + 70 * len(combos) * 8 * 12


def test_accuracy_warning_and_bad_method():
    from effth.errors import AccuracyWarning

    K = np.array([[1.0, 0.4], [0.4, 0.7]])
    with pytest.warns(AccuracyWarning):
        AtomTables(K, "tanh", rtol=1e-17).table(((0, 1), (1, 2)))
    with pytest.raises(DomainError, match="method"):
        AtomTables(K, "tanh", method="mc")


def test_ntk_flow_four_inputs_restrict_to_grid_reference(monkeypatch):
    """ntk_flow on 4 unit-scale inputs (the grid path stops at its node cap there): the recursions
    are entrywise in the sample labels, so the entries on 3 of the inputs equal a run on those 3
    inputs alone with the tensor-grid atom tables."""
    import functools
    import importlib

    import effth

    mod = importlib.import_module("effth.pdlt.ntk.ntk_flow")
    X = np.random.default_rng(8).standard_normal((4, 4))
    net = effth.MLP(depth=3, activation="tanh")
    stats = ("P", "A")
    four = mod.ntk_flow(net, X, statistics=stats)
    keep = [0, 2, 3]
    monkeypatch.setattr(mod, "AtomTables", functools.partial(AtomTables, method="grid"))
    three = mod.ntk_flow(net, X[keep], statistics=stats)
    for s in three.tensors:
        ref = three.tensors[s]
        sub = four.tensors[s][(slice(None),) + np.ix_(*[keep] * (ref.ndim - 1))]
        np.testing.assert_allclose(sub, ref, rtol=0, atol=1e-7 * np.abs(ref).max())
    assert four.table_error.max() <= 1e-8


@pytest.mark.parametrize("act", ["erf", "sin"])
def test_closed_form_tables_match_shared_quadrature(act):
    """erf and sin atom tables come from closed forms (erf's four Heaviside factors through the
    quadrivariate orthant probability); against the shared-node quadrature on every subset of
    up to four of five samples, derivative orders up to 3."""
    import effth.numerics.atom_tables as at
    from effth.activations import get_activation

    sig = get_activation(act)
    X = np.random.default_rng(11).standard_normal((5, 3))
    K = 0.8 * X @ X.T / 3 + 0.05
    combos = at._close({((0,), (0,), (0,), (0,)), ((2,), (1,), (0,), (0,)), ((3,), (0,), (1,), (0,)),
                        ((1,), (1,), (1,), (1,))})
    _, S = at._all_subsets(5, 4)
    closed, err, _ = at.dispatched_group(K, S, combos, sig, 1e-12)
    assert not err.any()
    quad, qerr, scale = at._atoms_group(K, S, combos, sig, 1e-12, 1.0)
    assert np.all(qerr <= 1e-12 * scale)
    np.testing.assert_allclose(closed, quad, rtol=0, atol=1e-11 * np.abs(quad).max())
    t = AtomTables(K, sig, rtol=1e-12).table(((0, 0), (1, 0), (2, 0), (3, 0)))   # reads the same values
    assert t[0, 1, 2, 3] == closed[0, combos.index(((0,), (0,), (0,), (0,)))]


def test_closed_forms_give_way_at_small_kernels():
    """erf's closed forms are sums of O(1) terms (absolute error ~eps): an atom of size K^2 at
    K ~ 1e-6 would lose all its digits. Subsets with such inputs go to quadrature, the others
    keep the closed forms; every entry is accurate relative to its own size."""
    from effth.activations import get_activation
    from effth.numerics.closed_forms import closed_form

    sig = get_activation("erf")
    X = np.random.default_rng(12).standard_normal((5, 3))
    X[4] *= 1e-3                                         # K_44 ~ 1e-6
    K = X @ X.T / 3
    fac = ((0, 0), (1, 0), (2, 0), (3, 0))
    tab = AtomTables(K, sig, rtol=1e-10).table(fac)
    for idx in [(0, 1, 2, 4), (1, 2, 3, 4), (0, 1, 2, 3)]:
        ref = gaussian_expectation([(i, "sigma", 0) for i in range(4)], K[np.ix_(idx, idx)], sig,
                                   method="quadrature", rtol=1e-12)
        assert tab[idx] == pytest.approx(float(ref), rel=1e-8)
    # the closed form alone misses at this scale (what the guard prevents)
    small = 1e-6 * K[:4, :4]
    bad = closed_form(sig, [(i, "sigma", 0) for i in range(4)], small[None])[0]
    ref = gaussian_expectation([(i, "sigma", 0) for i in range(4)], small, sig, method="quadrature",
                               rtol=1e-12)
    assert abs(bad / ref - 1) > 1e-6
    got = AtomTables(small, sig, rtol=1e-10).table(fac)[0, 1, 2, 3]
    assert got == pytest.approx(float(ref), rel=1e-8)


def test_kinked_tables_four_samples_against_quadrature():
    """ReLU's atoms of the NTK variance on four distinct inputs (batched closed forms through the
    quadrivariate orthant probability) against the nested quadrature of one entry."""
    from effth.pdlt.ntk.ntk_flow import _KinkedTables

    X = np.random.default_rng(13).standard_normal((5, 4))
    K = 1.5 * X @ X.T / 4
    t = _KinkedTables(K, "relu", rtol=1e-9)
    fac = ((0, 1), (1, 1), (2, 0), (3, 0))                    # <s'_a s'_b s_c s_d>
    tab = t.table(fac)
    idx = (4, 0, 2, 3)
    import warnings

    from effth.errors import AccuracyWarning

    with warnings.catch_warnings():          # the kinks cap the reference at ~6e-7 (its estimate)
        warnings.simplefilter("ignore", AccuracyWarning)
        ref, err = gaussian_expectation([(i, "sigma", o) for i, (_, o) in enumerate(fac)],
                                        K[np.ix_(idx, idx)], "relu", method="quadrature", rtol=1e-7,
                                        return_error=True)
    assert abs(tab[idx] - float(ref)) <= 5 * max(float(err), 1e-7 * abs(float(ref)))
    assert abs(0.9 * tab[idx] - float(ref)) > 5 * max(float(err), 1e-7 * abs(float(ref)))
