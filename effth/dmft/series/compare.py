r"""The approximation schemes of Bordelon & Pehlevan (2022), §5 side by side: static NTK, gradient
independence, the :math:`\gamma_0`-series, and the full DMFT.

This is the one place where the series meets the solvers; the series modules themselves never
import a solver (they are checked against them).
"""

from __future__ import annotations

from effth._signature import public

from effth._display import depth_text

from dataclasses import dataclass, field

import numpy as np

from effth.errors import DomainError
from effth.dmft.solvers.deep_linear import solve_deep_linear
from effth.dmft.solvers.monte_carlo import solve_monte_carlo
from effth.dmft.series.gamma0 import gamma0_series
from effth.dmft.grid import TimeGrid, prepare_data
from effth._progress import progress_bar
from effth.dmft.solvers.lazy import (hidden_layer_count, is_linear, require_smooth,
                   resolve_activation, static_ntk_solve)
from effth.dmft.result import _html_table, activation_text
from effth.dmft.solvers.two_layer import solve_two_layer

__all__ = ["ApproximationComparison", "compare_approximations"]


@public
@dataclass
class ApproximationComparison:
    r"""Predictions, loss and equal-time NTK of each approximation on one GD grid.

    Attributes
    ----------
    times : ndarray (T,)
    gamma0 : float
    hidden_layers : int
        Hidden layers :math:`L` (the paper's); ``depth = hidden_layers + 1`` weight layers.
    activation : str or Activation
    order : int
    f : dict
        ``method -> (T, n)`` predictions.  Methods: ``'dmft'`` (full solve), ``'static_ntk'``
        (:math:`\gamma_0\to0`), ``'gradient_independent'`` (``A = B = 0``; equals the DMFT at
        one hidden layer), ``'series'`` (strict truncation :math:`\sum_{k\le K}\gamma_0^{2k}X_{2k}`),
        ``'series_ntk'`` (Bordelon & Pehlevan (2022), §5, Fig. 4's "Pert.": GD on the truncated-series NTK).
    loss : dict
        ``method -> (T,)``.
    ntk : dict
        ``method -> (T, n, n)`` equal-time NTK.
    """

    times: np.ndarray
    gamma0: float
    hidden_layers: int
    activation: object
    order: int
    f: dict = field(repr=False)
    loss: dict = field(repr=False)
    ntk: dict = field(repr=False)

    @property
    def depth(self) -> int:
        """Number of weight layers, ``hidden_layers + 1``."""
        return self.hidden_layers + 1

    def __repr__(self) -> str:
        return (f"ApproximationComparison({depth_text(self.depth)}, "
                f"activation={activation_text(self.activation)}, gamma0={self.gamma0:g}, "
                f"order={self.order}, steps={len(self.times)}, methods={list(self.f)})")

    def _repr_html_(self) -> str:
        rows = [(m, f"max|f - f_dmft| = {ef:.3g}, rel. NTK error = {ek:.3g}")
                for m, (ef, ek) in self.errors().items()]
        return _html_table(repr(self), rows)

    def errors(self) -> dict:
        """``method -> (max |f - f_dmft|, max |K(t,t) - K_dmft(t,t)| / max |K_dmft|)`` over the grid."""
        ref_f, ref_k = self.f["dmft"], self.ntk["dmft"]
        scale = float(np.max(np.abs(ref_k)))
        return {m: (float(np.max(np.abs(self.f[m] - ref_f))),
                    float(np.max(np.abs(self.ntk[m] - ref_k))) / scale)
                for m in self.f if m != "dmft"}

    def table(self) -> str:
        """Plain-text table: final loss, max prediction error and relative NTK error vs the DMFT."""
        rows = [(f"gamma0 = {self.gamma0:g}, depth = {self.depth}, activation = {activation_text(self.activation)}, "
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


@public
def compare_approximations(X=None, y=None, *, depth: int | None = None,
                           hidden_layers: int | None = None, gamma0: float, eta: float,
                           steps: int, order: int = 2, activation="linear", kernel=None,
                           nodes: int = 24, samples: int = 4000, iterations: int = 25,
                           seed=0, progress: bool | None = None) -> ApproximationComparison:
    r"""Solve the full DMFT and each approximation of Bordelon & Pehlevan (2022), §5 on the same
    data and grid.

    Parameters
    ----------
    X, y, kernel
        Training data.
    depth, hidden_layers : int
        Give exactly one: weight layers, or hidden layers ``L = depth - 1``.
    gamma0, eta, steps
        Feature-learning strength and GD grid.
    order : int
        Truncation of the :math:`\gamma_0`-series (even).
    activation : str, Activation or sympy.Expr
        ``'linear'`` (any depth); a nonlinear activation with one hidden layer (quadrature solver
        with ``nodes`` Gauss-Hermite points per dimension); or a smooth nonlinear activation with
        ``hidden_layers >= 2``: the full DMFT and the gradient-independence ansatz by the Monte-Carlo
        solver (``samples``, ``iterations``, ``seed``) and the series (its default trapezoid rule
        in ``u``; ``nodes`` is for the two-layer quadrature), all with the NTK closure.
    progress : bool, optional
        Progress bar over the solves (``docs/conventions.md``).

    Returns
    -------
    ApproximationComparison
    """
    L = hidden_layer_count(depth, hidden_layers)          # hidden layers from here on
    data = prepare_data(X, y, kernel=kernel)
    act = resolve_activation(activation)
    linear = is_linear(act)
    if not np.isfinite(gamma0):
        raise DomainError(f"gamma0={gamma0!r} must be finite")
    if not linear:
        require_smooth(act, "the gamma0-series")
    deep_nonlinear = not linear and L > 1
    with progress_bar(4, "DMFT approximations", progress=progress, unit="solve") as bar:
        ser = gamma0_series(kernel=data.kx, y=data.y, hidden_layers=L, eta=eta, steps=steps,
                            order=order, activation=act, nodes=None if deep_nonlinear else nodes,
                            closure="ntk" if deep_nonlinear else "exact", progress=False)
        bar.update()
        lazy = static_ntk_solve(data, TimeGrid(eta, steps), act, hidden_layers=L)
        bar.update()
        if linear:
            full = solve_deep_linear(kernel=data.kx, y=data.y, hidden_layers=L, gamma0=gamma0,
                                     eta=eta, steps=steps)
            bar.update()
            gi = solve_deep_linear(kernel=data.kx, y=data.y, hidden_layers=L, gamma0=gamma0,
                                   eta=eta, steps=steps, gradient_independent=True) if L > 1 else full
        elif deep_nonlinear:
            mc = dict(kernel=data.kx, y=data.y, hidden_layers=L, gamma0=gamma0, eta=eta,
                      steps=steps, activation=act, samples=samples, iterations=iterations,
                      seed=seed, closure="ntk", progress=False)
            full = solve_monte_carlo(**mc)
            bar.update()
            gi = solve_monte_carlo(gradient_independent=True, **mc)
        else:
            full = solve_two_layer(kernel=data.kx, y=data.y, gamma0=gamma0, eta=eta, steps=steps,
                                   activation=act, nodes=nodes, two_time=False)
            bar.update()
            gi = full
        bar.update()
    k_ser = ser.evaluate(gamma0, name="ntk")
    f_ser = ser.evaluate(gamma0, name="f")
    f_pert = _gd_on_ntk(k_ser, data.y, float(eta))
    P = data.n_train

    def loss_of(f):
        return 0.5 * np.sum((data.y - f[:, :P]) ** 2, axis=1)

    f = {"dmft": full.f, "static_ntk": lazy.f, "gradient_independent": gi.f, "series": f_ser,
         "series_ntk": f_pert}
    ntk = {"dmft": full.ntk, "static_ntk": lazy.ntk, "gradient_independent": gi.ntk,
           "series": k_ser, "series_ntk": k_ser}
    loss = {m: loss_of(v) for m, v in f.items()}
    loss["series"] = ser.evaluate(gamma0, name="loss")
    return ApproximationComparison(times=ser.times, gamma0=float(gamma0), hidden_layers=L,
                                   activation=ser.activation, order=int(order), f=f, loss=loss,
                                   ntk=ntk)
