"""Ground truth: finite-width networks trained by GD in the seed's parameterization."""

from __future__ import annotations


import numpy as np
import pytest

from effth.errors import DomainError
from effth.simulation.training import simulate_training

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])


@pytest.mark.parametrize("activation,hidden_layers", [("tanh", 2), ("linear", 3), ("relu", 1)])
def test_mup_equals_mean_field_exactly(activation, hidden_layers):
    """Bordelon & Pehlevan (2022), App. N: the muP parameterization with learning rate eta gamma0^2 gives the same
    trajectories as the seed's (learning rate eta gamma0^2 N), at any finite N."""
    kw = dict(hidden_layers=hidden_layers, widths=64, gamma0=1.3, eta=0.05, steps=15, activation=activation,
              seed=(3,))
    a = simulate_training(X, Y, parameterization="mean_field", **kw)
    b = simulate_training(X, Y, parameterization="mup", **kw)
    for name in ("f", "phi", "g", "ntk"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-10, rtol=1e-10)


def test_shapes_and_kernel_structure():
    r = simulate_training(X, Y, X_test=[[0.2, 0.3]], hidden_layers=2, widths=50, gamma0=1.0, eta=0.1,
                          steps=5, activation="tanh", seed=(0, 1))
    S, L, T, n = 2, 2, 5, 3
    assert r.f.shape == (S, T, n) and r.phi.shape == (S, L, T, n, T, n) and r.ntk.shape == (S, T, n, n)
    M = r.phi.reshape(S, L, T * n, T * n)
    np.testing.assert_allclose(M, np.swapaxes(M, -1, -2), atol=1e-12)
    assert np.linalg.eigvalsh(M).min() > -1e-10
    np.testing.assert_allclose(r.f[:, 0], 0.0)                      # centred outputs
    np.testing.assert_allclose(r.loss[:, 0], 0.5 * np.sum(Y ** 2))
    assert r.mean("f").shape == (T, n) and r.stderr("f").shape == (T, n)


def test_first_step_is_ntk_step_to_order_eta_squared():
    """Exact finite-N identity: f(t_1) - f(t_0) = eta K(t_0) Delta_0 + O(eta^2)."""
    errs = []
    for eta in (0.02, 0.01):
        r = simulate_training(X, Y, hidden_layers=2, widths=80, gamma0=1.0, eta=eta, steps=2,
                              activation="tanh", seed=(7,))
        step = r.f[0, 1] - r.f[0, 0]
        errs.append(np.max(np.abs(step - eta * r.ntk[0, 0] @ Y)))
    assert errs[0] < 1e-2 and 3.5 < errs[0] / errs[1] < 4.5


def test_lazy_limit_small_gamma0():
    """gamma0 -> 0: the NTK stays at its initial value and outputs follow its Euler map;
    the initial NTK of a wide linear net is (L+1) K^x."""
    r = simulate_training(X, Y, hidden_layers=2, widths=2000, gamma0=1e-3, eta=0.1, steps=10,
                          activation="linear", seed=(0,))
    K = r.ntk[0]
    assert np.max(np.abs(K - K[0])) < 1e-3
    f = np.zeros((10, 2))
    for i in range(9):
        f[i + 1] = f[i] + 0.1 * K[0] @ (Y - f[i])
    assert np.max(np.abs(r.f[0] - f)) < 1e-3
    np.testing.assert_allclose(K[0], 3 * KX, atol=0.15)


def test_bad_input():
    with pytest.raises(DomainError):
        simulate_training(X, Y, hidden_layers=1, widths=10, gamma0=0.0, eta=0.1, steps=3)
    with pytest.raises(DomainError):
        simulate_training(X, Y, hidden_layers=1, widths=10, gamma0=1.0, eta=0.1, steps=3, activation="foo")
    with pytest.raises(DomainError):
        simulate_training(X, Y[:1], hidden_layers=1, widths=10, gamma0=1.0, eta=0.1, steps=3)


