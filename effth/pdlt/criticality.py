r"""Criticality and universality classes of the single-input kernel recursion (PDLT §5.2–§5.4).

Single input, layer-independent :math:`(C_W, C_b)`, equal widths: kernel map (5.4), susceptibilities
(5.50)–(5.51), criticality (5.55)–(5.57), vertex (5.109), NLO metric (5.110)/(5.140). Classes (PDLT §5.2, §5.3.2–§5.3.4):
``'scale-invariant'``, ``'K*=0'``, ``'half-stable'``, ``'none'``. Which Gaussian form is used for
:math:`g', g''` (heat form, polynomial-weighted form, homogeneity) is explained in ``docs/criticality.md``.
"""

from __future__ import annotations

from effth._signature import public

import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp
from scipy.optimize import brentq

from effth._display import html_table
from effth._validate import integer, real_scalar
from effth.activations import Z, get_activation
from effth.arch import resolve_depth
from effth.arch._common import as_real
from effth.errors import ConvergenceError, DomainError
from effth.numerics import gaussian_expectation

__all__ = ["kernel_map", "chi_parallel", "chi_perp", "j_function", "taylor_expansions",
           "find_criticality", "Criticality", "DepthAsymptotics", "check_critical", "CriticalityCheck",
           "NonCriticalWarning", "iterate_single_input", "DepthFlow", "fit_power_law",
           "measure_asymptotics", "MeasuredAsymptotics", "CLASSES"]

CLASSES = ("scale-invariant", "K*=0", "half-stable", "none")


class NonCriticalWarning(UserWarning):
    """Critical behaviour requested at hyperparameters that are not critical."""


# ------------------------------------------------------------------ helpers g, χ∥, χ⊥, j
def _is_pl(act: Any) -> bool:
    """Scale-invariant σ(λz) = λσ(z), λ > 0: piecewise linear through 0 (incl. c·z and user expressions)."""
    if act.family == "piecewise_linear":
        return True
    if act.is_polynomial:
        return (act.polynomial_degree or 0) <= 1 and act.expr.subs(Z, 0) == 0
    if act.family != "user":
        return False
    zz = np.array([-3.1, -1.0, -0.2, 0.3, 1.0, 2.7])
    f = act.numpy(0)
    with np.errstate(all="ignore"):
        return bool(all(np.allclose(f(lam * zz), lam * f(zz), rtol=1e-12, atol=1e-14) for lam in (0.37, 2.9)))


def _pl_slopes(act: Any) -> tuple:
    """Exact (a_+, a_-) of a scale-invariant σ (PDLT (5.59))."""
    if act.family == "piecewise_linear":
        return sp.nsimplify(act.param("a_plus")), sp.nsimplify(act.param("a_minus"))
    f = act.numpy(0)
    return sp.nsimplify(float(f(np.array(1.0)))), sp.nsimplify(-float(f(np.array(-1.0))))


def _E(factors: list, K: np.ndarray, act: Any, rtol: float) -> np.ndarray:
    return gaussian_expectation(factors, np.asarray(K, float)[..., None, None], act, rtol=rtol)


def _check_K(K: Any) -> np.ndarray:
    K = np.asarray(K, dtype=float)
    if not np.all(np.isfinite(K)) or np.any(K < 0):
        raise DomainError(f"kernel values must be finite and >= 0, got {K!r}")
    return K


def _check_c(c_w: Any, c_b: Any) -> tuple[float, float]:
    """(C_W, C_b) as floats from Python, NumPy or SymPy numbers; C_W > 0, C_b >= 0, finite."""
    c_w, c_b = as_real(c_w, "c_w"), as_real(c_b, "c_b")
    if not (math.isfinite(c_b) and math.isfinite(c_w)) or c_b < 0 or c_w <= 0:
        raise DomainError(f"need c_w = C_W > 0 and c_b = C_b >= 0 (finite); got c_w={c_w!r}, c_b={c_b!r}")
    return c_w, c_b


def _g(act: Any, K: np.ndarray, rtol: float) -> np.ndarray:
    return _E([(0, "sigma", 0), (0, "sigma", 0)], K, act, rtol)


def _gprime(act: Any, K: np.ndarray, rtol: float) -> np.ndarray:
    """g'(K) (5.50)/C_W: heat form for smooth σ, weighted form for kinked σ, exact for piecewise linear."""
    if _is_pl(act):
        ap, am = (float(x) for x in _pl_slopes(act))
        return np.full(np.shape(K), 0.5 * (ap * ap + am * am))
    K = np.asarray(K, float)
    out = np.empty(K.shape)
    small = K < 1.0 if act.is_smooth else np.zeros(K.shape, bool)
    if np.any(small):     # heat form: no cancellation as K -> 0
        ks = K[small]
        out[small] = (_E([(0, "sigma", 1), (0, "sigma", 1)], ks, act, rtol)
                      + _E([(0, "sigma", 0), (0, "sigma", 2)], ks, act, rtol))
    if np.any(~small):    # weighted form: no Dirac products, no zero-crossing atom <sigma sigma''>
        kb = K[~small]
        if np.any(kb <= 0):
            raise DomainError(f"g'(K) of kinked {act!r} needs K > 0 (the K -> 0 limit is not defined there)")
        num = (_E([(0, "sigma", 0), (0, "sigma", 0), (0, "z", 2)], kb, act, rtol) - kb * _g(act, kb, rtol))
        out[~small] = num / (2 * kb * kb)
    return out


