"""Langevin noise together with heavy-ball momentum: underdamped Langevin dynamics in discrete
time (Bordelon & Pehlevan 2022, app. K noise kernel filtered by the app. L memory kernel).

The trainer adds the noise to the heavy-ball increment, ``v <- mu v + (1 - mu) (lr grad - eta
lambda theta + sigma xi)``; the DMFT solvers get the same dynamics from
``effth.dmft.grid.parameter_filter``: the noise passes the momentum memory ``k``,
``kappa(t, s) = a(t) a(s) + sigma^2 sum_r k(t-1-r) k(s-1-r)``.  Checked here: (a) the limits
``mu -> 0`` (Langevin) and ``temperature -> 0`` (momentum GD) to round-off; (b) the noise kernel
against a direct simulation of the scalar recursion and its stationary variance, the prior
``temperature / weight_decay``; (c) the deep linear DMFT against linear networks trained with
both (N = 128), rejecting ``temperature`` x 0.9 and / 0.9; (d) the Monte-Carlo solver against
the deep linear DMFT; (e) the heavy-ball step bound.
"""

import numpy as np
import pytest

from effth.dmft import solve_deep_linear, solve_monte_carlo, solve_two_layer
from effth.dmft.grid import langevin_noise, parameter_filter
from effth.dmft.solvers.lazy import lazy_kernels
from effth.errors import DomainError
from effth.simulation import simulate_training

from ._sampled_checks import gap_slope

X = np.array([[1.0, 0.3], [0.2, -1.0]])
Y = np.array([1.0, -0.5])
L = 2
TEMP, WD, MU = 0.5, 1.0, 0.6       # prior weight variance TEMP / WD = 1/2
TINY_MU = float(np.exp(-40.0))      # mu = exp(-eta / tau), tau = eta / 40: below 1e-17


# ----------------------------------------------------------------- (a) limits to round-off

def test_momentum_to_zero_is_langevin_and_temperature_to_zero_is_momentum_gd():
    kw = dict(hidden_layers=L, gamma0=1.0, eta=0.2, steps=20, weight_decay=WD)
    lang = solve_deep_linear(X, Y, temperature=TEMP, **kw)
    both = solve_deep_linear(X, Y, temperature=TEMP, momentum=TINY_MU, **kw)
    mom = solve_deep_linear(X, Y, momentum=MU, **kw)
    cold = solve_deep_linear(X, Y, temperature=1e-300, momentum=MU, **kw)
    for name in ("f", "phi", "g", "A", "B"):
        np.testing.assert_allclose(getattr(both, name), getattr(lang, name), rtol=0, atol=1e-13)
    for name in ("f", "phi", "g"):
        np.testing.assert_allclose(getattr(cold, name), getattr(mom, name), rtol=0, atol=1e-13)
    # responses: to the total sources with a temperature, to the undecayed ones without (the
    # solver's convention), which differ by the initial factor a(s) of the source time s
    a = parameter_filter(0.2, 20, WD, 0.0, MU).init[None, None, None, :, None]
    np.testing.assert_allclose(cold.A * a, mom.A, rtol=0, atol=1e-13)
    np.testing.assert_allclose(cold.B * a, mom.B, rtol=0, atol=1e-13)
    # and the two limits differ from each other by far more than round-off
    assert np.max(np.abs(lang.f - mom.f)) > 1e-2


def test_limits_in_the_monte_carlo_solver_and_the_trainer():
    args = dict(hidden_layers=L, gamma0=1.0, eta=0.2, steps=6, samples=128, iterations=3,
                seed=4, replicas=1, activation="tanh", weight_decay=WD, temperature=TEMP)
    a = solve_monte_carlo(X, Y, **args)
    b = solve_monte_carlo(X, Y, momentum=TINY_MU, **args)
    # round-off: the two paths sum kappa differently (closed form / filtered noise), and the
    # sources are drawn through the symmetric square root of nearly singular covariances, which
    # turns a round-off eps into ~sqrt(eps): measured 1.8e-9 in G for mu = e^-40, e^-80 and
    # 1e-300 alike, and 9e-10 for temperature x (1 + 2^-52) at mu = 0
    for name in ("f", "phi", "g", "A", "B"):
        x = getattr(a, name)
        np.testing.assert_allclose(getattr(b, name), x, rtol=0, atol=1e-8 * np.max(np.abs(x)))
    tk = dict(hidden_layers=L, widths=16, gamma0=1.0, eta=0.2, steps=8, activation="tanh",
              seed=2, weight_decay=WD)
    lang = simulate_training(X, Y, temperature=TEMP, **tk)
    both = simulate_training(X, Y, temperature=TEMP, momentum=TINY_MU, **tk)
    np.testing.assert_allclose(both.f, lang.f, rtol=0, atol=1e-12)
    mom = simulate_training(X, Y, momentum=MU, **tk)
    cold = simulate_training(X, Y, temperature=1e-300, momentum=MU, **tk)
    np.testing.assert_allclose(cold.f, mom.f, rtol=0, atol=1e-12)
    assert np.max(np.abs(both.f - mom.f)) > 1e-2


