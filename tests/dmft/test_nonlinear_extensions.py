"""Monte-Carlo DMFT with weight decay, trainable biases and several outputs (Bordelon & Pehlevan (2022), App. D.8, G-M).

Cross-checks of :func:`solve_monte_carlo`: ``L = 1`` against the two-layer solver (Gauss-Hermite
quadrature), exact reductions, deep networks against finite-width GD (``simulate_training``) with
a discrepancy falling like ``1/N``, causal Stein responses against per-sample Jacobians, the
weight-decay fixed point (representer identity), and bad input.  Tolerances are set from the
solver's Monte-Carlo standard errors (``result.stderr``, 16 batches of the last sweep).
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import ConvergenceError, DomainError
from effth.simulation.training import simulate_training
from effth.dmft import solve_two_layer
from effth.dmft.solvers.monte_carlo import solve_monte_carlo

pytestmark = pytest.mark.mc

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])
Y2 = np.array([[1.0, 0.3], [-0.5, 0.8]])

EXTENSIONS = {"weight_decay": (Y, dict(weight_decay=0.5)), "bias": (Y, dict(bias=True)),
              "outputs": (Y2, {}), "all": (Y2, dict(weight_decay=0.5, bias=True))}


@pytest.mark.parametrize("activation", ["tanh", "linear"])
@pytest.mark.parametrize("extension", sorted(EXTENSIONS))
def test_L1_matches_two_layer(activation, extension):
    """L = 1: same conventions and, within 6 standard errors plus the quadrature error (the
    difference between two quadrature orders), the same solution as ``solve_two_layer``."""
    y, ext = EXTENSIONS[extension]
    kw = dict(gamma0=1.0, eta=0.1, steps=12, activation=activation, **ext)
    # the quadrature error is allowed for below (two rules' difference plus 2e-3), so the
    # solver's own check (quad_tol, 1e-4 by default) is off
    fine = solve_two_layer(X, y, max_nodes=100_000, quad_tol=None, **kw)
    coarse = solve_two_layer(X, y, max_nodes=20_000, quad_tol=None, **kw)
    mc = solve_monte_carlo(X, y, hidden_layers=1, samples=4000, iterations=6, seed=1, **kw)
    assert mc.bias == fine.bias and mc.f.shape == fine.f.shape and mc.g.shape == fine.g.shape
    assert mc.delta.shape == fine.delta.shape and mc.ntk_diag.shape == fine.ntk_diag.shape
    np.testing.assert_allclose(mc.data.kx, fine.data.kx, atol=1e-14)
    for name in ("f", "phi", "g"):
        a, b, c = getattr(mc, name), getattr(fine, name), getattr(coarse, name)
        assert np.all(np.abs(a - b) < 6 * mc.mc_stderr[name] + np.abs(b - c) + 2e-3), name


def test_exact_reductions():
    """Extensions switched off or trivial reduce bitwise (same seed), and a zero-target second
    output decouples (f_2 and the responses to r_2 vanish exactly: nothing drives them)."""
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=6, activation="tanh", samples=600,
              iterations=3, seed=4)
    base = solve_monte_carlo(X, Y, **kw)
    for other in (solve_monte_carlo(X, Y[:, None], **kw),
                  solve_monte_carlo(X, Y, weight_decay=0.0, **kw)):
        for name in ("f", "phi", "g", "A", "B"):
            x = getattr(base, name)
            np.testing.assert_allclose(getattr(other, name).reshape(x.shape), x, atol=1e-13)
    one = solve_monte_carlo(X, Y[:, None], **kw)
    assert one.f.shape == (6, 2, 1) and one.g.shape == (2, 6, 2, 6, 2, 1, 1)
    assert one.A.shape == one.B.shape == (1, 6, 2, 6, 2, 1)
    # L = 1 with a bias is the bias-free solver on K^x + 1
    b1 = solve_monte_carlo(X, Y, hidden_layers=1, gamma0=1.0, eta=0.1, steps=6, samples=600, iterations=3,
                           seed=4, bias=True)
    k1 = solve_monte_carlo(kernel=KX + 1.0, y=Y, hidden_layers=1, gamma0=1.0, eta=0.1, steps=6,
                           samples=600, iterations=3, seed=4)
    assert b1.bias and not k1.bias
    np.testing.assert_allclose(b1.f, k1.f, atol=1e-13)
    # second output with target 0: f_2 = 0, A has no c = 2 part and G^{21} = 0; output 1 is the
    # scalar problem (different random draws, so within Monte-Carlo error)
    kw.update(samples=3000, iterations=6)
    two = solve_monte_carlo(X, np.stack([Y, np.zeros(2)], axis=1), weight_decay=0.5, bias=True,
                            **kw)
    ref = solve_monte_carlo(X, Y, weight_decay=0.5, bias=True, **kw)
    assert np.max(np.abs(two.f[..., 1])) < 1e-12 and np.max(np.abs(two.A[..., 1])) < 1e-12
    assert np.all(np.abs(two.g[..., 1, 0]) < 6 * two.mc_stderr["g"][..., 1, 0] + 1e-3)  # 0 on average
    for a, b, sa, sb in ((two.f[..., 0], ref.f, two.mc_stderr["f"][..., 0], ref.mc_stderr["f"]),
                         (two.g[..., 0, 0], ref.g, two.mc_stderr["g"][..., 0, 0], ref.mc_stderr["g"])):
        assert np.all(np.abs(a - b) < 6 * np.hypot(sa, sb) + 2e-3)


def test_lazy_limit_with_biases():
    """gamma0 = 0 with biases on every layer: constant kernels with u^{l+1} ~ N(0, Phi^l + 1) and
    the NTK G^1 (K^x + 1) + G^2 (Phi^1 + 1) + Phi^2 -- the initial NTK of wide networks."""
    r = solve_monte_carlo(X, Y, hidden_layers=2, gamma0=0.0, eta=0.1, steps=5, activation="tanh",
                          bias=True)
    assert r.bias and r.method == "static_ntk"
    s = simulate_training(X, Y, hidden_layers=2, widths=4000, gamma0=1.0, eta=0.1, steps=1,
                          activation="tanh", seed=range(4), bias=True)
    assert np.all(np.abs(s.mean("ntk")[0] - r.ntk_diag[0]) < 5 * s.stderr("ntk")[0] + 0.01)
    no_bias = solve_monte_carlo(X, Y, hidden_layers=2, gamma0=0.0, eta=0.1, steps=5, activation="tanh")
    assert np.max(np.abs(no_bias.ntk_diag[0] - r.ntk_diag[0])) > 0.5


def test_ntk_closure_with_biases_and_outputs():
    """NTK-Euler with the bias terms G^{l+1} (Phi^l + 1) and K^{cc'} (Bordelon & Pehlevan (2022), eq. (95)) agrees with
    the exact closure to O(eta) + Monte-Carlo error (common random numbers)."""
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=12, activation="tanh", samples=3000,
              iterations=8, seed=1, responses="stein", bias=True)
    exact = solve_monte_carlo(X, Y2, closure="exact", **kw)
    ntk = solve_monte_carlo(X, Y2, closure="ntk", **kw)
    assert ntk.f.shape == exact.f.shape == (12, 2, 2)
    assert np.max(np.abs(ntk.f - exact.f)) < 0.025


def _discrepancy(theory, run):
    """Seed average (and its standard error) of the mean squared difference over f, Phi, G."""
    ax = lambda x: tuple(range(1, x.ndim))
    per = (np.mean((run.f - theory.f) ** 2, axis=ax(run.f))
           + np.mean((run.phi - theory.phi) ** 2, axis=ax(run.phi))
           + np.mean((run.g - theory.g) ** 2, axis=ax(run.g)))
    return per.mean(), per.std(ddof=1) / np.sqrt(per.size)


def _width_study(theory, y, kw, widths=(250, 1000), seeds=12):
    """``D(N) = a / N + D_inf``: slope of ``log D`` and ``D_inf`` (with its standard error)
    extrapolated from two widths, against the theory's own Monte-Carlo floor."""
    d = [_discrepancy(theory, simulate_training(X, y, widths=N, seed=range(seeds), **kw))
         for N in widths]
    (n1, n2), ((d1, s1), (d2, s2)) = widths, d
    slope = np.log(d2 / d1) / np.log(n2 / n1)
    d_inf = (n2 * d2 - n1 * d1) / (n2 - n1)
    s_inf = np.hypot(n2 * s2, n1 * s1) / (n2 - n1)
    floor = sum(float(np.mean(theory.mc_stderr[k] ** 2)) for k in ("f", "phi", "g"))
    return (d1, d2), slope, d_inf, s_inf, floor


def test_deep_tanh_all_extensions_vs_networks():
    """L = 2 tanh with weight decay, biases on h^1, h^2 and two outputs against networks of width
    250 and 1000 (12 seeds): D(N) falls like 1/N and extrapolates to the theory's Monte-Carlo
    floor.  (The same test rejects a theory with the response terms weighted like the drift,
    rho^{i-j} instead of rho^{i+j}: slope -0.31, D_inf 9 standard errors above the floor; and one
    without the rho^{i+j} source covariance: slope 0.01.)"""
    kw = dict(hidden_layers=2, gamma0=1.5, eta=0.1, steps=16, activation="tanh", bias=True,
              weight_decay=1.0)
    theory = solve_monte_carlo(X, Y2, samples=6000, iterations=10, seed=0, **kw)
    (d1, d2), slope, d_inf, s_inf, floor = _width_study(theory, Y2, kw)
    assert d2 < 5e-4 and abs(slope + 1.0) < 0.3, (d1, d2, slope)
    assert d_inf - floor < 3 * s_inf, (d_inf, s_inf, floor)


def test_deep_relu_all_extensions_vs_networks():
    """ReLU (causal Stein responses, automatic for kinks), L = 2, weight decay + biases + two
    outputs: the width study at N = 500, 2000."""
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=12, activation="relu", bias=True,
              weight_decay=0.5)
    theory = solve_monte_carlo(X, Y2, samples=12000, iterations=10, seed=0, **kw)
    (d1, d2), slope, d_inf, s_inf, floor = _width_study(theory, Y2, kw, widths=(500, 2000),
                                                        seeds=8)
    assert d2 < 5e-3 and abs(slope + 1.0) < 0.3, (d1, d2, slope)
    assert d_inf - floor < 3 * s_inf, (d_inf, s_inf, floor)