def _perp(act: Any, K: np.ndarray, rtol: float) -> np.ndarray:
    if not act.is_smooth and act.family == "step":
        return np.full(np.shape(K), np.inf)          # σ' = J δ(z): ⟨σ'σ'⟩ diverges
    return _E([(0, "sigma", 1), (0, "sigma", 1)], K, act, rtol)


def _half_gpp(act: Any, K: np.ndarray, rtol: float) -> np.ndarray:
    """g''(K)/2 = j/(8 K^2 C_W) (5.111)."""
    if _is_pl(act):
        return np.zeros(np.shape(K))
    if act.is_smooth:
        return 0.25 * (_E([(0, "sigma", 0), (0, "sigma", 4)], K, act, rtol)
                       + 4 * _E([(0, "sigma", 1), (0, "sigma", 3)], K, act, rtol)
                       + 3 * _E([(0, "sigma", 2), (0, "sigma", 2)], K, act, rtol))
    if np.any(K <= 0):
        raise DomainError(f"g''(K) of kinked {act!r} needs K > 0")
    f = [(0, "sigma", 0), (0, "sigma", 0)]
    num = (_E(f + [(0, "z", 4)], K, act, rtol) - 6 * K * _E(f + [(0, "z", 2)], K, act, rtol)
           + 3 * K * K * _g(act, K, rtol))
    return num / (8 * K ** 4)


@public
def kernel_map(act: Any, *, c_w: float, c_b: float, rtol: float = 1e-12) -> Callable[[Any], np.ndarray]:
    r"""The single-input kernel map :math:`K\mapsto C_b+C_W\,g(K)` (PDLT (5.4), (5.46)).

    Parameters
    ----------
    act : str or Activation
    c_w, c_b : float (keyword-only)
        Weight and bias variances (:math:`C_W>0`, :math:`C_b\ge0`); Python, NumPy or SymPy numbers.
    rtol : float
        Quadrature tolerance of :func:`effth.numerics.gaussian_expectation`.

    Returns
    -------
    callable
        ``f(K: array_like (...)) -> ndarray (...)``.
    """
    act = get_activation(act)
    c_w, c_b = _check_c(c_w, c_b)
    return lambda K: c_b + c_w * _g(act, _check_K(K), rtol)


@public
def chi_parallel(act: Any, K: Any, *, c_w: float, rtol: float = 1e-12) -> np.ndarray:
    r"""Parallel susceptibility :math:`\chi_\parallel(K)=C_Wg'(K)` (PDLT (5.10), (5.50)).

    ``c_w`` (:math:`C_W>0`) is keyword-only; ``K`` is a float or an array of kernels.

    Smooth σ: :math:`C_W\langle\sigma'\sigma'+\sigma\sigma''\rangle_K`; kinked σ:
    :math:`\frac{C_W}{2K^2}\langle\sigma\sigma(z^2-K)\rangle_K` (:math:`K>0`); piecewise linear: :math:`C_WA_2`.
    """
    return _check_c(c_w, 0.0)[0] * _gprime(get_activation(act), _check_K(K), rtol)


@public
def chi_perp(act: Any, K: Any, *, c_w: float, rtol: float = 1e-12) -> np.ndarray:
    r"""Perpendicular susceptibility :math:`\chi_\perp(K)=C_W\langle\sigma'\sigma'\rangle_K` (PDLT (5.51)).

    ``c_w`` (:math:`C_W>0`) is keyword-only.

    ``inf`` for jump activations (step/perceptron/sign), whose :math:`\sigma'` is a Dirac delta.
    """
    return _check_c(c_w, 0.0)[0] * _perp(get_activation(act), _check_K(K), rtol)


@public
def j_function(act: Any, K: Any, *, c_w: float, rtol: float = 1e-12) -> np.ndarray:
    r""":math:`j(K)=C_W\langle\sigma\sigma[(z^2/K)^2-6z^2/K+3]\rangle_K=4K^2C_Wg''(K)` (PDLT (5.111)).

    ``c_w`` (:math:`C_W>0`) is keyword-only.
    """
    K = _check_K(K)
    return 8 * K * K * _check_c(c_w, 0.0)[0] * _half_gpp(get_activation(act), K, rtol)


# ------------------------------------------------------------------ exact Taylor expansions
def _poly_mul(p: dict, q: dict, deg: int) -> dict:
    out: dict = {}
    for a, x in p.items():
        for b, y in q.items():
            if a + b <= deg:
                out[a + b] = out.get(a + b, 0) + x * y
    return out


def _gauss_series(poly: dict, order: int) -> list:
    """Coefficients of K^0..K^order of <poly(z)>_K, using <z^{2m}> = (2m-1)!! K^m."""
    return [sp.nsimplify(sp.simplify(poly.get(2 * m, 0) * sp.factorial2(2 * m - 1))) for m in range(order + 1)]


