r"""The approximation schemes of seed 000 §5 side by side (spec §5): static NTK, gradient
independence, the :math:`\gamma_0`-series, and the full DMFT.

This is the one place where the series meets the solvers; the series modules themselves never
import a solver (they are checked against them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import DomainError
from .deep_linear import solve_deep_linear
from .nonlinear import solve_monte_carlo
from .gamma_series import gamma0_series
from .grid import TimeGrid, prepare_data
from .lazy import _LINEAR, static_ntk_solve
from .two_layer import solve_two_layer

__all__ = ["ApproximationComparison", "compare_approximations"]


@dataclass
class ApproximationComparison:
    r"""Predictions, loss and equal-time NTK of each approximation on one GD grid.

    Attributes
    ----------
    times : ndarray (T,)
    gamma0 : float
    depth : int
    activation : str
    f : dict
        ``method -> (T, n)`` predictions.  Methods: ``'dmft'`` (full solve), ``'static_ntk'``
        (:math:`\gamma_0\to0`), ``'gradient_independent'`` (``A = B = 0``; equals the DMFT at
        ``depth=1``), ``'series'`` (strict truncation :math:`\sum_{k\le K}\gamma_0^{2k}X_{2k}`),
        ``'series_ntk'`` (spec §5 item 3, "Pert.": GD on the truncated-series NTK).
    loss : dict
        ``method -> (T,)``.
    ntk : dict
        ``method -> (T, n, n)`` equal-time NTK.
    """

    times: np.ndarray
    gamma0: float
    depth: int
    activation: str
    order: int
    f: dict = field(repr=False)
    loss: dict = field(repr=False)
    ntk: dict = field(repr=False)

    def errors(self) -> dict:
        """``method -> (max |f - f_dmft|, max |K(t,t) - K_dmft(t,t)| / max |K_dmft|)`` over the grid."""
        ref_f, ref_k = self.f["dmft"], self.ntk["dmft"]
        scale = float(np.max(np.abs(ref_k)))
        return {m: (float(np.max(np.abs(self.f[m] - ref_f))),
                    float(np.max(np.abs(self.ntk[m] - ref_k))) / scale)
                for m in self.f if m != "dmft"}

    def table(self) -> str:
        """Plain-text table: final loss, max prediction error and relative NTK error vs the DMFT."""
        rows = [(f"gamma0 = {self.gamma0:g}, depth = {self.depth}, activation = {self.activation}, "
                 f"series order gamma0^{self.order}"),
                f"{'method':<22}{'final loss':>14}{'max|f-f_DMFT|':>16}{'NTK rel. err':>14}"]
        err = self.errors()
        for m in self.f:
            e = err.get(m, (0.0, 0.0))
            rows.append(f"{m:<22}{self.loss[m][-1]:>14.6g}{e[0]:>16.3e}{e[1]:>14.3e}")
        return "\n".join(rows)


def _gd_on_ntk(ntk_diag, y, eta):
    """``f_{i+1} = f_i + eta K(t_i, t_i)[:, :P] (y - f_i[:P])`` with a time-dependent NTK."""
    T, n, _ = ntk_diag.shape
    P = y.size
    f = np.zeros((T, n))
    for i in range(T - 1):
        f[i + 1] = f[i] + eta * ntk_diag[i][:, :P] @ (y - f[i, :P])
    return f


def compare_approximations(X=None, y=None, *, depth: int, gamma0: float, eta: float, steps: int,
                           order: int = 2, activation: str = "linear", kernel=None,
                           nodes: int = 24, samples: int = 4000, iterations: int = 25,
                           seed=0) -> ApproximationComparison:
    r"""Solve the full DMFT and each approximation of spec §5 on the same data and grid.

    Parameters
    ----------
    X, y, kernel
        Training data.
    depth, gamma0, eta, steps
        Network and GD grid (``depth`` hidden layers).
    order : int
        Truncation of the :math:`\gamma_0`-series (even).
    activation : str
        ``'linear'`` (any depth); a nonlinear activation with ``depth=1`` (quadrature solver with
        ``nodes`` Gauss-Hermite points per dimension); or a smooth nonlinear activation with
        ``depth >= 2``: the full DMFT and the gradient-independence ansatz by the Monte-Carlo
        solver (``samples``, ``iterations``, ``seed``) and the series (its default trapezoid rule
        in ``u``; ``nodes`` is for the two-layer quadrature), all with the NTK closure.

    Returns
    -------
    ApproximationComparison
    """
    data = prepare_data(X, y, kernel=kernel)
    linear = activation in _LINEAR
    if not np.isfinite(gamma0):
        raise DomainError(f"gamma0={gamma0!r} must be finite")
    deep_nonlinear = not linear and depth > 1
    ser = gamma0_series(kernel=data.kx, y=data.y, depth=depth, eta=eta, steps=steps, order=order,
                        activation=activation, nodes=None if deep_nonlinear else nodes,
                        closure="ntk" if deep_nonlinear else "exact")
    lazy = static_ntk_solve(data, TimeGrid(float(eta), int(steps)), depth,
                            "linear" if linear else activation)
    if linear:
        full = solve_deep_linear(kernel=data.kx, y=data.y, depth=depth, gamma0=gamma0, eta=eta,
                                 steps=steps)
        gi = solve_deep_linear(kernel=data.kx, y=data.y, depth=depth, gamma0=gamma0, eta=eta,
                               steps=steps, gradient_independent=True) if depth > 1 else full
    elif deep_nonlinear:
        mc = dict(kernel=data.kx, y=data.y, depth=depth, gamma0=gamma0, eta=eta, steps=steps,
                  activation=activation, samples=samples, iterations=iterations, seed=seed,
                  closure="ntk")
        full = solve_monte_carlo(**mc)
        gi = solve_monte_carlo(gradient_independent=True, **mc)
    else:
        full = solve_two_layer(kernel=data.kx, y=data.y, gamma0=gamma0, eta=eta, steps=steps,
                               activation=activation, nodes=nodes, two_time=False)
        gi = full
    k_ser = ser.evaluate(gamma0, name="ntk")
    f_ser = ser.evaluate(gamma0, name="f")
    f_pert = _gd_on_ntk(k_ser, data.y, float(eta))
    P = data.n_train

    def loss_of(f):
        return 0.5 * np.sum((data.y - f[:, :P]) ** 2, axis=1)

    f = {"dmft": full.f, "static_ntk": lazy.f, "gradient_independent": gi.f, "series": f_ser,
         "series_ntk": f_pert}
    ntk = {"dmft": full.ntk_diag, "static_ntk": lazy.ntk_diag, "gradient_independent": gi.ntk_diag,
           "series": k_ser, "series_ntk": k_ser}
    loss = {m: loss_of(v) for m, v in f.items()}
    loss["series"] = ser.evaluate(gamma0, name="loss")
    return ApproximationComparison(times=ser.times, gamma0=float(gamma0), depth=int(depth),
                                   activation=ser.activation, order=int(order), f=f, loss=loss,
                                   ntk=ntk)