def test_deep_linear_closed_equations_all_extensions():
    """Linear, L = 2, weight decay + biases + two outputs against the closed deep linear equations
    (``solve_deep_linear``, derived independently): kernels and f within Monte-Carlo error, and
    the per-sample-Jacobian responses to the undecayed sources equal the closed-form ones (row
    sums of A over the sample-independent r, rows of B)."""
    from effth.dmft import solve_deep_linear
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=10, weight_decay=0.8, bias=True)
    ref = solve_deep_linear(X, Y2, **kw)
    mc = solve_monte_carlo(X, Y2, activation="linear", samples=4000, iterations=10, seed=1,
                           responses="jacobian", **kw)
    for name in ("f", "phi", "g"):
        a = getattr(mc, name)
        assert np.all(np.abs(a - np.broadcast_to(getattr(ref, name), a.shape))
                      < 5 * mc.mc_stderr[name] + 2e-3), name
    assert np.max(np.abs(mc.A.sum(axis=4) - ref.A[:, :, :, :, 0])) < 0.01
    assert np.max(np.abs(mc.B[:, :, 0] - ref.B[:, :, 0])) < 0.01
    assert np.max(np.abs(ref.A)) > 0.1 and np.max(np.abs(ref.B)) > 0.05


def test_deep_linear_L3_all_extensions_vs_networks():
    """Linear, L = 3, weight decay + biases + two outputs: the same width study at N = 500,
    2000 (the kernels grow with hidden_layers through the biases; N = 250 is not yet asymptotic).  The
    Stein responses are exact regressions for linear fields."""
    kw = dict(hidden_layers=3, gamma0=1.0, eta=0.05, steps=14, activation="linear", bias=True,
              weight_decay=1.0)
    theory = solve_monte_carlo(X, Y2, samples=4000, iterations=10, seed=0, responses="stein",
                               **kw)
    (d1, d2), slope, d_inf, s_inf, floor = _width_study(theory, Y2, kw, widths=(500, 2000),
                                                        seeds=8)
    assert d2 < 5e-3 and abs(slope + 1.0) < 0.3, (d1, d2, slope)
    assert d_inf - floor < 3 * s_inf, (d_inf, s_inf, floor)