@public
@lru_cache(maxsize=64)
def taylor_expansions(act: Any, order: int = 4) -> dict:
    r"""Exact small-:math:`K` series from the Taylor coefficients :math:`\sigma_p=\sigma^{(p)}(0)` ((5.80)–(5.88)).

    Returns a dict of lists of SymPy coefficients of :math:`K^0..K^{\rm order}`:
    ``'g'`` (:math:`\langle\sigma^2\rangle`; the :math:`K` coefficient is the corrected (5.81)
    :math:`\sigma_1^2+\sigma_0\sigma_2`), ``'perp'`` (:math:`\langle\sigma'^2\rangle`), ``'var'``
    (:math:`\langle\sigma^4\rangle-\langle\sigma^2\rangle^2`), plus ``'sigma'`` (the :math:`\sigma_p`).
    """
    act = get_activation(act)
    s = act.taylor_coefficients(2 * order + 2)
    deg = 2 * order
    sig = {p: s[p] / sp.factorial(p) for p in range(deg + 1) if s[p] != 0}
    dsig = {p: s[p + 1] / sp.factorial(p) for p in range(deg + 1) if s[p + 1] != 0}
    sq = _poly_mul(sig, sig, deg)
    g = _gauss_series(sq, order)
    s4 = _gauss_series(_poly_mul(sq, sq, deg), order)
    g2 = [sum(g[i] * g[m - i] for i in range(m + 1)) for m in range(order + 1)]
    var = [sp.nsimplify(sp.simplify(s4[m] - g2[m])) for m in range(order + 1)]
    perp = _gauss_series(_poly_mul(dsig, dsig, deg), order)
    return {"sigma": tuple(s), "g": g, "perp": perp, "var": var}


# ------------------------------------------------------------------ result objects
@public
@dataclass(frozen=True)
class DepthAsymptotics:
    r"""Large-depth behaviour at criticality (PDLT (5.94), (5.97), (5.99), (5.127), (5.130)–(5.134), (5.143)).

    Conventions: :math:`K^{(\ell)}-K^\star\simeq` ``K_coeff`` :math:`/\ell^{p_0}`, :math:`V^{(\ell)}\simeq` ``V_coeff``
    :math:`\cdot\ell^{-p_V}` (scale-invariant: :math:`p_V=-1`), :math:`V/(nK^2)\simeq` ``slope`` :math:`\cdot\ell/n`.
    ``None`` where the book gives no value (data dependent, e.g. :math:`\ell_0`).
    """

    p0: Any
    K_coeff: Any
    pV: Any
    V_coeff: Any
    slope: Any
    p_parallel: Any = None
    p_perp: Any = None
    G1_bare_limit: Any = None
    G1_ren_coeff: Any = None
    c_w1_renormalization: Any = None
    exact: bool = True


@public
@dataclass(frozen=True)
class Criticality:
    r"""Critical hyperparameters and universality class of an activation (PDLT §5.2–§5.3).

    Attributes
    ----------
    activation : str
        ``repr`` of the activation.
    universality_class : str
        One of :data:`CLASSES`.
    c_w, c_b : sympy.Expr or float or None
        Critical :math:`(C_W, C_b)`, weights first (exact SymPy numbers where derived symbolically;
        ``None`` for ``'none'``).  Usable as they are:
        ``MLP(act, depth, c_w=crit.c_w, c_b=crit.c_b)``.
    K_star : float or None
        Fixed point; ``None`` for the scale-invariant line of fixed points (any :math:`K^\star`).
    chi_parallel, chi_perp : float or None
        Susceptibilities at :math:`K^\star` (at :math:`K\to0^+` for the :math:`K^\star=0` class).
    coefficients : dict
        Exact class data: ``A2, A4`` (scale-invariant), ``a1, a2, a3, b1, sigma`` (:math:`K^\star=0`),
        ``a1_tilde`` (half-stable, :math:`\Delta K'=\Delta K+\tilde a_1\Delta K^2`, (5.102)), ``R0`` etc.
    asymptotics : DepthAsymptotics or None
    stability : str
    other_fixed_points : tuple of float
        Further fixed points of the critical kernel map (half-stable: the "trivial" one, PDLT §5.3.4; footnote 21 as printed has
        ≈3.2 for GELU, corrected here to 3.035 because two independent quadratures give it).
    reason : str
        Why the class was assigned (for ``'none'``: why there is no criticality).
    """

    activation: str
    universality_class: str
    c_w: Any
    c_b: Any
    K_star: Any
    chi_parallel: Any
    chi_perp: Any
    coefficients: dict = field(default_factory=dict, compare=False)
    asymptotics: Any = None
    stability: str = ""
    other_fixed_points: tuple = ()
    reason: str = ""

    def __repr__(self) -> str:
        if self.universality_class == "none":
            return f"Criticality({self.activation}: no critical point)"
        ks = "any (line of fixed points)" if self.K_star is None else _short(self.K_star)
        return (f"Criticality({self.activation}: {self.universality_class} class, "
                f"c_w={_short(self.c_w)}, c_b={_short(self.c_b)}, K*={ks})")

    def _repr_html_(self) -> str:
        a = self.asymptotics
        rows = [("activation", self.activation), ("universality class", self.universality_class)]
        if self.universality_class != "none":
            rows += [("c_w = C_W", _short(self.c_w)), ("c_b = C_b", _short(self.c_b)),
                     ("K*", "any" if self.K_star is None else _short(self.K_star)),
                     ("chi_par, chi_perp", f"{_short(self.chi_parallel)}, {_short(self.chi_perp)}")]
            if a is not None and a.slope is not None:
                rows.append(("V/(nK^2) ~ slope * l/n", _short(a.slope)))
            rows.append(("stability", self.stability))
        rows.append(("reason", self.reason))
        return _html_rows("Criticality (PDLT §5.2–§5.3)", rows)

    def _repr_latex_(self) -> str:
        return "$" + self.latex() + "$"

    def latex(self) -> str:
        """One-line LaTeX summary (critical point, class, leading asymptotics)."""
        from effth.printing import latex as _lx

        def L(x: Any) -> str:
            return _lx(sp.nsimplify(x)) if isinstance(x, (sp.Basic, int)) else f"{float(x):.10g}"

        name = r"\mathrm{" + self.activation.split("(")[1].split(")")[0].replace("_", r"\_") + "}"
        if self.universality_class == "none":
            return name + r":\ \text{no criticality (}" + self.reason.split(";")[0].replace("_", r"\_") + ")"
        ks = r"\text{any}" if self.K_star is None else L(self.K_star)
        out = (name + r":\ \text{" + self.universality_class + r" class},\ (C_W,C_b)=(" + L(self.c_w) + ","
               + L(self.c_b) + r"),\ K^\star=" + ks)
        a = self.asymptotics
        if a is not None and a.slope is not None:
            out += r",\ \frac{V^{(\ell)}}{n(K^{(\ell)})^2}\simeq" + L(a.slope) + r"\,\frac{\ell}{n}"
        if a is not None and self.universality_class == "K*=0":
            out += r",\ K^{(\ell)}\simeq" + L(a.K_coeff) + r"\,\ell^{-" + L(a.p0) + "}"
        return out


