"""Weight decay and momentum for every learning rule (Bordelon & Pehlevan, ICLR 2023, App. C,
eqs. (50)-(53)) in the deep linear learning-rule DMFT.

Checked against

* today's solver at ``weight_decay = momentum = 0`` (bit for bit);
* ``solve_deep_linear`` with the same ``weight_decay`` / ``momentum`` for GD and GLN (the GD
  equations with decay are derived there independently of the rule hook);
* networks trained by the rule with the same optimizer (``simulate_rule_training``): seed-mean
  outputs and eNTK within 4.5 SE, a theory without decay / momentum rejected, and (opt-in) the
  mean squared gap falling like ``1/N``.
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.dmft import solve_deep_linear
from effth.dmft.rules.solvers import solve_rule_deep_linear
from effth.simulation.rules import simulate_rule_training

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
Y = np.array([1.0, -0.5])
X = np.linalg.cholesky(2 * KX)                        # K^x = X X^T / 2
RULES = [("gd", None), ("fa", 0.5), ("fa", 0.0), ("dfa", None), ("hebb", None), ("gln", None)]
OPTS = [(0.8, 0.0), (0.0, 0.6), (0.5, 0.5)]          # (weight_decay, momentum)


@pytest.mark.parametrize("rule,rho", RULES)
def test_zero_decay_and_momentum_is_todays_solver(rule, rho):
    kw = dict(rule=rule, rho=rho, hidden_layers=2, gamma0=1.0, eta=0.05, steps=12)
    a = solve_rule_deep_linear(X, Y, **kw)
    b = solve_rule_deep_linear(X, Y, weight_decay=0.0, momentum=0.0, **kw)
    for name in ("f", "phi", "g", "gtilde", "ntk"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("rule", ["gd", "gln"])
@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("wd,mu", OPTS)
def test_gd_equals_solve_deep_linear(rule, L, wd, mu):
    kw = dict(hidden_layers=L, gamma0=1.2, eta=0.05, steps=15, weight_decay=wd, momentum=mu)
    a = solve_rule_deep_linear(X, Y, rule=rule, **kw)
    b = solve_deep_linear(X, Y, **kw)
    assert np.max(np.abs(a.f - b.f)) < 1e-12
    assert np.max(np.abs(a.phi - b.phi)) < 1e-12
    assert np.max(np.abs(a.g - b.g)) < 1e-12


def test_decay_and_momentum_change_every_rule():
    """The options are not ignored: each changes f at the 1e-2 level, and the continuous-time
    limit is approached (halving eta moves f by O(eta))."""
    for rule, rho in RULES:
        kw = dict(rule=rule, rho=rho, hidden_layers=2, gamma0=1.0, steps=11)
        base = solve_rule_deep_linear(X, Y, eta=0.1, **kw).f
        for wd, mu in OPTS:
            f = solve_rule_deep_linear(X, Y, eta=0.1, weight_decay=wd, momentum=mu, **kw).f
            assert np.max(np.abs(f - base)) > 1e-2, (rule, wd, mu)


def test_bad_input():
    kw = dict(rule="fa", rho=0.5, hidden_layers=2, gamma0=1.0, eta=0.1, steps=5)
    with pytest.raises(DomainError, match="weight_decay"):
        solve_rule_deep_linear(X, Y, weight_decay=-1.0, **kw)
    with pytest.raises(DomainError):
        solve_rule_deep_linear(X, Y, weight_decay=20.0, **kw)        # eta lambda >= 1
    with pytest.raises(DomainError, match="momentum"):
        solve_rule_deep_linear(X, Y, momentum=1.0, **kw)
    with pytest.raises(DomainError, match="closure"):
        solve_rule_deep_linear(X, Y, momentum=0.5, weight_decay=0.1, closure="ntk", **kw)
    skw = dict(rule="fa", rho=0.5, hidden_layers=2, widths=8, gamma0=1.0, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="weight_decay"):
        simulate_rule_training(X, Y, weight_decay=-0.5, **skw)
    with pytest.raises(DomainError, match="momentum"):
        simulate_rule_training(X, Y, momentum=-0.1, **skw)


def test_trainer_zero_options_bit_for_bit():
    kw = dict(rule="fa", rho=0.5, hidden_layers=2, widths=16, gamma0=1.0, eta=0.1, steps=4,
              seed=3)
    a = simulate_rule_training(X, Y, **kw)
    b = simulate_rule_training(X, Y, weight_decay=0.0, momentum=0.0, **kw)
    assert np.array_equal(a.f, b.f) and np.array_equal(a.phi, b.phi)


def test_ntk_closure_with_decay():
    """closure='ntk' with decay: f(t+eta) = (1 - eta lambda (L+1)) f + eta K Delta, within O(eta)
    of the exact closure (halving eta halves the gap)."""
    gaps = []
    for eta, T in ((0.04, 26), (0.02, 51)):
        kw = dict(rule="hebb", hidden_layers=2, gamma0=1.0, eta=eta, steps=T, weight_decay=0.5)
        ex = solve_rule_deep_linear(X, Y, **kw).f[-1]
        nt = solve_rule_deep_linear(X, Y, closure="ntk", **kw).f[-1]
        gaps.append(np.max(np.abs(ex - nt)))
    assert 1.6 < gaps[0] / gaps[1] < 2.4, gaps


def _gap(th, run):
    """Per seed: mean squared difference over f, Phi^l(t, s) and the eNTK (~ 1/N)."""
    return (np.mean((run.f - th.f) ** 2, axis=(1, 2))
            + np.mean((run.phi - th.phi) ** 2, axis=(1, 2, 3, 4, 5))
            + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))


KW = {"hidden_layers": 2, "eta": 0.1, "steps": 16, "gamma0": 1.0}


@pytest.mark.parametrize("rule,rho", [("gd", None), ("fa", 0.5), ("dfa", None), ("hebb", None)])
@pytest.mark.parametrize("wd,mu", OPTS)
def test_dmft_vs_networks(rule, rho, wd, mu):
    """N = 256, 24 networks: seed-mean f and eNTK within 4.5 SE of the DMFT; the same theory
    without decay and momentum is rejected (> 6 SE), and so is the theory with the weight decay
    (or, without decay, the momentum) scaled by 0.9 (> 5 SE)."""
    th = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, weight_decay=wd, momentum=mu, **KW)
    run = simulate_rule_training(X, Y, rule=rule, rho=rho, widths=256, networks=24, seed=11,
                                 weight_decay=wd, momentum=mu, record_kernels=False, **KW)
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(th, run, "ntk").max_abs_z < 4.5
    wrong = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, **KW)
    assert max(et.compare(wrong, run, "f").max_abs_z, et.compare(wrong, run, "ntk").max_abs_z) > 6
    off = (dict(weight_decay=0.9 * wd, momentum=mu) if wd
           else dict(weight_decay=wd, momentum=0.9 * mu))
    wrong = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, **off, **KW)
    assert max(et.compare(wrong, run, "f").max_abs_z, et.compare(wrong, run, "ntk").max_abs_z) > 5


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho", [("gd", None), ("fa", 0.5), ("dfa", None), ("hebb", None)])
@pytest.mark.parametrize("wd,mu", [(0.8, 0.0), (0.5, 0.5)])
def test_dmft_vs_networks_one_over_n(opt_in_slow, rule, rho, wd, mu):
    """N = 256 .. 1024: the mean squared gap falls as N^slope with slope -1 within 4.5 SE, and at
    N = 1024 f and the eNTK pass the 4.5 SE z-test.  Hebb at gamma0 = 0.5 with 48 networks (its
    discrete dynamics has heavy-tailed seed-to-seed errors near gamma0 = 1)."""
    kw = {**KW, "gamma0": 0.5} if rule == "hebb" else KW
    th = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, weight_decay=wd, momentum=mu, **kw)
    widths, cmps = [256, 512, 1024], []
    for N in widths:
        run = simulate_rule_training(X, Y, rule=rule, rho=rho, widths=N, seed=5,
                                     networks=48 if rule == "hebb" else 32,
                                     weight_decay=wd, momentum=mu, **kw)
        d = _gap(th, run)
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    print(rule, rho, wd, mu, fit)
    assert abs(fit.slope + 1.0) < 4.5 * fit.slope_stderr, fit
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(th, run, "ntk").max_abs_z < 4.5


@pytest.mark.parametrize("rule,rho", [("fa", 0.5), ("hebb", None)])
def test_continuous_time_limit_of_momentum(rule, rho):
    """Eqs. (51)-(53): at fixed time constant tau (mu = exp(-eta / tau)) and decay lambda the
    discrete dynamics converge to a continuous-time limit at first order in eta (halving eta
    halves the change of f(t = 2))."""
    tau, lam, tmax = 0.5, 0.4, 2.0
    fs = []
    for eta in (0.04, 0.02, 0.01):
        r = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, hidden_layers=2, gamma0=1.0, eta=eta,
                                   steps=int(round(tmax / eta)) + 1, weight_decay=lam,
                                   momentum=np.exp(-eta / tau))
        fs.append(r.f[-1])
    ratio = np.max(np.abs(fs[0] - fs[1])) / np.max(np.abs(fs[1] - fs[2]))
    assert 1.8 < ratio < 2.2, ratio
