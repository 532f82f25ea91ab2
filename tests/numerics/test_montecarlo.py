"""Monte-Carlo backend: reproducibility, explicit RNG, agreement within standard errors."""

from __future__ import annotations

import numpy as np
import pytest

from effth.activations import get_activation
from effth.errors import DomainError
from effth.numerics import gaussian_expectation
from effth.numerics.montecarlo import mc_expectation

K2 = np.array([[1.0, 0.4], [0.4, 0.8]])


@pytest.mark.mc
@pytest.mark.parametrize("name", ["tanh", "relu", "gelu"])
def test_mc_agrees_with_quadrature(name):
    F = [(0, "sigma", 0), (1, "sigma", 0), (1, "z", 2)]
    q = gaussian_expectation(F, K2, name, method="quadrature")
    v, se = gaussian_expectation(F, K2, name, method="mc", seed=11, n_samples=400_000, return_error=True)
    assert 0 < float(se) < 0.005
    assert abs(float(v) - float(q)) < 5 * float(se)
    assert abs(float(v) - 0.9 * float(q)) > 5 * float(se)        # a coefficient x 0.9 is rejected


@pytest.mark.mc
def test_mc_delta_terms_conditioned_exactly():
    # relu'' = delta: conditioning is exact, MC only on the remaining factor
    F = [(0, "sigma", 2), (1, "sigma", 0)]
    q = gaussian_expectation(F, K2, "relu", method="quadrature")
    v, se = gaussian_expectation(F, K2, "relu", method="mc", seed=5, n_samples=50_000, return_error=True)
    assert abs(float(v) - float(q)) < 5 * float(se)


def test_reproducible_and_no_global_state():
    F = [(0, "sigma", 0), (0, "sigma", 0)]
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    a = gaussian_expectation(F, [[1.0]], "tanh", method="mc", n_samples=2000)
    b = gaussian_expectation(F, [[1.0]], "tanh", method="mc", n_samples=2000, seed=0)
    c = gaussian_expectation(F, [[1.0]], "tanh", method="mc", n_samples=2000, seed=np.random.default_rng(0))
    d = gaussian_expectation(F, [[1.0]], "tanh", method="mc", n_samples=2000, seed=1)
    assert np.random.random() == before          # global state untouched
    assert a == b == c and a != d


def test_antithetic_exact_for_odd_and_batch():
    # odd integrands are exactly zero with antithetic pairs
    v, se = mc_expectation([(0, "sigma", 0)], np.array([[1.0]]), get_activation("tanh"), seed=0,
                           n_samples=1000, return_error=True)
    assert float(v) == 0.0 and float(se) == 0.0
    K = np.stack([K2, 0.5 * K2, np.ones((2, 2))])
    v, se = mc_expectation([(0, "z", 1), (1, "z", 1)], K, None, seed=2, n_samples=200_000,
                           return_error=True)
    assert v.shape == (3,) and np.all(se > 0)
    assert np.all(np.abs(v - K[:, 0, 1]) < 5 * se)                # E[z1 z2] = K12 per batch entry
    assert np.all(np.abs(v - 0.9 * K[:, 0, 1]) > 5 * se)          # K12 x 0.9 is rejected
    with pytest.raises(DomainError):
        mc_expectation([(0, "z", 1)], np.eye(1), None, n_samples=1)
