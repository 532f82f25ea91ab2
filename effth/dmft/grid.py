"""Discrete time grid, training data and input validation for the DMFT solvers.

The DMFT of Bordelon & Pehlevan (Bordelon & Pehlevan (2022)) is solved on the grid of full-batch gradient
descent, ``t_i = i * eta`` for ``i = 0 .. steps-1`` (Bordelon & Pehlevan (2022), App. M, eq. (132); Bordelon & Pehlevan (2022), App. M): sums over
earlier times are left-Riemann sums and are *exactly* the infinite-width limit of GD with parameter
learning rate ``eta * gamma0**2 * N``.  Arrays over (time, sample) are flattened time-major,
index ``i * P + mu``.

Test points ride along as extra samples with error signal ``Delta = 0`` (Bordelon & Pehlevan (2022), eqs. (3), (21), App. M): they enter
every kernel but never drive the dynamics.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import numpy as np

from effth._display import html_table
from effth._validate import integer, real_array, real_scalar  # noqa: F401  (re-exported)
from effth.errors import DomainError

__all__ = ["TimeGrid", "TrainingData", "causal_mask", "prepare_data"]


_html_table = html_table


@public
@dataclass(frozen=True)
class TimeGrid:
    """Uniform grid ``t_i = i * eta``, ``i = 0 .. steps-1`` of full-batch gradient descent.

    Parameters
    ----------
    eta : float
        Step size (per-step time increment; the network's parameter learning rate is
        ``eta * gamma0**2 * N``, Bordelon & Pehlevan (2022), eqs. (4), (14)-(15)).
    steps : int
        Number of grid points ``T`` (``T - 1`` GD updates).
    """

    eta: float
    steps: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "eta", real_scalar(self.eta, "eta"))
        object.__setattr__(self, "steps", integer(self.steps, "steps", minimum=1))
        if not (np.isfinite(self.eta) and self.eta > 0):
            raise DomainError(f"step size eta={self.eta!r} must be a positive finite number")

    @property
    def times(self) -> np.ndarray:
        """The grid ``(steps,)``: ``t_i = i * eta``."""
        return self.eta * np.arange(self.steps)

    def __repr__(self) -> str:
        return f"TimeGrid(eta={self.eta:g}, steps={self.steps}, t_max={self.eta * (self.steps - 1):g})"

    def _repr_html_(self) -> str:
        return _html_table("TimeGrid", [("eta", f"{self.eta:g}"), ("steps T", self.steps),
                                        ("t_max", f"{self.eta * (self.steps - 1):g}")])


@public
def causal_mask(steps: int, strict: bool = True) -> np.ndarray:
    """Boolean ``(steps, steps)`` mask of ``j < i`` (``strict``) or ``j <= i`` (Bordelon & Pehlevan (2022), App. M)."""
    return np.tril(np.ones((steps, steps), dtype=bool), k=-1 if strict else 0)


@public
@dataclass(frozen=True)
class TrainingData:
    """Input kernel and targets, with optional test points appended after the training points.

    Attributes
    ----------
    kx : ndarray, shape (P + Q, P + Q)
        Input Gram matrix ``K^x = x_mu . x_alpha / D`` (Bordelon & Pehlevan (2022), eq. (18), ``Phi^0``), training points
        first, then the ``Q`` test points.
    y : ndarray, shape (P,)
        Training targets (loss ``1/2 sum_mu (f_mu - y_mu)^2``, Bordelon & Pehlevan (2022), eqs. (3), (14)).
    n_train : int
        ``P``.
    """

    kx: np.ndarray
    y: np.ndarray
    n_train: int

    def __repr__(self) -> str:
        return (f"TrainingData(train={self.n_train}, test={self.n_all - self.n_train}, "
                f"trace K^x={float(np.trace(self.kx)):.4g})")

    def _repr_html_(self) -> str:
        return _html_table("TrainingData", [("training points P", self.n_train),
                                            ("test points Q", self.n_all - self.n_train),
                                            ("trace K^x", f"{float(np.trace(self.kx)):.4g}")])

    @property
    def n_all(self) -> int:
        """``P + Q``: number of training plus test points."""
        return self.kx.shape[0]

    def pad(self, delta: np.ndarray) -> np.ndarray:
        """Extend a training-point array ``(..., P)`` by zeros for the test points."""
        out = np.zeros(delta.shape[:-1] + (self.n_all,))
        out[..., : self.n_train] = delta
        return out


def _check_kernel(kx: np.ndarray, name: str) -> np.ndarray:
    if kx.ndim != 2 or kx.shape[0] != kx.shape[1]:
        raise DomainError(f"{name} must be a square matrix, got shape {kx.shape}")
    if not np.all(np.isfinite(kx)):
        raise DomainError(f"{name} has non-finite entries")
    scale = max(1.0, float(np.max(np.abs(kx))))
    if np.max(np.abs(kx - kx.T)) > 1e-10 * scale:
        raise DomainError(f"{name} is not symmetric (max asymmetry {np.max(np.abs(kx - kx.T)):.3g})")
    lam_min = float(np.linalg.eigvalsh(0.5 * (kx + kx.T))[0])
    if lam_min < -1e-10 * scale:
        raise DomainError(
            f"{name} is not positive semi-definite (smallest eigenvalue {lam_min:.3g}); "
            "pass inputs X or a Gram matrix X X^T / D")
    return 0.5 * (kx + kx.T)


@public
def prepare_data(X=None, y=None, *, X_test=None, kernel=None) -> TrainingData:
    """Validate the training data and build the input kernel ``K^x`` (train, then test points).

    Parameters
    ----------
    X : array_like, shape (P, D), optional
        Training inputs; ``K^x = X X^T / D`` (Bordelon & Pehlevan (2022), eq. (1), first layer ``W^0 x / sqrt(D)``).
    y : array_like, shape (P,)
        Training targets.
    X_test : array_like, shape (Q, D), optional
        Test inputs (not trained on).
    kernel : array_like, shape (P + Q, P + Q), optional
        The Gram matrix itself instead of ``X`` (and ``X_test``); must be symmetric PSD.

    Raises
    ------
    DomainError
        Mismatched shapes, non-finite values, or a kernel that is not symmetric PSD.
    """
    if y is None:
        raise DomainError("targets y are required")
    y = real_array(y, "y")
    if y.ndim != 1 or y.size == 0 or not np.all(np.isfinite(y)):
        raise DomainError(f"y must be a finite 1-D array of targets, got shape {y.shape}")
    if kernel is not None:
        if X is not None or X_test is not None:
            raise DomainError("pass either inputs X (and X_test) or kernel, not both")
        kx = _check_kernel(real_array(kernel, "kernel"), "kernel")
        if kx.shape[0] < y.size:
            raise DomainError(f"kernel has {kx.shape[0]} points but y has {y.size} targets")
        return TrainingData(kx, y, y.size)
    if X is None:
        raise DomainError("pass inputs X or a kernel")
    X = real_array(X, "X")
    if X.ndim != 2 or X.shape[0] != y.size:
        raise DomainError(f"X must have shape (P, D) with P = len(y) = {y.size}, got {X.shape}")
    if X_test is not None:
        X_test = real_array(X_test, "X_test")
        if X_test.ndim != 2 or X_test.shape[1] != X.shape[1]:
            raise DomainError(f"X_test must have shape (Q, {X.shape[1]}), got {X_test.shape}")
        X = np.vstack([X, X_test])
    if not np.all(np.isfinite(X)):
        raise DomainError("inputs contain non-finite values")
    kx = _check_kernel(X @ X.T / X.shape[1], "K^x")
    return TrainingData(kx, y, y.size)


def prepare_targets(X=None, y=None, *, X_test=None, kernel=None, bias: bool = False):
    """Data and targets for the solvers with the extensions of Bordelon & Pehlevan (2022), App. H, I.

    Returns ``(data, Y, multi)``: :class:`TrainingData` (``K^x + 1`` when ``bias``: the first
    layer's bias folded into the input kernel), targets ``Y`` of shape ``(P, C)`` and whether ``y``
    was 2-D (``C`` outputs).  Raises :class:`DomainError` for missing, non-finite or mis-shaped
    targets.
    """
    if y is None:
        raise DomainError("targets y are required")
    y_arr = real_array(y, "y")
    multi = y_arr.ndim == 2
    if y_arr.ndim > 2 or (multi and (min(y_arr.shape) < 1 or not np.all(np.isfinite(y_arr)))):
        raise DomainError(f"y of shape {y_arr.shape} must be (P,) or (P, C) with P, C >= 1, finite")
    data = prepare_data(X, y_arr[:, 0] if multi else y_arr, X_test=X_test, kernel=kernel)
    if multi and y_arr.shape[0] != data.n_train:
        raise DomainError(f"y of shape {y_arr.shape} does not match P = {data.n_train}")
    Y = y_arr if multi else data.y[:, None]
    if bias:
        data = TrainingData(data.kx + 1.0, data.y, data.n_train)
    return data, Y, multi


def decay_factor(eta: float, weight_decay: float) -> float:
    """``rho = 1 - eta lambda``, the factor every parameter is multiplied by per GD step (Bordelon & Pehlevan (2022), App. J
    in discrete time); :class:`DomainError` unless ``lambda >= 0`` is finite and ``eta lambda < 1``."""
    if not (np.isfinite(weight_decay) and weight_decay >= 0):
        raise DomainError(f"weight_decay={weight_decay!r} must be a finite number >= 0")
    rho = 1.0 - float(eta) * float(weight_decay)
    if not (0.0 < rho <= 1.0):
        raise DomainError(f"eta * weight_decay = {eta * weight_decay:.3g} must lie in [0, 1)")
    return rho
