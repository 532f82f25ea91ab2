"""Linear models and kernel duals (PDLT §10.4): the feature-space fit against the normal
equations (10.121)-(10.123) written here, its kernel dual (10.131)-(10.132) against predict's
(6.64), the ridge (10.124) against kernel ridge regression; and wide networks as linear models
(10.134)-(10.141): their random features reproduce the empirical NTK, and the kernel method in
them approaches the infinite-width prediction with per-network fluctuations ~ 1/sqrt(n).
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.simulation import empirical_ntk, init_params, network_features
from effth.pdlt.learning.linear_models import linear_model


def _data(P, Q, F, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(P, F)), rng.normal(size=P), rng.normal(size=(Q, F))


def test_underparameterized_normal_equations():
    Phi, y, Psi = _data(12, 4, 5)
    M = Phi.T @ Phi                                            # (10.121)
    W = np.linalg.inv(M) @ Phi.T @ y                           # (10.123)
    fit = linear_model(Phi, y, Psi)
    np.testing.assert_allclose(fit.value("weights"), W, rtol=1e-12)
    np.testing.assert_allclose(fit.value("mean"), Psi @ W, rtol=1e-12)
    assert fit.rank == 5 and fit.stderr("mean") is None and fit.layers == ()


def test_overparameterized_is_the_kernel_method_10_132():
    """(10.131): phi(x_b)^T M^-1 phi(x_a) = k_ba k~^-1; the min-norm fit predicts (10.132), which
    is predict's (6.64) with K = k (one formula, two routes); it interpolates the training data."""
    Phi, y, Psi = _data(6, 3, 40, seed=1)
    fit = linear_model(Phi, y, Psi)
    k = fit.value("kernel")
    np.testing.assert_allclose(k, np.vstack([Phi, Psi]) @ np.vstack([Phi, Psi]).T, rtol=1e-13)
    dual = k[6:, :6] @ np.linalg.solve(k[:6, :6], y)
    np.testing.assert_allclose(fit.value("mean"), dual, rtol=1e-10, atol=1e-12)
    via_predict = et.predict(K=k, y_train=y, n_train=6, method="bayes").value("mean")
    np.testing.assert_allclose(fit.value("mean"), via_predict, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fit.value("train_mean"), y, atol=1e-10)
    # a wrong dual (the kernel with one feature dropped) is visibly different
    k_bad = Phi[:, 1:] @ Phi[:, 1:].T
    bad = (Psi[:, 1:] @ Phi[:, 1:].T) @ np.linalg.solve(k_bad, y)
    assert np.max(np.abs(bad - dual)) > 1e-3


def test_ridge_10_124_is_kernel_ridge():
    Phi, y, Psi = _data(6, 3, 40, seed=2)
    a = 0.3
    fit = linear_model(Phi, y, Psi, ridge=a)
    k = fit.value("kernel")
    np.testing.assert_allclose(fit.value("mean"), k[6:, :6] @ np.linalg.solve(k[:6, :6] + 2 * a * np.eye(6), y),
                               rtol=1e-10)
    # a -> 0+ approaches the minimum-norm solution, linearly in a
    m0 = linear_model(Phi, y, Psi).value("mean")
    d7, d8 = (np.max(np.abs(linear_model(Phi, y, Psi, ridge=a).value("mean") - m0)) for a in (1e-6, 1e-7))
    assert 9.0 < d7 / d8 < 11.0 and d8 < 1e-4


def test_network_features_give_the_empirical_ntk_10_140():
    net = et.MLP("tanh", depth=3, c_w=1.0, c_b=0.1, widths=16)
    X = np.random.default_rng(0).normal(size=(5, 3))
    p = init_params(net, 3, seed=1)
    rates = dict(lambda_b=0.5, lambda_w=[1.0, 2.0, 0.7])
    F = network_features(p, X, "tanh", **rates)
    H = empirical_ntk(p, X, "tanh", order=1, outputs=[0], **rates).H.reshape(5, 5)
    np.testing.assert_allclose(F @ F.T, H, rtol=1e-12, atol=1e-14)
    G = network_features(p, X, "tanh", kind="last_layer", lambda_b=0.1, lambda_w=1.0)
    assert G.shape == (5, 17)


@pytest.mark.parametrize("kind, method", [("ntk", "gd"), ("last_layer", "bayes")])
def test_wide_networks_as_linear_models_approach_the_kernel_prediction(kind, method):
    """The kernel method in one network's features, against predict at infinite width (NTK
    features: (10.40) with Theta; last-layer features with lambda = C: (6.64) with K^(L)). The
    per-network deviation is the kernel's O(1/sqrt n) fluctuation: its RMS over 24 networks (72
    entries, relative SE ~12%, so a slope SE ~0.08 over n = 64..512) falls with fitted slope
    -0.5 +- 0.3 (4 SE; a 1/n rate, or no convergence, is rejected)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(7, 3))
    X /= np.sqrt((X ** 2).mean(axis=1, keepdims=True))
    y = np.array([1.0, -0.5, 0.3, 0.8])
    c_w, c_b = 1.0, 0.1
    ref = et.predict(et.MLP("tanh", depth=3, c_w=c_w, c_b=c_b), X[:4], y, X[4:], method=method,
                     lambda_b=1.0 if kind == "ntk" else c_b, lambda_w=1.0 if kind == "ntk" else c_w)
    rms = []
    widths = (64, 128, 256, 512)
    for n in widths:
        net = et.MLP("tanh", depth=3, c_w=c_w, c_b=c_b, widths=n)
        dev = []
        for s in range(24):
            p = init_params(net, 3, seed=1000 * n + s)
            lam = dict(lambda_b=1.0, lambda_w=1.0) if kind == "ntk" else dict(lambda_b=c_b, lambda_w=c_w)
            F = network_features(p, X, "tanh", kind=kind, **lam)
            dev.append(linear_model(F[:4], y, F[4:]).value("mean") - ref.value("mean"))
        rms.append(np.sqrt(np.mean(np.square(dev))))
    slope = np.polyfit(np.log(widths), np.log(rms), 1)[0]
    assert -0.8 <= slope <= -0.2, (slope, rms)


def test_bad_input():
    Phi, y, Psi = _data(6, 3, 4)
    with pytest.raises(DomainError, match="same functions"):
        linear_model(Phi, y, Psi[:, :3])
    with pytest.raises(DomainError, match="rows"):
        linear_model(Phi, y[:4], Psi)
    with pytest.raises(DomainError, match="ridge"):
        linear_model(Phi, y, Psi, ridge=-1.0)
    with pytest.raises(DomainError):
        linear_model(Phi * np.nan, y, Psi)
    with pytest.raises(DomainError, match="kind"):
        network_features(init_params(et.MLP("tanh", depth=2, widths=4), 2, seed=0), [[1.0, 0.0]], "tanh",
                         kind="jacobian")
