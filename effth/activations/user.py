"""Activations from user SymPy expressions (family ``'user'``)."""

from __future__ import annotations

from effth._signature import public

import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp

from ..errors import DomainError
from .registry import Activation, Z, _derivative_cached

__all__ = ["user_activation"]


def _breakpoints(expr: sp.Expr) -> tuple:
    """Real points where a Piecewise/Heaviside/Abs/Max/Min/sign switches branch."""
    eqs: list[sp.Expr] = []
    for node in sp.preorder_traversal(expr):
        if isinstance(node, (sp.Heaviside, sp.Abs, sp.sign, sp.DiracDelta)):
            eqs.append(node.args[0])
        elif isinstance(node, (sp.Max, sp.Min)):
            args = node.args
            eqs.extend(a - b for i, a in enumerate(args) for b in args[i + 1:])
        elif isinstance(node, sp.Piecewise):
            for _, cond in node.args:
                for rel in cond.atoms(sp.core.relational.Relational):
                    eqs.append(rel.lhs - rel.rhs)
    pts: set[float] = set()
    for e in eqs:
        if not e.has(Z):
            continue
        sol = sp.solveset(sp.Eq(e, 0), Z, domain=sp.S.Reals)
        if not isinstance(sol, sp.FiniteSet):
            raise DomainError(f"cannot locate the breakpoints of {e} = 0 in the user activation {expr} "
                              f"(solveset gave {sol}); rewrite the expression with explicit breakpoints")
        pts.update(float(s) for s in sol)
    return tuple(sorted(pts))


@public
def user_activation(expr: Any, strip: Any = None, **extra: Any) -> Activation:
    """Build a family-``'user'`` :class:`Activation` from a SymPy expression.

    Parameters
    ----------
    expr : sympy.Expr
        Expression in ``Z`` or in one free symbol (renamed to ``Z``).
    strip : float, optional
        Half-width of the strip of analyticity (default: inf for polynomials,
        0 if kinked, 1.0 otherwise — a conservative guess).

    Raises
    ------
    DomainError
        No free symbol (a constant is not an activation of ``z``), more than one, or
        unsolvable breakpoints.
    """
    if extra:
        raise DomainError(f"unknown parameters {sorted(extra)} for a user activation; only strip= is accepted")
    expr = sp.sympify(expr)
    free = expr.free_symbols
    if len(free) > 1:
        raise DomainError(f"user activation {expr} must have a single free symbol, got {sorted(map(str, free))}")
    if not free:
        raise DomainError(f"user activation {expr} has no free symbol: an activation is a function of "
                          "z (write it in z, e.g. sympy.tanh(effth.activations.Z))")
    if free:
        (sym,) = free
        if sym != Z:
            expr = expr.subs(sym, Z)
    kinks = _breakpoints(expr)
    if strip is None:
        strip = 0.0 if kinks else (math.inf if expr.is_polynomial(Z) else 1.0)
    else:
        strip = float(strip)
        if not strip >= 0:
            raise DomainError(f"strip must be >= 0, got {strip}")
        if kinks:
            strip = 0.0

    @lru_cache(maxsize=None)
    def impl(order: int) -> Callable:
        d = _derivative_cached(expr, order)
        f = sp.lambdify(Z, d, modules=["numpy", "scipy"])

        def g(z: Any) -> np.ndarray:
            z = np.asarray(z, dtype=np.float64)
            return np.broadcast_to(np.asarray(f(z), dtype=np.float64), z.shape).copy()
        return g

    @lru_cache(maxsize=None)
    def jump(c: float, m: int) -> sp.Expr:
        d = _derivative_cached(expr, m)
        if d.has(sp.Heaviside, sp.Abs, sp.sign, sp.Max, sp.Min):
            d = sp.piecewise_fold(d.rewrite(sp.Piecewise))
        cc = sp.nsimplify(c)
        eps = sp.Symbol("eps", positive=True)
        right = sp.limit(d.subs(Z, cc + eps), eps, 0)
        left = sp.limit(d.subs(Z, cc - eps), eps, 0)
        return sp.simplify(right - left)

    return Activation(name="user", family="user", params=(("expr", sp.srepr(expr)),), expr=expr,
                      kinks=kinks, strip=strip, _numpy_impl=impl, _jump_impl=jump)
