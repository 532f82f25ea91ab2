"""The :class:`Activation` record and the name registry.

An :class:`Activation` bundles everything the algebra and the numerics need to
know about a pointwise nonlinearity sigma(z): its SymPy expression, the points
where it is not C-infinity (kinks), the jumps of its derivatives there, the
half-width of its strip of analyticity (used to pick quadrature degrees), fast
float64 NumPy implementations of the *regular* parts of its derivatives, and
exact Taylor coefficients at 0.
"""

from __future__ import annotations

from effth._signature import public

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp

from ..errors import DomainError

__all__ = [
    "Z",
    "Activation",
    "register_activation",
    "available_activations",
]

Z = sp.Symbol("z", real=True)

_KINK_HEADS = (sp.Heaviside, sp.Abs, sp.sign, sp.Max, sp.Min, sp.Piecewise)


def _drop_deltas(expr: sp.Expr) -> sp.Expr:
    """Remove every DiracDelta term (keep the regular part of a distribution)."""
    if not expr.has(sp.DiracDelta):
        return expr
    return sp.expand(expr).replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.S.Zero)


@public
@dataclass(frozen=True)
class Activation:
    """A pointwise activation function sigma(z) with its analytic data.

    Instances are immutable, hashable, and compare equal iff ``(name, params)``
    agree.  Build them with :func:`get_activation`.

    Attributes
    ----------
    name : str
        Canonical registry name (``"relu"``, ``"tanh"``, ..., or ``"user"``).
    family : str
        One of ``'polynomial' | 'piecewise_linear' | 'step' | 'erf' | 'gelu' |
        'trig' | 'tanh' | 'sigmoid' | 'softplus' | 'swish' | 'user'``.
    params : tuple
        Sorted ``((key, value), ...)``; read with :meth:`param`.
    expr : sympy.Expr
        sigma(Z) with ``Z = Symbol('z', real=True)``.
    kinks : tuple of float
        Sorted points where sigma is not C-infinity; ``()`` if smooth.
    strip : float
        Half-width of the strip of analyticity about the real axis
        (``math.inf`` for entire functions, ``0.0`` if kinked).

    Examples
    --------
    >>> from effth.activations import get_activation
    >>> act = get_activation("relu")
    >>> act.singular_part(2)
    ((0.0, 1, 0),)
    >>> float(act.numpy(0)(-1.0)), float(act.numpy(1)(2.0))
    (0.0, 1.0)
    """

    name: str
    family: str = field(compare=False)
    params: tuple = ()
    expr: Any = field(default=None, compare=False)
    kinks: tuple = field(default=(), compare=False)
    strip: float = field(default=math.inf, compare=False)
    _numpy_impl: Any = field(default=None, compare=False, repr=False)
    _jump_impl: Any = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------------ basic
    def param(self, key: str) -> Any:
        """Return the value of parameter ``key`` (KeyError if absent)."""
        for k, v in self.params:
            if k == key:
                return v
        raise KeyError(f"activation {self.name!r} has no parameter {key!r}; "
                       f"parameters: {[k for k, _ in self.params]}")

    @property
    def is_smooth(self) -> bool:
        """True if sigma is C-infinity on the real line (no kinks)."""
        return len(self.kinks) == 0

    @property
    def is_polynomial(self) -> bool:
        """True if sigma is a polynomial in z."""
        if self.family == "polynomial":
            return True
        if self.family == "piecewise_linear":
            return self.param("a_plus") == self.param("a_minus")
        if self.family == "user":
            return bool(self.expr.is_polynomial(Z))
        return False

    @property
    def homogeneity(self) -> int | None:
        r"""Degree :math:`h` of positive homogeneity, :math:`\sigma(\lambda z)=\lambda^h\sigma(z)`
        for all :math:`\lambda>0` (piecewise-linear family: 1, step family: 0), else None.

        Gaussian expectations of such activations scale exactly with the kernel, which the
        numerics use to evaluate them at any kernel scale without overflow or underflow."""
        if self.family == "piecewise_linear":
            return 1
        if self.family == "step":
            return 0
        return None

    @property
    def polynomial_degree(self) -> int | None:
        """Degree of sigma if it is a polynomial, else None."""
        if not self.is_polynomial:
            return None
        return int(sp.degree(sp.Poly(self.expr, Z))) if self.expr != 0 else 0

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.params if k != "expr")
        if self.family == "user":
            return f"Activation(user: {self.expr})"
        return f"Activation({self.name}{'(' + ps + ')' if ps else ''})"

    # ------------------------------------------------------------ derivatives
    @property
    def parity(self) -> int | None:
        """``+1`` for an even activation, ``-1`` for an odd one, ``None`` otherwise (decided
        exactly by SymPy from :attr:`expr`; ``None`` when there is no expression)."""
        return _parity(self.expr)

    def derivative_expr(self, order: int) -> sp.Expr:
        """Classical (pointwise) derivative sigma^(order)(Z) as a SymPy expression.

        DiracDelta terms that SymPy produces at kinks are dropped: the result is
        the regular part; the singular part is given by :meth:`singular_part`.
        """
        order = _check_order(order)
        return _derivative_cached(self.expr, order)

    def numpy(self, order: int = 0) -> Callable[[np.ndarray], np.ndarray]:
        """Vectorized float64 regular part of sigma^(order).

        Parameters
        ----------
        order : int, default 0
            Derivative order (>= 0).

        Returns
        -------
        callable
            ``f(z: ndarray (...)) -> ndarray (...)`` (float64), overflow-free
            for large :math:`|z|`.  At a kink the value is the right limit
            (measure-zero convention).
        """
        order = _check_order(order)
        return self._numpy_impl(order)

    def jumps(self, max_order: int = 3) -> tuple:
        """Jumps of the derivatives at the kinks.

        Returns
        -------
        tuple
            ``((c, (J0, J1, ..., J_max_order)), ...)`` with
            ``Jm = sigma^(m)(c+) - sigma^(m)(c-)`` (exact SymPy numbers),
            one entry per kink.  ``()`` for smooth activations.
        """
        if not self.kinks:
            return ()
        return tuple((c, tuple(self._jump_impl(c, m) for m in range(max_order + 1)))
                     for c in self.kinks)

    def singular_part(self, order: int) -> tuple:
        """Singular (Dirac) part of the distributional derivative sigma^(order).

        Returns
        -------
        tuple
            ``((c, coeff, k), ...)`` such that
            ``sigma^(order) = regular + sum coeff * delta^(k)(z - c)``.
            Zero coefficients are omitted.

        Notes
        -----
        With jumps ``J_m`` at ``c``: ``sigma^(a) = {sigma^(a)} + sum_{m<a} J_m
        delta^(a-1-m)(z-c)``.  ReLU: sigma'' = delta, sigma''' = delta';
        step: sigma' = delta; abs: sigma'' = 2 delta.
        """
        order = _check_order(order)
        out = []
        if order == 0:
            return ()
        for c, js in self.jumps(order - 1):
            for m in range(order):
                if js[m] != 0:
                    out.append((c, js[m], order - 1 - m))
        return tuple(out)

    def taylor_coefficients(self, p: int) -> tuple:
        """Exact ``(sigma(0), sigma'(0), ..., sigma^(p)(0))`` as SymPy numbers.

        Raises
        ------
        DomainError
            If sigma has a kink at 0 (no Taylor expansion there).
        """
        p = _check_order(p)
        if any(c == 0 for c in self.kinks):
            raise DomainError(
                f"{self!r} has a kink at z=0, so it has no Taylor expansion there; "
                "use the distributional data (jumps/singular_part) instead.")
        return tuple(sp.simplify(self.derivative_expr(n).subs(Z, 0)) for n in range(p + 1))

    # ----------------------------------------------------------- private aux
    def _mp(self, order: int) -> Callable:
        """mpmath-evaluable regular part of sigma^(order) (for references)."""
        return _mp_cached(self.expr, _check_order(order))


