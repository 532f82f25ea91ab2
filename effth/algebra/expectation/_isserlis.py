r"""Isserlis' theorem in multiplicity form (no enumeration of the :math:`(2m-1)!!` pairings)."""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

_PAIRING_LIMIT = 8  # up to 105 pairings are enumerated; beyond, the multiplicity form


def _compositions(total: int, caps: list):
    """Tuples of non-negative ints summing to ``total``, entry k at most ``caps[k]``."""
    if not caps:
        if total == 0:
            yield ()
        return
    for first in range(min(total, caps[0]), -1, -1):
        for rest in _compositions(total - first, caps[1:]):
            yield (first,) + rest


@lru_cache(maxsize=2048)
def _isserlis_terms(n: tuple) -> tuple:
    r"""Terms of :math:`\langle\prod_i z_i^{n_i}\rangle` as ``(coefficient, (((i, j), m_ij), ...))``.

    .. math:: \Big\langle\prod_i z_i^{n_i}\Big\rangle = \sum_m \frac{\prod_i n_i!}
              {\prod_i 2^{m_{ii}}m_{ii}!\,\prod_{i<j}m_{ij}!}\prod_{i\le j}K_{ij}^{m_{ij}},

    over symmetric non-negative integer matrices with :math:`2m_{ii}+\sum_{j\ne i}m_{ij}=n_i`
    (each distinct Wick term once, with its number of pairings).
    """
    k = len(n)
    out = []

    def rec(i, rem, acc):
        if i == k:
            coeff = sp.Integer(1)
            for x in n:
                coeff *= sp.factorial(x)
            for (a, b), m in acc:
                coeff /= sp.factorial(m) * (2**m if a == b else 1)
            out.append((coeff, tuple(t for t in acc if t[1])))
            return
        for mii in range(rem[i] // 2, -1, -1):
            left = rem[i] - 2 * mii
            for offs in _compositions(left, rem[i + 1 :]):
                new = list(rem)
                new[i] = 0
                for d, o in enumerate(offs):
                    new[i + 1 + d] -= o
                rec(i + 1, new, acc + [((i, i), mii)] + [((i, i + 1 + d), o) for d, o in enumerate(offs)])

    rec(0, list(n), [])
    return tuple(out)
