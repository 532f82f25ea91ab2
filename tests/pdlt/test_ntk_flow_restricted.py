"""ntk_flow restricted to the entries with at most one (or two) test inputs (PDLT §∞.2).

The restricted flow must equal the full flow on its entries (the entries are closed under the
recursions), leave the others NaN, cost fewer subsets, and give the same trained prediction.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import DomainError
from effth.numerics.atom_tables import AtomTables
from effth.numerics.sample_blocks import SampleRestriction
from effth.pdlt import finite_width_covariance, finite_width_mean
from effth.pdlt.ntk.ntk_flow import ntk_flow

N, P = 7, 4


@pytest.fixture(scope="module", params=["tanh", "erf"])
def setting(request):
    """tanh: shared-node quadrature; erf: closed-form atom tables (with the restricted layout)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, 3))
    kw = dict(K1=0.1 + X @ X.T / 3, Theta1=1.0 + X @ X.T / 3, depth=3, activation=request.param,
              c_w=1.0, c_b=0.1, rtol=1e-10)
    full = ntk_flow(**kw)
    return kw, full, {m: ntk_flow(**kw, n_train=P, max_test=m) for m in (1, 2)}


def test_mask_counts_distinct_test_samples():
    r = SampleRestriction(P, 1)
    m = r.mask(N, 4)
    B = N - P
    # all-training entries, plus per test input the sequences over it and the training inputs
    # that contain it
    assert m.sum() == P ** 4 + B * ((P + 1) ** 4 - P ** 4)
    assert m[P, P, 0, P] and not m[P, P + 1, 0, 0]
    assert SampleRestriction(P, 2).mask(N, 2).all()
    assert len(r.entries(N, 4)[0]) == m.sum()


def test_restricted_entries_counts_the_mask_without_allocating():
    """restricted_entries (inclusion-exclusion over the test inputs that appear) against the
    mask counted entry by entry, for ranks 2-4 and max_test 0-4; without the inclusion-exclusion
    (every assignment of P + j symbols) the counts would be larger."""
    from effth.numerics.sample_blocks import restricted_entries
    for P_, Q_ in ((0, 3), (3, 0), (2, 4), (4, 3)):
        for rank in (2, 3, 4):
            for m in range(5):
                want = int(SampleRestriction(P_, m).mask(P_ + Q_, rank).sum())
                assert restricted_entries(P_, Q_, m, rank) == want, (P_, Q_, m, rank)
                assert SampleRestriction(P_, m).count(P_ + Q_, rank) == want
    assert restricted_entries(4, 3, 2, 4) < 3 * (4 + 2) ** 4
    with pytest.raises(DomainError, match="n_test"):
        restricted_entries(3, -1, 1)


@pytest.mark.parametrize("max_test", [1, 2])
def test_restricted_flow_equals_full_flow_on_its_entries(setting, max_test):
    _, full, restricted = setting
    r = restricted[max_test]
    names = [s for s in full.tensors] + ["V", "G1", "K"]
    for name in names:
        A, B = full[name], r[name]
        m = np.broadcast_to(SampleRestriction(P, max_test).mask(N, A.ndim - 1), A.shape)
        scale = np.abs(A).max()
        assert np.max(np.abs(A[m] - B[m])) <= 1e-8 * scale, name
        # the others are not computed: NaN from layer 2 on (layer 1 is exactly zero); the
        # two-sample tensors are evaluated in full and NaN where they read a skipped entry
        if A.ndim == 5 and (~m[1:]).any():
            assert np.isnan(B[1:][~m[1:]]).all(), name


def test_restricted_atoms_skip_subsets():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 3))
    K = X @ X.T / 3 + 0.1
    pat = ((0, 1), (1, 1), (2, 0), (3, 0))
    t = AtomTables(K, "tanh", rtol=1e-10, restrict=SampleRestriction(P, 1))
    full = AtomTables(K, "tanh", rtol=1e-10).table(pat)
    T = t.table(pat)
    m = SampleRestriction(P, 1).mask(N, 4)
    assert np.max(np.abs(T[m] - full[m])) <= 1e-9 * np.abs(full).max()
    assert np.isnan(T[~m]).all()
    # only C(P, 4) + (N - P) C(P, 3) four-sample subsets were integrated
    store = t._store[4]
    assert max(int((~np.isnan(v)).sum()) for v in store.vals) == 1 + (N - P) * 4


