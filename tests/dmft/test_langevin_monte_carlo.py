"""Langevin dynamics and momentum in the Monte-Carlo DMFT of deep nonlinear networks
(Bordelon & Pehlevan 2022, apps. K, L), through the optimizer's ``ParameterFilter``.

Three ways: (a) ``solve_monte_carlo(temperature=..., momentum=...)``; (b) the deep linear DMFT
(closed equations, the same filter) for a linear activation, and the Bayesian posterior that
long Langevin runs approach: at ``gamma0 -> 0`` the kernels equal the NNGP kernels at the prior
weight variance ``temperature / weight_decay`` and ``f`` the NNGP posterior mean with output noise
``temperature`` (PDLT (6.57), (6.64); ``predict(method="bayes")``), up to the discrete chain's
``O(eta)`` bias; (c) tanh networks trained by ``simulate_training`` with Langevin noise or
momentum.
"""

import warnings

import numpy as np
import pytest

import effth as et
from effth.dmft import solve_deep_linear, solve_monte_carlo
from effth.errors import DomainError
from effth.pdlt.learning import predict
from effth.simulation import simulate_training

X = np.array([[1.0, 0.3], [0.2, -1.0]])
Y = np.array([1.0, -0.5])
XT = np.array([[0.5, 0.5]])
L = 2
TEMP, WD = 0.5, 1.0              # prior weight variance TEMP / WD = 1/2
KW = dict(hidden_layers=L, gamma0=1.0, eta=0.2)


def _mc(activation="tanh", seed=1, samples=2000, iterations=40, **kw):
    args = dict(KW, steps=12, responses="stein", samples=samples, iterations=iterations,
                seed=seed, activation=activation)
    args.update(kw)
    return solve_monte_carlo(X, Y, **args)


def _z(est, se, ref):
    """z-scores; entries known exactly (zero standard error: f at t = 0) must agree to 1e-12."""
    d = est - ref
    exact = se == 0
    assert np.all(np.abs(d[exact]) < 1e-12)
    return np.where(exact, 0.0, d / np.where(exact, 1.0, se))


# ----------------------------------------------------------------- (a) = today's solver

