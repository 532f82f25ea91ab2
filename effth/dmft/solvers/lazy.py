"""The static-NTK (lazy, ``gamma0 -> 0``) limit of the DMFT and the stability of discrete GD.

At ``gamma0 = 0`` the single-site fields are the Gaussian processes themselves (``h = u``,
``z = r``), every kernel is constant in time (Bordelon & Pehlevan (2022), §3 at ``gamma0 = 0``):

``Phi^ell = <phi(u) phi(u)^T>_{u ~ N(0, Phi^{ell-1})}``, ``Phi^0 = K^x``,
``G^ell = dPhi^ell * G^{ell+1}`` with ``dPhi^ell = <phi'(u) phi'(u)^T>``, ``G^{L+1} = 1``,
``K_0 = sum_{ell=0}^{L} G^{ell+1} Phi^ell`` (Jacot's NTK),

and discrete GD with step ``eta`` is the Euler map ``f_{i+1} = f_i + eta K_0 Delta_i``.
"""

from __future__ import annotations

from effth._signature import public

import numpy as np

from effth.activations import Activation, get_activation
from effth.arch import resolve_depth
from effth.errors import DomainError
from effth._validate import weight_variance_values
from effth.numerics import gaussian_expectation
from effth.numerics._rules import gaussian_tensor_rule
from effth.dmft.grid import TimeGrid, TrainingData
from effth.dmft.result import Diagnostics, DMFTResult

__all__ = ["check_stability", "check_langevin_step", "lazy_kernels", "static_ntk_dynamics", "static_ntk_solve", "lazy_nodes",
           "lazy_rule_kind", "gauss_hermite_lazy_nodes", "TRAPEZOID_FROM"]

_LINEAR = ("linear", "identity", "id")


def resolve_activation(activation) -> Activation:
    """An :class:`~effth.activations.Activation` from a registry name or alias, an
    ``Activation``, or a SymPy expression in ``z`` (:func:`effth.get_activation`)."""
    if isinstance(activation, str) and activation.strip().lower() in _LINEAR:
        return get_activation("linear")
    return get_activation(activation)


def is_linear(act: Activation) -> bool:
    """Whether ``act`` is the identity ``phi(z) = z`` (by name or as a SymPy expression)."""
    if act.name == "linear":
        return True
    if act.family == "user":
        from effth.activations import Z
        import sympy as sp
        return sp.simplify(act.expr - Z) == 0
    return False


def activation_label(act: Activation):
    """What a result records as its activation: the registry name, or the ``Activation`` itself
    for a user expression (whose name ``'user'`` says nothing)."""
    return act if act.family == "user" else act.name


def require_smooth(act: Activation, what: str) -> None:
    """Raise :class:`DomainError` if ``act`` has kinks where ``what`` needs derivatives."""
    if act.kinks:
        raise DomainError(
            f"activation={act!r} has kinks at z = {list(act.kinks)}: {what} needs its "
            "derivatives pointwise, so only smooth activations are accepted here")


def hidden_layer_count(depth=None, hidden_layers=None) -> int:
    """``hidden_layers`` (the DMFT paper's :math:`L`) from exactly one of ``depth`` (weight layers,
    ``= hidden_layers + 1``) or ``hidden_layers`` (:func:`effth.arch.resolve_depth`)."""
    return resolve_depth(depth, hidden_layers, minimum=2) - 1


def _pair_cov(K: np.ndarray) -> np.ndarray:
    d = np.diag(K)
    n = K.shape[0]
    cov = np.empty((n, n, 2, 2))
    cov[..., 0, 0] = d[:, None]
    cov[..., 1, 1] = d[None, :]
    cov[..., 0, 1] = cov[..., 1, 0] = K
    return cov


