r"""The :math:`1/N` expansion of a scalar saddle-point average (Bordelon & Pehlevan, ICLR 2023,
app. H.1), derived by Laplace's method.

For :math:`\langle O\rangle_N=\int e^{-NS(q)}O(q)\,dq\,/\int e^{-NS(q)}dq` with a non-degenerate
minimum :math:`q^*` of :math:`S`, put :math:`q=q^*+x/\sqrt N`; then
:math:`NS=NS^*+\tfrac12S''x^2+\tfrac{S'''}{6\sqrt N}x^3+\tfrac{S''''}{24N}x^4+\dots` and
:math:`O=O^*+O'\tfrac{x}{\sqrt N}+\tfrac12O''\tfrac{x^2}N+\dots`; expanding the exponential of the
non-Gaussian terms and taking Gaussian moments of :math:`x` (variance :math:`1/S''`) in the
numerator and the denominator gives

.. math::
    \langle O\rangle_N=O(q^*)+\frac1N\Big[\frac{O''}{2S''}-\frac{O'S'''}{2S''^2}\Big]+O(N^{-2}).

The expansion is done here by SymPy (:func:`saddle_point_nlo`), not typed in; the quartic
coefficient :math:`S''''` cancels between numerator and denominator.  The paper's (74)–(84)
writes the Taylor coefficients as :math:`S^{(k)}` without their factorials; the derivation here
keeps them.
"""

from __future__ import annotations

from effth._signature import public

from functools import lru_cache
from typing import Any

import sympy as sp

from effth.errors import DomainError

__all__ = ["saddle_point_nlo", "saddle_point_coefficients"]

_N = sp.Symbol("N", positive=True)


@public
@lru_cache(maxsize=None)
def saddle_point_coefficients() -> sp.Expr:
    r"""The :math:`1/N` coefficient in the symbols ``S2, S3, S4, O1, O2`` (derivatives at
    :math:`q^*`), derived by Laplace's method (module docstring)."""
    x, eps = sp.symbols("x epsilon")
    S2, S3, S4, O0, O1, O2 = sp.symbols("S2 S3 S4 O0 O1 O2")
    # non-Gaussian part of N S and the observable, to eps^2 (eps = 1/sqrt(N))
    dS = S3 * x ** 3 * eps / 6 + S4 * x ** 4 * eps ** 2 / 24
    O = O0 + O1 * x * eps + O2 * x ** 2 * eps ** 2 / 2
    weight = sp.series(sp.exp(-dS), eps, 0, 3).removeO()

    def gauss(expr: sp.Expr) -> sp.Expr:     # <.> over x ~ N(0, 1/S2), term by term
        poly = sp.Poly(sp.expand(expr), x)
        return sum(c * (sp.factorial2(k - 1) / S2 ** (k // 2) if k % 2 == 0 else 0)
                   for (k,), c in poly.terms())

    num = gauss(sp.expand(weight * O))
    den = gauss(sp.expand(weight))
    ratio = sp.series(num / den, eps, 0, 3).removeO()
    lead = sp.simplify(ratio.coeff(eps, 0))
    if sp.simplify(lead - O0) != 0 or sp.simplify(ratio.coeff(eps, 1)) != 0:  # pragma: no cover
        raise AssertionError("Laplace expansion: unexpected leading or odd terms")
    return sp.simplify(ratio.coeff(eps, 2))


@public
def saddle_point_nlo(S: Any, O: Any, q: Any, q_star: Any = None) -> sp.Expr:
    r""":math:`\langle O\rangle_N` to :math:`O(1/N)`: :math:`O(q^*)+c/N` (symbol ``N``).

    Parameters
    ----------
    S, O : sympy.Expr
        The action density and the observable, in the symbol ``q``.
    q : sympy.Symbol
    q_star : number or sympy.Expr, optional
        The minimum of ``S`` (default: the unique real root of :math:`S'` with :math:`S''>0`).

    Raises
    ------
    DomainError
        No unique minimum, or a degenerate one (:math:`S''(q^*)\le 0`).

    Examples
    --------
    >>> import sympy as sp
    >>> q = sp.Symbol("q", positive=True)
    >>> saddle_point_nlo(q - sp.log(q), q, q)          # Gamma(N+1, N): exact (N+1)/N
    1 + 1/N
    """
    S, O = sp.sympify(S), sp.sympify(O)
    if q_star is None:
        roots = [r for r in sp.solve(sp.diff(S, q), q) if r.is_real is not False]
        roots = [r for r in roots if sp.diff(S, q, 2).subs(q, r).is_positive]
        if len(roots) != 1:
            raise DomainError(f"S needs exactly one non-degenerate minimum; found {roots}")
        q_star = roots[0]
    d = {f"S{k}": sp.diff(S, q, k).subs(q, q_star) for k in (2, 3, 4)}
    d.update({f"O{k}": sp.diff(O, q, k).subs(q, q_star) for k in (1, 2)})
    if not sp.sympify(d["S2"]).is_positive:
        raise DomainError(f"S''(q*) = {d['S2']} is not positive: the saddle point is degenerate")
    c = saddle_point_coefficients().subs({sp.Symbol(k): v for k, v in d.items()})
    return sp.simplify(O.subs(q, q_star)) + sp.simplify(c) / _N
