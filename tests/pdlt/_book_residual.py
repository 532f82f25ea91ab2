r"""The book's printed residual recursions, typed independently in NumPy (the "published" corner).

PDLT (B.11) (kernel), (B.24) (multi-input four-point vertex, raised-index form with
:math:`K^{-1}` over the dataset) and (B.26) (single input), with the branch gain :math:`\xi=1`
(B.6).  Atoms come from ``effth.numerics.gaussian_expectation`` (``_book.Atoms``); nothing here
imports the theory under test.
"""

from __future__ import annotations

import itertools

import numpy as np

from ._book import Atoms, _A, raise_V


def book_K(K, act, c_w, c_b, gamma):
    """PDLT (B.11)."""
    at = Atoms(K, act)
    N = len(K)
    return np.array([[c_b + c_w * at((a, b)) + gamma**2 * K[a, b] for b in range(N)]
                     for a in range(N)])


def book_V(K, V, act, c_w, gamma):
    """PDLT (B.24), every expectation over :math:`K^{(\\ell)}`."""
    at = Atoms(K, act)
    N = len(K)
    R = range(N)
    Vr = raise_V(V, K)
    A = np.array([[[[_A(at, K, a, b, c, d) for d in R] for c in R] for b in R] for a in R])
    out = np.empty((N,) * 4)
    g2 = gamma**2
    for d1, d2, d3, d4 in itertools.product(R, repeat=4):
        lead = at((d1, d2, d3, d4)) - at((d1, d2)) * at((d3, d4))
        vv = np.einsum("abcd,ab,cd->", Vr, A[d1, d2], A[d3, d4])
        mixed = (A[d1, d2, d3, d4] + A[d3, d4, d1, d2]
                 + 0.5 * np.einsum("abcd,ab,c,d->", Vr, A[d1, d2], K[:, d3], K[:, d4])
                 + 0.5 * np.einsum("abcd,ab,c,d->", Vr, A[d3, d4], K[:, d1], K[:, d2]))
        out[d1, d2, d3, d4] = (c_w**2 * lead + 0.25 * c_w**2 * vv + c_w * g2 * mixed
                               + g2**2 * V[d1, d2, d3, d4])
    return out


def book_V_single(K: float, V: float, act, c_w, gamma):
    """PDLT (B.26) with the shifted :math:`\\chi_\\parallel` of (B.15)."""
    at = Atoms(np.array([[K]]), act)
    chi = gamma**2 + c_w / (2 * K**2) * (at((0, 0), (0, 0)) - K * at((0, 0)))
    return (c_w**2 * (at((0, 0, 0, 0)) - at((0, 0)) ** 2) + chi**2 * V
            + 4 * gamma**2 * (chi - gamma**2) * K**2)


def book_nu(gamma: float, a_plus: float = 1.0, a_minus: float = 0.0) -> float:
    """PDLT (B.29): :math:`\\nu(\\gamma)` of the scale-invariant class."""
    A2 = (a_plus**2 + a_minus**2) / 2
    A4 = (a_plus**4 + a_minus**4) / 2
    g2 = gamma**2
    return (1 - g2) * ((1 - g2) * (3 * A4 / A2**2 - 1) + 4 * g2)