# ----------------------------------------------------------------- (b) the noise kernel

def test_noise_kernel_is_the_filtered_recursion_and_keeps_the_prior():
    eta, T = 0.2, 25
    flt = parameter_filter(eta, T, WD, TEMP, MU)
    sigma = np.sqrt(langevin_noise(eta, WD, TEMP, MU))
    # direct simulation of theta, v with unit initial variance (no gradient): an independent
    # implementation of the update the trainer applies to every parameter
    rng = np.random.default_rng(0)
    M = 200_000
    theta, v = rng.standard_normal(M), np.zeros(M)
    path = np.empty((T, M))
    for t in range(T):
        path[t] = theta
        v = MU * v + (1 - MU) * (-eta * WD * theta + sigma * rng.standard_normal(M))
        theta = theta + v
    emp = path @ path.T / M
    se = np.sqrt((flt.kappa ** 2 + np.outer(np.diag(flt.kappa), np.diag(flt.kappa))) / M)
    assert np.max(np.abs(emp - flt.kappa) / se) < 5
    # a wrong theory, the noise variance x 0.9, is rejected
    lag = np.subtract.outer(np.arange(T), np.arange(T)) - 1
    F = np.where(lag >= 0, flt.memory[np.maximum(lag, 0)], 0.0)
    wrong = flt.kappa - 0.1 * sigma ** 2 * F @ F.T
    assert np.max(np.abs(emp - wrong) / se) > 8
    # the AR(2) stationary variance is the prior TEMP / WD exactly
    long = parameter_filter(eta, 400, WD, TEMP, MU)
    assert abs(long.kappa[-1, -1] - TEMP / WD) < 1e-12
    # the GD form at mu = 0
    assert langevin_noise(eta, WD, TEMP, 0.0) == TEMP * (1 - (1 - eta * WD) ** 2) / WD
    assert np.isclose(langevin_noise(eta, WD, TEMP, 1e-15), langevin_noise(eta, WD, TEMP, 0.0),
                      rtol=1e-13, atol=0)


# ----------------------------------------------------------------- (c) networks (ground truth)

def test_underdamped_langevin_networks_agree_with_dmft_and_reject_wrong_temperature():
    eta, T, N, S = 0.2, 20, 128, 100
    kw = dict(hidden_layers=L, gamma0=1.0, eta=eta, steps=T, weight_decay=WD, momentum=MU)
    r = solve_deep_linear(X, Y, temperature=TEMP, **kw)
    run = simulate_training(X, Y, widths=N, activation="linear", seed=7, networks=S,
                            temperature=TEMP, record_kernels=False, parameterization="mup", **kw)
    fse = run.stderr("f")
    t = np.arange(1, T)                                           # f(0) = 0 exactly
    z = (run.value("f")[t] - r.f[t]) / fse[t]
    assert np.all(np.abs(z) < 5), z
    ph = run.phi[:, :, -1, :, -1, :]                              # (S, L, n, n) final time
    phm, phs = ph.mean(0), ph.std(0, ddof=1) / np.sqrt(S)
    z = (phm - r.phi[:, -1, :, -1, :]) / phs
    assert np.all(np.abs(z) < 5), z
    for temp in (0.9 * TEMP, TEMP / 0.9):                          # temperature x 0.9, beta x 0.9
        wrong = solve_deep_linear(X, Y, temperature=temp, **kw)
        zw = (phm - wrong.phi[:, -1, :, -1, :]) / phs
        assert np.max(np.abs(zw)) > 8, zw


# ----------------------------------------------------------------- (d) Monte Carlo vs closed form

def test_monte_carlo_linear_is_the_deep_linear_dmft():
    kw = dict(hidden_layers=L, gamma0=1.0, eta=0.2, steps=12, weight_decay=WD, momentum=MU)
    dl = solve_deep_linear(X, Y, temperature=TEMP, **kw)
    # 16 replicas: the standard error has 15 degrees of freedom (with the default 8 its own
    # scatter made a 6-SE outlier in one measured sweep count)
    mc = solve_monte_carlo(X, Y, temperature=TEMP, activation="linear", responses="stein",
                           samples=4000, replicas=16, seed=1, **kw)
    se = mc.stderr("f")
    t = np.arange(1, 12)
    z = (mc.f[t] - dl.f[t]) / se[t]
    assert np.max(np.abs(z)) < 5, z
    zp = (mc.phi[:, -1, :, -1] - dl.phi[:, -1, :, -1]) / mc.stderr("phi")[:, -1, :, -1]
    assert np.max(np.abs(zp)) < 5, zp
    wrong = solve_deep_linear(X, Y, temperature=TEMP / 0.9, **kw)
    zw = (mc.phi[:, -1, :, -1] - wrong.phi[:, -1, :, -1]) / mc.stderr("phi")[:, -1, :, -1]
    assert np.max(np.abs(zw)) > 8, zw


