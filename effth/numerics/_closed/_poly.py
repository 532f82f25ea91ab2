"""Exact Gaussian moments of polynomials (Isserlis / Wick) with batched covariances.

Polynomials are represented as ``dict[tuple[int, ...], coefficient]`` where the key is
the exponent tuple and the coefficient is a float or a numpy array broadcastable to the
batch shape.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from ...algebra.wick.isserlis import isserlis_terms

__all__ = [
    "wick_terms",
    "gaussian_moment",
    "shifted_moment",
    "poly_mul",
    "poly_add_into",
    "poly_expectation",
]

Poly = dict


@lru_cache(maxsize=4096)
def wick_terms(n: tuple[int, ...]) -> tuple[tuple[float, tuple[tuple[int, int, int], ...]], ...]:
    r"""Terms of :math:`\mathbb E[\prod_i z_i^{n_i}]` for :math:`z\sim\mathcal N(0,K)`, float coefficients.

    The exact generator is :func:`effth.algebra.wick.isserlis.isserlis_terms` (multiplicity form
    of Isserlis' theorem); its integer pairing counts become floats here.

    Returns
    -------
    tuple
        ``((coefficient, ((i, j, m_ij), ...)), ...)`` with ``i <= j`` and ``m_ij > 0``.
    """
    return tuple((float(c), entries) for c, entries in isserlis_terms(tuple(int(x) for x in n)))


def gaussian_moment(n: tuple[int, ...], K: np.ndarray) -> np.ndarray:
    r"""Exact :math:`\mathbb E_{z\sim\mathcal N(0,K)}[\prod_i z_i^{n_i}]`, batched over ``K[..., k, k]``.

    See :func:`wick_terms` for the formula. Exact (polynomial in the entries of ``K``),
    valid for singular ``K``.
    """
    n = tuple(int(x) for x in n)
    batch = K.shape[:-2]
    terms = wick_terms(n)
    res = np.zeros(batch, dtype=K.dtype)
    if not terms:
        return res
    powcache: dict = {}

    def pw(i: int, j: int, m: int) -> np.ndarray:
        key = (i, j, m)
        if key not in powcache:
            powcache[key] = K[..., i, j] ** m
        return powcache[key]

    for coef, entries in terms:
        val = coef
        for (i, j, m) in entries:
            val = val * pw(i, j, m)
        res = res + val
    return res


def shifted_moment(n: tuple[int, ...], K: np.ndarray, mu: np.ndarray) -> np.ndarray:
    r""":math:`\mathbb E[\prod_i (w_i+\mu_i)^{n_i}]`, :math:`w\sim\mathcal N(0,K)`, ``mu`` possibly complex.

    .. math::
        \sum_{k\le n}\prod_i\binom{n_i}{k_i}\mu_i^{n_i-k_i}\,\mathbb E\Big[\prod_i w_i^{k_i}\Big].
    """
    res = 0.0
    for ks in itertools.product(*(range(x + 1) for x in n)):
        if sum(ks) % 2:
            continue
        c = math.prod(math.comb(a, b) for a, b in zip(n, ks))
        m = gaussian_moment(ks, K) if any(ks) else 1.0
        term = c * m
        for i, (a, b) in enumerate(zip(n, ks)):
            if a - b:
                term = term * mu[..., i] ** (a - b)
        res = res + term
    return res


def poly_mul(p: Poly, q: Poly) -> Poly:
    """Product of two sparse polynomials with (possibly batched) coefficients."""
    out: Poly = {}
    for e1, c1 in p.items():
        for e2, c2 in q.items():
            e = tuple(a + b for a, b in zip(e1, e2))
            v = c1 * c2
            if e in out:
                out[e] = out[e] + v
            else:
                out[e] = v
    return out


def poly_add_into(acc: Poly, p: Poly, scale=1.0) -> None:
    """``acc += scale * p`` in place."""
    for e, c in p.items():
        v = scale * c
        acc[e] = acc[e] + v if e in acc else v


def poly_expectation(poly: Poly, K: np.ndarray) -> np.ndarray:
    """Exact Gaussian expectation of a sparse polynomial (Isserlis), batched over ``K``."""
    res = np.zeros(K.shape[:-2])
    for e, c in poly.items():
        if sum(e) % 2:
            continue
        m = gaussian_moment(e, K) if any(e) else 1.0
        res = res + c * m
    return res
