"""Random-data deep linear DMFT (Bordelon & Pehlevan, "Deep Linear Network Training Dynamics from
Random Initialization"): reference values, exact closed forms, identities, simulations.

Every number below comes from an independent derivation (closed forms, exact rationals, the
scalar map, Marchenko-Pastur moments) or from the reference tables prepared with the theory
(an independent implementation), never from the code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from effth.compare import compare, scaling_fit
from effth.errors import ConvergenceError, DomainError
from effth.simulation.linear_field import simulate_linear_field, simulate_power_law
from effth.dmft import solve_deep_linear
from effth.dmft.random_data import (extrapolate_depth, gamma0_at, learning_rate_sweep,
                                             max_stable_learning_rate, resnet_kernel,
                                             solve_power_law, power_law_exponent,
                                             solve_random_data)

solve = solve_random_data


# --------------------------------------------------------------------------- T1, T2, T3
def test_t1_lazy_population():
    r = solve(hidden_layers=2, gamma0=1e-6, eta=0.05, steps=21)
    exact = (1 - 3 * 0.05) ** (2 * np.arange(21))
    np.testing.assert_allclose(r.test_loss, exact, rtol=1e-10)
    np.testing.assert_allclose(r.test_loss[[1, 5, 10, 20]], [0.7225, 0.196874, 0.0387595, 0.0015023],
                               rtol=5e-6)


def _scalar_map(gamma0, eta, T):
    """The exact one-hidden-layer population map (m_t, G_t) of the paper's L = 1 network."""
    m, G, out = 0.0, 1.0, []
    for _ in range(T):
        a = 1 - m / gamma0
        out.append(a * a)
        e = eta * gamma0 * a
        m, G = m + 2 * e * G + e * e * m, G + 2 * e * m + e * e * G
    return np.array(out)


@pytest.mark.parametrize("gamma0, eta", [(1.0, 0.1), (2.0, 0.05), (0.1, 0.2)])
def test_t2_scalar_map(gamma0, eta):
    r = solve(hidden_layers=1, gamma0=gamma0, eta=eta, steps=21)
    np.testing.assert_allclose(r.test_loss, _scalar_map(gamma0, eta, 21), rtol=1e-12, atol=1e-15)


def test_t2_reference_values():
    r = solve(hidden_layers=1, gamma0=1.0, eta=0.1, steps=21).test_loss
    np.testing.assert_allclose(r[[1, 5, 10, 20]], [0.64, 0.0897478812, 4.65981718e-3, 7.29874641e-6],
                               rtol=1e-8)
    r = solve(hidden_layers=1, gamma0=2.0, eta=0.05, steps=21).test_loss
    np.testing.assert_allclose(r[[5, 10, 20]], [0.314197521, 0.0594481628, 6.36980670e-4], rtol=1e-8)
    assert solve(hidden_layers=1, gamma0=0.1, eta=0.2, steps=6).test_loss[5] == pytest.approx(
        5.97996620e-3, rel=1e-8)
    # a_2 = (1 - 2 eta) [(1 - 2 eta) - 4 eta^3 gamma0^2 (1 - eta)]
    g, e = 1.3, 0.07
    a2 = (1 - 2 * e) * ((1 - 2 * e) - 4 * e ** 3 * g * g * (1 - e))
    assert solve(hidden_layers=1, gamma0=g, eta=e, steps=3).test_loss[2] == pytest.approx(a2 ** 2,
                                                                                        rel=1e-13)


def test_t3_gradient_flow_limit():
    def tau(a, g):
        q = math.sqrt(1 + g * g)
        return math.log((1 + g * g * (1 - a) + q * math.sqrt(1 + g * g * (1 - a) ** 2))
                        / (a * (1 + q))) / (2 * q)
    from scipy.optimize import brentq
    a_exact = brentq(lambda a: tau(a, 1.0) - 1.0, 1e-6, 0.999)
    assert a_exact == pytest.approx(0.0934117, abs=1e-7)
    a = {}
    for eta, ref in [(0.02, 0.08843), (0.01, 0.09093), (0.005, 0.09217)]:
        steps = int(round(1 / eta)) + 1
        a[eta] = math.sqrt(solve(hidden_layers=1, gamma0=1.0, eta=eta, steps=steps).test_loss[-1])
        assert a[eta] == pytest.approx(ref, abs=1e-5)
    # the error is O(eta): Richardson extrapolation removes it
    assert 2 * a[0.005] - a[0.01] == pytest.approx(a_exact, abs=2e-4)
    assert abs(a[0.005] - a_exact) < abs(a[0.01] - a_exact) / 1.8


