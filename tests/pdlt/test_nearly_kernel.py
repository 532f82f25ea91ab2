r"""Quadratic models and nearly-kernel methods (PDLT §11.4): :mod:`effth.pdlt.learning.nearly_kernel`.

The dual (kernel, meta-kernel) predictions are checked against explicit quadratic models
(11.105) solved or trained here with NumPy: the exact model output at the direct-optimization
weights (11.115)/(11.118) coded independently below, and the model trained by gradient descent
from W = 0 to convergence.  The errors fall as eps^2 (fitted slope), the O(eps) effects as eps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from effth.errors import DomainError
from effth.pdlt.learning.nearly_kernel import (NearlyKernelPrediction, meta_kernel,
                                               nearly_kernel_predict, quadratic_model)

EPS = np.array([0.1, 0.05, 0.025])


def _slope(x, y):
    return float(np.polyfit(np.log(x), np.log(np.abs(y)), 1)[0])


def _random_model(F=40, P=5, Q=3, C=1, seed=0):
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((F, P + Q)) / math.sqrt(F)
    psi = rng.standard_normal((F, F, P + Q)) / F
    psi = 0.5 * (psi + psi.transpose(1, 0, 2))
    y = rng.standard_normal((P, C))
    return phi, psi, y


def _model_out(phi, psi, eps, W):
    """z_i(x_d) of (11.105), coded from the definition: (N, C)."""
    return (W @ phi).T + 0.5 * eps * np.einsum("ij,ik,jkd->di", W, W, psi)


def _primal_weights(phi, psi, eps, y, P):
    """W^F (11.115) and W^I (11.118), pseudo-inverse of M = sum phi phi^T over training inputs."""
    phiA = phi[:, :P]
    Minv = np.linalg.pinv(phiA @ phiA.T)
    WF = y.T @ phiA.T @ Minv
    WI = np.zeros_like(WF)
    for i in range(WF.shape[0]):
        quad = np.array([WF[i] @ psi[:, :, a] @ WF[i] for a in range(P)])   # W^F psi(x_a) W^F
        WI[i] = -0.5 * eps * quad @ phiA.T @ Minv
    return WF + WI


def _train_gd(phi, psi, eps, y, P, eta, steps):
    """Full-batch gradient descent on 1/2 sum (z - y)^2 from W = 0 (identity learning rates)."""
    W = np.zeros((y.shape[1], phi.shape[0]))
    for _ in range(steps):
        z = _model_out(phi[:, :P], psi[:, :, :P], eps, W)                   # (P, C)
        err = z - y
        feat = phi[None, :, :P] + eps * np.einsum("ik,kjd->ijd", W, psi[:, :, :P])   # (11.107)
        W = W - eta * np.einsum("di,ijd->ij", err, feat)
    return W


def test_direct_prediction_against_the_exact_quadratic_model():
    """(11.132) against the exact quadratic model at W* = W^F + W^I: error O(eps^2); the
    correction to the kernel prediction is O(eps); the training loss at W* is O(eps^2)."""
    P = 5
    errs, effs, train = [], [], []
    for eps in EPS:
        phi, psi, y = _random_model(C=2)
        W = _primal_weights(phi, psi, eps, y, P)
        exact = _model_out(phi, psi, eps, W)
        pred = nearly_kernel_predict(model=quadratic_model(phi, psi, eps), y_train=y, n_train=P)
        errs.append(np.max(np.abs(exact[P:] - pred.value("mean"))))
        effs.append(np.max(np.abs(pred.value("correction"))))
        train.append(np.max(np.abs(exact[:P] - y)))
    assert 1.8 < _slope(EPS, errs) < 2.2, errs
    assert 0.95 < _slope(EPS, effs) < 1.05, effs
    assert 1.8 < _slope(EPS, train) < 2.2, train
    assert errs[-1] < 0.1 * effs[-1]


def test_model_solve_matches_independent_primal():
    phi, psi, y = _random_model(C=2, seed=4)
    m = quadratic_model(phi, psi, 0.05)
    np.testing.assert_allclose(m.solve(y, 5), _primal_weights(phi, psi, 0.05, y, 5), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m.output(m.solve(y, 5)), _model_out(phi, psi, 0.05, m.solve(y, 5)), rtol=1e-12)


def test_gradient_descent_prediction_against_trained_model():
    """(11.133): the quadratic model trained by GD from W = 0 (eta = 1/lambda_max) converges to
    the prediction with the algorithm projectors Z_A, Z_B: error O(eps^2); it differs from the
    direct-optimization prediction (11.132) at O(eps) (the solution depends on the algorithm)."""
    P = 5
    errs, algo = [], []
    for eps in EPS:
        phi, psi, y = _random_model(seed=1)
        k = phi[:, :P].T @ phi[:, :P]
        eta = 1.0 / np.linalg.eigvalsh(k)[-1]
        W = _train_gd(phi, psi, eps, y, P, eta, 4000)
        assert np.max(np.abs(_model_out(phi, psi, eps, W)[:P] - y)) < 1e-10     # converged
        pred = nearly_kernel_predict(model=quadratic_model(phi, psi, eps), y_train=y, n_train=P,
                                     method="gd", eta=eta)
        z = _model_out(phi, psi, eps, W)[P:]
        errs.append(np.max(np.abs(z - pred.value("mean"))))
        algo.append(np.max(np.abs(pred.value("gd") - pred.value("direct"))))
    assert 1.8 < _slope(EPS, errs) < 2.2, errs
    assert 0.95 < _slope(EPS, algo) < 1.05, algo
    assert errs[-1] < 0.1 * algo[-1]


def test_trained_kernel_erratum():
    r"""(11.142) as printed differs from (11.132) at O(eps) by the extra term; adding it back
    leaves O(eps^2).  With test features in the span of the training features the extra term
    vanishes and (11.142) agrees with (11.132) to O(eps^2)."""
    P = 5
    resid, extra = [], []
    for eps in EPS:
        phi, psi, y = _random_model(seed=2)
        pred = nearly_kernel_predict(model=quadratic_model(phi, psi, eps), y_train=y, n_train=P,
                                     method="trained_kernel")
        tk, d, ex = pred.value("trained_kernel"), pred.value("direct"), pred.value("trained_kernel_extra")
        resid.append(np.max(np.abs(tk - d - ex)))
        extra.append(np.max(np.abs(ex)))
        assert np.array_equal(pred.value("mean"), tk)
    assert 1.8 < _slope(EPS, resid) < 2.2, resid
    assert 0.95 < _slope(EPS, extra) < 1.05, extra
    # test features inside the training span: the extra term is zero
    phi, psi, y = _random_model(F=40, P=5, Q=3, seed=3)
    rng = np.random.default_rng(9)
    phi[:, 5:] = phi[:, :5] @ rng.standard_normal((5, 3))
    gaps = []
    for eps in EPS:
        pred = nearly_kernel_predict(model=quadratic_model(phi, psi, eps), y_train=y, n_train=5)
        assert np.max(np.abs(pred.value("trained_kernel_extra"))) < 1e-12
        gaps.append(np.max(np.abs(pred.value("trained_kernel") - pred.value("direct"))))
    assert 1.8 < _slope(EPS, gaps) < 2.2, gaps


def test_small_fixture():
    """A hand-sized example (4 features, 2 training and 1 test input, eps = 0.1), with values
    from an independent reference script: kernel part, (11.132), (11.142)."""
    phi = np.array([[1, 0, 0.5], [0, 1, 0.5], [1, 1, 0], [0.5, -1, 2]], dtype=float)
    psi = 0.5 * np.einsum("jd,kd->jkd", phi, phi) + np.einsum("jk,d->jkd", np.eye(4), 0.1 * np.arange(1, 4))
    pred = nearly_kernel_predict(model=quadratic_model(phi, psi, 0.1), y_train=[1.0, 2.0], n_train=2)
    assert pred.value("kernel")[0] == pytest.approx(-0.461538, abs=1e-6)
    assert pred.value("correction")[0] == pytest.approx(0.075222, abs=1e-6)
    assert pred.value("direct")[0] == pytest.approx(-0.386317, abs=1e-6)
    assert pred.value("trained_kernel")[0] == pytest.approx(-0.394816, abs=1e-6)
    W = quadratic_model(phi, psi, 0.1).solve([1.0, 2.0], 2)
    assert quadratic_model(phi, psi, 0.1).output(W)[2, 0] == pytest.approx(-0.389706, abs=1e-6)


def test_effective_kernel_is_the_ntk_at_the_solution():
    """The effective kernel (11.137)-(11.138) equals the model's NTK at W* = W^F + W^I,
    sum_j phi^E_ij phi^E_ij (11.107), to O(eps^2); k# = (k + k^E)/2 (11.140)."""
    phi, psi, y = _random_model(seed=6)
    P = 5
    diffs = []
    for eps in EPS:
        m = quadratic_model(phi, psi, eps)
        pred = nearly_kernel_predict(model=m, y_train=y, n_train=P)
        fe = m.effective_features(m.solve(y, P))[0]                     # (F, N)
        diffs.append(np.max(np.abs(fe.T @ fe - pred.value("effective_kernel")[0])))
        np.testing.assert_allclose(pred.value("trained_kernel_matrix")[0],
                                   0.5 * (m.kernel() + pred.value("effective_kernel")[0]), rtol=1e-12)
    assert 1.8 < _slope(EPS, diffs) < 2.2, diffs
    np.testing.assert_allclose(meta_kernel(phi, psi, 0.3), 0.3 * np.einsum("jkd,je,kf->def", psi, phi, phi))


