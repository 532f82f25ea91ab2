"""The result of a DMFT solve: order parameters on the time grid, predictions, diagnostics."""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass, field

import numpy as np

from effth._display import activation_text, depth_text  # noqa: F401  (re-exported to the series modules)
from effth._results import HiddenLayers
from effth.errors import DomainError
from effth.dmft.grid import TimeGrid, TrainingData, _html_table

__all__ = ["DMFTResult", "Diagnostics"]


@public
@dataclass
class Diagnostics:
    """Convergence record of a fixed-point solve.

    Attributes
    ----------
    iterations : int
        Number of fixed-point sweeps performed.
    residuals : list of float
        Max-abs change of the state (kernels, responses, error signal) after each sweep.
    converged : bool or None
        Whether the last residual fell below ``tol``.  ``None`` when no tolerance was asked
        (``tol = 0``): then nothing was tested, and a Monte-Carlo iteration is only known to have
        run ``iterations`` sweeps (read ``residuals``, ``diverged``).  Deterministic one-pass
        solvers (two-layer) set ``True``.
    tol : float
        The tolerance used.
    seconds : float
        Wall time of the solve.
    diverged : bool
        The residuals grew: the median of the last three is more than
        ``5 x`` that of the first three (Monte-Carlo solver; a :class:`UserWarning` is issued).
    replicas : int
        Independent replicas of the Monte-Carlo solve whose spread gives ``mc_stderr``
        (1: one chain, errors from batches of its last sweep).
    quadrature_error : dict or None
        Two-layer quadrature: estimated max-abs errors of ``'f'``, ``'loss'``, ``'phi'``, ``'g'``
        of the rule used (:func:`~effth.dmft.solve_two_layer`, ``quad_tol``).
    stability : float or None
        The largest ``eta lambda_max(K(t, t))`` met along the run (GD on the NTK at each step is
        stable below 2).
    criterion : str or None
        The stopping rule of an adaptive Monte-Carlo solve (``solve_monte_carlo`` with
        ``iterations=None``), in words; ``None`` for a fixed number of sweeps.
    drift : list of float
        Adaptive Monte-Carlo solve: after each sweep of the last time window, the largest
        ``|change| / standard error`` of the monitored order parameters between the means of the
        last two blocks of sweeps (``nan`` while too few sweeps were run); the solve stopped when
        it fell below ``drift_z``.
    drift_z : float or None
        The threshold of ``drift``.
    """

    iterations: int = 0
    residuals: list = field(default_factory=list)
    converged: bool | None = False
    tol: float = 0.0
    seconds: float = 0.0
    diverged: bool = False
    replicas: int = 1
    quadrature_error: dict | None = None
    stability: float | None = None
    criterion: str | None = None
    drift: list = field(default_factory=list)
    drift_z: float | None = None

    def __repr__(self) -> str:
        last = f"{self.residuals[-1]:.3g}" if self.residuals else "-"
        extra = ", diverged=True" if self.diverged else ""
        return (f"Diagnostics(iterations={self.iterations}, converged={self.converged}, "
                f"last_residual={last}, tol={self.tol:g}{extra}, seconds={self.seconds:.3g})")

    def _repr_html_(self) -> str:
        last = f"{self.residuals[-1]:.3g}" if self.residuals else "-"
        return _html_table("Diagnostics", [("iterations", self.iterations),
                                           ("converged", self.converged),
                                           ("last residual", last), ("tol", f"{self.tol:g}"),
                                           ("seconds", f"{self.seconds:.3g}")])


def check_layer(layer, layers: tuple, name: str) -> int:
    """Book layer number ``layer`` (1..L) as an index into the layer axis, else DomainError."""
    if layer is None:
        raise DomainError(f"{name!r} is per layer: give layer= one of {list(layers)}")
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or int(layer) not in layers:
        raise DomainError(f"layer={layer!r} is not held here; layers are {list(layers)} "
                          "(book numbering, 1 = first hidden layer)")
    return int(layer) - 1