# --------------------------------------------------------------------------- T4 Marchenko-Pastur
MP_TABLE = [  # alpha, L, eta, sigma, t, test, train
    (2, 1, 0.1, 0.5, 1, 0.915000, 0.717500), (2, 1, 0.1, 0.5, 5, 0.545321, 0.258267),
    (2, 1, 0.1, 0.5, 40, 0.451692, 0.128164), (0.5, 2, 0.05, 0.3, 10, 0.667131, 0.022565),
    (0.5, 2, 0.05, 0.3, 40, 0.669903, 0.000782), (4, 3, 0.05, 0, 10, 0.058426, 0.027652),
    (4, 3, 0.05, 0, 40, 0.000563, 0.000182)]


@pytest.mark.parametrize("alpha, L, eta, sigma, t, test, train", MP_TABLE)
def test_t4_marchenko_pastur_table(alpha, L, eta, sigma, t, test, train):
    r = solve(hidden_layers=L, alpha=alpha, gamma0=1e-5, eta=eta, sigma=sigma, steps=t + 1)
    assert r.test_loss[t] == pytest.approx(test, abs=2e-6)
    assert r.train_loss[t] == pytest.approx(train, abs=2e-6)


def test_t4_marchenko_pastur_first_step_polynomials():
    for alpha, L, eta, sigma, S in [(2.0, 1, 0.1, 0.5, 1.0), (0.7, 2, 0.04, 0.2, 1.7)]:
        c, q = (L + 1) * eta, 1 / alpha
        test = S * (1 - 2 * c + c * c * (1 + q)) + sigma ** 2 * (1 + q * c * c)
        train = (S * (1 - 2 * c * (1 + q) + c * c * (1 + 3 * q + q * q))
                 + sigma ** 2 * (1 - 2 * c * q + c * c * q * (1 + q)))
        r = solve(hidden_layers=L, alpha=alpha, gamma0=1e-7, eta=eta, sigma=sigma, signal=S, steps=2)
        assert r.test_loss[1] == pytest.approx(test, rel=1e-10)
        assert r.train_loss[1] == pytest.approx(train, rel=1e-10)


# --------------------------------------------------------------------------- T5 SGD
def test_t5_lazy_online_sgd():
    eta, ab, sigma, L = 0.1, 0.5, 0.5, 1
    c = (L + 1) * eta
    cv = [1.0]
    for _ in range(30):
        cv.append(((1 - c) ** 2 + c * c / ab) * cv[-1] + c * c * sigma ** 2 / ab)
    exact = np.array(cv) + sigma ** 2
    r = solve(hidden_layers=L, batch_ratio=ab, gamma0=1e-7, eta=eta, sigma=sigma, steps=31)
    np.testing.assert_allclose(r.test_loss, exact, rtol=1e-10)
    np.testing.assert_allclose(r.test_loss[[1, 5, 10, 30]], [0.99, 0.501099, 0.356193, 0.321477],
                               atol=1e-6)
    with pytest.raises(DomainError):
        r.value("train_loss")
    # stability boundary c < 2 alpha_B / (1 + alpha_B): just above it the loss grows
    eta_max = 2 * ab / (1 + ab) / (L + 1)
    with pytest.raises(ConvergenceError, match="eta"):
        solve(hidden_layers=L, batch_ratio=ab, gamma0=1e-7, eta=1.3 * eta_max, steps=400)


# --------------------------------------------------------------------------- T6 equal-time fix
def test_t6_equal_time_427_over_625():
    r = solve(hidden_layers=1, nu=1.0, gamma0=1.0, eta=0.2, steps=4)
    assert r.value("C_v")[1, 1] == pytest.approx(float(Fraction(427, 625)), abs=1e-14)
    np.testing.assert_allclose(r.test_loss[[2, 3]], [0.390626, 0.239019], atol=1e-6)
    # the printed sums over t' < t give 0.80 (rejected by simulations, see below)
    lit = solve(hidden_layers=1, nu=1.0, gamma0=1.0, eta=0.2, steps=2, _variant="printed_sums")
    assert lit.value("C_v")[1, 1] == pytest.approx(0.80, abs=1e-14)
    # with data (alpha = 2)
    r = solve(hidden_layers=1, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.2, steps=2)
    assert r.value("C_v")[1, 1] == pytest.approx(533 / 625, abs=1e-14)
    assert r.value("C_delta")[1, 1] == pytest.approx(661 / 1250, abs=1e-14)


