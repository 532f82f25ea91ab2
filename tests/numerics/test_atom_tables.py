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
