r"""Vectorized :math:`\arccos` (and :math:`\arcsin`) for the arc-cosine kernels' inner loop.

NumPy evaluates ``np.arccos`` and ``np.arctan2`` element by element through the C library, with
branches on the argument's range that random arguments mispredict (16-18 ns per entry on the
development machine); the arc-cosine kernels' angle :math:`\theta=\arccos\rho` (Cho & Saul 2009)
spent most of a layer there.  :func:`acos` evaluates it with whole-array arithmetic (SIMD ufunc
loops, no branches):

* the argument is reduced to :math:`y\in[0,\tfrac12]`: :math:`y=|x|` for :math:`|x|\le\tfrac12`,
  else :math:`y=\sqrt{(1-|x|)/2}` with :math:`\arcsin|x|=\tfrac\pi2-2\arcsin y`; both cases at
  once as :math:`y=\min(|x|,\sqrt{(1-|x|)/2})` (no masks, no branches);
* :math:`\arcsin y=y+y\,R(y^2)` with fdlibm's ``e_asin.c`` rational :math:`R=zP(z)/Q(z)`
  (Sun Microsystems, error below :math:`2^{-58.75}` on :math:`[0,\tfrac14]`), and
  :math:`\tfrac\pi2` split into two doubles as there.

The erf kernel :math:`\tfrac2\pi\arcsin t` (Williams 1996) keeps ``np.arcsin``: there the
whole-array :func:`asin` measured 1.2-1.35x slower inside the fused row blocks (its 35 passes
over a block-sized array leave the cache; the C library's loop does not).

Accuracy: within 2 units in the last place of the correctly rounded value on :math:`[-1,1]`
(``tests/numerics/test_fastmath.py`` checks a dense grid against 40-digit mpmath), where the C
library's is within 1; the kernels built on them agree with the ``np.arcsin`` forms to about
:math:`10^{-15}` relative.  The inputs must lie in :math:`[-1,1]` (the callers clip).

The temporaries come from a :class:`Scratch` pool when one is given: block-sized arrays allocated
once and reused from block to block and layer to layer (a fresh NumPy array of a block's size is
new memory from the operating system, page faults that cost more than the arithmetic).
"""

from __future__ import annotations

import math

import numpy as np

# fdlibm e_asin.c: asin(y) = y + y R(y^2), R(z) = z P(z) / Q(z) on |y| <= 0.5
_P = (1.66666666666666657415e-01, -3.25565818622400915405e-01, 2.01212532134862925881e-01,
      -4.00555345006794114027e-02, 7.91534994289814532176e-04, 3.47933107596021167570e-05)
_Q = (1.0, -2.40339491173441421878e+00, 2.02094576023350569471e+00, -6.88283971605453293030e-01,
      7.70381505559019352791e-02)
_PIO2_HI = 1.57079632679489655800e+00
_PIO2_LO = 6.12323399573676603587e-17


class Scratch:
    """A pool of reusable scratch arrays: :meth:`take` hands out the next one (viewed as
    ``shape``), :meth:`reset` makes them all free again.  One pool per thread."""

    def __init__(self) -> None:
        self._flat: list = []
        self._next = 0

    def take(self, shape: tuple) -> np.ndarray:
        n = math.prod(shape)
        if self._next == len(self._flat):
            self._flat.append(np.empty(n))
        elif self._flat[self._next].size < n:
            self._flat[self._next] = np.empty(n)
        a = self._flat[self._next][:n].reshape(shape)
        self._next += 1
        return a

    def reset(self) -> None:
        self._next = 0


