"""Finite-time gradient descent stays exact at long times and small steps.

The GD prediction after ``t`` updates (PDLT (∞.142)–(∞.147) at infinite width; (10.39)–(10.41)
converged) needs :math:`(1-\\eta\\lambda)^t` and :math:`[1-(1-\\eta\\lambda)^t]/\\lambda` for the
eigenvalues :math:`\\lambda` of the training NTK. At ``t = 10**10, eta = 1e-9`` the product
:math:`\\eta\\lambda\\sim10^{-9}` is far below one while :math:`t\\eta\\lambda\\sim10`: a truncated
series in :math:`\\eta\\lambda` or a plain power loses every digit. The reference here is the same
formula in 50-digit arithmetic (mpmath), independent of the code under test, and its limit
:math:`\\eta t\\to\\tau` (gradient flow, :math:`e^{-\\tau\\Theta}`).
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import effth as et

_RNG = np.random.default_rng(1)
_A = _RNG.standard_normal((5, 5))
K = _A @ _A.T / 5 + 0.1 * np.eye(5)              # training inputs 0..2, test inputs 3..4
THETA = K + 0.2 * np.eye(5)
Y = np.array([1.0, -1.0, 0.5])
P = 3


def _reference(eta: float, updates: int) -> tuple[np.ndarray, np.ndarray]:
    """(test mean, training mean) of GD from zero-mean initialization, in 50 digits:
    m_B = Theta_BA Theta_AA^{-1} [1 - (1 - eta Theta_AA)^t] y, m_A = [1 - (1 - eta Theta_AA)^t] y."""
    with mp.workdps(50):
        T = mp.matrix(THETA.tolist())
        TAA = T[:P, :P]
        lam, U = mp.eigsy(TAA)
        e = mp.mpf(eta)
        decay = mp.diag([(1 - e * lam[i]) ** updates for i in range(P)])
        phi = mp.diag([(1 - (1 - e * lam[i]) ** updates) / lam[i] for i in range(P)])
        y = mp.matrix(Y.tolist())
        S = U * decay * U.T
        mB = T[P:, :P] * (U * phi * U.T) * y
        mA = y - S * y
        return (np.array([float(v) for v in mB]), np.array([float(v) for v in mA]))


@pytest.mark.parametrize("updates,eta", [(10**10, 1e-9), (10**9, 1e-9), (10**8, 1e-9), (25, 0.3)])
def test_finite_time_gd_mean_matches_50_digit_reference(updates, eta):
    pred = et.predict(K=K, Theta=THETA, y_train=Y, n_train=P, eta=eta, updates=updates)
    mB, mA = _reference(eta, updates)
    np.testing.assert_allclose(pred.mean_.ravel(), mB, rtol=1e-12, atol=0)
    np.testing.assert_allclose(pred.train_mean_.ravel(), mA, rtol=1e-12, atol=1e-15)


def test_long_time_small_step_is_gradient_flow():
    """eta -> 0 at fixed tau = eta t: the GD mean tends to the gradient-flow mean
    Theta_BA Theta_AA^{-1} (1 - e^{-tau Theta_AA}) y, with an O(eta) difference."""
    tau = 10.0
    w, U = np.linalg.eigh(THETA[:P, :P])
    flow = THETA[P:, :P] @ (U * (-np.expm1(-tau * w) / w)) @ U.T @ Y
    pred = et.predict(K=K, Theta=THETA, y_train=Y, n_train=P, eta=1e-9, updates=10**10)
    diff = np.max(np.abs(pred.mean_.ravel() - flow))
    assert diff < 1e-7 * np.max(np.abs(flow))
    # a wrong decay (the old truncated series in eta*lambda) is far off: it would give
    # eta t (1 - (t - 1) eta lambda / 2) = tau (1 - 5 lambda) for phi, of the wrong sign
    wrong = THETA[P:, :P] @ (U * (tau * (1 - 0.5 * (10**10 - 1) * 1e-9 * w))) @ U.T @ Y
    assert np.max(np.abs(wrong - flow)) > 1e3 * diff


@pytest.mark.parametrize("updates", [30, 10**10])
def test_newton_after_many_gd_steps_is_the_converged_prediction(updates):
    """Algorithm independence (PDLT (10.35)): GD steps then one Newton step land on the converged
    GD mean, however many steps came first; 10**10 steps answer at once (closed form), 30 steps
    run one by one (10.33) — the two routes agree with the converged mean."""
    conv = et.predict(K=K, Theta=THETA, y_train=Y, n_train=P).mean_
    newt = et.predict(K=K, Theta=THETA, y_train=Y, n_train=P, method="newton", eta=1e-9 if
                      updates > 100 else 0.1, updates=updates).mean_
    np.testing.assert_allclose(newt, conv, rtol=1e-10, atol=1e-12)