@public
def lazy_kernels(kx: np.ndarray, activation="linear", *, depth=None, hidden_layers=None,
                 bias: bool = False, weight_variances=None):
    """NNGP and gradient kernels of the lazy limit (Bordelon & Pehlevan (2022), §3, eq. (19) at
    ``gamma0 = 0``).

    Parameters
    ----------
    kx : ndarray, shape (n, n)
        Input kernel ``K^x``.
    activation : str, Activation or sympy.Expr
        Registry name or alias, :class:`~effth.activations.Activation`, or a SymPy expression in
        ``z``; Gaussian expectations by :func:`effth.numerics.gaussian_expectation` (closed forms
        where they exist, else quadrature).
    depth, hidden_layers : int
        Give exactly one: weight layers, or hidden layers ``L = depth - 1``.
    bias : bool
        Trainable biases on every preactivation (Bordelon & Pehlevan (2022), App. H): ``kx`` already holds the first
        layer's ``K^x + 1``, deeper sources have covariance ``Phi^ell + 1`` and the NTK adds
        ``G^{ell+1}`` for ``ell = 1 .. L-1``.
    weight_variances : sequence of float, optional
        ``sigma_0^2 .. sigma_L^2``, the initial variances of ``W^0 .. W^{L-1}, w^L``
        (Bordelon & Pehlevan (2022), App. D.8): the sources are ``u^ell ~ N(0,
        sigma_{ell-1}^2 Phi^{ell-1} (+ 1))`` and ``G^ell = sigma_ell^2 <phi' phi'> G^{ell+1}``
        with ``G^{L+1} = sigma_L^2``; the NTK formula is unchanged (biases keep unit variance).
        ``None`` or all ones: the unit variances, bit for bit.

    Returns
    -------
    phi, dphi, g : ndarray, shape (L, n, n)
        ``Phi^ell``, ``dPhi^ell = <phi'(u) phi'(u)>_{Phi^{ell-1}}`` and ``G^ell`` for
        ``ell = 1..L``.
    ntk : ndarray, shape (n, n)
        ``K_0 = sum_{ell=0}^{L} G^{ell+1} Phi^ell``.
    """
    depth = hidden_layer_count(depth, hidden_layers)       # hidden layers L from here on
    act = resolve_activation(activation)
    linear = is_linear(act)
    n = kx.shape[0]
    b = 1.0 if bias else 0.0
    v = weight_variance_values(weight_variances, depth + 1)
    phi = np.empty((depth, n, n))
    dphi = np.empty((depth, n, n))
    prev = kx if v is None else v[0] * (kx - b) + b        # kx holds K^x + b
    for ell in range(depth):
        if linear:
            phi[ell], dphi[ell] = prev, 1.0
        else:
            cov = _pair_cov(prev)
            phi[ell] = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], cov, act)
            dphi[ell] = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], cov, act)
        phi[ell] = 0.5 * (phi[ell] + phi[ell].T)
        prev = phi[ell] + b if v is None else v[ell + 1] * phi[ell] + b
    g = np.empty((depth, n, n))
    nxt = np.ones((n, n)) if v is None else np.full((n, n), v[depth])
    for ell in range(depth - 1, -1, -1):
        g[ell] = dphi[ell] * nxt
        nxt = g[ell] if v is None else v[ell] * g[ell]
    ntk = g[0] * kx + phi[-1]
    for ell in range(1, depth):
        ntk = ntk + g[ell] * (phi[ell - 1] + b)
    return phi, dphi, g, ntk


@public
def check_stability(ntk_train: np.ndarray, eta: float, *, edge: float = 2.0) -> float:
    """Raise :class:`DomainError` if lazy GD diverges: ``eta * lambda_max(K_0) >= edge``.

    Returns ``eta * lambda_max`` otherwise.  (Discrete GD on the static NTK is
    ``Delta_{i+1} = (1 - eta K_0) Delta_i``; it converges iff every ``|1 - eta lambda| < 1``,
    ``edge = 2``.  Heavy-ball momentum ``mu`` in the form of Bordelon & Pehlevan (2022), App. L,
    ``v <- mu v + (1 - mu) eta K Delta``, is stable iff ``eta lambda < 2 (1 + mu) / (1 - mu)``,
    the ``edge`` that :func:`solve_deep_linear` passes.)
    """
    lam = float(np.linalg.eigvalsh(0.5 * (ntk_train + ntk_train.T))[-1])
    if eta * lam >= edge:
        raise DomainError(
            f"step size eta={eta} is past the stability edge of gradient descent: "
            f"eta * lambda_max(K_NTK) = {eta * lam:.4g} >= {edge:.4g} (lambda_max = {lam:.4g}); "
            f"use eta < {edge / lam:.4g}")
    return eta * lam


