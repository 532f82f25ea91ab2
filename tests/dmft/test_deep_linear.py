"""Deep linear DMFT: reference values (Bordelon & Pehlevan (2022), our reference checks), invariants (Bordelon & Pehlevan (2022), §5.2, App. P.1), lazy limit, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import ConvergenceError, DomainError
from effth.dmft import lazy_kernels, solve_deep_linear, static_ntk_dynamics

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
Y = np.array([1.0, -0.5])


@pytest.fixture(scope="module")
def ref3():
    return solve_deep_linear(kernel=KX, y=Y, hidden_layers=3, gamma0=1.0, eta=0.05, steps=41)


def _tri(M):
    return np.array([M[0, 0], M[0, 1], M[1, 1]])


def test_reference_L2():
    r = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.05, steps=41)
    assert r.diagnostics.converged and r.diagnostics.residuals[-1] < 1e-10
    np.testing.assert_allclose(r.f[20], [0.946933, -0.438260], atol=2e-6)
    np.testing.assert_allclose(r.f[40], [0.998889, -0.498678], atol=2e-6)
    H, G = r.equal_time("phi")[:, 40], r.equal_time("g")[:, 40]
    np.testing.assert_allclose(_tri(H[0]), [1.191514, 0.402637, 1.048260], atol=2e-6)
    np.testing.assert_allclose(_tri(H[1]), [1.676439, 0.157491, 1.171115], atol=2e-6)
    np.testing.assert_allclose(G[:, 0, 0], [2.586034, 1.449397], atol=2e-6)


def test_reference_L3(ref3):
    r = ref3
    np.testing.assert_allclose(r.f[20], [0.994538, -0.493156], atol=2e-6)
    np.testing.assert_allclose(r.f[40], [0.999994, -0.499992], atol=2e-6)
    H, G = r.equal_time("phi")[:, 40], r.equal_time("g")[:, 40]
    for ell, ref in enumerate([(1.124338, 0.435881, 1.031552), (1.420701, 0.284281, 1.107332),
                               (1.987566, -0.003383, 1.252149)]):
        np.testing.assert_allclose(_tri(H[ell]), ref, atol=2e-6)
    np.testing.assert_allclose(G[:, 0, 0], [3.322010, 1.990745, 1.293206], atol=2e-6)
    np.testing.assert_allclose(r.phi[2, 40, :, 0, :].ravel(),
                               [1.157887, 0.467249, 0.378405, 1.033454], atol=2e-6)
    np.testing.assert_allclose(r.g[2, 40, 0, 0, 0], 1.099727, atol=2e-6)


def test_gradient_independence_reference():
    r = solve_deep_linear(kernel=KX, y=Y, hidden_layers=3, gamma0=1.0, eta=0.05, steps=41,
                          gradient_independent=True)
    H, G = r.equal_time("phi")[:, 40], r.equal_time("g")[:, 40]
    np.testing.assert_allclose(_tri(H[2]), [1.335309, 0.327917, 1.087010], atol=2e-6)
    np.testing.assert_allclose(G[0, 0, 0], 1.791806, atol=2e-6)


def test_structure(ref3):
    r = ref3
    T, n = r.grid.steps, 2
    for X in (r.phi, r.g):
        M = X.reshape(3, T * n, T * n)
        np.testing.assert_allclose(M, M.transpose(0, 2, 1), atol=1e-12)   # Phi(t,s) = Phi(s,t)^T
        assert np.linalg.eigvalsh(M).min() > -1e-9                         # PSD on the PT space
    # t = s = 0: lazy values; A strictly causal, B causal
    np.testing.assert_allclose(r.phi[:, 0, :, 0, :], np.broadcast_to(KX, (3, 2, 2)), atol=1e-14)
    assert np.all(np.triu(r.A[:, :, 0, :, 0].transpose(1, 2, 0)[..., 0]) == 0)
    np.testing.assert_allclose(r.loss, 0.5 * np.sum(r.delta ** 2, axis=1))
    assert r.ntk_two_time.shape == (T, n, T, n) and r.ntk.shape == (T, n, n)


@pytest.mark.parametrize("hidden_layers", [1, 3])
def test_lazy_limit_is_static_ntk(hidden_layers):
    """gamma0 = 0 reproduces discrete GD on the static NTK K_0 = (L+1) K^x exactly (Bordelon & Pehlevan (2022), our reference checks)."""
    r = solve_deep_linear(kernel=KX, y=Y, hidden_layers=hidden_layers, gamma0=0.0, eta=0.05, steps=30)
    K0 = (hidden_layers + 1) * KX
    np.testing.assert_allclose(lazy_kernels(KX, hidden_layers=hidden_layers)[3], K0)
    np.testing.assert_allclose(r.f, static_ntk_dynamics(K0, Y, 0.05, 30), atol=1e-13)
    np.testing.assert_allclose(r.ntk_diag, np.broadcast_to(K0, (30, 2, 2)), atol=1e-13)
    small = solve_deep_linear(kernel=KX, y=Y, hidden_layers=hidden_layers, gamma0=1e-3, eta=0.05, steps=30)
    assert np.max(np.abs(small.f - r.f)) < 1e-5          # O(gamma0^2)


def test_even_in_gamma0():
    a = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=0.7, eta=0.05, steps=25)
    b = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=-0.7, eta=0.05, steps=25)
    for name in ("phi", "g", "A", "B", "f"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-12)


@pytest.mark.parametrize("hidden_layers", [2, 3])
def test_layer_reversal_duality_P1(hidden_layers):
    """P = 1, K^x = 1: H^ell(t, s) = G^{L+1-ell}(t, s) for all ell, t, s (Bordelon & Pehlevan (2022), §5.2, App. P.1)."""
    r = solve_deep_linear(kernel=[[1.0]], y=[1.0], hidden_layers=hidden_layers, gamma0=1.0, eta=0.05, steps=30)
    for ell in range(hidden_layers):
        np.testing.assert_allclose(r.phi[ell, :, 0, :, 0], r.g[hidden_layers - 1 - ell, :, 0, :, 0],
                                   atol=1e-9)
    assert np.max(np.abs(r.phi[0] - 1.0)) > 0.1     # the kernels did move


def test_closures_agree_to_order_eta():
    errs = []
    for eta, steps in ((0.05, 21), (0.025, 41)):
        a = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=eta, steps=steps)
        b = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=eta, steps=steps,
                              closure="ntk")
        errs.append(np.max(np.abs(a.f[-1] - b.f[-1])))
    assert errs[0] < 0.05 and 1.5 < errs[0] / errs[1] < 2.6


def test_test_points_ride_along(ref3):
    X = np.linalg.cholesky(2 * KX)
    xt = np.array([[0.3, -0.8]])
    r = solve_deep_linear(X, Y, X_test=xt, hidden_layers=3, gamma0=1.0, eta=0.05, steps=41)
    np.testing.assert_allclose(r.f_train, ref3.f, atol=1e-9)
    np.testing.assert_allclose(r.phi[:, :, :2, :, :2], ref3.phi, atol=1e-9)
    assert r.f_test.shape == (41, 1) and abs(r.f_test[-1, 0]) > 0.01
    lazy = solve_deep_linear(X, Y, X_test=xt, hidden_layers=3, gamma0=0.0, eta=0.05, steps=41)
    K0 = 4 * np.vstack([X, xt]) @ np.vstack([X, xt]).T / 2
    np.testing.assert_allclose(lazy.f, static_ntk_dynamics(K0, Y, 0.05, 41), atol=1e-12)


def test_bad_input():
    with pytest.raises(DomainError, match="stability"):
        solve_deep_linear(kernel=KX, y=Y, hidden_layers=3, gamma0=1.0, eta=0.34, steps=10)   # 4*1.5*0.34>2
    with pytest.raises(DomainError, match="positive semi-definite"):
        solve_deep_linear(kernel=[[1.0, 2.0], [2.0, 1.0]], y=Y, hidden_layers=2, gamma0=1.0, eta=0.05,
                          steps=10)
    with pytest.raises(DomainError):
        solve_deep_linear(kernel=KX, y=[1.0, 2.0, 3.0], hidden_layers=2, gamma0=1.0, eta=0.05, steps=10)
    with pytest.raises(ConvergenceError, match="iteration"):
        solve_deep_linear(kernel=KX, y=Y, hidden_layers=3, gamma0=1.0, eta=0.05, steps=41, max_iter=3,
                          method="sweep")
    with pytest.raises(ConvergenceError, match="diverged at iteration"):
        solve_deep_linear(kernel=KX, y=10 * Y, hidden_layers=4, gamma0=3.0, eta=0.05, steps=40, window=40,
                          method="sweep")
    with pytest.raises(ConvergenceError, match="diverged at time step"):
        solve_deep_linear(kernel=KX, y=10 * Y, hidden_layers=4, gamma0=3.0, eta=0.05, steps=40)
    with pytest.raises(DomainError, match="method"):
        solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.05, steps=10, method="newton")


@pytest.mark.parametrize("kw", [dict(hidden_layers=1), dict(hidden_layers=3), dict(hidden_layers=2, closure="ntk"),
                                dict(hidden_layers=3, gradient_independent=True),
                                dict(hidden_layers=2, gradient_independent=True, closure="exact")])
def test_march_equals_sweep(kw):
    """The exact forward recursion in time equals the converged whole-window fixed point."""
    X = np.linalg.cholesky(2 * KX)
    xt = np.array([[0.3, -0.8]])
    a = solve_deep_linear(X, Y, X_test=xt, gamma0=1.3, eta=0.05, steps=25, **kw)
    b = solve_deep_linear(X, Y, X_test=xt, gamma0=1.3, eta=0.05, steps=25, method="sweep", **kw)
    assert a.diagnostics.converged and a.diagnostics.residuals[-1] < 1e-12
    for name in ("phi", "g", "A", "B", "f"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-9, err_msg=name)