def _short(x: Any) -> str:
    """A number in a few characters (exact SymPy numbers as printed when short)."""
    if x is None:
        return "None"
    if isinstance(x, sp.Basic):
        text = str(x)
        return text if len(text) <= 16 else f"{float(x):.8g}"
    try:
        return f"{float(x):.8g}"
    except (TypeError, ValueError):
        return str(x)[:24]


_html_rows = html_table


# ------------------------------------------------------------------ find_criticality
def _scan_roots(F: Callable, lo: float, hi: float, n: int, exclude: Callable = lambda k: False) -> list:
    ks = np.geomspace(lo, hi, n)
    fs = F(ks)
    roots = []
    for i in range(n - 1):
        if np.isfinite(fs[i]) and np.isfinite(fs[i + 1]) and fs[i] * fs[i + 1] < 0:
            r = brentq(lambda k: float(F(np.array([k]))[0]), ks[i], ks[i + 1], xtol=1e-14, rtol=1e-13)
            if not exclude(r):
                roots.append(r)
    return roots


def _nonzero_critical_points(act: Any, k_range: tuple, n_grid: int, rtol: float) -> tuple[list, str]:
    """Solve R(K) = chi_perp/chi_par = 1 (5.73) for K > 0 with C_b >= 0 (5.71)-(5.72)."""
    def Rm1(K: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return _perp(act, K, rtol) / _gprime(act, K, rtol) - 1.0
    roots = _scan_roots(Rm1, k_range[0], k_range[1], n_grid)
    good, rejected = [], []
    for K in roots:
        perp = float(_perp(act, np.array([K]), rtol)[0])
        c_w = 1.0 / perp
        c_b = K - float(_g(act, np.array([K]), rtol)[0]) * c_w
        (good if c_b >= 0 else rejected).append((K, c_b, c_w))
    note = "; ".join(f"R(K)=1 at K={K:.6g} needs C_b={cb:.6g} < 0" for K, cb, _ in rejected)
    return good, note


@public
@lru_cache(maxsize=128)
def find_criticality(act: Any, *, k_range: tuple = (1e-3, 1e3), n_grid: int = 161,
                     rtol: float = 1e-12) -> Criticality:
    r"""Critical :math:`(C_W, C_b)`, fixed point and universality class (PDLT §5.2–§5.3.4).

    Parameters
    ----------
    act : str or Activation
    k_range : (float, float)
        :math:`K` window scanned for nonzero solutions of :math:`\mathcal R(K)=\chi_\perp/\chi_\parallel=1` (5.73).
    n_grid : int
        Log-grid points of the scan (roots refined with Brent's method).
    rtol : float
        Quadrature tolerance.

    Returns
    -------
    Criticality

    Notes
    -----
    * Piecewise linear (incl. linear, |z|): :math:`C_b=0`, :math:`C_W=1/A_2` (5.67), any :math:`K^\star`.
    * Smooth with :math:`\sigma_0=0\ne\sigma_1` (5.89): :math:`(0,1/\sigma_1^2)` (5.90); stable iff the first
      nonzero :math:`a_k` of :math:`C_Wg=K+a_1K^2+a_2K^3+\dots` is negative (PDLT §5.3.3 and its footnote 19); else the scan
      looks for half-stable points (5.71)–(5.73) with :math:`C_b\ge0`.
    * Jump activations: :math:`\chi_\perp=\infty`, no criticality.
    """
    act = get_activation(act)
    name = repr(act)
    try:
        k_lo, k_hi = (real_scalar(k, "k_range") for k in k_range)
    except (TypeError, ValueError):
        raise DomainError(f"k_range must be a pair (K_min, K_max), got {k_range!r}") from None
    if not (0 < k_lo < k_hi < math.inf):
        raise DomainError(f"k_range must satisfy 0 < K_min < K_max < inf, got {k_range!r}")
    n_grid = integer(n_grid, "n_grid", minimum=3)
    if act.expr is not None and sp.simplify(act.expr) == 0:
        raise DomainError(f"{name} is identically zero: chi_par = chi_perp = 0 for every C_W, no criticality")
    if _is_pl(act):
        ap, am = _pl_slopes(act)
        A2, A4 = (ap ** 2 + am ** 2) / 2, (ap ** 4 + am ** 4) / 2
        if A2 == 0:
            raise DomainError(f"{name} is identically zero: C_W chi = 0, no criticality")
        slope = sp.nsimplify(3 * A4 / A2 ** 2 - 1)
        asym = DepthAsymptotics(p0=0, K_coeff=0, pV=-1, V_coeff=slope, slope=slope, p_parallel=0, p_perp=0,
                                G1_bare_limit=0, G1_ren_coeff=0, c_w1_renormalization=0)
        return Criticality(name, "scale-invariant", 1 / A2, sp.S.Zero, None, 1.0, 1.0,
                           {"a_plus": ap, "a_minus": am, "A2": A2, "A4": A4}, asym,
                           "marginal: line of fixed points K* = K^(1) (5.66)", (),
                           "g(K) = A2 K is linear (5.60): chi_par = chi_perp = A2 C_W (5.62)")
    if not act.is_smooth:
        if act.family == "step":
            return Criticality(name, "none", None, None, None, None, math.inf, {}, None, "", (),
                               "sigma' is a Dirac delta at the jump, so chi_perp = C_W<sigma'sigma'> is "
                               "infinite for every K > 0; (5.79) fails")
        good, note = _nonzero_critical_points(act, k_range, n_grid, rtol)
        return _half_stable(act, good, note, rtol, {})
    ser = taylor_expansions(act, 4)
    s = ser["sigma"]
    R0 = sp.nsimplify(sp.simplify(s[1] ** 2 / (s[1] ** 2 + s[0] * s[2]))) if (s[1] ** 2 + s[0] * s[2]) != 0 else None
    coeffs: dict = {"sigma": s[:6], "R0": R0}
    good, note = _nonzero_critical_points(act, k_range, n_grid, rtol)
    if s[0] == 0 and s[1] != 0:
        c_w = sp.nsimplify(1 / s[1] ** 2)
        a = [sp.nsimplify(sp.simplify(c_w * x)) for x in ser["g"]]          # C_W g = K + a1 K^2 + ...
        b1 = sp.nsimplify(sp.simplify(c_w * ser["perp"][1]))
        coeffs.update(a1=a[2], a2=a[3], a3=a[4], b1=b1, alternatives=tuple(good))
        first = next(((k - 1, a[k]) for k in range(2, 5) if a[k] != 0), None)
        if first is not None and first[1] < 0:
            return Criticality(name, "K*=0", c_w, sp.S.Zero, 0.0, 1.0, 1.0, coeffs,
                               _kstar0_asymptotics(a[2], a[3], b1, first, c_w),
                               f"stable: first nonzero a_{first[0]} = {first[1]} < 0", (),
                               "sigma_0 = 0, sigma_1 != 0 (5.89): (C_W, C_b) = (1/sigma_1^2, 0) (5.90)")
        coeffs["unstable_K0"] = (f"K*=0 with C_W=1/sigma_1^2 is unstable (a_{first[0]} = {first[1]} > 0)" if first
                                 else "a_1 = a_2 = a_3 = 0: stability of K*=0 undetermined at this order")
    else:
        cb0 = sp.nsimplify(-s[0] ** 2 / s[1] ** 2) if s[1] != 0 else None
        coeffs["K0_limit"] = f"K* -> 0 would need C_b -> {cb0} (5.72)" if cb0 is not None else "sigma_1 = 0"
    return _half_stable(act, good, note + ("; " + coeffs.get("unstable_K0", coeffs.get("K0_limit", ""))), rtol,
                        coeffs)


def _kstar0_asymptotics(a1: Any, a2: Any, b1: Any, first: tuple, c_w: Any) -> DepthAsymptotics:
    if first[0] != 1:   # a1 = 0, first nonzero a_k < 0: Delta K ~ (-k a_k l)^(-1/k)  (PDLT §5.3.3, footnote 19)
        k, ak = first
        return DepthAsymptotics(p0=sp.Rational(1, k), K_coeff=(-k * ak) ** sp.Rational(-1, k), pV=None,
                                V_coeff=None, slope=None, exact=True)
    return DepthAsymptotics(
        p0=1, K_coeff=1 / (-a1), pV=1, V_coeff=sp.Rational(2, 3) / a1 ** 2, slope=sp.Rational(2, 3),
        p_parallel=2, p_perp=sp.nsimplify(b1 / a1), G1_bare_limit=-1 / (3 * (-a1)),
        G1_ren_coeff=sp.nsimplify((84 * a1 ** 2 - 90 * a1 * b1 - a2) / (3 * a1 ** 3)),   # corrected (5.143)
        c_w1_renormalization=sp.Rational(2, 3) * c_w)


def _half_stable(act: Any, good: list, note: str, rtol: float, coeffs: dict) -> Criticality:
    name = repr(act)
    if not good:
        return Criticality(name, "none", None, None, None, None, None, coeffs, None, "", (),
                           "no K* with chi_par = chi_perp = 1 and C_b >= 0 (5.73)"
                           + (f"; {note.strip('; ')}" if note.strip("; ") else ""))
    K, c_b, c_w = good[0]
    Ka = np.array([K])
    at1 = float(c_w * _half_gpp(act, Ka, rtol)[0])                      # (5.102)
    var = float(c_w ** 2 * (_E([(0, "sigma", 0)] * 4, Ka, act, rtol)[0] - _g(act, Ka, rtol)[0] ** 2))
    fmap = kernel_map(act, c_w=c_w, c_b=c_b, rtol=rtol)
    others = tuple(_scan_roots(lambda k: fmap(k) - k, 0.5 * K, 2.0 * K, 201,
                               exclude=lambda r: abs(r - K) < 1e-3 * K))
    coeffs = dict(coeffs, a1_tilde=at1, alternatives=tuple(good[1:]))
    stab = ("attracting from below, repelled above" if at1 > 0 else "attracting from above, repelled below")
    asym = DepthAsymptotics(p0=1, K_coeff=1.0 / (-at1) if at1 else None, pV=-1, V_coeff=var,
                            slope=var / K ** 2, exact=False)
    return Criticality(name, "half-stable", c_w, c_b, K, float(c_w * _gprime(act, Ka, rtol)[0]),
                       float(c_w * _perp(act, Ka, rtol)[0]), coeffs, asym, stab, others,
                       "R(K*) = 1 at K* > 0 with C_b >= 0 (5.71)-(5.73); chi_par = 1 makes it non-hyperbolic"
                       + (f"; {note.strip('; ')}" if note.strip("; ") else ""))


# ------------------------------------------------------------------ flagging
@public
@dataclass(frozen=True)
class CriticalityCheck:
    """Outcome of :func:`check_critical` (values at ``K``)."""

    is_critical: bool
    K: float
    chi_parallel: float
    chi_perp: float
    fixed_point_residual: float
    deviation: float
    message: str

    def __repr__(self) -> str:
        return (f"CriticalityCheck({'critical' if self.is_critical else 'NOT critical'}, K={self.K:.6g}, "
                f"chi_par={self.chi_parallel:.8g}, chi_perp={self.chi_perp:.8g}, "
                f"deviation={self.deviation:.3g})")

    def _repr_html_(self) -> str:
        return _html_rows("CriticalityCheck (PDLT (5.55)–(5.57))", [
            ("critical", self.is_critical), ("K", f"{self.K:.6g}"),
            ("chi_par", f"{self.chi_parallel:.10g}"), ("chi_perp", f"{self.chi_perp:.10g}"),
            ("fixed-point residual", f"{self.fixed_point_residual:.3g}"),
            ("deviation", f"{self.deviation:.3g}")])


@public
def check_critical(act: Any, *, c_w: float, c_b: float, K: float | None = None, tol: float = 1e-6,
                   action: str = "raise") -> CriticalityCheck:
    r"""Check :math:`\chi_\parallel=\chi_\perp=1` and :math:`K=C_b+C_Wg(K)` (PDLT (5.55)–(5.57)).

    Parameters
    ----------
    act : str or Activation
    c_w, c_b : float (keyword-only)
        :math:`C_W, C_b`; Python, NumPy or SymPy numbers (e.g. a :class:`Criticality`'s).
    K : float, optional
        Where to evaluate; default the class's :math:`K^\star` (0 for the :math:`K^\star=0` class,
        1 for the scale-invariant line, where nothing depends on it but :math:`C_b`).
    tol : float
        Allowed :math:`\max(|\chi_\parallel-1|,|\chi_\perp-1|,|{\rm residual}|/\max(1,K))`.
    action : {'raise', 'warn', 'return'}
        On failure raise :class:`~effth.errors.DomainError`, warn :class:`NonCriticalWarning`, or just return.
    """
    if action not in ("raise", "warn", "return"):
        raise DomainError(f"action must be 'raise', 'warn' or 'return', got {action!r}")
    act = get_activation(act)
    c_w, c_b = _check_c(c_w, c_b)
    crit = find_criticality(act)
    if K is None:
        K = 1.0 if crit.universality_class in ("scale-invariant", "none") else float(crit.K_star)
    Ka = _check_K(np.array([float(K)]))
    if Ka[0] == 0 and not act.is_smooth and not _is_pl(act):
        raise DomainError(f"K = 0 is not allowed for kinked {act!r}")
    cp = float(c_w * _gprime(act, Ka, 1e-12)[0])
    cq = float(c_w * _perp(act, Ka, 1e-12)[0])
    res = float(c_b + c_w * _g(act, Ka, 1e-12)[0] - Ka[0])
    dev = max(abs(cp - 1), abs(cq - 1), abs(res) / max(1.0, Ka[0]))
    ok = bool(np.isfinite(dev) and dev <= tol)
    target = ("no critical point exists" if crit.universality_class == "none" else
              f"critical point ({crit.universality_class}): c_w={float(crit.c_w):.10g}, c_b={float(crit.c_b):.10g}")
    msg = (f"{act!r} at c_w={c_w:.10g}, c_b={c_b:.10g}, K={Ka[0]:.6g}: chi_par={cp:.8g}, chi_perp={cq:.8g}, "
           f"fixed-point residual C_b+C_W g(K)-K={res:.3g}, deviation={dev:.3g} (tol {tol:g}); {target}")
    out = CriticalityCheck(ok, float(Ka[0]), cp, cq, res, dev, ("critical: " if ok else "NOT critical: ") + msg)
    if not ok and action == "raise":
        raise DomainError(out.message)
    if not ok and action == "warn":
        warnings.warn(out.message, NonCriticalWarning, stacklevel=2)
    return out


# ------------------------------------------------------------------ depth iteration
@public
@dataclass(frozen=True)
class DepthFlow:
    r"""Single-input flow :math:`K^{(\ell)}, V^{(\ell)}, G^{\{1\}(\ell)}` for :math:`\ell=1..L` (equal widths)."""

    ell: np.ndarray
    K: np.ndarray
    V: np.ndarray
    G1: np.ndarray
    method: str

    @property
    def layers(self) -> tuple:
        r"""Book layer numbers held, :math:`(1, \dots, L)`."""
        return tuple(int(x) for x in self.ell)

    def __repr__(self) -> str:
        return f"DepthFlow(depth={len(self.ell)}, method={self.method!r}, K^(L)={float(self.K[-1]):.6g})"

    def _repr_html_(self) -> str:
        return _html_rows("DepthFlow: single-input K, V, G1 (PDLT (5.46), (5.109), (5.140))", [
            ("depth L", len(self.ell)), ("method", self.method), ("K^(L)", f"{float(self.K[-1]):.6g}"),
            ("V^(L)", f"{float(self.V[-1]):.6g}"), ("G1^(L)", f"{float(self.G1[-1]):.6g}")])


class _GH:
    """Fast Gauss–Hermite helpers for smooth σ (probabilists' nodes, weights normalized)."""

    def __init__(self, act: Any, n: int) -> None:
        x, w = np.polynomial.hermite_e.hermegauss(n)
        self.x, self.w = x, w / math.sqrt(2 * math.pi)
        self.f = [act.numpy(k) for k in range(5)]

    def __call__(self, K: float, need_g1: bool) -> tuple:
        z = math.sqrt(K) * self.x
        s0, s1, s2 = self.f[0](z), self.f[1](z), self.f[2](z)
        w = self.w
        g = w @ (s0 * s0)
        q = 0.0
        if need_g1:
            q = 0.25 * (w @ (s0 * self.f[4](z) + 4 * s1 * self.f[3](z) + 3 * s2 * s2))
        return g, w @ (s1 * s1 + s0 * s2), w @ (s0 ** 4) - g * g, q


@public
def iterate_single_input(act: Any, *, c_w: float, c_b: float, K1: float, depth: int | None = None,
                         hidden_layers: int | None = None, c_w1: float = 0.0, c_b1: float = 0.0,
                         method: str = "auto", nodes: int = 160,
                         k_max: float = 1e150, k_min: float = 1e-280) -> DepthFlow:
    r"""Iterate (5.46), (5.109), (5.140) (bare (5.110) for ``c_b1 = c_w1 = 0``) from :math:`K^{(1)}`.

    :math:`K'=C_b+C_Wg`, :math:`V'=\chi_\parallel^2V+C_W^2(\langle\sigma^4\rangle-\langle\sigma^2\rangle^2)`,
    :math:`G'=c_b^{\{1\}}+c_W^{\{1\}}g+\chi_\parallel G+\tfrac18 jV/K^2`, with :math:`V^{(1)}=G^{(1)}=0`.

    Parameters
    ----------
    act : str or Activation
    c_w, c_b : float (keyword-only, like every argument after ``act``)
        :math:`C_W, C_b`; Python, NumPy or SymPy numbers.
    K1 : float
        :math:`K^{(1)}=C_b+C_W\overline{x^2}` (5.2).
    depth : int
        Number of layers :math:`L\ge1`; or give ``hidden_layers = depth - 1``.
    c_w1, c_b1 : float
        :math:`1/n` hyperparameter corrections (5.138); :math:`c_W^{\{1\}}=\tfrac23C_W` renormalizes (5.142).
    method : {'auto', 'exact', 'gauss_hermite', 'quadrature'}
        'auto': exact homogeneity for piecewise linear, Gauss–Hermite (``nodes``) for smooth σ,
        :func:`~effth.numerics.gaussian_expectation` otherwise.
    k_max, k_min : float
        The kernel must stay in ``[k_min, k_max]`` (if ``K1 > 0``).

    Raises
    ------
    ConvergenceError
        The kernel blows up or underflows (message names the layer); never returns NaN.
    DomainError
        Bad arguments.
    """
    act = get_activation(act)
    c_w, c_b = _check_c(c_w, c_b)
    K1 = float(_check_K(as_real(K1, "K1")))
    depth = resolve_depth(depth, hidden_layers, minimum=1)
    c_w1, c_b1 = as_real(c_w1, "c_w1"), as_real(c_b1, "c_b1")
    if method == "auto":
        method = "exact" if _is_pl(act) else ("gauss_hermite" if act.is_smooth else "quadrature")
    if method == "exact" and not _is_pl(act):
        raise DomainError(f"method='exact' needs a piecewise-linear activation, got {act!r}")
    if method == "gauss_hermite" and not act.is_smooth:
        raise DomainError(f"method='gauss_hermite' needs a smooth activation, got {act!r}")
    if method not in ("exact", "gauss_hermite", "quadrature"):
        raise DomainError(f"unknown method {method!r}")
    if method == "exact":
        ap, am = (float(x) for x in _pl_slopes(act))
        A2, A4 = 0.5 * (ap * ap + am * am), 0.5 * (ap ** 4 + am ** 4)
        helpers = lambda K: (A2 * K, A2, (3 * A4 - A2 * A2) * K * K, 0.0)   # noqa: E731  (5.60), (5.114)
    elif method == "gauss_hermite":
        gh = _GH(act, int(nodes))
        helpers = lambda K: gh(K, True)   # noqa: E731
    else:
        def helpers(K: float) -> tuple:
            Ka = np.array([K])
            g = float(_g(act, Ka, 1e-10)[0])
            var = float(_E([(0, "sigma", 0)] * 4, Ka, act, 1e-10)[0]) - g * g
            if K == 0:
                raise ConvergenceError(f"kernel of kinked {act!r} reached exactly 0: derivatives undefined")
            return g, float(_gprime(act, Ka, 1e-10)[0]), var, float(_half_gpp(act, Ka, 1e-10)[0])
    K = np.empty(depth)
    V = np.zeros(depth)
    G = np.zeros(depth)
    K[0] = K1
    for i in range(depth - 1):
        with np.errstate(over="ignore", invalid="ignore"):
            g, gp, var, q = helpers(K[i])
            chi = c_w * gp
            K[i + 1] = c_b + c_w * g
            V[i + 1] = chi * chi * V[i] + c_w * c_w * var
            G[i + 1] = c_b1 + c_w1 * g + chi * G[i] + c_w * q * V[i]      # j V/(8K^2) = C_W (g''/2) V
        lay = i + 2
        if not (np.isfinite(K[i + 1]) and np.isfinite(V[i + 1]) and np.isfinite(G[i + 1])) or K[i + 1] > k_max:
            raise ConvergenceError(
                f"the kernel blows up at layer {lay}: K^({lay})={K[i + 1]:.3g} (V={V[i + 1]:.3g}), limit {k_max:g} "
                f"(chi_par={chi:.6g} at K^({lay - 1})={K[i]:.3g}); C_b={c_b:g}, C_W={c_w:g} are not critical")
        if K1 > 0 and K[i + 1] < k_min:
            raise ConvergenceError(
                f"the kernel vanishes (underflow) at layer {lay}: K^({lay})={K[i + 1]:.3g} < {k_min:g} "
                f"(chi_par={chi:.6g}); exponential decay means C_b={c_b:g}, C_W={c_w:g} are not critical")
    return DepthFlow(np.arange(1, depth + 1), K, V, G, method)


@public
def fit_power_law(ell: Any, y: Any) -> tuple[float, float]:
    r"""Least-squares fit :math:`y\simeq c\,\ell^{\,e}`; returns ``(e, c)``. Needs ``y > 0``."""
    ell, y = np.asarray(ell, float), np.asarray(y, float)
    if ell.shape != y.shape or ell.size < 2 or np.any(ell <= 0) or np.any(y <= 0) or not np.all(np.isfinite(y)):
        raise DomainError("fit_power_law needs >= 2 positive finite points of equal shape")
    e, lc = np.polyfit(np.log(ell), np.log(y), 1)
    return float(e), float(math.exp(lc))


@public
@dataclass(frozen=True)
class MeasuredAsymptotics:
    r"""Exponents fitted on the iterated recursion over ``window`` (compare with :class:`DepthAsymptotics`)."""

    window: tuple
    p0: float | None
    pV: float
    slope: float
    lK: float
    lV: float
    lG1: float
    G1: float
    flow: DepthFlow = field(repr=False, compare=False)

    def __repr__(self) -> str:
        p0 = "None" if self.p0 is None else f"{self.p0:.4g}"
        return (f"MeasuredAsymptotics(window={self.window}, p0={p0}, pV={self.pV:.4g}, "
                f"slope={self.slope:.6g})")


@public
def measure_asymptotics(act: Any, depth: int = 10_000, K1: float | None = None, *, renormalized: bool = False,
                        window: tuple | None = None, **kw: Any) -> MeasuredAsymptotics:
    r"""Iterate at the critical point of :func:`find_criticality` and fit the depth exponents.

    Fits :math:`K-K^\star\propto\ell^{-p_0}` (:math:`K` itself for the scale-invariant class, :math:`p_0=0`),
    :math:`V\propto\ell^{-p_V}` and the slope of :math:`V/K^2` against :math:`\ell` (5.130)/(5.131) over
    ``window`` (default last 90 % of layers). ``lK, lV, lG1, G1`` are
    :math:`\ell(K-K^\star),\ \ell V,\ \ell G^{\{1\}},\ G^{\{1\}}` at :math:`\ell=L`.
    ``K1`` defaults to 1, or to :math:`K^\star` for half-stable σ (then only the slope is meaningful; ``p0`` None).
    """
    crit = find_criticality(act)
    if crit.universality_class == "none":
        raise DomainError(f"{crit.activation} has no critical point: {crit.reason}")
    if K1 is None:
        K1 = float(crit.K_star) if crit.universality_class == "half-stable" else 1.0
    c_w1 = (2.0 / 3.0) * float(crit.c_w) if renormalized else 0.0
    fl = iterate_single_input(act, c_w=crit.c_w, c_b=crit.c_b, K1=K1, depth=depth, c_w1=c_w1, **kw)
    lo, hi = window or (max(2, depth // 10), depth)
    if not (1 <= lo and hi <= depth and hi - lo >= 2):
        raise DomainError(f"window {(lo, hi)!r} must satisfy 1 <= lo, hi <= depth={depth}, hi - lo >= 2")
    sl = slice(lo - 1, hi)
    ell = fl.ell[sl].astype(float)
    kst = 0.0 if crit.K_star is None or crit.universality_class == "scale-invariant" else float(crit.K_star)
    dK = np.abs(fl.K[sl] - kst)
    p0 = -fit_power_law(ell, dK)[0] if np.all(dK > 0) else None
    if crit.universality_class == "scale-invariant":
        p0 = -fit_power_law(ell, fl.K[sl])[0]
    pV = -fit_power_law(ell, fl.V[sl])[0]
    slope = float(np.polyfit(ell, fl.V[sl] / fl.K[sl] ** 2, 1)[0])
    L = float(depth)
    return MeasuredAsymptotics((lo, hi), p0, pV, slope, L * (fl.K[-1] - kst), L * fl.V[-1], L * fl.G1[-1],
                               fl.G1[-1], fl)