def _reduced(a: np.ndarray, ws: Scratch, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""``(p, m)`` for ``a`` :math:`=|x|\in[0,1]`: :math:`p=\arcsin y`,
    :math:`y=\min(a,\sqrt{(1-a)/2})`, and ``m`` = 0 where :math:`y=a`, 1 where the half-angle
    form was taken (:math:`\arcsin a=\tfrac\pi2-2p`).  ``keep`` (0 or 1 per entry): where 0, the
    half-angle argument is taken as exactly 0 (:math:`|x|` = 1 to rounding).  ``a`` is
    overwritten (with ``m``)."""
    y = np.multiply(a, -0.5, out=ws.take(a.shape))
    y += 0.5                                   # exact for a >= 1/2 (Sterbenz)
    if keep is not None:
        y *= keep
    np.sqrt(y, out=y)
    np.minimum(a, y, out=y)
    m = np.less(y, a, out=a)                   # 1.0 where the half-angle form was taken
    z = np.multiply(y, y, out=ws.take(a.shape))
    p = np.multiply(z, _P[5], out=ws.take(a.shape))
    for c in _P[4::-1]:
        p += c
        p *= z
    q = np.multiply(z, _Q[4], out=ws.take(a.shape))
    for c in _Q[3:0:-1]:
        q += c
        q *= z
    q += 1.0
    p /= q
    p *= y
    p += y
    return p, m


def asin(x: np.ndarray, out: np.ndarray | None = None, ws: Scratch | None = None,
         scale: float = 1.0) -> np.ndarray:
    r""":math:`s\arcsin x` (``scale`` :math:`s`) for ``x`` in :math:`[-1,1]` (into ``out``,
    which may be ``x``).  With :math:`s=2/\pi` (the erf kernel) the half-angle branch is
    :math:`1-\tfrac4\pi p`, its constant exactly 1."""
    x = np.asarray(x, dtype=float)
    ws = Scratch() if ws is None else ws
    p, m = _reduced(np.abs(x, out=ws.take(x.shape)), ws)
    # m = 0: s p;  m = 1: s (pi/2 - 2 p) = s pi/2 - 2 s p; blended without a mask (exact products
    # with the 0/1 entries of m)
    c = np.multiply(m, -3.0 * scale, out=ws.take(x.shape))
    c += scale                                 # s or -2 s
    p *= c
    if scale == 2.0 / np.pi:
        p += m                                 # s pi/2 = 1
    else:
        np.multiply(m, _PIO2_LO * scale, out=c)    # fdlibm's order: pi/2_hi - (2 p - pi/2_lo)
        p += c
        m *= _PIO2_HI * scale
        p += m
    return np.copysign(p, x, out=out)


def acos(x: np.ndarray, keep: np.ndarray | None = None, complement: bool = False,
         ws: Scratch | None = None) -> np.ndarray:
    r""":math:`\arccos x` for ``x`` in :math:`[-1,1]` (``complement``: :math:`\pi-\arccos x`):
    :math:`\tfrac\pi2-\arcsin x` for :math:`|x|\le\tfrac12`, :math:`2\arcsin\sqrt{(1-x)/2}`
    above, :math:`\pi` minus that of :math:`-x` below (no cancellation near :math:`x=\pm1`).
    ``keep`` as :func:`_reduced` (0: the angle is exactly 0 or :math:`\pi`).  A new array (or
    one of ``ws``)."""
    x = np.asarray(x, dtype=float)
    ws = Scratch() if ws is None else ws
    p, m = _reduced(np.abs(x, out=ws.take(x.shape)), ws, keep)
    # u = m sign(x) in {0, 1, -1}:  arccos x = p (3u - sign x) + pi/2 (1 - u)
    sg = np.copysign(1.0, x, out=ws.take(x.shape))
    u = np.multiply(m, sg, out=m)
    c = np.multiply(u, 3.0, out=ws.take(x.shape))
    c -= sg
    if complement:                             # pi - arccos x = -p (3u - sign x) + pi/2 (1 + u)
        c *= -1.0
        u *= -1.0
    p *= c
    np.subtract(1.0, u, out=u)
    np.multiply(u, _PIO2_LO, out=c)
    p += c
    u *= _PIO2_HI
    p += u
    return p
