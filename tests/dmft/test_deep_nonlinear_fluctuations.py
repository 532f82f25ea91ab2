"""The O(1/N) fluctuations of deep nonlinear networks from the sampled single site
(effth.dmft.deep_nonlinear_fluctuations; Bordelon & Pehlevan (2022), App. P.7, eqs. (174)-(175),
P.7.1).

Independent references: (a) gamma0 -> 0, effth's 1/n theory of the initial kernels (the
four-point vertex V of PDLT (4.119)/(5.x) by effth.flow, and the NTK variance A + B + B of PDLT
(8.82) by effth.pdlt ntk_flow) -- the kernels are frozen at their initial fluctuations; (b)
independently initialised muP tanh networks trained by effth.simulation.simulate_training; (c)
the closed forms at phi = id and L = 1 (tests/dmft/test_fluctuations.py).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import effth as et
from effth.dmft import DMFTFluctuations, deep_nonlinear_fluctuations, solve_monte_carlo
from effth.dmft.fluctuations import _nonlinear_site_hessian
from effth.errors import DomainError
from effth.simulation.training import simulate_training

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)                 # K^x = X X^T / 2 = KX
Y = np.array([1.0, -0.5])
L, T, ETA = 2, 3, 0.4


@functools.lru_cache(maxsize=None)
def _saddle(gamma0, samples=20000, seed=4):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_monte_carlo(X, Y, hidden_layers=L, activation="tanh", gamma0=gamma0, eta=ETA,
                                 steps=T, responses="jacobian", samples=samples, seed=seed,
                                 progress=False)


@functools.lru_cache(maxsize=None)
def _theory(gamma0, seed=9):
    # near-lazy, the responses (and the third derivatives of their Price terms) are O(gamma0)
    samples, third = (1000, 300) if gamma0 > 0.1 else (800, 50)
    return deep_nonlinear_fluctuations(_saddle(gamma0), samples=samples, replicas=4, seed=seed,
                                       third_samples=third)


def _sample_variance(x):
    """Sample variance (networks on axis 0) and its standard error from the fourth central
    moment (no Gaussian assumption)."""
    v = x.var(axis=0, ddof=1)
    m4 = np.mean((x - x.mean(axis=0)) ** 4, axis=0)
    return v, np.sqrt((m4 - v ** 2) / x.shape[0])


def test_lazy_limit_is_the_one_over_n_theory():
    """gamma0 = 0.01, tanh, L = 2: N Cov(Phi^l) at every pair of times is the NNGP vertex
    V^(l+1) of effth.flow (the kernels are frozen at their initial fluctuations), the initial
    NTK's N Var is A + B + B of the NTK hierarchy (PDLT (8.82)), within the replicas' standard
    error (Student t, 3 dof: |z| < 8).  Rejected by the same data: V x 0.9 and the theory
    without its propagation (N Cov = Sigma, J dropped: the layer-2 kernel's vertex without the
    inherited layer-1 fluctuation)."""
    fl = _theory(0.01)
    assert fl.saddle_z < 8.0
    flow = et.flow(K1=KX, depth=L + 1, activation="tanh", c_w=1.0, c_b=0.0)
    from effth.pdlt.ntk.ntk_flow import ntk_flow
    nf = ntk_flow(K1=KX, Theta1=KX, depth=L + 1, activation="tanh", lambda_b=0.0, lambda_w=1.0,
                  statistics=("A", "B"))
    A, B = nf.value("A", layer=L + 1), nf.value("B", layer=L + 1)
    ntk_ref = A + np.einsum("acbd->abcd", B) + np.einsum("adbc->abcd", B)
    _, Sig, lay = _nonlinear_site_hessian(_saddle(0.01), 800, [9, 0], 1e-3, True, 1)
    no_prop = DMFTFluctuations(dmft=fl.dmft, center=True, propagator=Sig[:lay.nq, :lay.nq],
                               gradient_norm=np.nan, asymmetry=0.0, _layout=lay)
    worst_wrong, worst_missing = 0.0, 0.0
    for ell in (1, 2):
        V = flow.value("V", layer=ell + 1)                      # (n, n, n, n)
        v, se = fl.variance("phi", layer=ell), fl.variance_stderr("phi", layer=ell)   # (T, n, T, n)
        ref = np.einsum("abab->ab", V)                          # N Var(K_ab), any pair of times
        z = (v - ref[None, :, None, :]) / se
        assert np.max(np.abs(z)) < 8.0, (ell, z)
        worst_wrong = max(worst_wrong, float(np.max(np.abs((v - 0.9 * ref[None, :, None, :]) / se))))
        if ell == 2:
            zm = (no_prop.variance("phi", layer=2) - ref[None, :, None, :]) / se
            worst_missing = max(worst_missing, float(np.max(np.abs(zm))))
    k0 = fl.covariance("ntk")[0, :, :, 0]                       # (n, n, n, n) at t = 0
    ks = fl.variance_stderr("ntk")[0]
    z = (np.einsum("abab->ab", k0) - np.einsum("abab->ab", ntk_ref)) / ks
    assert np.max(np.abs(z)) < 8.0, z
    assert worst_wrong > 10.0 and worst_missing > 10.0, (worst_wrong, worst_missing)


def test_tanh_networks_quick():
    """tanh, L = 2, gamma0 = 1, N = 256, 1500 muP networks: the measured N Var of the
    predictions, of Phi^1, Phi^2, G^1, G^2 and of the NTK at the last time agrees with the
    sampled-site theory (|z| < 4.5, its replica error included); the lazy covariance (the same
    theory at gamma0 = 0.01: no feature-learning part) is rejected by the same data (|z| > 6).
    At t = 0 the gamma0 = 1 kernels have the lazy NNGP vertex of effth.flow."""
    N = 256
    fl, lazy = _theory(1.0), _theory(0.01)
    assert fl.saddle_z < 8.0
    run = simulate_training(X, Y, widths=N, seed=17, networks=1500, hidden_layers=L, gamma0=1.0,
                            eta=ETA, steps=T, activation="tanh", parameterization="mup")
    t = T - 1
    quantities = [("f", None, run.f[:, t, 0], (t, 0)), ("f", None, run.f[:, t, 1], (t, 1)),
                  ("phi", 1, run.phi[:, 0, t, 0, t, 1], (t, 0, t, 1)),
                  ("phi", 2, run.phi[:, 1, t, 0, t, 1], (t, 0, t, 1)),
                  ("g", 1, run.g[:, 0, t, 0, t, 0], (t, 0, t, 0)),
                  ("g", 2, run.g[:, 1, t, 0, t, 1], (t, 0, t, 1)),
                  ("ntk", None, run.ntk[:, t, 0, 0], (t, 0, 0))]
    # at t = s = 0 every kernel keeps its lazy fluctuation at any gamma0 (the NNGP vertex)
    for ell in (1, 2):
        ref = np.einsum("abab->ab", et.flow(K1=KX, depth=L + 1, activation="tanh").value("V", layer=ell + 1))
        z = (fl.variance("phi", layer=ell)[0, :, 0, :] - ref) / fl.variance_stderr("phi", layer=ell)[0, :, 0, :]
        assert np.max(np.abs(z)) < 8.0, (ell, z)
    rejected = 0.0
    for name, layer, x, idx in quantities:
        v, se = _sample_variance(x)
        p, pse = fl.variance(name, layer)[idx], fl.variance_stderr(name, layer)[idx]
        z = (N * v - p) / np.hypot(N * se, pse)
        assert abs(z) < 4.5, (name, layer, N * v, p, N * se, pse)
        q, qse = lazy.variance(name, layer)[idx], lazy.variance_stderr(name, layer)[idx]
        rejected = max(rejected, abs(N * v - q) / np.hypot(N * se, qse))
    assert rejected > 6.0


def test_error_estimate_covers_an_independent_sampling():
    """The replicas' standard error is the sampling error: two theories from independent seeds
    differ by z = d / sqrt(se1^2 + se2^2) with rms over the equal-time kernel and prediction
    entries between 0.4 and 2 (an error estimate 3x too large or too small is rejected)."""
    a = _theory(1.0)
    b = deep_nonlinear_fluctuations(_saddle(1.0), samples=1000, replicas=4, seed=10,
                                    third_samples=300)
    zs = []
    for name, layer in (("f", None), ("phi", 1), ("phi", 2), ("g", 1), ("g", 2)):
        va, vb = a.variance(name, layer), b.variance(name, layer)
        sa, sb = a.variance_stderr(name, layer), b.variance_stderr(name, layer)
        if name != "f":
            idx = np.arange(T)
            va, vb, sa, sb = (x[idx, :, idx, :] for x in (va, vb, sa, sb))
        ok = np.hypot(sa, sb) > 0
        zs.append(((va - vb)[ok] / np.hypot(sa, sb)[ok]).ravel())
    rms = float(np.sqrt(np.mean(np.concatenate(zs) ** 2)))
    assert 0.4 < rms < 2.0, rms
    assert a.variance_stderr("f") is not None and np.all(a.variance_stderr("f", widths=64) <= a.variance_stderr("f"))


def test_several_saddles_include_the_saddle_error():
    """phi = id, L = 2, gamma0 = 1, three independent 1000-sample saddles: the mean theory equals
    the closed-form deep_linear_fluctuations within its error (rms z over f, Phi^{1,2}, G^{1,2}
    between 0.3 and 2, max |z| < 8 for Student t with 2 dof), the error is at least the
    replicas' sampling error, and the result's saddle is the mean of the solves."""
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.3, steps=3)
    ref = et.dmft.deep_linear_fluctuations(X, Y, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sad = [solve_monte_carlo(X, Y, activation="linear", responses="jacobian", samples=1000,
                                 seed=s, progress=False, **kw) for s in (31, 32, 33)]
    fl = deep_nonlinear_fluctuations(sad, samples=600, replicas=2, seed=5, third_samples=10)
    assert fl.saddles == 3 and fl.replica_propagators.shape[0] == 6
    assert np.allclose(fl.dmft.f, np.mean([r.f for r in sad], axis=0))
    zs = []
    for name, layer in (("f", None), ("phi", 1), ("phi", 2), ("g", 1), ("g", 2)):
        a, b, se = ref.variance(name, layer), fl.variance(name, layer), fl.variance_stderr(name, layer)
        ok = se > 1e-9 * np.max(np.abs(a))
        zs.append(((b - a)[ok] / se[ok]).ravel())
        reps = np.array([DMFTFluctuations(dmft=fl.dmft, center=True, propagator=p,
                                          gradient_norm=np.nan, asymmetry=0.0,
                                          _layout=fl._layout).variance(name, layer)
                         for p in fl.replica_propagators]).reshape(3, 2, *a.shape)
        within = reps.var(axis=1, ddof=1).mean(axis=0)
        assert np.all(se >= np.sqrt(within / 6) * (1 - 1e-12))
    z = np.concatenate(zs)
    assert 0.3 < np.sqrt(np.mean(z ** 2)) < 2.0 and np.max(np.abs(z)) < 8.0, z
    with pytest.raises(DomainError, match="different problems"):
        deep_nonlinear_fluctuations([sad[0], _saddle(1.0)], samples=200, replicas=2,
                                    third_samples=10)


def test_bad_input():
    res = _saddle(1.0)
    with pytest.raises(DomainError, match="DMFTResult"):
        deep_nonlinear_fluctuations({"phi": 1})
    with pytest.raises(DomainError, match="deep_linear_fluctuations"):
        deep_nonlinear_fluctuations(et.dmft.solve_deep_linear(X, Y, hidden_layers=2, gamma0=1.0,
                                                              eta=0.2, steps=3))
    with pytest.raises(DomainError, match="samples"):
        deep_nonlinear_fluctuations(res, samples=10)
    with pytest.raises(DomainError, match="third_samples"):
        deep_nonlinear_fluctuations(res, samples=200, third_samples=300)
    with pytest.raises(DomainError, match="eps"):
        deep_nonlinear_fluctuations(res, eps=0.0)
    with pytest.raises(DomainError, match="memory|work"):
        deep_nonlinear_fluctuations(res, samples=10**9, third_samples=10)
    with pytest.raises(DomainError, match="work"):
        deep_nonlinear_fluctuations(res, replicas=10**6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unconverged = solve_monte_carlo(X, Y, hidden_layers=L, activation="tanh", gamma0=1.0,
                                        eta=ETA, steps=T, samples=4000, seed=1, iterations=1,
                                        progress=False)
    with pytest.raises(DomainError, match="fixed point"):
        deep_nonlinear_fluctuations(unconverged, samples=500, replicas=2, third_samples=50)
    # a closed-form theory has no Monte-Carlo error
    assert et.dmft.deep_linear_fluctuations(X, Y, hidden_layers=2, gamma0=1.0, eta=0.2,
                                            steps=3).variance_stderr("f") is None


def _study_quantities(run, t):
    return [("f(t)_0", "f", None, run.f[:, t, 0], (t, 0)), ("f(t)_1", "f", None, run.f[:, t, 1], (t, 1)),
            ("f(1)_0", "f", None, run.f[:, 1, 0], (1, 0)),
            ("Phi^1(t,t)_01", "phi", 1, run.phi[:, 0, t, 0, t, 1], (t, 0, t, 1)),
            ("Phi^2(t,t)_01", "phi", 2, run.phi[:, 1, t, 0, t, 1], (t, 0, t, 1)),
            ("Phi^2(t,0)_00", "phi", 2, run.phi[:, 1, t, 0, 0, 0], (t, 0, 0, 0)),
            ("G^1(t,t)_00", "g", 1, run.g[:, 0, t, 0, t, 0], (t, 0, t, 0)),
            ("G^2(t,t)_01", "g", 2, run.g[:, 1, t, 0, t, 1], (t, 0, t, 1)),
            ("K(t)_00", "ntk", None, run.ntk[:, t, 0, 0], (t, 0, 0)),
            ("K(t)_01", "ntk", None, run.ntk[:, t, 0, 1], (t, 0, 1))]


@pytest.mark.slow
def test_width_study(request):
    """tanh, L = 2, gamma0 = 1, eta = 0.4, T = 3: N = 64 .. 512, 2000 independently initialised
    muP networks per width (simulate_training), against the sampled-site theory at three
    independently solved saddles (40000 samples each, passed together: variance_stderr includes the
    saddles' own Monte-Carlo error).  N Var_meas / N Var_pred -> 1:
    |z| < 4.5 for every quantity at N >= 256; the lazy covariance (gamma0 = 0.01) is rejected at
    N = 512 (|z| > 6 for the predictions, G^1 and the NTK).  Prints the table of docs/dmft.md
    (run with -s).  Opt-in: about 4 minutes on one core."""
    request.getfixturevalue("opt_in_slow")
    t = T - 1
    fl = deep_nonlinear_fluctuations([_saddle(1.0, samples=40000, seed=s) for s in (21, 22, 23)],
                                     samples=2000, replicas=8, seed=100, third_samples=1000)
    lazy = deep_nonlinear_fluctuations(_saddle(0.01, samples=40000, seed=24), samples=2000,
                                       replicas=8, seed=124, third_samples=1000)
    run0 = simulate_training(X, Y, widths=8, seed=0, networks=2, hidden_layers=L, gamma0=1.0,
                             eta=ETA, steps=T, activation="tanh", parameterization="mup")
    keys = [q[0] for q in _study_quantities(run0, t)]
    pred, pred_se, lz, lz_se, within = {}, {}, {}, {}, {}
    for key, name, layer, _, idx in _study_quantities(run0, t):
        pred[key], pred_se[key] = fl.variance(name, layer)[idx], fl.variance_stderr(name, layer)[idx]
        lz[key], lz_se[key] = lazy.variance(name, layer)[idx], lazy.variance_stderr(name, layer)[idx]
        reps = np.array([DMFTFluctuations(dmft=fl.dmft, center=True, propagator=p,
                                          gradient_norm=np.nan, asymmetry=0.0,
                                          _layout=fl._layout).variance(name, layer)[idx]
                         for p in fl.replica_propagators]).reshape(3, 8)
        within[key] = np.sqrt(reps.var(axis=1, ddof=1).mean() / 24)      # sampling error alone
    print("\n| quantity | N Var pred (gamma0=1) | lazy | error with / without the saddles' |")
    print("|---|---|---|---|")
    for key in keys:
        print(f"| {key} | {pred[key]:.4g} ± {pred_se[key]:.2g} | {lz[key]:.4g} ± {lz_se[key]:.2g} "
              f"| {pred_se[key]:.2g} / {within[key]:.2g} |")
    widths = [64, 128, 256, 512]
    table = {key: [] for key in keys}
    for N in widths:
        run = simulate_training(X, Y, widths=N, seed=1000 + N, networks=2000, hidden_layers=L,
                                gamma0=1.0, eta=ETA, steps=T, activation="tanh",
                                parameterization="mup")
        for key, _, _, x, _ in _study_quantities(run, t):
            v, se = _sample_variance(x)
            r = N * v / pred[key]
            r_se = r * np.hypot(N * se / (N * v), pred_se[key] / pred[key])
            zl = (N * v - lz[key]) / np.hypot(N * se, lz_se[key])
            z = (N * v - pred[key]) / np.hypot(N * se, pred_se[key])
            table[key].append((r, r_se, N * v / lz[key], zl, z))
            if N >= 256:
                assert abs(z) < 4.5, (N, key, N * v, pred[key], N * se, pred_se[key])
            if N == 512 and key in ("f(t)_0", "G^1(t,t)_00", "K(t)_00"):
                assert abs(zl) > 6.0, (key, N * v, lz[key])
    print("\n| quantity | " + " | ".join(f"N={N}" for N in widths) + " | lazy at N=512 |")
    print("|---|" + "---|" * (len(widths) + 1))
    for key in keys:
        cells = " | ".join(f"{r:.3f} ± {s:.3f}" for r, s, _, _, _ in table[key])
        last = table[key][-1]
        print(f"| {key} | {cells} | {last[2]:.3f} (z = {last[3]:.1f}) |")
