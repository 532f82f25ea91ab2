r"""The couplings :math:`g, v` of the layer-:math:`\ell` quartic action in terms of :math:`K, V, G^{\{1\}}`.

The action of :math:`m` neurons in the book's chapter-4 convention (PDLT (4.44)) has first-order
moments that the engine derives by Wick contraction (:func:`effth.algebra.action.perturbative_moment`,
:func:`~effth.algebra.action.connected_correlator`; equal to PDLT (4.47), (4.48)):

.. math::
    \mathbb E[z_{i;\alpha_1}z_{i;\alpha_2}] = g_{\alpha_1\alpha_2}
      + \tfrac12\sum_\beta v^{(\beta_1\beta_2)(\beta_3\beta_4)}\big(m\,g_{\alpha_1\beta_1}g_{\alpha_2\beta_2}g_{\beta_3\beta_4}
      + 2g_{\alpha_1\beta_1}g_{\alpha_2\beta_3}g_{\beta_2\beta_4}\big),\qquad
    \mathbb E[z_{i;\alpha_1}z_{i;\alpha_2}z_{j;\alpha_3}z_{j;\alpha_4}]\big|_c
      = \sum_\beta v^{(\beta_1\beta_2)(\beta_3\beta_4)}g_{\alpha_1\beta_1}g_{\alpha_2\beta_2}g_{\alpha_3\beta_3}g_{\alpha_4\beta_4}
      \quad(i\ne j).

:func:`couplings` matches them to the effective theory, :math:`K+G^{\{1\}}/n_{\ell-1}` and
:math:`V/n_{\ell-1}`, at :math:`O(1/n)`: the derived expressions are expanded over the concrete
samples, the four-point map :math:`v\mapsto g^{\otimes4}v` is built from the derived connected
correlator and inverted at :math:`g=K`, and the two-point relation is solved for :math:`g` with
the :math:`v` terms evaluated at :math:`g=K`.  The book's closed forms are (4.108), (4.109) and
:math:`v=V/n_{\ell-1}` with raised indices (4.82); the tests compare with them.
"""

from __future__ import annotations

from effth._signature import public

from functools import lru_cache

import numpy as np
import sympy as sp

from effth.algebra.action import QuarticAction, connected_correlator, perturbative_moment
from effth.algebra.tensors import Propagator, QuarticCoupling, expand_sample_sums
from effth.errors import DomainError
from effth.numerics import validate_covariance

__all__ = ["couplings"]

_M = sp.Symbol("m", positive=True)


@lru_cache(maxsize=8)
def _expanded(N: int) -> tuple:
    """The derived two-point and connected four-point expressions over samples 0..N-1."""
    act = QuarticAction("ch4", n=_M)
    i, j = sp.symbols("i j", integer=True)
    a = sp.symbols("a1:5")
    two = perturbative_moment(act, [(i, a[0]), (i, a[1])]).subs(sp.KroneckerDelta(i, i), 1)
    four = connected_correlator(act, [(i, a[0]), (i, a[1]), (j, a[2]), (j, a[3])])
    four = four.subs({sp.KroneckerDelta(i, j): 0, sp.KroneckerDelta(j, i): 0,
                      sp.KroneckerDelta(i, i): 1, sp.KroneckerDelta(j, j): 1})
    two = sp.expand(expand_sample_sums(sp.expand(two), range(N)))
    four = sp.expand(expand_sample_sums(sp.expand(four), range(N)))
    return a, two, four


def _numeric(expr: sp.Expr, a: tuple, labels: tuple, g: np.ndarray, v: np.ndarray, m: float) -> float:
    sub = {x: sp.Integer(k) for x, k in zip(a, labels)}
    e = expr.xreplace(sub)
    vals = {}
    for t in e.atoms(Propagator):
        vals[t] = g[tuple(int(x) for x in t.args[:2])]
    for t in e.atoms(QuarticCoupling):
        vals[t] = v[tuple(int(x) for x in t.args[:4])]
    return float(e.xreplace(vals).subs(_M, m))


@public
def couplings(K, V, G1, n_l: float, n_prev: float) -> dict:
    r"""Quadratic and quartic couplings of the layer-:math:`\ell` action, to :math:`O(1/n)`.

    Parameters
    ----------
    K : ndarray (N, N)
        :math:`K^{(\ell)}` (symmetric PD).
    V : ndarray (N, N, N, N)
        :math:`V^{(\ell)}` with its pair symmetry.
    G1 : ndarray (N, N)
        :math:`G^{\{1\}(\ell)}`.
    n_l : float
        Number of neurons :math:`n_\ell` in the action (the book's :math:`m=n_\ell`; spectator
        dependence shows up only in :math:`g`).
    n_prev : float
        :math:`n_{\ell-1}`, which sets the size of the :math:`1/n` corrections.

    Returns
    -------
    dict
        ``g_lower`` (:math:`g_{\alpha\beta}`, (4.108)), ``g_upper`` (its inverse, (4.109) to
        :math:`O(1/n)`), ``v`` (:math:`v^{(\beta_1\beta_2)(\beta_3\beta_4)}`, raised).

    Raises
    ------
    DomainError
        Non-PD kernel, shapes that do not match, or non-positive widths.
    """
    from effth._validate import real_array
    K = real_array(K, "K")
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] < 1:
        raise DomainError(f"K must be a square (N, N) kernel, got shape {K.shape}")
    N = K.shape[0]
    V = np.asarray(V, dtype=float)
    G1 = np.asarray(G1, dtype=float)
    if K.shape != (N, N) or V.shape != (N,) * 4 or G1.shape != (N, N):
        raise DomainError(f"shapes must be (N,N), (N,N,N,N), (N,N); got {K.shape}, {V.shape}, {G1.shape}")
    if not (n_l > 0 and n_prev > 0):
        raise DomainError(f"widths must be positive, got n_l={n_l}, n_prev={n_prev}")
    validate_covariance(K)
    if np.linalg.eigvalsh(K)[0] <= 1e-12 * np.abs(K).max():
        raise DomainError("the couplings need an invertible kernel (g = K^-1 at leading order)")
    a, two, four = _expanded(N)
    idx4 = list(np.ndindex(*(N,) * 4))
    # the coupling tensor carries the pair symmetry: unknowns are its canonical components
    canon = {}
    for t in idx4:
        canon.setdefault(QuarticCoupling(*t).args, []).append(t)
    orbits = list(canon.values())
    # the derived four-point map v -> E[zzzz]_c at g = K, one orbit at a time
    Mmat = np.empty((len(idx4), len(orbits)))
    for c, orbit in enumerate(orbits):
        basis = np.zeros((N,) * 4)
        for t in orbit:
            basis[t] = 1.0
        Mmat[:, c] = [_numeric(four, a, r, K, basis, n_l) for r in idx4]
    sol, *_ = np.linalg.lstsq(Mmat, (V / n_prev).reshape(-1), rcond=None)
    v = np.empty((N,) * 4)
    for c, orbit in enumerate(orbits):
        for t in orbit:
            v[t] = sol[c]
    # two-point: E[zz] = g + F(g, v); at O(1/n), g = K + G1/n - F(K, v)
    F = np.array([[_numeric(two, a, (p, q), K, v, n_l) for q in range(N)] for p in range(N)]) - K
    g_lower = K + G1 / n_prev - F
    return {"g_lower": g_lower, "g_upper": np.linalg.inv(g_lower), "v": v}