@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.3), dict(replicas=2)])
def test_zero_temperature_and_momentum_are_the_gd_solver_bit_for_bit(kw):
    args = dict(KW, steps=6, samples=128, iterations=3, seed=4, replicas=1)
    args.update(kw)
    a = solve_monte_carlo(X, Y, **args)
    b = solve_monte_carlo(X, Y, temperature=0.0, momentum=0.0, **args)
    for name in ("f", "phi", "g", "A", "B", "delta"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_momentum_tau_to_zero_is_gd():
    """mu = exp(-eta / tau) at tau = eta / 40 (below 1e-16): the momentum path equals GD."""
    mu = float(np.exp(-40.0))
    args = dict(KW, steps=6, samples=128, iterations=3, seed=4, replicas=1)
    gd, mom = solve_monte_carlo(X, Y, **args), solve_monte_carlo(X, Y, momentum=mu, **args)
    for name in ("f", "phi", "g", "A", "B"):
        np.testing.assert_allclose(getattr(mom, name), getattr(gd, name), rtol=0, atol=1e-14)


# ----------------------------------------------------------------- (b) deep linear

@pytest.mark.parametrize("responses", ["stein", "jacobian"])
def test_linear_activation_with_momentum_is_the_deep_linear_dmft(responses):
    mu = 0.6
    dl = solve_deep_linear(X, Y, steps=12, momentum=mu, X_test=XT, **KW)
    mc = _mc("linear", momentum=mu, X_test=XT, responses=responses,
             samples=2000 if responses == "stein" else 600, iterations=40 if responses == "stein" else 25)
    z = _z(mc.f, mc.mc_stderr["f"], dl.f)
    assert np.max(np.abs(z)) < 5, z
    zp = _z(mc.phi[:, -1, :, -1], mc.mc_stderr["phi"][:, -1, :, -1], dl.phi[:, -1, :, -1])
    assert np.max(np.abs(zp)) < 5, zp
    if responses == "stein":                  # the memory kernel matters: plain GD is rejected
        gd = solve_deep_linear(X, Y, steps=12, X_test=XT, **KW)
        assert np.max(np.abs(_z(mc.f, mc.mc_stderr["f"], gd.f))) > 10


def test_linear_activation_with_langevin_is_the_deep_linear_dmft():
    kw = dict(steps=12, weight_decay=WD, X_test=XT)
    dl = solve_deep_linear(X, Y, temperature=TEMP, **dict(KW, **kw))
    mc = _mc("linear", temperature=TEMP, **kw)
    z = _z(mc.f, mc.mc_stderr["f"], dl.f)
    assert np.max(np.abs(z)) < 5, z
    se = mc.mc_stderr["phi"][:, -1, :, -1]
    zp = _z(mc.phi[:, -1, :, -1], se, dl.phi[:, -1, :, -1])
    assert np.max(np.abs(zp)) < 5, zp
    wrong = solve_deep_linear(X, Y, temperature=TEMP / 0.9, **dict(KW, **kw))   # beta x 0.9
    assert np.max(np.abs(_z(mc.phi[:, -1, :, -1], se, wrong.phi[:, -1, :, -1]))) > 8


def _posterior(activation, temperature, weight_decay):
    """NNGP posterior mean (train and test points) and the layer-L prior kernel at weight
    variance ``temperature / weight_decay`` with output noise ``temperature``."""
    v = temperature / weight_decay
    net = et.MLP(activation, depth=L + 1, c_w=v, c_b=0.0)
    xs = np.vstack([X, XT])
    post = predict(net, X, Y, xs, method="bayes", noise=temperature)
    return np.ravel(post.value("mean")), net


@pytest.mark.parametrize("activation", ["tanh", pytest.param("linear", marks=pytest.mark.slow)])
def test_near_lazy_langevin_kernels_reach_the_prior_nngp_kernels(activation, request):
    """gamma0 -> 0: decay plus noise leave the prior N(0, T / lambda) invariant, so the late
    equal-time kernels are the NNGP kernels at weight variance T / lambda for every step size;
    beta x 0.9 (variance / 0.9) is rejected
    (measured max |z| 0.9 and 0.8 for the prior, 18 and 17 for the wrong variance)."""
    if activation == "linear":
        request.getfixturevalue("opt_in_slow")
    temp, wd = 1.0, 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mc = _mc(activation, gamma0=0.02, steps=25, temperature=temp, weight_decay=wd, X_test=XT,
                 samples=8000, iterations=12)   # 6 sweeps from the cold start leave a 5 % bias
    xs = np.vstack([X, XT])
    for v, ok in ((temp / wd, True), (temp / 0.9 / wd, False)):
        net = et.MLP(activation, depth=L + 1, c_w=v, c_b=0.0)
        K = et.output_kernels(net, xs, ntk=False)[0] / v     # Phi^L = K^(L+1) / C_W
        z = _z(mc.phi[-1, -1, :, -1], mc.mc_stderr["phi"][-1, -1, :, -1], K)
        assert (np.max(np.abs(z)) < 5) if ok else (np.max(np.abs(z)) > 7), (v, z)


@pytest.mark.slow
def test_long_langevin_f_approaches_the_bayesian_posterior(opt_in_slow):
    """gamma0 -> 0, tanh: the stationary f of the discrete chain carries an O(eta) bias (f - post
    halves with eta, as in the deep linear chain); the Richardson value 2 f(eta/2) - f(eta) equals
    the NNGP posterior mean within its standard error and the O(eta^2) remainder (3 % of f for the
    deep linear chain at these settings)."""
    temp, wd = 1.0, 2.0
    post, _ = _posterior("tanh", temp, wd)
    fs, ses = [], []
    for eta in (0.2, 0.1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = _mc("tanh", gamma0=0.02, eta=eta, steps=int(round(5 / eta)), temperature=temp,
                    weight_decay=wd, X_test=XT, samples=4000, iterations=15, seed=3)
        fs.append(r.f[-1])
        ses.append(r.mc_stderr["f"][-1])
    ratio = (fs[0] - post) / (fs[1] - post)
    assert np.all((ratio > 1.6) & (ratio < 2.8)), ratio
    rich, se = 2 * fs[1] - fs[0], np.hypot(2 * ses[1], ses[0])
    tol = 4 * se + 0.05 * np.abs(post)
    assert np.all(np.abs(rich - post) < tol), (rich, post, tol)
    wrong, _ = _posterior("tanh", temp / 0.8, wd)            # beta x 0.8
    assert np.max(np.abs(rich - wrong) / tol) > 1.5


# ----------------------------------------------------------------- (c) networks

def _networks(N, networks, seed, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_training(X, Y, widths=N, activation="tanh", seed=seed, networks=networks,
                                 record_kernels=False, parameterization="mup",
                                 steps=20, **dict(KW, **kw))


def _gap(run, res, tt):
    """z-scores of the networks' mean f at times ``tt`` and final kernels against ``res``."""
    zf = (run.value("f")[tt] - res.f[tt]) / np.hypot(run.stderr("f")[tt], res.mc_stderr["f"][tt])
    ph = run.phi[:, :, -1, :, -1, :]
    S = ph.shape[0]
    se = np.hypot(ph.std(0, ddof=1) / np.sqrt(S), res.mc_stderr["phi"][:, -1, :, -1, :])
    return zf, (ph.mean(0) - res.phi[:, -1, :, -1, :]) / se


def _rms(z):
    return float(np.sqrt(np.mean(np.square(z))))


def test_tanh_langevin_networks_agree_with_the_dmft_and_reject_a_wrong_temperature():
    tt = [5, 10, 19]
    kw = dict(steps=20, weight_decay=WD, samples=2000, iterations=30)
    run = _networks(128, 200, 11, temperature=TEMP, weight_decay=WD)
    zf, zp = _gap(run, _mc(temperature=TEMP, **kw), tt)
    assert np.max(np.abs(zf)) < 5 and np.max(np.abs(zp)) < 5, (zf, zp)
    _, zw = _gap(run, _mc(temperature=TEMP / 0.9, **kw), tt)          # beta x 0.9
    diag = np.diagonal(zw, axis1=1, axis2=2)                           # Phi^l(x_mu, x_mu)
    assert _rms(diag) > 3.5, zw


def test_tanh_momentum_networks_agree_with_the_dmft_and_reject_gd():
    tt = [5, 10, 19]
    mu, kw = 0.7, dict(steps=20, samples=2000, iterations=30)
    run = _networks(128, 200, 12, momentum=mu)
    zf, zp = _gap(run, _mc(momentum=mu, **kw), tt)
    assert np.max(np.abs(zf)) < 5 and np.max(np.abs(zp)) < 5, (zf, zp)
    assert np.max(np.abs(_gap(run, _mc(**kw), tt)[0])) > 8


@pytest.mark.slow
def test_tanh_langevin_and_momentum_network_gap_falls_like_one_over_n(opt_in_slow):
    """N = 128, 256, 512: every z-score below 5, and the mean squared gap between single networks
    and the DMFT (f at t = 5, 10, 19 and the final kernels) falls like 1/N."""
    tt = [5, 10, 19]
    Ns = np.array([128, 256, 512])
    for kw in (dict(temperature=TEMP, weight_decay=WD), dict(momentum=0.7)):
        res = _mc(steps=20, samples=8000, iterations=30, **kw)
        target = np.concatenate([res.f[tt].ravel(), res.phi[:, -1, :, -1, :].ravel()])
        mse = []
        for N in Ns:
            run = _networks(int(N), 100, int(N) + 5, **kw)
            zf, zp = _gap(run, res, tt)
            assert np.max(np.abs(zf)) < 5 and np.max(np.abs(zp)) < 5, (kw, N, zf, zp)
            o = np.stack([np.concatenate([run.f[k][tt].ravel(), run.phi[k, :, -1, :, -1, :].ravel()])
                          for k in range(run.f.shape[0])])
            mse.append(np.mean((o - target) ** 2))
        slope = np.polyfit(np.log(Ns), np.log(mse), 1)[0]
        assert -1.25 < slope < -0.75, (kw, slope, mse)


# ----------------------------------------------------------------- bad input

@pytest.mark.parametrize("kw, match", [
    (dict(temperature=-0.1, weight_decay=1.0), "temperature"),
    (dict(momentum=-0.2), "momentum"),
    (dict(momentum=1.0), "momentum"),
    (dict(temperature=2.0, weight_decay=1.0, momentum=0.3, eta=0.9, activation="linear"),
     "heavy-ball step"),
    (dict(momentum=0.5, temperature=0.5, weight_decay=1.0, closure="ntk"), "closure"),
    (dict(temperature=0.5, weight_decay=1.0, closure="ntk", width_ratios=(2.0, 1.0)),
     "equal widths"),
    (dict(momentum=0.5, gamma0=0.0), "gamma0 = 0"),
    (dict(temperature=2.0, weight_decay=1.0, eta=0.9), "Langevin step"),
    (dict(momentum=0.5, eta=12.0), "stability edge"),
])
def test_bad_input(kw, match):
    args = dict(KW, steps=4, samples=64, iterations=1)
    args.update(kw)
    with pytest.raises(DomainError, match=match):
        solve_monte_carlo(X, Y, **args)


# ----------------------------------------------------------------- (d) NTK-Euler, eq. (102)

def test_ntk_euler_with_the_ito_term_converges_to_the_exact_closure():
    """The NTK-Euler closure under Langevin noise and weight decay (eq. (102): ``K Delta -
    lambda theta . grad f + temperature Tr grad^2 f``) is the Euler scheme of the same
    continuous-time limit as the exact discrete closure: at a fixed time ``t = 1.6`` and ``eta =
    0.2, 0.1`` (tanh, one hidden layer) the Richardson extrapolations ``2 x(eta/2) - x(eta)`` of
    the two agree within 5 SE (measured 2.3; the ``O(eta^2)`` remainder).  Dropping the Ito term
    (a gap of 0.03 that does not shrink with ``eta``) is rejected by more than 8 SE (16)."""
    from effth.dmft import solve_two_layer
    import effth.dmft.solvers.monte_carlo as mcm

    lang = dict(gamma0=1.0, weight_decay=WD, temperature=TEMP)
    t_end = 1.6

    def pair(eta, ito=True):
        T = int(round(t_end / eta)) + 1
        ex = [solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=100_000,
                              seed=s, two_time=False, eta=eta, steps=T, **lang).f[-1]
              for s in range(4)]
        terms = mcm._langevin_terms
        if not ito:
            def no_ito(*a):
                out = terms(*a)
                out.half = 0.0
                return out
            mcm._langevin_terms = no_ito
        try:
            nt = solve_monte_carlo(X, Y, hidden_layers=1, activation="tanh", closure="ntk",
                                   responses="stein", samples=8000, replicas=8, seed=1,
                                   eta=eta, steps=T, **lang)
        finally:
            mcm._langevin_terms = terms
        ex = np.array(ex)
        return nt.f[-1], nt.stderr("f")[-1], ex.mean(0), ex.std(0, ddof=1) / 2

    def extrapolated_gap(ito):
        (n1, s1, e1, se1), (n2, s2, e2, se2) = pair(0.2, ito), pair(0.1, ito)
        gap = (2 * n2 - n1) - (2 * e2 - e1)
        se = np.sqrt(4 * s2 ** 2 + s1 ** 2 + 4 * se2 ** 2 + se1 ** 2)
        return np.max(np.abs(gap) / se)

    assert extrapolated_gap(True) < 5
    assert extrapolated_gap(False) > 8


@pytest.mark.slow
def test_ntk_euler_ito_term_through_two_hidden_layers(opt_in_slow):
    """``L = 2`` (tanh, t = 1.6, eta = 0.2, 0.1; about 1 minute): the Ito term carries ``<r^l>``
    down the layers, ``<r^1> = <phi''(h^1) z^1> + <phi'(h^1)^2> kappa_1(t, t) <r^2>``.  The
    Richardson extrapolations of the NTK-Euler and exact closures agree within 5 SE (measured
    2.1; weight decay alone: 0.6); without the Ito term the gap is 17.7 SE."""
    import effth.dmft.solvers.monte_carlo as mcm

    terms = mcm._langevin_terms

    def no_ito(*a):
        out = terms(*a)
        out.half = 0.0
        return out

    def gap(ito, **extra):
        rows = []
        for eta in (0.2, 0.1):
            kw = dict(hidden_layers=2, activation="tanh", gamma0=1.0, eta=eta,
                      steps=int(round(1.6 / eta)) + 1, responses="stein", samples=8000,
                      replicas=8, seed=1, **extra)
            ex = solve_monte_carlo(X, Y, **kw)
            if not ito:
                mcm._langevin_terms = no_ito
            try:
                nt = solve_monte_carlo(X, Y, closure="ntk", **kw)
            finally:
                mcm._langevin_terms = terms
            rows.append((nt.f[-1] - ex.f[-1], nt.stderr("f")[-1] ** 2 + ex.stderr("f")[-1] ** 2))
        (d1, v1), (d2, v2) = rows
        return np.max(np.abs(2 * d2 - d1) / np.sqrt(4 * v2 + v1))

    assert gap(True, weight_decay=WD, temperature=TEMP) < 5
    assert gap(True, weight_decay=WD) < 5
    assert gap(False, weight_decay=WD, temperature=TEMP) > 8
