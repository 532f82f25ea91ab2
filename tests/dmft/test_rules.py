"""Learning rules at infinite width (Bordelon & Pehlevan, ICLR 2023): lazy eNTKs (Table 2),
two-layer exact solutions (App. F), the deep-linear DMFT of every rule (App. E) and its
agreement with trained networks (gap ~ 1/N).

Reference numbers are the paper's tables/figures re-derived independently (arc-cosine closed
forms, App. A's GD solver, the App. F ODE tables), never outputs of the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError, NotDerivedError
from effth.simulation.rules import simulate_rule_training
from effth.dmft import solve_deep_linear
from effth.dmft.rules.solvers import (
    fa_fixed_point,
    gradient_correlation,
    lazy_entk,
    learning_rule,
    solve_rule_deep_linear,
    target_overlap,
    task_alignment,
    two_layer_exact,
)


def kx_angle(theta):
    return np.array([[1.0, np.cos(theta)], [np.cos(theta), 1.0]])


# Table C1 of the reference notes (ReLU, |x|^2 = D, rho = 0.5): diag / off-diag per rule
C1 = {
    (1, np.pi / 3): {"gd": (1.0, 0.471166), "fa": (0.75, 0.387832), "dfa": (0.5, 0.304499),
                     "gln": (1.0, 0.333333)},
    (1, np.pi / 2): {"gd": (1.0, 0.159155), "fa": (0.75, 0.159155), "dfa": (0.5, 0.159155),
                     "gln": (1.0, 0.0)},
    (2, np.pi / 3): {"gd": (0.75, 0.337870), "fa": (0.4375, 0.239664), "dfa": (0.25, 0.170976),
                     "gln": (0.75, 0.166667)},
    (2, np.pi / 2): {"gd": (0.75, 0.171427), "fa": (0.4375, 0.147430), "dfa": (0.25, 0.123433),
                     "gln": (0.75, 0.0)},
    (3, np.pi / 3): {"gd": (0.5, 0.217231), "fa": (0.234375, 0.136587), "dfa": (0.125, 0.092266),
                     "gln": (0.5, 0.074074)},
    (3, np.pi / 2): {"gd": (0.5, 0.132549), "fa": (0.234375, 0.100090), "dfa": (0.125, 0.075603),
                     "gln": (0.5, 0.0)},
}


@pytest.mark.parametrize("L,theta", list(C1))
def test_lazy_entk_table_c1(L, theta):
    for rule, (diag, off) in C1[(L, theta)].items():
        rho = 0.5 if rule == "fa" else None
        K = lazy_entk(kx_angle(theta), "relu", rule=rule, rho=rho, hidden_layers=L).ntk
        np.testing.assert_allclose(np.diag(K), diag, atol=2e-6, err_msg=rule)
        np.testing.assert_allclose([K[0, 1], K[1, 0]], off, atol=2e-6, err_msg=rule)
    # Hebb equals DFA in the lazy limit (readout only: Phi^L)
    kh = lazy_entk(kx_angle(theta), "relu", rule="hebb", hidden_layers=L).ntk
    np.testing.assert_allclose(kh[0, 1], C1[(L, theta)]["dfa"][1], atol=2e-6)


def test_lazy_entk_sqrt2_relu_and_gln_closed_form():
    """sqrt(2)-ReLU, L = 2, theta = pi/3 (notes: GD 3 / 1.351480, FA 1.75 / 0.958657, NNGP 1 /
    0.683906, GLN 3 / 0.666667) and the GLN closed form (L+1) ((pi - theta)/2pi)^L cos(theta)."""
    import sympy as sp

    from effth.activations import Z
    act = sp.sqrt(2) * sp.Max(0, Z)
    kx = kx_angle(np.pi / 3)
    ref = {"gd": (3.0, 1.351480), "fa": (1.75, 0.958657), "dfa": (1.0, 0.683906),
           "gln": (3.0, 0.666667)}
    for rule, (d, o) in ref.items():
        K = lazy_entk(kx, act, rule=rule, rho=0.5 if rule == "fa" else None,
                      hidden_layers=2).ntk
        np.testing.assert_allclose([K[0, 0], K[0, 1]], [d, o], atol=2e-6, err_msg=rule)
    for L in (1, 2, 4, 6):
        for th in (0.3, 1.1, 2.5):
            K = lazy_entk(kx_angle(th), "relu", rule="gln", hidden_layers=L).ntk
            exact = (L + 1) * ((np.pi - th) / (2 * np.pi)) ** L * np.cos(th)
            np.testing.assert_allclose(K[0, 1], exact, rtol=1e-10)
            # the printed Table 2 (no factor L+1) is rejected by the same closed form
            assert abs(K[0, 1] / (L + 1) - exact) > 0.3 * abs(exact)


@pytest.mark.parametrize("L", [1, 2, 4])
@pytest.mark.parametrize("rho", [-0.5, 0.0, 0.3, 1.0])
def test_lazy_entk_linear_closed_forms(L, rho):
    """Linear networks: K_GD = (L+1) K^x, K_FA = sum_l rho^(L-l) K^x, K_DFA = K_Hebb = K^x."""
    kx = np.array([[1.3, 0.2, -0.4], [0.2, 0.8, 0.1], [-0.4, 0.1, 1.1]])
    np.testing.assert_allclose(lazy_entk(kx, "linear", rule="gd", hidden_layers=L).ntk,
                               (L + 1) * kx, rtol=1e-12)
    np.testing.assert_allclose(lazy_entk(kx, "linear", rule="fa", rho=rho, hidden_layers=L).ntk,
                               sum(rho ** k for k in range(L + 1)) * kx, rtol=1e-12)
    for r in ("dfa", "hebb"):
        np.testing.assert_allclose(lazy_entk(kx, "linear", rule=r, depth=L + 1).ntk, kx)
    np.testing.assert_allclose(lazy_entk(kx, "linear", rule="gln", hidden_layers=L).ntk,
                               (L + 1) * kx, rtol=1e-12)


def test_lazy_entk_tanh_fa_rho1_is_gd_and_latex():
    kx = kx_angle(0.7)
    a = lazy_entk(kx, "tanh", rule="fa", rho=1.0, hidden_layers=3)
    b = lazy_entk(kx, "tanh", rule="gd", hidden_layers=3)
    np.testing.assert_allclose(a.ntk, b.ntk, rtol=1e-12)
    assert r"\rho^{L-\ell}" in a.latex() and "(L+1)" in lazy_entk(kx, "relu", rule="gln",
                                                                   hidden_layers=2).latex()
    assert a.stderr("ntk") is None and a.layers == (1, 2, 3)
    assert a.value("gtilde", layer=3).shape == (2, 2)


def test_rule_validation():
    with pytest.raises(DomainError, match=r"\[-1, 1\]"):
        learning_rule("fa", rho=1.5)
    with pytest.raises(DomainError):
        learning_rule("fa", rho=float("nan"))
    with pytest.raises(DomainError, match="feedback alignment only"):
        learning_rule("gd", rho=0.3)
    with pytest.raises(DomainError, match="unknown learning rule"):
        learning_rule("sgd-momentum")
    with pytest.raises(DomainError):
        lazy_entk(np.array([[1.0, np.nan], [np.nan, 1.0]]), "relu", rule="gd", hidden_layers=1)
    with pytest.raises(NotDerivedError, match="linear networks only"):
        solve_rule_deep_linear(kernel=np.eye(2), y=np.ones(2), rule="fa", hidden_layers=1,
                               gamma0=1.0, eta=0.1, steps=3, activation="tanh")
    with pytest.raises(DomainError):
        solve_rule_deep_linear(kernel=np.eye(2), y=np.ones(2), rule="gd", hidden_layers=1,
                               gamma0=float("inf"), eta=0.1, steps=3)
    assert learning_rule("FA", rho=0.25).rho == 0.25 and learning_rule("dfa").rho == 0.0
    # one rule object for theory and networks
    rule = learning_rule("fa", rho=0.3)
    run = simulate_rule_training(np.eye(2), np.ones(2), rule=rule, hidden_layers=1, widths=8,
                                 gamma0=1.0, eta=0.1, steps=2)
    assert run.rule == "fa" and run.rho == 0.3
    with pytest.raises(DomainError, match="contradicts"):
        simulate_rule_training(np.eye(2), np.ones(2), rule=rule, rho=0.5, hidden_layers=1,
                               widths=8, gamma0=1.0, eta=0.1, steps=2)


# ------------------------------------------------------------ two-layer exact (App. F), table C2

def test_two_layer_gd_table_and_closed_form():
    t = [0.25, 0.5, 1.0, 2.0, 3.0]
    s = two_layer_exact("gd", gamma0=1.0, times=t)
    np.testing.assert_allclose(s.delta, [0.597723, 0.338136, 0.093412, 0.005772, 0.000342],
                               atol=1.5e-6)
    np.testing.assert_allclose(s.h_y, [1.077881, 1.199193, 1.349779, 1.410138, 1.413972],
                               atol=1.5e-6)
    # independent closed form t(a) of App. F at gamma0 y = 2
    g = 2.0
    s2 = two_layer_exact("gd", gamma0=2.0, times=[0.5, 1.0])
    np.testing.assert_allclose(s2.delta, [0.262150, 0.034331], atol=1.5e-6)
    for tt, a in zip([0.5, 1.0], s2.delta):
        q = np.sqrt(1 + g * g)
        t_of_a = np.log((1 + g * g * (1 - a) + q * np.sqrt(1 + g * g * (1 - a) ** 2))
                        / (a * (1 + q))) / (2 * q)
        assert abs(t_of_a - tt) < 1e-8
    # the printed (7) without the factor 2 is far off
    s_wrong = two_layer_exact("gd", gamma0=1.0, times=[2.0 * 0.5])
    assert abs(s_wrong.delta[0] - 0.338136) > 0.2


@pytest.mark.parametrize("rho,row", [(0.0, (0.580861, 0.289562, 0.051863, 0.770917, 1.594313, 0.297157)),
                                     (0.5, (0.455363, 0.186261, 0.026181, 0.596072, 1.355301, 0.677651)),
                                     (1.0, (0.356542, 0.117755, 0.011703, 0.473466, 1.224170, 1.112085))])
def test_two_layer_fa_table(rho, row):
    s = two_layer_exact("fa", rho=rho, gamma0=1.0, times=[0.5, 1.0, 2.0, 80.0])
    np.testing.assert_allclose(s.delta[:3], row[:3], atol=1.5e-6)
    fp = fa_fixed_point(1.0, 1.0, rho)
    np.testing.assert_allclose([fp["a"], fp["h_y"], fp["gtilde"]], row[3:], atol=1.5e-6)
    np.testing.assert_allclose([s.h_y[-1], s.gtilde[-1]], row[4:], atol=1e-6)
    # the cubic itself: a^3/2 + (1 + rho) a = gamma0 y
    assert abs(0.5 * row[3] ** 3 + (1 + rho) * row[3] - 1.0) < 1e-5


def test_two_layer_fa_delta_h_table_and_dfa():
    """Fig. 5c table: Delta H_y(inf) for gamma0 = 0.1, 1, 10, 100."""
    for rho, ref in [(0.0, (0.009902, 0.594313, 6.09866, 32.879)),
                     (1.0, (0.002497, 0.224170, 4.97064, 31.586))]:
        got = [fa_fixed_point(g, 1.0, rho)["h_y"] - 1 for g in (0.1, 1, 10, 100)]
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=5e-7)
    a = two_layer_exact("dfa", gamma0=1.0, times=[0.5, 1.0])
    np.testing.assert_allclose(a.delta, [0.580861, 0.289562], atol=1.5e-6)


def test_two_layer_hebb_table():
    s = two_layer_exact("hebb", gamma0=1.0, times=[0.5, 1.0, 2.0, 3.0, 300.0])
    np.testing.assert_allclose(s.delta[:4], [0.450192, 0.164083, 0.023096, 0.003412], atol=1.5e-6)
    np.testing.assert_allclose(s.h_y[-1], 1.902377, atol=1e-6)
    for g0, h in [(0.5, 1.469612), (2.0, 2.713548)]:
        np.testing.assert_allclose(two_layer_exact("hebb", gamma0=g0, times=[400.0]).h_y, h,
                                   atol=1e-6)
    # early-time equalities (Fig. 5a): rho=1 FA and GD start at -2 Delta, rho=0 FA and Hebb at -Delta
    dt = 1e-6
    for rule, rho, rate in [("gd", None, 2.0), ("fa", 1.0, 2.0), ("fa", 0.0, 1.0), ("hebb", None, 1.0)]:
        d = two_layer_exact(rule, rho=rho, gamma0=1.0, times=[dt]).delta[0]
        assert abs((1.0 - d) / dt - rate) < 1e-4, rule


# ------------------------------------------------------------ deep linear DMFT (App. E)

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
Y = np.array([1.0, -0.5])


def test_deep_linear_gd_reference_solver():
    """App. A's solver (NTK-Euler) check values, and the exact closure equals effth's GD solver."""
    res = solve_rule_deep_linear(kernel=KX, y=Y, rule="gd", hidden_layers=1, gamma0=1.0,
                                 eta=0.01, steps=201, closure="ntk")
    np.testing.assert_allclose(res.value("loss")[[50, 100, 200]],
                               [0.19337217, 0.05005791, 0.0018894], rtol=2e-6)
    for L in (1, 3):
        a = solve_rule_deep_linear(kernel=KX, y=Y, rule="gd", hidden_layers=L, gamma0=1.3,
                                   eta=0.05, steps=25)
        b = solve_deep_linear(kernel=KX, y=Y, hidden_layers=L, gamma0=1.3, eta=0.05, steps=25)
        np.testing.assert_allclose(a.f, b.f, atol=1e-12)
        np.testing.assert_allclose(a.phi, b.phi, atol=1e-12)
        # GLN with linear gates is GD
        c = solve_rule_deep_linear(kernel=KX, y=Y, rule="gln", hidden_layers=L, gamma0=1.3,
                                   eta=0.05, steps=25)
        np.testing.assert_allclose(c.f, b.f, atol=1e-12)


@pytest.mark.parametrize("rule,rho,ref", [("gd", None, 0.093412), ("fa", 0.5, 0.186261),
                                          ("fa", 1.0, 0.117755), ("dfa", None, 0.289562),
                                          ("hebb", None, 0.164083)])
def test_deep_linear_L1_matches_two_layer_table(rule, rho, ref):
    """Whitened L = 1 DMFT, Richardson-extrapolated in eta (Euler error O(eta)), reproduces the
    table C2 value Delta(t = 1); the O(eta^2) remainder is ~1e-5 at these steps."""
    out = []
    for eta in (0.01, 0.005):
        r = solve_rule_deep_linear(kernel=np.eye(1), y=np.array([1.0]), rule=rule, rho=rho,
                                   hidden_layers=1, gamma0=1.0, eta=eta,
                                   steps=round(1 / eta) + 1)
        out.append(r.delta[-1, 0])
    assert abs(2 * out[1] - out[0] - ref) < 3e-5


def test_deep_linear_L2_gd_table_c3():
    """C3, L = 2 (Richardson, NTK-Euler): loss 0.08459, 0.004357 at t = 0.5, 1."""
    out = []
    for eta in (0.01, 0.005):
        r = solve_rule_deep_linear(kernel=KX, y=Y, rule="gd", hidden_layers=2, gamma0=1.0, eta=eta,
                                   steps=round(1 / eta) + 1, closure="ntk")
        loss = r.value("loss")
        out.append(loss[[round(0.5 / eta), round(1 / eta)]])
    np.testing.assert_allclose(2 * out[1] - out[0], [0.08459, 0.004357], atol=2e-5)


def test_deep_linear_dfa_equals_rho0_fa_and_rho_ordering():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4, 6))
    y = np.array([1.0, -1.0, 1.0, -1.0])
    kw = {"hidden_layers": 3, "gamma0": 1.0, "eta": 0.1, "steps": 40}
    dfa = solve_rule_deep_linear(X, y, rule="dfa", **kw)
    fa0 = solve_rule_deep_linear(X, y, rule="fa", rho=0.0, **kw)
    np.testing.assert_allclose(dfa.f, fa0.f, atol=1e-12)
    res = {rho: solve_rule_deep_linear(X, y, rule="fa", rho=rho, **kw) for rho in (0.0, 0.5, 1.0)}
    gd = solve_rule_deep_linear(X, y, rule="gd", **kw)
    align = {k: task_alignment(v.ntk[-1], y) for k, v in res.items()}
    assert align[0.0] > align[0.5] > align[1.0]              # Fig. 4c: smaller rho aligns more
    assert align[0.0] > task_alignment(gd.ntk[-1], y)        # FA ends above GD (Fig. 1b)
    hy = {k: target_overlap(v.phi[-1, -1, :, -1, :], y) - target_overlap(v.phi[-1, 0, :, 0, :], y)
          for k, v in res.items()}
    assert hy[0.0] > hy[0.5] > hy[1.0] > 0                   # more feature learning at small rho
    # loss falls faster for larger rho (Fig. 4a) and G~^1(0) = rho^L (Fig. 4b, corrected index)
    losses = [res[k].value("loss")[10] for k in (0.0, 0.5, 1.0)]
    assert losses[0] > losses[1] > losses[2]
    np.testing.assert_allclose(res[0.5].gtilde[0, 0, 0, 0, 0], 0.5 ** 3, rtol=1e-12)


def test_diagnostics():
    y = np.array([1.0, -1.0])
    K = np.array([[2.0, -1.0], [-0.5, 2.0]])
    assert abs(task_alignment(K, y) - (y @ K @ y) / (np.linalg.norm(K) * 2)) < 1e-15
    assert abs(target_overlap(np.eye(2), y) - 0.5) < 1e-15
    g = np.ones((1, 2, 3))
    assert gradient_correlation(g, 2 * g) == pytest.approx(1.0)
    assert gradient_correlation(g, -g) == pytest.approx(-1.0)
    with pytest.raises(DomainError):
        task_alignment(np.zeros((2, 2)), y)


# ------------------------------------------------------------ DMFT vs trained networks

def _disc(th, run):
    """Per seed: mean squared difference over f, Phi^l(t, s) and the eNTK (fluctuations
    O(N^-1/2), bias O(N^-1): D ~ 1/N)."""
    return (np.mean((run.f - th.f) ** 2, axis=(1, 2))
            + np.mean((run.phi - th.phi) ** 2, axis=(1, 2, 3, 4, 5))
            + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))


def _width_study(rule, rho, widths, seeds, gamma0, **kw):
    X = np.linalg.cholesky(2 * KX)
    th = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, gamma0=gamma0, **kw)
    cmps, runs = [], []
    for N in widths:
        run = simulate_rule_training(X, Y, rule=rule, rho=rho, widths=N, seed=seeds,
                                     activation="linear", gamma0=gamma0, **kw)
        d = _disc(th, run)
        runs.append(run)
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    return th, et.scaling_fit(cmps, widths), runs[-1]


@pytest.mark.parametrize("rule,rho,gamma0", [("gd", None, 1.5), ("fa", 0.5, 1.5),
                                             ("dfa", None, 1.5), ("hebb", None, 0.75)])
def test_dmft_vs_networks_one_over_n(rule, rho, gamma0):
    """D(N) ~ N^slope with slope -1 within 4.5 SE (seed-to-seed errors, 32 networks per width, 48 for Hebb);
    the seed-mean outputs and eNTK at N = 800 pass a z-test (4.5 sigma) that rejects the same
    theory at gamma0 x 0.9 (> 5 sigma)."""
    kw = {"hidden_layers": 2, "eta": 0.05, "steps": 21}
    seeds = range(48 if rule == "hebb" else 32)      # Hebb's errors are heavier-tailed
    th, fit, run = _width_study(rule, rho, [100, 200, 400, 800], seeds, gamma0, **kw)
    assert fit.slope_stderr < 0.2, fit
    assert abs(fit.slope + 1.0) < 4.5 * fit.slope_stderr, fit
    assert et.compare(th, run, "f").max_abs_z < 4.5
    assert et.compare(th, run, "ntk").max_abs_z < 4.5
    X = np.linalg.cholesky(2 * KX)
    wrong = solve_rule_deep_linear(X, Y, rule=rule, rho=rho, gamma0=0.9 * gamma0, **kw)
    assert max(et.compare(wrong, run, "f").max_abs_z, et.compare(wrong, run, "ntk").max_abs_z) > 5


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho,gamma0", [("gd", None, 1.5), ("fa", 0.0, 1.5), ("fa", 0.5, 1.5),
                                             ("dfa", None, 1.5), ("hebb", None, 0.5)])
def test_dmft_vs_networks_one_over_n_wide(opt_in_slow, rule, rho, gamma0):
    """Widths 500 .. 4000 (the paper's N = 1000-4000 range), depth 4 (L = 3)."""
    kw = {"hidden_layers": 3, "eta": 0.05, "steps": 21}
    seeds = range(64 if rule == "hebb" else 32)      # Hebb's errors are heavier-tailed
    th, fit, run = _width_study(rule, rho, [500, 1000, 2000, 4000], seeds, gamma0, **kw)
    print(rule, rho, fit)
    assert abs(fit.slope + 1.0) < 4.5 * fit.slope_stderr, fit
    assert et.compare(th, run, "f").max_abs_z < 4.5


# ------------------------------------------------------------ two-layer nonlinear (sampled, L = 1)

def test_two_layer_sampled_linear_matches_exact_deep_linear():
    """The sampled L = 1 solver with a linear activation reproduces the exact algebraic solver
    (z-test with the batch standard errors; 5 sigma because the errors ignore the noise fed back
    through Delta, which is small here)."""
    from effth.dmft.rules.solvers import solve_rule_two_layer
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((3, 5)), np.array([1.0, -1.0, 0.5])
    for rule, rho in [("gd", None), ("fa", 0.5), ("hebb", None)]:
        kw = {"rule": rule, "rho": rho, "gamma0": 1.0, "eta": 0.1, "steps": 15}
        ex = solve_rule_deep_linear(X, y, hidden_layers=1, **kw)
        mc = solve_rule_two_layer(X, y, activation="linear", samples=40000, **kw)
        z = np.abs(mc.f - ex.f)[1:] / mc.stderr("f")[1:]
        assert z.max() < 5.0, (rule, z.max())
        zk = np.abs(mc.ntk - ex.ntk) / np.maximum(mc.stderr("ntk"), 1e-12)
        assert zk.max() < 5.0, (rule, zk.max())


@pytest.mark.parametrize("rule,rho", [("gd", None), ("fa", 0.0), ("gln", None), ("hebb", None)])
def test_two_layer_relu_dmft_vs_networks(rule, rho):
    """Fig. 1 setting at CPU scale (two-layer ReLU, gamma0 = 1): D(N) = mean (f_N - f)^2 +
    mean (K_N - K)^2 falls as N^slope, slope -1 within 4.5 SE (24 networks per width, theory
    sampled with 10^5 draws, well below the network noise at N = 2000); the mean outputs at
    N = 2000 pass the z-test and the theory at gamma0 x 0.9 fails it (outputs or eNTK > 5 sigma)."""
    from effth.dmft.rules.solvers import solve_rule_two_layer
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((4, 10)), np.array([1.0, -1.0, 1.0, 1.0])
    kw = {"rule": rule, "rho": rho, "eta": 0.1, "steps": 20, "activation": "relu"}
    th = solve_rule_two_layer(X, y, gamma0=1.0, samples=100000, record_kernels=False, **kw)
    cmps = []
    widths = [250, 500, 1000, 2000]
    for N in widths:
        run = simulate_rule_training(X, y, hidden_layers=1, widths=N, gamma0=1.0, seed=range(24),
                                     record_kernels=False, **kw)
        d = (np.mean((run.f - th.f) ** 2, axis=(1, 2))
             + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    assert fit.slope_stderr < 0.2 and abs(fit.slope + 1) < 4.5 * fit.slope_stderr, fit
    assert et.compare(th, run, "f").max_abs_z < 4.5
    wrong = solve_rule_two_layer(X, y, gamma0=0.9, samples=100000, record_kernels=False, **kw)
    assert max(et.compare(wrong, run, "f").max_abs_z, et.compare(wrong, run, "ntk").max_abs_z) > 5.0


# ------------------------------------------------------------ deep nonlinear DFA / Hebb (sampled)

@pytest.mark.parametrize("rule,rho", [("dfa", None), ("hebb", None), ("fa", 0.5)])
def test_forward_solver_linear_matches_exact(rule, rho):
    """The sampled forward solver with a linear activation reproduces the exact deep linear
    DMFT (L = 2); its batch errors ignore the noise of the estimated Phi^{l-1} fed into the
    conditional sampling, so the tolerance is 5 batch SE on f plus an absolute 5e-3."""
    from effth.dmft.rules.solvers import solve_rule_forward
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((3, 5)), np.array([1.0, -1.0, 0.5])
    kw = {"rule": rule, "rho": rho, "gamma0": 1.0, "eta": 0.1, "steps": 15, "hidden_layers": 2}
    ex = solve_rule_deep_linear(X, y, **kw)
    mc = solve_rule_forward(X, y, activation="linear", samples=40000, seed=1, **kw)
    assert np.all(np.abs(mc.f - ex.f) < 5 * mc.stderr("f") + 5e-3)
    # a wrong theory (gamma0 x 0.5: feature learning halved) is outside the same band
    bad = solve_rule_deep_linear(X, y, **dict(kw, gamma0=0.5))
    assert np.any(np.abs(mc.f - bad.f) > 5 * mc.stderr("f") + 5e-3)
    with pytest.raises(NotDerivedError):
        solve_rule_forward(X, y, rule="gd", hidden_layers=2, gamma0=1.0, eta=0.1, steps=3)


@pytest.mark.parametrize("rule,rho", [("dfa", None), ("fa", 0.5)])
def test_forward_solver_tanh_vs_networks(rule, rho):
    """Figs. 3 and 6 settings at CPU scale: depth 4 (L = 3) tanh DFA and rho = 0.5 FA (the latter
    with the sampled responses C, D).  Seed-mean outputs of 16
    width-500 networks agree with the sampled DMFT (4.5 sigma, theory and network errors
    combined); the same theory at gamma0 x 0.8 is rejected (> 5 sigma on outputs or Phi^L)."""
    from effth.dmft.rules.solvers import solve_rule_forward
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((3, 5)), np.array([1.0, -1.0, 0.5])
    kw = {"rule": rule, "rho": rho, "eta": 0.1, "steps": 20, "hidden_layers": 3,
          "activation": "tanh"}
    th = solve_rule_forward(X, y, gamma0=1.5, samples=20000, **kw)
    run = simulate_rule_training(X, y, widths=500, gamma0=1.5, seed=range(16), **kw)
    assert et.compare(th, run, "f").max_abs_z < 4.5
    wrong = solve_rule_forward(X, y, gamma0=1.2, samples=20000, **kw)
    assert max(et.compare(wrong, run, "f").max_abs_z,
               et.compare(wrong, run, "phi", layer=3).max_abs_z) > 5.0


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho", [("dfa", None), ("fa", 0.5), ("hebb", None)])
def test_forward_solver_tanh_width_scaling(opt_in_slow, rule, rho):
    """D(N) = mean (f_N - f)^2 + mean (Phi^l_N - Phi^l)^2 ~ 1/N for depth-4 tanh networks."""
    from effth.dmft.rules.solvers import solve_rule_forward
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((3, 5)), np.array([1.0, -1.0, 0.5])
    kw = {"rule": rule, "rho": rho, "eta": 0.1, "steps": 20, "hidden_layers": 3,
          "activation": "tanh", "gamma0": 1.5 if rule != "hebb" else 1.0}
    th = solve_rule_forward(X, y, samples=60000, **kw)
    cmps, widths = [], [250, 500, 1000, 2000]
    for N in widths:
        run = simulate_rule_training(X, y, widths=N, seed=range(32), **kw)
        d = (np.mean((run.f - th.f) ** 2, axis=(1, 2))
             + np.mean((run.phi - th.phi) ** 2, axis=(1, 2, 3, 4, 5)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    print("tanh L=3", rule, rho, fit)
    assert abs(fit.slope + 1) < 4.5 * fit.slope_stderr, fit


# ------------------------------------------------------------ finite-width NLO (App. H), table C4

def test_kernel_fluctuations_table_c4_and_networks():
    """V_phi = V_g = 5 (sqrt(2)-ReLU), 2 (linear); N Var Phi^l exact 5, 10.125, 15.378, 20.763,
    26.282 at N = 200 (table C4); the min(l, l') structure; and the variance of Phi^l over 500
    width-200 networks at initialization (4.5 SE of the sample variance, from its 4th moment),
    which rejects the linear value V_phi = 2 used for ReLU."""
    import sympy as sp

    from effth.activations import Z
    from effth.dmft.rules.solvers import kernel_fluctuations
    act = sp.sqrt(2) * sp.Max(0, Z)
    k = kernel_fluctuations(act, hidden_layers=5)
    assert k.v_phi == pytest.approx(5, abs=1e-9) and k.v_g == pytest.approx(5, abs=1e-9)
    lin = kernel_fluctuations("linear", hidden_layers=5)
    assert lin.v_phi == pytest.approx(2, abs=1e-9) and lin.v_g == pytest.approx(2, abs=1e-9)
    np.testing.assert_allclose(200 * k.exact_variance(200), [5, 10.125, 15.378, 20.763, 26.282],
                               atol=6e-4)
    np.testing.assert_allclose(k.cov_phi()[2], [5, 10, 15, 15, 15])
    np.testing.assert_allclose(np.diag(k.cov_g()), [25, 20, 15, 10, 5])
    with pytest.raises(NotDerivedError):
        kernel_fluctuations("tanh", hidden_layers=2)
    X = np.array([[1.0, 1.0]])                                    # |x|^2 = D: K^x = 1
    run = simulate_rule_training(X, np.array([1.0]), rule="gd", hidden_layers=5, widths=200,
                                 gamma0=1.0, eta=0.0, steps=1, activation=act, seed=range(500))
    phis = run.phi[:, :, 0, 0, 0, 0]                              # (networks, L)
    var = phis.var(axis=0, ddof=1)
    m4 = np.mean((phis - phis.mean(0)) ** 4, axis=0)
    se = np.sqrt((m4 - var ** 2) / phis.shape[0])
    assert np.all(np.abs(var - k.exact_variance(200)) < 4.5 * se), (var * 200, se * 200)
    wrong = (1 + 2.0 / 200) ** np.arange(1, 6) - 1
    assert np.max(np.abs(var - wrong) / se) > 5


@pytest.mark.slow
@pytest.mark.parametrize("rule,rho", [("gd", None), ("fa", 0.0), ("fa", 0.5), ("dfa", None),
                                      ("gln", None), ("hebb", None)])
def test_two_layer_relu_width_scaling_wide(opt_in_slow, rule, rho):
    """Two-layer ReLU (Fig. 1 setting), widths 500 .. 4000, 32 networks each, theory with
    4 x 10^5 samples."""
    from effth.dmft.rules.solvers import solve_rule_two_layer
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((4, 10)), np.array([1.0, -1.0, 1.0, 1.0])
    kw = {"rule": rule, "rho": rho, "eta": 0.1, "steps": 20, "activation": "relu", "gamma0": 1.0}
    th = solve_rule_two_layer(X, y, samples=400000, record_kernels=False, **kw)
    cmps, widths = [], [500, 1000, 2000, 4000]
    for N in widths:
        run = simulate_rule_training(X, y, hidden_layers=1, widths=N, seed=range(32),
                                     record_kernels=False, **kw)
        d = (np.mean((run.f - th.f) ** 2, axis=(1, 2))
             + np.mean((run.ntk - th.ntk) ** 2, axis=(1, 2, 3)))
        cmps.append(et.compare(np.zeros(1), np.array([d.mean()]), "D",
                               stderr=np.array([d.std(ddof=1) / np.sqrt(d.size)])))
    fit = et.scaling_fit(cmps, widths)
    print("two-layer relu", rule, rho, fit)
    assert abs(fit.slope + 1) < 4.5 * fit.slope_stderr, fit
    assert et.compare(th, run, "f").max_abs_z < 4.5


def test_kernel_fluctuations_equal_the_four_point_vertex():
    """App. H's N Var(Phi^l) is PDLT's four-point vertex of the next layer (Var of the metric
    G^(l+1) = V^(l+1)/n, (4.76)-(4.77)): for sqrt(2)-ReLU (PDLT: ReLU with C_W = 2, K = 1) the
    flow's V^(l+1)/K^2 equals V_phi l = 5 l, and for the linear network 2 l."""
    import sympy as sp

    import effth
    from effth.activations import Z
    from effth.dmft.rules.solvers import kernel_fluctuations
    L = 5
    X = np.array([[1.0, 1.0]])                                     # x.x / n_0 = 1
    for act, net in ((sp.sqrt(2) * sp.Max(0, Z), effth.MLP("relu", depth=L + 1, c_w=2.0, c_b=0.0)),
                     ("linear", effth.MLP("linear", depth=L + 1, c_w=1.0, c_b=0.0))):
        k = kernel_fluctuations(act, hidden_layers=L)
        fl = effth.flow(net, X)
        V = np.array([fl.value("V", layer=l + 1)[0, 0, 0, 0] / fl.value("K", layer=l + 1)[0, 0] ** 2
                      for l in range(1, L + 1)])
        np.testing.assert_allclose(np.diag(k.cov_phi()), V, rtol=1e-9)