def test_stein_matches_jacobian_tanh_L2():
    """Causal Stein responses agree with per-sample Jacobians within Monte-Carlo error (common
    random numbers) for a smooth deep net with a nearly time-constant Phi^1, where the plain
    pseudo-inverse Stein forms (stein_cut = 0) are unstable; also with all extensions."""
    rng = np.random.default_rng(0)
    X4, Y4 = rng.standard_normal((4, 3)), np.array([1.0, -1.0, 0.5, -0.3])
    Y4x2 = np.stack([Y4, -Y4[::-1]], axis=1)
    gmax = []
    for y, ext, steps in ((Y4, {}, 12), (Y4x2, dict(weight_decay=0.5, bias=True), 8)):
        kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=steps, activation="tanh", samples=2000,
                  iterations=8, seed=3, **ext)
        jac = solve_monte_carlo(X4, y, responses="jacobian", **kw)
        st = solve_monte_carlo(X4, y, responses="stein", **kw)
        gmax.append(np.max(np.abs(jac.g)))
        for name in ("f", "phi", "g"):
            se = np.hypot(jac.mc_stderr[name], st.mc_stderr[name])
            assert np.all(np.abs(getattr(st, name) - getattr(jac, name)) < 4 * se + 1e-3), name
    try:
        plain = solve_monte_carlo(X4, Y4, responses="stein", stein_cut=0.0, hidden_layers=2, gamma0=1.0,
                                  eta=0.1, steps=12, activation="tanh", samples=2000,
                                  iterations=3, seed=3)
        unstable = np.max(np.abs(plain.g)) > 10 * gmax[0]
    except (ConvergenceError, np.linalg.LinAlgError):
        unstable = True
    assert unstable


