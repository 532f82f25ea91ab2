"""Linear algebra of the training block shared by the learning modules (PDLT ch. 6, 7, 10, ∞)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from effth.errors import AccuracyWarning, DomainError

__all__ = ["training_spectrum", "training_cholesky", "inverse_norm1", "given_kernel", "given_kernel_factor"]


def training_spectrum(M: np.ndarray, name: str, *, need_invertible: bool, jitter: float,
              bound_hint: str = "") -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of a symmetric training block, with the PSD / singularity checks."""
    P = M.shape[0]
    if jitter:
        M = M + jitter * np.eye(P)
    lam, U = np.linalg.eigh(M)
    top = float(max(np.max(np.abs(lam)), 1e-300))
    tol = 100.0 * P * np.finfo(float).eps * top
    if lam[0] < -tol:
        raise DomainError(f"the training block of {name} is not positive semi-definite: smallest "
                          f"eigenvalue {lam[0]:.3g} (largest {lam[-1]:.3g}); a kernel of a network "
                          "is PSD, so check the matrix you passed")
    if need_invertible and lam[0] <= tol:
        raise DomainError(
            f"the training block of {name} is singular (smallest eigenvalue {lam[0]:.3g}, largest "
            f"{lam[-1]:.3g}), e.g. repeated training inputs or more training points than the "
            f"kernel's rank; its inverse does not exist{bound_hint}. Remove the duplicates, or "
            f"pass jitter=eps to add eps*1 to the training block (a ridge; the result then "
            f"depends on eps)")
    if need_invertible and lam[-1] / lam[0] > 1e12:
        warnings.warn(f"the training block of {name} is ill-conditioned (condition number "
                      f"{lam[-1] / lam[0]:.2g}): expect to lose about "
                      f"{math.log10(lam[-1] / lam[0]):.0f} digits", AccuracyWarning, stacklevel=4)
    return np.clip(lam, 0.0, None), U


def training_cholesky(M: np.ndarray, name: str, *, jitter: float, bound_hint: str = "",
                      factor: np.ndarray | None = None) -> np.ndarray:
    """Lower Cholesky factor of a symmetric positive-definite training block, with the checks of
    :func:`training_spectrum` (not PSD, singular, ill-conditioned) at the cost of a Cholesky
    factorization and a condition estimate (:func:`inverse_norm1`, LAPACK ``dpocon``'s); the
    eigen-decomposition is only
    computed when a check fails, to say why.  ``factor``: the Cholesky factor of ``M`` already
    computed (by the input check, :func:`effth._validate.psd_kernel`), used instead of a second
    factorization (not with ``jitter``); the checks are the same."""
    P = M.shape[0]
    if jitter:
        M = M + jitter * np.eye(P)
        factor = None
    from scipy.linalg import LinAlgError, cholesky
    try:
        Lc = factor if factor is not None else cholesky(M, lower=True, check_finite=False)
    except (np.linalg.LinAlgError, LinAlgError):
        training_spectrum(M, name, need_invertible=True, jitter=0.0, bound_hint=bound_hint)
        raise DomainError(f"the training block of {name} is not positive definite "
                          f"(Cholesky failed){bound_hint}") from None
    anorm = _norm1(M)
    rcond = 1.0 / (anorm * inverse_norm1(Lc)) if anorm > 0 else 0.0
    # 1-norm condition within a factor P of the 2-norm one: borderline cases go to the exact check
    if not rcond > 1e-12 / P:
        training_spectrum(M, name, need_invertible=True, jitter=0.0, bound_hint=bound_hint)
    return Lc


