"""Linear algebra of the training block shared by the learning modules (PDLT ch. 6, 7, 10, ∞)."""

from __future__ import annotations

import math
import warnings

import numpy as np

from effth.errors import AccuracyWarning, DomainError

__all__ = ["training_spectrum", "training_cholesky"]


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
    factorization and a LAPACK condition estimate (``dpocon``); the eigen-decomposition is only
    computed when a check fails, to say why.  ``factor``: the Cholesky factor of ``M`` already
    computed (by the input check, :func:`effth._validate.psd_kernel`), used instead of a second
    factorization (not with ``jitter``); the checks are the same."""
    from scipy.linalg import lapack

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
    anorm = float(np.max(np.sum(np.abs(M), axis=0)))
    rcond, info = lapack.dpocon(Lc, anorm, uplo="L")
    # 1-norm condition within a factor P of the 2-norm one: borderline cases go to the exact check
    if info != 0 or not rcond > 1e-12 / P:
        training_spectrum(M, name, need_invertible=True, jitter=0.0, bound_hint=bound_hint)
    return Lc
