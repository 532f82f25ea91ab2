"""Deep linear DMFT with unequal hidden widths ``N_l = a_l N`` (Bordelon & Pehlevan (2022), App. D.8).

Three ways: (a) ``solve_deep_linear(width_ratios=...)``; (b) the paper's statement that layer
``l`` feels the feature strength ``gamma0 / sqrt(a_l)`` (eq. (58)), so that only ``gamma0^2 / a_l``
matters, and ``a_l = 1`` is the equal-width theory; (c) trained deep linear muP networks with
widths ``(N, 2N, N/2)`` from :func:`effth.simulation.simulate_training` (which never imports
theory code): the seed-to-seed squared gap falls like ``1/N``, and the equal-width theory (the
same ``gamma0``, every ``a_l = 1``) is rejected.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import effth as et
from effth.dmft import solve_deep_linear
from effth.errors import DomainError
from effth.simulation import simulate_training

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
Y = np.array([1.0, -0.5, 0.3])
KW = dict(hidden_layers=3, gamma0=1.0, eta=0.1, steps=15)
RATIOS = (2.0, 4.0, 1.0)          # widths (N, 2N, N/2) relative to the reference N_L = N/2


def _solve(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_deep_linear(X, Y, **dict(KW, **kw))


def _train(N, networks, seed=7):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_training(X, Y, widths=(N, 2 * N, N // 2), activation="linear",
                                 parameterization="mup", networks=networks, seed=seed, **KW)


def test_unit_ratios_are_the_equal_width_solver_bit_for_bit():
    ref = _solve()
    for method in ("march", "sweep"):
        base = _solve(method=method)
        one = _solve(method=method, width_ratios=[1, 1.0, np.float64(1)])
        for name in ("f", "phi", "g", "A", "B", "delta"):
            np.testing.assert_array_equal(getattr(one, name), getattr(base, name))
    # with the extensions too (decay, bias, several outputs go through the same layer loop)
    kw = dict(weight_decay=0.05, bias=True, eta=0.02)
    np.testing.assert_array_equal(_solve(width_ratios=(1, 1, 1), **kw).f, _solve(**kw).f)
    assert not np.allclose(_solve(width_ratios=RATIOS).f, ref.f)


def test_only_gamma0_squared_over_a_matters_and_methods_agree():
    """(gamma0, a) and (c gamma0, c^2 a) give the same network (eq. (58)); 'sweep' = 'march'."""
    a = _solve(width_ratios=(1.0, 2.0, 0.5))
    b = _solve(width_ratios=RATIOS, gamma0=np.sqrt(2.0))
    np.testing.assert_allclose(b.f, a.f, rtol=0, atol=1e-13)
    np.testing.assert_allclose(b.phi, a.phi, rtol=0, atol=1e-12)
    s = _solve(width_ratios=RATIOS, method="sweep")
    np.testing.assert_allclose(s.f, _solve(width_ratios=RATIOS).f, rtol=0, atol=1e-10)
    # a uniform ratio is the equal-width theory at gamma0 / sqrt(a)
    np.testing.assert_allclose(_solve(width_ratios=(4.0,) * 3).f, _solve(gamma0=0.5).f,
                               rtol=0, atol=1e-13)
    # one wide layer moves less: a_1 -> infinity freezes layer 1's features (H^1 = K^x)
    wide = _solve(width_ratios=(1e12, 1.0, 1.0))
    T, n = KW["steps"], X.shape[0]
    np.testing.assert_allclose(wide.phi[0], np.tile(X @ X.T / 4, (T, T)).reshape(T, n, T, n),
                               atol=1e-5)


def test_bad_ratios_raise():
    for bad, match in [((1.0, 0.0, 1.0), "> 0"), ((1.0, -2.0, 1.0), "> 0"),
                       ((1.0, np.nan, 1.0), "> 0"), ((1.0, 2.0), "per hidden layer"),
                       ((1.0, 1.0, 1.0, 1.0), "per hidden layer"), (2.0, "sequence"),
                       ("abc", "sequence"), (((1, 2), (3, 4)), "sequence")]:
        with pytest.raises(DomainError, match=match):
            _solve(width_ratios=bad)


def test_trainer_unequal_widths_parameterizations_agree():
    """mean field and muP with per-layer fan-in scaling are the same network (App. N) also at
    unequal widths; the kernels are normalized by each layer's own width."""
    kw = dict(KW, widths=(6, 12, 3), activation="linear", seed=3)
    mf = simulate_training(X, Y, parameterization="mean_field", **kw)
    mup = simulate_training(X, Y, parameterization="mup", **kw)
    np.testing.assert_allclose(mup.f, mf.f, rtol=1e-9, atol=1e-12)       # rounding only
    np.testing.assert_allclose(mup.phi, mf.phi, rtol=1e-9, atol=1e-12)
    assert mf.widths == (6, 12, 3)
    with pytest.raises(DomainError, match="equal hidden widths"):
        simulate_training(X, Y, parameterization="mup", record_preactivations=True, **kw)