@pytest.mark.parametrize("eta, gamma0, nu, S", [(0.2, 1.0, 1.0, 1.0), (0.13, 0.6, 2.5, 1.4),
                                                (0.3, 2.0, 0.5, 0.8)])
def test_t6_symbolic_first_step(eta, gamma0, nu, S):
    K10 = 2 * eta - eta ** 2 / nu
    Cg10 = 1 - eta / nu
    Cg11 = 1 - 2 * eta / nu + eta ** 2 * gamma0 ** 2 * S + eta ** 2 / nu + eta ** 2 / nu ** 2
    cv11 = S * (1 - K10) ** 2 + (Cg11 - 2 * K10 * Cg10 + K10 ** 2) / (nu * gamma0 ** 2)
    r = solve(hidden_layers=1, nu=nu, gamma0=gamma0, eta=eta, signal=S, steps=2)
    assert r.value("C_v")[1, 1] == pytest.approx(cv11, rel=1e-13)


def test_t6_infinite_width_general_alpha():
    for eta, alpha, sigma, S in [(0.2, 2.0, 0.0, 1.0), (0.11, 0.6, 0.4, 1.3)]:
        cv = S * (1 - 2 * eta) ** 2 + 4 * eta ** 2 * (S + sigma ** 2) / alpha
        cd = (S * (1 - 4 * eta + 4 * eta ** 2) + S * (12 * eta ** 2 - 4 * eta) / alpha
              + 4 * S * eta ** 2 / alpha ** 2
              + sigma ** 2 * (1 - 4 * eta / alpha + 4 * eta ** 2 / alpha + 4 * eta ** 2 / alpha ** 2))
        r = solve(hidden_layers=1, alpha=alpha, gamma0=0.9, eta=eta, sigma=sigma, signal=S, steps=2)
        assert r.value("C_v")[1, 1] == pytest.approx(cv, rel=1e-13)
        assert r.value("C_delta")[1, 1] == pytest.approx(cd, rel=1e-13)


# --------------------------------------------------------------------------- T7 ResNet kernel
def test_t7_resnet_lazy_kernel():
    Ls = [1, 2, 4, 8, 16, 32]
    kap = [resnet_kernel(hidden_layers=L, branch_scale0=1.2) for L in Ls]
    np.testing.assert_allclose(kap, [2, 4.16, 7.0285, 9.7724, 11.7963, 13.0524], atol=1e-4)
    assert resnet_kernel(hidden_layers=10 ** 6, branch_scale0=1.2) == pytest.approx(
        (2 + 1.44) * math.exp(1.44), rel=1e-5)
    for L, k, ref in zip(Ls[:5], kap, [0.81, 0.627264, 0.420651, 0.26151, 0.168252]):
        r = solve(hidden_layers=L, branch_scale0=1.2, gamma0=1e-6, eta=0.05, steps=2)
        assert r.test_loss[1] == pytest.approx((1 - 0.05 * k) ** 2, rel=1e-9)
        assert r.test_loss[1] == pytest.approx(ref, abs=2e-6)
    # beta = 1: kappa = 2^(L-2) (L + 3)
    for L in (2, 3, 5):
        assert resnet_kernel(hidden_layers=L, branch_scale=1.0) == pytest.approx(2 ** (L - 2) * (L + 3))


# --------------------------------------------------------------------------- T8 reference runs
def test_t8a_finite_data_and_width():
    r = solve(hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.2, steps=11)
    np.testing.assert_allclose(r.test_loss[[0, 1, 2, 5, 10]], [2.0, 1.05427, 0.743119, 0.420971, 0.27964],
                               atol=6e-6)
    np.testing.assert_allclose(r.train_loss[[0, 1, 2, 5, 10]],
                               [2.0, 0.910912, 0.643325, 0.308251, 0.247697], atol=6e-6)


def test_t8b_centered():
    kw = dict(hidden_layers=3, alpha=1.5, nu=2.0, gamma0=0.7, eta=0.15, sigma=0.3, steps=12)
    r = solve(centering=True, **kw)
    np.testing.assert_allclose(r.test_loss[[0, 1, 3, 5, 8, 11]],
                               [1.09, 0.78355, 0.89623, 0.79974, 0.451006, 0.393708], atol=6e-6)
    np.testing.assert_allclose(r.train_loss[[1, 3, 5, 8, 11]],
                               [0.56595, 1.03186, 0.869083, 0.322734, 0.270563], atol=6e-6)
    assert solve(**kw).test_loss[0] == pytest.approx(1 + 1 / (2 * 0.49) + 0.09, rel=1e-14)


