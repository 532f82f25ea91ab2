r"""Two nearby inputs: the :math:`\delta` expansion of :math:`K` and :math:`\Theta`, robustness,
\*-polation, and the finite-angle flow of scale-invariant networks (PDLT §5.1, §5.5, §10.3).

**The expansion.** For inputs :math:`x_\epsilon=x_0+\tfrac\epsilon2\delta x` the kernels of every
layer are symmetric functions of :math:`(\epsilon_1,\epsilon_2)`; to second order, PDLT (10.110),

.. math::
    \Theta_{\epsilon_1\epsilon_2}=\Theta_{00}+\tfrac{\epsilon_1+\epsilon_2}2\,\delta\Theta_{[1]}
    +\bigl(\tfrac{\epsilon_1+\epsilon_2}2\bigr)^2(\delta\delta\Theta_{[2]}+\delta\delta\Theta_{[0]})
    +\bigl(\tfrac{\epsilon_1-\epsilon_2}2\bigr)^2(-\delta\delta\Theta_{[2]}+\delta\delta\Theta_{[0]}),

and likewise for :math:`K`. The layer maps of these eight components are **derived** here, not
typed in: the Gaussian expectation :math:`\langle\sigma^{(p)}_{\epsilon_1}\sigma^{(q)}_{\epsilon_2}
\rangle_K` is Taylor-expanded about the degenerate kernel :math:`K_{00}` with
:math:`\partial/\partial K_{12}\to\sigma'\otimes\sigma'` and :math:`\partial/\partial K_{11}\to
\tfrac12\sigma''` (the Gaussian heat equation, PDLT (5.12)–(5.14)), inserted into the recursions
(4.118) and (9.5), and truncated at :math:`O(\delta^2)`. The result contains one-input atoms
:math:`\langle\sigma^{(p)}\sigma^{(q)}\rangle_{K_{00}}` only; it reproduces (5.47), (5.48), (10.66)
and the :math:`\delta\delta\Theta_{[2]}` recursion (10.68) of the book (tested), and adds the
:math:`[0]` components the \*-polation needs.

**What it feeds** (PDLT §10.3, with the corrections noted):

* robustness (10.62)/(10.64), :math:`\Theta_{-+}/\Theta_{++}-1`, and the variance (10.63)/(10.65) of
  a test point near one training point;
* \*-polation between two training points (10.111)–(10.117). The printed (10.113)–(10.115) have
  the coefficient :math:`4s(1-s)`, the denominator :math:`\Theta_{00}\delta\delta\Theta_{[2]}
  -\delta\Theta_{[1]}^2` and the combination :math:`z_++z_-+y_++y_-`; expanding the exact
  :math:`2\times2` kernel regression gives instead

  .. math::
      m^\infty_{(2s-1)}=sy_++(1-s)y_--s(1-s)\frac{2\,\delta\delta\Theta_{[0]}}{4\Theta_{00}
      \delta\delta\Theta_{[2]}-\delta\Theta_{[1]}^2}\bigl[2\delta\delta\Theta_{[2]}(y_++y_-)
      -\delta\Theta_{[1]}(y_+-y_-)\bigr]+O(\delta^3),

  which for equal norms is :math:`sy_++(1-s)y_--s(1-s)\frac{\delta\delta\Theta_{[0]}}{\Theta_{00}}
  (y_++y_-)` (and (10.117) loses the :math:`s` in front of :math:`y_+`). The tests check this
  against the exact prediction of :func:`effth.pdlt.predict` with error
  :math:`O(\delta^3)`, and that the printed form fails.

**Finite angles** (:func:`finite_angle_flow`): for scale-invariant :math:`\sigma` (ReLU, leaky
ReLU, linear) the expansion is invalid (footnote 38), but the two-input flow closes exactly in
the angles :math:`\psi` of :math:`K` and :math:`\zeta` of :math:`\Theta`, (5.162), (10.88)–(10.89).
"""

from __future__ import annotations

from effth._signature import public

import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from effth._display import depth_text, html_table, short
from effth._results import WeightLayers
from effth._validate import positive, real_array, real_scalar
from effth.arch._common import per_layer
from effth.errors import AccuracyWarning, DomainError
from effth.numerics import gaussian_expectation

__all__ = ["DeltaFlow", "delta_flow", "delta_recursions", "FiniteAngleFlow", "finite_angle_flow",
           "polation_mean", "polation_mean_printed"]

