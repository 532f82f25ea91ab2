"""Alternating Monte-Carlo DMFT solver (seed Algorithm 1): cross-checks, limits, invariants."""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import ConvergenceError, DomainError
from effth.dmft import lazy_kernels, solve_deep_linear, static_ntk_dynamics
from effth.dmft.solvers.monte_carlo import solve_monte_carlo

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
Y = np.array([1.0, -0.5])


def test_linear_activation_matches_closed_equations():
    """The MC solver with phi = id reproduces the deterministic deep linear solver."""
    ref = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.1, steps=8)
    mc = solve_monte_carlo(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.1, steps=8,
                           activation="linear", samples=4000, iterations=12, seed=1)
    assert np.max(np.abs(mc.f - ref.f)) < 0.04
    # within 5 Monte-Carlo standard errors entry by entry (no floor; t = 0 is exact); the closed
    # equations at gamma0 x 0.9 are rejected
    wrong = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=0.9, eta=0.1, steps=8)
    z_wrong = 0.0
    for name in ("phi", "g"):
        se = mc.mc_stderr[name][:, 1:, :, 1:, :]
        err = np.abs(getattr(mc, name) - getattr(ref, name))[:, 1:, :, 1:, :]
        assert np.all(err < 5 * se), name
        z_wrong = max(z_wrong, np.max(np.abs(getattr(mc, name) - getattr(wrong, name))[:, 1:, :, 1:, :] / se))
    assert z_wrong > 5.0
    # responses: the row sums of the MC A^1 equal the deep linear A^1
    assert np.max(np.abs(mc.A[0].sum(axis=-1) - ref.A[0][..., 0])) < 0.03
    assert mc.mc_stderr["phi"].shape == mc.phi.shape and 0 < np.max(mc.mc_stderr["phi"]) < 0.05


def test_lazy_limit_tanh():
    """gamma0 -> 0: constant kernels equal to the NNGP/NTK recursion, static-NTK dynamics."""
    T = 10
    phi0, _, g0, K0 = lazy_kernels(KX, "tanh", hidden_layers=2)
    exact = solve_monte_carlo(kernel=KX, y=Y, hidden_layers=2, gamma0=0.0, eta=0.1, steps=T,
                              activation="tanh")
    np.testing.assert_allclose(exact.f, static_ntk_dynamics(K0, Y, 0.1, T), atol=1e-14)
    np.testing.assert_allclose(phi0[0], [[0.394294, 0.186324], [0.186324, 0.394294]], atol=1e-6)
    small = solve_monte_carlo(kernel=KX, y=Y, hidden_layers=2, gamma0=1e-3, eta=0.1, steps=T,
                              activation="tanh", samples=3000, iterations=6, seed=2)
    assert np.max(np.abs(small.f - exact.f)) < 0.02
    # within the Monte-Carlo error estimate (from independent batches of the last sweep)
    # within 5 standard errors entry by entry, no floor; the NNGP kernel x 0.9 is rejected
    for name in ("phi", "g"):
        err = np.abs(getattr(small, name) - getattr(exact, name))
        assert np.all(err < 5 * small.mc_stderr[name]), name
    z = np.abs(small.phi - 0.9 * exact.phi) / small.mc_stderr["phi"]
    assert np.max(z) > 5.0


def test_even_in_gamma0_with_antithetic_sampling():
    kw = dict(kernel=KX, y=Y, hidden_layers=2, eta=0.1, steps=6, activation="tanh", samples=400,
              iterations=3, seed=5)
    a = solve_monte_carlo(gamma0=0.8, **kw)
    b = solve_monte_carlo(gamma0=-0.8, **kw)
    for name in ("phi", "g", "f", "A", "B"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-10)


def test_relu_stein_runs_and_is_causal():
    r = solve_monte_carlo(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.1, steps=6,
                          activation="relu", samples=1000, iterations=4)
    assert np.all(np.isfinite(r.phi)) and r.loss[-1] < r.loss[0]
    T, n = 6, 2
    A = r.A[0].reshape(T * n, T * n)
    assert np.all(A.reshape(T, n, T, n)[np.triu_indices(T)[0], :, np.triu_indices(T)[1], :] == 0)


def test_bad_input():
    with pytest.raises(DomainError, match="stability"):
        solve_monte_carlo(kernel=KX, y=Y, hidden_layers=1, gamma0=1.0, eta=5.0, steps=5)
    with pytest.raises(DomainError):
        solve_monte_carlo(kernel=[[1.0, 0.0], [0.0, -1.0]], y=Y, hidden_layers=1, gamma0=1.0, eta=0.1,
                          steps=5)
    with pytest.raises(ConvergenceError, match="iteration 1"):
        solve_monte_carlo(kernel=KX, y=Y, hidden_layers=1, gamma0=1.0, eta=0.1, steps=5, samples=100,
                          diverge_at=0.1)


@pytest.mark.slow
def test_reference_tanh_L2():
    """Bordelon & Pehlevan (2022), our reference checks: tanh, L = 2, y = (1, -1), gamma0 = 1, eta = 0.1, T = 20 (MC values +-0.01)."""
    r = solve_monte_carlo(kernel=KX, y=[1.0, -1.0], hidden_layers=2, gamma0=1.0, eta=0.1, steps=20,
                          activation="tanh", samples=8000, iterations=15, seed=0)
    P, G = r.equal_time("phi")[:, 19], r.equal_time("g")[:, 19]
    np.testing.assert_allclose(r.f[19], [0.767, -0.761], atol=0.02)
    np.testing.assert_allclose(P[0][0], [0.443, 0.018], atol=0.015)
    np.testing.assert_allclose(P[1][0], [0.381, -0.187], atol=0.015)
    np.testing.assert_allclose(G[0][0], [0.323, 0.261], atol=0.015)
    np.testing.assert_allclose(G[1][0], [0.592, 0.520], atol=0.015)
    np.testing.assert_allclose(r.phi[0, 19, 0, 0, :], [0.364, 0.111], atol=0.015)