def check_langevin_step(ntk_eq: np.ndarray, eta: float, weight_decay: float,
                        variance: float, momentum: float = 0.0) -> float:
    """Raise :class:`DomainError` unless ``eta (lambda_max(K_eq) + weight_decay) < 2 (1 + mu) /
    (1 - mu)`` (``2`` for GD, ``mu = momentum = 0``).

    The linearized step of a parameter along an NTK eigenvalue ``k`` is, with heavy-ball
    momentum (Bordelon & Pehlevan (2022), App. L, in the form ``v <- mu v + (1 - mu) eta (G -
    lambda theta)``), the recursion ``theta_{t+1} = (1 + mu - c) theta_t - mu theta_{t-1} +
    noise``, ``c = (1 - mu) eta (k + weight_decay)``, stable iff ``0 < c < 2 (1 + mu)``; at ``mu =
    0`` this is ``|rho - eta k| < 1``.  ``ntk_eq`` is the lazy NTK on the training points at the
    weight variance ``variance`` (the larger of the initial 1 and the equilibrium ``temperature
    / weight_decay``, Bordelon & Pehlevan (2022), App. K.2).  Returns ``eta (lambda_max +
    weight_decay)``.
    """
    kmax = float(np.linalg.eigvalsh(0.5 * (ntk_eq + ntk_eq.T))[-1])
    x = eta * (kmax + weight_decay)
    mu = float(momentum)
    edge = 2.0 * (1.0 + mu) / (1.0 - mu)
    if x >= edge:
        kind = "Langevin step" if mu == 0 else f"heavy-ball step (momentum={mu:g})"
        bound = "2" if mu == 0 else "2 (1 + momentum) / (1 - momentum)"
        raise DomainError(
            f"{kind} eta={eta:g} is past the stable bound: eta (lambda_max(K_eq) + "
            f"weight_decay) = {x:.4g} >= {bound} = {edge:.4g} (lambda_max(K_eq) = {kmax:.4g} at "
            f"weight variance {variance:.4g} = max(1, temperature / weight_decay)); use eta < "
            f"{edge / (kmax + weight_decay):.4g}")
    return x


def check_stability_along(result, edge: float = 2.0):
    """Warn if GD leaves its stable region along the run: ``eta lambda_max(K(t_i, t_i)) >= 2`` at
    some step (``K`` the equal-time NTK on the training points).  :func:`check_stability` tests
    ``t = 0`` only; feature learning and weight decay move the NTK.  Records the largest
    ``eta lambda_max`` in ``result.diagnostics.stability`` and returns ``result``."""
    import warnings

    K = np.asarray(result.ntk)
    P, T, eta = result.data.n_train, K.shape[0], result.grid.eta
    K = K[:, :P, :P]
    if K.ndim == 5:                                           # (T, P, P, C, C) -> (T, PC, PC)
        C = K.shape[-1]
        K = K.transpose(0, 1, 3, 2, 4).reshape(T, P * C, P * C)
    if not np.all(np.isfinite(K)):
        return result
    x = eta * np.linalg.eigvalsh(0.5 * (K + np.swapaxes(K, -1, -2)))[:, -1]
    result.diagnostics.stability = float(x.max())
    bad = np.flatnonzero(x >= edge)
    if bad.size:
        i, j = int(bad[0]), int(np.argmax(x))
        warnings.warn(
            f"gradient descent leaves its stable region along the run: eta * lambda_max(K(t,t)) = "
            f"{x[i]:.4g} >= {edge:.4g} first at step {i} (t = {i * eta:g}; largest {x[j]:.4g} at step {j}). "
            "The check at t = 0 passed; feature learning or weight decay grew the NTK.  Past this "
            "edge discrete GD oscillates or diverges at finite width; use a smaller eta",
            UserWarning, stacklevel=3)
    return result


