"""ρ-FA with ReLU (a kinked activation) at two or more hidden layers (Bordelon & Pehlevan,
ICLR 2023, eq. (40)): the readout term gamma0^-1 <w^L(0) φ(h^L(t))> is the direct sample average
with the control variate φ(h^L(0)) instead of the Stein form, which needs φ'' pointwise.

Checked against the two-layer sampled solver (L = 1) and trained ReLU networks (z-test, gamma0
misstated rejected; gap ~ 1/N in the slow study).
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.simulation.rules import simulate_rule_training
from effth.dmft.rules.solvers import solve_rule_forward, solve_rule_two_layer

rng = np.random.default_rng(2)
X = rng.standard_normal((3, 5))
Y = np.array([1.0, -1.0, 0.5])
KW = {"rule": "fa", "rho": 0.5, "activation": "relu", "eta": 0.1, "steps": 20}


def test_fa_relu_one_hidden_layer_matches_two_layer_solver():
    """L = 1: the deep marcher's direct readout average equals the two-layer solver within 4.5
    combined batch SE."""
    two = solve_rule_two_layer(X, Y, gamma0=1.5, samples=40000, seed=3, **KW)
    deep = solve_rule_forward(X, Y, hidden_layers=1, gamma0=1.5, samples=40000, seed=1, **KW)
    se = np.sqrt(two.stderr("f") ** 2 + deep.stderr("f") ** 2)
    assert (np.abs(two.f - deep.f)[1:] / se[1:]).max() < 4.5


def test_fa_relu_two_hidden_layers_vs_networks():
    """L = 2, gamma0 = 1.5: the seed means of 32 width-1000 ReLU networks (f and the eNTK) agree
    with the sampled DMFT within 4.5 sigma (theory and network errors combined), and the theory
    at gamma0 x 0.8 is rejected (> 6 sigma)."""
    kw = dict(KW, hidden_layers=2)
    th = solve_rule_forward(X, Y, gamma0=1.5, samples=40000, **kw)
    run = simulate_rule_training(X, Y, widths=1000, gamma0=1.5, seed=range(32), **kw)
    assert max(et.compare(th, run, q).max_abs_z for q in ("f", "ntk")) < 4.5
    wrong = solve_rule_forward(X, Y, gamma0=1.2, samples=40000, **kw)
    assert max(et.compare(wrong, run, q).max_abs_z for q in ("f", "ntk")) > 6


@pytest.mark.slow
@pytest.mark.parametrize("L", [2, 3])
def test_fa_relu_width_scaling(opt_in_slow, L):
    """D(N) = mean (f_N - f)^2 + mean (K_N - K)^2 ~ N^slope, widths 250-2000, 64 networks per
    width (ReLU ρ-FA errors are heavy-tailed), slope -1 within 4 SE.  At L = 3 the batch errors
    of one theory run underestimate its Monte-Carlo error about twofold (independent runs differ
    by up to 8 batch SE), so the theory is the mean of 6 independent runs and its error their
    spread; the z-test at N = 2000 uses that error."""
    kw = dict(KW, hidden_layers=L)
    reps = [solve_rule_forward(X, Y, gamma0=1.5, samples=40000, seed=s, **kw) for s in range(6)]
    th = {q: np.mean([r.value(q) for r in reps], axis=0) for q in ("f", "ntk")}
    th_se = {q: np.std([r.value(q) for r in reps], axis=0, ddof=1) / np.sqrt(len(reps))
             for q in ("f", "ntk")}
    cmps, widths = [], [250, 500, 1000, 2000]
    for N in widths:
        run = simulate_rule_training(X, Y, widths=N, gamma0=1.5, seed=range(64), **kw)
        d = (np.mean((run.f - th["f"]) ** 2, axis=(1, 2))
             + np.mean((run.ntk - th["ntk"]) ** 2, axis=(1, 2, 3)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    z = max(float(np.max(np.abs(run.value(q) - th[q])[1:]
                         / np.sqrt(run.stderr(q)[1:] ** 2 + th_se[q][1:] ** 2 + 1e-30)))
            for q in ("f", "ntk"))
    print("rho-FA relu L =", L, fit, "max |z| at N = 2000:", round(z, 2))
    assert abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    assert z < 5.0