def test_t8c_online_sgd_and_decomposition():
    r = solve(hidden_layers=2, nu=0.5, batch_ratio=1.0, gamma0=1.0, eta=0.2, sigma=0.5, steps=12)
    np.testing.assert_allclose(r.test_loss[[0, 1, 3, 5, 8, 11]],
                               [3.25, 3.38752, 2.47238, 1.74716, 1.36188, 1.2044], atol=6e-6)
    parts = [r.value(n)[11] for n in ("bias", "width_variance", "data_variance")]
    np.testing.assert_allclose(parts, [0.121526, 0.717931, 0.114948], atol=2e-6)


def test_t8d_resnet_with_data():
    r = solve(hidden_layers=4, branch_scale=0.5, alpha=2.0, nu=1.0, gamma0=1.5, eta=0.1, sigma=0.2,
              steps=20)
    np.testing.assert_allclose(r.test_loss[[0, 1, 3, 5, 10, 19]],
                               [1.90806, 1.01004, 0.585635, 0.43971, 0.323556, 0.213499], atol=6e-6)
    # L(0) = S + (1 + beta^2)^(L-1) / (nu gamma0^2) + sigma^2
    assert r.test_loss[0] == pytest.approx(1 + 1.25 ** 3 / 2.25 + 0.04, rel=1e-14)


def test_t8e_resnet_population():
    r = solve(hidden_layers=3, branch_scale=0.7, nu=1.0, gamma0=1.0, eta=0.1, steps=11)
    np.testing.assert_allclose(r.test_loss[[0, 1, 3, 5, 10]],
                               [3.2201, 1.08024, 0.396547, 0.202759, 0.0484577], atol=6e-6)


@pytest.mark.parametrize("L, ref", [(2, [0.169899, 0.016017, 5.60617e-5]),
                                    (3, [0.0661011, 8.94834e-4, 5.05885e-8]),
                                    (4, [0.0162135, 1.06611e-5, 1.83018e-12])])
def test_t8f_rich_population(L, ref):
    r = solve(hidden_layers=L, gamma0=1.0, eta=0.05, steps=21)
    np.testing.assert_allclose(r.test_loss[[5, 10, 20]], ref, rtol=1e-5)
    lazy = (1 - (L + 1) * 0.05) ** (2 * np.arange(21))
    assert np.all(r.test_loss[2:] < lazy[2:])          # rich is faster than lazy


# --------------------------------------------------------------------------- T10 identities
@pytest.mark.parametrize("kw", [
    dict(hidden_layers=2, alpha=1.3, nu=0.7, gamma0=0.8, eta=0.1, sigma=0.4),
    dict(hidden_layers=3, alpha=0.6, nu=2.0, gamma0=1.2, eta=0.05, sigma=0.2, centering=True),
    dict(hidden_layers=2, nu=1.5, batch_ratio=0.8, gamma0=1.0, eta=0.1, sigma=0.3),
    dict(hidden_layers=3, alpha=3.0, nu=1.0, gamma0=1.0, eta=0.05, branch_scale=0.6, sigma=0.1)])
def test_t10_identities(kw):
    r = solve(steps=25, **kw)
    s2 = kw.get("sigma", 0.0) ** 2
    total = r.value("bias") + r.value("width_variance") + r.value("data_variance") + s2
    np.testing.assert_allclose(total, r.test_loss, rtol=1e-11)
    # bias = S (sum_{s<=t} H(t, s))^2 with the transfer function H = (I + K R_Delta)^-1
    H = r.value("transfer")
    np.testing.assert_allclose(r.value("bias"), H.sum(axis=1) ** 2, rtol=1e-9, atol=1e-14)
    if "batch_ratio" not in kw:
        assert r.value("C_delta")[0, 0] == pytest.approx(r.value("C_v")[0, 0] + s2, rel=1e-14)
    Rd = r.value("R_delta")
    np.testing.assert_allclose(np.diag(Rd), 1.0)
    assert np.allclose(np.triu(Rd, 1), 0) and np.allclose(np.triu(r.value("R_vu")), 0)
    for name in ("C_v", "C_delta"):
        C = r.value(name)
        assert np.allclose(C, C.T) and np.min(np.linalg.eigvalsh(C)) > -1e-10 * np.max(np.abs(C))