@public
@dataclass
class DMFTResult(HiddenLayers):
    """Order parameters of the infinite-width DMFT of Bordelon & Pehlevan (2022) on a discrete GD grid.

    Layer ``ell = 1 .. L`` sits at index ``ell - 1`` of the layer axis.  Sample axes have length
    ``n = P + Q`` (training points first, then test points).  Kernels are indexed
    ``[t, mu, s, alpha]``; reshape to ``(T n, T n)`` for the matrix form of Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71).

    Attributes
    ----------
    grid : TimeGrid
        ``t_i = i * eta``, ``i < T``.
    data : TrainingData
        ``K^x`` (``Phi^0``), targets, ``P``.
    hidden_layers : int
        ``L``, the number of hidden layers (the paper's :math:`L`, fields ``h^1 .. h^L``).
    depth : int
        Number of weight layers, ``hidden_layers + 1`` (effth's convention, PDLT's :math:`L`).
    layers : tuple of int
        Book numbers ``1 .. hidden_layers`` of the layers ``phi`` and ``g`` hold.
    gamma0 : float
        Feature-learning strength ``gamma_0`` (``gamma = gamma_0 sqrt(N)``).
    activation : str
        Activation name.
    phi : ndarray, shape (L, T, n, T, n)
        Feature kernels ``Phi^ell_{mu alpha}(t, s) = <phi(h^ell_mu(t)) phi(h^ell_alpha(s))>``
        (Bordelon & Pehlevan (2022), eq. (10)/(54)).
    g : ndarray, shape (L, T, n, T, n)
        Gradient kernels ``G^ell_{mu alpha}(t, s) = <g^ell_mu(t) g^ell_alpha(s)>``; for deep linear
        networks ``g^ell`` is sample independent and the array is broadcast over samples.
    A, B : ndarray, shapes (L-1, T, n, T, nA) and (L-1, T, nB, T, n)
        Response functions in the paper's scaled convention (D.7; Bordelon & Pehlevan (2022), App. D (responses)):
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
        ``'exact'`` (f from the single-site average, the exact limit of discrete GD, Bordelon & Pehlevan (2022), eqs. (3), (21), App. M) or
        ``'ntk'`` (NTK-Euler, ``f_{i+1} = f_i + eta K(t_i, t_i) Delta_i``).
    diagnostics : Diagnostics
        Iterations and residual history.
    bias : bool
        Trainable biases on every preactivation ``h^1 .. h^L`` (Bordelon & Pehlevan (2022), App. H).  The first layer's
        bias is folded into the input kernel (``data.kx`` holds ``K^x + 1``, the covariance of
        ``u^1``); the deeper ones add ``G^{ell+1}`` to the NTK: ``K = G^1 (K^x + 1) +
        sum_{ell=1}^{L-1} G^{ell+1} (Phi^ell + 1) + Phi^L`` (Bordelon & Pehlevan (2022), App. D.8, G-M, corrected here).
    fields : ndarray, shape (L, S, T, n), or None
        Samples of the single-site preactivations ``h^ell_mu(t)`` from the last sweep
        (``solve_monte_carlo(keep_fields=True)``).
    mc_stderr : dict or None
        Monte-Carlo standard errors (same shapes as the arrays they belong to: ``'phi'``, ``'g'``,
        ``'f'``), estimated from independent sample batches (or from the spread of the last sweeps
        with ``average``); ``None`` for deterministic solvers.  Read them with :meth:`stderr`.

    Notes
    -----
    Read every quantity by name with :meth:`value` and :meth:`stderr` (``docs/conventions.md``):
    ``"f"`` ``(T, n[, C])``, ``"loss"`` ``(T,)``, ``"phi"``/``"g"`` with ``layer=ℓ``
    ``(T, n, T, n)`` (``g``: ``(T, n, T, n, C, C)`` for ``C`` outputs) and ``"ntk"`` (equal time,
    ``(T, n, n[, C, C])``) -- the same names and shapes as
    :class:`effth.simulation.TrainingRun`, so ``dmft.value("f") - run.value("f")`` compares them.
    """

    grid: TimeGrid
    data: TrainingData
    hidden_layers: int
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
    mc_stderr: dict | None = None
    bias: bool = False
    fields: np.ndarray | None = None

    # ----------------------------------------------------------------- conventions

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """The prediction ``name`` (``docs/conventions.md``, Results).

        Parameters
        ----------
        name : {'f', 'loss', 'phi', 'g', 'ntk', 'delta'}
            ``'f'`` ``(T, n[, C])``; ``'loss'`` ``(T,)``; ``'phi'``, ``'g'`` two-time
            ``(T, n, T, n)`` (``g``: ``(T, n, T, n, C, C)`` with ``C`` outputs) of hidden layer
            ``layer``; ``'ntk'`` equal-time ``(T, n, n[, C, C])``; ``'delta'`` ``(T, P[, C])``.
        layer : int, optional
            Book layer number ``1 .. hidden_layers``, for ``'phi'``, ``'g'`` only (``None`` there:
            every layer, with a leading layer axis, layer ``l`` at index ``l - 1``).

        Raises
        ------
        DomainError
            Unknown name, or a layer not held (or given for a quantity without layers).
        """
        return self._get(name, layer, self._value_arrays)

    def stderr(self, name: str, layer: int | None = None) -> np.ndarray | None:
        """Monte-Carlo standard error of :meth:`value` (same shape), or ``None`` where the solver
        is deterministic or gives no error for ``name`` (the Monte-Carlo solvers estimate it for
        ``'phi'``, ``'g'`` and, with the exact closure, ``average`` or ``replicas``, ``'f'`` and
        ``'loss'``, the loss from the spread of the batches' own losses)."""
        self._get(name, layer, self._value_arrays)               # validate name and layer
        if not self.mc_stderr or name not in self.mc_stderr:
            return None
        x = self.mc_stderr[name]
        return x if name not in ("phi", "g") or layer is None else x[int(layer) - 1]

    _PER_LAYER = ("phi", "g")
    _NAMES = ("f", "loss", "phi", "g", "ntk", "delta")

    def _value_arrays(self, name):
        return {"f": lambda: self.f, "loss": lambda: self.loss, "phi": lambda: self.phi,
                "g": lambda: self.g, "ntk": lambda: self.ntk, "delta": lambda: self.delta}[name]()

    def _get(self, name, layer, arrays):
        if name not in self._NAMES:
            raise DomainError(f"unknown quantity name={name!r}; choose from {list(self._NAMES)}")
        if name in self._PER_LAYER:
            if layer is None:                          # every layer, layer l at index l - 1
                return arrays(name)
            return arrays(name)[check_layer(layer, self.layers, name)]
        if layer is not None:
            raise DomainError(f"{name!r} has no layer axis; drop layer={layer!r}")
        return arrays(name)

    def __repr__(self) -> str:
        T, n = self.grid.steps, self.data.n_all
        C = f", outputs={self.f.shape[-1]}" if self.f.ndim == 3 else ""
        return (f"DMFTResult({self.method}, {depth_text(self.depth)}, activation={activation_text(self.activation)}, "
                f"gamma0={self.gamma0:g}, eta={self.grid.eta:g}, steps={T}, inputs={n}"
                f"{C}, closure={self.closure})")

    def _repr_html_(self) -> str:
        rows = [("method", self.method), ("depth", self.depth),
                ("hidden_layers", self.hidden_layers),
                ("activation", activation_text(self.activation)), ("gamma0", f"{self.gamma0:g}"),
                ("eta", f"{self.grid.eta:g}"), ("steps T", self.grid.steps),
                ("samples n (P train)", f"{self.data.n_all} ({self.n_train})"),
                ("closure", self.closure), ("bias", self.bias),
                ("final loss", f"{float(self.loss[-1]):.4g}"),
                ("converged", self.diagnostics.converged)]
        return _html_table("DMFTResult", rows)

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
        """``(T,)`` training loss ``1/2 sum_mu Delta_mu(t)^2`` (Bordelon & Pehlevan (2022), eqs. (3), (14))."""
        return 0.5 * np.sum(self.delta.reshape(self.delta.shape[0], -1) ** 2, axis=1)

    @property
    def phi0(self) -> np.ndarray:
        """``(T, n, T, n)`` input kernel ``Phi^0 = K^x`` tiled over times."""
        T, n = self.grid.steps, self.data.n_all
        return np.broadcast_to(self.data.kx[None, :, None, :], (T, n, T, n))

    @property
    def ntk_two_time(self) -> np.ndarray:
        """``(T, n, T, n)`` NTK ``K(t, s) = sum_{ell=0}^{L} G^{ell+1} Phi^ell`` (Bordelon &
        Pehlevan (2022), eq. (19)), with ``Phi^0 = K^x`` and ``G^{L+1} = 1``;
        ``(T, n, T, n, C, C)`` for ``C`` outputs (App. I, eq. (95))."""
        L = self.hidden_layers
        if self.g.ndim == 7:                       # C outputs: K^{cc'} (eq. (95))
            C = self.g.shape[-1]
            out = self.g[0] * self.phi0[..., None, None]
            for ell in range(1, L):
                out = out + self.g[ell] * (self.phi[ell - 1] + float(self.bias))[..., None, None]
            return out + self.phi[L - 1][..., None, None] * np.eye(C)
        out = self.g[0] * self.phi0
        for ell in range(1, L):
            out = out + self.g[ell] * (self.phi[ell - 1] + float(self.bias))
        return out + self.phi[L - 1]

    @property
    def ntk(self) -> np.ndarray:
        """``(T, n, n)`` (or ``(T, n, n, C, C)``) equal-time NTK ``K(t_i, t_i)`` per step, as
        :attr:`effth.simulation.TrainingRun.ntk`; the two-time NTK is :attr:`ntk_two_time`."""
        K = self.ntk_two_time
        idx = np.arange(self.grid.steps)
        return K[idx, :, idx, :]

    @property
    def ntk_diag(self) -> np.ndarray:
        """Alias of :attr:`ntk` (the equal-time NTK)."""
        return self.ntk

    def equal_time(self, name: str) -> np.ndarray:
        """Equal-time diagonal ``X(t_i, t_i)`` of ``'phi'`` or ``'g'``: shape ``(L, T, n, n)``."""
        X = getattr(self, name)
        idx = np.arange(self.grid.steps)
        return np.moveaxis(X[:, idx, :, idx, :], 0, 1)
