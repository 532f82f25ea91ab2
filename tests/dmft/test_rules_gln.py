"""Rich-regime DMFT of deep gated linear networks (GLN, Bordelon & Pehlevan, ICLR 2023, eq. (40)
with phi(h) -> phi'(m) h) with two or more hidden layers: both responses A and B are needed, and
both are strictly causal because the gates are frozen.

Checked against the exact deep linear GD DMFT (linear gates), the two-layer sampled solver
(L = 1) and trained ReLU-gated networks (gap ~ 1/N, fitted slope; gamma0 misstated rejected).
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.simulation.rules import simulate_rule_training
from effth.dmft import solve_deep_linear
from effth.dmft.rules.solvers import solve_rule_forward, solve_rule_two_layer

from ._sampled_checks import assert_sampled_matches_exact

rng = np.random.default_rng(2)
X = rng.standard_normal((3, 5))
Y = np.array([1.0, -1.0, 0.5])


@pytest.mark.parametrize("L", [2, 3])
def test_gln_linear_gates_is_deep_linear_gd(L):
    """Linear gates (phi' = 1): the gated network is the linear network trained by GD.  f, Phi^l,
    G^l and the eNTK agree with solve_deep_linear within 5 batch SE plus 2 % of the scale (the
    batch errors ignore the noise of the estimated kernels and responses fed back into the
    march); the exact solution at gamma0 x 0.5 is outside the band."""
    kw = {"gamma0": 1.0, "eta": 0.1, "steps": 15, "hidden_layers": L}
    ex = solve_deep_linear(X, Y, **kw)
    bad = solve_deep_linear(X, Y, **dict(kw, gamma0=0.5))
    mc = solve_rule_forward(X, Y, rule="gln", activation="linear", samples=40000, seed=1, **kw)
    hidden = range(1, L + 1)
    assert_sampled_matches_exact(mc, ex, bad, (("f", (None,)), ("phi", hidden), ("g", hidden),
                                               ("ntk", (None,))))
    np.testing.assert_array_equal(mc.value("gtilde"), mc.value("g"))     # GD of the gated net


def test_gln_one_hidden_layer_matches_two_layer_solver():
    """L = 1 with step gates: the deep marcher (A = B = 0 there) equals the two-layer sampled
    solver within 4.5 combined batch SE (f, eNTK)."""
    kw = {"rule": "gln", "activation": "relu", "gamma0": 1.0, "eta": 0.1, "steps": 15}
    two = solve_rule_two_layer(X, Y, samples=40000, seed=3, **kw)
    deep = solve_rule_forward(X, Y, hidden_layers=1, samples=40000, seed=1, **kw)
    for name in ("f", "ntk"):
        se = np.sqrt(two.stderr(name) ** 2 + deep.stderr(name) ** 2)
        z = np.abs(two.value(name) - deep.value(name))[1:] / np.maximum(se[1:], 1e-12)
        assert z.max() < 4.5, name


def _study(L, widths, seeds, samples, gamma0=1.5):
    kw = {"rule": "gln", "eta": 0.1, "steps": 20, "hidden_layers": L, "activation": "relu"}
    th = solve_rule_forward(X, Y, gamma0=gamma0, samples=samples, **kw)
    cmps = []
    for N in widths:
        run = simulate_rule_training(X, Y, widths=N, gamma0=gamma0, seed=range(seeds), **kw)
        d = (np.mean((run.f - th.f) ** 2, axis=(1, 2))
             + np.mean((run.phi - th.phi) ** 2, axis=(1, 2, 3, 4, 5))
             + np.mean((run.g - th.g) ** 2, axis=(1, 2, 3, 4, 5))
             + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    wrong = solve_rule_forward(X, Y, gamma0=0.8 * gamma0, samples=samples, **kw)
    return th, wrong, run, et.scaling_fit(cmps, widths)


def _zmax(th, run):
    """Largest |z| of f and of the eNTK (theory and network errors combined)."""
    return max(et.compare(th, run, name).max_abs_z for name in ("f", "ntk"))


def test_gln_relu_gates_vs_networks():
    """Depth 3 (L = 2), step gates, gamma0 = 1.5, widths 125-1000, 24 networks per width:
    D(N) = mean (f_N - f)^2 + mean (Phi_N - Phi)^2 + mean (G_N - G)^2 + mean (K_N - K)^2 falls as
    N^slope with slope -1 within 4 SE; at N = 1000 f and the eNTK pass the z-test (4.5 sigma),
    and the theory at gamma0 x 0.8 fails it (> 6 sigma)."""
    th, wrong, run, fit = _study(2, [125, 250, 500, 1000], 24, 40000)
    assert fit.slope_stderr < 0.2 and abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    assert _zmax(th, run) < 4.5
    assert _zmax(wrong, run) > 6


@pytest.mark.slow
def test_gln_relu_gates_width_scaling_wide(opt_in_slow):
    """Depth 4 (L = 3), widths 250-2000, 32 networks per width."""
    th, wrong, run, fit = _study(3, [250, 500, 1000, 2000], 32, 60000)
    print("GLN relu L=3", fit, "z", _zmax(th, run), "wrong z", _zmax(wrong, run))
    assert abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    assert _zmax(th, run) < 4.5


@pytest.mark.slow
def test_gln_relu_gates_at_widths_1000_to_4000(opt_in_slow):
    """Depth 3 (L = 2), widths 1000-4000, 24 networks per width, 200000 DMFT samples: slope -1
    within 4 SE, the z-test passes (4.5 sigma) and the theory at gamma0 x 0.8 fails it."""
    th, wrong, run, fit = _study(2, [1000, 2000, 4000], 24, 200000)
    print("GLN relu L=2, N=1000-4000", fit, "z", _zmax(th, run), "wrong z", _zmax(wrong, run))
    assert fit.slope_stderr < 0.35 and abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    assert _zmax(th, run) < 4.5
    assert _zmax(wrong, run) > 6