def _check_order(order: Any) -> int:
    if isinstance(order, (bool, np.bool_)) or not isinstance(order, (int, np.integer)) or order < 0:
        raise DomainError(f"derivative order must be an int >= 0, got {order!r}")
    return int(order)


@lru_cache(maxsize=512)
@lru_cache(maxsize=None)
def _parity(expr) -> int | None:
    if expr is None:
        return None
    flipped = expr.subs(Z, -Z)
    for sign in (1, -1):
        try:
            if sp.simplify(flipped - sign * expr) == 0:
                return sign
        except (TypeError, ValueError):
            return None
    return None


def _derivative_cached(expr: sp.Expr, order: int) -> sp.Expr:
    return _drop_deltas(sp.diff(expr, Z, order)) if order else expr


@lru_cache(maxsize=256)
def _mp_cached(expr: sp.Expr, order: int) -> Callable:
    d = _derivative_cached(expr, order)
    if d.has(*_KINK_HEADS[:-1]):
        d = d.rewrite(sp.Piecewise)
    return sp.lambdify(Z, d, modules="mpmath")


# ---------------------------------------------------------------- registry
_REGISTRY: dict[str, Callable[..., Activation]] = {}
_ALIASES: dict[str, str] = {}


@public
def register_activation(name: str, factory: Callable[..., Activation], *,
                        aliases: tuple = (), overwrite: bool = False) -> None:
    """Register ``factory(**params) -> Activation`` under ``name``.

    Parameters
    ----------
    name : str
        Canonical (lower-case) name.
    factory : callable
        Called with the keyword parameters given to :func:`get_activation`.
    aliases : tuple of str, optional
        Alternative names resolving to ``name``.
    overwrite : bool, default False
        Allow replacing an existing registration.

    Raises
    ------
    DomainError
        If ``name`` is already registered and ``overwrite`` is False.
    """
    key = name.lower()
    if not overwrite and (key in _REGISTRY or key in _ALIASES):
        raise DomainError(f"activation {name!r} is already registered; pass overwrite=True to replace it")
    if not callable(factory):
        raise DomainError(f"factory for {name!r} must be callable, got {factory!r}")
    _REGISTRY[key] = factory
    for a in aliases:
        _ALIASES[a.lower()] = key


@public
def available_activations() -> tuple:
    """Sorted tuple of registered names (aliases included)."""
    return tuple(sorted(set(_REGISTRY) | set(_ALIASES)))
