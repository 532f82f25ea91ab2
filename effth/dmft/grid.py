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
from effth._langevin import langevin_noise  # noqa: F401  (re-exported: the solvers' and the trainer's one noise variance)
from effth._validate import integer, langevin_momentum, real_array, real_scalar  # noqa: F401  (re-exported)
from effth.errors import DomainError

__all__ = ["TimeGrid", "TrainingData", "ParameterFilter", "causal_mask", "langevin_noise", "parameter_filter", "prepare_data"]


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
        from effth._validate import check_memory
        check_memory(8.0 * float(self.steps) ** 2, f"one two-time kernel (steps x steps) at "
                     f"steps={self.steps}", "lower steps (two-time kernels grow as steps**2)")
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


@public
@dataclass(frozen=True)
class ParameterFilter:
    r"""The linear per-parameter dynamics of the optimizer on the GD grid (one mechanism for weight
    decay, Langevin noise and momentum).

    Every parameter of the trainer (:func:`effth.simulation.simulate_training`) obeys a linear
    recursion driven by its DMFT-scaled gradient ``G(s)`` (``theta <- theta + eta G`` for plain
    GD) and, with a temperature, by independent ``N(0, 1)`` noise ``xi(s)``:

    ``theta(t) = a(t) theta(0) + sum_{s<t} k(t-1-s) [eta G(s) + sigma xi(s)]``.

    * Weight decay (Bordelon & Pehlevan (2022), App. J): ``a(t) = rho^t``, ``k(j) = rho^j``,
      ``rho = 1 - eta lambda``.
    * Langevin dynamics (Bordelon & Pehlevan (2022), App. K, eq. (100) with the decay rate
      ``lambda / beta`` written ``weight_decay`` and ``temperature = 1 / beta``): noise
      ``sigma^2 = temperature (1 - rho^2) / weight_decay`` per step (``2 eta temperature`` at
      ``weight_decay = 0``), the Euler-Maruyama ``2 eta / beta`` up to ``O(eta^2)``, chosen so
      that the prior ``N(0, temperature / weight_decay)`` is exactly invariant under the decay and
      noise part of a step.
    * Heavy-ball momentum (Bordelon & Pehlevan (2022), App. L, eq. (122) in discrete time):
      ``v <- mu v + (1 - mu) (eta G - eta lambda theta)``, ``theta <- theta + v``; then
      ``k(j) = 1 - mu^{j+1}`` without decay (the exponential memory kernel of eq. (123) with
      ``mu = exp(-eta / tau)``), and ``mu = 0`` is GD.
    * Both (underdamped Langevin dynamics in discrete time): the noise enters the heavy-ball
      increment, ``v <- mu v + (1 - mu) (eta G - eta lambda theta + sigma xi)``, so it is filtered
      by the same memory ``k`` as the gradient; ``sigma^2`` from :func:`langevin_noise` keeps the
      prior invariant.  The noise kernel ``C_{lambda,beta}`` of App. K, eqs. (105)-(112), becomes
      ``sigma^2 sum_r k(t-1-r) k(s-1-r)``.

    The random part of ``theta(t)`` (initial weights and noise) has the time covariance, per
    unit initial variance,

    ``kappa(t, s) = a(t) a(s) + sigma^2 sum_{r < min(t, s)} k(t-1-r) k(s-1-r)``,

    which is the DMFT's noise kernel: the Gaussian sources of layer ``l`` have covariances
    ``kappa * Phi^{l-1}`` and ``kappa * G^{l+1}`` and the response terms carry ``kappa``
    (App. K, eqs. (105)-(112): ``kappa = e^{-lambda (t+s)/beta} + C_{lambda,beta}(t, s)`` in
    continuous time).

    Attributes
    ----------
    init : ndarray (T,)
        ``a(t)``.
    memory : ndarray (T,)
        ``k(j)``, the weight of ``eta G`` at lag ``j = t - 1 - s`` (the drift terms).
    kappa : ndarray (T, T)
        The noise kernel above.
    noise : float
        ``sigma^2``, the noise variance per step (0 without temperature).
    """

    init: np.ndarray
    memory: np.ndarray
    kappa: np.ndarray
    noise: float


def langevin_settings(eta: float, weight_decay: float = 0.0, temperature: float = 0.0,
                      momentum: float = 0.0) -> tuple[float, float, float]:
    """Validated ``(rho, temperature, momentum)`` (:class:`DomainError` with what to do)."""
    rho = decay_factor(eta, weight_decay)
    temperature, momentum = langevin_momentum(temperature, momentum)
    return rho, temperature, momentum


def parameter_filter(eta: float, steps: int, weight_decay: float = 0.0, temperature: float = 0.0,
                     momentum: float = 0.0) -> ParameterFilter:
    """The :class:`ParameterFilter` of the trainer's update on ``steps`` grid points."""
    rho, temp, mu = langevin_settings(eta, weight_decay, temperature, momentum)
    T = int(steps)
    lam = float(weight_decay)
    if mu == 0.0:
        a = rho ** np.arange(T)
        k = a.copy()
    else:
        def run(theta, v, kick, n):
            out = np.empty(n)
            for t in range(n):
                out[t] = theta
                v = mu * v + (1.0 - mu) * ((kick if t == 0 else 0.0) - eta * lam * theta)
                theta = theta + v
            return out
        a = run(1.0, 0.0, 0.0, T)
        k = run(0.0, 0.0, 1.0, T + 1)[1:]               # theta(s + 1 + j) after a unit kick at s
    kappa = np.outer(a, a)
    noise = langevin_noise(eta, lam, temp, mu)
    if temp > 0 and mu == 0.0:
        lag = np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
        first = np.minimum.outer(np.arange(T), np.arange(T))
        # sigma^2 sum_{r < min} rho^{t-1-r} rho^{s-1-r} = sigma^2 rho^{|t-s|} (1 - rho^{2 min}) / (1 - rho^2)
        if lam > 0:
            kappa = kappa + (temp / lam) * rho ** lag * (1.0 - rho ** (2 * first))
        else:
            kappa = kappa + noise * first
    elif temp > 0:
        # underdamped Langevin: the noise passes the momentum memory, row t of F holds k(t-1-r)
        # for r < t, and kappa gains sigma^2 sum_r k(t-1-r) k(s-1-r) = sigma^2 (F F^T)(t, s)
        lag = np.subtract.outer(np.arange(T), np.arange(T)) - 1
        F = np.where(lag >= 0, k[np.maximum(lag, 0)], 0.0)
        kappa = kappa + noise * (F @ F.T)
    return ParameterFilter(init=a, memory=k, kappa=kappa, noise=float(noise))
