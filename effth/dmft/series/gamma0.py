r"""Perturbation theory in the feature-learning strength :math:`\gamma_0` (Bordelon & Pehlevan (2022), §5.2, App. P).

Around the lazy Gaussian process (:math:`h=u`, :math:`z=r`, static NTK) every order parameter of
the DMFT is an even power series in :math:`\gamma_0` (Bordelon & Pehlevan (2022), §5.2, App. P.1, §4.1),

.. math:: X(\gamma_0) = X_0 + \gamma_0^2X_2 + \gamma_0^4X_4 + \dots,

whose coefficients are Gaussian expectations over the lazy process times functions of time built
from the lazy error :math:`\Delta^0(t)`.  :func:`gamma0_series` returns a :class:`Gamma0Series`
holding the coefficients on the discrete gradient-descent grid of the DMFT solvers (Bordelon & Pehlevan (2022), App. M),
to any requested order:

* deep linear networks, any depth (:mod:`effth.dmft.series.deep_linear`): the closed equations of spec
  §2.7 run in truncated power-series arithmetic -- exact Taylor coefficients, in floating point or
  in rational arithmetic (``exact=True``);
* two-layer networks (``depth=1``), any activation with enough derivatives
  (:mod:`effth.dmft.series.two_layer`): the single-site fields expanded in :math:`\gamma_0` and the
  Gaussian atoms of each order evaluated on a Gauss-Hermite rule for the lazy :math:`(u, r)`;
* deep nonlinear networks, any depth, smooth activations, the leading correction
  :math:`\gamma_0^2` (:mod:`effth.dmft.series.deep_nonlinear`): lazy responses :math:`A^\ell_0`,
  :math:`B^\ell_0` (with the equal-time part), the per-layer field expansion, and Price propagation
  of the covariance corrections up (:math:`\Phi_2`) and down (:math:`G_2`) the network; predictions
  by the NTK closure;
* deep nonlinear networks to any order (:mod:`effth.dmft.series.deep_jets`): the sources' covariance
  corrections realised as formal Gaussians :math:`u=u_0+\sum_j\gamma_0^jB_j\zeta_j`
  (:math:`B_jB_j^\top=\Phi^{\ell-1}_{2j}`), the fields and forward tangents (responses) solved in
  truncated series at the points of a Gauss-Hermite rule for the lazy :math:`(u_0, r_0)` times a
  sparse rule exact in :math:`\zeta`, and the current top order of the neighbouring layers added
  by the same lazy maps as at :math:`\gamma_0^2`.  Its cost grows with the number of samples and
  grid points (tangents ``(T n)^3``; formal dimensions ``~4n`` per order): meant for ``n <= 2``.

The leading correction is also available in closed form and as LaTeX
(:mod:`effth.dmft.series.leading`; Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here for deep linear networks, with the corrected NTK prefactor
:math:`L(L+1)^2(L+2)/12`, and Bordelon & Pehlevan (2022), App. P (two-layer, derived here) for two-layer networks as four-point Gaussian atoms):
:meth:`Gamma0Series.latex`, :func:`gamma0_leading_order`.

Naming: ``order`` is always a power of :math:`\gamma_0` (``order=4`` means through
:math:`\gamma_0^4`); ``depth`` is the number of hidden layers :math:`L` of Bordelon & Pehlevan (2022).
"""

from __future__ import annotations

from effth._signature import public

from effth._display import depth_text

import warnings
from dataclasses import dataclass, field

import numpy as np
from effth._results import HiddenLayers

from effth.errors import DomainError, NotDerivedError
from effth.printing import latex as _latex
from effth.dmft.series.deep_jets import deep_nonlinear_series_arrays
from effth.dmft.series.deep_linear import deep_linear_series_arrays
from effth.dmft.series.deep_nonlinear import deep_nonlinear_order2_arrays
from effth.dmft.series.leading import (
    deep_linear_order2_exprs,
    deep_linear_order2_numeric,
    evaluate_two_layer_order2,
    lazy_time_functions,
    two_layer_order2_exprs,
)
from effth.dmft.series.two_layer import two_layer_series_arrays
from effth.dmft.grid import TimeGrid, TrainingData, prepare_data
from effth.dmft.solvers.lazy import (activation_label, check_stability, hidden_layer_count, is_linear, lazy_kernels,
                   require_smooth, resolve_activation)
from effth.dmft.result import _html_table, activation_text, check_layer

__all__ = ["Gamma0Series", "gamma0_leading_order", "gamma0_series"]

_NAMES = ("f", "delta", "loss", "ntk", "phi", "g", "A", "B")

_SYMBOLS = {
    "f": r"f_{\mu}(t)", "delta": r"\Delta_{\mu}(t)", "loss": r"\mathcal{L}(t)",
    "ntk": r"K^{\mathrm{NTK}}_{\mu\nu}(t,t)", "phi": r"\Phi^{\ell}_{\mu\nu}", "g": r"G^{\ell}_{\mu\nu}",
    "A": r"A^{\ell}", "B": r"B^{\ell}",
}


