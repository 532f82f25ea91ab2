"""The true-gradient kernels G^l, G~^l = <g^l g~^l> and the eNTK K = sum_l G~^{l+1} Phi^l of the
deep forward solvers (DFA, Hebb, ρ-FA; Bordelon & Pehlevan, ICLR 2023, eqs. (4), (40)).

Checked against the exact deep linear DMFT (linear activation) and against trained tanh
networks: the gap falls like 1/N (fitted slope) and a theory with gamma0 misstated is rejected.
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.simulation.rules import simulate_rule_training
from effth.dmft.rules.solvers import solve_rule_deep_linear, solve_rule_forward

from ._sampled_checks import assert_sampled_matches_exact

rng = np.random.default_rng(2)
X = rng.standard_normal((3, 5))
Y = np.array([1.0, -1.0, 0.5])
IDX = np.arange(20)


@pytest.mark.parametrize("rule,rho", [("dfa", None), ("hebb", None), ("fa", 0.5)])
def test_true_gradient_kernels_linear_match_exact(rule, rho):
    """Linear activation, L = 3: G^l, G~^l (all layers) and the eNTK agree with the exact
    marcher within 5 batch SE plus 2 % of the kernel's scale (the batch errors ignore the noise
    of the estimated kernels fed into the conditional draws and the Stein regressions; at
    160000 draws the largest gap shrinks fourfold); the exact solution at gamma0 x 0.5 is outside
    the same band."""
    kw = {"rule": rule, "rho": rho, "gamma0": 0.5 if rule == "hebb" else 1.0, "eta": 0.1,
          "steps": 15, "hidden_layers": 3}
    ex = solve_rule_deep_linear(X, Y, **kw)
    mc = solve_rule_forward(X, Y, activation="linear", samples=40000, seed=2, **kw)
    bad = solve_rule_deep_linear(X, Y, **dict(kw, gamma0=0.5 * kw["gamma0"]))
    assert_sampled_matches_exact(mc, ex, bad, (("g", (1, 2, 3)), ("gtilde", (1, 2, 3)),
                                               ("ntk", (None,))))


def _equal_time(arr):
    """Equal-time slice ``[..., t, mu, t, nu]`` of a two-time kernel (last four axes)."""
    return arr[..., IDX, :, IDX, :]


def _z(th, run, name, layer):
    """Largest |z| over the equal-time entries, network and theory errors combined."""
    if name == "ntk":
        a, sa, b, sb = th.value(name), th.stderr(name), run.value(name), run.stderr(name)
    else:
        a, sa = _equal_time(th.value(name, layer)), _equal_time(th.stderr(name, layer))
        b, sb = _equal_time(run.value(name, layer)), _equal_time(run.stderr(name, layer))
    return float(np.max(np.abs(a - b) / np.sqrt(sa ** 2 + sb ** 2 + 1e-30)))


def _width_study(rule, rho, L, widths, seeds, samples, gamma0):
    kw = {"rule": rule, "rho": rho, "eta": 0.1, "steps": 20, "hidden_layers": L,
          "activation": "tanh"}
    th = solve_rule_forward(X, Y, gamma0=gamma0, samples=samples, **kw)
    cmps = []
    for N in widths:
        run = simulate_rule_training(X, Y, widths=N, gamma0=gamma0, seed=range(seeds), **kw)
        d = (np.mean((run.gtilde - th.gtilde) ** 2, axis=(1, 2, 3, 4, 5))
             + np.mean((run.g - th.g) ** 2, axis=(1, 2, 3, 4, 5))
             + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    wrong = solve_rule_forward(X, Y, gamma0=0.8 * gamma0, samples=samples, **kw)
    return th, wrong, run, et.scaling_fit(cmps, widths)


@pytest.mark.parametrize("rule,rho", [("dfa", None), ("hebb", None), ("fa", 0.5)])
def test_true_gradient_kernels_tanh_vs_networks(rule, rho):
    """Depth-3 (L = 2) tanh networks, widths 125-1000, 24 per width: D(N) = mean (G~_N - G~)^2 +
    mean (G_N - G)^2 + mean (K_N - K)^2 falls as N^slope with slope -1 within 4 SE; at N = 1000
    the equal-time G^l, G~^l and the eNTK agree (4.5 sigma, theory and network errors combined)
    and the theory at gamma0 x 0.8 is rejected (> 6 sigma)."""
    g0 = 1.0 if rule == "hebb" else 1.5
    th, wrong, run, fit = _width_study(rule, rho, 2, [125, 250, 500, 1000], 24, 40000, g0)
    assert fit.slope_stderr < 0.2 and abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    checks = [("ntk", None)] + [(q, l) for q in ("g", "gtilde") for l in (1, 2)]
    assert max(_z(th, run, q, l) for q, l in checks) < 4.5
    assert max(_z(wrong, run, q, l) for q, l in checks) > 6


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho", [("dfa", None), ("hebb", None), ("fa", 0.5)])
def test_true_gradient_kernels_tanh_width_scaling_wide(opt_in_slow, rule, rho):
    """Depth 4 (L = 3), widths 250-2000, 32 networks per width.  The z-test at N = 2000 takes the
    largest of ~1300 equal-time entries with errors estimated from 32 networks (t tails with 31
    degrees of freedom: P(|t| > 5) ~ 2e-5 per entry), so its bound is 5 sigma."""
    g0 = 1.0 if rule == "hebb" else 1.5
    th, _wrong, run, fit = _width_study(rule, rho, 3, [250, 500, 1000, 2000], 32, 60000, g0)
    print("true-gradient kernels, tanh L=3", rule, rho, fit)
    assert abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
    checks = [("ntk", None)] + [(q, l) for q in ("g", "gtilde") for l in (1, 2, 3)]
    z = max(_z(th, run, q, l) for q, l in checks)
    print("max |z| at N = 2000:", round(z, 2))
    assert z < 5.0


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho", [("dfa", None), ("hebb", None), ("fa", 0.5)])
def test_true_gradient_kernels_at_widths_1000_to_4000(opt_in_slow, rule, rho):
    """Depth 3 (L = 2), widths 1000-4000 (the widths Bordelon & Pehlevan train at), 24 networks
    per width, 200000 DMFT samples so that the theory's own noise stays below the 1/N gap:
    D(N) falls as N^slope with slope -1 within 4 SE (about 1 minute per rule)."""
    g0 = 1.0 if rule == "hebb" else 1.5
    _th, _wrong, _run, fit = _width_study(rule, rho, 2, [1000, 2000, 4000], 24, 200000, g0)
    print("true-gradient kernels, tanh L=2, N=1000-4000", rule, rho, fit)
    assert fit.slope_stderr < 0.35 and abs(fit.slope + 1) < 4 * fit.slope_stderr, fit
