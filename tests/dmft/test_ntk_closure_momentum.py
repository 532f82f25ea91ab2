"""The NTK-Euler closure with heavy-ball momentum in the deep linear DMFTs (GD and every rule).

With momentum ``mu`` the parameters move by ``theta(t+1) - theta(t) = eta sum_{s<=t} (1 - mu)
mu^{t-s} G(s)``, so Euler in function space reads ``f(t+1) = f(t) + eta sum_s (1 - mu) mu^{t-s}
K(t, s) Delta(s)`` with the two-time NTK (Bordelon & Pehlevan (2022), App. L, eq. (122)).
Checks: (1) in the lazy limit it is heavy ball on the static NTK, written out here, with a
gap that scales as gamma0**2 (the kernels move at that order); a wrong momentum is rejected;
(2) at fixed tau = -eta / log(mu) and fixed time it tends to the exact closure linearly in eta
(an Euler scheme); (3) mu -> 0 is the GD closure.
"""
import numpy as np
import pytest

from effth.dmft import lazy_kernels, solve_deep_linear, solve_rule_deep_linear

P = 5


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((P, 4)), rng.standard_normal(P)


def heavy_ball(K, y, eta, mu, T):
    """f(t) of heavy ball on a fixed kernel: v <- mu v + (1 - mu) eta K (y - f), f <- f + v."""
    f, v, out = np.zeros(len(y)), np.zeros(len(y)), []
    for _ in range(T):
        out.append(f.copy())
        v = mu * v + (1 - mu) * eta * K @ (y - f)
        f = f + v
    return np.array(out)


@pytest.mark.parametrize("rule", ["gd", "fa", "dfa"])
def test_lazy_limit_is_heavy_ball_on_the_ntk(data, rule):
    X, y = data
    gaps, wrong = [], None
    for g0 in (0.01, 0.02):
        r = solve_rule_deep_linear(X, y, rule=rule, rho=0.5 if rule == "fa" else None,
                                   hidden_layers=2, gamma0=g0, eta=0.1, steps=30, closure="ntk",
                                   momentum=0.6)
        K0 = r.ntk[0][:P, :P]
        gaps.append(np.max(np.abs(r.f[:, :P] - heavy_ball(K0, y, 0.1, 0.6, 30))))
        if wrong is None:
            wrong = np.max(np.abs(r.f[:, :P] - heavy_ball(K0, y, 0.1, 0.54, 30)))
    # the gap is the O(gamma0^2) kernel motion: x4 when gamma0 doubles (5 % for the O(gamma0^4))
    assert gaps[1] / gaps[0] == pytest.approx(4.0, rel=0.05)
    assert gaps[0] < 1e-3 and wrong > 100 * gaps[0]


def test_plain_gd_closure_equals_the_rule_solver_and_the_lazy_ntk(data):
    X, y = data
    a = solve_deep_linear(X, y, hidden_layers=2, gamma0=0.5, eta=0.1, steps=20, closure="ntk",
                          momentum=0.5)
    b = solve_rule_deep_linear(X, y, rule="gd", hidden_layers=2, gamma0=0.5, eta=0.1, steps=20,
                               closure="ntk", momentum=0.5)
    np.testing.assert_allclose(a.f, b.f, rtol=0, atol=1e-13)
    K0 = lazy_kernels(a.data.kx, hidden_layers=2)[3][:P, :P]
    np.testing.assert_allclose(b.ntk[0][:P, :P], K0, rtol=1e-13)


@pytest.mark.parametrize("rule,gamma0", [("gd", 1.0), ("fa", 1.0), ("hebb", 0.3)])
def test_tends_to_the_exact_closure_linearly_in_eta(data, rule, gamma0):
    X, y = data
    tau, t_end, gaps = 0.5, 2.0, []
    for eta in (0.05, 0.025, 0.0125):
        kw = dict(rule=rule, rho=0.5 if rule == "fa" else None, hidden_layers=2, gamma0=gamma0,
                  eta=eta, steps=int(round(t_end / eta)) + 1, momentum=np.exp(-eta / tau))
        a = solve_rule_deep_linear(X, y, closure="ntk", **kw)
        b = solve_rule_deep_linear(X, y, closure="exact", **kw)
        gaps.append(np.max(np.abs(a.f[-1] - b.f[-1])))
    # first order: halving eta halves the gap (1.85-2.15 leaves room for the O(eta^2) part)
    for g1, g2 in zip(gaps, gaps[1:]):
        assert 1.85 < g1 / g2 < 2.15


