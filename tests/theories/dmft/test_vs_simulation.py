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


def width_study(theory, widths, seed, **kw):
    d = [discrepancy(theory, simulate_training(X, Y, widths=N, seed=seed, **kw)) for N in widths]
    slope = np.polyfit(np.log(widths), np.log(d), 1)[0]
    return np.array(d), slope


def test_deep_linear_L3_quick():
    """Quick version: the discrepancy falls about 4x from N = 250 to 1000 and is small."""
    kw = dict(hidden_layers=3, gamma0=1.0, eta=0.05, steps=21)
    theory = solve_deep_linear(X, Y, **kw)
    d, slope = width_study(theory, [250, 1000], seed=range(6), activation="linear", **kw)
    assert d[-1] < 0.05
    assert -1.5 < slope < -0.6, (d, slope)


@pytest.mark.slow
def test_deep_linear_L3_width_scaling():
    kw = dict(hidden_layers=3, gamma0=1.0, eta=0.05, steps=21)
    theory = solve_deep_linear(X, Y, **kw)
    d, slope = width_study(theory, [250, 500, 1000, 2000], seed=range(8), activation="linear",
                           **kw)
    print("deep linear L=3: D(N) =", d, "slope", slope)
    assert abs(slope + 1.0) < 0.3, (d, slope)


@pytest.mark.slow
@pytest.mark.parametrize("hidden_layers,samples,seeds", [(1, 40000, 32), (2, 16000, 8)])
def test_tanh_width_scaling(hidden_layers, samples, seeds):
    kw = dict(hidden_layers=hidden_layers, gamma0=1.0, eta=0.1, steps=11)
    theory = solve_monte_carlo(X, Y, activation="tanh", samples=samples, iterations=12, seed=0,
                               **kw)
    d, slope = width_study(theory, [250, 500, 1000, 2000], seed=range(seeds), activation="tanh",
                           **kw)
    print(f"tanh L={hidden_layers}: D(N) =", d, "slope", slope)
    assert abs(slope + 1.0) < 0.3, (d, slope)


def test_tanh_L1_quadrature_width_scaling():
    """Deterministic two-layer DMFT (Gauss-Hermite, no MC floor) vs networks: D(N) ~ 1/N."""
    from effth.theories.dmft import solve_two_layer
    kw = dict(gamma0=1.0, eta=0.1, steps=11)
    theory = solve_two_layer(X, Y, activation="tanh", **kw)
    d, slope = width_study(theory, [250, 500, 1000, 2000], seed=range(64), activation="tanh",
                           hidden_layers=1, **kw)
    assert abs(slope + 1.0) < 0.25, (d, slope)


def test_single_site_field_density_matches_network_preactivations():
    """Bordelon & Pehlevan (2022), Fig. 1b-c: the DMFT's single-site preactivations h^l_mu(t_final) (tanh, L = 2,
    gamma0 = 1.5) have the variance and the (non-Gaussian) kurtosis of the width-2000 networks'
    neurons, within 5 standard errors (batches of samples / of neurons); the lazy Gaussian
    (kurtosis 3) is rejected."""
    import numpy as np

    from effth.simulation.training import simulate_training
    from effth.theories.dmft import solve_monte_carlo

    kx = np.array([[1.0, 0.5], [0.5, 1.0]])
    X, y = np.linalg.cholesky(2 * kx), np.array([1.0, -0.5])
    kw = dict(hidden_layers=2, gamma0=1.5, eta=0.1, steps=10)
    res = solve_monte_carlo(X, y, samples=8000, iterations=12, keep_fields=True, seed=3, **kw)
    nets = simulate_training(X, y, widths=2000, activation="tanh", seed=range(4),
                             record_preactivations=True, **kw)

    def moments(batches):
        v = np.array([np.var(b) for b in batches])
        k = np.array([np.mean((b - b.mean()) ** 4) / np.var(b) ** 2 for b in batches])
        return (v.mean(), v.std(ddof=1) / np.sqrt(len(v))), (k.mean(), k.std(ddof=1) / np.sqrt(len(k)))

    S = res.fields.shape[1] // 2
    for ell in range(2):
        h = res.fields[ell, :, -1, 0]
        pairs = np.stack([h[:S], h[S:]], axis=1)               # antithetic partners together
        dmft = moments([p.ravel() for p in np.array_split(pairs, 16)])
        nn = moments([b for s in range(4) for b in np.array_split(nets.h[s, ell, -1, 0], 5)])
        for (a, sa), (b, sb) in zip(dmft, nn):
            assert abs(a - b) < 5 * np.hypot(sa, sb), (ell, a, sa, b, sb)
        assert abs(nn[1][0] - 3.0) > 5 * nn[1][1] or ell == 0