def test_t10_population_train_equals_test_and_resnet_one_layer():
    r = solve(hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, steps=15)
    np.testing.assert_allclose(r.train_loss, r.test_loss, rtol=1e-14)
    kw = dict(hidden_layers=1, alpha=2.0, nu=0.8, gamma0=1.1, eta=0.1, sigma=0.3, steps=15)
    np.testing.assert_allclose(solve(branch_scale=0.7, **kw).test_loss, solve(**kw).test_loss,
                               rtol=1e-13)
    # at nu = inf, t <= 1 does not depend on gamma0
    a = solve(hidden_layers=3, alpha=1.5, gamma0=0.3, eta=0.1, steps=2).test_loss
    b = solve(hidden_layers=3, alpha=1.5, gamma0=3.0, eta=0.1, steps=2).test_loss
    np.testing.assert_allclose(a, b, rtol=1e-13)


def test_resnet_with_zero_branches_is_the_one_hidden_layer_network():
    kw = dict(alpha=2.0, nu=0.7, gamma0=1.2, eta=0.1, sigma=0.2, steps=15)
    np.testing.assert_allclose(solve(hidden_layers=3, branch_scale=0.0, **kw).test_loss,
                               solve(hidden_layers=1, **kw).test_loss, rtol=1e-13)


def test_printed_v_equation_rejected_by_networks():
    """(65) prints eta gamma0 C_g^1 where the correct coefficient is eta.  At gamma0 = 0.3 the two
    differ at t = 1 by 0.19; 40 centered networks at D = 128 (SE ~ 0.003) decide: the corrected
    theory within 5 SE + 3% (finite-D bias), the printed one off by > 20 SE."""
    kw = dict(hidden_layers=1, nu=4.0, gamma0=0.3, eta=0.2, steps=4, centering=True)
    good = solve(**kw).test_loss[1:]
    bad = solve(_variant="printed_v", **kw).test_loss[1:]
    run = simulate_linear_field(dim=128, networks=40, seed=0, **kw)
    m, s = run.value("loss")[1:], run.stderr("loss")[1:]
    assert np.all(np.abs(m - good) < 5 * s + 0.03 * good)
    assert np.max(np.abs(m - bad) / s) > 20


# --------------------------------------------------------------------------- regression
@pytest.mark.parametrize("L, gamma0, eta, S", [(1, 1.0, 0.1, 1.0), (3, 0.7, 0.05, 1.0),
                                               (2, 1.5, 0.08, 2.0)])
def test_infinite_width_and_data_equals_solve_deep_linear(L, gamma0, eta, S):
    """nu = alpha = inf: the population dynamics is one training point x with K^x = 1 and
    y = sqrt(S); solve_deep_linear's loss is the halved MSE, the test loss here is un-halved."""
    r = solve(hidden_layers=L, gamma0=gamma0, eta=eta, signal=S, steps=30)
    d = solve_deep_linear(kernel=np.array([[1.0]]), y=np.array([math.sqrt(S)]), depth=L + 1,
                          gamma0=gamma0, eta=eta, steps=30)
    np.testing.assert_allclose(r.test_loss, 2 * d.loss, rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------- parameterizations
def test_ntk_parameterization():
    assert gamma0_at(1.0, 4.0, "ntk") == pytest.approx(0.5)
    assert gamma0_at(1.0, 4.0, "mup") == 1.0
    # nu gamma0^2 fixed in NTK: the initial loss does not depend on nu
    for nu in (0.5, 2.0, 8.0):
        r = solve(hidden_layers=2, nu=nu, gamma0=1.0, eta=0.1, steps=3, parameterization="ntk")
        assert r.test_loss[0] == pytest.approx(2.0)
        m = solve(hidden_layers=2, nu=nu, gamma0=1.0, eta=0.1, steps=3)
        assert m.test_loss[0] == pytest.approx(1 + 1 / nu)
    # NTK at nu = inf is the lazy kernel limit with the initial-function variance 1/gamma0^2
    r = solve(hidden_layers=2, gamma0=1.0, eta=0.1, steps=10, parameterization="ntk")
    np.testing.assert_allclose(r.test_loss, 2.0 * (1 - 0.3) ** (2 * np.arange(10)), rtol=1e-12)
    # and the NTK runs approach it like 1/sqrt(nu) in gamma0 (monotone in nu)
    gaps = [abs(solve(hidden_layers=2, nu=nu, gamma0=1.0, eta=0.1, steps=10,
                      parameterization="ntk").test_loss[-1] - r.test_loss[-1]) for nu in (1, 4, 16, 64)]
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3]


