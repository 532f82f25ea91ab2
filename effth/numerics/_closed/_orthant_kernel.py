"""The numba kernel of :func:`effth.numerics._closed._orthant.orthant4_probability` (imported on
first use; compiled once per installation, cached next to this file).

One loop per correlation evaluates the six pair integrals of Plackett's reduction on a
double-exponential rule and its nested half rule, node by node in registers.  In NumPy each
node of each pairing took some forty passes over ``(chunk, nodes)`` temporaries (the sines and
cosines, the determinant along the path, the arctangent): 57-78 % of the erf and ReLU four-point
tables of a deep flow.  The arithmetic is that of ``_orthant4_integrals``, term by term; only the
order of the sums differs, so the values agree to rounding.

The node loop is written without calls into libm, so that LLVM vectorizes it (four or eight
nodes per instruction): :math:`\sin` and :math:`\cos` of the half angle
:math:`|v/2|\le\pi/4` are their Taylor polynomials to degree 17/18 (truncation below
:math:`10^{-18}`), the arctangent is Cephes' rational approximation (Moshier, *Methods and
Programs for Mathematical Functions*, 1989, ``atan.c``: :math:`x+x^3P(x^2)/Q(x^2)` on
:math:`|x|\le0.66`, with :math:`x\to(x-1)/(x+1)` above and :math:`\pi/2-\arctan(1/x)` above 1),
within 2.5e-16 of ``math.atan2`` (measured over 2e6 arguments spanning 16 decades).  The
function is compiled without fast-math: contracting the products of the determinant and the
partial covariance into fused multiply-adds moved nearly singular correlations by 1e-13; the
weighted sums run over the stored integrand with four partial sums.  5-7x faster than the
scalar loop with libm calls (2048 correlations, one thread)."""

import math

import numpy as np
from numba import njit

_PAIRINGS = np.array([[0, 1, 2, 3], [0, 2, 1, 3], [0, 3, 1, 2], [1, 2, 0, 3], [1, 3, 0, 2],
                      [2, 3, 0, 1]], dtype=np.int64)

# Taylor coefficients of sin and cos on |x| <= pi/4 (truncation below 1e-18 there)
_S3, _S5, _S7, _S9 = -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880
_S11, _S13, _S15, _S17 = -1.0 / 39916800, 1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000
_C2, _C4, _C6, _C8 = -0.5, 1.0 / 24, -1.0 / 720, 1.0 / 40320
_C10, _C12, _C14, _C16 = -1.0 / 3628800, 1.0 / 479001600, -1.0 / 87178291200, 1.0 / 20922789888000
_C18 = -1.0 / 6402373705728000
# Cephes atan: x + x^3 P(x^2)/Q(x^2) on |x| <= 0.66 (after x -> (x-1)/(x+1) above 0.66)
_P0, _P1, _P2, _P3, _P4 = (-8.750608600031904122785e-1, -1.615753718733365076637e1,
                           -7.500855792314704667340e1, -1.228866684490136173410e2,
                           -6.485021904942025371773e1)
_Q0, _Q1, _Q2, _Q3, _Q4 = (2.485846490142306297962e1, 1.650270098316988542046e2,
                           4.328810604912902668951e2, 4.853903996359136964868e2,
                           1.945506571482613964425e2)
_MOREBITS = 6.123233995736765886130e-17


@njit(inline="always", error_model="numpy", fastmath=False)
def _atan_pos(num, den):
    """atan(num/den) for num, den >= 0, den >= num (in [0, pi/4])."""
    x = num / den if den > 0.0 else 0.0
    big = x > 0.66
    xr = (x - 1.0) / (x + 1.0) if big else x
    z = xr * xr
    p = (((_P0 * z + _P1) * z + _P2) * z + _P3) * z + _P4
    q = ((((z + _Q0) * z + _Q1) * z + _Q2) * z + _Q3) * z + _Q4
    r = xr + xr * (z * p / q)
    return (0.25 * math.pi + (0.5 * _MOREBITS + r)) if big else r


