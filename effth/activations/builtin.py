"""Built-in activations (book §2.2) with closed-form, overflow-free derivatives."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp
from numpy.polynomial import hermite_e as _HE
from numpy.polynomial import polynomial as _P
from scipy import special as _sps

from ..errors import DomainError
from .registry import Activation, Z, register_activation

__all__: list[str] = []

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRTPI = 2.0 / math.sqrt(math.pi)


def _num(x: Any, what: str) -> float | int:
    if isinstance(x, (bool, np.bool_)):
        raise DomainError(f"{what} must be a real number, got {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise DomainError(f"{what} must be a real number, got {x!r}") from None
    if not math.isfinite(v):
        raise DomainError(f"{what} must be finite, got {x!r}")
    if isinstance(x, (int, np.integer)):
        return int(x)
    return v


def _sym(x: float | int) -> sp.Expr:
    return sp.Integer(x) if isinstance(x, int) else sp.Float(x)


def _f64(z: Any) -> np.ndarray:
    return np.asarray(z, dtype=np.float64)


def _zero_jumps(c: float, m: int) -> sp.Expr:
    return sp.S.Zero


# ---------------------------------------------------------------- polynomial
def _poly_numpy(coeffs: tuple) -> Callable[[int], Callable]:
    c = np.array([float(x) for x in coeffs], dtype=np.float64)

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        d = _P.polyder(c, order) if order else c
        if d.size == 0:
            d = np.zeros(1)

        def f(z: Any) -> np.ndarray:
            z = _f64(z)
            return _P.polyval(z, d) + np.zeros_like(z)
        return f
    return impl


def _make_polynomial(name: str, coeffs: tuple) -> Activation:
    coeffs = tuple(_num(x, "polynomial coefficient") for x in coeffs)
    if len(coeffs) == 0:
        raise DomainError("polynomial activation needs at least one coefficient, e.g. coeffs=(0, 1)")
    expr = sum((_sym(ck) * Z**k for k, ck in enumerate(coeffs)), sp.S.Zero)
    return Activation(name=name, family="polynomial", params=(("coeffs", coeffs),), expr=expr,
                      kinks=(), strip=math.inf, _numpy_impl=_poly_numpy(coeffs), _jump_impl=_zero_jumps)


def linear() -> Activation:
    return _make_polynomial("linear", (0, 1))


def polynomial(coeffs: Any = None) -> Activation:
    if coeffs is None:
        raise DomainError("polynomial activation needs coeffs=(c0, c1, ..., cd)")
    try:
        coeffs = tuple(coeffs)
    except TypeError:
        raise DomainError(f"coeffs must be a sequence of numbers, got {coeffs!r}") from None
    return _make_polynomial("polynomial", coeffs)


def monomial(degree: Any = None) -> Activation:
    if isinstance(degree, (bool, np.bool_)) or not isinstance(degree, (int, np.integer)) or degree < 0:
        raise DomainError(f"monomial needs an int degree >= 0, got degree={degree!r}")
    act = _make_polynomial("monomial", (0,) * int(degree) + (1,))
    return Activation(name="monomial", family="polynomial", params=(("degree", int(degree)),), expr=act.expr,
                      kinks=(), strip=math.inf, _numpy_impl=act._numpy_impl, _jump_impl=_zero_jumps)


# ---------------------------------------------------------- piecewise linear
def _make_pl(name: str, a_plus: Any, a_minus: Any, expr: sp.Expr | None = None) -> Activation:
    ap = _num(a_plus, "a_plus")
    am = _num(a_minus, "a_minus")
    if expr is None:   # equal slopes: the linear function a z (no kink, a polynomial to SymPy)
        expr = (_sym(ap) * Z if ap == am else _sym(ap) * sp.Max(Z, 0) + _sym(am) * sp.Min(Z, 0))
    fap, fam = float(ap), float(am)

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        if order == 0:
            return lambda z: np.where(_f64(z) >= 0, fap * _f64(z), fam * _f64(z)) + 0.0
        if order == 1:
            return lambda z: np.where(_f64(z) >= 0, fap, fam)
        return lambda z: np.zeros_like(_f64(z))

    def jumps(c: float, m: int) -> sp.Expr:
        return sp.nsimplify(_sym(ap) - _sym(am)) if m == 1 else sp.S.Zero

    kinked = fap != fam
    return Activation(name=name, family="piecewise_linear", params=(("a_minus", am), ("a_plus", ap)),
                      expr=expr, kinks=(0.0,) if kinked else (), strip=0.0 if kinked else math.inf,
                      _numpy_impl=impl, _jump_impl=jumps)


def relu() -> Activation:
    return _make_pl("relu", 1, 0, sp.Max(Z, 0))


def leaky_relu(slope: Any = 0.01) -> Activation:
    return _make_pl("leaky_relu", 1, slope)


def abs_() -> Activation:
    return _make_pl("abs", 1, -1, sp.Abs(Z))


def scale_invariant(a_plus: Any = None, a_minus: Any = None) -> Activation:
    if a_plus is None or a_minus is None:
        raise DomainError("scale_invariant needs both a_plus and a_minus")
    return _make_pl("scale_invariant", a_plus, a_minus)


# ---------------------------------------------------------------------- step
def _make_step(name: str, low: Any, high: Any) -> Activation:
    lo, hi = _num(low, "low"), _num(high, "high")
    flo, fhi = float(lo), float(hi)
    expr = _sym(lo) + (_sym(hi) - _sym(lo)) * sp.Heaviside(Z, 1)

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        if order == 0:
            return lambda z: np.where(_f64(z) >= 0, fhi, flo)
        return lambda z: np.zeros_like(_f64(z))

    def jumps(c: float, m: int) -> sp.Expr:
        return sp.nsimplify(_sym(hi) - _sym(lo)) if m == 0 else sp.S.Zero

    return Activation(name=name, family="step", params=(("high", hi), ("low", lo)), expr=expr,
                      kinks=(0.0,) if flo != fhi else (), strip=0.0 if flo != fhi else math.inf,
                      _numpy_impl=impl, _jump_impl=jumps)


def step() -> Activation:
    return _make_step("step", 0, 1)


def sign() -> Activation:
    return _make_step("sign", -1, 1)


# ------------------------------------------------------------ smooth families
def _poly_in(base: Callable[[np.ndarray], np.ndarray], chain: np.ndarray) -> Callable[[int], Callable]:
    """Derivatives of u(z) when u' = chain(u) (a polynomial in u): P_{n+1} = P_n' * chain."""

    @lru_cache(maxsize=None)
    def coeffs(order: int) -> np.ndarray:
        if order == 0:
            return np.array([0.0, 1.0])
        return _P.polymul(_P.polyder(coeffs(order - 1)), chain)

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        if order == 0:
            return lambda z: base(_f64(z))
        c = coeffs(order)[::-1].copy()

        def f(z: Any) -> np.ndarray:
            u = base(_f64(z))
            if len(c) == 1:
                return np.full_like(u, c[0])
            out = u * c[0]                 # Horner; the first step without a constant array
            out += c[1]
            for ci in c[2:]:
                out *= u
                out += ci
            return out
        return f
    return impl


_tanh_impl = _poly_in(np.tanh, np.array([1.0, 0.0, -1.0]))            # t' = 1 - t^2
_sigmoid_impl = _poly_in(_sps.expit, np.array([0.0, 1.0, -1.0]))     # s' = s - s^2


def _smooth(name: str, family: str, expr: sp.Expr, strip: float, impl: Callable) -> Activation:
    return Activation(name=name, family=family, params=(), expr=expr, kinks=(), strip=strip,
                      _numpy_impl=impl, _jump_impl=_zero_jumps)


def tanh() -> Activation:
    return _smooth("tanh", "tanh", sp.tanh(Z), math.pi / 2, _tanh_impl)


def sigmoid() -> Activation:
    return _smooth("sigmoid", "sigmoid", 1 / (1 + sp.exp(-Z)), math.pi, _sigmoid_impl)


@lru_cache(maxsize=None)
def _softplus_impl(order: int) -> Callable:
    if order == 0:
        return lambda z: np.logaddexp(0.0, _f64(z))
    return _sigmoid_impl(order - 1)


def softplus() -> Activation:
    return _smooth("softplus", "softplus", sp.log(1 + sp.exp(Z)), math.pi, _softplus_impl)


def _z_times(g_impl: Callable[[int], Callable]) -> Callable[[int], Callable]:
    """Derivatives of z*g(z) by the product rule: (z g)^(n) = z g^(n) + n g^(n-1)."""

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        g_n = g_impl(order)
        g_m = g_impl(order - 1) if order else None

        def f(z: Any) -> np.ndarray:
            z = _f64(z)
            out = z * g_n(z)
            if order:
                out = out + order * g_m(z)
            return out
        return f
    return impl


_swish_impl = _z_times(_sigmoid_impl)


def swish() -> Activation:
    return _smooth("swish", "swish", Z / (1 + sp.exp(-Z)), math.pi, _swish_impl)


def erf() -> Activation:
    return _smooth("erf", "erf", sp.erf(Z), math.inf, _erf_impl)


@lru_cache(maxsize=None)
def _Phi_impl(order: int) -> Callable:
    """Derivatives of the standard normal CDF."""
    if order == 0:
        return lambda z: _sps.ndtr(_f64(z))
    c = np.zeros(order)
    c[-1] = _INV_SQRT_2PI * (-1.0) ** (order - 1)

    def f(z: Any) -> np.ndarray:
        z = _f64(z)
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            out = _HE.hermeval(z, c) * np.exp(-0.5 * z * z)
        return np.where(np.abs(z) > 80.0, 0.0, out)
    return f


@lru_cache(maxsize=None)
def _erf_impl(order: int) -> Callable:
    """erf(z) = 2 Phi(sqrt(2) z) - 1, so erf^(n)(z) = 2 sqrt(2)^n Phi^(n)(sqrt(2) z) for n >= 1."""
    if order == 0:
        return lambda z: _sps.erf(_f64(z))
    phi_n = _Phi_impl(order)
    scale = 2.0 * math.sqrt(2.0) ** order
    return lambda z: scale * phi_n(math.sqrt(2.0) * _f64(z))


_gelu_impl = _z_times(_Phi_impl)


def gelu() -> Activation:
    return _smooth("gelu", "gelu", Z * (1 + sp.erf(Z / sp.sqrt(2))) / 2, math.inf, _gelu_impl)


def _trig(kind: str) -> Activation:
    shift = 0 if kind == "sin" else 1
    cycle = (np.sin, np.cos, lambda z: -np.sin(z), lambda z: -np.cos(z))

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        g = cycle[(order + shift) % 4]
        return lambda z: g(_f64(z))

    expr = sp.sin(Z) if kind == "sin" else sp.cos(Z)
    return Activation(name=kind, family="trig", params=(("kind", kind),), expr=expr, kinks=(),
                      strip=math.inf, _numpy_impl=impl, _jump_impl=_zero_jumps)


def sin() -> Activation:
    return _trig("sin")


def cos() -> Activation:
    return _trig("cos")


def _register_builtins() -> None:
    table = [
        ("linear", linear, ("identity",)),
        ("polynomial", polynomial, ()),
        ("monomial", monomial, ()),
        ("relu", relu, ()),
        ("leaky_relu", leaky_relu, ()),
        ("abs", abs_, ()),
        ("scale_invariant", scale_invariant, ()),
        ("step", step, ("perceptron",)),
        ("sign", sign, ()),
        ("tanh", tanh, ()),
        ("sin", sin, ()),
        ("cos", cos, ()),
        ("erf", erf, ()),
        ("sigmoid", sigmoid, ()),
        ("softplus", softplus, ()),
        ("swish", swish, ("silu",)),
        ("gelu", gelu, ()),
    ]
    for name, fac, aliases in table:
        register_activation(name, fac, aliases=aliases, overwrite=True)


_register_builtins()
