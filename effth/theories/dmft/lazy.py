"""The static-NTK (lazy, ``gamma0 -> 0``) limit of the DMFT and the stability of discrete GD.

At ``gamma0 = 0`` the single-site fields are the Gaussian processes themselves (``h = u``,
``z = r``), every kernel is constant in time (spec §2.5):

``Phi^ell = <phi(u) phi(u)^T>_{u ~ N(0, Phi^{ell-1})}``, ``Phi^0 = K^x``,
``G^ell = dPhi^ell * G^{ell+1}`` with ``dPhi^ell = <phi'(u) phi'(u)^T>``, ``G^{L+1} = 1``,
``K_0 = sum_{ell=0}^{L} G^{ell+1} Phi^ell`` (Jacot's NTK),

and discrete GD with step ``eta`` is the Euler map ``f_{i+1} = f_i + eta K_0 Delta_i``.
"""

from __future__ import annotations

import numpy as np

from ...errors import DomainError
from ...numerics import gaussian_expectation
from .grid import TimeGrid, TrainingData
from .result import Diagnostics, DMFTResult

__all__ = ["check_stability", "lazy_kernels", "static_ntk_dynamics", "static_ntk_solve"]

_LINEAR = ("linear", "identity", "id")


def _pair_cov(K: np.ndarray) -> np.ndarray:
    d = np.diag(K)
    n = K.shape[0]
    cov = np.empty((n, n, 2, 2))
    cov[..., 0, 0] = d[:, None]
    cov[..., 1, 1] = d[None, :]
    cov[..., 0, 1] = cov[..., 1, 0] = K
    return cov


def lazy_kernels(kx: np.ndarray, depth: int, activation: str = "linear", *, bias: bool = False):
    """NNGP and gradient kernels of the lazy limit (spec §2.5).

    Parameters
    ----------
    kx : ndarray, shape (n, n)
        Input kernel ``K^x``.
    depth : int
        Number of hidden layers ``L``.
    activation : str
        Registry name; Gaussian expectations by :func:`effth.numerics.gaussian_expectation`
        (closed forms where they exist, else quadrature).
    bias : bool
        Trainable biases on every preactivation (seed App. H): ``kx`` already holds the first
        layer's ``K^x + 1``, deeper sources have covariance ``Phi^ell + 1`` and the NTK adds
        ``G^{ell+1}`` for ``ell = 1 .. L-1``.

    Returns
    -------
    phi, dphi, g : ndarray, shape (L, n, n)
        ``Phi^ell``, ``dPhi^ell = <phi'(u) phi'(u)>_{Phi^{ell-1}}`` and ``G^ell`` for
        ``ell = 1..L``.
    ntk : ndarray, shape (n, n)
        ``K_0 = sum_{ell=0}^{L} G^{ell+1} Phi^ell``.
    """
    n = kx.shape[0]
    b = 1.0 if bias else 0.0
    phi = np.empty((depth, n, n))
    dphi = np.empty((depth, n, n))
    prev = kx
    for ell in range(depth):
        if activation in _LINEAR:
            phi[ell], dphi[ell] = prev, 1.0
        else:
            cov = _pair_cov(prev)
            phi[ell] = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], cov, activation)
            dphi[ell] = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], cov, activation)
        phi[ell] = 0.5 * (phi[ell] + phi[ell].T)
        prev = phi[ell] + b
    g = np.empty((depth, n, n))
    nxt = np.ones((n, n))
    for ell in range(depth - 1, -1, -1):
        g[ell] = dphi[ell] * nxt
        nxt = g[ell]
    ntk = g[0] * kx + phi[-1]
    for ell in range(1, depth):
        ntk = ntk + g[ell] * (phi[ell - 1] + b)
    return phi, dphi, g, ntk


def check_stability(ntk_train: np.ndarray, eta: float) -> float:
    """Raise :class:`DomainError` if lazy GD diverges: ``eta * lambda_max(K_0) >= 2``.

    Returns ``eta * lambda_max`` otherwise.  (Discrete GD on the static NTK is
    ``Delta_{i+1} = (1 - eta K_0) Delta_i``; it converges iff every ``|1 - eta lambda| < 1``.)
    """
    lam = float(np.linalg.eigvalsh(0.5 * (ntk_train + ntk_train.T))[-1])
    if eta * lam >= 2.0:
        raise DomainError(
            f"step size eta={eta} is past the stability edge of gradient descent: "
            f"eta * lambda_max(K_NTK) = {eta * lam:.4g} >= 2 (lambda_max = {lam:.4g}); "
            f"use eta < {2.0 / lam:.4g}")
    return eta * lam


def static_ntk_dynamics(ntk: np.ndarray, y: np.ndarray, eta: float, steps: int) -> np.ndarray:
    """Discrete GD on a static NTK: ``f_{i+1} = f_i + eta K_0[:, :P] (y - f_i[:P])``, ``f_0 = 0``.

    Returns ``(steps, n)`` predictions (training points, then test points).
    """
    P = y.size
    f = np.zeros((steps, ntk.shape[0]))
    for i in range(steps - 1):
        f[i + 1] = f[i] + eta * ntk[:, :P] @ (y - f[i, :P])
    return f


def static_ntk_solve(data: TrainingData, grid: TimeGrid, depth: int,
                     activation: str = "linear", *, check: bool = True,
                     bias: bool = False) -> DMFTResult:
    """The ``gamma0 = 0`` DMFT without solving: constant kernels and static-NTK GD predictions.

    The response arrays are returned as zeros (they do not enter at ``gamma0 = 0``; the deep
    linear solver returns the exact lazy responses).  Raises :class:`DomainError` past the
    stability edge when ``check``.  ``bias``: see :func:`lazy_kernels` (``data.kx`` holds
    ``K^x + 1``)."""
    phi, _, g, ntk = lazy_kernels(data.kx, depth, activation, bias=bias)
    if check:
        check_stability(ntk[: data.n_train, : data.n_train], grid.eta)
    T, n = grid.steps, data.n_all
    f = static_ntk_dynamics(ntk, data.y, grid.eta, T)
    zeros = np.zeros((max(depth - 1, 0), T, n, T, n))
    return DMFTResult(grid=grid, data=data, depth=depth, gamma0=0.0, activation=activation,
                      phi=_tile_time(phi, T), g=_tile_time(g, T), A=zeros, B=zeros.copy(), f=f,
                      delta=data.y - f[:, : data.n_train], method="static_ntk", closure="ntk",
                      diagnostics=Diagnostics(converged=True), bias=bool(bias))


def _tile_time(K: np.ndarray, T: int) -> np.ndarray:
    """``(L, n, n) -> (L, T, n, T, n)`` constant in time."""
    L, n, _ = K.shape
    return np.ascontiguousarray(np.broadcast_to(K[:, None, :, None, :], (L, T, n, T, n)))