@public
@dataclass
class Gamma0Series(HiddenLayers):
    r"""Coefficients of the :math:`\gamma_0`-expansion of the DMFT on a discrete GD grid.

    Attributes
    ----------
    data : TrainingData
        :math:`K^x` and targets.
    grid : TimeGrid
        ``t_i = i * eta``.
    hidden_layers : int
        Number of hidden layers :math:`L` (the paper's).
    depth : int
        Weight layers, ``hidden_layers + 1``.
    layers : tuple of int
        Book numbers ``1 .. hidden_layers`` of the per-layer coefficients ``'phi'``, ``'g'``.
    activation : str or Activation
        Activation name (``'linear'`` for deep linear networks), or the
        :class:`~effth.activations.Activation` of a user expression.
    order : int
        Highest power of :math:`\gamma_0` computed (even).
    closure : str
        ``'exact'`` (predictions from the single-site average, the limit of discrete GD) or
        ``'ntk'`` (NTK-Euler); the :math:`\gamma_0^4` coefficients depend on it (Bordelon & Pehlevan (2022), App. M).
    gradient_independent : bool
        Whether this is the expansion of the gradient-independence ansatz (``A = B = 0``).
    coefficients : dict
        ``name -> ndarray (order//2 + 1, ...)``: entry ``k`` multiplies :math:`\gamma_0^{2k}`.
        Names and coefficient shapes (``n = P + Q`` samples, ``T`` grid points):
        ``'f'`` ``(T, n)``; ``'delta'`` ``(T, P)``; ``'loss'`` ``(T,)``; ``'ntk'`` ``(T, n, n)``
        (equal time); deep linear: ``'phi'`` ``(L, T, n, T, n)`` (:math:`H^\ell`), ``'g'``
        ``(L, T, T)``, ``'A'`` ``(L-1, T, n, T)``, ``'B'`` ``(L-1, T, T, n)``; two-layer: ``'phi'``,
        ``'g'`` ``(1, T, n, n)`` (equal time).
    odd_residual : float
        Largest odd-order kernel or prediction coefficient of the field-level expansion (two-layer;
        it vanishes by :math:`r\to-r` symmetry); ``0.0`` for deep linear networks, which are
        expanded in :math:`\gamma_0^2` from the start.
    lazy_responses : dict
        Deep nonlinear networks: ``'A'``, ``'B'`` of shape ``(L-1, T, n, T, n)``, the responses
        :math:`A^\ell_0`, :math:`B^\ell_0` of the lazy limit (``B`` with its equal-time diagonal;
        scaled convention of :class:`~effth.dmft.result.DMFTResult`); above order 2 also
        ``'A_series'``, ``'B_series'`` of shape ``(order//2, L-1, T, n, T, n)``, the coefficients of
        :math:`\gamma_0^{2j}`, ``j < order/2``.  Empty otherwise.
    """

    data: TrainingData
    grid: TimeGrid
    hidden_layers: int
    activation: object
    order: int
    closure: str
    gradient_independent: bool
    coefficients: dict = field(repr=False)
    odd_residual: float = 0.0
    lazy_responses: dict = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ conventions

    def value(self, name: str, layer: int | None = None, *, gamma0,
              order: int | None = None) -> np.ndarray:
        r"""The truncated series of ``name`` at ``gamma0`` (``docs/conventions.md``, Results).

        Parameters
        ----------
        name : {'f', 'loss', 'ntk', 'phi', 'g', 'delta'}
            ``'f'`` ``(T, n)``, ``'loss'`` ``(T,)``, ``'ntk'`` equal-time ``(T, n, n)``;
            ``'phi'``, ``'g'`` of hidden layer ``layer``: two-time ``(T, n, T, n)`` (deep networks;
            the deep linear ``G^\ell``, sample independent, is broadcast over samples), equal-time
            ``(T, n, n)`` for the two-layer expansion (which holds only the equal-time blocks).
        layer : int, optional
            Book layer number, for ``'phi'`` and ``'g'`` only.
        gamma0 : float
            Feature-learning strength (a scalar: the shapes above).
        order : int, optional
            Truncation (power of :math:`\gamma_0`; default :attr:`order`).
        """
        if np.ndim(gamma0) != 0:
            raise DomainError(f"gamma0 must be a scalar here, got shape {np.shape(gamma0)}; "
                              "use evaluate() for several values")
        if name in ("phi", "g"):
            idx = check_layer(layer, self.layers, name)
        elif layer is not None:
            raise DomainError(f"{name!r} has no layer axis; drop layer={layer!r}")
        out = self.evaluate(gamma0, order=order, name=name)
        if name not in ("phi", "g"):
            return out
        out = out[idx]
        T, n = self.grid.steps, self.data.n_all
        if out.shape == (T, T):                          # deep linear G^l(t, s): no sample axes
            out = np.broadcast_to(out[:, None, :, None], (T, n, T, n))
        return out

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: the series is deterministic (``docs/conventions.md``)."""
        return None

    def __repr__(self) -> str:
        return (f"Gamma0Series({depth_text(self.depth)}, "
                f"activation={activation_text(self.activation)}, order={self.order}, "
                f"closure={self.closure}, eta={self.grid.eta:g}, steps={self.grid.steps}, "
                f"inputs={self.data.n_all}"
                f"{', gradient_independent' if self.gradient_independent else ''})")

    def _repr_html_(self) -> str:
        rows = [("depth", self.depth), ("hidden_layers", self.hidden_layers),
                ("activation", activation_text(self.activation)),
                ("order (power of gamma0)", self.order), ("closure", self.closure),
                ("gradient_independent", self.gradient_independent),
                ("eta", f"{self.grid.eta:g}"), ("steps T", self.grid.steps),
                ("samples n", self.data.n_all), ("quantities", ", ".join(self.names))]
        return _html_table("Gamma0Series", rows)

    # ------------------------------------------------------------------ access
    @property
    def times(self) -> np.ndarray:
        """``(T,)`` grid times."""
        return self.grid.times

    @property
    def names(self) -> tuple:
        """Available quantity names."""
        return tuple(k for k in _NAMES if k in self.coefficients)

    def _check_name(self, name: str) -> None:
        if name not in self.coefficients:
            raise DomainError(f"unknown quantity {name!r}; available: {', '.join(self.names)}")

    def _check_order(self, order: int) -> None:
        if int(order) != order or order < 0:
            raise DomainError(f"order={order!r} must be a non-negative integer power of gamma0")
        if order > self.order:
            raise DomainError(f"order {order} was not computed (this series stops at gamma0^"
                              f"{self.order}); call gamma0_series(..., order={order + order % 2})")

    def coefficient(self, order: int, name: str = "f") -> np.ndarray:
        r"""The coefficient of :math:`\gamma_0^{\mathrm{order}}` of ``name``.

        Odd orders vanish identically (Bordelon & Pehlevan (2022), §5.2, App. P.1) and return zeros.

        Raises
        ------
        DomainError
            Unknown name, negative or non-integer order, or an order above :attr:`order`.
        """
        self._check_name(name)
        self._check_order(order)
        c = self.coefficients[name]
        if order % 2:
            return np.zeros(c.shape[1:], dtype=c.dtype)
        return c[order // 2]

    def evaluate(self, gamma0, order: int | None = None, name: str = "f") -> np.ndarray:
        r"""The truncated series :math:`\sum_{k\le\mathrm{order}/2}\gamma_0^{2k}X_{2k}`.

        Parameters
        ----------
        gamma0 : float or array_like
            Feature-learning strength(s); an array adds a leading axis.
        order : int, optional
            Truncation (power of :math:`\gamma_0`; default :attr:`order`).
        name : str
            Quantity.
        """
        self._check_name(name)
        order = self.order if order is None else order
        self._check_order(order)
        c = np.asarray(self.coefficients[name][: order // 2 + 1], dtype=float)
        g = np.asarray(gamma0, dtype=float)
        powers = (g[..., None] ** 2) ** np.arange(c.shape[0])               # (..., K+1)
        return np.tensordot(powers, c, axes=([-1], [0]))

    def pade(self, gamma0, name: str = "f", m: int | None = None) -> np.ndarray:
        r"""Diagonal Padé approximant :math:`[m/m]` in :math:`x=\gamma_0^2`, element by element.

        Uses the ``2m + 1`` coefficients :math:`X_0..X_{4m}` (default the largest ``m`` available).
        Elements whose coefficients vanish beyond order 0 return :math:`X_0`; elements whose Padé
        linear system is singular or ill-conditioned (e.g. at the first grid times, where the
        higher coefficients are tiny) return the truncated series through :math:`X_{4m}`.
        """
        from scipy.interpolate import pade as _pade
        from scipy.linalg import LinAlgWarning

        self._check_name(name)
        c = np.asarray(self.coefficients[name], dtype=float)
        K = c.shape[0] - 1
        m = K // 2 if m is None else int(m)
        if m < 1 or 2 * m > K:
            raise DomainError(f"Padé [m/m] needs m >= 1 and 2m <= {K} available gamma0^2 orders "
                              f"(order={self.order}); got m={m}")
        x = np.asarray(gamma0, dtype=float) ** 2
        flat = c.reshape(K + 1, -1)
        out = np.empty(x.shape + (flat.shape[1],))
        scale = np.max(np.abs(flat[1:]), axis=0)
        for j in range(flat.shape[1]):
            cj = flat[: 2 * m + 1, j]
            if scale[j] <= 1e-14 * max(1.0, abs(cj[0])):
                out[..., j] = cj[0]
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", LinAlgWarning)
                    p, q = _pade(cj, m)
                out[..., j] = p(x) / q(x)
            except (np.linalg.LinAlgError, ValueError, LinAlgWarning):
                out[..., j] = np.polyval(cj[::-1], x)        # degenerate Padé system
        return out.reshape(x.shape + c.shape[1:])

    def radius(self, name: str = "f", method: str = "pade", index=None) -> float:
        r"""Estimated radius of convergence in :math:`\gamma_0`.

        Parameters
        ----------
        name : str
            Quantity; by default the last grid time is used (``index`` selects an element of one
            coefficient array, e.g. ``(-1, 0)`` for ``f`` at the final time on sample 0; default: the
            max-abs norm over the final-time slice).
        method : {'pade', 'ratio', 'root'}
            ``'pade'`` (default, the most stable estimate when the nearest singularities are complex
            and the coefficient signs oscillate): modulus of the nearest pole of the diagonal
            Padé approximant in :math:`x=\gamma_0^2`; ``'ratio'``: :math:`|X_{2K-2}|/|X_{2K}|` (ratio test in :math:`x=\gamma_0^2`, last two
            orders); ``'root'``: Cauchy-Hadamard :math:`|X_{2K}|^{-1/K}`.  Padé uses the element of
            largest :math:`|X_{2K}|` unless ``index`` is given.  The :math:`\gamma_0`-radius is
            the square root of the :math:`x`-radius.

        Returns
        -------
        float
            ``inf`` if the coefficients vanish (e.g. a quantity constant in :math:`\gamma_0`).
        """
        from scipy.interpolate import pade as _pade

        self._check_name(name)
        c = np.asarray(self.coefficients[name], dtype=float)
        K = c.shape[0] - 1
        if K < 2:
            raise DomainError(f"a radius estimate needs at least order 4 (two corrections); "
                              f"this series stops at gamma0^{self.order}")
        sl = c[:, -1] if name in ("f", "delta", "loss", "ntk") else c
        if index is not None:
            seq = c[(slice(None),) + tuple(np.atleast_1d(index))].reshape(K + 1)
        else:
            seq = np.max(np.abs(sl.reshape(K + 1, -1)), axis=1)
        if method == "ratio":
            if seq[K] == 0:
                return float("inf")
            return float(np.sqrt(abs(seq[K - 1] / seq[K])))
        if method == "root":
            if seq[K] == 0:
                return float("inf")
            return float(abs(seq[K]) ** (-1.0 / (2 * K)))
        if method == "pade":
            if index is None:
                flat = sl.reshape(K + 1, -1)
                seq = flat[:, int(np.argmax(np.abs(flat[K])))]
            from scipy.linalg import LinAlgWarning

            q = None
            for m in range(K // 2, 0, -1):       # the largest well-conditioned diagonal Padé
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("error", LinAlgWarning)
                        _, q = _pade(np.asarray(seq[: 2 * m + 1], dtype=float), m)
                    break
                except (np.linalg.LinAlgError, ValueError, LinAlgWarning):
                    continue
            if q is None:
                return self.radius(name, "ratio", index)
            roots = np.roots(q.coeffs)
            if roots.size == 0:
                return float("inf")
            return float(np.sqrt(np.min(np.abs(roots))))
        raise DomainError(f"method={method!r} must be 'ratio', 'root' or 'pade'")

    # ------------------------------------------------------------------ printing
    def latex(self, order: int = 2, name: str = "ntk", layer: int | None = None) -> str:
        r"""LaTeX of the coefficient of :math:`\gamma_0^{\mathrm{order}}` of ``name``.

        Order 0 prints the lazy value, order 2 the closed form of Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here (deep linear:
        ``'phi'``, ``'g'``, ``'ntk'``; ``layer`` selects :math:`\ell`, default symbolic) or §4.4
        (two-layer: ``'phi'``, ``'g'``, ``'ntk'`` as Gaussian atoms over :math:`K=K^x`); higher
        orders and other quantities print the system through ``order``
        (:func:`latex_coefficient`: deep linear, two-layer and deep nonlinear networks as formulas,
        the last for one input; a series of several inputs adds its own numbers).
        """
        self._check_order(order)
        return latex_coefficient(order, name, hidden_layers=self.hidden_layers,
                                 activation=self.activation,
                                 layer=layer, gradient_independent=self.gradient_independent,
                                 closure=self.closure, _series=self)

    def _repr_latex_(self) -> str:
        return "$" + self.latex(min(2, self.order), "ntk") + "$"


def latex_coefficient(order: int, name: str = "ntk", *, depth=None, hidden_layers=None,
                      activation="linear", layer=None, gradient_independent: bool = False,
                      closure: str = "exact", format: str = "latex", _series=None) -> str:
    r"""LaTeX of a :math:`\gamma_0`-coefficient (used by the CLI).

    ``depth`` (weight layers) or ``hidden_layers`` (``= depth - 1``, the paper's :math:`L`): give
    at most one; neither keeps the depth symbolic (deep linear; two-layer for an activation).  See
    :meth:`Gamma0Series.latex`.  Above order 2 (and for the predictions and loss of a two-layer
    network at order 2) the whole system through ``order`` is printed, in an ``aligned`` block or
    as plain text with ``format='text'``:

    * deep linear networks: the equations of every order
      (:func:`effth.dmft.series.formulas.deep_linear_formulas`, predictions of ``closure``);
    * two-layer networks, any smooth activation, ``closure='exact'``: every coefficient in Gaussian
      atoms times time functions (:func:`effth.dmft.series.formulas_two_layer.two_layer_formulas`);
    * deep nonlinear networks (and two-layer ones with ``closure='ntk'``): at order 2 the
      moment form (:func:`effth.dmft.series.formulas_nonlinear.deep_nonlinear_formulas`), above
      it the one-input system of every order through ``order`` in Gaussian moments times time
      functions (:func:`effth.dmft.series.formulas_deep.deep_series_formulas`, NTK closure); a
      series of several inputs (``_series``) adds a table of its own numbers.
    """
    if depth is not None or hidden_layers is not None:
        hidden_layers = hidden_layer_count(depth, hidden_layers)
    if int(order) != order or order < 0:
        raise DomainError(f"order={order!r} must be a non-negative even integer")
    if name not in _NAMES:
        raise DomainError(f"unknown quantity {name!r}; choose from {', '.join(_NAMES)}")
    act = resolve_activation(activation)
    linear = is_linear(act)
    if not linear and order >= 2 and order % 2 == 0:
        require_smooth(act, "the gamma0-series")
    sym = _SYMBOLS[name]
    if order % 2:
        return rf"[{sym}]_{{\gamma_0^{{{order}}}}} = 0"
    if order == 0:
        lazy = {"f": r"y_\mu - [e^{-K_0 t}y]_\mu", "delta": r"[e^{-K_0t}y]_\mu",
                "loss": r"\tfrac12\,\|e^{-K_0t}y\|^2", "ntk": r"K_{0,\mu\nu}",
                "phi": r"\Phi^{\ell}_{0,\mu\nu}", "g": r"G^{\ell}_{0,\mu\nu}",
                "A": r"A^{\ell}_0=C^{\ell}_0" if not gradient_independent else "0",
                "B": r"B^{\ell}_0=D^{\ell+1}_0" if not gradient_independent else "0"}[name]
        return rf"[{sym}]_{{\gamma_0^{{0}}}} = {lazy}"
    label = "linear" if linear else activation_label(act)
    two_layer = not linear and hidden_layers in (1, None)
    if two_layer and closure == "exact" and (order >= 4 or name in ("f", "delta", "loss")):
        from effth.dmft.series.formulas_two_layer import two_layer_formulas

        fm = two_layer_formulas(order, activation=label)
        return fm.text() if format == "text" else fm.latex(env="aligned")
    if order == 2 and name in ("phi", "g", "ntk") and (linear or two_layer):
        if linear:
            key = {"phi": "H", "g": "G", "ntk": "ntk"}[name]
            expr = deep_linear_order2_exprs(hidden_layers, layer, gradient_independent)[key]
            lhs = {"H": r"H^{\ell}_{2,\mu\nu}(t,s)", "G": r"G^{\ell}_{2}(t,s)",
                   "ntk": r"K_{2,\mu\nu}(t,s)"}[key]
            if layer is not None:
                lhs = lhs.replace(r"\ell", str(layer))
        else:
            expr = two_layer_order2_exprs()[name]
            lhs = {"phi": r"\Phi_{2,\mu\nu}(t,t)", "g": r"G_{2,\mu\nu}(t,t)",
                   "ntk": r"K_{2,\mu\nu}(t,t)"}[name]
        return f"{lhs} = {_latex(expr)}"
    if name in ("delta", "f") and order == 2 and (linear or two_layer):
        return (r"\Delta_2(t_{i+1}) = (1-\eta K_0)\Delta_2(t_i) - \eta K_2(t_i,t_i)\Delta^0(t_i),"
                r"\quad f_2=-\Delta_2 \quad(\text{NTK closure; the exact closure adds the }"
                r"O(\eta)\text{ single-site correction})")
    if linear:
        from effth.dmft.series.formulas import deep_linear_formulas

        fm = deep_linear_formulas(order, hidden_layers=hidden_layers, closure=closure,
                                  gradient_independent=gradient_independent)
        return fm.text() if format == "text" else fm.latex(env="aligned")
    # deep nonlinear networks (or the NTK closure of two-layer ones): at gamma0^2 the moment
    # form, above it the derived system of every order through ORDER (one input)
    from effth.dmft.series.formulas_nonlinear import deep_nonlinear_formulas

    L = 1 if hidden_layers is None else int(hidden_layers)
    if order == 2:
        fm = deep_nonlinear_formulas(L, activation=label)
        return fm.text() if format == "text" else fm.latex(env="aligned")
    from effth.dmft.series.formulas_deep import deep_series_formulas

    fm = deep_series_formulas(order, L, activation=label)
    rows = []
    if _series is not None and _series.data.n_all > 1:
        # the printed system is for one input: a series of several gives its own numbers
        rows = _numbers_beyond_order2(order, name, L, act, layer, format == "text", _series)
    if format == "text":
        return "\n".join([fm.text()] + rows)
    from effth.dmft.series.formulas import align_rows

    return align_rows(fm.lines(True) + rows, env="aligned")


NUMBERS_EXAMPLE = {"kernel": [[1.0]], "y": [1.0], "eta": 0.1}


def _tex_number(x: float) -> str:
    m, _, e = f"{x:.10e}".partition("e")
    m = m.rstrip("0").rstrip(".")
    e = int(e)
    return m if e == 0 else rf"{m}\times10^{{{e}}}"


def _numbers_beyond_order2(order: int, name: str, hidden_layers: int, act, layer, text: bool,
                           series=None) -> list:
    r"""The rows that state plainly that the deep nonlinear coefficients above :math:`\gamma_0^2`
    are numbers, and a table of them from :func:`gamma0_series` (NTK closure) on the example
    ``NUMBERS_EXAMPLE`` (one input :math:`K^x=1`, :math:`y=1`, :math:`\eta=0.1`; 6 grid points
    through order 4, 4 at order 6 -- about 45 s at two hidden layers; none above order 6, where the
    expansion takes hours), or the numbers of ``series`` (a :class:`Gamma0Series`; the first
    sample's entries when it has several).  Entries below 1e-13 of their column's largest (round-off of
    coefficients that vanish at t = 0) are shown as 0."""
    ex = dict(NUMBERS_EXAMPLE)
    if series is not None:
        top, steps = int(order), series.grid.steps
        ex["eta"] = series.grid.eta
        ser = series
        data = ("the series' own data, first sample" if series.data.n_all > 1
                else "the series' own data")
    else:
        top = min(int(order), 6)
        steps = 6 if top <= 4 else 4
        ser = gamma0_series(kernel=np.array(ex["kernel"]), y=np.array(ex["y"]),
                            hidden_layers=hidden_layers, activation=act, eta=ex["eta"],
                            steps=steps, order=top, closure="ntk")
        data = None
    what = {"ntk": "K", "f": "f", "delta": "Delta", "loss": "L", "phi": "Phi", "g": "G",
            "A": "K", "B": "K"}[name]
    ell = (layer or hidden_layers) if name in ("phi", "g") else None
    values = []
    for k in range(0, top + 1, 2):
        c = np.asarray(ser.coefficient(k, "ntk" if name in ("A", "B") else name), dtype=float)
        if name in ("phi", "g"):
            c = np.array([c[ell - 1, i, 0, i, 0] for i in range(steps)])
        c = c.reshape(steps, -1)[:, 0]
        values.append(np.where(np.abs(c) < 1e-13 * max(np.max(np.abs(c)), 1e-300), 0.0, c))
    where = f"layer {ell}, equal times" if ell is not None else "equal times"
    resp = " (the responses A, B: Gamma0Series.lazy_responses)" if name in ("A", "B") else ""
    above = (f"; the orders above gamma0^{top} take hours and are not tabulated"
             if order > top else "")
    if text:
        rows = [f"above gamma0^2 the coefficients are given as numbers, not printed formulas: "
                f"effth.dmft.gamma0_series ({ser.closure} closure), hidden layers L = {hidden_layers}, "
                + (data or "one input Kx = 1, y = 1") + f", eta = {ex['eta']:g}{above}{resp}",
                "t | " + " | ".join(f"{what}_{k}(t) ({where})" for k in range(0, top + 1, 2))]
        for i in range(steps):
            rows.append(f"{i * ex['eta']:.4g} | " + " | ".join(f"{v[i]:.10e}" for v in values))
        return rows
    sym = {"K": "K", "f": "f", "Delta": r"\Delta", "L": r"\mathcal{L}", "Phi": r"\Phi^{%d}" % (ell or 0),
           "G": "G^{%d}" % (ell or 0)}[what]
    rows = [r"\text{above }\gamma_0^{2}\text{ the coefficients are given as numbers, not printed "
            rf"formulas (the engine; {ser.closure} closure):}}",
            rf"&L={hidden_layers},\ "
            + (rf"\text{{{data}}}" if data else r"\text{one input},\ K^{x}=1,\ y=1")
            + rf",\ \eta={ex['eta']:g}"
            + (rf",\ \text{{orders above }}\gamma_0^{{{top}}}\text{{ not tabulated (hours)}}"
               if order > top else "")
            + (r",\ A,B:\ \text{see Gamma0Series.lazy\_responses}" if resp else "")]
    for i in range(steps):
        t = f"{i * ex['eta']:.4g}"
        rows.append(rf"&t={t}:\ " + r",\ ".join(
            rf"{sym}_{{{k}}}={_tex_number(v[i])}" for k, v in zip(range(0, top + 1, 2), values)))
    return rows


# ---------------------------------------------------------------------- construction
def _validate(order, closure):
    if int(order) != order or order < 0 or order % 2:
        raise DomainError(f"order={order!r} must be a non-negative even integer: the series is "
                          "even in gamma0 (odd orders vanish, Bordelon & Pehlevan (2022), §5.2, App. P.1)")
    if closure not in ("exact", "ntk"):
        raise DomainError(f"closure={closure!r} must be 'exact' or 'ntk'")


#: highest gamma0 order of :func:`gamma0_series` (the CLI's ``effth gamma0 --order`` bound)
_MAX_ORDER = 64


@public
def gamma0_series(X=None, y=None, *, depth: int | None = None, hidden_layers: int | None = None,
                  eta: float, steps: int, order: int = 2, activation="linear", X_test=None,
                  kernel=None, closure: str = "exact", gradient_independent: bool = False,
                  exact: bool = False, nodes: int | None = None,
                  progress: bool | None = None) -> Gamma0Series:
    r"""Expand the discrete-GD DMFT of Bordelon & Pehlevan (2022) in powers of :math:`\gamma_0` up to ``order``.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data as for the solvers (:func:`effth.dmft.prepare_data`).
    depth, hidden_layers : int
        Give exactly one: ``depth`` weight layers, or ``hidden_layers = depth - 1`` (the paper's
        :math:`L`; ``hidden_layers=1`` is the two-layer network).
    eta : float
        GD step (grid ``t_i = i eta``).
    steps : int
        Number of grid points ``T``.
    order : int
        Highest power of :math:`\gamma_0` (even, ``>= 0``).
    activation : str, Activation or sympy.Expr
        ``'linear'`` (any depth, any order) or any smooth activation (registered name or alias,
        ``Activation``, SymPy expression in ``z``): any order at any depth.  Kinked activations
        (ReLU, ...) are rejected: the expansion needs ``order + 2`` derivatives pointwise.  Deep
        nonlinear networks above order 2
        or with ``closure='exact'`` use the formal-source expansion (:mod:`effth.dmft.series.deep_jets`),
        whose cost grows steeply with samples and grid points (order 4, ``hidden_layers=3``, one sample,
        ``T = 20``, NTK closure: seconds; two samples, ``T = 10``: minutes; the exact closure adds
        one response stage at order + 1).
    closure : {'exact', 'ntk'}
        Predictions as the single-site average (exact limit of discrete GD; the solvers' default) or
        NTK-Euler.  Kernels to :math:`O(\gamma_0^2)` do not depend on it.  Deep nonlinear networks:
        both (the exact closure needs the readout response one order above the predictions: one
        more response stage, markedly slower).  With one hidden layer and ``closure='ntk'`` the deep
        nonlinear expansion is used.
    gradient_independent : bool
        Expand the gradient-independence ansatz ``A = B = 0`` instead (deep linear only; NTK closure
        recommended, as in the solver).
    exact : bool
        Deep linear only: rational arithmetic (``Fraction`` coefficients; pass rational data).
    nodes : int, optional
        Nonlinear networks: quadrature points per dimension of the lazy ``u``.  Two-layer
        expansion (one hidden layer, ``closure='exact'``): the truncated trapezoid rule in ``u``
        from 36 nodes on (Gauss-Hermite below 36 nodes and for polynomial activations), exact
        Gauss-Hermite in ``r``; default 100 nodes when rank K^x <= 2 (the gamma0^2 and gamma0^4
        coefficients then agree with 160 nodes to 3e-13), fewer at higher rank.
        Deep expansions: the trapezoid rule (:func:`effth.numerics._rules.gauss_trapezoid`; for
        tanh it converges geometrically where Gauss-Hermite does not: one sample, L = 2, the
        gamma0^4 coefficient of G^1 is off by 1.5 % with 80 Gauss-Hermite nodes and by 2e-6
        with 80 trapezoid nodes), default 96 for one-dimensional ``u`` (one sample) and 40
        otherwise (16 above order 2, where the formal-source rule multiplies the cost).
    progress : bool, optional
        Progress bar over the order-by-order stages of the deep nonlinear expansion
        (``docs/conventions.md``).

    Returns
    -------
    Gamma0Series

    Raises
    ------
    DomainError
        Odd, negative or non-integer order, bad data (non-PSD kernel, shapes), or a step past the
        stability edge ``eta lambda_max(K_0) >= 2``.
    NotDerivedError
        ``exact=True`` or ``gradient_independent=True`` for nonlinear networks.

    Examples
    --------
    >>> import numpy as np
    >>> ser = gamma0_series(kernel=np.array([[1., .5], [.5, 1.]]), y=np.array([1., -.5]),
    ...                     hidden_layers=2, eta=0.1, steps=5, order=4)
    >>> ser.coefficient(4, "f").shape
    (5, 2)
    """
    L = hidden_layer_count(depth, hidden_layers)          # hidden layers from here on
    _validate(order, closure)
    act = resolve_activation(activation)
    linear = is_linear(act)
    if not linear:
        require_smooth(act, "the gamma0-series")
    if not 0 <= int(order) <= _MAX_ORDER:
        raise DomainError(f"order={order!r} must be an integer in 0..{_MAX_ORDER} (the number of "
                          "coefficients and their cost grow with the order)")
    data = prepare_data(X, y, X_test=X_test, kernel=kernel)
    from effth._validate import check_target_scale
    check_target_scale(data.y, 2 * (int(order) // 2) + 2,
                       f"the order-{2 * (int(order) // 2)} coefficient of the loss")
    grid = TimeGrid(eta, steps)
    P = data.n_train
    _, _, _, ntk0 = lazy_kernels(data.kx, act, hidden_layers=L)
    check_stability(ntk0[:P, :P], grid.eta)
    K = int(order) // 2
    odd = 0.0
    lazy_responses = {}
    rank = int(np.linalg.matrix_rank(data.kx, tol=1e-10))
    deep_nodes = int(nodes) if nodes is not None else (96 if rank <= 1 else 40)
    if nodes is None and rank > 1 and (order > 2 or closure == "exact"):
        deep_nodes = 16
    if linear:
        eta_arg = eta
        if exact:
            from fractions import Fraction
            eta_arg = Fraction(str(eta)) if isinstance(eta, float) else Fraction(eta)
        arr = deep_linear_series_arrays(data.kx, data.y, hidden_layers=L, eta=eta_arg, steps=grid.steps,
                                        order=K, closure=closure,
                                        gradient_independent=gradient_independent, exact=exact)
        coeffs = {"f": arr.f, "delta": arr.delta, "ntk": arr.ntk, "phi": arr.H, "g": arr.G,
                  "A": arr.A, "B": arr.B}
    elif K == 0:
        if exact or gradient_independent:
            raise NotDerivedError("nonlinear series: exact=False and no gradient independence "
                                  "(that ansatz is expanded for deep linear networks)")
        # order 0 is the lazy limit gamma0 -> 0 itself: the static-kernel solution, exactly
        from effth.dmft.solvers.lazy import static_ntk_solve
        st = static_ntk_solve(data, grid, activation=act, hidden_layers=L)
        phi, g = st.phi, st.g
        if L == 1 and closure != "ntk":                 # the two-layer coefficients: equal times
            idx = np.arange(grid.steps)
            phi = phi[:, idx, :, idx, :].transpose(1, 0, 2, 3)
            g = g[:, idx, :, idx, :].transpose(1, 0, 2, 3)
        coeffs = {"f": st.f[None], "delta": st.delta[None], "ntk": st.ntk[None],
                  "phi": phi[None], "g": g[None]}
    elif L > 1 or closure == "ntk":
        if exact or gradient_independent:
            raise NotDerivedError("deep nonlinear / NTK-closure series: exact=False and no "
                                  "gradient independence (that ansatz is expanded for deep linear "
                                  "networks)")
        if order <= 2 and closure == "ntk":
            arr = deep_nonlinear_order2_arrays(data.kx, data.y, hidden_layers=L, activation=act,
                                               eta=grid.eta, steps=grid.steps, nodes=deep_nodes)
            lazy_responses = {"A": arr.A, "B": arr.B}
        else:
            arr = deep_nonlinear_series_arrays(data.kx, data.y, hidden_layers=L, activation=act,
                                               eta=grid.eta, steps=grid.steps, order=int(order),
                                               closure=closure, nodes=deep_nodes,
                                               progress=progress)
            lazy_responses = {"A": arr.A[0], "B": arr.B[0],
                              "A_series": arr.A, "B_series": arr.B}
            odd = arr.odd_residual
        coeffs = {"f": arr.f[:K + 1], "delta": arr.delta[:K + 1], "ntk": arr.ntk[:K + 1],
                  "phi": arr.phi[:K + 1], "g": arr.g[:K + 1]}
    else:
        if exact or gradient_independent:
            raise NotDerivedError("nonlinear two-layer series: exact=False only; gradient "
                                  "independence is the DMFT itself with one hidden layer")
        arr = two_layer_series_arrays(data.kx, data.y, activation=act, eta=grid.eta,
                                      steps=grid.steps, order=int(order),
                                      nodes=None if nodes is None else int(nodes))
        odd_parts = [np.max(np.abs(x[1::2])) for x in (arr.phi, arr.g, arr.f) if x.shape[0] > 1]
        odd = float(max(odd_parts)) if odd_parts else 0.0
        coeffs = {"f": arr.f[::2], "delta": arr.delta[::2], "ntk": arr.ntk[::2],
                  "phi": arr.phi[::2][:, None], "g": arr.g[::2][:, None]}
    d = coeffs["delta"]
    loss = []
    for k in range(K + 1):                                    # 1/2 sum Delta^2, Cauchy product
        acc = sum(d[j] * d[k - j] for j in range(k + 1))
        loss.append(acc.sum(axis=-1) / 2)
    coeffs["loss"] = np.stack(loss)
    return Gamma0Series(data=data, grid=grid, hidden_layers=L,
                        activation="linear" if linear else activation_label(act),
                        order=int(order), closure=closure, gradient_independent=gradient_independent,
                        coefficients=coeffs, odd_residual=odd, lazy_responses=lazy_responses)


@public
def gamma0_leading_order(X=None, y=None, *, depth: int | None = None,
                         hidden_layers: int | None = None, times, activation="linear",
                         X_test=None, kernel=None, gradient_independent: bool = False) -> dict:
    r"""Continuous-time :math:`O(\gamma_0^2)` coefficients in closed form (Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here, §4.4).

    Gradient flow (no grid): :math:`\Delta^0=e^{-K_0t}y`, :math:`v`, :math:`v_{\alpha\beta}` in closed
    form, then the deep linear formulas of Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here or the two-layer Gaussian-atom formulas of
    Bordelon & Pehlevan (2022), App. P (two-layer, derived here) compiled with :func:`effth.codegen.compile_expression`.

    Parameters
    ----------
    X, y, X_test, kernel
        Data (test points only for deep linear networks).
    depth, hidden_layers : int
        Give exactly one: weight layers, or hidden layers :math:`L` (any for linear; 1 for
        nonlinear).
    times : array_like, shape (T,)
        Times :math:`t` (equal-time quantities ``t = s``).
    activation : str
    gradient_independent : bool
        Deep linear only: Bordelon & Pehlevan (2022), eq. (12) (expansion of the ``A = B = 0`` ansatz).

    Returns
    -------
    dict
        ``'delta0', 'v' (T, P)``, ``'vv' (T, P, P)``, ``'ntk0' (n, n)``, ``'ntk2' (T, n, n)``;
        deep linear: ``'phi2' (T, L, n, n)`` (:math:`H^\ell_2(t,t)`), ``'g2' (T, L)``;
        two-layer: ``'phi2', 'g2' (T, P, P)``.
    """
    L = hidden_layer_count(depth, hidden_layers)          # hidden layers from here on
    act = resolve_activation(activation)
    linear = is_linear(act)
    if not linear:
        require_smooth(act, "the gamma0-expansion")
    if not linear and L > 1:
        raise NotDerivedError("continuous-time closed forms exist for deep linear and two-layer "
                              "networks; for deep nonlinear ones use gamma0_series(..., "
                              "closure='ntk') on a grid")
    data = prepare_data(X, y, X_test=X_test, kernel=kernel)
    P = data.n_train
    _, _, _, ntk0 = lazy_kernels(data.kx, act, hidden_layers=L)
    lam_min = float(np.linalg.eigvalsh(ntk0[:P, :P])[0])
    if lam_min <= 1e-12 * max(1.0, float(np.max(np.abs(ntk0)))):
        raise DomainError(f"the lazy NTK on the training points is singular (smallest eigenvalue "
                          f"{lam_min:.3g}); closed forms need K_0 > 0")
    times = np.asarray(times, dtype=float)
    delta0, v, vv = lazy_time_functions(ntk0[:P, :P], data.y, times)
    out = {"delta0": delta0, "v": v, "vv": vv, "ntk0": ntk0}
    if linear:
        H2, G2, K2 = deep_linear_order2_numeric(data.kx, v, vv, v, vv, hidden_layers=L,
                                                gradient_independent=gradient_independent)
        out.update(phi2=H2, g2=G2, ntk2=K2)
    else:
        if data.n_all != P:
            raise NotDerivedError("two-layer closed forms: test points are not supported")
        exprs = two_layer_order2_exprs()
        out["phi2"] = evaluate_two_layer_order2(exprs["phi"], data.kx, v, vv, act)
        out["g2"] = evaluate_two_layer_order2(exprs["g"], data.kx, v, vv, act)
        out["ntk2"] = out["phi2"] + out["g2"] * data.kx
    return out

