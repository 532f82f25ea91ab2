"""Dispatcher: distributional (Dirac) parts, method selection, closed-form fallback."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from effth.activations import get_activation
from effth.errors import AccuracyWarning, ClosedFormUnavailableWarning, DomainError, NotDerivedError
from effth.numerics import gaussian_expectation

K2 = np.array([[1.3, 0.5], [0.5, 0.9]])


def _phi(x, var):
    return math.exp(-0.5 * x * x / var) / math.sqrt(2 * math.pi * var)


@pytest.mark.parametrize("method", ["quadrature", "auto"])
def test_relu_second_derivative_is_delta(method):
    # <sigma''(z1) sigma(z2)> = <delta(z1) relu(z2)> = phi_K11(0) sqrt(Kc / 2 pi)
    Kc = K2[1, 1] - K2[0, 1] ** 2 / K2[0, 0]
    ref = _phi(0, K2[0, 0]) * math.sqrt(Kc / (2 * math.pi))
    v = gaussian_expectation([(0, "sigma", 2), (1, "sigma", 0)], K2, "relu", method=method)
    assert float(v) == pytest.approx(ref, rel=1e-12)


def test_relu_third_derivative_is_delta_prime():
    # <delta'(z1) relu(z2)> = -d/dc [phi(c) E(relu(z2)|z1=c)]_{c=0} = -phi(0) (K12/K11) P(z2>0|z1=0)
    ref = -_phi(0, K2[0, 0]) * (K2[0, 1] / K2[0, 0]) * 0.5
    v = gaussian_expectation([(0, "sigma", 3), (1, "sigma", 0)], K2, "relu", method="quadrature")
    assert float(v) == pytest.approx(ref, rel=1e-12)
    # one slot with a mean: E[delta'(z)] = -(mu/K) phi_K(mu);  E[delta'(z) z] = -phi_K(mu)
    mu, K = 0.4, 0.7
    v1 = gaussian_expectation([(0, "sigma", 3)], [[K]], "relu", mean=[mu])
    assert float(v1) == pytest.approx(-mu / K * _phi(mu, K), rel=1e-12)
    v2 = gaussian_expectation([(0, "sigma", 3), (0, "z", 1)], [[K]], "relu", mean=[mu])
    assert float(v2) == pytest.approx(-_phi(mu, K), rel=1e-12)


def test_step_first_derivative():
    # <Theta'(z1) Theta(z2)> = phi_K11(0) P(z2 > 0 | z1 = 0) = phi_K11(0) / 2
    v = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 0)], K2, "step", method="quadrature")
    assert float(v) == pytest.approx(0.5 * _phi(0, K2[0, 0]), rel=1e-12)
    v = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], K2, "step")
    Kc = np.linalg.det(K2)
    assert float(v) == pytest.approx(1 / (2 * math.pi * math.sqrt(Kc)), rel=1e-12)


def test_abs_and_sign_deltas_with_mean():
    mu = np.array([0.3, -0.2])
    v = gaussian_expectation([(0, "sigma", 2)], [[0.8]], "abs", mean=mu[:1])
    assert float(v) == pytest.approx(2 * _phi(0.3, 0.8), rel=1e-12)
    v = gaussian_expectation([(0, "sigma", 1), (1, "z", 1)], K2, "sign", mean=mu)
    cond_mean = mu[1] + K2[0, 1] / K2[0, 0] * (0 - mu[0])
    assert float(v) == pytest.approx(2 * _phi(-mu[0], K2[0, 0]) * cond_mean, rel=1e-12)


def test_stein_with_kinks():
    # <z1 relu(z1) relu(z2)> = K11 <relu'(z1) relu(z2)> + K12 <relu(z1) relu'(z2)>  (Theta parts; delta terms vanish)
    lhs = gaussian_expectation([(0, "z", 1), (0, "sigma", 0), (1, "sigma", 0)], K2, "relu", method="quadrature")
    rhs = (K2[0, 0] * gaussian_expectation([(0, "sigma", 1), (1, "sigma", 0)], K2, "relu", method="quadrature")
           + K2[0, 1] * gaussian_expectation([(0, "sigma", 0), (1, "sigma", 1)], K2, "relu", method="quadrature"))
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-11)
    # <z1 relu'(z1) relu(z2)> = K11 <relu''(z1) relu(z2)> + K12 <relu'(z1) relu'(z2)>, relu'' = delta
    lhs = gaussian_expectation([(0, "z", 1), (0, "sigma", 1), (1, "sigma", 0)], K2, "relu", method="quadrature")
    rhs = (K2[0, 0] * gaussian_expectation([(0, "sigma", 2), (1, "sigma", 0)], K2, "relu", method="quadrature")
           + K2[0, 1] * gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], K2, "relu", method="quadrature"))
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-11)


def test_delta_prime_stein_three_slots():
    K = np.array([[1.0, 0.3, -0.2], [0.3, 0.8, 0.25], [-0.2, 0.25, 1.1]])
    # <z2 relu''(z0) relu(z1)> = K20 <relu'''(z0) relu(z1)> + K21 <relu''(z0) relu'(z1)>
    lhs = gaussian_expectation([(0, "sigma", 2), (1, "sigma", 0), (2, "z", 1)], K, "relu", method="quadrature")
    rhs = (K[2, 0] * gaussian_expectation([(0, "sigma", 3), (1, "sigma", 0)], K[:2, :2], "relu", method="quadrature")
           + K[2, 1] * gaussian_expectation([(0, "sigma", 2), (1, "sigma", 1)], K[:2, :2], "relu",
                                            method="quadrature"))
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-11)


def test_not_derived_cases():
    with pytest.raises(NotDerivedError, match="same sample"):
        gaussian_expectation([(0, "sigma", 2), (0, "sigma", 2)], [[1.0]], "relu")
    with pytest.raises(NotDerivedError, match="order > 1"):
        gaussian_expectation([(0, "sigma", 4), (1, "sigma", 0)], K2, "relu")
    with pytest.raises(NotDerivedError):
        gaussian_expectation([(0, "sigma", 3), (1, "sigma", 3)], K2, "relu")
    with pytest.raises(NotDerivedError, match="jumps"):
        gaussian_expectation([(0, "sigma", 2), (0, "sigma", 1)], [[1.0]], "relu")
    with pytest.raises(DomainError, match="non-degenerate"):
        gaussian_expectation([(0, "sigma", 2), (1, "sigma", 2)], np.ones((2, 2)), "relu")


def test_smooth_activations_have_no_delta_terms():
    v = gaussian_expectation([(0, "sigma", 2), (1, "sigma", 0)], K2, "tanh", method="quadrature")
    w = gaussian_expectation([(0, "sigma", 2), (1, "sigma", 0)], K2, "tanh", method="auto")
    assert float(v) == pytest.approx(float(w), rel=1e-10)


def test_auto_matches_quadrature_and_closed_warns():
    F = [(0, "sigma", 0), (1, "sigma", 0)]
    for name in ["relu", "erf", "sin", "tanh", "gelu", "step"]:
        a = gaussian_expectation(F, K2, name)
        q = gaussian_expectation(F, K2, name, method="quadrature")
        assert float(a) == pytest.approx(float(q), rel=1e-10), name
    with pytest.warns(ClosedFormUnavailableWarning, match="used quadrature"):
        v = gaussian_expectation(F, K2, "softplus", method="closed")
    assert np.isfinite(v)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gaussian_expectation(F, K2, "softplus")          # auto: silent fallback


def test_activation_object_and_no_sigma():
    act = get_activation("leaky_relu", slope=0.2)
    v = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[2.0]], act)
    assert float(v) == pytest.approx((1 + 0.04) / 2 * 2.0, rel=1e-12)
    v = gaussian_expectation([(0, "z", 2), (1, "z", 2)], K2, None)
    assert float(v) == pytest.approx(K2[0, 0] * K2[1, 1] + 2 * K2[0, 1] ** 2, rel=1e-14)


def test_return_error_shapes():
    K = np.stack([K2, 2 * K2])
    v, e = gaussian_expectation([(0, "sigma", 2), (1, "sigma", 0)], K, "relu", method="quadrature",
                                return_error=True)
    assert v.shape == e.shape == (2,) and np.all(e >= 0) and np.all(e < 1e-9)


@pytest.mark.parametrize("act,order,value", [("step", 0, 1.0), ("sign", 0, 1.0), ("relu", 1, 1.0),
                                             ("abs", 1, 1.0), ("relu", 0, 0.0)])
def test_point_mass_value_is_the_same_for_every_method(act, order, value):
    """At exactly zero variance z = 0 a.s.: every method returns sigma^(a)(0) (PDLT (2.9))."""
    for method in ("auto", "closed", "quadrature", "mc"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ClosedFormUnavailableWarning)
            got = gaussian_expectation([(0, "sigma", order)], [[0.0]], act, method=method, seed=0)
        assert float(got) == value, (method, got)
    # two slots, one degenerate: <Theta(z1) Theta(z2)> with z2 = 0 is <Theta(z1)> * 1
    K = np.array([[1.0, 0.0], [0.0, 0.0]])
    assert float(gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K, "step")) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("act,fac", [
    ("relu", [(0, "sigma", 1), (1, "sigma", 1), (2, "sigma", 0), (3, "sigma", 0)]),
    ("step", [(i, "sigma", 0) for i in range(4)]),
    ("leaky_relu", [(0, "sigma", 1), (1, "sigma", 0), (2, "sigma", 1), (3, "sigma", 0)])])
def test_point_masses_in_a_batch_keep_closed_forms(act, fac):
    """A batch whose entries have zero-variance slots in different places (a zero input with
    c_b = 0): those entries take sigma^(p)(0) on the degenerate slots and closed forms on the rest
    (they once sent the whole batch to quadrature, minutes for a flow). Against quadrature, which
    evaluates the point mass, on the degenerate entries, and against the batch without them."""
    rng = np.random.default_rng(0)
    Ks = []
    for b in range(8):
        X = rng.normal(size=(4, 5))
        if b % 2 == 0:
            X[(b // 2) % 4] = 0.0
        if b == 6:
            X[1] = 0.0
        Ks.append(X @ X.T / 5)
    Ks = np.array(Ks)
    zero = np.array([np.any(np.diag(K) == 0.0) for K in Ks])
    got = gaussian_expectation(fac, Ks, act)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        ref = gaussian_expectation(fac, Ks[zero], act, method="quadrature", rtol=1e-9)
    assert np.max(np.abs(got[zero] - ref)) < 1e-9 * np.max(np.abs(ref))
    assert np.array_equal(got[~zero], gaussian_expectation(fac, Ks[~zero], act))


@pytest.mark.parametrize("scale", [1e-150, 1e-8, 1e8, 1e150, 1e200])
def test_piecewise_linear_is_homogeneous_at_extreme_scales(scale):
    """<sigma sigma>_{lambda K} = lambda <sigma sigma>_K for ReLU/leaky ReLU: no overflow, no silent
    change of correlation (K ~ 1e200 once turned an uncorrelated pair into a duplicated one)."""
    pair = [(0, "sigma", 0), (1, "sigma", 0)]
    for r in (0.0, 0.3, -0.7, 1.0):
        K = np.array([[1.0, r], [r, 2.0 if r == 0.0 else 1.0]])
        for act in ("relu", "leaky_relu"):
            base = float(gaussian_expectation(pair, K, act))
            got = float(gaussian_expectation(pair, K * scale, act))
            assert got == pytest.approx(base * scale, rel=1e-13), (act, r, scale)


def test_complex_kernel_is_rejected():
    with pytest.raises(DomainError, match="real"):
        gaussian_expectation([(0, "sigma", 0)], [[1.0 + 1.0j]], "tanh")