def test_learning_rate_sweep_transfer():
    """Population data, L = 3, gamma0 = 2, loss after 9 steps (losses stay >= 1e-13, far above
    round-off): the muP optimum stays within two grid points (ratio 1.23 each) across a 32-fold
    range of widths, the NTK optimum moves right by more than a factor 2.5."""
    etas = np.geomspace(0.02, 1.0, 20)
    nus = [0.5, 2.0, 16.0]
    kw = dict(hidden_layers=3, gamma0=2.0, steps=10)
    mup = learning_rate_sweep(etas, nus, **kw)
    ntk = learning_rate_sweep(etas, nus, parameterization="ntk", **kw)
    assert mup.final_loss.shape == (3, 20)
    assert mup.optimal_eta.max() / mup.optimal_eta.min() < 1.6
    assert np.all(np.diff(ntk.optimal_eta) > 0)
    assert ntk.optimal_eta[-1] / ntk.optimal_eta[0] > 2.5
    # muP: wider is better -- the best loss, and the loss at every eta up to the optimum (near
    # the edge of stability the order can flip)
    assert np.all(np.diff(mup.best_loss) < 0)
    fin = mup.final_loss
    ok = etas <= mup.optimal_eta.min()
    assert np.all(np.diff(fin[:, ok], axis=0) < 0)
    assert np.isinf(fin[:, -1]).all()                   # eta = 1 diverges: recorded as inf
    assert repr(mup).startswith("LearningRateSweep(")


def test_max_stable_learning_rate_lazy_limits():
    """Lazy limits: (L + 1) eta < 2 (population), 2 alpha_B / (1 + alpha_B) (SGD), the
    Marchenko-Pastur edge c (1 + alpha^-1/2)^2 < 2 (finite data).  A slightly unstable rate
    needs ~ ln(1e3) / (growth rate) steps to be detected, so the bisection overshoots by a few
    percent at these step counts (1.2%, 2.5%, 2.7%): asserted from above within 4%."""
    e = max_stable_learning_rate(hidden_layers=2, gamma0=1e-4, steps=150, tol=1e-3)
    assert 1.0 <= e / (2 / 3) < 1.04
    e = max_stable_learning_rate(hidden_layers=1, batch_ratio=0.5, gamma0=1e-4, steps=200, tol=1e-3)
    assert 1.0 <= e / (2 * 0.5 / 1.5 / 2) < 1.04
    e = max_stable_learning_rate(hidden_layers=1, alpha=4.0, gamma0=1e-4, steps=150, tol=1e-3)
    assert 1.0 <= e / (2 / (2 * 1.5 ** 2)) < 1.04


# --------------------------------------------------------------------------- depth limit
def test_infinite_depth_extrapolation():
    Ls = [2, 4, 8, 16, 32]
    vals = [solve(hidden_layers=L, branch_scale0=1.2, gamma0=1.0, eta=0.01, steps=11).test_loss[10]
            for L in Ls]
    np.testing.assert_allclose(vals, [0.420, 0.216, 0.106, 0.0600, 0.0411], atol=6e-4)
    ext = extrapolate_depth(Ls[2:], vals[2:])
    assert ext.limit < vals[-1]
    assert ext.limit == pytest.approx(0.0329 - (0.0411 - 0.0329), abs=0.01)


# --------------------------------------------------------------------------- power laws (T9)
def test_t9_power_law_exponent_one_hidden_layer():
    """Hard task b = 0.5, rich (gamma0 = 1), a = 1.5, M = 4000, eta = 0.2, fit over t in
    [150, 600): reference 0.669, theory 2b/(1+b) = 2/3."""
    hard = solve_power_law(hidden_layers=1, capacity=1.5, modes=4000, eta=0.2, steps=600,
                           source=0.5, gamma0=1.0)
    assert power_law_exponent(hard, t_min=150, t_max=600) == pytest.approx(0.669, abs=0.004)


def test_t9_lazy_and_easy_exponents_are_b():
    kw = dict(hidden_layers=1, capacity=1.5, modes=2000, eta=0.2, steps=300)
    lazy = power_law_exponent(solve_power_law(source=0.5, gamma0=1e-4, **kw), 75, 300)
    assert abs(lazy - 0.5) < 0.03
    for g in (1e-4, 1.0):
        easy = power_law_exponent(solve_power_law(source=2.0, gamma0=g, **kw), 75, 300)
        assert abs(easy - 2.0) < 0.02


def test_t9_reference_table(opt_in_slow):
    kw = dict(hidden_layers=1, capacity=1.5, modes=4000, eta=0.2, steps=600)
    got = {(b, g): power_law_exponent(solve_power_law(source=b, gamma0=g, **kw), 150, 600)
           for b in (0.5, 2.0) for g in (1e-4, 1.0)}
    np.testing.assert_allclose([got[0.5, 1e-4], got[0.5, 1.0], got[2.0, 1e-4], got[2.0, 1.0]],
                               [0.518, 0.669, 1.995, 2.000], atol=0.003)


