r"""Linear models and their kernel duals (PDLT §10.4).

A linear model :math:`z_i(x)=\sum_{j=0}^{n_f}W_{ij}\phi_j(x)` (10.119) trained on the MSE has the
normal equations (10.121)–(10.123),
:math:`W^\star=y^\top\Phi\,M^{-1}` with :math:`M=\Phi^\top\Phi` (:math:`\Phi` the
:math:`N_\mathcal A\times(n_f+1)` feature matrix of the training inputs). With more features than
training points :math:`M` is singular and the book regularizes, :math:`M\to M+2a\mathbb 1`
(10.124); :math:`a\to0^+` is the minimum-norm solution, which is what :func:`linear_model`
returns for ``ridge=0``. The prediction is then the **kernel method** (10.132),

.. math::
    z_i(x_{\dot\beta})=\sum_{\tilde\alpha_1\tilde\alpha_2}k_{\dot\beta\tilde\alpha_1}
    \tilde k^{\tilde\alpha_1\tilde\alpha_2}y_{i;\tilde\alpha_2},\qquad
    k_{\delta_1\delta_2}=\sum_j\phi_j(x_{\delta_1})\phi_j(x_{\delta_2})\ \ (10.127),

by the identity (10.131). A network at initialization is such a model in its random features
(:func:`effth.simulation.network_features`), whose kernel is the empirical NTK (10.140)–(10.141):
at infinite width the kernel method with :math:`\Theta^{(L)}` is
:func:`effth.pdlt.predict`.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass
from typing import Any

import numpy as np

from effth._display import html_table
from effth.errors import DomainError

from effth._validate import finite_array, nonnegative

__all__ = ["LinearModel", "linear_model"]


@public
@dataclass(frozen=True, repr=False)
class LinearModel:
    r"""A trained linear model (PDLT (10.119)–(10.125)).

    ``value(name)`` with ``name`` in ``"mean"`` (test predictions (10.125), ``(Q,)`` or
    ``(Q, C)``), ``"train_mean"``, ``"weights"`` (:math:`W^\star`, ``(F,)`` or ``(F, C)``) and
    ``"kernel"`` (:math:`k` (10.127) on training then test inputs). ``stderr`` is ``None``;
    ``layers`` is ``()``.
    """

    weights: np.ndarray
    train_mean: np.ndarray
    mean: np.ndarray
    kernel: np.ndarray
    ridge: float
    rank: int

    names = ("mean", "train_mean", "weights", "kernel")
    layers = ()

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        if layer is not None:
            raise DomainError("a linear model has no layers: call value(name)")
        if name not in self.names:
            raise DomainError(f"unknown name {name!r}; available: {', '.join(self.names)}")
        return getattr(self, name)

    def stderr(self, name: str, layer: int | None = None) -> None:
        self.value(name, layer)
        return None

    def __repr__(self) -> str:
        F = self.weights.shape[0]
        return (f"LinearModel({F} features, {len(self.train_mean)} training / {len(self.mean)} test inputs, "
                f"rank {self.rank}, ridge={self.ridge:g})")

    def _repr_html_(self) -> str:
        return html_table("LinearModel (PDLT (10.119))",
                          [("features", self.weights.shape[0]), ("rank", self.rank),
                           ("ridge a", self.ridge), ("training inputs", len(self.train_mean)),
                           ("test inputs", len(self.mean))])


@public
def linear_model(features_train: Any, y_train: Any, features_test: Any, *, ridge: float = 0.0) -> LinearModel:
    r"""Fit the linear model (10.119) on the MSE and predict (10.125).

    Parameters
    ----------
    features_train : array_like (P, F)
        :math:`\phi_j(x_{\tilde\alpha})`, one row per training input (include a constant column
        for :math:`\phi_0=1` if wanted).
    y_train : array_like (P,) or (P, C)
    features_test : array_like (Q, F)
    ridge : float
        :math:`a\ge0` of (10.124): :math:`M\to M+2a\mathbb 1`. ``0`` gives the least-squares
        solution of minimum norm (the :math:`a\to0^+` limit; by (10.131) the kernel method
        (10.132) when the training kernel is invertible).

    Returns
    -------
    LinearModel
    """
    Phi = finite_array(features_train, "features_train", (2,))
    Psi = finite_array(features_test, "features_test", (2,))
    y = finite_array(y_train, "y_train", (1, 2))
    if Phi.shape[1] != Psi.shape[1]:
        raise DomainError(f"features_train has {Phi.shape[1]} features and features_test "
                          f"{Psi.shape[1]}: they must be the same functions")
    if y.shape[0] != Phi.shape[0]:
        raise DomainError(f"y_train has {y.shape[0]} rows for {Phi.shape[0]} training inputs")
    if Phi.shape[0] < 1 or Phi.shape[1] < 1 or Psi.shape[0] < 1:
        raise DomainError(f"linear_model needs at least one training input, one test input and one "
                          f"feature; got features_train {Phi.shape}, features_test {Psi.shape}")
    a = nonnegative(ridge, "ridge")
    # an overflow-free scale: the normal equations square the features
    scale = float(max(np.max(np.abs(Phi)), np.max(np.abs(Psi))))
    logs = 2 * np.log10(max(scale, 1e-300)) + np.log10(max(Phi.shape) * (1 + np.max(np.abs(y))))
    if logs > 300 or a > 1e300:
        raise DomainError(f"features up to {scale:.3g} overflow the normal equations (their squares "
                          "exceed float64); rescale the features (the predictions of ridge=0 are "
                          "unchanged by a common scale)")
    if a == 0.0:
        W, _, rank, _ = np.linalg.lstsq(Phi, y, rcond=None)
    elif Phi.shape[1] <= Phi.shape[0]:
        M = Phi.T @ Phi + 2.0 * a * np.eye(Phi.shape[1])          # (10.124)
        W = np.linalg.solve(M, Phi.T @ y)
        rank = Phi.shape[1]
    else:
        # more features than inputs: the same W by the push-through identity
        # (Phi^T Phi + 2a)^-1 Phi^T = Phi^T (Phi Phi^T + 2a)^-1, solved in sample space, where the
        # system is well conditioned for small a (the feature-space one has condition ~ 1/a)
        W = Phi.T @ np.linalg.solve(Phi @ Phi.T + 2.0 * a * np.eye(Phi.shape[0]), y)
        rank = Phi.shape[0]
    both = np.vstack([Phi, Psi])
    return LinearModel(weights=W, train_mean=Phi @ W, mean=Psi @ W, kernel=both @ both.T,
                       ridge=a, rank=int(rank))