# ------------------------------------------------------------------------------- derivation
_NAMES = ("K00", "dK1", "ddK2", "ddK0", "Theta00", "dTheta1", "ddTheta2", "ddTheta0")
_TEX = {"K00": r"K_{00}", "dK1": r"\delta K_{[1]}", "ddK2": r"\delta\delta K_{[2]}",
        "ddK0": r"\delta\delta K_{[0]}", "Theta00": r"\Theta_{00}", "dTheta1": r"\delta\Theta_{[1]}",
        "ddTheta2": r"\delta\delta\Theta_{[2]}", "ddTheta0": r"\delta\delta\Theta_{[0]}"}
_K_MAX = 1e10          # a single-input kernel beyond this has exploded (C_W far above critical)


class _Atom(sp.Symbol):
    r""":math:`\langle\sigma^{(p)}\sigma^{(q)}\rangle_{K_{00}}` as a printable symbol."""

    def __new__(cls, p: int, q: int):
        p, q = sorted((p, q))
        obj = super().__new__(cls, f"A_{p}_{q}", real=True)
        obj.orders = (p, q)
        return obj

    def _latex(self, printer) -> str:
        def s(k: int) -> str:
            return r"\sigma" if k == 0 else (r"\sigma" + "'" * k if k <= 3 else rf"\sigma^{{({k})}}")
        p, q = self.orders
        return rf"\langle {s(p)}{s(q)}\rangle_{{K_{{00}}}}"


def _sym(name: str, primed: bool = False) -> sp.Symbol:
    tex = _TEX[name]
    return sp.Symbol(tex + ("^{(\\ell+1)}" if primed else "^{(\\ell)}"), real=True)


@public
@lru_cache(maxsize=1)
def delta_recursions() -> dict:
    r"""The layer maps of the eight :math:`\delta`-components, derived symbolically.

    Returns
    -------
    dict
        ``{name: sympy expression}`` for the layer-:math:`(\ell+1)` value of each component of
        ``("K00", "dK1", "ddK2", "ddK0", "Theta00", "dTheta1", "ddTheta2", "ddTheta0")`` in terms
        of the layer-:math:`\ell` components, :math:`C_b, C_W, \lambda_b, \lambda_W` (of layer
        :math:`\ell+1`) and the atoms :math:`\langle\sigma^{(p)}\sigma^{(q)}\rangle_{K_{00}}`.
        Print with :func:`effth.latex`; :meth:`DeltaFlow.latex` prints them all.
    """
    a, b, t = sp.symbols("a b t", real=True)
    cb, cw = sp.Symbol("C_b", real=True), sp.Symbol("C_W", real=True)
    lb, lw = sp.Symbol(r"\lambda_b", real=True), sp.Symbol(r"\lambda_W", real=True)
    S = {n: _sym(n) for n in _NAMES}

    def field_of(stem: str):
        c0, c1, c2, c0b = (S[stem + "00"], S["d" + stem + "1"], S["dd" + stem + "2"], S["dd" + stem + "0"])
        ka, kb = c2 + c0b, c0b - c2          # coefficients of a^2 and b^2, (10.110)
        return c0, c1, ka, kb

    K0, k1, ka, kb = field_of("K")
    T0, t1, ta, tb = field_of("Theta")

    def diag(eps):
        return k1 * eps + ka * eps ** 2       # K_{eps eps} - K_00

    D1, D2 = diag(a + b), diag(a - b)
    D12 = k1 * a + ka * a ** 2 + kb * b ** 2

    def expect(p: int, q: int) -> sp.Expr:
        out = sp.Integer(0)
        for n11 in range(3):
            for n22 in range(3 - n11):
                for n12 in range(3 - n11 - n22):
                    coef = sp.Rational(1, 2 ** (n11 + n22)) / (sp.factorial(n11) * sp.factorial(n22)
                                                             * sp.factorial(n12))
                    out += (coef * _Atom(p + 2 * n11 + n12, q + 2 * n22 + n12)
                            * D1 ** n11 * D2 ** n22 * D12 ** n12)
        return out

    def truncate(e: sp.Expr) -> dict:
        e = sp.expand(e.subs({a: t * a, b: t * b}, simultaneous=True))
        e = sum(e.coeff(t, k) * t ** k for k in range(3)).subs(t, 1)
        P = sp.Poly(sp.expand(e), a, b)
        got = {m: sp.simplify(P.coeff_monomial(m)) for m in (1, a, b, a * b, a ** 2, b ** 2)}
        # the symmetry eps1 <-> eps2 (b -> -b): no b, no ab term
        assert got[b] == 0 and got[a * b] == 0, got
        return got

    Kn = truncate(cb + cw * expect(0, 0))
    theta = T0 + t1 * a + ta * a ** 2 + tb * b ** 2
    Tn = truncate(lb + lw * expect(0, 0) + cw * expect(1, 1) * theta)
    out = {}
    for stem, got in (("K", Kn), ("Theta", Tn)):
        out[stem + "00"] = sp.expand(got[1])
        out["d" + stem + "1"] = sp.expand(got[a])
        out["dd" + stem + "2"] = sp.expand((got[a ** 2] - got[b ** 2]) / 2)
        out["dd" + stem + "0"] = sp.expand((got[a ** 2] + got[b ** 2]) / 2)
    return out