# ----------------------------------------------------------------- (e) the heavy-ball step bound

def test_heavy_ball_step_bound():
    """``eta (lambda_max(K_eq) + lambda) < 2 (1 + mu) / (1 - mu)`` with ``K_eq`` the lazy NTK at
    weight variance ``max(1, temperature / lambda)``; here ``temperature / lambda = 1/3``: the
    initial NTK."""
    mu, wd = 0.3, 0.3
    kx = X @ X.T / 2
    lmax = np.linalg.eigvalsh(lazy_kernels(kx, hidden_layers=L)[3])[-1]
    edge = 2 * (1 + mu) / (1 - mu)
    eta_edge = edge / (lmax + wd)
    assert eta_edge * wd < 1 and 1.02 * eta_edge * lmax < edge     # only this bound is crossed
    kw = dict(hidden_layers=L, gamma0=0.1, steps=4, weight_decay=wd, temperature=0.1,
              momentum=mu)
    solve_deep_linear(X, Y, eta=0.98 * eta_edge, **kw)                # inside: solved
    for solve, extra in ((solve_deep_linear, {}),
                         (solve_monte_carlo, dict(activation="linear", samples=64,
                                                  iterations=2))):
        with pytest.raises(DomainError, match=r"heavy-ball step.*2 \(1 \+ momentum\) / "
                                              r"\(1 - momentum\)"):
            solve(X, Y, eta=1.02 * eta_edge, **kw, **extra)
    # the trainer, which has no a-priori check, names the same bound when it diverges
    with pytest.raises(DomainError, match=r"heavy-ball bound.*2 \(1 \+ momentum\) / "
                                          r"\(1 - momentum\) = 3\.714"):
        simulate_training(X, Y, hidden_layers=L, widths=16, gamma0=1.0, eta=3.0, steps=40,
                          activation="linear", weight_decay=wd, temperature=0.1, momentum=mu)


# ----------------------------------------------------------------- (f) the two-layer solver

TL = dict(gamma0=1.0, eta=0.2, weight_decay=WD, temperature=TEMP, momentum=MU)


def _two_layer(activation, seeds, samples, steps, **kw):
    """Mean and standard error (spread over ``seeds``) of the two-layer solver's sampled noise
    paths: ``f`` ``(T, n)`` and the final ``Phi(t, t)``."""
    args = dict(TL, steps=steps)
    args.update(kw)
    runs = [solve_two_layer(X, Y, activation=activation, method="monte_carlo", samples=samples,
                            seed=s, two_time=False, **args) for s in seeds]
    f = np.array([r.f for r in runs])
    ph = np.array([r.phi[0, -1, :, -1, :] for r in runs])
    k = len(runs)
    return f.mean(0), f.std(0, ddof=1) / np.sqrt(k), ph.mean(0), ph.std(0, ddof=1) / np.sqrt(k)


def test_two_layer_underdamped_langevin_equals_deep_linear_at_L1():
    """Linear activation: the two-layer solver's sampled heavy-ball noise paths against the deep
    linear solver's filtered noise kernel ``kappa`` (two independent treatments at L = 1);
    the temperature x 0.9 and the momentum dropped are rejected."""
    f, fse, ph, phse = _two_layer("linear", range(4), 20_000, 30)
    kw = dict(TL, hidden_layers=1, steps=30)
    dl = solve_deep_linear(X, Y, **kw)
    t = np.arange(1, 30)                                          # f(0) = 0 exactly
    assert np.max(np.abs(f[t] - dl.f[t]) / fse[t]) < 5
    assert np.max(np.abs(ph - dl.phi[0, -1, :, -1, :]) / phse) < 5
    wrong = solve_deep_linear(X, Y, **dict(kw, temperature=0.9 * TEMP))
    assert np.max(np.abs(ph - wrong.phi[0, -1, :, -1, :]) / phse) > 8
    nomom = solve_deep_linear(X, Y, **dict(kw, momentum=0.0))
    assert np.max(np.abs(f[t] - nomom.f[t]) / fse[t]) > 8