def test_weight_decay_representer_deep_linear():
    """Seed (98) for an (L+1)-homogeneous net (linear, L = 2: kappa = 3): at the weight-decay
    fixed point f_train = K (K + lambda kappa I)^-1 y with the final NTK, within the Monte-Carlo
    error of f and of K (the fixed point is reached by t = 2 here: exact deep linear solution
    stationary to 3e-4).  Long horizons and strong feature learning need growing windows and
    iterate averaging (``windows``, ``average``)."""
    lam, kappa = 0.5, 3
    r = solve_monte_carlo(X, Y, hidden_layers=2, gamma0=2.0, eta=0.1, steps=20, activation="linear",
                          weight_decay=lam, samples=4000, iterations=20, windows=4, average=10,
                          damping=0.5, responses="stein", seed=0)
    assert r.loss[-1] < 0.1                          # nontrivial (the trivial fixed point: 0.625)
    K = r.ntk_diag[-1]
    M = np.linalg.inv(K + lam * kappa * np.eye(2))
    rep = K @ M @ Y
    # error of rep from the kernels' standard errors: d rep = lam kappa M dK M y
    se_phi, se_g = (r.mc_stderr[k][:, -1, :, -1, :] for k in ("phi", "g"))
    se_K = np.sqrt((se_g[0] * KX) ** 2 + (se_g[1] * r.phi[0, -1, :, -1, :]) ** 2
                   + (r.g[1, -1, :, -1, :] * se_phi[0]) ** 2 + se_phi[1] ** 2)
    se_rep = np.sqrt(np.einsum("ia,ab,b->i", (lam * kappa * M) ** 2, se_K ** 2, (M @ Y) ** 2))
    se = np.hypot(r.mc_stderr["f"][-1], se_rep)
    assert np.all(np.abs(r.f[-1] - rep) < 4 * se + 2e-3), (r.f[-1], rep, se)
    assert np.all(se < 0.02)


