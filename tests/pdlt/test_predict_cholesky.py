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


def test_given_kernels_factor_the_training_block_once(monkeypatch):
    """With given kernels the PSD check of the matrix the solve uses is blockwise (the training
    block's Cholesky factor, then the test block's Schur complement) and its factor is the one
    the solve uses: one factorization of a P x P block (GD: Theta's, Bayes: K's); GD reads K
    only in the covariance, so K's full-matrix check waits for it; the predictions are those of
    the eigenbasis."""
    import scipy.linalg as sl
    sizes = []
    real = sl.cholesky

    def spy(a, *args, **kw):
        sizes.append(np.shape(a)[0])
        return real(a, *args, **kw)
    monkeypatch.setattr(sl, "cholesky", spy)
    N = K.shape[0]
    p = et.predict(K=K, Theta=TH, y_train=Y, n_train=P)
    lam, U = np.linalg.eigh(TH[:P, :P])
    np.testing.assert_allclose(p.value("mean"), TH[P:, :P] @ U @ np.diag(1 / lam) @ U.T @ Y,
                               rtol=1e-12, atol=1e-13)
    assert sorted(sizes) == sorted([P, N - P])            # Theta's blocks
    p.value("covariance")
    assert sorted(sizes) == sorted([P, N - P, N])         # K's full check, when first read
    sizes.clear()
    b = et.predict(K=K, y_train=Y, n_train=P, method="bayes")
    np.testing.assert_allclose(b.value("mean"), K[P:, :P] @ np.linalg.solve(K[:P, :P], Y),
                               rtol=1e-12, atol=1e-13)
    assert sorted(sizes) == sorted([P, N - P])


def test_blockwise_psd_check_decides_as_the_full_one():
    """psd_kernel(train_factor=True): the factor of a definite training block and the same
    verdicts as the full check -- a test block that is not PSD and a coupling too large for two
    PSD blocks are refused with their messages, a singular training block of a PSD kernel
    (duplicated training inputs) passes with no factor."""
    from effth._validate import psd_kernel
    Ka, L = psd_kernel(K, "K", n_train=P, train_factor=True)
    np.testing.assert_allclose(L @ L.T, K[:P, :P], rtol=1e-13, atol=1e-14)
    bad = K.copy()
    bad[P:, P:] -= 2.0 * np.eye(K.shape[0] - P)
    with pytest.raises(DomainError, match="test block"):
        psd_kernel(bad, "K", n_train=P, train_factor=True)
    cpl = np.eye(4)
    cpl[0, 2] = cpl[2, 0] = 1.5                           # both blocks I, the coupling too large
    with pytest.raises(DomainError, match="train-test"):
        psd_kernel(cpl, "K", n_train=2, train_factor=True)
    v = np.array([1.0, 1.0, 0.5])
    dup = np.outer(v, v) + np.diag([0.0, 0.0, 1.0])      # rank-one training block, PSD kernel
    out, L = psd_kernel(dup, "K", n_train=2, train_factor=True)
    assert L is None and np.array_equal(out, dup)


def test_gd_checks_k_when_the_covariance_reads_it():
    """GD's mean (10.40) reads Theta only: a K that is not PSD is refused when the covariance
    (10.41), the formula that reads it, is first read (std, variance too), naming K and the
    block; a non-finite, non-symmetric or non-square K is refused at once, as is anything wrong
    with Theta; Bayes still refuses a non-PSD K at once."""
    bad = K.copy()
    bad[P:, P:] -= 2.0 * np.eye(K.shape[0] - P)          # test block of K not PSD
    lam, U = np.linalg.eigh(TH[:P, :P])
    for method in ("gd", "newton"):
        p = et.predict(K=bad, Theta=TH, y_train=Y, n_train=P, method=method)
        np.testing.assert_allclose(p.value("mean"), TH[P:, :P] @ U @ np.diag(1 / lam) @ U.T @ Y,
                                   rtol=1e-12, atol=1e-13)
        for name in ("covariance", "std", "covariance"):     # every read, not only the first
            with pytest.raises(DomainError, match="K is not positive semi-definite in its test block"):
                p.value(name)
    with pytest.raises(DomainError, match="K.*test block"):
        et.predict(K=bad, y_train=Y, n_train=P, method="bayes")
    asym = K.copy()
    asym[0, 1] += 1e-6
    nan = K.copy()
    nan[P, P] = np.nan
    for Kx, msg in ((asym, "K is not symmetric"), (nan, "K contains NaN"),
                    (K[:, :-1], "square")):
        with pytest.raises(DomainError, match=msg):
            et.predict(K=Kx, Theta=TH, y_train=Y, n_train=P)
    tbad = TH.copy()
    tbad[P:, P:] -= 3.0 * np.eye(K.shape[0] - P)
    with pytest.raises(DomainError, match="Theta.*test block"):
        et.predict(K=K, Theta=tbad, y_train=Y, n_train=P)
    # symmetric to rounding only: accepted and symmetrized, as before
    near = K.copy()
    near[0, 1] += 1e-15
    q = et.predict(K=near, Theta=TH, y_train=Y, n_train=P)
    assert np.array_equal(q.value("K"), q.value("K").T)


def test_inverse_norm1_is_dpocons_estimate():
    """The condition estimate of training_cholesky equals LAPACK dpocon's (the same Hager-Higham
    iteration, BLAS solves) and is a lower bound of the exact ||A^{-1}||_1 within a factor 3
    (to the inverse's rounding), on random matrices with condition numbers up to 1e14."""
    import scipy.linalg as sl
    from scipy.linalg import lapack
    from effth.pdlt.learning._linalg import inverse_norm1
    rng = np.random.default_rng(1)
    for _ in range(60):
        n = int(rng.integers(1, 40))
        Uq, _ = np.linalg.qr(rng.standard_normal((n, n)))
        lam = 10.0 ** rng.uniform(-rng.uniform(0, 14), 0, n)
        M = (Uq * lam) @ Uq.T
        M = 0.5 * (M + M.T)
        try:
            L = sl.cholesky(M, lower=True)
        except sl.LinAlgError:
            continue
        anorm = np.abs(M).sum(axis=0).max()
        rcond, info = lapack.dpocon(L, anorm, uplo="L")
        est = inverse_norm1(L)
        exact = np.abs(np.linalg.inv(M)).sum(axis=0).max()
        assert info == 0 and est * rcond * anorm == pytest.approx(1.0, rel=1e-6)
        # np.linalg.inv is itself off by ~cond * eps
        assert exact / 3 <= est <= exact * (1 + 1e3 * lam.max() / lam.min() * 2.0 ** -52)
