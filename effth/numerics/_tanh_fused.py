r"""Compiled kernels for the three- and four-sample atoms of tanh: the outer sums fused in one loop.

:func:`effth.numerics.atom_tables._rotated` integrates a four-sample atom on a 3-D grid
:math:`(x_1,x_2,x_3)` (the fourth variable smoothed out): :math:`z_0` depends on
:math:`(x_1,x_2)`, :math:`z_1` and :math:`z_2` on all three, and the innermost sums
:math:`T_{fg}(x_1,x_2)=\sum_{x_3}w_3\,\sigma^{(f)}(z_1)\,\sigma^{(g)}(z_2)` are taken for every pair
of derivative orders (three samples: the same on the 2-D grid :math:`(x_1,x_2)`).  In NumPy a
node costs some forty passes over memory (the transcendental evaluation, the derivatives, the
products, the sums): about 50 ns.  Here the :math:`x_3` line of one :math:`(x_1,x_2)` node is
one vectorized loop.  With :math:`\tanh z = 1-2/(1+e^{2z})` and
:math:`e^{2z_1}=e^{2(a_{10}x_1+a_{11}x_2)}\,e^{2a_{12}x_3}` (the exponentials of the coordinates
taken once), a node costs a division per variable, the derivatives
:math:`\sigma'=1-t^2`, :math:`\sigma''=-2t\sigma'`, :math:`\sigma^{(3)}=(6t^2-2)\sigma'`, and the
16 pair products accumulated in registers: about 4 ns.  The smoothed line
:math:`S_F(c x_1; s)=\mathbb E_y[F(c x_1+s y)]` of the integrated-out variable runs in the same
way (:func:`fused_smoothed`).

The kernels compute what the NumPy path computes on the same rules (the same nodes and weights,
the step-2h estimate and the :math:`\mathbb E|f|` scale); the sums run in another order, so values
agree to rounding.  They are used when

* numba is installed (a declared dependency; without it the NumPy path runs),
* the activation is tanh with derivative orders at most 3 (the NTK hierarchy's atoms); for four
  samples each factor function is a single derivative (a product of several at one sample, or a
  higher order, goes to NumPy),
* the exponentials stay finite: :math:`\sum_v|2a_vx_v|\le 354` on the grid, so that no product
  of the per-coordinate exponentials overflows (kernels up to about :math:`K\sim 600`).

``EFFTH_FUSED=0`` in the environment switches them off (the NumPy path then runs everywhere).
The kernels themselves are in :mod:`effth.numerics._tanh_kernels`, imported on first use.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache

import numpy as np

__all__ = ["applies", "available", "fused_smoothed", "fused_sums", "in_range"]

_MAX_EXP = 354.0          # bound on sum |2 a_v x_v|: no partial product of e^{2 a_v x_v} leaves [1e-154, 1e154]


@cache
def _numba() -> bool:
    return importlib.util.find_spec("numba") is not None


def available() -> bool:
    """Whether the compiled kernels can run (numba installed, not switched off by EFFTH_FUSED=0)."""
    return os.environ.get("EFFTH_FUSED", "1") != "0" and _numba()


def applies(act, fns: list, r: int) -> bool:
    """Whether :func:`fused_sums` evaluates these factor functions of this activation on ``r``
    outer directions: tanh, derivative orders at most 3, and for four samples (r = 3) one
    derivative per factor function (the exponent bound is checked per call)."""
    if not available() or getattr(act, "family", None) != "tanh" or r not in (2, 3):
        return False
    if not all(f and all(0 <= o <= 3 for o in f) for f in fns):
        return False
    return r == 2 or all(len(f) == 1 for f in fns)


def _padded(x: np.ndarray, w: np.ndarray, lanes: int = 8) -> tuple:
    """Nodes and weights padded with zero-weight nodes at 0 to a multiple of ``lanes``: the short
    step-2h line then runs in whole vectors (no scalar remainder: the kernel 5 % faster)."""
    n = -(-len(x) // lanes) * lanes
    xp, wp = np.zeros(n), np.zeros(n)
    xp[:len(x)], wp[:len(x)] = x, w
    return xp, wp


def _mask(n: int, sel) -> np.ndarray:
    """Boolean (n,): the step-2h nodes ``sel`` (a selection of
    :func:`~effth.numerics.atom_tables._sub`) of a line of n nodes."""
    m = np.zeros(n, dtype=np.bool_)
    m[sel] = True
    return m


def _orders(fns: list) -> np.ndarray:
    """The derivative orders of the factor functions, padded with -1: (len(fns), longest)."""
    fo = np.full((len(fns), max(len(f) for f in fns)), -1, dtype=np.int64)
    for i, f in enumerate(fns):
        fo[i, :len(f)] = f
    return fo


def in_range(A: np.ndarray, nodes: list) -> bool:
    """Whether every |2 z| = |2 (A x)_v| on the grid of these outer nodes is at most
    :data:`_MAX_EXP` (the kernels' exponentials then cannot overflow)."""
    amax = np.abs(A).max(axis=0)                                  # (r, r)
    xmax = np.array([np.abs(v).max() if len(v) else 0.0 for v in nodes])
    return bool(2.0 * float((amax @ xmax).max()) <= _MAX_EXP)


def fused_sums(act, A: np.ndarray, rules: list, fns: list, tuples: list,
               subs: tuple) -> tuple | None:
    r"""The inner sums of :func:`effth.numerics.atom_tables._rotated` for three (r = 2) or four
    (r = 3) samples by the compiled kernels, or None where they do not apply (see the module
    docstring).

    ``rules``: the outer rules (nodes, fine, coarse weights; x1's weights are applied by the
    caller); ``fns``: the factor functions; ``tuples``: the index pairs (r = 2) or triples
    (r = 3) of factor functions of the outer variables; ``subs``: the step-2h node selections of
    :func:`~effth.numerics.atom_tables._sub`, one per outer direction.  Returns (U, Uc, Ua), each
    (len(tuples), B, n1); Uc and Ua are zero off the step-2h x1 nodes and carry the fine weights
    (the caller applies the step-2h factors).
    """
    r = len(rules)
    if not applies(act, fns, r):
        return None
    x = [np.ascontiguousarray(rule[0], dtype=np.float64) for rule in rules]
    w = [np.ascontiguousarray(rule[1], dtype=np.float64) for rule in rules]
    A = np.ascontiguousarray(A, dtype=np.float64)
    if not in_range(A, x):
        return None
    masks = [_mask(len(v), e) for v, e in zip(x, subs)]
    idx = np.array(tuples, dtype=np.int64).reshape(len(tuples), r)
    B = A.shape[0]
    U = np.empty((len(tuples), B, len(x[0])))
    Uc = np.empty_like(U)
    Ua = np.empty_like(U)
    from . import _tanh_kernels as kern

    if r == 2:
        kern._square(A, x[0], x[1], w[1], masks[0], masks[1], _orders(fns), idx[:, 0], idx[:, 1], U, Uc, Ua)
    else:
        orders = np.array([f[0] for f in fns], dtype=np.int64)
        x3c, w3c = _padded(x[2][subs[2]], w[2][subs[2]])
        kern._cube(A, x[0], x[1], w[1], x[2], w[2], x3c, w3c, masks[0], masks[1],
                   4 * orders[idx[:, 1]] + orders[idx[:, 2]], orders[idx[:, 0]], U, Uc, Ua)
    return U, Uc, Ua


def fused_smoothed(act, c: np.ndarray, s: np.ndarray, x1: np.ndarray, yrule: tuple, fns: list,
                   e1) -> tuple | None:
    r"""The smoothed line :math:`S_F(c x_1; s)=\mathbb E_y[F(c x_1+s y)]` of
    :func:`effth.numerics.atom_tables._rotated` by the compiled kernel, or None where it does not
    apply: (fine, step-2h, E|F|) sums, each (len(fns), B, n1); the last two zero off the step-2h
    x1 nodes ``e1`` (a selection of :func:`~effth.numerics.atom_tables._sub`)."""
    if not applies(act, fns, 2):
        return None
    y, wy, wyc = (np.ascontiguousarray(v, dtype=np.float64) for v in yrule)
    x1 = np.ascontiguousarray(x1, dtype=np.float64)
    cs = np.stack([np.asarray(c, dtype=np.float64), np.asarray(s, dtype=np.float64)], axis=1)
    if not in_range(cs[:, None, :], [x1, y]):
        return None
    from . import _tanh_kernels as kern

    B = cs.shape[0]
    Sm, Sc, Sa = (np.empty((len(fns), B, len(x1))) for _ in range(3))
    kern._smoothed(np.ascontiguousarray(cs[:, 0]), np.ascontiguousarray(cs[:, 1]), x1, y, wy, wyc,
                   _mask(len(x1), e1), _orders(fns), Sm, Sc, Sa)
    return Sm, Sc, Sa
