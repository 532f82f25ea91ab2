"""The numba kernel of :func:`effth.numerics._closed._orthant.orthant4_probability` (imported on
first use; compiled once per installation, cached next to this file).

One loop per correlation evaluates the six pair integrals of Plackett's reduction on a
double-exponential rule and its nested half rule, node by node in registers.  In NumPy each
node of each pairing took some forty passes over ``(chunk, nodes)`` temporaries (the sines and
cosines, the determinant along the path, the arctangent): 57-78 % of the erf and ReLU four-point
tables of a deep flow.  The arithmetic is that of ``_orthant4_integrals``, term by term; only the
order of the sums differs, so the values agree to rounding."""

import math

import numpy as np
from numba import njit

_PAIRINGS = np.array([[0, 1, 2, 3], [0, 2, 1, 3], [0, 3, 1, 2], [1, 2, 0, 3], [1, 3, 0, 2],
                      [2, 3, 0, 1]], dtype=np.int64)


@njit(nogil=True, error_model="numpy", cache=True)
def orthant4_rule(R, mu, s, w, w2, pairings, out, out2):
    """``out[b], out2[b]``: the orthant probability of correlation ``R[b]`` (eigenvalues
    ``mu[b]``) on the rule ``(s, w)`` and on its nested rule of step 2h (weights ``w2``)."""
    inv4pi2 = 1.0 / (4.0 * math.pi ** 2)
    for b in range(R.shape[0]):
        m0, m1, m2, m3 = mu[b, 0], mu[b, 1], mu[b, 2], mu[b, 3]
        tot = 0.0625
        tot2 = 0.0625
        for q in range(6):
            i, j, k, l = pairings[q, 0], pairings[q, 1], pairings[q, 2], pairings[q, 3]
            r = R[b, i, j]
            U = math.asin(r)
            cU = math.cos(U)
            zero = r == 0.0
            rs = 1.0 if zero else r
            rkl, rki, rkj = R[b, k, l], R[b, k, i], R[b, k, j]
            rli, rlj = R[b, l, i], R[b, l, j]
            sx = rki * rlj + rkj * rli
            sy = rki * rli + rkj * rlj
            acc = 0.0
            acc2 = 0.0
            for n in range(s.size):
                half = 0.5 * U * s[n]
                a, bb = math.sin(half), math.cos(half)
                sv, cv = 2 * a * bb, 1 - 2 * a * a
                su = r * cv - cU * sv
                c2 = (cU * cv + r * sv) ** 2
                tm1 = -1.0 if zero else -2 * a * (r * a + cU * bb) / rs
                t = 1.0 + tm1
                det = ((m0 + tm1 * (m0 - 1.0)) * (m1 + tm1 * (m1 - 1.0))
                       * (m2 + tm1 * (m2 - 1.0)) * (m3 + tm1 * (m3 - 1.0)))
                N = t * (rkl * c2 + t * (su * sx - sy))
                g = math.atan2(N, math.sqrt(max(c2 * det, 0.0)))
                acc += g * w[n]
                acc2 += g * w2[n]
            c = U * inv4pi2
            tot += 0.5 * math.pi * c + acc * c
            tot2 += 0.5 * math.pi * c + acc2 * c
        out[b] = tot
        out2[b] = tot2
