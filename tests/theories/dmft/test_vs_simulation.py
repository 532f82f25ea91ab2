"""DMFT against finite-width networks trained by GD (the ground truth of effth.simulation).

The discrepancy is the seed-averaged mean squared difference of outputs and kernels,
``D(N) = E_seeds[ mean (f_N - f)^2 + mean (Phi_N - Phi)^2 + mean (G_N - G)^2 ]``; finite-width
fluctuations are O(N^-1/2) and the mean bias O(N^-1), so ``D(N) ~ 1/N``.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.simulation.training import simulate_training
from effth.theories.dmft import solve_deep_linear
from effth.theories.dmft.nonlinear import solve_monte_carlo

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])


def discrepancy(theory, run) -> float:
    """Seed average of the mean squared difference over f, Phi^ell, G^ell."""
    per_seed = (np.mean((run.f - theory.f) ** 2, axis=(1, 2))
                + np.mean((run.phi - theory.phi) ** 2, axis=(1, 2, 3, 4, 5))
                + np.mean((run.g - theory.g) ** 2, axis=(1, 2, 3, 4, 5)))
    return float(per_seed.mean())


def width_study(theory, widths, seeds, **kw):
    d = [discrepancy(theory, simulate_training(X, Y, width=N, seeds=seeds, **kw)) for N in widths]
    slope = np.polyfit(np.log(widths), np.log(d), 1)[0]
    return np.array(d), slope


def test_deep_linear_L3_quick():
    """Quick version: the discrepancy falls about 4x from N = 250 to 1000 and is small."""
    kw = dict(depth=3, gamma0=1.0, eta=0.05, steps=21)
    theory = solve_deep_linear(X, Y, **kw)
    d, slope = width_study(theory, [250, 1000], seeds=range(6), activation="linear", **kw)
    assert d[-1] < 0.05
    assert -1.5 < slope < -0.6, (d, slope)


@pytest.mark.slow
def test_deep_linear_L3_width_scaling():
    kw = dict(depth=3, gamma0=1.0, eta=0.05, steps=21)
    theory = solve_deep_linear(X, Y, **kw)
    d, slope = width_study(theory, [250, 500, 1000, 2000], seeds=range(8), activation="linear",
                           **kw)
    print("deep linear L=3: D(N) =", d, "slope", slope)
    assert abs(slope + 1.0) < 0.3, (d, slope)


@pytest.mark.slow
@pytest.mark.parametrize("depth,samples,seeds", [(1, 40000, 32), (2, 16000, 8)])
def test_tanh_width_scaling(depth, samples, seeds):
    kw = dict(depth=depth, gamma0=1.0, eta=0.1, steps=11)
    theory = solve_monte_carlo(X, Y, activation="tanh", samples=samples, iterations=12, seed=0,
                               **kw)
    d, slope = width_study(theory, [250, 500, 1000, 2000], seeds=range(seeds), activation="tanh",
                           **kw)
    print(f"tanh L={depth}: D(N) =", d, "slope", slope)
    assert abs(slope + 1.0) < 0.3, (d, slope)


def test_tanh_L1_quadrature_width_scaling():
    """Deterministic two-layer DMFT (Gauss-Hermite, no MC floor) vs networks: D(N) ~ 1/N."""
    from effth.theories.dmft import solve_two_layer
    kw = dict(gamma0=1.0, eta=0.1, steps=11)
    theory = solve_two_layer(X, Y, activation="tanh", **kw)
    d, slope = width_study(theory, [250, 500, 1000, 2000], seeds=range(64), activation="tanh",
                           depth=1, **kw)
    assert abs(slope + 1.0) < 0.25, (d, slope)
