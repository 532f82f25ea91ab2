"""Unequal hidden widths ``N_l = a_l N`` (Bordelon & Pehlevan 2022, App. D.8) in the two-layer and
the Monte-Carlo DMFT solvers, against tanh networks of widths ``(N, 2N)``.

Three ways: (a) ``width_ratios=`` of ``solve_two_layer`` and ``solve_monte_carlo``; (b) the
paper's statement that layer ``l`` feels ``gamma0 / sqrt(a_l)`` (eq. (58)): with one hidden layer
the ratio is the equal-width solver at ``gamma0 / sqrt(a_1)``; (c) tanh muP networks trained by
``simulate_training(widths=(N, 2N))`` (reference width ``N_L = 2N``: ``a = (1/2, 1)``); the
equal-width theory at the same ``gamma0`` is rejected.
"""

import warnings

import numpy as np
import pytest

from effth.dmft import solve_monte_carlo, solve_two_layer
from effth.errors import DomainError
from effth.simulation import simulate_training

X = np.array([[1.0, 0.3], [0.2, -1.0]])
Y = np.array([1.0, -0.5])
XT = np.array([[0.5, 0.5]])


def test_two_layer_unit_ratio_is_bit_for_bit_and_a_ratio_rescales_gamma0():
    kw = dict(gamma0=1.0, eta=0.2, steps=15, X_test=XT, activation="tanh")
    base = solve_two_layer(X, Y, **kw)
    one = solve_two_layer(X, Y, width_ratios=[1.0], **kw)
    for name in ("f", "phi", "g", "delta"):
        assert np.array_equal(getattr(one, name), getattr(base, name)), name
    a = 2.0
    wide = solve_two_layer(X, Y, width_ratios=(a,), **kw)
    ref = solve_two_layer(X, Y, **dict(kw, gamma0=1.0 / np.sqrt(a)))
    np.testing.assert_allclose(wide.f, ref.f, rtol=0, atol=1e-13)
    np.testing.assert_allclose(wide.phi, ref.phi, rtol=0, atol=1e-13)
    assert wide.gamma0 == 1.0
    assert np.max(np.abs(wide.f - base.f)) > 1e-2           # the ratio matters
    # the same with the Monte-Carlo variant, weight decay and momentum
    mk = dict(kw, method="monte_carlo", samples=2000, seed=3, weight_decay=0.2, momentum=0.5)
    np.testing.assert_allclose(solve_two_layer(X, Y, width_ratios=(a,), **mk).f,
                               solve_two_layer(X, Y, **dict(mk, gamma0=1.0 / np.sqrt(a))).f,
                               rtol=0, atol=1e-13)


@pytest.mark.parametrize("bad, match", [((0.0,), "> 0"), ((-1.0,), "> 0"), ((1.0, 2.0), "per hidden"),
                                        (2.0, "sequence")])
def test_two_layer_bad_ratios(bad, match):
    with pytest.raises(DomainError, match=match):
        solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=3, width_ratios=bad)


def _mc(**kw):
    args = dict(hidden_layers=2, activation="tanh", gamma0=1.0, eta=0.2, steps=20,
                responses="stein", samples=2000, iterations=30, seed=1)
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_monte_carlo(X, Y, **args)


def _z(run, res, tt):
    zf = (run.value("f")[tt] - res.f[tt]) / np.hypot(run.stderr("f")[tt], res.mc_stderr["f"][tt])
    ph = run.phi[:, :, -1, :, -1, :]
    se = np.hypot(ph.std(0, ddof=1) / np.sqrt(ph.shape[0]), res.mc_stderr["phi"][:, -1, :, -1, :])
    return zf, (ph.mean(0) - res.phi[:, -1, :, -1, :]) / se


def _networks(N, networks, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_training(X, Y, hidden_layers=2, widths=(N, 2 * N), activation="tanh",
                                 gamma0=1.0, eta=0.2, steps=20, seed=seed, networks=networks,
                                 record_kernels=False, parameterization="mup")


def test_monte_carlo_unequal_widths_against_tanh_networks():
    tt = [5, 10, 19]
    run = _networks(128, 150, 128)
    zf, zp = _z(run, _mc(width_ratios=(0.5, 1.0)), tt)
    assert np.max(np.abs(zf)) < 5 and np.max(np.abs(zp)) < 5, (zf, zp)
    _, ze = _z(run, _mc(), tt)                                   # equal widths: rejected
    assert np.max(np.abs(ze)) > 8, ze


@pytest.mark.slow
def test_monte_carlo_unequal_widths_gap_falls_like_one_over_n(opt_in_slow):
    tt = [5, 10, 19]
    res = _mc(width_ratios=(0.5, 1.0), samples=8000)
    target = np.concatenate([res.f[tt].ravel(), res.phi[:, -1, :, -1, :].ravel()])
    Ns = np.array([64, 128, 256])
    mse = []
    for N in Ns:
        run = _networks(int(N), 100, int(N) + 1)
        o = np.stack([np.concatenate([run.f[k][tt].ravel(), run.phi[k, :, -1, :, -1, :].ravel()])
                      for k in range(run.f.shape[0])])
        mse.append(np.mean((o - target) ** 2))
    slope = np.polyfit(np.log(Ns), np.log(mse), 1)[0]
    assert -1.25 < slope < -0.75, (slope, mse)
