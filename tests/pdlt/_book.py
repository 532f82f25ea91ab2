r"""The book's printed recursions, typed independently in NumPy (the "published" corner).

PDLT (4.118), (4.119), (4.115) in raised-index form with :math:`K^{-1}` over the whole dataset
(PDLT §4.5–§4.6), and the single-input χ forms of PDLT (5.109)–(5.110).  Atoms are
evaluated with ``effth.numerics.gaussian_expectation`` on the marginal sub-kernel of the samples
they involve.  Nothing here imports the theory under test.
"""

from __future__ import annotations

import itertools

import numpy as np

from effth.numerics import gaussian_expectation


class Atoms:
    r"""Memoized :math:`\langle\prod_s\sigma(z_s)\prod_t z_t\rangle_K` for one kernel."""

    def __init__(self, K: np.ndarray, activation) -> None:
        self.K, self.act, self.cache = np.asarray(K, float), activation, {}

    def __call__(self, sig: tuple, zs: tuple = ()) -> float:
        key = (tuple(sorted(sig)), tuple(sorted(zs)))
        if key not in self.cache:
            samples = sorted(set(sig) | set(zs))
            slot = {s: k for k, s in enumerate(samples)}
            factors = [(slot[s], "sigma", 0) for s in key[0]]
            for t in sorted(set(zs)):
                factors.append((slot[t], "z", zs.count(t)))
            sub = self.K[np.ix_(samples, samples)]
            self.cache[key] = float(gaussian_expectation(factors, sub, self.act))
        return self.cache[key]


def raise_V(V: np.ndarray, K: np.ndarray) -> np.ndarray:
    """:math:`V^{(\\beta_1\\beta_2)(\\beta_3\\beta_4)}` (PDLT (4.83)/(4.120)) with :math:`K^{-1}`."""
    Ki = np.linalg.inv(K)
    return np.einsum("ai,bj,ck,dl,ijkl->abcd", Ki, Ki, Ki, Ki, V)


def book_K(K, act, c_w, c_b):
    """PDLT (4.118)."""
    at = Atoms(K, act)
    N = len(K)
    return np.array([[c_b + c_w * at((a, b)) for b in range(N)] for a in range(N)])


def _A(at, K, a1, a2, b1, b2):
    r""":math:`\langle\sigma_{\alpha_1}\sigma_{\alpha_2}(z_{\beta_1}z_{\beta_2}-K_{\beta_1\beta_2})\rangle`."""
    return at((a1, a2), (b1, b2)) - K[b1, b2] * at((a1, a2))


def book_V(K, V, act, c_w, ratio):
    """PDLT (4.119)."""
    at = Atoms(K, act)
    N = len(K)
    Vr = raise_V(V, K)
    R = range(N)
    A = np.array([[[[_A(at, K, a, b, c, d) for d in R] for c in R] for b in R] for a in R])
    out = np.empty((N,) * 4)
    for a1, a2, a3, a4 in itertools.product(R, repeat=4):
        lead = at((a1, a2, a3, a4)) - at((a1, a2)) * at((a3, a4))
        corr = np.einsum("abcd,ab,cd->", Vr, A[a1, a2], A[a3, a4])
        out[a1, a2, a3, a4] = c_w**2 * lead + 0.25 * c_w**2 * ratio * corr
    return out


def book_G1(K, V, G1, act, c_w, ratio):
    """PDLT (4.115), multiplied through by :math:`n_\\ell`."""
    at = Atoms(K, act)
    N = len(K)
    Ki = np.linalg.inv(K)
    Vr = raise_V(V, K)
    R = range(N)
    out = np.empty((N, N))
    for a1, a2 in itertools.product(R, repeat=2):
        A = np.array([[_A(at, K, a1, a2, b1, b2) for b2 in R] for b1 in R])
        t1 = 0.5 * np.einsum("ac,bd,cd,ab->", Ki, Ki, G1, A)
        B = np.empty((N,) * 4)
        for b1, b2, b3, b4 in itertools.product(R, repeat=4):
            B[b1, b2, b3, b4] = (at((a1, a2), (b1, b2, b3, b4)) - K[b3, b4] * at((a1, a2), (b1, b2))
                                 - K[b1, b2] * at((a1, a2), (b3, b4))
                                 + K[b1, b2] * K[b3, b4] * at((a1, a2)))
        t2 = 0.125 * np.einsum("abcd,abcd->", Vr, B)
        C = np.array([[-2 * at((a1, a2), (b1, b2)) + K[b1, b2] * at((a1, a2)) for b2 in R] for b1 in R])
        t3 = 0.25 * np.einsum("acbd,cd,ab->", Vr, K, C)
        out[a1, a2] = ratio * c_w * (t1 + t2 + t3)
    return out


def single_input_atoms(K: float, act, c_w):
    r"""Book definitions (PDLT §5.1, §5.4): :math:`\chi_\parallel`, :math:`j`, and :math:`e(s, p)=\langle\sigma^sz^p\rangle_K`."""
    k = np.array([[K]])

    def e(s, p=0):
        f = [(0, "sigma", 0)] * s + ([(0, "z", p)] if p else [])
        return float(gaussian_expectation(f, k, act))

    chi = c_w / (2 * K**2) * (e(2, 2) - K * e(2))
    j = c_w * (e(2, 4) / K**2 - 6 * e(2, 2) / K + 3 * e(2))
    return chi, j, e


def chi_forms(K: float, V: float, G1: float, act, c_w, c_b, ratio):
    r"""Single-input χ forms (PDLT (5.109)–(5.110)): returns :math:`(K', V', G^{\{1\}\prime})`."""
    chi, j, e = single_input_atoms(K, act, c_w)
    Kn = c_b + c_w * e(2)
    Vn = ratio * chi**2 * V + c_w**2 * (e(4) - e(2) ** 2)
    Gn = ratio * (chi * G1 + j * V / (8 * K**2))
    return Kn, Vn, Gn


def random_vertex(rng: np.random.Generator, N: int, scale: float = 0.3) -> np.ndarray:
    """A random tensor with exactly the 8-element pair symmetry of V (not S4)."""
    T = rng.standard_normal((N,) * 4)
    perms = [(0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 3, 2), (1, 0, 3, 2),
             (2, 3, 0, 1), (3, 2, 0, 1), (2, 3, 1, 0), (3, 2, 1, 0)]
    return scale * sum(T.transpose(p) for p in perms) / 8
