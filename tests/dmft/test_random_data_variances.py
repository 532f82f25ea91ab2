"""Random-data DMFT with per-layer initial weight variances W^l(0) ~ N(0, sigma_l^2)
(Bordelon & Pehlevan 2022, app. D.8, in the random-data theory of Bordelon & Pehlevan,
"Deep Linear Network Training Dynamics from Random Initialization", app. A, eq. (65)).

Expected values are exact reductions (unit variances give the old equations bit for bit; at
nu = alpha = inf the theory is the independent ``solve_deep_linear(weight_variances=)``), closed
forms derived by hand (the lazy NTK sum_l prod_{k != l} sigma_k^2, the initial-function
variance prod_l sigma_l^2 / (nu gamma0^2), the Marchenko-Pastur first step) and finite networks
(``simulate_linear_field``), whose gap to the theory must fall like 1/D with tolerances from
the standard errors.  Wrong theories (unit variances, one sigma_l^2 x 0.9, the response terms
without sigma_l^2) are rejected by the same networks.
"""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest

import effth.dmft.random_data as rd
from effth.compare import compare, scaling_fit
from effth.dmft import solve_deep_linear
from effth.dmft.random_data import solve_random_data as solve
from effth.errors import DomainError
from effth.simulation.linear_field import simulate_linear_field

VAR = (0.5, 2.0, 1.0)            # sigma_0^2, sigma_1^2, sigma_2^2 at L = 2


def _ntk(v):                     # lazy NTK eigenvalue, derived by hand (see the docstring)
    return sum(math.prod(v[:l] + v[l + 1:]) for l in range(len(v)))


# --------------------------------------------------------------------------- exact reductions
@pytest.mark.parametrize("kw", [
    dict(hidden_layers=3, alpha=1.5, nu=2.0, gamma0=0.7, eta=0.1, sigma=0.3, centering=True),
    dict(hidden_layers=2, nu=0.5, batch_ratio=1.0, gamma0=1.0, eta=0.2, sigma=0.5),
    dict(hidden_layers=3, branch_scale=0.6, alpha=2.0, nu=0.5, gamma0=1.5, eta=0.05),
    dict(hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.1, width_ratios=(0.5, 2.0),
         outputs=2, signal=[[1.0, 0.3], [0.3, 0.8]])])
def test_unit_variances_are_the_old_equations_bit_for_bit(kw):
    base = solve(steps=9, **kw)
    ones = solve(steps=9, weight_variances=[1.0] * (kw["hidden_layers"] + 1), **kw)
    for name, arr in base.arrays.items():
        if arr is not None:
            assert np.array_equal(arr, ones.arrays[name]), name
    assert ones.weight_variances is None
    assert not np.allclose(solve(steps=9, weight_variances=(1.0,) * kw["hidden_layers"] + (0.8,),
                                 **kw).test_loss, base.test_loss)


def test_unit_variances_simulation_bit_for_bit():
    kw = dict(dim=16, hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.1, steps=5,
              networks=3, seed=7, sigma=0.2)
    a = simulate_linear_field(**kw)
    b = simulate_linear_field(weight_variances=(1, 1, 1.0), **kw)
    np.testing.assert_array_equal(a.test_loss, b.test_loss)
    np.testing.assert_array_equal(a.train_loss, b.train_loss)
    assert "weight_variances" not in b.settings


@pytest.mark.parametrize("L, var, ratios, gamma0, eta", [
    (2, VAR, None, 1.0, 0.08), (3, (1.5, 0.6, 1.3, 0.8), None, 1.2, 0.05),
    (3, (1.5, 0.6, 1.3, 0.8), (0.5, 2.0, 3.0), 1.0, 0.05)])
def test_infinite_width_variances_equal_solve_deep_linear(L, var, ratios, gamma0, eta):
    """nu = alpha = inf: one training point with K^x = 1 (y = 1); the deep linear DMFT of B&P
    2022 app. D.8 (``solve_deep_linear(weight_variances=)``, an independent implementation)
    must agree; its loss is the halved MSE (widths: ratios a_l / a_L, as for width_ratios)."""
    r = solve(hidden_layers=L, gamma0=gamma0, eta=eta, steps=25, weight_variances=var,
              width_ratios=ratios)
    d = solve_deep_linear(kernel=np.array([[1.0]]), y=np.array([1.0]), depth=L + 1,
                          gamma0=gamma0, eta=eta, steps=25, weight_variances=var,
                          width_ratios=None if ratios is None else [a / ratios[-1] for a in ratios])
    np.testing.assert_allclose(r.test_loss, 2 * d.loss, rtol=1e-12, atol=1e-15)
    unit = solve(hidden_layers=L, gamma0=gamma0, eta=eta, steps=25, width_ratios=ratios)
    assert np.max(np.abs(unit.test_loss - r.test_loss)) > 1e-3


