r"""The dNTK :math:`P, Q` of kinked activations (ReLU, leaky ReLU; PDLT §11.3, (11.67)–(11.81)).

* (a) the derived recursions of :func:`effth.pdlt.ntk_flow` with :math:`\sigma''=(a_+-a_-)
  \delta(z)`: point masses by Gaussian conditioning, :math:`\sigma(0)=0` on a shared sample,
  and NaN where the value needs the undefined :math:`\sigma'(0)`;
* (b) the book: the ReLU fixture (:math:`K^\star=2`, :math:`\lambda=1`: :math:`P\equiv0`,
  :math:`Q=\tfrac23\ell(\ell^2-1)`), and (11.79) with the equivalence-principle learning rates;
* (c) smooth activations :math:`s\,\mathrm{softplus}(z/s)\to\mathrm{ReLU}`, whose dNTK the
  smooth pipeline computes, extrapolated to :math:`s=0` at two inputs (the regular entries);
* (d) ensembles of ReLU networks at one input (the NTK simulator): :math:`P` and :math:`Q`
  approach the theory like :math:`1/n`; :math:`Q\times0.9` is rejected.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from effth.activations.builtin import leaky_relu
from effth.errors import DomainError
from effth.pdlt import ntk_flow
from effth.pdlt.ntk import kinked_dntk_singular
from effth.pdlt.ntk.ntk_flow import _KINK_SLOPE
from effth.simulation import simulate_ntk_ensemble
from effth.arch import MLP

sys.path.insert(0, str(Path(__file__).parent))


def test_relu_single_input_dntk_equals_the_book_fixture():
    """ReLU, C_W = 2, K* = 2, λ_b = λ_W = 1: P ≡ 0 (11.74) and Q = (2/3) ℓ(ℓ² − 1) (11.73)."""
    fl = ntk_flow(K1=np.array([[2.0]]), Theta1=np.array([[2.0]]), depth=6, activation="relu", c_w=2.0,
                  statistics=("P", "Q"))
    l = np.arange(1, 7)
    np.testing.assert_allclose(fl.tensors["P"][:, 0, 0, 0, 0], 0.0, atol=1e-10)
    np.testing.assert_allclose(fl.tensors["Q"][:, 0, 0, 0, 0], 2 / 3 * l * (l * l - 1), rtol=1e-10)
    assert not np.allclose(fl.tensors["Q"][1:, 0, 0, 0, 0], 0.9 * 2 / 3 * l[1:] * (l[1:] ** 2 - 1), rtol=0.05)


@pytest.mark.parametrize("act", [leaky_relu(0.1), leaky_relu(-0.5)])
def test_scale_invariant_q_with_equivalence_learning_rates(act):
    r"""(11.79): λ = λ̃/L, Q = ℓ(ℓ² − 1)/(6L²) (A₄/A₂) c λ̃_W K*, c = λ̃_b + λ̃_W A₂ K*; P ≡ 0."""
    ap, am = float(act.param("a_plus")), float(act.param("a_minus"))
    A2, A4 = (ap ** 2 + am ** 2) / 2, (ap ** 4 + am ** 4) / 2
    L, tb, tw, xx = 7, 0.7, 1.3, 1.1
    Ks = xx / A2
    fl = ntk_flow(K1=np.array([[Ks]]), Theta1=np.array([[(tb + tw * xx) / L]]), depth=L, activation=act,
                  c_w=1 / A2, lambda_b=tb / L, lambda_w=tw / L, statistics=("P", "Q"))
    l = np.arange(1, L + 1)
    c = tb + tw * A2 * Ks
    np.testing.assert_allclose(fl.tensors["Q"][:, 0, 0, 0, 0],
                               l * (l * l - 1) / (6 * L * L) * A4 / A2 * c * tw * Ks, rtol=1e-9)
    np.testing.assert_allclose(fl.tensors["P"][:, 0, 0, 0, 0], 0.0, atol=1e-10)


def test_singular_entries_are_the_ones_that_need_sigma_prime_at_zero():
    """Three inputs: NaN exactly where kinked_dntk_singular says (found by the dependence on
    σ'(0)); P_{δ0δ1δ2δ0} ≡ 0; the other entries finite and not all zero."""
    X = np.array([[1.0, 0.0, 0.2], [0.6, 0.8, -0.3], [-0.2, 0.5, 0.9]])
    fl = ntk_flow(MLP("relu", 3, c_w=2.0), X, statistics=("P", "Q"))
    for s in ("P", "Q"):
        for layer in (2, 3):
            T = fl.value(s, layer=layer)
            mask = kinked_dntk_singular(s, 3, layer)
            assert np.array_equal(np.isnan(T), mask), (s, layer)
            assert np.isfinite(T[~mask]).all() and np.abs(T[~mask]).max() > 0.1
        assert np.isfinite(fl.value(s, layer=1)).all() and not kinked_dntk_singular(s, 3, 1).any()
    P = fl.value("P", layer=3)
    i = np.arange(3)
    np.testing.assert_allclose(P[i[:, None, None], i[None, :, None], i[None, None, :], i[:, None, None]],
                               0.0, atol=1e-12)
    assert kinked_dntk_singular("P", 1).sum() == 0 and kinked_dntk_singular("Q", 1).sum() == 0
    with pytest.raises(DomainError, match="'P' or 'Q'"):
        kinked_dntk_singular("R", 2)


def test_ddntks_of_kinked_activations_diverge_and_are_refused():
    with pytest.raises(DomainError, match="diverge"):
        ntk_flow(K1=np.array([[2.0]]), Theta1=np.array([[2.0]]), depth=3, activation="relu", c_w=2.0,
                 statistics=("S",))


def test_smooth_activations_converge_to_the_kinked_dntk():
    r"""σ_s = s softplus(z/s) − s log 2 → ReLU: the smooth pipeline's P, Q at s = 0.2, 0.1, 0.05,
    extrapolated to s = 0 by a quadratic in s, match the kinked values at every regular entry
    within 3% of the tensor's scale (0.9 × the kinked values are off by more); at the singular
    entries they tend to the mollifier's δ_s Θ_s^m → δ/(m+1), not to σ'(0) = 1/2."""
    import warnings

    z = sp.Symbol("z")
    X = np.array([[1.0, 0.0], [0.6, 0.8]])
    kinked = ntk_flow(MLP("relu", 3, c_w=2.0), X, statistics=("P", "Q"))
    ss = [0.2, 0.1, 0.05]
    smooth = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in ss:
            act = s * sp.log(1 + sp.exp(z / s)) - s * sp.log(2)
            smooth.append(ntk_flow(MLP(act, 3, c_w=2.0), X, statistics=("P", "Q")))
    # the singular entries: the smooth limit is the mollifier's delta_s Theta_s^m -> delta/(m+1)
    # (Theta_s^m delta_s = (Theta_s^(m+1))'/(m+1)), not sigma'(0) = 1/2
    conventions = {}
    for name, power in (("mollifier", lambda m: 1.0 / (m + 1)), ("half", lambda m: 0.5 ** m)):
        token = _KINK_SLOPE.set(power)
        try:
            conventions[name] = ntk_flow(MLP("relu", 3, c_w=2.0), X, statistics=("P", "Q"))
        finally:
            _KINK_SLOPE.reset(token)
    for name in ("P", "Q"):
        m = ~kinked_dntk_singular(name, 2)
        a = kinked.value(name, layer=3)[m]
        v = np.array([f.value(name, layer=3) for f in smooth])
        ext = np.linalg.solve(np.vander(np.array(ss), 3), v.reshape(3, -1))[-1].reshape(v.shape[1:])
        scale = np.abs(a).max()
        assert np.abs(ext[m] - a).max() < 0.03 * scale, name
        assert np.abs(ext[m] - 0.9 * a).max() > 0.03 * scale, name
        mol, half = (conventions[c].value(name, layer=3)[~m] for c in ("mollifier", "half"))
        assert np.abs(ext[~m] - mol).max() < 0.03 * scale, name
        assert np.abs(ext[~m] - half).max() > 0.03 * scale, name


# ----------------------------------------------------------------------------- simulation
X1 = np.array([[1.0, 0.5]])
CW, LB, LW = [1.0, 2.0, 2.0], [1.0, 0.6, 0.8], [1.0, 1.2, 0.7]


def _theory():
    K1, Th1 = CW[0] * X1 @ X1.T / 2, LB[0] + LW[0] * X1 @ X1.T / 2
    fl = ntk_flow(K1=K1, Theta1=Th1, depth=3, activation="relu", c_w=CW[1:], lambda_b=LB, lambda_w=LW,
                  statistics=("P", "Q"))
    return {k: v[-1] for k, v in fl.tensors.items()}


def _study(widths, sizes, seed, replicates):
    from ntk_width_study import width_study

    th = _theory()
    res = width_study("relu", X1, 3, widths, sizes, seed, th, c_w=CW, c_b=0.0, lambda_b=LB,
                      lambda_w=LW, stats=("P", "Q"), replicates=replicates, outputs=3)
    print("\n" + res.table())
    return res, th


def test_simulator_measures_the_kinked_dntk_at_one_input_only():
    net = MLP("relu", depth=3, widths=8, c_w=2.0, n_out=2)
    st = simulate_ntk_ensemble(net, X1, networks=16, seed=0, order=2)
    assert np.isfinite(st.value("Q")).all()
    for X, kw in ((np.array([[1.0, 0.0], [0.6, 0.8]]), {"order": 2}), (X1, {"order": 3})):
        with pytest.raises(DomainError, match="Dirac part"):
            simulate_ntk_ensemble(net, X, networks=16, seed=0, **kw)


def test_relu_networks_dntk_one_over_n_fast():
    """Widths 32, 64 (8 × 1500 networks each, a few s): P → 0 like 1/n (resolved at both
    widths, fitted exponent 1 within 4 SE); Q − theory fits c/n (χ² p-value > 1e-4), and
    Q × 0.9 does not."""
    from scipy.stats import chi2 as chi2_dist

    from ntk_width_study import rescore

    res, th = _study((32, 64), (12000, 12000), 5, 8)
    p = res.stats["P"]
    assert np.all(np.abs(p.delta) > 5 * p.delta_err)
    assert abs(p.p - 1.0) < 4 * p.p_err
    limit = chi2_dist.isf(1e-4, 1)
    assert res.stats["Q"].chi2_c1 <= limit
    assert rescore(res, {**th, "Q": 0.9 * th["Q"]}).stats["Q"].chi2_c1 > limit


@pytest.mark.slow
def test_relu_networks_dntk_one_over_n_full(opt_in_slow):
    """Widths 64, 128, 256 (16 × 4000 networks each, about 5 minutes): P = 0 + c/n with the fitted
    exponent 1 within 4 SE and the intercept of a + b/n within 4 SE of 0; Q's intercept within
    4 SE of the theory, and Q × 0.9 has an intercept more than 4 SE away."""
    from ntk_width_study import rescore

    res, th = _study((64, 128, 256), (64000, 64000, 64000), 6, 16)
    p, q = res.stats["P"], res.stats["Q"]
    assert abs(p.p - 1.0) < 4 * p.p_err and p.p_err < 0.2
    assert abs(p.a) < 4 * p.a_err and abs(q.a) < 4 * q.a_err
    wrong = rescore(res, {**th, "Q": 0.9 * th["Q"]}).stats["Q"]
    assert abs(wrong.a) > 4 * wrong.a_err