def test_dmft_vs_unequal_width_networks():
    """Seed means of f and the eNTK of 96 networks with widths (128, 256, 64) agree with the
    unequal-width DMFT within 4.5 SE; the equal-width theory at the same gamma0 fails (> 6 SE)."""
    run = _train(128, 96)
    th = _solve(width_ratios=RATIOS)
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(th, run, "ntk").max_abs_z < 4.5
    equal = _solve()
    assert et.compare(equal, run, "f").max_abs_z > 6


def _gap(th, run):
    """Per network: mean squared difference over f, Phi^l(t, s), G^l(t, s) and the eNTK
    (fluctuations O(N^-1/2), bias O(N^-1): the mean falls like 1/N)."""
    return (np.mean((run.f - th.f) ** 2, axis=(1, 2))
            + np.mean((run.phi - th.phi) ** 2, axis=(1, 2, 3, 4, 5))
            + np.mean((run.g - th.g) ** 2, axis=(1, 2, 3, 4, 5))
            + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))


@pytest.mark.slow
def test_width_study_one_over_n(opt_in_slow):
    """Squared gap vs N = 64 .. 512 (widths (N, 2N, N/2), 256 networks each): slope -1 within
    4 SE (measured -0.971 +- 0.040); the equal-width theory's gap stops falling (slope
    -0.34 +- 0.03, rejected).  About 40 s on one core."""
    widths = [64, 128, 256, 512]
    th, equal = _solve(width_ratios=RATIOS), _solve()
    cmps, cmps_eq = [], []
    for N in widths:
        run = _train(N, 256, seed=N)
        for theory, out in ((th, cmps), (equal, cmps_eq)):
            d = _gap(theory, run)
            out.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                                  stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    assert fit.slope_stderr < 0.2, fit
    assert abs(fit.slope + 1.0) < 4.0 * fit.slope_stderr, fit
    assert not et.scaling_fit(cmps_eq, widths).consistent_with(-1.0, sigmas=4.0)
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(equal, run, "f").max_abs_z > 10


def test_monte_carlo_solver_unequal_widths():
    """The Monte-Carlo solver (sampled fields, Jacobian responses with the factors
    sqrt(a_{l-1}/a_l), sqrt(a_{l+1}/a_l) of eqs. (60), (63)) at phi = identity agrees with the
    closed deep linear equations within 4.5 SE (f, Phi^l, G^l); the equal-width theory is
    rejected (> 8 SE); unit ratios reproduce the equal-width Monte Carlo bit for bit."""
    from effth.dmft import solve_monte_carlo
    kw = dict(KW, steps=10, activation="linear", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mc = solve_monte_carlo(X, Y, samples=2000, iterations=20, average=6, width_ratios=RATIOS,
                               **kw)
        small = dict(kw, samples=256, iterations=3)
        b0, b1 = solve_monte_carlo(X, Y, **small), solve_monte_carlo(X, Y, width_ratios=(1,) * 3,
                                                                     **small)
    for name in ("f", "phi", "g", "A", "B"):
        np.testing.assert_array_equal(getattr(b1, name), getattr(b0, name))
    th, equal = _solve(width_ratios=RATIOS, steps=10), _solve(steps=10)
    assert et.compare(th, mc, "f").max_abs_z < 4.5
    worst = 0.0
    for ell in (1, 2, 3):
        for q in ("phi", "g"):
            assert et.compare(th, mc, q, layer=ell).max_abs_z < 4.5, (q, ell)
            worst = max(worst, et.compare(equal, mc, q, layer=ell).max_abs_z)
    assert worst > 8
    with pytest.raises(DomainError, match="per hidden layer"):
        solve_monte_carlo(X, Y, width_ratios=(1.0, 2.0), **kw)