# --------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("var", [VAR, (1.5, 0.6, 1.3, 0.8)])
def test_lazy_limit_and_initial_function_variance(var):
    L = len(var) - 1
    kap = _ntk(list(var))                 # 2 + 0.5 + 1 = 3.5 for VAR
    eta = 0.1
    lazy = solve(hidden_layers=L, gamma0=1e-7, eta=eta, steps=8, centering=True,
                 weight_variances=var)
    np.testing.assert_allclose(lazy.test_loss, (1 - eta * kap) ** (2 * np.arange(8)), rtol=1e-9)
    # L(0) = S + prod_l sigma_l^2 / (nu_L gamma0^2) + sigma^2 (with widths: nu_L = a_L nu)
    for ratios, aL in ((None, 1.0), ((0.5,) * (L - 1) + (2.0,), 2.0)):
        r = solve(hidden_layers=L, alpha=2.0, nu=0.5, gamma0=0.8, eta=0.05, sigma=0.3, steps=2,
                  signal=1.5, weight_variances=var, width_ratios=ratios)
        assert r.test_loss[0] == pytest.approx(1.5 + math.prod(var) / (aL * 0.5 * 0.64) + 0.09,
                                               rel=1e-14)


def test_lazy_marchenko_pastur_first_step():
    """Lazy limit at finite data: L(1) = S (1 - 2c + c^2 (1 + q)) + sigma^2 (1 + q c^2) with
    c = eta kappa, q = 1/alpha (the second moment of the Marchenko-Pastur law)."""
    eta, alpha, sig = 0.1, 2.0, 0.5
    r = solve(hidden_layers=2, alpha=alpha, nu=np.inf, gamma0=1e-6, eta=eta, sigma=sig, steps=2,
              weight_variances=VAR)
    c, q = eta * _ntk(list(VAR)), 1 / alpha
    assert r.test_loss[1] == pytest.approx((1 - 2 * c + c * c * (1 + q))
                                           + sig ** 2 * (1 + q * c * c), rel=1e-9)


def test_simulated_initial_function_variance():
    """E |v(0)|^2 / D = S + prod_l sigma_l^2 / (nu gamma0^2) exactly at every D (E|W^0^T g|^2 =
    sigma_0^2 D |g|^2, E|g^1|^2 = sigma_1^2 .. sigma_L^2 N): the networks' weights carry sigma_l."""
    run = simulate_linear_field(dim=24, hidden_layers=2, nu=1.0, gamma0=0.8, eta=0.1, steps=1,
                                weight_variances=(0.5, 2.0, 1.5), networks=4000, seed=3)
    m, s = run.value("test_loss")[0], run.stderr("test_loss")[0]
    expect = 1.0 + 1.5 / 0.64
    assert abs(m - expect) < 4 * s
    assert abs(m - (1.0 + 1 / 0.64)) > 10 * s        # unit variances rejected


# --------------------------------------------------------------------------- vs finite networks
class _SourcesOnly(rd._PlainHidden):
    """A wrong theory: sigma_l^2 on the hidden sources, not on the hidden response terms."""

    def __init__(self, L, T, C=1, rho=None, var=None):
        super().__init__(L, T, C, rho, None)
        self.v = var

    def _sources(self, l, Ch, Cg, rho, up):
        Su, Sg = super()._sources(l, Ch, Cg, rho, up)
        return self.v[l - 1] * Su, self.v[l] * Sg


def _extrapolate(ms, ss, Ds):
    """Weighted least squares ``m(D) = m_inf + c / D``: ``m_inf`` and its standard error."""
    A = np.stack([np.ones(len(Ds)), 1.0 / np.asarray(Ds, float)], axis=1)
    w = 1.0 / np.asarray(ss) ** 2
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    return float((cov @ (A.T @ (w * np.asarray(ms))))[0]), math.sqrt(cov[0, 0])


def _study(kw, Ds, networks, name="test_loss", t=10):
    th = solve(**kw).value(name)[[t]]
    comps, ms, ss = [], [], []
    for D, n in zip(Ds, networks):
        run = simulate_linear_field(dim=D, networks=n, seed=D, **kw)
        m, s = run.value(name)[[t]], run.stderr(name)[[t]]
        comps.append(compare(th, m, name, stderr=s))
        ms.append(m[0])
        ss.append(s[0])
    return th[0], scaling_fit(comps, Ds), comps, _extrapolate(ms, ss, Ds)