def test_two_layer_underdamped_langevin_is_the_monte_carlo_solver_at_one_hidden_layer():
    """tanh: the forward-marched two-layer solver against the alternating Monte-Carlo solver at
    ``hidden_layers=1`` (its ``kappa``-weighted readout response), both with temperature and
    momentum; the momentum dropped is rejected."""
    T = 12
    f, fse, ph, phse = _two_layer("tanh", range(4), 50_000, T)
    # adaptive sweeps, 16 replicas: 20 fixed sweeps of 4000 samples left time-correlated
    # offsets up to 4.8 SE in one seed (0.9 after 40 sweeps)
    mc = solve_monte_carlo(X, Y, hidden_layers=1, activation="tanh", steps=T, samples=8000,
                           replicas=16, responses="stein", seed=1, **TL)
    t = np.arange(1, T)
    z = (f[t] - mc.f[t]) / np.hypot(fse[t], mc.stderr("f")[t])
    assert np.max(np.abs(z)) < 5, z
    z = (ph - mc.phi[0, -1, :, -1, :]) / np.hypot(phse, mc.stderr("phi")[0, -1, :, -1, :])
    assert np.max(np.abs(z)) < 5, z
    fw, fwse, _, _ = _two_layer("tanh", range(10, 12), 50_000, T, momentum=0.0)
    zw = (fw[t] - mc.f[t]) / np.hypot(fwse[t], mc.stderr("f")[t])
    assert np.max(np.abs(zw)) > 8, zw


def test_two_layer_underdamped_langevin_against_networks_and_wrong_temperature():
    """tanh networks (N = 32, 3000 trained with both) against the two-layer solver: the mean
    ``f`` and ``Phi(t, t)`` within 5 standard errors; temperature x 0.9 rejected by ``Phi``."""
    T, N, S = 20, 32, 3000
    f, fse, _, _ = _two_layer("tanh", range(4), 100_000, T)
    th = solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=400_000, seed=9,
                         steps=T, two_time=False, **TL)
    run = simulate_training(X, Y, hidden_layers=1, widths=N, activation="tanh", seed=3,
                            networks=S, parameterization="mup", steps=T, **TL)
    t = np.arange(1, T)
    z = (run.value("f")[t] - f[t]) / np.hypot(run.stderr("f")[t], fse[t])
    assert np.max(np.abs(z)) < 5, z
    idx = np.arange(T)
    pm = run.value("phi", layer=1)[idx, :, idx, :]
    ps = run.stderr("phi", layer=1)[idx, :, idx, :]
    assert np.max(np.abs(pm - th.phi[0][idx, :, idx, :]) / ps) < 5
    wrong = solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=400_000,
                            seed=9, steps=T, two_time=False, **dict(TL, temperature=0.9 * TEMP))
    assert np.max(np.abs(pm - wrong.phi[0][idx, :, idx, :]) / ps) > 8


def test_two_layer_underdamped_langevin_gap_to_networks_falls_like_one_over_width():
    """The mean squared gap of single networks (all of ``f`` and the final ``Phi(t, t)``) to the
    DMFT falls like ``N^-1`` (fitted slope within 4 standard errors of -1, widths 32-1024): only
    the ``O(N^-1/2)`` fluctuations remain.  A theory with the momentum dropped leaves a plateau
    that bends the slope away from -1 by more than 8 standard errors."""
    T, S = 20, 300
    Ns = np.array([32, 64, 128, 256, 512, 1024])
    th = {k: solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=400_000,
                             seed=0, steps=T, two_time=False, **dict(TL, momentum=k))
          for k in (MU, 0.0)}
    target = {k: np.concatenate([np.ravel(r.f[1:]), np.ravel(r.phi[0, -1, :, -1, :])])
              for k, r in th.items()}
    d2 = {k: [] for k in th}
    for N in Ns:
        run = simulate_training(X, Y, hidden_layers=1, widths=int(N), activation="tanh",
                                seed=int(N), networks=S, parameterization="mup", steps=T, **TL)
        o = np.concatenate([run.f[:, 1:].reshape(S, -1),
                            run.phi[:, 0, -1, :, -1, :].reshape(S, -1)], axis=1)
        for k in th:
            d2[k].append(np.sum((o - target[k]) ** 2, axis=1))
    slope, se = gap_slope(Ns, np.array(d2[MU]))
    assert abs(slope + 1) < 4 * se, (slope, se)
    wrong, wse = gap_slope(Ns, np.array(d2[0.0]))
    assert abs(wrong + 1) > 8 * wse, (wrong, wse)


def test_two_layer_momentum_to_zero_is_its_langevin_solver():
    """``mu = e^-40``: the heavy-ball noise paths equal the GD ones to round-off (same draws)."""
    args = dict(gamma0=1.0, eta=0.2, steps=10, weight_decay=WD, temperature=TEMP,
                method="monte_carlo", samples=2000, seed=5, activation="tanh")
    a = solve_two_layer(X, Y, **args)
    b = solve_two_layer(X, Y, momentum=TINY_MU, **args)
    for name in ("f", "phi", "g"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=0, atol=1e-13)
    c = solve_two_layer(X, Y, momentum=MU, **args)
    assert np.max(np.abs(c.f - a.f)) > 1e-2