def test_small_momentum_is_the_gd_closure(data):
    X, y = data
    kw = dict(hidden_layers=2, gamma0=0.7, eta=0.1, steps=15, closure="ntk")
    a = solve_deep_linear(X, y, **kw)
    b = solve_deep_linear(X, y, **kw, momentum=1e-9)
    np.testing.assert_allclose(b.f, a.f, rtol=0, atol=1e-8)
    assert np.max(np.abs(a.f)) > 0.1


def _two_time_ntk(r):
    """K_{mu nu}(t, s) = kx G~^1(t, s) + sum_{l<L} G~^{l+1}(t, s) Phi^l(t, s) + Phi^L(t, s)."""
    L = r.hidden_layers
    K = r.data.kx[None, :, None, :] * r.gtilde[0]
    for ell in range(1, L + 1):
        K = K + (1.0 if ell == L else r.gtilde[ell]) * r.phi[ell - 1]
    return K


def _euler(K, y, eta, mu, T, two_time=True):
    f = np.zeros((T, K.shape[1]))
    for i in range(T - 1):
        drive = sum((1 - mu) * mu ** (i - j) * (K[i, :, j if two_time else i, :P] @ (y - f[j, :P]))
                    for j in range(i + 1))
        f[i + 1] = f[i] + eta * drive
    return f


def test_closure_uses_the_two_time_ntk(data):
    """The solver's f is the heavy-ball Euler step with its own two-time kernels (written out
    here); the equal-time variant K(t, t) Delta(s) stays O(tau) away from the exact closure as
    eta -> 0, the two-time one does not."""
    X, y = data
    tau, t_end = 0.5, 2.0
    gaps, gaps_equal = [], []
    for eta in (0.05, 0.025):
        T, mu = int(round(t_end / eta)) + 1, np.exp(-eta / tau)
        kw = dict(rule="fa", rho=0.5, hidden_layers=2, gamma0=1.0, eta=eta, steps=T, momentum=mu)
        a = solve_rule_deep_linear(X, y, closure="ntk", **kw)
        b = solve_rule_deep_linear(X, y, closure="exact", **kw)
        K = _two_time_ntk(a)
        np.testing.assert_allclose(_euler(K, y, eta, mu, T), a.f, rtol=0, atol=1e-12)
        gaps.append(np.max(np.abs(a.f[-1] - b.f[-1])))
        gaps_equal.append(np.max(np.abs(_euler(K, y, eta, mu, T, two_time=False)[-1] - b.f[-1])))
    assert gaps[1] < 0.6 * gaps[0]
    assert gaps_equal[1] > 0.8 * gaps_equal[0] and gaps_equal[1] > 5 * gaps[1]


def test_monte_carlo_closure_matches_the_deep_linear_one(data):
    """solve_monte_carlo's NTK-Euler step with momentum: on the deep linear solver's exact
    kernels it gives that solver's f to rounding; end to end (linear activation) within 5 MC
    standard errors, with momentum dropped far outside."""
    from effth.dmft.solvers.monte_carlo import _ntk_euler

    X, y = data
    X, y = X[:4, :3], y[:4]
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.1, steps=8, momentum=0.5)
    b = solve_deep_linear(X, y, closure="ntk", **kw)
    b0 = solve_deep_linear(X, y, closure="ntk", **{**kw, "momentum": 0.0})
    T, n = 8, 4
    f = _ntk_euler(b.data.kx, [p.reshape(T * n, T * n) for p in b.phi],
                   [g.reshape(T * n, T * n) for g in b.g], y[:, None], 0.1, momentum=0.5)
    np.testing.assert_allclose(f[..., 0], b.f, rtol=0, atol=1e-14)
    from effth.dmft import solve_monte_carlo

    a = solve_monte_carlo(X, y, activation="linear", closure="ntk", samples=1500, seed=1, **kw)
    se = a.mc_stderr["f"][1:]
    assert np.max(np.abs(a.f[1:] - b.f[1:]) / se) < 5
    assert np.max(np.abs(a.f[1:] - b0.f[1:]) / se) > 10
