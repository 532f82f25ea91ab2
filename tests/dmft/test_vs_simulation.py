"""DMFT against finite-width networks trained by GD (the ground truth of effth.simulation).

The discrepancy is the seed-averaged mean squared difference of outputs and kernels,
``D(N) = E_seeds[ mean (f_N - f)^2 + mean (Phi_N - Phi)^2 + mean (G_N - G)^2 ]``; finite-width
fluctuations are O(N^-1/2) and the mean bias O(N^-1), so ``D(N) ~ 1/N``.
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et

from effth.simulation.training import simulate_training
from effth.dmft import solve_deep_linear
from effth.dmft.solvers.monte_carlo import solve_monte_carlo

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])


def discrepancy(theory, run) -> np.ndarray:
    """Per seed: the mean squared difference over f, Phi^ell, G^ell (fluctuations O(N^-1/2),
    bias O(N^-1): D ~ 1/N)."""
    return (np.mean((run.f - theory.f) ** 2, axis=(1, 2))
            + np.mean((run.phi - theory.phi) ** 2, axis=(1, 2, 3, 4, 5))
            + np.mean((run.g - theory.g) ** 2, axis=(1, 2, 3, 4, 5)))


def width_study(theory, widths, seed, **kw):
    """Seed-averaged ``D(N)`` against networks of each width, the power-law fit ``D ~ N^slope``
    with its standard error (``effth.scaling_fit``, seed-to-seed errors) and the widest run."""
    runs = [simulate_training(X, Y, widths=N, seed=seed, **kw) for N in widths]
    per = [discrepancy(theory, r) for r in runs]
    cmps = [et.compare(np.zeros(1), np.array([d.mean()]), "D",
                       stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])) for d in per]
    return et.scaling_fit(cmps, widths), runs[-1]


def assert_one_over_n(fit, max_se):
    """The slope is -1 within 4.5 standard errors, with an error bar small enough to fail."""
    assert fit.slope_stderr < max_se, fit
    assert abs(fit.slope + 1.0) < 4.5 * fit.slope_stderr, fit


def assert_mean_outputs(theory, wrong, run, name="f"):
    """z-test of the seed-mean outputs at the largest width (their O(1/N) bias is below the
    noise): the theory passes, the same theory at gamma0 x 0.9 is rejected."""
    assert et.compare(theory, run, name).max_abs_z < 4.5
    assert et.compare(wrong, run, name).max_abs_z > 5.0


def test_deep_linear_L3_quick():
    """Quick version: D(N) ~ N^-1 over three widths; the mean outputs at N = 400 pass a z-test
    that rejects gamma0 x 0.9."""
    kw = dict(hidden_layers=3, gamma0=1.0, eta=0.05, steps=21)
    theory = solve_deep_linear(X, Y, **kw)
    fit, run = width_study(theory, [100, 200, 400], seed=range(24), activation="linear", **kw)
    assert fit.error[-1] < 0.05
    assert_one_over_n(fit, max_se=0.25)
    assert_mean_outputs(theory, solve_deep_linear(X, Y, **dict(kw, gamma0=0.9)), run)


@pytest.mark.slow
def test_deep_linear_L3_width_scaling(opt_in_slow):
    """Widths 250..2000, 48 seeds (about 40 s): the default run has test_deep_linear_L3_quick."""
    kw = dict(hidden_layers=3, gamma0=1.0, eta=0.05, steps=21)
    theory = solve_deep_linear(X, Y, **kw)
    fit, run = width_study(theory, [250, 500, 1000, 2000], seed=range(48), activation="linear",
                           **kw)
    print("deep linear L=3:", fit)
    assert_one_over_n(fit, max_se=0.15)
    assert_mean_outputs(theory, solve_deep_linear(X, Y, **dict(kw, gamma0=0.9)), run)


@pytest.mark.slow
@pytest.mark.parametrize("hidden_layers,samples,seeds,widths",
                         [(1, 40000, 32, (100, 200, 400, 800)), (2, 16000, 24, (100, 200, 400))])
def test_tanh_width_scaling(hidden_layers, samples, seeds, widths):
    kw = dict(hidden_layers=hidden_layers, gamma0=1.0, eta=0.1, steps=11)
    theory = solve_monte_carlo(X, Y, activation="tanh", samples=samples, iterations=12, seed=0,
                               **kw)
    # the Monte-Carlo theory carries its own noise floor in D(N) (its sampling error, which does
    # not fall with N): the widths are chosen where the 1/N term is resolved above that floor
    fit, _ = width_study(theory, list(widths), seed=range(seeds), activation="tanh", **kw)
    print(f"tanh L={hidden_layers}:", fit)
    assert_one_over_n(fit, max_se=0.2)


def test_tanh_L1_quadrature_width_scaling():
    """Deterministic two-layer DMFT (quadrature, no Monte-Carlo floor) vs networks: D(N) ~ N^-1
    over four widths within 4.5 standard errors of the fitted slope; the mean outputs at
    N = 2000 pass a z-test that rejects gamma0 x 0.9."""
    from effth.dmft import solve_two_layer
    kw = dict(gamma0=1.0, eta=0.1, steps=11)
    theory = solve_two_layer(X, Y, activation="tanh", **kw)
    fit, run = width_study(theory, [250, 500, 1000, 2000], seed=range(64), activation="tanh",
                           hidden_layers=1, **kw)
    assert_one_over_n(fit, max_se=0.12)
    assert_mean_outputs(theory, solve_two_layer(X, Y, activation="tanh", **dict(kw, gamma0=0.9)),
                        run)


def test_single_site_field_density_matches_network_preactivations():
    """Bordelon & Pehlevan (2022), Fig. 1b-c: the DMFT's single-site preactivations h^l_mu(t_final) (tanh, L = 2,
    gamma0 = 1.5) have the variance and the (non-Gaussian) kurtosis of the width-2000 networks'
    neurons, within 5 standard errors (batches of samples / of neurons); the lazy Gaussian
    (kurtosis 3) is rejected."""
    import numpy as np

    from effth.simulation.training import simulate_training
    from effth.dmft import solve_monte_carlo

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
