r"""Information at initialization (PDLT app. A): the NLO entropy and mutual information of the
preactivations of one input, derived by the variational (maximum-entropy) method of §A.3.

One input, :math:`m` neurons of layer :math:`\ell`, :math:`\rho=\sum_iz_i^2`.  The distribution
:math:`p\propto e^{-\rho/(2G)-S_I}` with
:math:`S_I=a\rho-\tfrac v8\rho^2+\tfrac u{24}\rho^3` (A.46), (A.55) is fitted so that the exact
two-point function :math:`G` and four-point function :math:`V/n` hold (A.35)–(A.36):
:math:`\mathbb E[\rho]=mG`, :math:`\mathbb E[\rho^2]=m(m+2)G^2(1+\epsilon)`,
:math:`\epsilon\equiv V/(nG^2)`.  Every Gaussian expectation is a moment of :math:`\rho`,
:math:`\langle\langle\rho^k\rangle\rangle_G=m(m+2)\cdots[m+2(k-1)]G^k` (A.50), so the whole
computation is exact polynomial algebra in the symbol :math:`m`:

1. expand :math:`\langle\langle e^{-S_I}\rho^k\rangle\rangle` to :math:`\epsilon^{\rm order}`;
2. solve the two constraints order by order for :math:`a`, :math:`v` (the sextic coupling
   :math:`u=O(\epsilon^2)` is left free);
3. :math:`\mathcal S=\log Z+\mathbb E[\rho]/(2G)+\mathbb E[S_I]` (A.31)–(A.32).

:func:`entropy_expansion` returns :math:`\mathcal S-\frac m2\log(2\pi eG)` (to be compared with
(A.52), (A.66)); :func:`mutual_information_expansion` (A.53), (A.67) and
:func:`tripartite_information_expansion` (A.75) combine entropies of neuron groups.  The
sextic coupling drops out (footnote 25): the result checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import factorial
from typing import Any

import sympy as sp

from effth._cache import disk_cached
from effth._signature import public
from effth._validate import integer
from effth.errors import DomainError

__all__ = ["EPSILON_V", "SkipLayerEntropy", "entropy_expansion", "mutual_information_expansion",
           "skip_layer_entropy",
           "tripartite_information_expansion"]

#: :math:`\epsilon_V=V^{(\ell)}/(n_{\ell-1}G^{(\ell)2})`, the expansion parameter of app. A.
EPSILON_V = sp.Symbol(r"\epsilon_V")
_M = sp.Symbol("m", positive=True)


def _rho_moment(k: int, m) -> sp.Expr:
    """(A.50) at G = 1."""
    return sp.Mul(*[m + 2 * j for j in range(k)])


def _gauss(poly: sp.Expr, rho: sp.Symbol, m) -> sp.Expr:
    """<<poly(rho)>> with (A.50)."""
    p = sp.Poly(sp.expand(poly), rho)
    return sp.expand(sum(c * _rho_moment(k[0], m) for k, c in p.terms()))


def _trunc(expr: sp.Expr, eps: sp.Symbol, order: int) -> sp.Expr:
    """Drop powers of ``eps`` above ``order`` (``expr`` a polynomial in ``eps``)."""
    e = sp.expand(expr)
    return sp.Add(*[t for t in sp.Add.make_args(e) if t.as_coeff_exponent(eps)[1] <= order])


def _series_of(x: sp.Expr, coeffs, eps, order: int) -> sp.Expr:
    """sum_k coeffs[k] x^k truncated, for x = O(eps)."""
    out, power = sp.S.Zero, sp.S.One
    for k in range(order + 1):
        out += coeffs(k) * power
        power = _trunc(power * x, eps, order)
    return _trunc(out, eps, order)


@lru_cache(maxsize=8)
@disk_cached
def _entropy(order: int) -> tuple:
    eps, m, rho = EPSILON_V, _M, sp.Symbol("rho")
    a = sp.symbols(f"a1:{order + 1}")
    v = sp.symbols(f"v1:{order + 1}")
    u = sp.symbols(f"u2:{order + 1}") if order >= 2 else ()
    A = sum(c * eps ** (k + 1) for k, c in enumerate(a))
    Vc = sum(c * eps ** (k + 1) for k, c in enumerate(v))
    U = sum(c * eps ** (k + 2) for k, c in enumerate(u))
    S_I = A * rho - Vc / 8 * rho**2 + U / 24 * rho**3
    # e^{-S_I} to eps^order (S_I = O(eps))
    boltz = _trunc(sum((-S_I) ** p / sp.factorial(p) for p in range(order + 1)), eps, order)

    def weighted(F):              # <<F e^{-S_I}>>, truncated
        return _trunc(_gauss(sp.expand(F * boltz), rho, m), eps, order)

    Z = weighted(sp.S.One)                     # Z/Z_G = 1 + O(eps)
    invZ = _series_of(Z - 1, lambda k: (-1) ** k, eps, order)

    def E(F):
        return _trunc(weighted(F) * invZ, eps, order)

    e1 = sp.expand(E(rho) - m)
    e2 = sp.expand(E(rho**2) - m * (m + 2) * (1 + eps))
    sol: dict = {}
    for k in range(1, order + 1):           # order by order: linear in (a_k, v_k)
        eqs = [sp.expand(e.subs(sol)).coeff(eps, k) for e in (e1, e2)]
        s = sp.solve(eqs, [a[k - 1], v[k - 1]], dict=True)
        if len(s) != 1:
            raise AssertionError(f"constraints at order {k} have no unique solution: {s}")
        sol.update({key: sp.factor(val) for key, val in s[0].items()})
    logZ = _series_of(sp.expand(Z.subs(sol)) - 1,
                      lambda k: sp.Rational((-1) ** (k + 1), k) if k else 0, eps, order)
    S = sp.expand(logZ + E(rho).subs(sol) / 2 + E(S_I).subs(sol) - m / 2)
    S = _trunc(S, eps, order)
    if any(S.has(c) for c in u):
        raise AssertionError("the sextic coupling did not drop out of the entropy")
    return sp.factor_terms(sp.collect(S, eps)), sol


def _order(order) -> int:
    k = integer(order, "order", minimum=1)
    if k > 3:
        raise DomainError(f"order must be 1..3, got {order!r}: at O(epsilon_V^4) the entropy "
                          "depends on the six-point vertex through the sextic coupling u of "
                          "PDLT (A.55), which the expansion in epsilon_V alone does not fix")
    return k


@public
def entropy_expansion(m=None, order: int = 3) -> sp.Expr:
    r""":math:`\mathcal S[p(z_1..z_m)]-\frac m2\log(2\pi eG)` in powers of :math:`\epsilon_V` (A.52), (A.66).

    Parameters
    ----------
    m : int or sympy expression, optional
        Number of neurons (default: the symbol :math:`m`).
    order : int
        Highest power of :math:`\epsilon_V` (1..3); the book gives 2 (A.52) and 3 (A.66).
        At order 4 the sextic coupling (the six-point vertex) no longer drops out.

    Examples
    --------
    >>> from effth.pdlt.information import EPSILON_V
    >>> sp.factor(entropy_expansion(order=2).coeff(EPSILON_V, 2))
    -m*(m + 2)/16
    """
    S, _ = _entropy(_order(order))
    return sp.expand(S if m is None else S.subs(_M, m))


@public
def mutual_information_expansion(m1=None, m2=None, order: int = 3) -> sp.Expr:
    r"""NLO mutual information between two disjoint groups of :math:`m_1`, :math:`m_2` neurons,
    :math:`\mathcal S_{m_1}+\mathcal S_{m_2}-\mathcal S_{m_1+m_2}` (A.53), (A.67)."""
    m1 = sp.Symbol("m_1", positive=True) if m1 is None else sp.sympify(m1)
    m2 = sp.Symbol("m_2", positive=True) if m2 is None else sp.sympify(m2)
    k = _order(order)
    return sp.expand(entropy_expansion(m1, k) + entropy_expansion(m2, k)
                     - entropy_expansion(m1 + m2, k))


@public
def tripartite_information_expansion(m1=None, m2=None, m3=None, order: int = 3) -> sp.Expr:
    r"""Tripartite information :math:`\mathcal I_3` of three disjoint neuron groups (A.24), (A.75)."""
    ms = [sp.Symbol(f"m_{k}", positive=True) if x is None else sp.sympify(x)
          for k, x in enumerate((m1, m2, m3), 1)]
    k = _order(order)
    S = lambda x: entropy_expansion(x, k)
    a, b, c = ms
    return sp.expand(S(a) + S(b) + S(c) - S(a + b) - S(b + c) - S(c + a) + S(a + b + c))


@dataclass(frozen=True)
class SkipLayerEntropy:
    r"""The :math:`O(1/n^2)` entropy of one neuron at the first skip layer (:func:`skip_layer_entropy`).

    ``total``, ``V``, ``T`` and ``history`` are coefficients of :math:`1/n_1^2` in
    :math:`\mathcal S_1-\frac12\log(2\pi eG)`: ``V`` is (A.52) at the residual
    :math:`\epsilon_V=V^{(2)}/(n_1G^2)`, ``T`` the third cumulant's :math:`-\frac34T^2/G^3`, ``history``
    the fifth and higher cumulants of the neuron's own history, ``total`` their sum.  ``G``, ``V2``,
    ``T2``: :math:`K^{(2)}`, :math:`V^{(2)}`, :math:`T^{(2)}` (single input); ``cumulants[r-3]`` is
    :math:`n_1\kappa_r` for :math:`r=3,4,\dots`.
    """

    total: float
    V: float
    T: float
    history: float
    G: float
    V2: float
    T2: float
    cumulants: tuple


@public
def skip_layer_entropy(net: Any, x: Any, *, rmax: int = 40) -> SkipLayerEntropy:
    r"""Entropy of one preactivation of the first skip layer (layer 2) of a residual MLP, to
    :math:`O(1/n_1^2)`, for one input.

    PDLT (A.52) assumes the nearly-Gaussian hierarchy of a plain MLP (the :math:`2k`-point
    connected function of order :math:`n^{1-k}`, odd ones zero).  With a skip (PDLT (B.4)) a neuron
    keeps its own history: :math:`z^{(2)}=\gamma a+\sqrt{v}\,\varepsilon`, :math:`a=z^{(1)}`,
    :math:`v=\xi^2[C_b+\tfrac{C_W}{n_1}(R+s(a))]`, :math:`s=\sigma^2`.  Its cumulant
    generating function to :math:`O(1/n_1)` is
    :math:`\frac{t^2G}2+\frac{\xi^2C_Wt^2}{2n_1}\big[\langle s(a+t\gamma K^{(1)})\rangle-\langle s\rangle\big]
    +\frac{t^4}8\,\frac{\xi^4C_W^2}{n_1}\mathrm{Var}\,s`, so *every* cumulant is :math:`O(1/n_1)`,

    .. math::
        n_1\kappa_r=\binom r2\xi^2C_W(\gamma K^{(1)})^{r-2}\langle s^{(r-2)}\rangle_{K^{(1)}}
        +3\delta_{r4}\,\xi^4C_W^2\,\mathrm{Var}_{K^{(1)}}[s]

    (:math:`r=3`: :math:`3T^{(2)}`; :math:`r=4`: :math:`3V^{(2)}`), and the Edgeworth expansion of
    :math:`D_{\rm KL}(p\|\mathcal N)` gives, exactly at this order,

    .. math::
        \mathcal S_1-\tfrac12\log(2\pi eG)=-\frac12\sum_{r\ge3}\frac{\kappa_r^2}{r!\,G^r}+O(n_1^{-3}).

    The :math:`r=4` term is (A.52) at the residual :math:`\epsilon_V`, :math:`r=3` the third-cumulant
    term :math:`-\frac34T^2/(n_1^2G^3)`; the :math:`r\ge5` terms vanish only when :math:`s` is a
    quadratic (linear :math:`\sigma`, :math:`|z|`), the same condition as for the exactness of the
    cumulant closure of V (the Mehler series of one neuron's history).  Gaussian expectations by
    the Hermite coefficients of :math:`s` that the residual history recursion uses
    (composite Gauss-Legendre split at the kinks),
    :math:`\langle s^{(k)}\rangle_K=\langle s\,He_k(a/\sqrt K)\rangle/K^{k/2}`.

    Parameters
    ----------
    net : MLP
        Residual MLP with a skip at layer 2 (``gamma`` nonzero there); widths symbolic or numeric
        (the coefficients are of :math:`1/n_1^2`).
    x : array_like (1, n_0)
        One input.
    rmax : int
        Highest cumulant order summed (the series converges geometrically, like
        :math:`(\gamma^2K^{(1)}/G)^{r}`).
    """
    from effth._validate import input_matrix
    from effth.pdlt.residual_history import _Coefficients

    X = input_matrix(x, "x")
    if X.shape[0] != 1:
        raise DomainError(f"x must be one input, got {X.shape[0]}")
    if int(getattr(net, "depth", 0)) < 2 or net.gamma_at(2) == 0.0:
        raise DomainError("skip_layer_entropy needs a residual MLP with a skip at layer 2 "
                          "(gamma != 0 there, depth >= 3)")
    rmax = integer(rmax, "rmax", minimum=5)
    g, xi, cw, cb = (float(net.gamma_at(2)), float(net.xi_at(2)), float(net.c_w_at(2)),
                     float(net.c_b_at(2)))
    K1 = float(net.c_b_at(1) + net.c_w_at(1) * float(X[0] @ X[0]) / X.shape[1])
    # <s h_m>_K1 in the orthonormal Hermite basis, m = 0..rmax - 2, and last <s^2>_K1
    coef = _Coefficients(net.act, rmax - 2)(K1)
    mean_s = float(coef[0])
    var_s = float(coef[-1]) - mean_s ** 2
    G = g * g * K1 + xi * xi * (cb + cw * mean_s)
    c = xi * xi * cw
    terms, kap = [], []
    for r in range(3, rmax + 1):
        k = r - 2
        d = float(factorial(k)) ** 0.5 * float(coef[k]) / K1 ** (k / 2)   # <s He_k> / K^(k/2)
        kr = r * (r - 1) / 2 * c * (g * K1) ** k * d + (3 * xi ** 4 * cw ** 2 * var_s if r == 4 else 0.0)
        kap.append(kr)
        terms.append(-0.5 * kr * kr / (factorial(r) * G ** r))
        if r > 6 and max(abs(terms[-1]), abs(terms[-2])) < 1e-14 * abs(sum(terms)):
            break
    V2 = kap[1] / 3
    return SkipLayerEntropy(float(sum(terms)), -3 / 16 * (V2 / G ** 2) ** 2,
                            -0.5 * kap[0] ** 2 / (6 * G ** 3), float(sum(terms[2:])), G, V2,
                            kap[0] / 3, tuple(kap))
