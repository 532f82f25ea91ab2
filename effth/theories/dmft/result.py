"""The result of a DMFT solve: order parameters on the time grid, predictions, diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .grid import TimeGrid, TrainingData

__all__ = ["DMFTResult", "Diagnostics"]


@dataclass
class Diagnostics:
    """Convergence record of a fixed-point solve.

    Attributes
    ----------
    iterations : int
        Number of fixed-point sweeps performed.
    residuals : list of float
        Max-abs change of the state (kernels, responses, error signal) after each sweep.
    converged : bool
        Whether the last residual fell below the tolerance.
    tol : float
        The tolerance used.
    seconds : float
        Wall time of the solve.
    """

    iterations: int = 0
    residuals: list = field(default_factory=list)
    converged: bool = False
    tol: float = 0.0
    seconds: float = 0.0


@dataclass
class DMFTResult:
    """Order parameters of the infinite-width DMFT of seed 000 on a discrete GD grid.

    Layer ``ell = 1 .. L`` sits at index ``ell - 1`` of the layer axis.  Sample axes have length
    ``n = P + Q`` (training points first, then test points).  Kernels are indexed
    ``[t, mu, s, alpha]``; reshape to ``(T n, T n)`` for the matrix form of spec §2.7.

    Attributes
    ----------
    grid : TimeGrid
        ``t_i = i * eta``, ``i < T``.
    data : TrainingData
        ``K^x`` (``Phi^0``), targets, ``P``.
    depth : int
        ``L``, the number of hidden layers.
    gamma0 : float
        Feature-learning strength ``gamma_0`` (``gamma = gamma_0 sqrt(N)``).
    activation : str
        Activation name.
    phi : ndarray, shape (L, T, n, T, n)
        Feature kernels ``Phi^ell_{mu alpha}(t, s) = <phi(h^ell_mu(t)) phi(h^ell_alpha(s))>``
        (seed eq. (10)/(54)).
    g : ndarray, shape (L, T, n, T, n)
        Gradient kernels ``G^ell_{mu alpha}(t, s) = <g^ell_mu(t) g^ell_alpha(s)>``; for deep linear
        networks ``g^ell`` is sample independent and the array is broadcast over samples.
    A, B : ndarray, shapes (L-1, T, n, T, nA) and (L-1, T, nB, T, n)
        Response functions in the paper's scaled convention (D.7; spec §2.3):
        ``A^ell = gamma0^-1 <d phi(h^ell(t)) / d r^ell(s)>`` (strictly causal) and
        ``B^ell = gamma0^-1 <d g^{ell+1}(t) / d u^{ell+1}(s)>`` (causal, including the equal-time
        part).  In deep linear networks ``r^ell`` and ``g^ell`` are sample independent and the
        responses are the row sums: ``nA = nB = 1``; otherwise ``nA = nB = n``.  With ``C``
        outputs the deep linear responses carry a trailing output axis: ``(L-1, T, n, T, 1, C)``
        and ``(L-1, T, 1, T, n, C)``; the Monte-Carlo solver's are ``(L-1, T, n, T, n, C)``.  With
        weight decay they are the responses to the undecayed Gaussian sources (module docstrings
        of the solvers); Stein-form responses are defined on the source directions the samples
        resolve.
    f : ndarray, shape (T, n)
        Predictions on training and test points, ``f(t_0) = 0``.
    delta : ndarray, shape (T, P)
        Error signal ``Delta = y - f`` on the training points.
    method : str
        ``'deep_linear'``, ``'monte_carlo'`` or ``'static_ntk'``.
    closure : str
        ``'exact'`` (f from the single-site average, the exact limit of discrete GD, spec §2.4) or
        ``'ntk'`` (NTK-Euler, ``f_{i+1} = f_i + eta K(t_i, t_i) Delta_i``).
    diagnostics : Diagnostics
        Iterations and residual history.
    bias : bool
        Trainable biases on every preactivation ``h^1 .. h^L`` (seed App. H).  The first layer's
        bias is folded into the input kernel (``data.kx`` holds ``K^x + 1``, the covariance of
        ``u^1``); the deeper ones add ``G^{ell+1}`` to the NTK: ``K = G^1 (K^x + 1) +
        sum_{ell=1}^{L-1} G^{ell+1} (Phi^ell + 1) + Phi^L`` (spec §2.9, §8 #25).
    fields : ndarray, shape (L, S, T, n), or None
        Samples of the single-site preactivations ``h^ell_mu(t)`` from the last sweep
        (``solve_monte_carlo(keep_fields=True)``).
    stderr : dict or None
        Monte-Carlo standard errors (same shapes as the arrays they belong to: ``'phi'``, ``'g'``,
        ``'f'``), estimated from independent sample batches (or from the spread of the last sweeps
        with ``average``); ``None`` for deterministic solvers.
    """

    grid: TimeGrid
    data: TrainingData
    depth: int
    gamma0: float
    activation: str
    phi: np.ndarray
    g: np.ndarray
    A: np.ndarray
    B: np.ndarray
    f: np.ndarray
    delta: np.ndarray
    method: str
    closure: str = "exact"
    diagnostics: Diagnostics = field(default_factory=Diagnostics)
    stderr: dict | None = None
    bias: bool = False
    fields: np.ndarray | None = None

    # ----------------------------------------------------------------- derived quantities
    @property
    def times(self) -> np.ndarray:
        """``(T,)`` grid times."""
        return self.grid.times

    @property
    def n_train(self) -> int:
        """``P``."""
        return self.data.n_train

    @property
    def f_train(self) -> np.ndarray:
        """``(T, P)`` predictions on the training points."""
        return self.f[:, : self.n_train]

    @property
    def f_test(self) -> np.ndarray:
        """``(T, Q)`` predictions on the test points (``Q = 0`` if none were given)."""
        return self.f[:, self.n_train:]

    @property
    def loss(self) -> np.ndarray:
        """``(T,)`` training loss ``1/2 sum_mu Delta_mu(t)^2`` (spec §1.3)."""
        return 0.5 * np.sum(self.delta.reshape(self.delta.shape[0], -1) ** 2, axis=1)

    @property
    def phi0(self) -> np.ndarray:
        """``(T, n, T, n)`` input kernel ``Phi^0 = K^x`` tiled over times."""
        T, n = self.grid.steps, self.data.n_all
        return np.broadcast_to(self.data.kx[None, :, None, :], (T, n, T, n))

    @property
    def ntk(self) -> np.ndarray:
        """``(T, n, T, n)`` NTK ``K(t, s) = sum_{ell=0}^{L} G^{ell+1} Phi^ell`` (seed eq. (19)),
        with ``Phi^0 = K^x`` and ``G^{L+1} = 1``; ``(T, n, T, n, C, C)`` for ``C`` outputs."""
        if self.g.ndim == 7:                       # C outputs: K^{cc'} (seed eq. (95))
            C = self.g.shape[-1]
            out = self.g[0] * self.phi0[..., None, None]
            for ell in range(1, self.depth):
                out = out + self.g[ell] * (self.phi[ell - 1] + float(self.bias))[..., None, None]
            return out + self.phi[self.depth - 1][..., None, None] * np.eye(C)
        out = self.g[0] * self.phi0
        for ell in range(1, self.depth):
            out = out + self.g[ell] * (self.phi[ell - 1] + float(self.bias))
        return out + self.phi[self.depth - 1]

    @property
    def ntk_diag(self) -> np.ndarray:
        """``(T, n, n)`` (or ``(T, n, n, C, C)``) equal-time NTK ``K(t_i, t_i)``."""
        K = self.ntk
        idx = np.arange(self.grid.steps)
        return K[idx, :, idx, :]

    def equal_time(self, name: str) -> np.ndarray:
        """Equal-time diagonal ``X(t_i, t_i)`` of ``'phi'`` or ``'g'``: shape ``(L, T, n, n)``."""
        X = getattr(self, name)
        idx = np.arange(self.grid.steps)
        return np.moveaxis(X[:, idx, :, idx, :], 0, 1)