def given_kernel(Ka: np.ndarray, name: str, *, scale: bool = True) -> tuple[np.ndarray, float | None]:
    """A given (N, N) kernel, already a finite float copy (:func:`effth._validate.finite_array`),
    checked symmetric, and its scale max |K|: an exact symmetry test
    (``scipy.linalg.issymmetric``, no copy) and one max/min pass; a kernel symmetric only to
    rounding goes through :func:`effth._validate.symmetric_matrix` (its tolerance, 1e-10 of the
    scale, and its message), which returns it symmetrized.  The checks and the returned matrix
    are those of :func:`effth._validate.psd_kernel` before its positivity test.  ``scale=False``:
    no max/min pass, ``None`` for the scale."""
    from scipy.linalg import issymmetric

    from effth._validate import symmetric_matrix
    if Ka.ndim != 2 or Ka.shape[0] != Ka.shape[1] or Ka.shape[0] < 1:
        raise DomainError(f"{name} must be a square (N, N) matrix with N >= 1, got shape {Ka.shape}")
    if issymmetric(Ka):
        return Ka, ((max(float(Ka.max()), -float(Ka.min())) or 1.0) if scale else None)
    Ka = symmetric_matrix(Ka, name)
    return Ka, (float(np.max(np.abs(Ka))) or 1.0)


def given_kernel_factor(Ka: np.ndarray, name: str, n_train: int) -> tuple[np.ndarray, Any, Any]:
    """:func:`effth._validate.psd_kernel` with ``train_factor=True`` for a given kernel that is
    already a finite float copy: ``(K, L, W)``, ``L`` the lower Cholesky factor of the training
    block and :math:`W=L^{-1}K_{AB}` when the blockwise positivity test passes (else ``None``,
    and the full test of ``psd_kernel`` decides, with its messages); the symmetry and
    finiteness checks by :func:`given_kernel` instead of ``psd_kernel``'s copies and
    whole-array passes.  ``W`` is the first solve of a covariance (6.57), (10.41)."""
    from effth._validate import _blockwise_psd, psd_kernel
    Ka, scale = given_kernel(Ka, name)
    L, W = _blockwise_psd(Ka, int(n_train), 1e-10 * scale, coupling=True)
    if L is not None:
        return Ka, L, W
    return psd_kernel(Ka, name, n_train=n_train), None, None


def _norm1(M: np.ndarray) -> float:
    """:math:`\\|M\\|_1` of a symmetric ``M``, the largest row sum of :math:`|M|`, by blocks of
    rows (no whole-array :math:`|M|` temporary)."""
    b = max(1, (1 << 18) // max(M.shape[1], 1))
    return float(max(np.max(np.sum(np.abs(M[i:i + b]), axis=1)) for i in range(0, M.shape[0], b)))


def inverse_norm1(Lc: np.ndarray) -> float:
    """An estimate of :math:`\\|A^{-1}\\|_1` from the lower Cholesky factor ``Lc`` of a
    symmetric positive-definite ``A``: Hager's estimator as refined by Higham (1988), the one of
    LAPACK ``dlacn2`` that ``dpocon`` runs, a lower bound, nearly always within a factor 3 and
    usually exact; each step a Cholesky solve by two BLAS triangular solves (``dtrsv``) where
    ``dpocon`` uses the scaled, unblocked ``dlatrs`` (2-3x the time at P = 1000-3000)."""
    from scipy.linalg.blas import dtrsv
    n = Lc.shape[0]
    F = np.asfortranarray(Lc)                     # the factor as computed: no copy

    def solve(v):                                  # A^{-1} v = L^{-T} (L^{-1} v)
        w = dtrsv(F, np.array(v, dtype=float), lower=1, overwrite_x=1)
        return dtrsv(F, w, lower=1, trans=1, overwrite_x=1)

    y = solve(np.full(n, 1.0 / n))
    est = float(np.sum(np.abs(y)))
    if n == 1 or not np.isfinite(est):
        return est
    xi = np.where(y >= 0, 1.0, -1.0)
    j = int(np.argmax(np.abs(solve(xi))))
    for _ in range(4):                             # dlacn2's ITMAX = 5 steps in all
        e = np.zeros(n)
        e[j] = 1.0
        y = solve(e)
        old, est = est, float(np.sum(np.abs(y)))
        sign = np.where(y >= 0, 1.0, -1.0)
        if np.array_equal(sign, xi) or est <= old:
            est = max(est, old)
            break
        xi = sign
        z = np.abs(solve(xi))
        jlast, j = j, int(np.argmax(z))
        if z[jlast] == z[j]:
            break
    alt = (1.0 + np.arange(n) / (n - 1)) * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return max(est, 2.0 * float(np.sum(np.abs(solve(alt)))) / (3.0 * n))
