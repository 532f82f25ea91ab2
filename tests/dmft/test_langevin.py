"""Langevin dynamics and momentum in the deep linear DMFT (Bordelon & Pehlevan 2022, apps. K, L).

Three ways: (a) the marched DMFT with the noise kernel / memory kernel; (b) the equilibrium
equations of app. K.3 (eqs. (118)-(121), corrected dual) and, at gamma0 = 0, effth's own NNGP
posterior (PDLT (6.57), (6.64)); the heavy-ball recursion on the static NTK; (c) finite-width
networks trained by ``simulate_training`` with Langevin noise or momentum.
"""

import numpy as np
import pytest

import effth as et
from effth.dmft import solve_deep_linear, solve_two_layer
from effth.dmft.grid import parameter_filter
from effth.dmft.solvers.equilibrium import _solve, solve_deep_linear_equilibrium
from effth.dmft.solvers.lazy import lazy_kernels
from effth.errors import DomainError
from effth.pdlt.learning import predict
from effth.simulation import simulate_training

X = np.array([[1.0, 0.3], [0.2, -1.0]])
Y = np.array([1.0, -0.5])
XT = np.array([[0.5, 0.5]])
L = 2
TEMP, WD = 0.5, 1.0          # beta = 2, paper's lambda = WD / TEMP = 2 (prior variance 1/2)


def _eq(gamma0, temperature=TEMP, weight_decay=WD, paper_dual=False):
    return _solve(X, Y, None, L, gamma0, temperature, weight_decay, XT, None, 0.5, 1e-14,
                  10_000, paper_dual=paper_dual)


def test_equilibrium_at_gamma0_zero_is_the_nngp_posterior():
    eq = solve_deep_linear_equilibrium(X, Y, hidden_layers=L, gamma0=0.0, temperature=TEMP,
                                       weight_decay=WD, X_test=XT)
    lam = WD / TEMP
    net = et.MLP("linear", depth=L + 1, c_w=1.0 / lam, c_b=0.0)
    post = predict(net, X, Y, np.vstack([X, XT]), method="bayes", noise=TEMP)
    np.testing.assert_allclose(eq.f, np.ravel(post.value("mean")), rtol=0, atol=1e-10)
    # the kernels are the NNGP recursion with weight variance 1/lambda (App. K.2, (113))
    for ell in range(1, L + 1):
        np.testing.assert_allclose(eq.phi[ell - 1], eq.data.kx / lam ** ell, rtol=0, atol=1e-14)
    assert eq.prior_variance == pytest.approx(TEMP / WD)


def test_noise_kernel_closed_form_and_stationary_prior():
    eta, T = 0.1, 60
    filt = parameter_filter(eta, T, weight_decay=WD, temperature=TEMP)
    rho = 1 - eta * WD
    sigma2 = TEMP * (1 - rho ** 2) / WD
    # direct sum: kappa(t, s) = rho^{t+s} + sigma^2 sum_{r < min} rho^{t-1-r} rho^{s-1-r}
    t, s = 37, 21
    direct = rho ** (t + s) + sigma2 * sum(rho ** (t - 1 - r) * rho ** (s - 1 - r) for r in range(s))
    assert filt.kappa[t, s] == pytest.approx(direct, rel=1e-13)
    # late times: the prior variance TEMP / WD and the correlation rho^{|t-s|} (C_{lambda,beta})
    assert filt.kappa[-1, -1] == pytest.approx(TEMP / WD, rel=1e-5)
    assert filt.kappa[-1, -4] / filt.kappa[-1, -1] == pytest.approx(rho ** 3, rel=1e-5)


def test_long_langevin_dmft_kernels_reach_the_equilibrium_lazy():
    """gamma0 -> 0: stationary, and the kernels equal the equilibrium's to <= 1e-6."""
    eq = _eq(1e-3)
    r = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1e-3, eta=0.2, steps=100,
                          weight_decay=WD, temperature=TEMP, X_test=XT)
    assert np.max(np.abs(r.f[-1] - r.f[-10])) < 1e-12
    err = np.max(np.abs(r.phi[:, -1, :, -1, :] - eq.phi))
    assert err < 1e-6