def test_weight_decay_step():
    """weight_decay multiplies every parameter by (1 - eta lambda) per step: lambda = 0 is the plain
    run; muP equals mean field exactly; for the 2-homogeneous linear L = 1 net (raw outputs) the
    first step changes by -2 eta lambda f(theta_0) + O(eta^2)."""
    kw = dict(hidden_layers=1, widths=64, gamma0=1.0, steps=2, activation="linear", seed=(0,),
              center=False)
    # one GD step of the linear L = 1 net recomputed by hand from the same draws (W0, then w):
    # f = h w / (gamma0 N), h = X W0^T / sqrt(D); w <- rho w + eta gamma0 h^T Delta,
    # W0 <- rho W0 + eta gamma0 w (Delta^T X) / sqrt(D), rho = 1 - eta lambda
    eta, lam, g0, N = 0.05, 0.7, 1.0, 64
    rng = np.random.default_rng(0)
    W0, w = rng.standard_normal((N, 2)), rng.standard_normal(N)
    h = X @ W0.T / np.sqrt(2)
    f0 = h @ w / (g0 * N)
    d0 = Y - f0
    rho = 1 - eta * lam
    w1 = rho * w + eta * g0 * h.T @ d0
    W1 = rho * W0 + eta * g0 * np.outer(w, d0 @ X) / np.sqrt(2)
    f1 = (X @ W1.T / np.sqrt(2)) @ w1 / (g0 * N)
    run = simulate_training(X, Y, eta=eta, weight_decay=lam, **kw).f[0]
    np.testing.assert_allclose(run, [f0, f1], rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(simulate_training(X, Y, eta=eta, **kw).f[0, 1] - f1)) > 1e-3  # decay matters
    a = simulate_training(X, Y, eta=0.05, weight_decay=0.7, **kw)
    b = simulate_training(X, Y, eta=0.05, weight_decay=0.7, parameterization="mup", **kw)
    np.testing.assert_allclose(a.f, b.f, atol=1e-10)
    errs = []
    for eta in (0.01, 0.005):
        wd = simulate_training(X, Y, eta=eta, weight_decay=0.7, **kw).f[0]
        no = simulate_training(X, Y, eta=eta, weight_decay=0.0, **kw).f[0]
        errs.append(np.max(np.abs((wd[1] - no[1]) - (-2 * eta * 0.7 * wd[0]))))
    assert errs[0] < 1e-3 and 3.0 < errs[0] / errs[1] < 5.0
    with pytest.raises(DomainError, match="weight_decay"):
        simulate_training(X, Y, eta=0.05, weight_decay=40.0, **kw)


def test_multiple_outputs_and_bias_shapes_and_first_step():
    """C outputs: the first GD step is f_1 = eta K Delta_0 with K^{cc'} = delta_{cc'} * NTK at
    initialization up to O(eta^2) and 1/sqrt(N); muP equals mean field with biases."""
    Y2 = np.array([[1.0, 0.3], [-0.5, 0.8]])
    kw = dict(hidden_layers=2, widths=64, gamma0=1.0, eta=0.05, steps=3, activation="tanh", seed=(0, 1))
    a = simulate_training(X, Y2, bias=True, **kw)
    b = simulate_training(X, Y2, bias=True, parameterization="mup", **kw)
    assert a.f.shape == (2, 3, 2, 2) and a.g.shape == (2, 2, 3, 2, 3, 2, 2, 2)
    assert a.ntk.shape == (2, 3, 2, 2, 2, 2) and a.loss.shape == (2, 3)
    np.testing.assert_allclose(a.f, b.f, atol=1e-10)
    np.testing.assert_allclose(a.ntk, b.ntk, atol=1e-9)
    # exact one-step identity for the linear readout part at any width: f_1 - f_0 = eta K_0 Delta_0
    # holds to O(eta^2); compare the step with the recorded initial NTK
    for eta in (0.01,):
        r = simulate_training(X, Y2, hidden_layers=1, widths=256, gamma0=1.0, eta=eta, steps=2,
                              activation="tanh", seed=(0,), bias=True)
        K0 = r.ntk[0, 0]                                  # (n, n, C, C)
        pred = eta * np.einsum("mace,ae->mc", K0, Y2)
        assert np.max(np.abs(r.f[0, 1] - pred)) < 5 * eta ** 2 * np.max(np.abs(K0)) ** 2 + 1e-12


