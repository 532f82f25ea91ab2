"""Several outputs (Bordelon & Pehlevan, ICLR 2023, App. C.1, eqs. (41)-(43)) in the deep linear
learning-rule DMFT and the rule trainer.

Checked against

* the scalar solver and trainer (``y`` of shape ``(P, 1)``: identical arrays);
* ``solve_deep_linear`` with 2-D ``y`` for GD (an independent derivation of the GD equations
  with output indices);
* the rotation covariance of every rule (``f(Y Q) = f(Y) Q`` for orthogonal ``Q``: the feedback
  of ρ-FA and DFA has i.i.d. columns, Hebb's update carries ``|Delta|^2``);
* networks with two outputs: seed-mean ``f`` and the ``C x C`` eNTK within 4.5 SE, and the
  theory that treats the outputs as independent scalar problems rejected.
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
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])
Y2 = np.array([[1.0, 0.4], [-0.5, 0.8]])
RULES = [("gd", None), ("fa", 0.5), ("dfa", None), ("hebb", None), ("gln", None)]


@pytest.mark.parametrize("rule,rho", RULES)
@pytest.mark.parametrize("wd,mu", [(0.0, 0.0), (0.4, 0.5)])
def test_one_output_column_is_the_scalar_solver(rule, rho, wd, mu):
    kw = dict(rule=rule, rho=rho, hidden_layers=2, gamma0=1.0, eta=0.05, steps=12,
              weight_decay=wd, momentum=mu)
    a = solve_rule_deep_linear(X, Y, **kw)
    b = solve_rule_deep_linear(X, Y[:, None], **kw)
    assert np.array_equal(a.f, b.f[..., 0]) and np.array_equal(a.delta, b.delta[..., 0])
    for name in ("g", "gtilde", "ntk"):
        assert np.array_equal(getattr(a, name), getattr(b, name)[..., 0, 0]), name
    assert np.array_equal(a.phi, b.phi)
    assert np.array_equal(a.value("loss"), b.value("loss"))


@pytest.mark.parametrize("rule,rho", RULES)
def test_trainer_one_output_column_is_scalar(rule, rho):
    kw = dict(rule=rule, rho=rho, hidden_layers=2, widths=16, gamma0=1.0, eta=0.1, steps=4,
              seed=3, activation="tanh" if rule != "gln" else "relu")
    a = simulate_rule_training(X, Y, **kw)
    b = simulate_rule_training(X, Y[:, None], **kw)
    assert np.array_equal(a.f, b.f[..., 0]) and np.array_equal(a.loss, b.loss)
    assert np.array_equal(a.gtilde, b.gtilde[..., 0, 0]) and np.array_equal(a.ntk, b.ntk[..., 0, 0])


@pytest.mark.parametrize("L", [1, 2, 3])
def test_gd_equals_solve_deep_linear(L):
    kw = dict(hidden_layers=L, gamma0=1.2, eta=0.05, steps=12, weight_decay=0.3, momentum=0.4)
    a = solve_rule_deep_linear(X, Y2, rule="gd", **kw)
    b = solve_deep_linear(X, Y2, **kw)
    assert np.max(np.abs(a.f - b.f)) < 1e-12 and np.max(np.abs(a.g - b.g)) < 1e-12


@pytest.mark.parametrize("rule,rho", RULES)
def test_rotation_covariance(rule, rho):
    th = 0.7
    Q = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])
    kw = dict(rule=rule, rho=rho, hidden_layers=2, gamma0=1.0, eta=0.05, steps=12,
              weight_decay=0.3)
    a = solve_rule_deep_linear(X, Y2, **kw)
    b = solve_rule_deep_linear(X, Y2 @ Q, **kw)
    assert np.max(np.abs(a.f @ Q - b.f)) < 1e-12
    assert np.max(np.abs(np.einsum("...ab,ac,bd->...cd", a.ntk, Q, Q) - b.ntk)) < 1e-12
    # a zero second column: the first is the scalar problem, the second stays 0
    c = solve_rule_deep_linear(X, np.c_[Y2[:, 0], 0 * Y], **kw)
    s = solve_rule_deep_linear(X, Y2[:, 0], **kw)
    assert np.max(np.abs(c.f[..., 0] - s.f)) < 1e-12 and np.max(np.abs(c.f[..., 1])) == 0
    # but the outputs are coupled: not two scalar problems
    assert np.max(np.abs(a.f[..., 1] - solve_rule_deep_linear(X, Y2[:, 1], **kw).f)) > 1e-3


@pytest.mark.parametrize("rule", ["gd", "fa", "hebb"])
def test_ntk_closure_two_outputs(rule):
    """closure='ntk' with C x C eNTK blocks is within O(eta) of the exact closure (halving eta
    halves the gap); GD equals solve_deep_linear's NTK closure."""
    gaps = []
    for eta, T in ((0.04, 26), (0.02, 51)):
        kw = dict(rule=rule, hidden_layers=2, gamma0=1.0, eta=eta, steps=T, weight_decay=0.3)
        ex = solve_rule_deep_linear(X, Y2, **kw).f[-1]
        nt = solve_rule_deep_linear(X, Y2, closure="ntk", **kw).f[-1]
        gaps.append(np.max(np.abs(ex - nt)))
    assert 1.8 < gaps[0] / gaps[1] < 2.5, gaps
    if rule == "gd":
        kw = dict(hidden_layers=2, gamma0=1.0, eta=0.04, steps=26, weight_decay=0.3, closure="ntk")
        a = solve_rule_deep_linear(X, Y2, rule="gd", **kw).f
        assert np.max(np.abs(a - solve_deep_linear(X, Y2, **kw).f)) < 1e-12