def test_long_langevin_dmft_converges_to_equilibrium_as_eta_to_zero():
    """gamma0 = 1: the discrete Langevin chain's stationary f has an O(eta) bias (ratio 2 per
    halving); extrapolated to eta -> 0 it equals the equilibrium, and rejects a wrong temperature
    (beta x 0.9) and the dual of eq. (121) as printed (lambda = 2 != 1)."""
    eq = _eq(1.0)
    fs = []
    for eta, steps in ((0.2, 100), (0.1, 200), (0.05, 400)):
        r = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1.0, eta=eta, steps=steps,
                              weight_decay=WD, temperature=TEMP, X_test=XT)
        assert np.max(np.abs(r.f[-1] - r.f[-10])) < 1e-9          # stationary
        fs.append(r.f[-1])
    e = [f - eq.f for f in fs]
    ratio = np.concatenate([e[0] / e[1], e[1] / e[2]])
    assert np.all((ratio > 1.9) & (ratio < 2.2)), ratio             # first order in eta
    r1, r2 = 2 * fs[1] - fs[0], 2 * fs[2] - fs[1]
    extrap = (4 * r2 - r1) / 3                                       # Richardson, two levels
    tol = 1e-4
    assert np.max(np.abs(extrap - eq.f)) < tol
    wrong = _eq(1.0, temperature=TEMP / 0.9)                         # beta x 0.9
    assert np.max(np.abs(extrap - wrong.f)) > 100 * tol
    paper = _eq(1.0, paper_dual=True)
    assert np.max(np.abs(extrap - paper.f)) > 100 * tol


@pytest.mark.slow
def test_long_langevin_dmft_equals_equilibrium_to_1e6_extrapolated():
    """gamma0 = 1: the stationary DMFT at eta = 0.2 .. 0.025 (t = 12), extrapolated to eta -> 0 by
    the cubic through the four points, equals the equilibrium f and kernels to <= 1e-6."""
    eq = _eq(1.0)
    hs = np.array([0.2, 0.1, 0.05, 0.025])
    fs, phis = [], []
    for eta in hs:
        r = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1.0, eta=eta, steps=int(round(12 / eta)),
                              weight_decay=WD, temperature=TEMP, X_test=XT)
        fs.append(r.f[-1])
        phis.append(r.phi[:, -1, :, -1, :])
    V = np.vander(hs, 4, increasing=True)
    f0 = np.linalg.solve(V, np.array(fs))[0]
    phi0 = np.linalg.solve(V, np.array(phis).reshape(4, -1))[0].reshape(eq.phi.shape)
    assert np.max(np.abs(f0 - eq.f)) < 1e-6
    assert np.max(np.abs(phi0 - eq.phi)) < 1e-6


def test_zero_temperature_is_weight_decay_bit_for_bit():
    a = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1.0, eta=0.1, steps=15, weight_decay=0.3)
    b = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1.0, eta=0.1, steps=15, weight_decay=0.3,
                          temperature=0.0, momentum=0.0)
    assert np.array_equal(a.f, b.f) and np.array_equal(a.phi, b.phi) and np.array_equal(a.A, b.A)


# ----------------------------------------------------------------- momentum (app. L)

def test_momentum_tau_to_zero_is_gd():
    eta = 0.1
    gd = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1.0, eta=eta, steps=25)
    mu = float(np.exp(-eta / (eta / 40)))                           # tau = eta / 40
    assert 0 < mu < 1e-16
    mom = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1.0, eta=eta, steps=25, momentum=mu)
    np.testing.assert_allclose(mom.f, gd.f, rtol=0, atol=1e-14)
    np.testing.assert_allclose(mom.phi, gd.phi, rtol=0, atol=1e-14)
    np.testing.assert_allclose(mom.g, gd.g, rtol=0, atol=1e-14)