def test_bad_input():
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=5)
    with pytest.raises(DomainError, match="weight_decay"):
        solve_monte_carlo(X, Y, weight_decay=-0.1, **kw)
    with pytest.raises(DomainError, match="weight_decay"):
        solve_monte_carlo(X, Y, weight_decay=np.nan, **kw)
    with pytest.raises(DomainError, match=r"eta \* weight_decay"):
        solve_monte_carlo(X, Y, weight_decay=10.0, **kw)
    with pytest.raises(DomainError, match="gamma0 = 0"):
        solve_monte_carlo(X, Y, hidden_layers=2, gamma0=0.0, eta=0.1, steps=5, weight_decay=0.1)
    with pytest.raises(DomainError, match="gamma0 = 0"):
        solve_monte_carlo(X, Y2, hidden_layers=2, gamma0=0.0, eta=0.1, steps=5)
    with pytest.raises(DomainError, match="closure='exact'"):
        solve_monte_carlo(X, Y, closure="ntk", weight_decay=0.1, momentum=0.5, **kw)
    for bad in (np.ones((2, 0)), np.ones((2, 2, 1)), np.ones((3, 2)), [[1.0, np.nan], [0.0, 1.0]],
                [1.0, np.inf]):
        with pytest.raises(DomainError):
            solve_monte_carlo(X, bad, **kw)
    with pytest.raises(DomainError, match="gamma0"):
        solve_monte_carlo(X, Y, hidden_layers=2, gamma0=np.nan, eta=0.1, steps=5)
    with pytest.raises(DomainError, match="stein_cut"):
        solve_monte_carlo(X, Y, stein_cut=-1.0, **kw)
    with pytest.raises(DomainError, match="windows"):
        solve_monte_carlo(X, Y, windows=0, **kw)
    with pytest.raises(DomainError, match="average"):
        solve_monte_carlo(X, Y, average=20, iterations=5, **kw)


def test_gradient_independence_ansatz():
    """A = B = 0: linear L = 2, 3 against the deep linear solver's ansatz within 5 MC standard
    errors (its A = B = 0 differs from the full DMFT by more than that); closure='exact' rejected."""
    from effth.dmft import solve_deep_linear

    kw = dict(gamma0=1.5, eta=0.1, steps=10)
    for L in (2, 3):
        gi = solve_deep_linear(X, Y, hidden_layers=L, gradient_independent=True, **kw)
        full = solve_deep_linear(X, Y, hidden_layers=L, **dict(kw, closure="ntk"))
        mc = solve_monte_carlo(X, Y, hidden_layers=L, activation="linear", samples=4000, iterations=12,
                               closure="ntk", gradient_independent=True, seed=2, **kw)
        se = mc.mc_stderr["phi"]
        assert np.all(np.abs(mc.phi - gi.phi) < 5 * se + 1e-3)
        assert np.max(np.abs(mc.phi - full.phi) / (se + 1e-3)) > 10
        assert np.all(mc.A == 0) and np.all(mc.B == 0)
    with pytest.raises(DomainError, match="closure='ntk'"):
        solve_monte_carlo(X, Y, hidden_layers=2, gradient_independent=True, **kw)
