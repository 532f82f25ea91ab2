"""Field-form deep linear networks on random data (the ground truth of the random-data DMFT of
Bordelon & Pehlevan, "Deep Linear Network Training Dynamics from Random Initialization").

Expected values are exact (initial losses, the rational 427/625 of the corrected theory) or come
from the reference tables; tolerances are standard errors over independent networks.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import ConvergenceError, DomainError
from effth.simulation import LinearFieldRun, simulate_linear_field
from effth.simulation.linear_field import simulate_power_law

sim = simulate_linear_field


def test_initial_loss_is_signal_plus_init_variance_plus_noise():
    # E L(0) = S + 1/(nu gamma0^2) + sigma^2 (|w_*|^2 = S D exactly)
    r = sim(dim=200, hidden_layers=2, alpha=2.0, nu=0.5, gamma0=0.8, eta=0.1, steps=1, sigma=0.3,
            signal=1.5, networks=200, seed=0)
    m, s = r.value("test_loss")[0], r.stderr("test_loss")[0]
    assert abs(m - (1.5 + 1 / (0.5 * 0.64) + 0.09)) < 5 * s          # 5 sigma
    c = sim(dim=200, hidden_layers=2, alpha=2.0, nu=0.5, gamma0=0.8, eta=0.1, steps=1, sigma=0.3,
            signal=1.5, networks=3, seed=0, centering=True)
    np.testing.assert_allclose(c.test_loss[:, 0], 1.5 + 0.09, rtol=1e-12)   # centered: exact
    # NTK parameterization: nu gamma0^2 = gamma0_ref^2 reference_nu
    n = sim(dim=200, hidden_layers=1, nu=4.0, gamma0=1.0, eta=0.1, steps=1, networks=100, seed=1,
            parameterization="ntk")
    assert abs(n.value("loss")[0] - 2.0) < 5 * n.stderr("loss")[0]


def test_equal_time_response_427_over_625():
    """One hidden layer, population, nu = gamma0 = 1, eta = 0.2: the corrected theory gives
    C_v(1,1) = 427/625 exactly, the printed sums over t' < t give 0.80.  At D = 600 the finite-D
    bias is ~1e-3, well below the 5-sigma window (sigma ~ 0.007 with 24 networks)."""
    r = sim(dim=600, hidden_layers=1, nu=1.0, gamma0=1.0, eta=0.2, steps=2, networks=24, seed=3)
    m, s = r.value("loss")[1], r.stderr("loss")[1]
    assert abs(m - 427 / 625) < 5 * s
    assert abs(m - 0.80) > 10 * s


def test_population_train_equals_test_and_sgd_has_no_train_loss():
    r = sim(dim=64, hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, steps=4, networks=2, seed=0)
    np.testing.assert_array_equal(r.train_loss, r.test_loss)
    s = sim(dim=64, hidden_layers=2, nu=1.0, batch_ratio=0.5, gamma0=1.0, eta=0.1, steps=4,
            networks=2, seed=0)
    assert s.train_loss is None
    with pytest.raises(DomainError):
        s.value("train_loss")


def test_reference_trajectory_resnet_population():
    """ResNet, population, L = 3, beta = 0.7, nu = gamma0 = 1, eta = 0.1 (reference table:
    theory 1.08024, 0.396547, 0.202759 at t = 1, 3, 5).  Tolerance 5 standard errors plus 3% for
    the finite-D bias at D = 256."""
    r = sim(dim=256, hidden_layers=3, branch_scale=0.7, nu=1.0, gamma0=1.0, eta=0.1, steps=6,
            networks=12, seed=5)
    m, s = r.value("loss")[[1, 3, 5]], r.stderr("loss")[[1, 3, 5]]
    ref = np.array([1.08024, 0.396547, 0.202759])
    assert np.all(np.abs(m - ref) < 5 * s + 0.03 * ref)


def test_reproducible_and_batched():
    kw = dict(dim=48, hidden_layers=2, alpha=1.5, nu=1.0, gamma0=1.0, eta=0.1, steps=5)
    a = sim(networks=3, seed=7, **kw)
    b = sim(networks=3, seed=np.random.default_rng(7), **kw)
    np.testing.assert_array_equal(a.test_loss, b.test_loss)
    assert a.test_loss.shape == (3, 5) and a.train_loss.shape == (3, 5)
    assert isinstance(a, LinearFieldRun) and a.depth == 3 and a.layers == ()
    assert a.value("loss").shape == (5,) and a.stderr("loss").shape == (5,)
    assert "LinearFieldRun(" in repr(a) and "<table>" in a._repr_html_()
    with pytest.raises(DomainError):
        a.value("C_h")


@pytest.mark.parametrize("kw, match", [
    (dict(nu=np.inf), "nu"), (dict(nu=0.0), "nu"), (dict(dim=0), "dim"), (dict(gamma0=0.0), "gamma0"),
    (dict(eta=-0.1), "eta"), (dict(alpha=0.0), "alpha"), (dict(alpha=2.0, batch_ratio=1.0), "alpha"),
    (dict(sigma=np.nan), "sigma"), (dict(networks=0), "networks"), (dict(steps=1.5), "steps"),
    (dict(parameterization="x"), "parameterization"), (dict(branch_scale=-1.0), "beta")])
def test_bad_input(kw, match):
    base = dict(dim=16, hidden_layers=1, nu=1.0, gamma0=1.0, eta=0.1, steps=3, networks=1)
    base.update(kw)
    with pytest.raises(DomainError, match=match):
        sim(**base)


def test_divergence_raises():
    with pytest.raises(ConvergenceError, match="eta"):
        sim(dim=32, hidden_layers=2, nu=1.0, gamma0=1.0, eta=2.0, steps=60, networks=2, seed=0)


def test_power_law_networks_start_at_the_target_norm():
    # centered: L(0) = sum_k lambda_k (w*_k)^2 = sum_k k^(-a b - 1) exactly
    r = simulate_power_law(width=32, hidden_layers=2, capacity=2.0, source=0.75, modes=100,
                           gamma0=1.0, eta=0.1, steps=3, batch=16, networks=2, seed=0)
    k = np.arange(1, 101)
    np.testing.assert_allclose(r.test_loss[:, 0], np.sum(k ** (-2.0 * 0.75 - 1)), rtol=1e-12)
    assert r.train_loss is None and r.test_loss.shape == (2, 3)
    with pytest.raises(DomainError, match="capacity"):
        simulate_power_law(width=8, hidden_layers=1, capacity=1.0, source=0.5, modes=10, gamma0=1.0,
                           eta=0.1, steps=2)