def test_t9_deeper_networks_hard_task_faster_than_lazy():
    """L = 2: the paper's depth-independence of the exponent is not asserted (local slopes keep
    drifting in accessible windows); asserted is that the rich local slope on the hard task is at
    least 2b/(1+b) and clearly above lazy, and that the easy-task exponent stays b."""
    kw = dict(hidden_layers=2, capacity=1.5, modes=2000, eta=0.04, steps=400)
    rich = power_law_exponent(solve_power_law(source=0.5, gamma0=1.0, **kw), 200, 400)
    lazy = power_law_exponent(solve_power_law(source=0.5, gamma0=1e-4, **kw), 200, 400)
    assert rich >= 2 / 3 - 0.005 and rich > lazy + 0.1 and abs(lazy - 0.5) < 0.03
    easy = power_law_exponent(solve_power_law(source=2.0, gamma0=1.0, **kw), 200, 400)
    assert abs(easy - 2.0) < 0.03


def test_t9_deeper_local_slopes_reference(opt_in_slow):
    """Reference local slopes (L = 2, b = 0.5, gamma0 = 1, eta = 0.04, M = 3000): 0.667, 0.688,
    0.716 over [100,200], [200,400], [400,800]."""
    r = solve_power_law(hidden_layers=2, capacity=1.5, source=0.5, gamma0=1.0, eta=0.04, steps=800,
                        modes=3000)
    got = [power_law_exponent(r, lo, hi) for lo, hi in [(100, 200), (200, 400), (400, 800)]]
    np.testing.assert_allclose(got, [0.667, 0.688, 0.716], atol=0.003)


def test_power_law_theory_matches_wide_networks():
    """Centered networks on power-law data (population gradient, L = 1, a = 1.5, b = 0.5, 400
    modes): at N = 1024 within 5 standard errors + 3% (the O(1/N) bias is ~1%), and the gap at
    N = 64 is larger (it falls with width)."""
    kw = dict(hidden_layers=1, capacity=1.5, source=0.5, gamma0=1.0, eta=0.2, steps=100, modes=400)
    th = solve_power_law(**kw).test_loss
    wide = simulate_power_law(width=1024, networks=4, seed=1, **kw)
    m, s = wide.value("loss"), wide.stderr("loss")
    assert np.all(np.abs(m - th) < 5 * s + 0.03 * th)
    narrow = simulate_power_law(width=64, networks=4, seed=2, **kw)
    assert abs(narrow.value("loss")[-1] - th[-1]) > 3 * abs(m[-1] - th[-1])


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, match", [
    (dict(alpha=0.0), "alpha"), (dict(alpha=-1.0), "alpha"), (dict(nu=0.0), "nu"),
    (dict(nu=-2.0), "nu"), (dict(eta=0.0), "eta"), (dict(eta=np.nan), "eta"),
    (dict(eta=np.inf), "eta"), (dict(alpha=np.nan), "alpha"), (dict(gamma0=np.nan), "gamma0"),
    (dict(gamma0=-1.0), "gamma0"), (dict(sigma=-0.1), "sigma"), (dict(steps=2.5), "steps"),
    (dict(steps=0), "steps"), (dict(eta="0.1"), "eta"), (dict(centering=1), "centering"),
    (dict(parameterization="sp"), "parameterization"), (dict(gamma0=0.0, nu=1.0), "gamma0"),
    (dict(batch_ratio=1.0, alpha=2.0), "alpha"), (dict(batch_ratio=0.0), "batch_ratio"),
    (dict(branch_scale=-1.0), "beta"), (dict(signal=0.0), "signal")])
def test_bad_input(kw, match):
    base = dict(hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.1, steps=5)
    base.update(kw)
    with pytest.raises(DomainError, match=match):
        solve(**base)


def test_depth_keywords():
    with pytest.raises(DomainError):
        solve(depth=3, hidden_layers=2, gamma0=1.0, eta=0.1, steps=3)
    a = solve(depth=3, gamma0=1.0, eta=0.1, steps=3)
    assert a.hidden_layers == 2 and a.depth == 3 and a.layers == (1, 2)
    assert a.value("C_h", layer=0).shape == (3, 3) and a.stderr("loss") is None
    with pytest.raises(DomainError):
        a.value("C_g", layer=0)
    with pytest.raises(DomainError):
        a.value("nope")
    assert "RandomDataResult(" in repr(a) and "<table>" in a._repr_html_()