def test_momentum_lazy_limit_is_heavy_ball_on_the_static_ntk():
    """gamma0 -> 0 with momentum: v <- mu v + (1 - mu) eta K0 Delta, f <- f + v (independent
    recursion); the exponential memory kernel k(j) = 1 - mu^{j+1} of eq. (123)."""
    eta, mu, T = 0.15, 0.6, 40
    filt = parameter_filter(eta, T, momentum=mu)
    np.testing.assert_allclose(filt.memory, 1 - mu ** np.arange(1, T + 1), rtol=1e-14)
    r = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1e-4, eta=eta, steps=T, momentum=mu,
                          X_test=XT)
    K0 = lazy_kernels(r.data.kx, hidden_layers=L)[3]
    f, v = np.zeros(3), np.zeros(3)
    ref = [f.copy()]
    for _ in range(T - 1):
        v = mu * v + (1 - mu) * eta * K0[:, :2] @ (Y - f[:2])
        f = f + v
        ref.append(f.copy())
    np.testing.assert_allclose(r.f, np.array(ref), rtol=0, atol=1e-6)
    # without the memory (plain GD) the trajectory differs by far more
    gd = solve_deep_linear(X, Y, hidden_layers=L, gamma0=1e-4, eta=eta, steps=T, X_test=XT)
    assert np.max(np.abs(gd.f - np.array(ref))) > 1e-2


def test_momentum_stability_edge():
    kx = X @ X.T / 2
    lmax = np.linalg.eigvalsh(lazy_kernels(kx, hidden_layers=L)[3])[-1]
    eta = 3.0 / lmax                                                  # past GD's edge 2
    with pytest.raises(DomainError, match="stability edge"):
        solve_deep_linear(X, Y, hidden_layers=L, gamma0=0.1, eta=eta, steps=5)
    r = solve_deep_linear(X, Y, hidden_layers=L, gamma0=0.1, eta=eta, steps=40,
                          momentum=0.5)                                # edge 2 (1 + mu)/(1 - mu) = 6
    assert abs(r.delta[-1]).max() < 1e-2 * abs(Y).max()                 # and it converges
    with pytest.raises(DomainError, match="stability edge"):
        solve_deep_linear(X, Y, hidden_layers=L, gamma0=0.1, eta=7.0 / lmax, steps=5, momentum=0.5)


# ----------------------------------------------------------------- networks (ground truth)

def test_langevin_networks_agree_with_dmft_and_reject_wrong_temperature():
    eta, T, N, S = 0.2, 30, 128, 200
    kw = dict(hidden_layers=L, gamma0=1.0, eta=eta, steps=T, weight_decay=WD)
    r = solve_deep_linear(X, Y, temperature=TEMP, **kw)
    run = simulate_training(X, Y, widths=N, activation="linear", seed=7, networks=S,
                            temperature=TEMP, record_kernels=False, parameterization="mup", **kw)
    z = (run.value("f")[-1] - r.f[-1]) / run.stderr("f")[-1]
    assert np.all(np.abs(z) < 5), z
    ph = run.phi[:, :, -1, :, -1, :]                                  # (S, L, n, n) final time
    phm, phs = ph.mean(0), ph.std(0, ddof=1) / np.sqrt(S)
    z = (phm - r.phi[:, -1, :, -1, :]) / phs
    assert np.all(np.abs(z) < 5), z
    # the discrete chain's O(eta) bias is physical: the networks reject the eta -> 0 equilibrium
    eq = _eq(1.0)
    zeq = (run.value("f")[-1] - eq.f[:2]) / run.stderr("f")[-1]
    assert np.max(np.abs(zeq)) > 5, zeq
    wrong = solve_deep_linear(X, Y, temperature=TEMP / 0.9, **kw)    # beta x 0.9
    zw = (phm - wrong.phi[:, -1, :, -1, :]) / phs
    assert np.max(np.abs(zw)) > 8, zw


