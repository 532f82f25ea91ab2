"""Converged predictions by Cholesky solves (PDLT (10.39)-(10.41), (6.57), (6.64)): no
eigendecomposition unless finite-time training asks for one, the covariance and the Bayesian
training-set posterior computed only when read, equal to the eigenbasis formulas."""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError

_RNG = np.random.default_rng(4)
_A = _RNG.standard_normal((9, 9))
K = _A @ _A.T / 9 + 0.05 * np.eye(9)
TH = K + 0.3 * np.eye(9) + 0.1
P = 6
Y = _RNG.standard_normal((P, 2))


def _no_eigh(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("an eigendecomposition was computed")
    monkeypatch.setattr(np.linalg, "eigh", boom)
    monkeypatch.setattr(np.linalg, "eigvalsh", boom)


@pytest.mark.parametrize("eta", [None, 0.4])
def test_converged_gd_by_cholesky(monkeypatch, eta):
    lam, U = np.linalg.eigh(TH[:P, :P])
    ref_mean = TH[P:, :P] @ U @ np.diag(1 / lam) @ U.T @ Y
    Pm = TH[P:, :P] @ np.linalg.inv(TH[:P, :P])
    ref_cov = K[P:, P:] - Pm @ K[:P, P:] - K[P:, :P] @ Pm.T + Pm @ K[:P, :P] @ Pm.T
    _no_eigh(monkeypatch)
    p = et.predict(K=K, Theta=TH, y_train=Y, n_train=P, eta=eta)
    assert callable(p.covariance_)                       # not computed until read
    np.testing.assert_allclose(p.value("mean"), ref_mean, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(p.value("covariance"), ref_cov, rtol=1e-11, atol=1e-13)
    assert not callable(p.covariance_)


def test_unstable_rate_refused_with_the_bound(monkeypatch):
    lmax = np.linalg.eigvalsh(TH[:P, :P])[-1]
    with pytest.raises(DomainError, match=f"{2 / lmax:.6g}"):
        et.predict(K=K, Theta=TH, y_train=Y, n_train=P, eta=2.0001 / lmax)
    p = et.predict(K=K, Theta=TH, y_train=Y, n_train=P, eta=1.999 / lmax)
    assert np.isfinite(p.value("mean")).all()


def test_bayes_by_cholesky_lazy_posterior(monkeypatch):
    Ki = np.linalg.inv(K[:P, :P])
    _no_eigh(monkeypatch)
    p = et.predict(K=K, Theta=TH, y_train=Y, n_train=P, method="bayes")
    assert callable(p.covariance_) and callable(p.train_mean_) and callable(p.train_covariance_)
    np.testing.assert_allclose(p.value("mean"), K[P:, :P] @ Ki @ Y, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(p.value("covariance"), K[P:, P:] - K[P:, :P] @ Ki @ K[:P, P:],
                               rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(p.value("train_mean"), Y, atol=1e-9)      # noiseless: interpolates
    np.testing.assert_allclose(p.value("train_covariance"), 0, atol=1e-9)
    q = et.predict(K=K, Theta=TH, y_train=Y, n_train=P, method="bayes", noise=0.1)
    Kn = np.linalg.inv(K[:P, :P] + 0.1 * np.eye(P))
    np.testing.assert_allclose(q.value("train_mean"), K[:P, :P] @ Kn @ Y, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(q.value("train_covariance"), K[:P, :P] - K[:P, :P] @ Kn @ K[:P, :P],
                               rtol=1e-10, atol=1e-13)


def test_converged_gd_mean_solves_with_the_targets_only(monkeypatch):
    """The converged GD mean is Theta_BA (Theta~^{-1} y): the solves take the C columns of y;
    the Q x P projector (Q right-hand sides) is formed only when the covariance is read."""
    from effth.pdlt.learning import prediction as pr
    widths = []
    real = pr._solve_tri

    def spy(Lc, B, *a, **k):
        widths.append(1 if B.ndim == 1 else B.shape[1])
        return real(Lc, B, *a, **k)
    monkeypatch.setattr(pr, "_solve_tri", spy)
    Q = K.shape[0] - P
    p = et.predict(K=K, Theta=TH, y_train=Y, n_train=P)
    p.value("mean")
    assert widths and max(widths) == Y.shape[1]
    p.value("covariance")
    assert max(widths) == Q