def _wrong(kw, name="test_loss", t=10):
    var = kw["weight_variances"]
    out = {"unit variances": solve(**{**kw, "weight_variances": None}).value(name)[t]}
    for i in range(len(var)):
        v = list(var)
        v[i] *= 0.9
        out[f"sigma_{i}^2 x 0.9"] = solve(**{**kw, "weight_variances": v}).value(name)[t]
    with mock.patch.object(rd, "_PlainHidden", _SourcesOnly):
        out["responses without sigma"] = solve(**kw).value(name)[t]
    orig = rd._width_factors

    def first_layer_response_without_sigma0(p):
        rho, cK, iv_r, iv_h = orig(p)
        return rho, cK, iv_r, iv_h / p.variances[0]

    with mock.patch.object(rd, "_width_factors", first_layer_response_without_sigma0):
        out["R^0_hr without sigma_0^2"] = solve(**kw).value(name)[t]
    return out


def test_variances_gap_falls_like_one_over_D():
    """L = 2, sigma^2 = (0.5, 2, 1), nu = gamma0 = 1, eta = 0.1, population, test loss at
    t = 10 (theory 0.0125, unit variances 0.0751): gap x D ~ -0.26 with standard errors x D
    0.006, 0.009, 0.017 at D = 32, 64, 128; the 1/D extrapolation of the networks is within
    0.3 SE of the theory, the wrong theories are >= 10 SE off (unit variances ~ 360 SE; the
    first-layer response sigma_0^2 R^0_hr / (nu gamma0) without sigma_0^2: 0.109)."""
    kw = dict(hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, steps=11, weight_variances=VAR)
    Ds = [32, 64, 128]
    th, fit, comps, (m_inf, se) = _study(kw, Ds, [16000, 8000, 4000])
    print(fit, [(round(c.error * D, 3), round(c.error_stderr * D, 3)) for c, D in zip(comps, Ds)],
          (th - m_inf) / se)
    assert fit.consistent_with(-1.0, sigmas=4.0), fit
    assert fit.slope_stderr < 0.3, fit
    assert abs(th - m_inf) < 4 * se
    wrong = _wrong(kw)
    print({k: round((w - m_inf) / se, 1) for k, w in wrong.items()})
    for label, w in wrong.items():
        assert abs(w - m_inf) > 8 * se, (label, (w - m_inf) / se)


SLOW = {   # theory, D grid, networks per D (x 1/D), quantity
    "finite_data": (dict(hidden_layers=3, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.05, sigma=0.3,
                         weight_variances=(1.5, 0.6, 1.3, 0.8)), (32, 64, 128, 256), 1024000,
                    "train_loss"),
    "sgd": (dict(hidden_layers=2, batch_ratio=2.0, nu=1.0, gamma0=1.0, eta=0.1, sigma=0.5,
                 weight_variances=VAR), (32, 64, 128, 256), 512000, "test_loss"),
    "widths": (dict(hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, width_ratios=(0.5, 2.0),
                    weight_variances=VAR), (32, 64, 128, 256), 512000, "test_loss"),
}