def test_trained_prediction_from_restricted_flow(setting):
    _, full, restricted = setting
    y = np.array([[0.3], [-0.5], [0.8], [0.1]])
    for fn, m in ((finite_width_mean, 1), (finite_width_covariance, 2)):
        a = fn(full, y, n_train=P, widths=64, algorithm="gradient_flow")
        b = fn(restricted[m], y, n_train=P, widths=64, algorithm="gradient_flow")
        stem = a.stem
        for name in (stem, stem + "1"):
            va, vb = a.value(name), b.value(name)
            assert np.max(np.abs(va - vb)) <= 1e-7 * np.abs(va).max(), (fn.__name__, name)


def test_covariance_needs_two_test_inputs(setting):
    _, _, restricted = setting
    y = np.array([[0.3], [-0.5], [0.8], [0.1]])
    with pytest.raises(DomainError, match="max_test=2"):
        finite_width_covariance(restricted[1], y, n_train=P, algorithm="gradient_flow")


def test_bad_restriction(setting):
    kw, _, _ = setting
    with pytest.raises(DomainError, match="exceeds"):
        ntk_flow(**kw, n_train=N + 1)
    with pytest.raises(DomainError, match="max_test"):
        ntk_flow(**kw, n_train=P, max_test=-1)


def test_atom_cache_reuses_the_subsets_of_the_first_flow(setting, monkeypatch):
    """A max_test=2 flow seeded with the max_test=1 flow's atoms evaluates only the subsets
    with two test inputs, equals the unseeded flow within rtol, and equals the first flow to the
    bit on the entries they share (the mean and covariance of one prediction read the same
    tensors)."""
    import effth.numerics.atom_tables as at

    kw, _, restricted = setting
    cache: list = []
    first = ntk_flow(**kw, n_train=P, max_test=1, atom_cache=cache)
    assert len(cache) == 2 and all(c["nbytes"] > 0 for c in cache)
    counted = []
    real = at.AtomTables._group

    def spy(self, samples, combos, mult):
        counted.append(samples.copy())
        return real(self, samples, combos, mult)

    monkeypatch.setattr(at.AtomTables, "_group", spy)
    second = ntk_flow(**kw, n_train=P, max_test=2, atom_cache=cache)
    # every subset evaluated here (quadrature for tanh, closed forms for erf) holds exactly two
    # test inputs
    assert counted and all(((S >= P).sum(axis=1) == 2).all() for S in counted)
    for name in list(first.tensors) + ["V", "K"]:
        A, B, C = restricted[2][name], second[name], first[name]
        m2 = np.broadcast_to(SampleRestriction(P, 2).mask(N, A.ndim - 1), A.shape)
        m1 = np.broadcast_to(SampleRestriction(P, 1).mask(N, A.ndim - 1), A.shape)
        assert np.max(np.abs(A[m2] - B[m2])) <= 1e-8 * np.abs(A[m2]).max(), name
        assert np.array_equal(B[m1], C[m1]), name


def test_atom_cache_is_ignored_for_another_kernel(setting):
    """Snapshots of another network's layers are not taken over (the kernels differ)."""
    kw, _, restricted = setting
    cache: list = []
    ntk_flow(**{**kw, "c_b": 0.3}, n_train=P, max_test=1, atom_cache=cache)
    second = ntk_flow(**kw, n_train=P, max_test=2, atom_cache=cache)
    A = restricted[2]["R"]
    m = np.broadcast_to(SampleRestriction(P, 2).mask(N, 4), A.shape)
    assert np.max(np.abs(A[m] - second["R"][m])) <= 1e-8 * np.abs(A[m]).max()


def test_bad_atom_cache(setting):
    kw, _, _ = setting
    with pytest.raises(DomainError, match="n_train"):
        ntk_flow(**kw, atom_cache=[])
    with pytest.raises(DomainError, match="tuple"):
        ntk_flow(**kw, n_train=P, atom_cache=())