@pytest.mark.parametrize("bad,match", [
    (dict(X=X + 1j), "X must be real"),
    (dict(y=Y + 0j), "y must be real"),
    (dict(X_test=np.array([[0.1, 0.2]]) + 1j), "X_test must be real"),
    (dict(X=np.where([[True, False], [False, False]], np.nan, X)), "X contains NaN"),
    (dict(y=np.array([1.0, np.inf])), "y contains NaN"),
    (dict(X_test=[[np.nan, 0.0]]), "X_test contains NaN"),
    (dict(X_test=[[0.1, 0.2, 0.3]]), "X_test must be 2-D with X's 2 columns"),
    (dict(X_test=[0.1, 0.2]), "X_test must be 2-D"),
    (dict(y=np.ones(3)), "y must be"),
    (dict(X=X[0]), "X must be a 2-D"),
    (dict(steps=0), "steps"), (dict(steps=2.5), "steps"), (dict(steps="3"), "steps"),
    (dict(steps=True), "steps"),
    (dict(seed=-1), "seed"), (dict(seed=(1, -2)), "seed"), (dict(seed=1.5), "seed"),
    (dict(eta=0.1 + 0j), "eta"), (dict(gamma0=1j), "gamma0"), (dict(eta=np.nan), "eta"),
])
def test_bad_input_names_the_argument(bad, match):
    """NaN / complex / mis-shaped input raised nothing, raised a bare NumPy error, or was
    reported as 'training diverged; lower eta' -- now a DomainError naming the argument."""
    kw = dict(X=X, y=Y, hidden_layers=1, widths=8, gamma0=1.0, eta=0.1, steps=3)
    kw.update(bad)
    with pytest.raises(DomainError, match=match):
        simulate_training(**kw)


@pytest.mark.parametrize("activation,eta,steps", [("linear", 1.0, 8), ("linear", 3.0, 60),
                                                  ("tanh", 3.0, 40)])
def test_divergence_is_detected_with_step_and_stability_bound(activation, eta, steps):
    """Past the stability edge the loss grew to 1e22-1e280 and was returned silently.  Now the
    run stops with a DomainError naming the step and the lazy bound eta < 2 / lambda_max(NTK at
    initialization); the bound printed equals the one read off the recorded NTK of a stable run
    with the same seed (the initial NTK does not depend on eta)."""
    kw = dict(hidden_layers=2, widths=64, gamma0=1.0, activation=activation, seed=0)
    with pytest.raises(DomainError, match=r"diverged at step \d+") as info:
        simulate_training(X, Y, eta=eta, steps=steps, **kw)
    msg = str(info.value)
    assert f"eta={eta:g} is beyond the stable range" in msg
    stable = simulate_training(X, Y, eta=0.01, steps=1, **kw)
    bound = 2.0 / np.linalg.eigvalsh(stable.ntk[0, 0])[-1]
    assert f"lambda_max(NTK at initialization) = {bound:.4g}" in msg
    assert eta > bound


def test_stable_run_is_not_flagged():
    """Just inside the lazy edge (eta = 0.9 x the bound) a wide linear net converges."""
    kw = dict(hidden_layers=2, widths=256, gamma0=0.2, activation="linear", seed=0)
    bound = 2.0 / np.linalg.eigvalsh(simulate_training(X, Y, eta=0.01, steps=1, **kw).ntk[0, 0])[-1]
    run = simulate_training(X, Y, eta=0.9 * bound, steps=60, **kw)
    assert run.loss[0, -1] < 1e-3 * run.loss[0, 0]