@pytest.mark.parametrize("name", list(SLOW))
def test_slow_variances_gap_falls_like_one_over_D(name, opt_in_slow):
    kw, Ds, per, q = SLOW[name]
    kw = dict(kw, steps=11)
    th, fit, comps, (m_inf, se) = _study(kw, Ds, [per // D for D in Ds], name=q)
    wrong = {k: round((w - m_inf) / se, 1) for k, w in _wrong(kw, name=q).items()}
    print(name, fit, [(round(c.error * D, 3), round(c.error_stderr * D, 3))
                      for c, D in zip(comps, Ds)], round((th - m_inf) / se, 2), wrong)
    assert fit.consistent_with(-1.0, sigmas=4.0), fit
    assert abs(th - m_inf) < 4 * se
    assert abs(wrong["unit variances"]) > 5


def test_residual_initial_function_variance_and_networks():
    """Residual branches I + beta W^l / sqrt(N) (App. C): g^l(0) = g^{l+1} + beta r^l gives
    C^1_g(0, 0) = sigma_L^2 prod_{l=1}^{L-1} (1 + beta^2 sigma_l^2), so
    L(0) = S + sigma_0^2 C^1_g(0, 0) / (nu gamma0^2) (2.03125 here).  Against networks
    (L = 3, beta = 0.5, sigma^2 = (0.5, 2, 1.5, 1), test loss at t = 10, 8000/4000/2000 networks
    at D = 32, 64, 128): gap x D -0.64, -0.66, -0.64 (+- 0.03, 0.07, 0.13); unit variances are
    ~ 64 SE off the networks' 1/D extrapolation (sigma_0^2, sigma_3^2 x 0.9: 5.9, 17 SE; the
    first-layer response without sigma_0^2: 137 SE; sigma_1^2, sigma_2^2 x 0.9 only 4.8, 4.0).
    The lazy limit: L(t) = S (1 - eta kappa)^(2t) with the residual NTK derived by hand
    (input, readout, and branch layers: 3.453125 here)."""
    var, b = (0.5, 2.0, 1.5, 1.0), 0.5
    kw = dict(hidden_layers=3, branch_scale=b, nu=1.0, gamma0=1.0, eta=0.05, steps=11,
              weight_variances=var)
    th = solve(**kw)
    P = math.prod(1 + b * b * v for v in var[1:-1])
    assert th.test_loss[0] == pytest.approx(1.0 + var[0] * var[-1] * P, rel=1e-14)
    kap = (var[0] + var[-1]) * P + b * b * var[0] * var[-1] * sum(P / (1 + b * b * v)
                                                                  for v in var[1:-1])
    lazy = solve(hidden_layers=3, branch_scale=b, gamma0=1e-7, eta=0.1, steps=8, centering=True,
                 weight_variances=var)
    np.testing.assert_allclose(lazy.test_loss, (1 - 0.1 * kap) ** (2 * np.arange(8)), rtol=1e-9)
    assert rd._lazy_ntk(var, b) == pytest.approx(kap, rel=1e-15)
    assert rd._lazy_ntk((1.0,) * 4, b) == pytest.approx(rd.resnet_kernel(hidden_layers=3,
                                                                         branch_scale=b))
    Ds = [32, 64, 128]
    t, fit, comps, (m_inf, se) = _study(kw, Ds, [8000, 4000, 2000])
    print(fit, [(round(c.error * D, 3), round(c.error_stderr * D, 3)) for c, D in zip(comps, Ds)],
          (t - m_inf) / se)
    assert fit.consistent_with(-1.0, sigmas=4.0), fit
    assert fit.slope_stderr < 0.3, fit
    assert abs(t - m_inf) < 4 * se
    wrong = {k: w for k, w in _wrong(kw).items() if k != "responses without sigma"}
    print({k: round((w - m_inf) / se, 1) for k, w in wrong.items()})
    assert abs(wrong.pop("unit variances") - m_inf) > 8 * se
    assert sum(abs(w - m_inf) > 5 * se for w in wrong.values()) >= 3, wrong


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, match", [
    (dict(weight_variances=[1.0, 1.0]), "weight_variances"),
    (dict(weight_variances=[1.0, 1.0, 1.0, 1.0]), "weight_variances"),
    (dict(weight_variances=[1.0, 0.0, 1.0]), "weight_variances"),
    (dict(weight_variances=[1.0, -2.0, 1.0]), "weight_variances"),
    (dict(weight_variances=[1.0, np.nan, 1.0]), "weight_variances"),
    (dict(weight_variances=[1.0, np.inf, 1.0]), "weight_variances"),
    (dict(weight_variances="123"), "weight_variances")])
@pytest.mark.parametrize("fn", ["theory", "simulation"])
def test_bad_input(kw, match, fn):
    base = dict(hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.1, steps=3)
    with pytest.raises(DomainError, match=match):
        if fn == "theory":
            solve(**base, **kw)
        else:
            simulate_linear_field(dim=8, networks=1, **base, **kw)


def test_results_report_variances():
    r = solve(hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, steps=3, weight_variances=VAR)
    assert r.weight_variances == VAR and "weight_variances" in repr(r)
    assert "weight variances" in r._repr_html_()
    run = simulate_linear_field(dim=8, hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, steps=2,
                                weight_variances=VAR, networks=2)
    assert run.settings["weight_variances"] == VAR


def test_sweeps_take_variances():
    # lazy infinite width: the stability edge eta kappa = 2, kappa = 3.5 for VAR (by hand)
    e = rd.max_stable_learning_rate(hidden_layers=2, gamma0=1e-6, steps=60, centering=True,
                                    weight_variances=VAR, tol=1e-3)
    assert 2 / 3.5 * 0.97 < e < 2 / 3.5 * 1.06
    sw = rd.learning_rate_sweep([0.05, 0.1], [1.0], hidden_layers=2, gamma0=1.0, steps=6,
                                weight_variances=VAR)
    one = solve(hidden_layers=2, nu=1.0, gamma0=1.0, eta=0.1, steps=6, weight_variances=VAR)
    assert sw.final_loss[0, 1] == one.test_loss[-1]


def test_divergence_names_the_lazy_ntk_with_variances():
    # eta kappa = 0.7 * 3.5 = 2.45 > 2: the lazy network diverges (unit variances: 2.1)
    from effth.errors import ConvergenceError
    with pytest.raises(ConvergenceError, match=r"eta kappa = 2\.45"):
        solve(hidden_layers=2, gamma0=1e-6, eta=0.7, steps=100, centering=True,
              weight_variances=VAR)