@public
def static_ntk_dynamics(ntk: np.ndarray, y: np.ndarray, eta: float, steps: int) -> np.ndarray:
    """Discrete GD on a static NTK: ``f_{i+1} = f_i + eta K_0[:, :P] (y - f_i[:P])``, ``f_0 = 0``.

    Returns ``(steps, n)`` predictions (training points, then test points).
    """
    P = y.size
    f = np.zeros((steps, ntk.shape[0]))
    for i in range(steps - 1):
        f[i + 1] = f[i] + eta * ntk[:, :P] @ (y - f[i, :P])
    return f


def heavy_ball_ntk_dynamics(K2: np.ndarray, Y: np.ndarray, eta: float, mu: float) -> np.ndarray:
    """The NTK-Euler step with heavy-ball momentum ``mu`` on a two-time NTK (Bordelon & Pehlevan
    (2022), App. L, eq. (122)): ``f(t+1) = f(t) + eta sum_{s<=t} (1 - mu) mu^(t-s) K(t, s)
    Delta(s)``, ``Delta = Y - f[:P]``, ``f(0) = 0``.  ``K2`` is ``(T, n, C, T, n, C)`` (columns
    past the ``P`` training points unused), ``Y`` ``(P, C)``; returns ``(T, n, C)``."""
    T, n, C = K2.shape[:3]
    P = Y.shape[0]
    f = np.zeros((T, n, C))
    deltas = np.zeros((T, P, C))
    for i in range(T - 1):
        deltas[i] = Y - f[i, :P]
        w = (1.0 - mu) * mu ** (i - np.arange(i + 1))
        f[i + 1] = f[i] + eta * np.einsum("j,mcjad,jad->mc", w, K2[i, :, :, :i + 1, :P],
                                          deltas[:i + 1])
    return f


@public
def static_ntk_solve(data: TrainingData, grid: TimeGrid, activation="linear", *, depth=None,
                     hidden_layers=None, check: bool = True, bias: bool = False,
                     weight_variances=None) -> DMFTResult:
    """The ``gamma0 = 0`` DMFT without solving: constant kernels and static-NTK GD predictions.

    Give exactly one of ``depth`` (weight layers) or ``hidden_layers`` (``= depth - 1``).

    The response arrays are returned as zeros (they do not enter at ``gamma0 = 0``; the deep
    linear solver returns the exact lazy responses).  Raises :class:`DomainError` past the
    stability edge when ``check``.  ``bias``: see :func:`lazy_kernels` (``data.kx`` holds
    ``K^x + 1``); ``weight_variances``: see :func:`lazy_kernels`."""
    depth = hidden_layer_count(depth, hidden_layers)       # hidden layers L from here on
    act = resolve_activation(activation)
    phi, _, g, ntk = lazy_kernels(data.kx, act, hidden_layers=depth, bias=bias,
                                  weight_variances=weight_variances)
    if check:
        check_stability(ntk[: data.n_train, : data.n_train], grid.eta)
    T, n = grid.steps, data.n_all
    f = static_ntk_dynamics(ntk, data.y, grid.eta, T)
    zeros = np.zeros((max(depth - 1, 0), T, n, T, n))
    return DMFTResult(grid=grid, data=data, hidden_layers=depth, gamma0=0.0,
                      activation=activation_label(act),
                      phi=_tile_time(phi, T), g=_tile_time(g, T), A=zeros, B=zeros.copy(), f=f,
                      delta=data.y - f[:, : data.n_train], method="static_ntk", closure="ntk",
                      diagnostics=Diagnostics(converged=True), bias=bool(bias))