def test_momentum_networks_agree_with_dmft():
    eta, T, N, S, mu = 0.2, 30, 128, 100, 0.7
    kw = dict(hidden_layers=L, gamma0=1.0, eta=eta, steps=T)
    r = solve_deep_linear(X, Y, momentum=mu, **kw)
    run = simulate_training(X, Y, widths=N, activation="linear", seed=3, networks=S,
                            momentum=mu, record_kernels=False, **kw)
    # transient times (at the end f -> y and the O(1/N) gap outgrows the tiny spread)
    z = (run.value("f")[[5, 12]] - r.f[[5, 12]]) / run.stderr("f")[[5, 12]]
    assert np.all(np.abs(z) < 5), z
    gd = solve_deep_linear(X, Y, **kw)                                # the memory matters
    tt = np.arange(1, 13)
    zg = (run.value("f")[tt] - gd.f[tt]) / run.stderr("f")[tt]
    assert np.max(np.abs(zg)) > 8, zg


def test_trainer_without_noise_or_momentum_is_unchanged():
    kw = dict(hidden_layers=L, widths=16, gamma0=1.0, eta=0.1, steps=6, activation="linear",
              seed=2, weight_decay=0.2)
    a = simulate_training(X, Y, **kw)
    b = simulate_training(X, Y, temperature=0.0, momentum=0.0, **kw)
    assert np.array_equal(a.f, b.f) and np.array_equal(a.phi, b.phi)


@pytest.mark.slow
def test_langevin_network_gap_falls_like_one_over_n():
    """The mean squared gap between Langevin-trained networks and the DMFT (f and the kernels at
    the final time) falls like 1/N (measured slope -0.97, N x gap^2 = 0.21 - 0.25 for N = 32 - 256);
    against the DMFT at beta x 0.9, N x gap^2 grows (0.26 -> 0.50): the offset is resolved."""
    eta, T, S = 0.2, 30, 100
    kw = dict(hidden_layers=L, gamma0=1.0, eta=eta, steps=T, weight_decay=WD)
    r = solve_deep_linear(X, Y, temperature=TEMP, **kw)
    wrong = solve_deep_linear(X, Y, temperature=TEMP / 0.9, **kw)
    Ns = np.array([32, 64, 128, 256])

    def obs(res_f, res_phi):
        return np.concatenate([np.ravel(res_f), np.ravel(res_phi)])

    target, target_w = (obs(x.f[-1], x.phi[:, -1, :, -1, :]) for x in (r, wrong))
    mse, mse_w = [], []
    for N in Ns:
        run = simulate_training(X, Y, widths=int(N), activation="linear", seed=int(N), networks=S,
                                temperature=TEMP, record_kernels=False, parameterization="mup",
                                **kw)
        o = np.stack([obs(run.f[k, -1], run.phi[k, :, -1, :, -1, :]) for k in range(S)])
        mse.append(np.mean((o - target) ** 2))
        mse_w.append(np.mean((o - target_w) ** 2))
    slope = np.polyfit(np.log(Ns), np.log(mse), 1)[0]
    assert -1.2 < slope < -0.8, slope
    nm, nm_w = Ns * np.array(mse), Ns * np.array(mse_w)
    assert 0.7 < nm[-1] / nm[0] < 1.4, nm                     # N x gap^2 constant: a 1/N law
    assert nm_w[-1] / nm_w[0] > 1.6, nm_w                     # wrong beta: the offset grows out


@pytest.mark.slow
def test_momentum_network_gap_falls_like_one_over_n():
    """Momentum networks against the momentum DMFT (f at transient times and the kernels): the
    mean squared gap falls like 1/N; against plain GD's DMFT, N x gap^2 grows."""
    eta, T, S, mu = 0.2, 20, 100, 0.7
    kw = dict(hidden_layers=L, gamma0=1.0, eta=eta, steps=T)
    r = solve_deep_linear(X, Y, momentum=mu, **kw)
    gd = solve_deep_linear(X, Y, **kw)
    Ns = np.array([32, 64, 128, 256])
    tt = [4, 8]

    def obs(res_f, res_phi):
        return np.concatenate([np.ravel(res_f[tt]), np.ravel(res_phi)])

    target, target_gd = (obs(x.f, x.phi[:, 8, :, 8, :]) for x in (r, gd))
    mse, mse_gd = [], []
    for N in Ns:
        run = simulate_training(X, Y, widths=int(N), activation="linear", seed=int(N) + 1,
                                networks=S, momentum=mu, record_kernels=False, **kw)
        o = np.stack([obs(run.f[k], run.phi[k, :, 8, :, 8, :]) for k in range(S)])
        mse.append(np.mean((o - target) ** 2))
        mse_gd.append(np.mean((o - target_gd) ** 2))
    slope = np.polyfit(np.log(Ns), np.log(mse), 1)[0]
    nm, nm_gd = Ns * np.array(mse), Ns * np.array(mse_gd)
    assert -1.2 < slope < -0.8, (slope, nm)
    assert nm_gd[-1] / nm_gd[0] > 2, nm_gd