def test_conventions_and_bad_input():
    phi, psi, y = _random_model(seed=7)
    pred = nearly_kernel_predict(model=quadratic_model(phi, psi, 0.1), y_train=y[:, 0], n_train=5)
    assert isinstance(pred, NearlyKernelPrediction)
    assert pred.value("mean").shape == (3,) and pred.stderr("mean") is None and pred.layers == ()
    assert "NearlyKernelPrediction" in repr(pred) and "<table>" in pred._repr_html_()
    assert pred.latex().startswith(r"\begin{aligned}")
    with pytest.raises(DomainError, match="eta"):
        pred.value("gd")
    with pytest.raises(DomainError, match="eta"):
        nearly_kernel_predict(model=quadratic_model(phi, psi, 0.1), y_train=y, n_train=5, method="gd")
    with pytest.raises(DomainError, match="eta"):
        nearly_kernel_predict(model=quadratic_model(phi, psi, 0.1), y_train=y, n_train=5, method="gd", eta=1e6)
    with pytest.raises(DomainError, match="symmetric"):
        quadratic_model(phi, psi + np.random.default_rng(0).standard_normal(psi.shape), 0.1)
    with pytest.raises(DomainError, match="eps"):
        quadratic_model(phi, psi, -0.1)
    with pytest.raises(DomainError, match="singular"):
        nearly_kernel_predict(k=np.ones((3, 3)), mu=np.zeros((3, 3, 3)), y_train=[1.0, 2.0], n_train=2)