def _tile_time(K: np.ndarray, T: int) -> np.ndarray:
    """``(L, n, n) -> (L, T, n, T, n)`` constant in time."""
    L, n, _ = K.shape
    return np.ascontiguousarray(np.broadcast_to(K[:, None, :, None, :], (L, T, n, T, n)))


#: From this many nodes per dimension on, the lazy coordinates ``u`` of a non-polynomial activation
#: use the truncated trapezoid rule (:func:`effth.numerics._rules.gauss_trapezoid`, ``[-8.5, 8.5]``):
#: its error falls like ``exp(-2 pi d / h)`` (``d`` the half-width of the strip of analyticity,
#: ``pi / 2`` for tanh of a unit-variance ``u``), Gauss-Hermite's only like ``exp(-c sqrt(nodes))``.
#: Below it Gauss-Hermite is as accurate or better (tanh, the gamma0^2 coefficients on the
#: two-point data: 24 nodes 1.4e-2 (Gauss-Hermite) against 2.5e-2 (trapezoid), 31 nodes 4.8e-3
#: against 5.5e-3, 40 nodes 1.1e-3 against 1.8e-4, 60 nodes 4.7e-5 against 1.2e-8, 80 nodes 2.3e-6
#: against 2e-13).  The two-layer solver (:mod:`effth.dmft.solvers.two_layer`) and the two-layer gamma0-series
#: (:mod:`effth.dmft.series.two_layer`) use it both, so series and solver at equal ``nodes``
#: integrate with the same rule.
TRAPEZOID_FROM = 36


@public
def lazy_rule_kind(activation, nodes: int, rule: str = "auto") -> str:
    """``'hermite'`` or ``'trapezoid'``: the rule for the lazy ``u`` (see ``TRAPEZOID_FROM``).

    ``rule='auto'`` picks Gauss-Hermite for polynomial activations (exact) and below
    ``TRAPEZOID_FROM`` nodes, the trapezoid rule otherwise; ``'hermite'``/``'trapezoid'`` force one.
    """
    if rule not in ("auto", "hermite", "trapezoid"):
        raise DomainError(f"rule={rule!r} must be 'auto', 'hermite' or 'trapezoid'")
    if rule != "auto":
        return rule
    poly = get_activation(activation).polynomial_degree is not None
    return "hermite" if poly or int(nodes) < TRAPEZOID_FROM else "trapezoid"


@public
def lazy_nodes(kx: np.ndarray, nodes: int, *, kind: str = "hermite", extra: int = 1,
               extra_nodes: int | None = None):
    """Tensor rule for ``(u, r)``: ``u ~ N(0, K^x)`` on ``nodes`` points per dimension of the rule
    ``kind``, ``r ~ N(0, I_extra)`` on ``extra_nodes`` (default ``nodes``) Gauss-Hermite points.

    Returns ``u (S, n)``, ``r (S, extra)``, ``w (S,)`` (weights summing to 1; symmetric in ``r``).
    """
    if int(nodes) < 2:
        raise DomainError(f"nodes={nodes!r}: need >= 2")
    return gaussian_tensor_rule(kx, int(nodes), extra=extra, extra_nodes=extra_nodes, kind=kind)


@public
def gauss_hermite_lazy_nodes(kx: np.ndarray, nodes: int):
    """Tensor Gauss-Hermite rule for ``(u, r)``, ``u ~ N(0, K^x)`` and ``r ~ N(0, 1)`` independent.

    Returns ``u (S, n)``, ``r (S,)``, ``w (S,)`` (weights summing to 1; symmetric in ``r``).
    """
    if nodes < 2:
        raise DomainError(f"nodes={nodes!r}: need >= 2")
    u, r, w = gaussian_tensor_rule(kx, nodes, extra=1)
    return u, r[:, 0], w