@lru_cache(maxsize=1)
def _compiled():
    rec = delta_recursions()
    S = [_sym(n) for n in _NAMES]
    atoms = sorted({s for e in rec.values() for s in e.free_symbols if isinstance(s, _Atom)},
                   key=lambda s: s.orders)
    pars = [sp.Symbol(n, real=True) for n in ("C_b", "C_W", r"\lambda_b", r"\lambda_W")]
    f = sp.lambdify(S + pars + atoms, [rec[n] for n in _NAMES], modules="numpy", cse=True)
    return f, [s.orders for s in atoms]


# ----------------------------------------------------------------------------------- result
class _PerLayer(WeightLayers):
    """What both two-input results share: per-layer series over the weight layers ``1..depth``
    (``value(name, layer=None)`` reads the output layer), and no standard errors."""

    depth: int

    @property
    def layers(self) -> tuple:
        """Book layer numbers ``(1, .., L)``."""
        return tuple(range(1, self.depth + 1))

    def _index(self, layer: int | None) -> int:
        """Array index of ``layer`` (default: the output layer)."""
        layer = self.depth if layer is None else layer
        if layer not in self.layers:
            raise DomainError(f"layer must be in 1..{self.depth}, got {layer}")
        return layer - 1

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: deterministic."""
        self.value(name, layer)
        return None


@public
@dataclass(frozen=True, repr=False)
class DeltaFlow(_PerLayer):
    r"""The :math:`\delta`-components of :math:`K^{(\ell)}` and :math:`\Theta^{(\ell)}` for two
    nearby inputs, layers :math:`1..L` (from :func:`delta_flow`).

    ``value(name, layer)`` with ``name`` in ``("K00", "dK1", "ddK2", "ddK0", "Theta00",
    "dTheta1", "ddTheta2", "ddTheta0")``, or the derived ``"robustness"`` (10.64) and
    ``"variance"`` (10.65) of a test point :math:`x_-` after training on :math:`x_+` alone.
    ``stderr`` is ``None`` (deterministic). ``kernel(name, eps1, eps2, layer)`` evaluates
    (10.110) at any pair of points on the line :math:`x_0+\tfrac\epsilon2\delta x`.
    """

    activation: str
    depth: int
    components: dict = field(default_factory=dict)   # name -> (L,) array, layers 1..L

    names = _NAMES + ("robustness", "variance")

    def _at(self, name: str, layer: int | None) -> float:
        return float(self.components[name][self._index(layer)])

    def value(self, name: str, layer: int | None = None) -> float:
        """Component ``name`` at ``layer`` (default: the output layer :math:`L`)."""
        if name == "robustness":
            T0, t1, t2 = (self._at(n, layer) for n in ("Theta00", "dTheta1", "ddTheta2"))
            return -t1 / T0 - 2.0 * t2 / T0 + (t1 / T0) ** 2
        if name == "variance":
            K0, k1, k2 = (self._at(n, layer) for n in ("K00", "dK1", "ddK2"))
            T0, t1 = self._at("Theta00", layer), self._at("dTheta1", layer)
            return 4.0 * k2 - 2.0 * k1 * t1 / T0 + K0 * (t1 / T0) ** 2
        if name not in _NAMES:
            raise DomainError(f"unknown name {name!r}; available: {', '.join(self.names)}")
        return self._at(name, layer)

    def kernel(self, name: str, eps1: float, eps2: float, layer: int | None = None) -> float:
        r""":math:`K_{\epsilon_1\epsilon_2}` (``name="K"``) or :math:`\Theta_{\epsilon_1\epsilon_2}`
        (``"Theta"``) to :math:`O(\delta^2)`, PDLT (10.110)."""
        if name not in ("K", "Theta"):
            raise DomainError(f"name must be 'K' or 'Theta', got {name!r}")
        c0, c1 = self._at(name + "00", layer), self._at("d" + name + "1", layer)
        c2, c0b = self._at("dd" + name + "2", layer), self._at("dd" + name + "0", layer)
        s, d = (eps1 + eps2) / 2.0, (eps1 - eps2) / 2.0
        return c0 + s * c1 + s * s * (c2 + c0b) + d * d * (c0b - c2)

    def polation_mean(self, s: Any, y_plus: float, y_minus: float, layer: int | None = None) -> np.ndarray:
        r"""Mean prediction at :math:`x_{(2s-1)}=sx_++(1-s)x_-` after training on :math:`x_\pm`,
        to :math:`O(\delta^2)` (corrected PDLT (10.113)–(10.115)); see :func:`polation_mean`."""
        return polation_mean(s, y_plus, y_minus, *(self._at(n, layer) for n in
                                                   ("Theta00", "dTheta1", "ddTheta2", "ddTheta0")))

    def latex(self) -> str:
        r"""The derived layer maps, one ``align`` line per component (book notation)."""
        rec = delta_recursions()
        lines = [rf"{sp.latex(_sym(n, primed=True))} &= {sp.latex(rec[n])}" for n in _NAMES]
        return "\\begin{align}\n" + " \\\\\n".join(lines) + "\n\\end{align}"

    def _repr_latex_(self) -> str:
        return "$\\displaystyle " + self.latex().replace("align", "aligned") + "$"

    def __repr__(self) -> str:
        return (f"DeltaFlow({self.activation}, {depth_text(self.depth)}, Theta00={short(self.components['Theta00'])}, "
                f"robustness(L)={self.value('robustness'):.6g})")

    def _repr_html_(self) -> str:
        return html_table("DeltaFlow (PDLT (10.110))",
                          [("activation", self.activation), ("depth", self.depth)]
                          + [(n, short(self.components[n])) for n in _NAMES])


def _atoms(act: Any, K00: float, orders: list, rtol: float) -> list:
    return [float(gaussian_expectation([(0, "sigma", p), (0, "sigma", q)], np.array([[K00]]), act,
                                       rtol=rtol)) for (p, q) in orders]


@public
def delta_flow(net: Any, x0: Any, dx: Any, *, lambda_b: Any = 1.0, lambda_w: Any = 1.0,
               rtol: float = 1e-12) -> DeltaFlow:
    r"""Iterate the derived :math:`\delta`-expansion of :math:`K` and :math:`\Theta` through a network.

    Parameters
    ----------
    net : effth.MLP
        Smooth activation (tanh, GELU, ...): the expansion needs derivatives of :math:`\sigma`
        (PDLT §10.3, footnote 38); for ReLU-like networks use :func:`finite_angle_flow`.
    x0, dx : array_like (n_0,)
        Midpoint and separation: the two inputs are :math:`x_\pm=x_0\pm\tfrac12\delta x`.
    lambda_b, lambda_w : float or sequence of L floats
        Learning rates :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` (PDLT (8.6)).
    rtol : float
        Accuracy of the one-input atoms.

    Returns
    -------
    DeltaFlow
        With first layer :math:`K_{00}=C_b+C_W x_0^2/n_0`, :math:`\delta K_{[1]}=C_Wx_0\cdot\delta x/n_0`,
        :math:`\delta\delta K_{[2]}=C_W\delta x^2/(4n_0)`, :math:`\delta\delta K_{[0]}=0` (4.8), and
        the same with :math:`\lambda` for :math:`\Theta` (8.23).

    Examples
    --------
    >>> import effth as et
    >>> d = et.pdlt.delta_flow(et.MLP("tanh", depth=3, c_w=1.0), [1.0, 0.0], [0.0, 0.1])
    >>> round(d.value("ddK2", layer=1), 6)
    0.00125
    """
    if not hasattr(net, "depth") or not hasattr(net, "c_w_at"):
        raise DomainError(f"net must be an effth.MLP, got {type(net).__name__}")
    act = net.act
    if not act.is_smooth:
        raise DomainError(f"the delta expansion needs a smooth activation (PDLT §10.3, footnote 38); "
                          f"{act.name!r} has kinks at {act.kinks}: for scale-invariant activations use "
                          "effth.pdlt.finite_angle_flow")
    x0 = real_array(x0, "x0", finite=True).ravel()
    dx = real_array(dx, "dx", finite=True).ravel()
    if x0.shape != dx.shape or x0.size == 0:
        raise DomainError(f"x0 and dx must be vectors of the same length, got {x0.shape} and {dx.shape}")
    L = net.depth
    lb, lw = per_layer(lambda_b, L, "lambda_b"), per_layer(lambda_w, L, "lambda_w")
    rtol = real_scalar(rtol, "rtol")
    n0 = x0.size
    xx, xd, dd = float(x0 @ x0) / n0, float(x0 @ dx) / n0, float(dx @ dx) / n0
    comp = {n: np.empty(L) for n in _NAMES}
    cw1, cb1 = net.c_w_at(1), net.c_b_at(1)
    state = [cb1 + cw1 * xx, cw1 * xd, cw1 * dd / 4.0, 0.0,
             lb[0] + lw[0] * xx, lw[0] * xd, lw[0] * dd / 4.0, 0.0]
    f, orders = _compiled()
    for ell in range(1, L + 1):
        if ell > 1:
            if not state[0] > 0.0:
                raise DomainError(f"K00 = {state[0]:.3g} at layer {ell - 1}: the expansion needs a "
                                  "positive single-input kernel")
            A = _atoms(act, state[0], orders, rtol)
            state = [float(v) for v in f(*state, net.c_b_at(ell), net.c_w_at(ell), lb[ell - 1],
                                         lw[ell - 1], *A)]
            if not all(math.isfinite(v) for v in state) or state[0] > _K_MAX:
                raise DomainError(f"the delta components overflowed at layer {ell} "
                                  "(the kernel explodes: lower C_W)")
        for n, v in zip(_NAMES, state):
            comp[n][ell - 1] = v
    return DeltaFlow(activation=act.name, depth=L, components=comp)


# --------------------------------------------------------------------------------- *-polation
@public
def polation_mean(s: Any, y_plus: float, y_minus: float, theta00: float, dtheta1: float,
                  ddtheta2: float, ddtheta0: float) -> np.ndarray:
    r"""Mean of the trained network at :math:`x_{(2s-1)}=sx_++(1-s)x_-`, trained on
    :math:`(x_\pm, y_\pm)`, to :math:`O(\delta^2)` — PDLT (10.113)–(10.115) corrected:

    .. math::
        m^\infty_{(2s-1)}=sy_++(1-s)y_--s(1-s)\frac{2\,\delta\delta\Theta_{[0]}}{4\Theta_{00}
        \delta\delta\Theta_{[2]}-\delta\Theta_{[1]}^2}\bigl[2\delta\delta\Theta_{[2]}(y_++y_-)
        -\delta\Theta_{[1]}(y_+-y_-)\bigr].

    ``s`` may be an array; :math:`s\in[0,1]` interpolates, anything else extrapolates.

    **Validity.** Against the exact kernel prediction the remainder is :math:`O(\delta^3)` for
    :math:`y_+=y_-`. For :math:`y_+\ne y_-` the exact nonlinear \*-polation has a further part
    proportional to :math:`y_+-y_-` -- :math:`O(\delta^2)` for equal norms, :math:`O(\delta)`
    otherwise -- coming from the :math:`O(\delta^3)`, :math:`O(\delta^4)` terms of
    :math:`\Theta` divided by the :math:`O(\delta^2)` training block; a second-order expansion
    cannot contain it (neither does the book's (10.113)), and an :class:`AccuracyWarning` says so.
    ``theta00`` is an NTK diagonal entry: a finite ``theta00 > 0``.
    """
    s = np.asarray(real_array(s, "s", finite=True), dtype=float)
    theta00 = positive(theta00, "theta00")
    if y_plus != y_minus:
        warnings.warn("the second-order *-polation formula misses a term proportional to y_plus - y_minus "
                      "of the same order (O(delta^2) for equal norms, O(delta) otherwise); it is exact "
                      "to O(delta^3) only for y_plus = y_minus", AccuracyWarning, stacklevel=2)
    den = 4.0 * theta00 * ddtheta2 - dtheta1 ** 2
    if not den > 0.0:
        raise DomainError(f"4 Theta00 ddTheta2 - dTheta1^2 = {den:.3g} must be positive: the two training "
                          "inputs must be distinct and their training NTK non-singular")
    corr = 2.0 * ddtheta0 / den * (2.0 * ddtheta2 * (y_plus + y_minus) - dtheta1 * (y_plus - y_minus))
    return s * y_plus + (1.0 - s) * y_minus - s * (1.0 - s) * corr


@public
def polation_mean_printed(s: Any, y_plus: float, y_minus: float, theta00: float, dtheta1: float,
                          ddtheta2: float, ddtheta0: float) -> np.ndarray:
    r"""The mean as printed in PDLT (10.113)–(10.114) (coefficient :math:`4s(1-s)`, denominator
    :math:`\Theta_{00}\delta\delta\Theta_{[2]}-\delta\Theta_{[1]}^2`, initial outputs dropped).

    Kept only so that tests and the documentation can show it disagrees with the exact kernel
    prediction; use :func:`polation_mean`."""
    s = np.asarray(real_array(s, "s", finite=True), dtype=float)
    den = theta00 * ddtheta2 - dtheta1 ** 2
    corr = ddtheta0 / den * (2.0 * ddtheta2 * (y_plus + y_minus) - dtheta1 * (y_plus - y_minus))
    return s * y_plus + (1.0 - s) * y_minus - 4.0 * s * (1.0 - s) * corr


# ------------------------------------------------------------------------------ finite angles
@public
@dataclass(frozen=True, repr=False)
class FiniteAngleFlow(_PerLayer):
    r"""Two equal-norm inputs through a scale-invariant network at finite angle (PDLT §5.5, §10.3.1).

    Names: ``"K_d"``, ``"psi"`` (angle of :math:`K`, (10.82)), ``"Theta_d"``, ``"zeta"`` (angle of
    :math:`\Theta`), ``"robustness"`` :math:`=\cos\zeta-1` (10.94) and ``"variance"``
    :math:`=K_d(1-2\cos\zeta\cos\psi+\cos^2\zeta)` (the first line of (10.63); it tends to
    :math:`K_d(1-\cos\zeta)^2` (10.95) as :math:`\psi\to0`).
    """

    activation: str
    depth: int
    series: dict = field(default_factory=dict)

    names = ("K_d", "psi", "Theta_d", "zeta", "robustness", "variance")

    def value(self, name: str, layer: int | None = None) -> float:
        """``name`` at ``layer`` (default :math:`L`)."""
        i = self._index(layer)
        if name == "robustness":
            return math.cos(self.series["zeta"][i]) - 1.0
        if name == "variance":
            cz, cp = math.cos(self.series["zeta"][i]), math.cos(self.series["psi"][i])
            return float(self.series["K_d"][i] * (1.0 - 2.0 * cz * cp + cz * cz))
        if name not in self.series:
            raise DomainError(f"unknown name {name!r}; available: {', '.join(self.names)}")
        return float(self.series[name][i])

    def __repr__(self) -> str:
        return (f"FiniteAngleFlow({self.activation}, {depth_text(self.depth)}, cos zeta(L)="
                f"{math.cos(self.series['zeta'][-1]):.6g}, cos psi(L)={math.cos(self.series['psi'][-1]):.6g})")

    def _repr_html_(self) -> str:
        return html_table("FiniteAngleFlow (PDLT (10.88)-(10.89))",
                          [("activation", self.activation), ("depth", self.depth)]
                          + [(n, short(v)) for n, v in self.series.items()])


@public
def finite_angle_flow(net: Any, x_plus: Any, x_minus: Any, *, lambda_b: Any = 1.0,
                      lambda_w: Any = 1.0) -> FiniteAngleFlow:
    r"""Exact two-input flow of :math:`K` and :math:`\Theta` for scale-invariant :math:`\sigma`.

    With :math:`\sigma(z)=a_+z\,\Theta(z)+a_-z\,\Theta(-z)`, :math:`A_2=(a_+^2+a_-^2)/2`,
    :math:`\rho=\frac1\pi\frac{(a_+-a_-)^2}{a_+^2+a_-^2}` and :math:`C_b=0`, PDLT (5.162),
    (10.88)–(10.89):

    .. math::
        K_d'=C_WA_2K_d,\quad \cos\psi'=\cos\psi+\rho(\sin\psi-\psi\cos\psi),\quad
        \Theta_d'=\chi\Theta_d+\lambda_b+\lambda_WA_2K_d,

        \Theta_d'\cos\zeta'=\chi(1-\rho\psi)\Theta_d\cos\zeta+\lambda_b+\lambda_WA_2K_d
        \{\cos\psi+\rho[\sin\psi-\psi\cos\psi]\},\qquad \chi=C_WA_2.

    These are exact (the arc-cosine kernels), not an expansion. At criticality with
    :math:`\lambda\propto1/L` the book finds :math:`\cos\zeta\to1/4` and the variance
    :math:`\to\frac9{16}K_d` (10.94)–(10.95) for any learning rates and initial angle.

    Parameters
    ----------
    net : effth.MLP
        Piecewise-linear activation (``relu``, ``leaky_relu``, ``linear``, ...) and :math:`C_b=0`
        in every layer.
    x_plus, x_minus : array_like (n_0,)
        Two inputs of equal norm.
    lambda_b, lambda_w : float or sequence of L floats
    """
    if not hasattr(net, "depth") or not hasattr(net, "c_w_at"):
        raise DomainError(f"net must be an effth.MLP, got {type(net).__name__}")
    act = net.act
    if act.is_polynomial and act.polynomial_degree == 1 and act.taylor_coefficients(1)[0] == 0:
        ap = am = float(act.taylor_coefficients(1)[1])
    elif act.family == "piecewise_linear":
        ap, am = float(act.param("a_plus")), float(act.param("a_minus"))
    else:
        raise DomainError(f"finite_angle_flow needs a scale-invariant activation (ReLU, leaky ReLU, "
                          f"linear); got {act.name!r}: use delta_flow for smooth activations")
    L = net.depth
    if any(net.c_b_at(ell) != 0.0 for ell in range(1, L + 1)):
        raise DomainError("finite_angle_flow needs C_b = 0 in every layer (the angle map (5.162) "
                          "holds only without biases)")
    xp = real_array(x_plus, "x_plus", finite=True).ravel()
    xm = real_array(x_minus, "x_minus", finite=True).ravel()
    if xp.shape != xm.shape or xp.size == 0:
        raise DomainError(f"x_plus and x_minus must be vectors of one length, got {xp.shape}, {xm.shape}")
    n0 = xp.size
    npp, nmm = float(xp @ xp), float(xm @ xm)
    if npp == 0.0 or not math.isclose(npp, nmm, rel_tol=1e-12):
        raise DomainError(f"the inputs must have equal, nonzero norms (got |x+|^2 = {npp:.6g}, "
                          f"|x-|^2 = {nmm:.6g}); use delta_flow or output_kernels otherwise")
    lb, lw = per_layer(lambda_b, L, "lambda_b"), per_layer(lambda_w, L, "lambda_w")
    A2 = 0.5 * (ap * ap + am * am)
    rho = (ap - am) ** 2 / (ap * ap + am * am) / math.pi
    cos_psi = max(-1.0, min(1.0, float(xp @ xm) / npp))
    Kd = net.c_w_at(1) * npp / n0
    Td = lb[0] + lw[0] * npp / n0
    Tc = lb[0] + lw[0] * float(xp @ xm) / n0            # Theta_d cos(zeta)
    out = {k: np.empty(L) for k in ("K_d", "psi", "Theta_d", "zeta")}
    for ell in range(1, L + 1):
        if ell > 1:
            cw = net.c_w_at(ell)
            chi = cw * A2
            psi = math.acos(cos_psi)
            g = cos_psi + rho * (math.sin(psi) - psi * cos_psi)
            Td, Tc = (chi * Td + lb[ell - 1] + lw[ell - 1] * A2 * Kd,
                      chi * (1.0 - rho * psi) * Tc + lb[ell - 1] + lw[ell - 1] * A2 * Kd * g)
            Kd, cos_psi = cw * A2 * Kd, max(-1.0, min(1.0, g))
            if not (math.isfinite(Kd) and math.isfinite(Td)) or Kd == 0.0:
                raise DomainError(f"K_d = {Kd:.3g} at layer {ell}: the kernel over- or underflows "
                                  "(C_W far from its critical value 1/A_2)")
        out["K_d"][ell - 1], out["psi"][ell - 1] = Kd, math.acos(cos_psi)
        out["Theta_d"][ell - 1] = Td
        out["zeta"][ell - 1] = math.acos(max(-1.0, min(1.0, Tc / Td))) if Td > 0 else 0.0
    return FiniteAngleFlow(activation=act.name, depth=L, series=out)