def test_ntk_euler_closure_under_langevin_noise_is_first_order_in_eta():
    """Deep linear NTK-Euler closure with Langevin noise: eq. (102) is ``K Delta - lambda (L+1) f``
    for a linear network (its Ito term vanishes: ``f`` is linear in each weight).  At a fixed
    time ``t = 2.4`` its gap to the exact discrete closure halves with ``eta`` (the Euler
    scheme's ``O(eta)``), while the closure on noiseless kernels stays 0.2 away."""
    gaps, cold = [], []
    for eta in (0.2, 0.1, 0.05):
        kw = dict(hidden_layers=L, gamma0=1.0, eta=eta, steps=int(round(2.4 / eta)) + 1,
                  weight_decay=WD, temperature=TEMP)
        ex = solve_deep_linear(X, Y, **kw).f[-1]
        gaps.append(np.max(np.abs(solve_deep_linear(X, Y, closure="ntk", **kw).f[-1] - ex)))
        cold.append(np.max(np.abs(solve_deep_linear(X, Y, closure="ntk",
                                                    **dict(kw, temperature=0.0)).f[-1] - ex)))
    ratios = np.array(gaps[:-1]) / np.array(gaps[1:])
    assert np.all((ratios > 1.8) & (ratios < 2.5)), ratios            # measured 2.25, 2.12
    assert gaps[-1] < 5e-3 and min(cold) > 0.15, (gaps, cold)


# ----------------------------------------------------------------- two-layer solver

def _mc_two_layer(activation, temperature, seeds=range(4), samples=20_000):
    kw = dict(gamma0=1.0, eta=0.2, steps=30, weight_decay=WD, temperature=temperature)
    runs = [solve_two_layer(X, Y, activation=activation, method="monte_carlo", samples=samples,
                            seed=s, two_time=False, **kw) for s in seeds]
    f = np.array([r.f[-1] for r in runs])
    ph = np.array([r.phi[0, -1, :, -1, :] for r in runs])
    k = len(runs)
    return f.mean(0), f.std(0, ddof=1) / np.sqrt(k), ph.mean(0), ph.std(0, ddof=1) / np.sqrt(k)


def test_two_layer_langevin_monte_carlo_equals_deep_linear_at_L1():
    """Linear activation: the two-layer solver's sampled noise paths against the deep linear
    solver's noise kernel (two independent treatments of App. K at L = 1)."""
    f, fse, ph, phse = _mc_two_layer("linear", TEMP)
    kw = dict(hidden_layers=1, gamma0=1.0, eta=0.2, steps=30, weight_decay=WD)
    dl = solve_deep_linear(X, Y, temperature=TEMP, **kw)
    assert np.all(np.abs(f - dl.f[-1]) < 5 * fse), (f - dl.f[-1]) / fse
    assert np.all(np.abs(ph - dl.phi[0, -1, :, -1, :]) < 5 * phse)
    wrong = solve_deep_linear(X, Y, temperature=TEMP / 0.9, **kw)
    assert np.max(np.abs(ph - wrong.phi[0, -1, :, -1, :]) / phse) > 8


def test_two_layer_momentum_equals_deep_linear_at_L1():
    kw = dict(gamma0=1.0, eta=0.2, steps=30, momentum=0.6, weight_decay=0.3)
    dl = solve_deep_linear(X, Y, hidden_layers=1, **kw)
    tl = solve_two_layer(X, Y, activation="linear", **kw)
    np.testing.assert_allclose(tl.f, dl.f, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tl.phi, dl.phi, rtol=0, atol=1e-12)


