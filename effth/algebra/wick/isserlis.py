r"""Isserlis' theorem in multiplicity form: the distinct Wick terms of a Gaussian moment.

.. math:: \Big\langle\prod_i z_i^{n_i}\Big\rangle_K = \sum_m c(m)\prod_{i\le j}K_{ij}^{m_{ij}},
          \qquad c(m) = \frac{\prod_i n_i!}{\prod_i 2^{m_{ii}}m_{ii}!\,\prod_{i<j}m_{ij}!},

over symmetric non-negative integer matrices :math:`m` with
:math:`2m_{ii}+\sum_{j\ne i}m_{ij}=n_i` (Isserlis 1918; PDLT (1.45)).  :math:`c(m)` is the number
of pairings that give the monomial, an integer, so each distinct term appears once and the
:math:`(2m-1)!!` pairings are never enumerated.  The symbolic atoms
(:mod:`effth.algebra.expectation`) and the numeric closed forms (:mod:`effth.numerics`) both
use this one generator.

Examples
--------
>>> isserlis_terms((2, 2))          # <z1^2 z2^2> = K11 K22 + 2 K12^2
((1, ((0, 0, 1), (1, 1, 1))), (2, ((0, 1, 2),)))
>>> sum(c for c, _ in isserlis_terms((6,)))   # (6-1)!! pairings
15
"""

from __future__ import annotations

from effth._signature import public

import math
from functools import lru_cache

__all__ = ["isserlis_terms"]


@public
@lru_cache(maxsize=4096)
def isserlis_terms(n: tuple[int, ...]) -> tuple[tuple[int, tuple[tuple[int, int, int], ...]], ...]:
    """Distinct terms of :math:`\\langle\\prod_i z_i^{n_i}\\rangle` as ``((count, ((i, j, m_ij), ...)), ...)``.

    ``i <= j`` and ``m_ij > 0`` in each term; ``count`` is the exact number of pairings.
    An odd total degree gives ``()``.
    """
    n = tuple(int(x) for x in n)
    if any(x < 0 for x in n):
        raise ValueError(f"exponents must be non-negative, got {n}")
    k = len(n)
    if sum(n) % 2:
        return ()
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    numerator = math.prod(math.factorial(x) for x in n)
    out: list = []

    def rec(idx: int, rem: list[int], chosen: list[tuple[int, int, int]]) -> None:
        if idx == len(pairs):
            if any(r % 2 for r in rem):
                return
            denom = 1
            entries = list(chosen)
            for i, r in enumerate(rem):
                if r:
                    mii = r // 2
                    denom *= 2**mii * math.factorial(mii)
                    entries.append((i, i, mii))
            for (_, _, m) in chosen:
                denom *= math.factorial(m)
            out.append((numerator // denom, tuple(sorted(entries))))
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
