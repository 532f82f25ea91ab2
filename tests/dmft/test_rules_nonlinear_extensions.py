"""Weight decay, heavy-ball momentum and several outputs (Bordelon & Pehlevan, ICLR 2023, App. C,
eqs. (41)-(43), (50)-(53)) in the sampled nonlinear learning-rule solvers
(``solve_rule_two_layer``, ``solve_rule_forward``).

Checked against

* the solvers without the options (``weight_decay = momentum = 0`` and ``y[:, None]``: identical
  arrays);
* the exact deep linear rule DMFT with the same options (linear activation: an independent
  implementation, the marcher of ``solve_deep_linear`` with the rule hook), within 5 batch SE
  plus 2 % of the scale, with the exact theory at a wrong decay or momentum outside that band;
* trained tanh networks (``simulate_rule_training``, the same optimizer): the mean squared gap
  over ``f`` and the eNTK falls like ``1/N`` (fitted slope within 4 SE), the seed-mean ``f`` and
  eNTK agree at the largest width (4.5 sigma), and the theory with the weight decay scaled by
  0.9 / the momentum dropped / the outputs solved as separate scalar problems is rejected
  (DFA, Hebb, ρ-FA; GD, GLN and two-layer ReLU networks at one width).
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.dmft.rules.solvers import (solve_rule_deep_linear, solve_rule_forward,
                                      solve_rule_two_layer)
from effth.simulation.rules import simulate_rule_training

from ._sampled_checks import assert_sampled_matches_exact

rng = np.random.default_rng(2)
X = rng.standard_normal((3, 5))
Y = np.array([1.0, -1.0, 0.5])
Y2 = np.c_[Y, [0.3, 0.8, -0.6]]                      # two outputs
RULES = [("gd", None), ("fa", 0.5), ("dfa", None), ("hebb", None), ("gln", None)]
NAMES = ("f", "delta", "phi", "g", "gtilde", "ntk")


def _same(a, b, squeeze=False):
    for name in NAMES:
        x, y = getattr(a, name), getattr(b, name)
        if squeeze and name in ("f", "delta"):
            y = y[..., 0]
        elif squeeze and name in ("g", "gtilde", "ntk"):
            y = y[..., 0, 0]
        assert np.array_equal(x, y), name
    for key, x in a.mc_stderr.items():
        y = b.mc_stderr[key]
        if squeeze and key == "f":
            y = y[..., 0]
        elif squeeze and key in ("g", "gtilde", "ntk"):
            y = y[..., 0, 0]
        assert np.array_equal(x, y), key


@pytest.mark.parametrize("rule,rho", RULES)
def test_two_layer_zero_options_and_one_output_column(rule, rho):
    kw = dict(rule=rule, rho=rho, gamma0=1.0, eta=0.1, steps=6, samples=2000,
              activation="relu" if rule == "gln" else "tanh")
    a = solve_rule_two_layer(X, Y, **kw)
    _same(a, solve_rule_two_layer(X, Y, weight_decay=0.0, momentum=0.0, **kw))
    _same(a, solve_rule_two_layer(X, Y[:, None], **kw), squeeze=True)
    b = solve_rule_two_layer(X, Y, record_kernels=False, **kw)
    c = solve_rule_two_layer(X, Y[:, None], record_kernels=False, **kw)
    _same(b, c, squeeze=True)


@pytest.mark.parametrize("rule,rho", RULES)
def test_two_layer_outputs_equal_time_record(rule, rho):
    """Two outputs with the options: record_kernels=False holds the equal-time entries of the
    two-time kernels (same samples, a different summation order) and zeros elsewhere."""
    kw = dict(rule=rule, rho=rho, gamma0=1.0, eta=0.1, steps=6, samples=2000, weight_decay=0.5,
              momentum=0.5, activation="relu" if rule == "gln" else "tanh")
    a = solve_rule_two_layer(X, Y2, **kw)
    b = solve_rule_two_layer(X, Y2, record_kernels=False, **kw)
    assert np.array_equal(a.f, b.f) and np.array_equal(a.ntk, b.ntk)
    idx = np.arange(6)
    for name in ("phi", "g", "gtilde"):
        x, y = getattr(a, name)[0], getattr(b, name)[0]
        assert np.allclose(x[idx, :, idx], y[idx, :, idx], rtol=1e-12, atol=1e-14), name
        y = y.copy()
        y[idx, :, idx] = 0
        assert not np.any(y), name


@pytest.mark.parametrize("rule,rho,act", [("fa", 0.5, "tanh"), ("fa", 0.5, "relu"),
                                          ("dfa", None, "tanh"), ("hebb", None, "tanh"),
                                          ("gln", None, "relu")])
def test_forward_zero_options_and_one_output_column(rule, rho, act):
    kw = dict(rule=rule, rho=rho, hidden_layers=2, gamma0=1.0, eta=0.1, steps=5, samples=2000,
              activation=act)
    a = solve_rule_forward(X, Y, **kw)
    _same(a, solve_rule_forward(X, Y, weight_decay=0.0, momentum=0.0, **kw))
    _same(a, solve_rule_forward(X, Y[:, None], **kw), squeeze=True)


OPTS = [(0.8, 0.0), (0.0, 0.6), (0.5, 0.5)]          # (weight_decay, momentum)


def _wrong(wd, mu):
    """The options of a wrong theory: momentum dropped, or (without momentum) weight decay x 0.9."""
    return dict(weight_decay=wd, momentum=0.0) if mu else dict(weight_decay=0.9 * wd, momentum=mu)


LINEAR = ([(r, rho, 1, y) for r, rho in RULES for y in (Y, Y2)]
          + [(r, rho, 2, Y) for r, rho in RULES[1:]]
          + [(r, rho, 2, Y2) for r, rho in RULES[1:]])


# every option setting on one hidden layer; both options together on two
LINEAR_CASES = [c + o for c in LINEAR for o in (OPTS if c[2] == 1 else OPTS[-1:])]


@pytest.mark.parametrize("rule,rho,L,y,wd,mu", LINEAR_CASES,
                         ids=[f"{c[4]}-{c[5]}-{c[0]}-L{c[2]}-C{c[3].ndim}" for c in LINEAR_CASES])
def test_linear_matches_exact(rule, rho, L, y, wd, mu):
    """Linear activation: f, the eNTK and G~^l of the sampled solvers against the exact deep
    linear rule DMFT with the same options (5 batch SE plus 2 % of the scale: the batch errors
    ignore the noise of the estimated kernels fed into the conditional draws, a bias that falls
    with the samples), and the exact theory without decay and momentum outside that band."""
    kw = dict(rule=rule, rho=rho, gamma0=0.5 if rule == "hebb" else 1.0, eta=0.1, steps=12)
    ex = solve_rule_deep_linear(X, y, hidden_layers=L, weight_decay=wd, momentum=mu, **kw)
    bad = solve_rule_deep_linear(X, y, hidden_layers=L, **kw)
    if L == 1:
        mc = solve_rule_two_layer(X, y, activation="linear", samples=20000, seed=1,
                                  weight_decay=wd, momentum=mu, **kw)
    else:
        mc = solve_rule_forward(X, y, hidden_layers=L, activation="linear", samples=40000,
                                seed=1, weight_decay=wd, momentum=mu, **kw)
    layers = tuple(range(1, L + 1))
    assert_sampled_matches_exact(mc, ex, bad, (("f", (None,)), ("ntk", (None,)),
                                               ("gtilde", layers)))


WIDTHS = [64, 128, 256]
# each option alone for two rules, both together with two outputs for every rule (the full
# option x rule grid runs in the opt-in wide study below)
TANH = [("dfa", None, 2, 0.8, 0.0, Y), ("dfa", None, 2, 0.5, 0.5, Y2),
        ("hebb", None, 2, 0.0, 0.6, Y), ("hebb", None, 2, 0.5, 0.5, Y2),
        ("fa", 0.5, 2, 0.8, 0.0, Y), ("fa", 0.5, 2, 0.0, 0.6, Y), ("fa", 0.5, 2, 0.5, 0.5, Y2),
        ("fa", 0.5, 1, 0.5, 0.5, Y2)]


class _Runs:
    """The mean of independent sampled solutions, with their spread as the standard error (the
    batch error of one run ignores the noise of the estimated kernels and responses fed back
    into its conditional draws: for deep ρ-FA it is up to 20 times too small)."""

    def __init__(self, runs, column=False):
        self.runs, self.column = runs, column

    def _stack(self, name):
        if self.column:           # separate scalar problems, one per output column
            return np.stack([np.stack([col[i].value(name) for col in self.runs], -1)
                             for i in range(len(self.runs[0]))])
        return np.stack([r.value(name) for r in self.runs])

    def value(self, name, layer=None):
        return self._stack(name).mean(axis=0)

    def stderr(self, name, layer=None):
        a = self._stack(name)
        return a.std(axis=0, ddof=1) / np.sqrt(a.shape[0])


def _gap(th, run):
    """Per network: mean squared difference over f and the eNTK (~ 1/N)."""
    f, ntk = th.value("f"), th.value("ntk")
    return (np.mean((run.f - f) ** 2, axis=tuple(range(1, run.f.ndim)))
            + np.mean((run.ntk - ntk) ** 2, axis=tuple(range(1, run.ntk.ndim))))


def _width_study(rule, rho, L, wd, mu, y, widths, networks, samples, runs, seed=0,
                 separate=True):
    g0 = 1.0 if rule == "hebb" else 1.5
    kw = dict(rule=rule, rho=rho, eta=0.1, steps=16, hidden_layers=L, activation="tanh",
              gamma0=g0)
    solve = solve_rule_forward if L > 1 else solve_rule_two_layer
    skw = {k: v for k, v in kw.items() if k != "hidden_layers"} if L == 1 else kw

    def theory(yy, **opt):
        return _Runs([solve(X, yy, samples=samples, seed=100 + i, **opt, **skw)
                      for i in range(runs)])

    th = theory(y, weight_decay=wd, momentum=mu)
    cmps = []
    for N in widths:
        run = simulate_rule_training(X, y, widths=N, seed=range(seed, seed + networks),
                                     weight_decay=wd, momentum=mu, record_kernels=False, **kw)
        d = _gap(th, run)
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    wrongs = [theory(y, **_wrong(wd, mu))]
    if y.ndim == 2 and separate:       # the outputs as separate scalar problems
        cols = [theory(y[:, c], weight_decay=wd, momentum=mu).runs for c in range(y.shape[1])]
        wrongs.append(_Runs(cols, column=True))
    return th, wrongs, run, et.scaling_fit(cmps, widths)


def _z(th, run, name):
    a, sa, b, sb = th.value(name), th.stderr(name), run.value(name), run.stderr(name)
    return float(np.max(np.abs(a - b) / np.sqrt(sa ** 2 + sb ** 2 + 1e-30)))


@pytest.mark.parametrize("rule,rho,L,wd,mu,y", TANH,
                         ids=[f"{c[0]}-L{c[2]}-wd{c[3]}-mu{c[4]}-C{c[5].ndim}" for c in TANH])
def test_tanh_vs_networks(rule, rho, L, wd, mu, y):
    """Widths 64-256, 24 networks, the theory the mean of 6 runs of 10000 samples (6000 and no
    separate-outputs theory for deep ρ-FA with two outputs, the slowest case): the gap D(N)
    falls as N^slope with slope -1 within 4 SE; at N = 256 the seed-mean f and eNTK agree within
    4.5 sigma (theory and network errors combined); the wrong theories (momentum dropped, or the
    weight decay x 0.9; the outputs as separate scalar problems) are > 5 sigma away."""
    heavy = rule == "fa" and L > 1 and y.ndim == 2      # keep the test under 20 s
    th, wrongs, run, fit = _width_study(rule, rho, L, wd, mu, y, WIDTHS, 24,
                                        6000 if heavy else 10000, 6, separate=not heavy)
    print(rule, L, wd, mu, y.ndim, fit, [round(_z(th, run, q), 2) for q in ("f", "ntk")],
          [round(max(_z(w, run, "f"), 0 if w.column else _z(w, run, "ntk")), 1)
           for w in wrongs])
    assert fit.slope_stderr < 0.35 and abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    assert max(_z(th, run, "f"), _z(th, run, "ntk")) < 4.5
    wrong, *sep = wrongs
    assert max(_z(wrong, run, "f"), _z(wrong, run, "ntk")) > 5
    for s in sep:
        assert _z(s, run, "f") > 5


OTHERS = [("gln", 2, "relu", Y, 0.8, 0.0), ("gln", 2, "relu", Y, 0.5, 0.5),
          ("gln", 2, "relu", Y2, 0.5, 0.5),
          ("gd", 1, "tanh", Y2, 0.5, 0.5), ("hebb", 1, "tanh", Y2, 0.5, 0.5),
          ("gln", 1, "relu", Y2, 0.5, 0.5), ("dfa", 1, "relu", Y2, 0.8, 0.0)]


@pytest.mark.parametrize("rule,L,act,y,wd,mu", OTHERS,
                         ids=[f"{c[0]}-L{c[1]}-{c[2]}-C{c[3].ndim}-wd{c[4]}-mu{c[5]}" for c in OTHERS])
def test_other_rules_vs_networks(rule, L, act, y, wd, mu):
    """The deep ReLU-gated network and the two-layer solver of GD, Hebb, GLN and DFA (ReLU) with
    the options, at one width (N = 512, 24 networks; theory: mean of 6 runs): f and the eNTK
    within 4.5 sigma, the wrong theories (momentum dropped, or the decay x 0.9; the outputs as
    separate scalar problems) > 5 sigma away."""
    kw = dict(rule=rule, eta=0.1, steps=16, activation=act, gamma0=1.0)
    solve = solve_rule_forward if L > 1 else solve_rule_two_layer
    skw = dict(kw, hidden_layers=L) if L > 1 else kw

    def theory(yy=y, **opt):
        return _Runs([solve(X, yy, samples=10000, seed=100 + i, **opt, **skw) for i in range(6)])

    th, wrong = theory(weight_decay=wd, momentum=mu), theory(**_wrong(wd, mu))
    run = simulate_rule_training(X, y, widths=512, seed=range(24), record_kernels=False,
                                 hidden_layers=L, weight_decay=wd, momentum=mu, **kw)
    print(rule, L, act, y.ndim, wd, mu, [round(_z(x, run, q), 1) for x in (th, wrong)
                                         for q in ("f", "ntk")])
    assert max(_z(th, run, "f"), _z(th, run, "ntk")) < 4.5
    assert max(_z(wrong, run, "f"), _z(wrong, run, "ntk")) > 5
    if y.ndim == 2:       # the outputs as separate scalar problems
        sep = _Runs([theory(y[:, c], weight_decay=wd, momentum=mu).runs for c in range(2)],
                    column=True)
        print("separate outputs", round(_z(sep, run, "f"), 1))
        assert _z(sep, run, "f") > 5


def test_bad_input():
    kw = dict(rule="dfa", hidden_layers=2, gamma0=1.0, eta=0.1, steps=4, samples=200)
    tkw = {k: v for k, v in kw.items() if k != "hidden_layers"}
    for solve, k in ((solve_rule_forward, kw), (solve_rule_two_layer, tkw)):
        with pytest.raises(DomainError, match="weight_decay"):
            solve(X, Y, weight_decay=-0.1, **k)
        with pytest.raises(DomainError):
            solve(X, Y, weight_decay=10.0, **k)            # eta * weight_decay >= 1
        with pytest.raises(DomainError, match="momentum"):
            solve(X, Y, momentum=1.0, **k)
        with pytest.raises(DomainError, match="momentum"):
            solve(X, Y, momentum=-0.2, **k)
        with pytest.raises(DomainError, match="shape"):
            solve(X, np.ones((4, 2)), **k)                  # 4 target rows for 3 inputs
        with pytest.raises(DomainError):
            solve(X, np.ones((3, 2, 2)), **k)


SLOW = [("dfa", None, 2, 0.8, 0.0, Y), ("dfa", None, 2, 0.0, 0.6, Y), ("dfa", None, 2, 0.5, 0.5, Y2),
        ("hebb", None, 2, 0.8, 0.0, Y), ("hebb", None, 2, 0.5, 0.5, Y2),
        ("fa", 0.5, 2, 0.8, 0.0, Y), ("fa", 0.5, 2, 0.0, 0.6, Y), ("fa", 0.5, 1, 0.5, 0.5, Y2),
        ("fa", 0.5, 2, 0.5, 0.5, Y2), ("gln", None, 2, 0.5, 0.5, Y2)]


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho,L,wd,mu,y", SLOW,
                         ids=[f"{c[0]}-L{c[2]}-wd{c[3]}-mu{c[4]}-C{c[5].ndim}" for c in SLOW])
def test_tanh_vs_networks_wide(opt_in_slow, rule, rho, L, wd, mu, y):
    """Widths 128-1024, 32 networks, the theory the mean of 8 runs of 20000 samples (one to three
    minutes per case; the figures are in docs/learning_rules.md): slope -1 within 4 SE, f and the
    eNTK within 4.5 sigma at N = 1024, the wrong theories > 5 sigma away."""
    th, wrongs, run, fit = _width_study(rule, rho, L, wd, mu, y, [128, 256, 512, 1024], 32,
                                        20000, 8, seed=1000)
    zs = [round(_z(th, run, q), 2) for q in ("f", "ntk")]
    zw = [round(max(_z(w, run, "f"), 0 if w.column else _z(w, run, "ntk")), 1) for w in wrongs]
    print("nonlinear rule options", rule, rho, L, wd, mu, y.ndim, fit, "z", zs, "wrong z", zw)
    assert abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    assert max(zs) < 4.5
    assert min(zw) > 5
