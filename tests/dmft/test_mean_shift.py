"""The O(1/N) shift of the mean of the deep linear DMFT (Bordelon & Pehlevan (2022), App. P.7,
the cubic term of eq. (174)).

Checks: (a) the closed-form kernel gradient of the action is consistent with the conjugate and
response gradients (a symmetric Hessian, also off the saddle); (b) exact finite-width facts at
initialisation (E H^l = K^x, E G^l = 1, E NTK = (L + 1) K^x at every width); (c) the lazy
limit gamma0 -> 0 against effth's 1/n theory: the centred prediction gets the NTK-variance
part, 1/2 Cov(dK) d^2 f / dK^2 of the frozen-NTK GD map (PDLT (8.82) via the kernel vertices of
effth.pdlt.deep_linear_flow), and the raw output plus d f* / d(gamma0^2) is PDLT's mean1
(∞.155)-(∞.160) of effth.predict (slow); (d) independently initialised muP networks
(effth.simulation.simulate_training).
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.dmft import solve_deep_linear
from effth.dmft.fluctuations import _Layout, _saddle
from effth.dmft.mean_shift import _full_gradient, deep_linear_mean_shift
from effth.errors import DomainError
from effth.simulation.training import simulate_training
from tests.dmft.test_fluctuations import K3, KX, X, Y, _ntk_covariance


def _hessian(args, x):
    nx = x.size
    X0 = np.repeat(x[None].astype(complex), nx, axis=0)
    X0[np.arange(nx), np.arange(nx)] += 1e-30j
    return (_full_gradient(args, X0).imag / 1e-30).T


def test_kernel_gradient_is_consistent_with_the_action():
    """The full Hessian, with the kernel rows from the closed-form dS/dk and the conjugate and
    response rows from effth.dmft.fluctuations._gradient, is symmetric at the saddle and at a
    random point off it (conjugates nonzero), and its kernel-kernel block vanishes at the
    saddle (and not off it: the check is not empty)."""
    L, T, n, P = 2, 4, 3, 2
    res = solve_deep_linear(kernel=K3, y=Y, hidden_layers=L, gamma0=1.3, eta=0.2, steps=T,
                            closure="exact")
    lay = _Layout(L, T, n)
    q, r = _saddle(res, lay)
    args = (lay, K3, Y, P, 0.2, 1.3, True)
    x0 = np.concatenate([q, np.zeros(lay.nq), r])
    H0 = _hessian(args, x0)
    top = np.abs(H0).max()
    assert np.abs(H0 - H0.T).max() < 1e-12 * top
    assert np.abs(H0[:lay.nq, :lay.nq]).max() < 1e-12 * top
    rng = np.random.default_rng(3)
    x1 = x0 + 0.05 * rng.standard_normal(x0.size)
    H1 = _hessian(args, x1)
    assert np.abs(H1 - H1.T).max() < 1e-11 * np.abs(H1).max()
    assert np.abs(H1[:lay.nq, :lay.nq]).max() > 1e-3               # S_kk != 0 off the saddle


def test_initial_time_has_no_mean_shift():
    """At t = 0 the deep linear kernels have their exact means at every width (E H^l = K^x,
    E G^l = 1, E NTK = (L + 1) K^x: a product of independent layers; PDLT §3.1), and the
    centred prediction is 0; later times shift at gamma0 = 1."""
    ms = deep_linear_mean_shift(X, Y, hidden_layers=2, gamma0=1.0, eta=0.2, steps=6)
    scale = np.abs(ms.shift_vector).max()
    assert scale > 0.1
    for name, layer in (("phi", 1), ("phi", 2), ("g", 1), ("g", 2)):
        d = ms.shift(name, layer)
        assert np.abs(d[0, :, 0, :]).max() < 1e-8 * scale
        assert np.abs(d[-1, :, -1, :]).max() > 1e-2
    assert np.abs(ms.shift("ntk")[0]).max() < 1e-8 * scale
    assert np.abs(ms.shift("f")[0]).max() < 1e-12
    assert np.allclose(ms.mean("f", widths=64), ms.value("f") + ms.shift("f") / 64)


def _lazy_mean_shift(K, y, L, eta, T, cov_k):
    """N (E f(t) - f*(t)) of the centred predictions of the lazy GD map
    f_{i+1} = f_i + eta K[:, :P] (y - f_i[:P]) with the random initial NTK
    K = (L + 1) K^x + dK, N Cov(dK) = cov_k: 1/2 cov_k . d^2 f / dK^2 (second order in dK; the
    map is a polynomial in K, differentiated along the eigenvectors of cov_k)."""
    n, P = K.shape[0], y.size
    lam, vec = np.linalg.eigh(cov_k.reshape(n * n, n * n))
    eps, om = 1e-4, np.exp(1j * np.pi / 4)

    def run(dK):
        Kt = (L + 1) * K + dK
        f, out = np.zeros(n, dtype=complex), [np.zeros(n, dtype=complex)]
        for _ in range(T - 1):
            f = f + eta * Kt[:, :P] @ (y - f[:P])
            out.append(f)
        return np.array(out)

    tot = np.zeros((T, n))
    for lk, v in zip(lam, vec.T):
        dK = v.reshape(n, n)
        tot += 0.5 * lk * (run(om * eps * dK) + run(-om * eps * dK)).imag / eps ** 2
    return tot


def test_lazy_limit_is_the_ntk_variance_part():
    """gamma0 -> 0 (Richardson in gamma0^2 from 0.1 and 0.05; the DMFT is even in gamma0): the
    centred prediction's mean shift is that of the GD map with the random initial NTK, 1/2
    Cov(dK) d^2 f / dK^2 (the delta_ntk part (∞.157) of PDLT's mean, with the NTK covariance
    A + B + B of (8.82) from the kernel vertices), and the kernels' shift vanishes.  A
    coefficient x0.9 is rejected."""
    L, T, eta = 2, 5, 0.2
    kw = dict(kernel=K3, y=Y, hidden_layers=L, eta=eta, steps=T)
    a = deep_linear_mean_shift(**kw, gamma0=0.1)
    b = deep_linear_mean_shift(**kw, gamma0=0.05)
    got = (4 * b.shift("f") - a.shift("f")) / 3
    want = _lazy_mean_shift(K3, Y, L, eta, T, _ntk_covariance(K3, L))
    assert np.abs(want).max() > 0.02
    tol = 1e-4 * np.abs(want).max()
    assert np.abs(got - want).max() < tol, (got, want)
    assert np.abs(got - 0.9 * want).max() > 20 * tol
    for ell in (1, 2):                  # frozen kernels: the shift is O(gamma0^2), gone after Richardson
        g2 = (4 * b.shift("phi", ell) - a.shift("phi", ell)) / 3
        assert np.abs(g2).max() < 1e-2 * np.abs(a.shift("phi", ell)).max()


@pytest.mark.slow
def test_lazy_raw_output_is_pdlt_mean1(request):
    """gamma0 = 1/sqrt(n) is NTK parametrisation: PDLT's finite-width mean after t GD steps,
    mean1 = n (E z(t) - m^inf(t)) (∞.155)-(∞.160) of effth.predict (raw output, dNTK and ddNTK
    parts included), equals lim_{gamma0 -> 0} [delta f_raw + d f* / d(gamma0^2)] at the test
    input."""
    request.getfixturevalue("opt_in_slow")
    import effth as et

    L, T, eta = 2, 5, 0.2
    kw = dict(kernel=K3, y=Y, hidden_layers=L, eta=eta, steps=T)
    f0 = solve_deep_linear(**kw, gamma0=1e-6, closure="exact").f
    est = []
    for g in (0.1, 0.05):
        ms = deep_linear_mean_shift(**kw, gamma0=g, center=False)
        est.append(ms.shift("f") + (ms.value("f") - f0) / g ** 2)
    got = (4 * est[1] - est[0]) / 3
    net = et.MLP("linear", depth=L + 1, c_w=1.0, c_b=0.0)
    X3 = np.linalg.cholesky(3 * K3)
    for u in range(1, T):
        p = et.predict(net, X3[:2], Y, X3[2:], lambda_b=0.0, lambda_w=1.0, eta=eta, updates=u,
                       widths=100)
        want = float(p.value("mean1")[0])
        assert abs(got[u, 2] - want) < 1e-4 * max(1.0, abs(want)), (u, got[u, 2], want)


def _measured_shift(N, networks, seed, kw, ms, points):
    run = simulate_training(X, Y, widths=N, seed=seed, networks=networks, activation="linear",
                            parameterization="mup", record_kernels=False, **kw)
    out = []
    for t, mu in points:
        x = run.f[:, t, mu]
        out.append((N * (x.mean() - ms.value("f")[t, mu]), N * x.std(ddof=1) / np.sqrt(networks)))
    return np.array(out)                                  # (points, 2): N (mean - DMFT), SE


def test_networks_quick():
    """gamma0 = 1 (feature learning), L = 2, 3000 muP networks at N = 64 and 128: the measured
    N (mean f - f*) at the last time, extrapolated in 1/N (2 D_128 - D_64), agrees with the
    mean shift (z < 4.5); the Gaussian theory alone (no shift) is rejected (z > 5)."""
    T = 8
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.2, steps=T)
    ms = deep_linear_mean_shift(X, Y, **kw)
    points = [(T - 1, 0), (T - 1, 1)]
    d64 = _measured_shift(64, 3000, 101, kw, ms, points)
    d128 = _measured_shift(128, 3000, 102, kw, ms, points)
    est = 2 * d128[:, 0] - d64[:, 0]
    se = np.sqrt(4 * d128[:, 1] ** 2 + d64[:, 1] ** 2)
    want = np.array([ms.shift("f")[t, mu] for t, mu in points])
    assert np.all(np.abs(est - want) < 4.5 * se), (est, want, se)
    assert np.sqrt(np.sum((est / se) ** 2)) > 5.0


#: the width study: chunks of 2000 networks per width, seeds N * 1000 + offset + c
_STUDY = {32: ((77, 16), (577, 8)), 64: ((77, 16), (577, 8)), 128: ((77, 16), (577, 8)),
          256: ((77, 8), (577, 4)), 512: ((77, 3), (577, 2))}


def _study_shift(N, kw, f_star):
    """N (mean f - f*) at the last time and its SE over the chunks of _STUDY[N]."""
    s1, s2, cnt = 0.0, 0.0, 0
    for offset, chunks in _STUDY[N]:
        for c in range(chunks):
            run = simulate_training(X, Y, widths=N, seed=N * 1000 + c + offset, networks=2000,
                                    activation="linear", parameterization="mup",
                                    record_kernels=False, **kw)
            x = run.f[:, -1, :] - f_star
            s1, s2, cnt = s1 + x.sum(0), s2 + (x ** 2).sum(0), cnt + x.shape[0]
    m = s1 / cnt
    return N * m, N * np.sqrt((s2 / cnt - m ** 2) / (cnt - 1))


def _fit_intercept(N, y, s, degree):
    """Weighted fit y = sum_p c_p N^-p, p <= degree: (coefficients, their covariance, chi^2)."""
    A = np.vstack([N ** -float(p) for p in range(degree + 1)]).T
    cov = np.linalg.inv(A.T @ (A / s[:, None] ** 2))
    coef = cov @ A.T @ (y / s ** 2)
    return coef, cov, float(np.sum(((A @ coef - y) / s) ** 2))


@pytest.mark.slow
def test_width_study(request):
    """gamma0 = 1, L = 2: N = 32 .. 512 (48000 networks up to N = 128, 24000 at 256, 10000 at
    512), the centred f at the last time.  N (mean f - f*) = delta f + c / N + c' / N^2 fitted
    (weighted) agrees with the mean shift at both inputs (z < 4.5); delta f = 0 and a
    coefficient x0.9 are rejected (joint z > 5 over the two inputs); |mean f - f*| falls as
    N^p with p = -1 within 4.5 SE (N >= 128, input 0, whose next order c is the smaller)."""
    request.getfixturevalue("opt_in_slow")
    T = 8
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.2, steps=T)
    ms = deep_linear_mean_shift(X, Y, **kw)
    want, f_star = ms.shift("f")[-1], ms.value("f")[-1]
    widths = np.array(sorted(_STUDY), float)
    D = [_study_shift(int(N), kw, f_star) for N in widths]
    y, s = np.array([d[0] for d in D]), np.array([d[1] for d in D])        # (widths, inputs)
    z0, z9 = [], []
    for mu in range(2):
        coef, cov, chi2 = _fit_intercept(widths, y[:, mu], s[:, mu], 2)
        se = np.sqrt(cov[0, 0])
        print(f"input {mu}: N (mean - f*) = {np.round(y[:, mu], 4)} +- {np.round(s[:, mu], 4)}; "
              f"intercept {coef[0]:.4f} +- {se:.4f} (chi2 {chi2:.2f} / 2), theory {want[mu]:.4f}")
        assert abs(coef[0] - want[mu]) < 4.5 * se
        z0.append(coef[0] / se)
        z9.append((coef[0] - 0.9 * want[mu]) / se)
    print("z(no shift) =", np.round(z0, 2), " z(x0.9) =", np.round(z9, 2),
          " joint", np.round(np.hypot(*z0), 2), np.round(np.hypot(*z9), 2))
    assert np.hypot(*z0) > 5.0 and np.hypot(*z9) > 5.0
    mu = 0                                                # input 0: the smaller next order c
    sel = widths >= 128
    yy, ss = np.abs(y[sel, mu]) / widths[sel], s[sel, mu] / widths[sel]
    lx, rel = np.log(widths[sel]), ss / yy                # log-space weights 1 / Var(log y)
    A = np.vstack([np.ones_like(lx), lx]).T
    cw = np.linalg.inv(A.T @ (A / rel[:, None] ** 2))
    slope = (cw @ A.T @ (np.log(yy) / rel ** 2))[1]
    print(f"input {mu}: |mean - f*| ~ N^p, p = {slope:.3f} +- {np.sqrt(cw[1, 1]):.3f} (N >= 128)")
    assert abs(slope + 1.0) < 4.5 * np.sqrt(cw[1, 1])


def test_bad_input():
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.2, steps=4)
    with pytest.raises(DomainError, match="step"):
        deep_linear_mean_shift(X, Y, **kw, step=0.5)
    with pytest.raises(DomainError, match="gamma0"):
        deep_linear_mean_shift(X, Y, **{**kw, "gamma0": 0.0})
    with pytest.raises(DomainError, match="widths"):
        deep_linear_mean_shift(X, Y, **kw).mean("f", widths=-3)
    with pytest.raises(DomainError, match="layer"):
        deep_linear_mean_shift(X, Y, **kw).shift("phi")
    assert KX.shape == (2, 2)


def test_two_layer_linear_equals_the_deep_linear_action():
    """Two constructions: with phi = id the two-layer quadrature (d^2<O>/df^2 from the exact
    tangent, d kappa/df) gives the mean shift of the deep linear action's third derivatives at
    L = 1, centred and raw output."""
    from effth.dmft.mean_shift import two_layer_mean_shift

    for center in (True, False):
        kw = dict(gamma0=1.0, eta=0.2, steps=6, center=center)
        a = two_layer_mean_shift(X, Y, activation="linear", nodes=8, **kw)
        b = deep_linear_mean_shift(X, Y, hidden_layers=1, **kw)
        scale = np.abs(b.shift_vector).max()
        assert scale > 0.1
        for name, layer in (("f", None), ("phi", 1), ("g", 1), ("ntk", None), ("loss", None)):
            assert np.abs(a.shift(name, layer) - b.shift(name, layer)).max() < 1e-8 * scale


@pytest.mark.slow
def test_two_layer_tanh_width_study(request):
    """tanh, one hidden layer, gamma0 = 1, eta = 0.2, T = 8: N = 32 .. 256, 40000 muP networks
    each, the centred f at the last time: N (mean f - f*) = delta f + c / N fitted agrees with
    two_layer_mean_shift at both inputs (z < 4.5) and delta f = 0 is rejected (joint z > 5).
    (The shift is small against the spread here, |delta f| / sqrt(N Var f) ~ 0.36, so a x0.9
    coefficient would need ~10^6 networks.)"""
    request.getfixturevalue("opt_in_slow")
    from effth.dmft.mean_shift import two_layer_mean_shift

    kw = dict(gamma0=1.0, eta=0.2, steps=8)
    ms = two_layer_mean_shift(X, Y, activation="tanh", nodes=20, **kw)
    want, f_star = ms.shift("f")[-1], ms.value("f")[-1]
    widths = np.array([32, 64, 128, 256], float)
    y, s = [], []
    for N in widths.astype(int):
        s1, s2, cnt = 0.0, 0.0, 0
        for c in range(10):
            run = simulate_training(X, Y, widths=N, seed=N * 1000 + c + 99, networks=4000,
                                    hidden_layers=1, activation="tanh", parameterization="mup",
                                    record_kernels=False, **kw)
            x = run.f[:, -1, :] - f_star
            s1, s2, cnt = s1 + x.sum(0), s2 + (x ** 2).sum(0), cnt + x.shape[0]
        m = s1 / cnt
        y.append(N * m)
        s.append(N * np.sqrt((s2 / cnt - m ** 2) / (cnt - 1)))
    y, s = np.array(y), np.array(s)
    z0 = []
    for mu in range(2):
        coef, cov, chi2 = _fit_intercept(widths, y[:, mu], s[:, mu], 1)
        se = np.sqrt(cov[0, 0])
        print(f"tanh input {mu}: N (mean - f*) = {np.round(y[:, mu], 4)} +- {np.round(s[:, mu], 4)}; "
              f"intercept {coef[0]:.4f} +- {se:.4f} (chi2 {chi2:.2f} / 2), theory {want[mu]:.4f}")
        assert abs(coef[0] - want[mu]) < 4.5 * se
        z0.append(coef[0] / se)
    print("z(no shift) =", np.round(z0, 2))
    assert np.hypot(*z0) > 5.0


@pytest.mark.slow
def test_raw_output_networks(request):
    """The raw output (center=False, its initial value O(1/(gamma0 sqrt N)) fluctuates and
    feeds back), gamma0 = 1, L = 2: 16000 muP networks at N = 64 and 128, 8000 at 256; the
    measured N (mean f - f*) at t = 4 and the last time, extrapolated as 2 D_128 - D_64 and
    2 D_256 - D_128, agrees with the mean shift (z < 4.5); zero is rejected (joint z > 5)."""
    request.getfixturevalue("opt_in_slow")
    kw = dict(hidden_layers=2, gamma0=1.0, eta=0.2, steps=8)
    ms = deep_linear_mean_shift(X, Y, **kw, center=False)
    f = ms.value("f")[[4, 7]]
    want = ms.shift("f")[[4, 7]]
    D = {}
    for N, M in ((64, 16000), (128, 16000), (256, 8000)):
        s1, s2, cnt = 0.0, 0.0, 0
        for c in range(M // 2000):
            run = simulate_training(X, Y, widths=N, seed=N * 1000 + c + 311, networks=2000,
                                    activation="linear", parameterization="mup",
                                    record_kernels=False, center=False, **kw)
            x = run.f[:, [4, 7], :] - f
            s1, s2, cnt = s1 + x.sum(0), s2 + (x ** 2).sum(0), cnt + x.shape[0]
        m = s1 / cnt
        D[N] = (N * m, N * np.sqrt((s2 / cnt - m ** 2) / (cnt - 1)))
    for lo, hi in ((64, 128), (128, 256)):
        est = 2 * D[hi][0] - D[lo][0]
        se = np.sqrt(4 * D[hi][1] ** 2 + D[lo][1] ** 2)
        print(f"raw, 2 D_{hi} - D_{lo}: {np.round(est, 4).tolist()} +- {np.round(se, 4).tolist()}, "
              f"theory {np.round(want, 4).tolist()}")
        assert np.all(np.abs(est - want) < 4.5 * se)
        assert np.sqrt(np.sum((est / se) ** 2)) > 5.0