def test_divergence_is_reported_not_nan():
    with pytest.raises(ConvergenceError, match="eta"):
        solve(hidden_layers=3, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.9, steps=60)


# --------------------------------------------------------------------------- vs simulation
def test_theory_matches_simulation_gap_falls_like_one_over_D():
    """Mean test loss of simulated field-form networks vs the DMFT at t = 10.

    The finite-D bias is O(1/D) while the network-to-network spread is O(D^-1/2): the numbers of
    networks (8000, 4000, 4000 at D = 32, 64, 128) keep every gap resolved at >= 5 standard errors
    (gap x D ~ 0.3, standard error x D ~ 0.02, 0.04, 0.05), so the fitted slope has an SE ~ 0.12.
    """
    kw = dict(hidden_layers=1, nu=1.0, gamma0=1.0, eta=0.1, steps=11)
    th = solve(**kw).test_loss[[10]]
    lit = solve(_variant="printed_sums", **kw).test_loss[[10]]
    comps, lits, Ds = [], [], [32, 64, 128]
    for D, n in zip(Ds, [8000, 4000, 4000]):
        run = simulate_linear_field(dim=D, networks=n, seed=D, **kw)
        m, s = run.value("loss")[[10]], run.stderr("loss")[[10]]
        comps.append(compare(th, m, "test_loss", stderr=s))
        lits.append(compare(lit, m, "test_loss", stderr=s))
    # the printed equations (sums over t' < t) are rejected by the same data: their gap is
    # resolved at > 30 standard errors at every D and does not fall like 1/D
    assert min(c.max_abs_z for c in lits) > 30
    assert lits[-1].error > 5 * comps[-1].error
    assert not scaling_fit(lits, Ds).consistent_with(-1.0, sigmas=4.0)
    fit = scaling_fit(comps, Ds)
    # slope -1 within 4 standard errors (the fit's SE includes the chi^2 inflation)
    assert fit.consistent_with(-1.0, sigmas=4.0), fit
    assert fit.slope_stderr < 0.25, fit
    # the printed equations: no convergence at all (their gap does not fall with D)
    assert not fit.consistent_with(0.0, sigmas=4.0), fit


SLOW_SETTINGS = {   # theory parameters, input dimensions D, networks per D / D
    "finite_data": (dict(hidden_layers=2, alpha=2.0, nu=0.5, gamma0=1.0, eta=0.1, sigma=0.3),
                    (64, 128, 256), 48),
    "resnet_depth_mup": (dict(hidden_layers=3, branch_scale0=1.0, alpha=2.0, nu=1.0, gamma0=1.0,
                              eta=0.1), (64, 128, 256), 24),
    "online_sgd": (dict(hidden_layers=2, batch_ratio=2.0, nu=2.0, gamma0=1.0, eta=0.1, sigma=0.5),
                   (64, 128, 256), 24),
    "centered_small_width": (dict(hidden_layers=3, alpha=1.5, nu=2.0, gamma0=0.7, eta=0.15,
                                  sigma=0.3, centering=True), (128, 256, 512), 2),
}


@pytest.mark.parametrize("name", list(SLOW_SETTINGS))
def test_slow_gap_falls_like_one_over_D(name, opt_in_slow):
    """DMFT vs field-form networks (test loss at t = 10): RMS gap ~ D^-1 (fitted slope within 4
    SE of -1), and the printed sums over t' < t rejected by the same data (or diverging).  The
    numbers of networks keep the O(1/D) gap resolved against the O(D^-1/2) spread."""
    theory, Ds, per_D = SLOW_SETTINGS[name]
    kw = dict(theory, steps=11)
    th = solve(**kw).test_loss[[10]]
    try:
        lit = solve(_variant="printed_sums", **kw).test_loss[[10]]
    except ConvergenceError:      # the printed equations blow up here: rejected outright
        lit = None
    comps, lits = [], []
    for D in Ds:
        run = simulate_linear_field(dim=D, networks=per_D * D, seed=1000 + D, **kw)
        m, s = run.value("loss")[[10]], run.stderr("loss")[[10]]
        comps.append(compare(th, m, "test_loss", stderr=s))
        if lit is not None:
            lits.append(compare(lit, m, "test_loss", stderr=s))
    fit = scaling_fit(comps, Ds)
    print(name, fit, [(round(c.error, 6), round(c.error_stderr, 6)) for c in comps],
          "printed equations:", "diverge" if lit is None else [round(c.max_abs_z, 1) for c in lits])
    assert fit.consistent_with(-1.0, sigmas=4.0), fit
    assert lit is None or min(c.max_abs_z for c in lits) > 10