def test_two_layer_tanh_langevin_against_networks():
    f, fse, ph, phse = _mc_two_layer("tanh", TEMP)
    S = 200
    run = simulate_training(X, Y, hidden_layers=1, widths=256, activation="tanh", seed=5,
                            networks=S, record_kernels=False, parameterization="mup", gamma0=1.0,
                            eta=0.2, steps=30, weight_decay=WD, temperature=TEMP)
    z = (run.value("f")[-1] - f) / np.hypot(run.stderr("f")[-1], fse)
    assert np.all(np.abs(z) < 5), z
    P = run.phi[:, 0, -1, :, -1, :]
    pm, ps = P.mean(0), P.std(0, ddof=1) / np.sqrt(S)
    z = (pm - ph) / np.hypot(ps, phse)
    assert np.all(np.abs(z) < 5), z
    fw, fwse, phw, phwse = _mc_two_layer("tanh", TEMP / 0.9, seeds=range(10, 12))
    assert np.max(np.abs(pm - phw) / np.hypot(ps, phwse)) > 8


# ----------------------------------------------------------------- bad input

def test_bad_input_two_layer():
    with pytest.raises(DomainError, match="monte_carlo"):
        solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=5, temperature=0.5, weight_decay=1.0)
    with pytest.raises(DomainError, match="Langevin step"):
        solve_two_layer(X, Y, gamma0=1.0, eta=1.5, steps=5, temperature=2.0, weight_decay=0.5,
                        method="monte_carlo", samples=100, activation="linear")
    with pytest.raises(DomainError, match="momentum"):
        solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=5, momentum=-0.5)
    # temperature and momentum together (underdamped Langevin): the heavy-ball step bound
    with pytest.raises(DomainError, match=r"heavy-ball step.*2 \(1 \+ momentum\)"):
        solve_two_layer(X, Y, gamma0=1.0, eta=1.0, steps=5, temperature=2.0, weight_decay=0.5,
                        momentum=0.3, method="monte_carlo", samples=100, activation="linear")
    with pytest.raises(DomainError, match="monte_carlo"):
        solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=5, temperature=0.5, weight_decay=1.0,
                        momentum=0.3)



@pytest.mark.parametrize("kw, match", [
    (dict(temperature=-0.1, weight_decay=1.0), "temperature"),
    (dict(momentum=-0.2), "momentum"),
    (dict(momentum=1.0), "momentum"),
    (dict(temperature=2.0, weight_decay=1.0, momentum=0.3, eta=0.9), "heavy-ball step"),
    (dict(temperature=0.5, weight_decay=1.0, momentum=0.3, closure="ntk"), "closure"),
    (dict(temperature=2.0, weight_decay=1.0, eta=0.9), "Langevin step"),
])
def test_bad_input_dmft(kw, match):
    args = dict(hidden_layers=L, gamma0=1.0, eta=0.1, steps=5)
    args.update(kw)
    with pytest.raises(DomainError, match=match):
        solve_deep_linear(X, Y, **args)


@pytest.mark.parametrize("kw, match", [
    (dict(temperature=-1.0), "temperature"),
    (dict(momentum=1.5), "momentum"),
])
def test_bad_input_trainer(kw, match):
    with pytest.raises(DomainError, match=match):
        simulate_training(X, Y, hidden_layers=L, widths=8, gamma0=1.0, eta=0.1, steps=3,
                          activation="linear", **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(temperature=0.0, weight_decay=1.0), "temperature"),
    (dict(temperature=0.5, weight_decay=0.0), "weight_decay"),
    (dict(temperature=-0.5, weight_decay=1.0), "temperature"),
])
def test_bad_input_equilibrium(kw, match):
    with pytest.raises(DomainError, match=match):
        solve_deep_linear_equilibrium(X, Y, hidden_layers=L, gamma0=1.0, **kw)