@njit(inline="always")
def _dot2(g, w, w2):
    """``(g . w, g . w2)`` with four partial sums each (the latency chain of one sum broken)."""
    a0 = a1 = a2 = a3 = 0.0
    b0 = b1 = b2 = b3 = 0.0
    n = g.size
    m = n - n % 4
    for i in range(0, m, 4):
        a0 += g[i] * w[i]
        a1 += g[i + 1] * w[i + 1]
        a2 += g[i + 2] * w[i + 2]
        a3 += g[i + 3] * w[i + 3]
        b0 += g[i] * w2[i]
        b1 += g[i + 1] * w2[i + 1]
        b2 += g[i + 2] * w2[i + 2]
        b3 += g[i + 3] * w2[i + 3]
    for i in range(m, n):
        a0 += g[i] * w[i]
        b0 += g[i] * w2[i]
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)


@njit(nogil=True, error_model="numpy", cache=True, fastmath=False)
def orthant4_rule(R, mu, s, w, w2, pairings, out, out2):
    """``out[b], out2[b]``: the orthant probability of correlation ``R[b]`` (eigenvalues
    ``mu[b]``) on the rule ``(s, w)`` and on its nested rule of step 2h (weights ``w2``)."""
    inv4pi2 = 1.0 / (4.0 * math.pi ** 2)
    ns = s.size
    g = np.empty(ns)
    for b in range(R.shape[0]):
        m0, m1, m2, m3 = mu[b, 0], mu[b, 1], mu[b, 2], mu[b, 3]
        n0, n1, n2, n3 = m0 - 1.0, m1 - 1.0, m2 - 1.0, m3 - 1.0
        tot = 0.0625
        tot2 = 0.0625
        for q in range(6):
            i, j, k, l = pairings[q, 0], pairings[q, 1], pairings[q, 2], pairings[q, 3]
            r = R[b, i, j]
            U = math.asin(r)
            cU = math.cos(U)
            zero = r == 0.0
            rinv = 1.0 if zero else 1.0 / r
            fz = 0.0 if zero else 1.0
            rkl, rki, rkj = R[b, k, l], R[b, k, i], R[b, k, j]
            rli, rlj = R[b, l, i], R[b, l, j]
            sx = rki * rlj + rkj * rli
            sy = rki * rli + rkj * rlj
            hU = 0.5 * U
            for n in range(ns):
                x = hU * s[n]
                x2 = x * x
                a = x * (1.0 + x2 * (_S3 + x2 * (_S5 + x2 * (_S7 + x2 * (_S9 + x2 * (
                    _S11 + x2 * (_S13 + x2 * (_S15 + x2 * _S17))))))))
                bb = 1.0 + x2 * (_C2 + x2 * (_C4 + x2 * (_C6 + x2 * (_C8 + x2 * (
                    _C10 + x2 * (_C12 + x2 * (_C14 + x2 * (_C16 + x2 * _C18))))))))
                sv, cv = 2 * a * bb, 1 - 2 * a * a
                su = r * cv - cU * sv
                cc = cU * cv + r * sv
                c2 = cc * cc
                tm1 = (-2 * a * (r * a + cU * bb) * rinv) * fz - (1.0 - fz)
                t = 1.0 + tm1
                det = ((m0 + tm1 * n0) * (m1 + tm1 * n1) * (m2 + tm1 * n2) * (m3 + tm1 * n3))
                N = t * (rkl * c2 + t * (su * sx - sy))
                D = math.sqrt(max(c2 * det, 0.0))
                aN = abs(N)
                sw = aN > D
                g0 = _atan_pos(min(aN, D), max(aN, D))
                gn = 0.5 * math.pi - g0 if sw else g0
                g[n] = -gn if N < 0.0 else gn
            acc, acc2 = _dot2(g, w, w2)
            c = U * inv4pi2
            tot += 0.5 * math.pi * c + acc * c
            tot2 += 0.5 * math.pi * c + acc2 * c
        out[b] = tot
        out2[b] = tot2