def test_bad_input():
    with pytest.raises(DomainError):
        solve_rule_deep_linear(X, np.ones((3, 2)), rule="fa", hidden_layers=2, gamma0=1.0,
                               eta=0.1, steps=4)
    with pytest.raises(DomainError, match="y must have shape"):
        simulate_rule_training(X, np.ones((2, 2, 1)), rule="dfa", hidden_layers=2, widths=4,
                               gamma0=1.0, eta=0.1, steps=3)


@pytest.mark.parametrize("rule,rho,gamma0", [("gd", None, 1.0), ("fa", 0.5, 1.0),
                                             ("dfa", None, 1.0), ("hebb", None, 0.6)])
@pytest.mark.parametrize("wd,mu", [(0.0, 0.0), (0.5, 0.5)])
def test_dmft_vs_networks_two_outputs(rule, rho, gamma0, wd, mu):
    """N = 256, 32 networks: f and the C x C eNTK within 4.5 SE; without decay, the outputs
    solved as separate scalar problems are rejected (> 5 SE)."""
    kw = {"hidden_layers": 2, "eta": 0.1, "steps": 16, "gamma0": gamma0, "weight_decay": wd,
          "momentum": mu}
    th = solve_rule_deep_linear(X, Y2, rule=rule, rho=rho, **kw)
    run = simulate_rule_training(X, Y2, rule=rule, rho=rho, widths=256, networks=32, seed=21,
                                 record_kernels=False, **kw)
    assert run.f.shape[-1] == 2 and run.ntk.shape[-2:] == (2, 2)
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(th, run, "ntk").max_abs_z < 4.5
    if wd == 0:
        sep = np.stack([solve_rule_deep_linear(X, Y2[:, k], rule=rule, rho=rho, **kw).f
                        for k in range(2)], -1)
        assert et.compare(sep, run, "f").max_abs_z > 5


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho,gamma0", [("gd", None, 1.0), ("fa", 0.5, 1.0),
                                             ("dfa", None, 1.0), ("hebb", None, 0.6)])
def test_two_outputs_one_over_n(opt_in_slow, rule, rho, gamma0):
    """Two outputs with weight decay and momentum, N = 256 .. 1024 (32 networks): the mean
    squared gap over f, Phi^l(t, s) and the C x C eNTK falls as N^slope, slope -1 within 4.5 SE."""
    kw = {"hidden_layers": 2, "eta": 0.1, "steps": 16, "gamma0": gamma0, "weight_decay": 0.5,
          "momentum": 0.5}
    th = solve_rule_deep_linear(X, Y2, rule=rule, rho=rho, **kw)
    widths, cmps = [256, 512, 1024], []
    for N in widths:
        run = simulate_rule_training(X, Y2, rule=rule, rho=rho, widths=N, networks=32, seed=6,
                                     **kw)
        d = (np.mean((run.f - th.f) ** 2, axis=(1, 2, 3))
             + np.mean((run.phi - th.phi) ** 2, axis=(1, 2, 3, 4, 5))
             + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3, 4, 5)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    print(rule, rho, fit)
    assert abs(fit.slope + 1.0) < 4.5 * fit.slope_stderr, fit
    assert et.compare(th, run, "f").max_abs_z < 4.5


@pytest.mark.parametrize("rule", ["fa", "hebb"])
def test_test_points_two_outputs(rule):
    """Test points ride along (Delta = 0) with two outputs, decay and momentum: f and the eNTK on
    train and test points within 4.5 SE of 16 width-512 networks."""
    rng = np.random.default_rng(0)
    Xr, Xt, Yr = rng.standard_normal((3, 4)), rng.standard_normal((2, 4)), rng.standard_normal((3, 2))
    kw = dict(rule=rule, hidden_layers=2, gamma0=0.8, eta=0.1, steps=10, weight_decay=0.3,
              momentum=0.3)
    th = solve_rule_deep_linear(Xr, Yr, X_test=Xt, **kw)
    run = simulate_rule_training(Xr, Yr, X_test=Xt, widths=512, networks=16, seed=1,
                                 record_kernels=False, **kw)
    assert th.f.shape == run.f.shape[1:] == (10, 5, 2)
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(th, run, "ntk").max_abs_z < 4.5
