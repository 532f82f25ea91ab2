"""Per-layer initial variances ``W^l_ij(0) ~ N(0, sigma_l^2)`` (Bordelon & Pehlevan (2022),
App. D.8) together with Langevin noise (App. K), momentum (App. L) and trainable biases (App. H)
in the Monte-Carlo and two-layer solvers.

The random part of each weight is its initial value plus the filtered noise, so weight layer
``k`` has the noise kernel ``kappa_k = sigma_k^2 a(t) a(s) + (kappa - a a^T)(t, s)``: ``sigma_k^2``
scales only the initial part, the noise (a property of the optimizer) does not depend on it, and
the biases keep ``b(0) ~ N(0, 1)``: ``u^l ~ GP(0, kappa_{l-1} * Phi^{l-1} + kappa)``.  Checks:
(a) ``sigma = 1`` is the plain path bit for bit; (b) linear activation against the deep linear
solver's closed equations (its own ``kappa_k``), rejecting ``sigma^2 x 0.9``, the unit variances
and the theory in which ``sigma_k^2`` scales the noise too; (c) tanh against networks trained by
:func:`effth.simulation.simulate_training` (which imports no theory), with biases, noise and
variances together; (d) the single-network gap falls like ``1/N``.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.dmft import solve_deep_linear, solve_monte_carlo, solve_two_layer
from effth.dmft.solvers import deep_linear as _dl
from effth.simulation import simulate_training

from ._sampled_checks import gap_slope

X = np.array([[1.0, 0.3], [0.2, -1.0]])
Y = np.array([1.0, -0.5])
TEMP, WD = 0.5, 1.0                  # prior weight variance TEMP / WD = 1/2
V2 = (1.6, 0.7)                      # two-layer: sigma_0^2 (input), sigma_1^2 (readout)
V3 = (1.5, 0.6, 1.3)                 # L = 2: input, hidden, readout
T = 12
IDX = np.arange(T)
LANG = dict(gamma0=1.0, eta=0.2, steps=T, weight_decay=WD, temperature=TEMP)


def _noise_scaled_too(monkeypatch):
    """A wrong theory: ``sigma_k^2`` multiplies the whole noise kernel, ``kappa_k = sigma_k^2
    kappa`` (as if the Langevin noise had the initial variance)."""
    def kappas(self, filt, L):
        v = self.variances or (1.0,) * (L + 1)
        return [s * filt.kappa for s in v]
    monkeypatch.setattr(_dl._Model, "layer_kappas", kappas)


def _two_layer(activation, seeds, samples, **kw):
    """Mean and standard error over ``seeds`` of the two-layer solver's sampled paths: ``f``
    ``(T, n)`` and the equal-time ``Phi(t, t)`` ``(T, n, n)``."""
    runs = [solve_two_layer(X, Y, activation=activation, method="monte_carlo", samples=samples,
                            seed=s, two_time=False, **kw) for s in seeds]
    f = np.array([r.f for r in runs])
    ph = np.array([r.phi[0][IDX, :, IDX, :] for r in runs])
    k = np.sqrt(len(runs))
    return f.mean(0), f.std(0, ddof=1) / k, ph.mean(0), ph.std(0, ddof=1) / k


# ----------------------------------------------------------------- (a) sigma = 1 bit for bit

@pytest.mark.parametrize("extra", [dict(), dict(bias=True), dict(momentum=0.6, bias=True)])
def test_unit_variances_with_langevin_are_bitwise_the_plain_solvers(extra):
    kw = dict(LANG, **extra)
    a = solve_two_layer(X, Y, method="monte_carlo", samples=500, seed=2, **kw)
    b = solve_two_layer(X, Y, method="monte_carlo", samples=500, seed=2,
                        weight_variances=(1, 1), **kw)
    for name in ("f", "phi", "g"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    mc = dict(hidden_layers=2, samples=128, iterations=3, replicas=1, seed=4, **dict(kw, steps=6))
    a = solve_monte_carlo(X, Y, **mc)
    b = solve_monte_carlo(X, Y, weight_variances=(1.0, 1.0, 1.0), **mc)
    for name in ("f", "phi", "g", "A", "B"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


# ----------------------------------------------------------------- (b) the closed equations

@pytest.mark.parametrize("momentum", [0.0, 0.6])
def test_two_layer_langevin_variances_equal_deep_linear_at_L1(momentum, monkeypatch):
    """Linear activation, sigma^2 = (1.6, 0.7), Langevin noise (and momentum): the sampled
    noise paths against the deep linear ``kappa_k``; sigma_0^2 x 0.9, the unit variances and
    the noise scaled by sigma^2 are rejected."""
    kw = dict(LANG, momentum=momentum, weight_variances=V2)
    f, fse, ph, phse = _two_layer("linear", range(4), 20_000, **kw)
    t = np.arange(1, T)

    def z(r):
        return (np.max(np.abs(f[t] - r.f[t]) / fse[t]),
                np.max(np.abs(ph - r.phi[0][IDX, :, IDX, :]) / phse))

    assert max(z(solve_deep_linear(X, Y, hidden_layers=1, **kw))) < 5
    for wv in ((0.9 * V2[0], V2[1]), None):
        assert max(z(solve_deep_linear(X, Y, hidden_layers=1, **dict(kw, weight_variances=wv)))) > 8
    _noise_scaled_too(monkeypatch)
    assert max(z(solve_deep_linear(X, Y, hidden_layers=1, **kw))) > 8


def test_monte_carlo_langevin_variances_equal_deep_linear(monkeypatch):
    """Linear activation, L = 2, sigma^2 = (1.5, 0.6, 1.3) with Langevin noise: the Monte-Carlo
    solver's per-layer ``kappa_k`` in sources, responses and readout against the closed
    equations (f and every equal-time Phi, G within 5 SE); the unit variances and the noise
    scaled by sigma^2 are rejected by more than 8 SE."""
    kw = dict(LANG, hidden_layers=2, weight_variances=V3)
    mc = solve_monte_carlo(X, Y, activation="linear", responses="stein", samples=4000,
                           replicas=16, seed=1, **kw)
    se = np.concatenate([mc.stderr("phi")[:, IDX, :, IDX].ravel(),
                         mc.stderr("g")[:, IDX, :, IDX].ravel(), mc.stderr("f")[1:].ravel()])
    est = np.concatenate([mc.phi[:, IDX, :, IDX].ravel(), mc.g[:, IDX, :, IDX].ravel(),
                          mc.f[1:].ravel()])
    ok = se > 0                                   # Phi^1(0, 0) = sigma_0^2 K^x is exact

    def z(r):
        ref = np.concatenate([r.phi[:, IDX, :, IDX].ravel(), r.g[:, IDX, :, IDX].ravel(),
                              r.f[1:].ravel()])
        return np.max(np.abs(est - ref)[ok] / se[ok])

    assert z(solve_deep_linear(X, Y, **kw)) < 5
    assert z(solve_deep_linear(X, Y, **dict(kw, weight_variances=None))) > 8
    _noise_scaled_too(monkeypatch)
    assert z(solve_deep_linear(X, Y, **kw)) > 8


# ----------------------------------------------------------------- (c) networks

@pytest.mark.parametrize("extra", [dict(bias=True), dict(bias=True, **LANG)])
def test_two_layer_tanh_bias_variances_against_networks(extra):
    """tanh, one hidden layer with a bias, sigma^2 = (1.6, 0.7), with and without Langevin
    noise: 2000 networks of width 64 against the sampled two-layer DMFT (f(t), Phi(t, t) within
    5 SE); sigma_0^2 x 0.9 and the unit variances are rejected by more than 8 SE in Phi."""
    kw = dict(gamma0=1.0, eta=0.2, steps=T, weight_variances=V2)
    kw.update(extra)
    f, fse, ph, phse = _two_layer("tanh", range(4), 50_000, **kw)
    run = simulate_training(X, Y, hidden_layers=1, widths=64, activation="tanh", seed=3,
                            networks=2000, parameterization="mup", **kw)
    rf, rs = run.value("f"), run.stderr("f")
    rp = run.value("phi", layer=1)[IDX, :, IDX, :]
    rps = run.stderr("phi", layer=1)[IDX, :, IDX, :]
    t = np.arange(1, T)
    assert np.max(np.abs(f[t] - rf[t]) / np.hypot(fse[t], rs[t])) < 5
    assert np.max(np.abs(ph - rp) / np.hypot(phse, rps)) < 5
    for wv in ((0.9 * V2[0], V2[1]), None):
        _, _, pw, _ = _two_layer("tanh", range(10, 12), 50_000, **dict(kw, weight_variances=wv))
        assert np.max(np.abs(pw - rp) / rps) > 8, wv


def test_monte_carlo_tanh_bias_variances_langevin_against_networks():
    """tanh, L = 2, biases, sigma^2 = (1.5, 0.6, 1.3) and Langevin noise: 500 networks of width
    96 against the Monte-Carlo DMFT (f(t) and every equal-time Phi^l within 5 SE); sigma_0^2 x
    0.9 is rejected by more than 8 SE in Phi (the unit variances, by 21 SE here, are rejected
    more cheaply by the closed equations above)."""
    kw = dict(LANG, hidden_layers=2, bias=True, weight_variances=V3)
    run = simulate_training(X, Y, widths=96, activation="tanh", seed=5, networks=500,
                            parameterization="mup", **kw)
    rf, rs = run.value("f"), run.stderr("f")
    rp = run.value("phi")[:, IDX, :, IDX, :].ravel()
    rps = run.stderr("phi")[:, IDX, :, IDX, :].ravel()
    ok = rps > 0
    t = np.arange(1, T)

    def solve(wv, seed):
        return solve_monte_carlo(X, Y, activation="tanh", responses="stein", samples=4000,
                                 replicas=16, seed=seed, **dict(kw, weight_variances=wv))

    mc = solve(V3, 1)
    assert np.max(np.abs(mc.f[t] - rf[t]) / np.hypot(mc.stderr("f")[t], rs[t])) < 5
    mp, mps = mc.phi[:, IDX, :, IDX, :].ravel(), mc.stderr("phi")[:, IDX, :, IDX, :].ravel()
    assert np.max(np.abs(mp - rp)[ok] / np.hypot(mps, rps)[ok]) < 5
    wp = solve((0.9 * V3[0], V3[1], V3[2]), 2).phi[:, IDX, :, IDX, :].ravel()
    assert np.max(np.abs(wp - rp)[ok] / rps[ok]) > 8


# ----------------------------------------------------------------- (d) 1/N

def test_two_layer_bias_variances_langevin_gap_to_networks_falls_like_one_over_width():
    """tanh, bias, sigma^2 = (1.6, 0.7), Langevin noise: the mean squared gap of single networks
    (all of f and Phi(t, t)) to the two-layer DMFT falls like ``N^-1`` at N = 32..1024 (fitted
    slope within 4 SE of -1); with the unit variances it bends away by more than 8 SE."""
    S = 300
    Ns = np.array([32, 64, 128, 256, 512, 1024])
    kw = dict(LANG, bias=True, weight_variances=V2)
    target = {}
    for key, wv in (("right", V2), ("unit", None)):
        r = solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=400_000,
                            seed=0, two_time=False, **dict(kw, weight_variances=wv))
        target[key] = np.concatenate([r.f[1:].ravel(), r.phi[0][IDX, :, IDX, :].ravel()])
    d2 = {k: [] for k in target}
    for N in Ns:
        run = simulate_training(X, Y, hidden_layers=1, widths=int(N), activation="tanh",
                                seed=int(N), networks=S, parameterization="mup", **kw)
        o = np.concatenate([run.f[:, 1:].reshape(S, -1),
                            run.phi[:, 0][:, IDX, :, IDX, :].transpose(1, 0, 2, 3)
                            .reshape(S, -1)], axis=1)
        for k in target:
            d2[k].append(np.sum((o - target[k]) ** 2, axis=1))
    slope, se = gap_slope(Ns, d2["right"])
    assert abs(slope + 1) < 4 * se, (slope, se)
    wrong, wse = gap_slope(Ns, d2["unit"])
    assert abs(wrong + 1) > 8 * wse, (wrong, wse)


# ----------------------------------------------------------------- (e) deep linear with biases

@pytest.mark.parametrize("extra", [dict(), dict(weight_decay=WD, temperature=TEMP)])
def test_deep_linear_bias_variances_equal_the_monte_carlo_solver(extra):
    """Biases (unit variance) with sigma^2 = (1.5, 0.6, 1.3), L = 2, with and without Langevin
    noise: the deep linear closed equations against the linear Monte-Carlo solver (f, every
    equal-time Phi^l within 5 SE); the unit variances are rejected by more than 8 SE."""
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=T, bias=True, weight_variances=V3)
    kw.update(extra)
    mc = solve_monte_carlo(X, Y, activation="linear", responses="stein", samples=4000,
                           replicas=16, seed=1, **kw)
    est = np.concatenate([mc.f[1:].ravel(), mc.phi[:, IDX, :, IDX, :].ravel()])
    se = np.concatenate([mc.stderr("f")[1:].ravel(), mc.stderr("phi")[:, IDX, :, IDX, :].ravel()])
    ok = se > 0

    def z(r):
        ref = np.concatenate([r.f[1:].ravel(), r.phi[:, IDX, :, IDX, :].ravel()])
        return np.max(np.abs(est - ref)[ok] / se[ok])

    assert z(solve_deep_linear(X, Y, **kw)) < 5
    assert z(solve_deep_linear(X, Y, **dict(kw, weight_variances=None))) > 8


def test_deep_linear_bias_variances_langevin_against_networks():
    """The same with Langevin noise against 700 linear networks of width 128 (f(t) and every
    equal-time Phi^l within 5 SE); sigma_0^2 x 0.9 is rejected by more than 8 SE in Phi."""
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=T, bias=True, weight_variances=V3,
              weight_decay=WD, temperature=TEMP)
    run = simulate_training(X, Y, widths=128, activation="linear", seed=7, networks=700,
                            parameterization="mup", **kw)
    rp = run.value("phi")[:, IDX, :, IDX, :].ravel()
    rps = run.stderr("phi")[:, IDX, :, IDX, :].ravel()
    ok = rps > 0
    t = np.arange(1, T)
    dl = solve_deep_linear(X, Y, **kw)
    assert np.max(np.abs(run.value("f")[t] - dl.f[t]) / run.stderr("f")[t]) < 5
    assert np.max(np.abs(rp - dl.phi[:, IDX, :, IDX, :].ravel())[ok] / rps[ok]) < 5
    wrong = solve_deep_linear(X, Y, **dict(kw, weight_variances=(0.9 * V3[0], V3[1], V3[2])))
    assert np.max(np.abs(rp - wrong.phi[:, IDX, :, IDX, :].ravel())[ok] / rps[ok]) > 8
