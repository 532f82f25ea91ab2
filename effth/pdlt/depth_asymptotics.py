r"""Large-depth asymptotics of the NTK hierarchy at criticality (PDLT §9.2–§9.3, §11.3).

For each universality class of :func:`~effth.pdlt.criticality.find_criticality`, the book solves the
single-input recursions with the scaling ansatz :math:`\mathcal O^{(\ell)}\simeq c_\mathcal O\,
\ell^{-p_\mathcal O}` (PDLT (9.22)/(11.61)):

* **scale-invariant** (ReLU, leaky ReLU, linear; uniform learning rates): exact polynomials in
  :math:`\ell` (PDLT (9.42), (9.44), (9.49)–(9.52), (11.73)–(11.74));
* **K\*=0** (tanh, sin, erf, ...; learning rates (9.70) :math:`\lambda_b^{(\ell)}=\tilde\lambda_b
  \ell^{-p_\perp}`, :math:`\lambda_W^{(\ell)}=\tilde\lambda_W\ell^{1-p_\perp}`): power laws with
  :math:`p_\perp=b_1/a_1` (PDLT (9.65)–(9.66), (9.71), (9.81)–(9.86), (11.98), (11.101)).

Every normalized finite-width ratio grows like :math:`\ell/n` (scaling laws (9.26)–(9.27),
(11.65)); :attr:`NTKAsymptotics.ratios` holds the coefficients.  The coefficients come from the
activation's exact class data (:math:`A_2, A_4` or :math:`\sigma_1, a_1, b_1`).

:func:`iterate_ntk_single_input` iterates the *derived* single-input recursions
(:func:`~effth.pdlt.ntk.derive_ntk` with ``special="single-input"``, the same expressions
:func:`~effth.pdlt.ntk_flow` compiles) to :math:`10^4`–:math:`10^5` layers, and
:func:`measure_ntk_asymptotics` fits the exponents (with an error bar) and the coefficients there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from effth._display import html_table
from effth._signature import public
from effth._validate import real_scalar
from effth.activations import get_activation
from effth.arch import resolve_depth
from effth.errors import ConvergenceError, DomainError

__all__ = ["PowerLaw", "NTKAsymptotics", "ntk_asymptotics", "NTKDepthFlow", "iterate_ntk_single_input",
           "MeasuredLaw", "MeasuredNTKAsymptotics", "measure_ntk_asymptotics", "NTK_LAW_NAMES"]

#: the single-input quantities whose large-depth law :func:`ntk_asymptotics` gives
NTK_LAW_NAMES = ("K", "V", "Theta", "F", "B", "D", "A", "P", "Q")
_RATIO = {"V": "V/(nK^2)", "F": "F/(nK Theta)", "D": "D/(nK Theta)", "B": "B/(n Theta^2)",
          "A": "A/(n Theta^2)", "P": "P/(n Theta^2)", "Q": "Q/(n Theta^2)"}


@public
@dataclass(frozen=True)
class PowerLaw:
    r"""Leading large-depth law :math:`\mathcal O^{(\ell)}\simeq` ``coeff`` :math:`\cdot\,\ell^{-p}`
    (the book's convention, PDLT (9.22)); ``identically_zero`` for :math:`P` of the scale-invariant
    class (PDLT (11.74)).  ``equation`` names the book equation."""

    p: Any
    coeff: Any
    equation: str
    identically_zero: bool = False

    def __call__(self, ell: Any) -> np.ndarray:
        """The law at depth(s) ``ell``."""
        return float(self.coeff) * np.asarray(ell, float) ** (-float(self.p))

    def __repr__(self) -> str:
        if self.identically_zero:
            return f"PowerLaw(0 identically, {self.equation})"
        return f"PowerLaw({_short(self.coeff)} * l^({_short(-self.p)}), {self.equation})"


def _short(x: Any) -> str:
    if isinstance(x, sp.Basic):
        t = str(sp.nsimplify(x))
        return t if len(t) <= 14 else f"{float(x):.8g}"
    return f"{float(x):.8g}"


@public
@dataclass(frozen=True)
class NTKAsymptotics:
    r"""Leading large-depth laws of the single-input NTK hierarchy at criticality.

    Attributes
    ----------
    activation, universality_class : str
    schedule : str
        The learning-rate prescription the laws hold for: ``"uniform"`` (scale-invariant,
        :math:`\lambda^{(\ell)}=\tilde\lambda`) or ``"(9.70)"`` (:math:`K^\star=0`).
    lambda_b, lambda_w : float
        :math:`\tilde\lambda_b, \tilde\lambda_W`.
    laws : dict
        ``name -> PowerLaw`` for :data:`NTK_LAW_NAMES`.
    ratios : dict
        Coefficient :math:`s` of each normalized ratio, :math:`\simeq s\,\ell/n`: keys
        ``"V/(nK^2)"``, ``"F/(nK Theta)"``, ``"D/(nK Theta)"``, ``"B/(n Theta^2)"``,
        ``"A/(n Theta^2)"``, ``"P/(n Theta^2)"``, ``"Q/(n Theta^2)"``.
    data : dict
        The class data used: ``r, A2, A4, K_star, kappa, c`` or ``sigma1, a1, b1, p_perp, c, X``.
    """

    activation: str
    universality_class: str
    schedule: str
    lambda_b: float
    lambda_w: float
    laws: dict
    ratios: dict
    data: dict = field(default_factory=dict, compare=False)

    @property
    def p_perp(self) -> Any:
        r""":math:`p_\perp=b_1/a_1` (:math:`K^\star=0`; 0 for the scale-invariant class)."""
        return self.data.get("p_perp", 0)

    def learning_rates(self, depth: int) -> tuple[np.ndarray, np.ndarray]:
        r"""Per-layer :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}`, :math:`\ell=1..L`, of the
        prescription the laws hold for (uniform, or (9.70) without the :math:`L` factor)."""
        L = resolve_depth(depth, None, minimum=1)
        ell = np.arange(1, L + 1, dtype=float)
        if self.schedule == "uniform":
            return np.full(L, float(self.lambda_b)), np.full(L, float(self.lambda_w))
        p = float(self.p_perp)
        return self.lambda_b * ell ** (-p), self.lambda_w * ell ** (1.0 - p)

    def __repr__(self) -> str:
        rat = ", ".join(f"{k}~{_short(v)} l/n" for k, v in self.ratios.items())
        return f"NTKAsymptotics({self.activation}: {self.universality_class}, {rat})"

    def _repr_html_(self) -> str:
        rows = [("activation", self.activation), ("class", self.universality_class),
                ("learning rates", self.schedule)]
        rows += [(k, repr(v)) for k, v in self.laws.items()]
        rows += [(k, f"{_short(v)} l/n") for k, v in self.ratios.items()]
        return html_table("NTKAsymptotics (PDLT §9.2–§9.3, §11.3)", rows)


@public
def ntk_asymptotics(act: Any, *, lambda_b: float = 1.0, lambda_w: float = 1.0,
                    K1: float = 1.0) -> NTKAsymptotics:
    r"""Leading large-depth laws of :math:`K, V, \Theta, F, B, D, A, P, Q` at criticality.

    Parameters
    ----------
    act : str or Activation
        Of the scale-invariant or the :math:`K^\star=0` class (:func:`find_criticality`).
    lambda_b, lambda_w : float (keyword-only)
        :math:`\tilde\lambda_b, \tilde\lambda_W\ge0`: uniform rates (scale-invariant), or the
        amplitudes of (9.70) (:math:`K^\star=0`).
    K1 : float
        :math:`K^{(1)}=C_W\overline{x^2}>0`: the fixed point :math:`K^\star` of the scale-invariant
        class (any :math:`K^\star` is one); unused for :math:`K^\star=0`.

    Returns
    -------
    NTKAsymptotics

    Raises
    ------
    DomainError
        Another class (half-stable, none: the book gives no NTK asymptotics), :math:`a_1=0`,
        negative or non-finite rates, :math:`K^{(1)}\le0`.

    Notes
    -----
    Scale-invariant, :math:`r=A_4/A_2^2`, :math:`\kappa=A_2K^\star`, :math:`c=\lambda_b+\lambda_W
    \kappa`: :math:`V\simeq(3r-1)K^{\star2}\ell` (9.42), :math:`\Theta=c\ell` (9.44),
    :math:`D\simeq\frac{\ell^2}2[(r-1)\lambda_bK^\star+(4r-2)\lambda_W A_2K^{\star2}]` (9.49),
    :math:`F\simeq\frac{\ell^2}2rcK^\star` (9.50), :math:`B\simeq\frac{\ell^3}3rc^2` (9.51),
    :math:`A\simeq\frac{\ell^3}3[(r-1)\lambda_b^2+3(r-1)\lambda_b\lambda_W\kappa+(5r-3)\lambda_W^2
    \kappa^2]` (9.52), :math:`P\equiv0` (11.74), :math:`Q\simeq\frac{\ell^3}6rc\lambda_W\kappa`
    ((11.73); (11.79) with :math:`\lambda=\tilde\lambda/L`).

    :math:`K^\star=0`, :math:`c=\tilde\lambda_b+\tilde\lambda_W\sigma_1^2/(-a_1)`,
    :math:`X=p_\perp\tilde\lambda_b+(p_\perp-1)\tilde\lambda_W\sigma_1^2/(-a_1)`: the table of
    (9.65), (9.66), (9.71), (9.81), (9.82), (9.84), (9.86), (11.98), (11.101).
    """
    from effth.pdlt.criticality import find_criticality

    crit = find_criticality(act)
    lb, lw = (real_scalar(v, n) for v, n in ((lambda_b, "lambda_b"), (lambda_w, "lambda_w")))
    if not (lb >= 0 and lw >= 0 and math.isfinite(lb) and math.isfinite(lw)):
        raise DomainError(f"lambda_b, lambda_w must be finite and >= 0, got {lambda_b!r}, {lambda_w!r}")
    lbS, lwS = sp.nsimplify(lb), sp.nsimplify(lw)
    cls = crit.universality_class
    if cls == "scale-invariant":
        k = real_scalar(K1, "K1")
        if not (k > 0 and math.isfinite(k)):
            raise DomainError(f"K1 = K^(1) = C_W x^2 must be finite and > 0, got {K1!r}")
        Ks = sp.nsimplify(k)
        A2, A4 = crit.coefficients["A2"], crit.coefficients["A4"]
        r = sp.nsimplify(A4 / A2 ** 2)
        kap = A2 * Ks
        c = lbS + lwS * kap
        S = sp.simplify
        laws = {
            "K": PowerLaw(0, Ks, "(9.41)"),
            "V": PowerLaw(-1, S((3 * r - 1) * Ks ** 2), "(9.42)"),
            "Theta": PowerLaw(-1, S(c), "(9.44)"),
            "F": PowerLaw(-2, S(r * c * Ks / 2), "(9.50)"),
            "B": PowerLaw(-3, S(r * c ** 2 / 3), "(9.51)"),
            "D": PowerLaw(-2, S((lbS * (r - 1) * Ks + lwS * A2 * (4 * r - 2) * Ks ** 2) / 2), "(9.49)"),
            "A": PowerLaw(-3, S(((r - 1) * lbS ** 2 + 3 * (r - 1) * lbS * lwS * kap
                                 + (5 * r - 3) * lwS ** 2 * kap ** 2) / 3), "(9.52)"),
            "P": PowerLaw(-3, sp.S.Zero, "(11.74)", identically_zero=True),
            "Q": PowerLaw(-3, S(r * c * lwS * kap / 6), "(11.73), (11.79)"),
        }
        data = {"A2": A2, "A4": A4, "r": r, "K_star": Ks, "kappa": kap, "c": c}
        schedule = "uniform"
    elif cls == "K*=0":
        co = crit.coefficients
        a1, b1 = co["a1"], co["b1"]
        if a1 == 0:
            raise DomainError(f"{crit.activation}: a_1 = 0, so the K*=0 laws of PDLT §9.3 (which need "
                              "a_1 < 0) do not apply")
        s1 = co["sigma"][1]
        pp = sp.nsimplify(b1 / a1)
        m = -a1
        u = lwS * s1 ** 2 / m
        c = lbS + u
        X = pp * lbS + (pp - 1) * u
        S = sp.simplify
        laws = {
            "K": PowerLaw(1, S(1 / m), "(9.65)"),
            "V": PowerLaw(1, S(sp.Rational(2, 3) / a1 ** 2), "(9.66)"),
            "Theta": PowerLaw(pp - 1, S(c), "(9.71)"),
            "F": PowerLaw(pp - 1, S(c / ((5 - pp) * m)), "(9.81)"),
            "B": PowerLaw(2 * pp - 3, S(c ** 2 / 3), "(9.82)"),
            "D": PowerLaw(pp - 1, S(-2 * X / (9 * m)), "(9.84)"),
            "A": PowerLaw(2 * pp - 3, S(4 * X ** 2 / 27), "(9.86)"),
            "P": PowerLaw(2 * pp - 3, S(-(2 - pp) / (3 * (5 - pp)) * c ** 2), "(11.98)"),
            "Q": PowerLaw(2 * pp - 3, S(c ** 2 / (5 - pp) ** 2 * (1 - pp - lbS / c)) if c != 0 else sp.S.Zero,
                          "(11.101)"),
        }
        data = {"sigma1": s1, "a1": a1, "b1": b1, "p_perp": pp, "c": c, "X": X}
        schedule = "(9.70): lambda_b = lambda_b~ l^-p_perp, lambda_W = lambda_W~ l^(1-p_perp)"
    else:
        raise DomainError(f"{crit.activation} is of the {cls!r} class: the book gives the NTK depth "
                          "asymptotics only for the scale-invariant and K*=0 classes (PDLT §9.2–§9.3)"
                          + (f"; {crit.reason}" if cls == "none" else ""))
    if c == 0:
        raise DomainError("lambda_b = lambda_w = 0: the NTK vanishes identically")
    ratios = {}
    for name, key in _RATIO.items():
        law = laws[name]
        norm = (laws["K"].coeff ** 2 if name == "V" else
                laws["K"].coeff * laws["Theta"].coeff if name in ("F", "D") else laws["Theta"].coeff ** 2)
        ratios[key] = sp.simplify(law.coeff / norm)
    return NTKAsymptotics(crit.activation, cls, schedule, lb, lw, laws, ratios, data)


# ------------------------------------------------------------------ the derived single-input flow
_SINGLE = ("Theta", "H1", "B", "D", "F", "A", "P", "Q")


@lru_cache(maxsize=None)
def _single_step(statistic: str) -> tuple:
    """(atom keys, tensor names, scalar function) of the derived single-input recursion."""
    from effth.algebra.expectation import GaussianExpectation
    from effth.algebra.tensors import Kernel, SampleTensor
    from effth.pdlt.derivation.ntk_forward import LAMBDA_B, LAMBDA_W
    from effth.pdlt.derivation.pipeline import CB, CW
    from effth.pdlt.initialization.recursions import RATIO
    from effth.pdlt.ntk import derive_ntk
    from effth.pdlt.ntk.ntk_flow import _NAME

    rec = derive_ntk(statistic, special="single-input")
    expr = sp.expand(rec.expr)
    syms, keys, names, reps = [], [], [], {}
    for atom in sorted(expr.atoms(GaussianExpectation), key=sp.default_sort_key):
        _, factors = atom.to_numeric()
        s = sp.Symbol(f"_a{len(syms)}")
        syms.append(s)
        keys.append(tuple(sorted(o for _, _, o in factors)))
        reps[atom] = s
    for t in sorted(expr.atoms(SampleTensor), key=sp.default_sort_key):
        s = sp.Symbol(f"_t{len(names)}")
        names.append("K" if isinstance(t, Kernel) else _NAME[type(t)])
        reps[t] = s
    tsyms = [reps[t] for t in sorted(expr.atoms(SampleTensor), key=sp.default_sort_key)]
    params = sp.symbols("_cw _cb _lb _lw _ratio")
    body = expr.xreplace(reps).xreplace(dict(zip((CW, CB, LAMBDA_B, LAMBDA_W, RATIO), params)))
    fn = sp.lambdify(syms + tsyms + list(params), body, modules="math", cse=True)
    return tuple(keys), tuple(names), fn


def _closure(statistics: tuple) -> tuple:
    need = set(statistics)
    while True:
        more = {n for s in need for n in _single_step(s)[1] if n in _SINGLE} - need
        if not more:
            return tuple(s for s in _SINGLE if s in need)
        need |= more


class _Atoms:
    """Single-sample atoms :math:`\\langle\\prod_k\\sigma^{(p_k)}(z)\\rangle_K`: Gauss–Hermite for
    smooth σ; exact homogeneity from :math:`K=1` for the piecewise-linear family (pair atoms of
    distributional derivatives by the Leibniz tables, the rest closed forms)."""

    def __init__(self, act: Any, keys: set, nodes: int) -> None:
        from effth.pdlt.criticality import _is_pl

        self.keys = sorted(keys)
        self.act = act
        if act.is_smooth:
            x, w = np.polynomial.hermite_e.hermegauss(int(nodes))
            self.x, self.w = x, w / math.sqrt(2 * math.pi)
            top = max((max(k) for k in self.keys if k), default=0)
            self.f = [act.numpy(k) for k in range(top + 1)]
            self.mode = "gh"
            return
        if not _is_pl(act):
            raise DomainError(f"{act!r}: the large-depth single-input NTK flow handles smooth and "
                              "piecewise-linear activations")
        from effth.numerics import gaussian_expectation
        from effth.numerics.sample_tables import leibniz_pair_tables

        self.mode = "homogeneous"
        self.base = {}
        for k in self.keys:
            if len(k) == 2 and max(k) >= 2:
                self.base[k] = float(leibniz_pair_tables(np.eye(1), act, [k])[k][0, 0])
            elif max(k) == 2 and k.count(2) == 1 and 0 in k:
                self.base[k] = 0.0    # delta(z) sigma(z) ... = 0: sigma(0) = 0 (PDLT (11.67)-(11.71))
            elif max(k, default=0) >= 2:
                raise DomainError(
                    f"{act!r} is kinked: the atom <{' '.join(f'sigma^({p})' for p in k)}> puts sigma'' = delta "
                    "on a sample shared with other factors (it needs the undefined Theta(0)); the dNTK "
                    "P, Q is singular there (PDLT §∞.1)")
            else:
                self.base[k] = float(gaussian_expectation([(0, "sigma", p) for p in k], np.eye(1), act,
                                                          rtol=1e-13))

    def __call__(self, K: float) -> dict:
        if self.mode == "homogeneous":
            return {k: v * K ** ((len(k) - sum(k)) / 2) for k, v in self.base.items()}
        z = math.sqrt(K) * self.x
        vals = [f(z) for f in self.f]
        out = {}
        for k in self.keys:
            prod = self.w
            for p in k:
                prod = prod * vals[p]
            out[k] = float(np.sum(prod))
        return out


@public
@dataclass(frozen=True)
class NTKDepthFlow:
    r"""Single-input NTK hierarchy for :math:`\ell=1..L` from the derived recursions.

    ``ell`` (L,), ``kernel`` (:class:`~effth.pdlt.criticality.DepthFlow`: K, V, G1) and
    ``tensors``: ``name -> (L,)`` for the statistics computed."""

    ell: np.ndarray
    kernel: Any
    tensors: dict
    lambda_b: np.ndarray
    lambda_w: np.ndarray

    def __getitem__(self, name: str) -> np.ndarray:
        if name in ("K", "V", "G1"):
            return getattr(self.kernel, name)
        if name not in self.tensors:
            raise DomainError(f"this NTKDepthFlow holds {['K', 'V', 'G1'] + list(self.tensors)}, not {name!r}")
        return self.tensors[name]

    def __repr__(self) -> str:
        return f"NTKDepthFlow(depth={len(self.ell)}, statistics={list(self.tensors)})"


@public
def iterate_ntk_single_input(act: Any, *, c_w: Any, c_b: Any, K1: float, depth: int,
                             lambda_b: Any = 1.0, lambda_w: Any = 1.0, x2: float | None = None,
                             statistics: Any = ("Theta", "B", "D", "F", "A"),
                             nodes: int = 160) -> NTKDepthFlow:
    r"""Iterate the derived single-input NTK recursions to large depth.

    The recursions are :func:`~effth.pdlt.ntk.derive_ntk` ``(s, special="single-input")``
    (PDLT (9.6), (9.13)–(9.16), (11.55)–(11.56) as derived, not typed in), evaluated as scalar
    programs; the kernel sector comes from :func:`~effth.pdlt.criticality.iterate_single_input`.

    Parameters
    ----------
    act : str or Activation
        Smooth (Gauss–Hermite with ``nodes`` nodes) or piecewise linear (exact homogeneity; the
        single-input dNTK atoms :math:`\langle\sigma^{\prime\prime}\sigma\cdots\rangle` vanish, PDLT (11.67)–(11.71)).
    c_w, c_b : float (keyword-only)
    K1 : float
        :math:`K^{(1)}=C_b+C_W\overline{x^2}`.
    depth : int
    lambda_b, lambda_w : float or sequence of ``depth`` values
        :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` (e.g. :meth:`NTKAsymptotics.learning_rates`).
    x2 : float, optional
        :math:`\overline{x^2}` for :math:`\Theta^{(1)}=\lambda_b^{(1)}+\lambda_W^{(1)}\overline{x^2}`
        (default :math:`(K^{(1)}-C_b)/C_W`).
    statistics : sequence of str
        Some of ``"Theta", "H1", "B", "D", "F", "A", "P", "Q"`` (dependencies are added).

    Returns
    -------
    NTKDepthFlow
    """
    from effth.arch._common import per_layer
    from effth.pdlt.criticality import iterate_single_input

    act = get_activation(act)
    stats = (statistics,) if isinstance(statistics, str) else tuple(statistics)
    for s in stats:
        if s not in _SINGLE:
            raise DomainError(f"unknown statistic {s!r}; expected some of {_SINGLE}")
    L = resolve_depth(depth, None, minimum=1)
    lb = np.asarray(per_layer(lambda_b, L, "lambda_b"), float)
    lw = np.asarray(per_layer(lambda_w, L, "lambda_w"), float)
    kern = iterate_single_input(act, c_w=c_w, c_b=c_b, K1=K1, depth=L)
    cw, cb = float(c_w), float(c_b)
    if x2 is None:
        x2 = (float(K1) - cb) / cw
    order = _closure(stats)
    steps = {s: _single_step(s) for s in order}
    atoms = _Atoms(act, {k for s in order for k in steps[s][0]}, nodes)
    out = {s: np.zeros(L) for s in order}
    out["Theta"][0] = lb[0] + lw[0] * float(x2)
    with np.errstate(over="raise", invalid="raise"):
        for i in range(L - 1):
            at = atoms(float(kern.K[i]))
            prev = {s: out[s][i] for s in order}
            prev["K"], prev["V"], prev["G1"] = float(kern.K[i]), float(kern.V[i]), float(kern.G1[i])
            par = (cw, cb, lb[i + 1], lw[i + 1], 1.0)
            try:
                for s in order:
                    keys, names, fn = steps[s]
                    out[s][i + 1] = fn(*[at[k] for k in keys], *[prev[n] for n in names], *par)
            except (OverflowError, FloatingPointError, ZeroDivisionError):
                raise ConvergenceError(f"the single-input NTK flow overflows at layer {i + 2}") from None
    return NTKDepthFlow(np.arange(1, L + 1), kern, out, lb, lw)


# ------------------------------------------------------------------ measurement
@public
@dataclass(frozen=True)
class MeasuredLaw:
    r"""A law measured on the iterated flow: exponent ``p`` :math:`\pm` ``p_err`` (fit of
    :math:`\log|\mathcal O|` on :math:`\log\ell` over :math:`[L/10,L]`; the error bar is the drift
    from the previous decade :math:`[L/100,L/10]`, which bounds the remaining subleading
    :math:`\log\ell/\ell` bias), the predicted ``p_pred``, and ``ratio`` = flow / law at :math:`\ell=L`
    (``ratio_prev`` at :math:`\ell=L/10`: the approach to 1 is the subleading :math:`O(\log\ell/\ell)`)."""

    name: str
    p: float
    p_err: float
    p_pred: float
    ratio: float
    ratio_prev: float

    def __repr__(self) -> str:
        return (f"MeasuredLaw({self.name}: p={self.p:.5f} ± {self.p_err:.2g} (pred {self.p_pred:.5g}), "
                f"flow/law={self.ratio:.5f})")


@public
@dataclass(frozen=True)
class MeasuredNTKAsymptotics:
    """:class:`MeasuredLaw` per name, the normalized ratio slopes (fitted over ``[L/10, L]``,
    per unit :math:`\\ell/n`) and the flow."""

    laws: dict
    ratio_slopes: dict
    predicted: NTKAsymptotics = field(repr=False)
    flow: NTKDepthFlow = field(repr=False, compare=False)


@public
def measure_ntk_asymptotics(act: Any, depth: int = 10_000, *, lambda_b: float = 1.0,
                            lambda_w: float = 1.0, K1: float = 1.0,
                            statistics: Any = ("Theta", "B", "D", "F", "A")) -> MeasuredNTKAsymptotics:
    r"""Iterate at criticality with the laws' learning rates and measure every law.

    ``depth`` :math:`\ge100`; :math:`K^{(1)}` = ``K1``.  See :class:`MeasuredLaw`.
    """
    from effth.pdlt.criticality import find_criticality

    pred = ntk_asymptotics(act, lambda_b=lambda_b, lambda_w=lambda_w, K1=K1)
    L = resolve_depth(depth, None, minimum=100)
    crit = find_criticality(act)
    lb, lw = pred.learning_rates(L)
    fl = iterate_ntk_single_input(act, c_w=crit.c_w, c_b=crit.c_b, K1=K1, depth=L, lambda_b=lb,
                                  lambda_w=lw, statistics=statistics)
    ell = fl.ell.astype(float)

    def fit(lo: int, hi: int, y: np.ndarray) -> float:
        sl = slice(lo - 1, hi)
        return float(np.polyfit(np.log(ell[sl]), np.log(np.abs(y[sl])), 1)[0])

    laws = {}
    names = ["K", "V"] + [s for s in NTK_LAW_NAMES[2:] if s in fl.tensors]
    for name in names:
        law = pred.laws[name]
        y = fl[name]
        if law.identically_zero or law.coeff == 0:
            continue
        p_hi = -fit(max(2, L // 10), L, y)
        p_lo = -fit(max(2, L // 100), max(3, L // 10), y)
        laws[name] = MeasuredLaw(name, p_hi, abs(p_hi - p_lo), float(law.p),
                                 float(y[-1] / law(L)), float(y[L // 10 - 1] / law(L // 10)))
    slopes = {}
    sl = slice(max(2, L // 10) - 1, L)
    for name, key in _RATIO.items():
        if name not in names:
            continue
        norm = fl["K"] ** 2 if name == "V" else fl["K"] * fl["Theta"] if name in ("F", "D") else fl["Theta"] ** 2
        slopes[key] = float(np.polyfit(ell[sl], (fl[name] / norm)[sl], 1)[0])
    return MeasuredNTKAsymptotics(laws, slopes, pred, fl)
