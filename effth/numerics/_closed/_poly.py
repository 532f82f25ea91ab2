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
    r"""Terms of :math:`\mathbb E[\prod_i z_i^{n_i}]` for :math:`z\sim\mathcal N(0,K)`.

    Uses the multiplicity form of Isserlis' theorem,

    .. math::
        \mathbb E\Big[\prod_i z_i^{n_i}\Big] = \prod_i n_i!\sum_{m}
        \prod_i \frac{(K_{ii}/2)^{m_{ii}}}{m_{ii}!}\prod_{i<j}\frac{K_{ij}^{m_{ij}}}{m_{ij}!},

    the sum running over symmetric non-negative integer matrices :math:`m` with
    :math:`2m_{ii}+\sum_{j\ne i}m_{ij}=n_i` (Isserlis 1918; Wick 1950).

    Returns
    -------
    tuple
        ``((coefficient, ((i, j, m_ij), ...)), ...)`` with ``i <= j`` and ``m_ij > 0``.
    """
    k = len(n)
    if sum(n) % 2:
        return ()
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    pref = math.prod(math.factorial(x) for x in n)
    out: list = []

    def rec(idx: int, rem: list[int], chosen: list[tuple[int, int, int]]) -> None:
        if idx == len(pairs):
            if any(r % 2 for r in rem):
                return
            coef = float(pref)
            entries = list(chosen)
            for i, r in enumerate(rem):
                if r:
                    mii = r // 2
                    coef /= (2.0**mii) * math.factorial(mii)
                    entries.append((i, i, mii))
            for (i, j, m) in chosen:
                coef /= math.factorial(m)
            out.append((coef, tuple(entries)))
            return
        i, j = pairs[idx]
        for m in range(min(rem[i], rem[j]) + 1):
            rem[i] -= m
            rem[j] -= m
            if m:
                chosen.append((i, j, m))
            rec(idx + 1, rem, chosen)
            if m:
                chosen.pop()
            rem[i] += m
            rem[j] += m

    rec(0, list(n), [])
    return tuple(out)


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
