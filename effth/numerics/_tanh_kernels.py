"""The numba kernels of :mod:`effth.numerics._tanh_fused` (imported on first use: numba's import
costs about 0.2 s; compiled once per installation, cached next to this file)."""

import math

import numpy as np
from numba import njit

# nogil: the chunks run on effth._threads.thread_map; error_model="numpy": a division raises no
# Python exception (the check would stop the loops from vectorizing); reassoc: vectorized sums
_OPT = {"nogil": True, "fastmath": {"reassoc", "contract"}, "error_model": "numpy", "cache": True}


@njit(inline="always", **_OPT)
def _tanh_derivatives(E):
    """tanh^(p)(z), p = 0..3, from E = e^{2z}: t = 1 - 2 / (1 + E) (exactly 0 at z = 0, so that an
    identically zero factor -- a zero input -- gives exact zeros, as in NumPy; one division
    shared by two variables lost that), then s' = 1 - t^2, s'' = -2 t s', s^(3) = (6 t^2 - 2) s'."""
    t = 1.0 - 2.0 / (1.0 + E)
    d1 = 1.0 - t * t
    return t, d1, -2.0 * t * d1, (6.0 * t * t - 2.0) * d1


@njit(inline="always", **_OPT)
def _line(e1, e2, E1, E2, w, absval):
    """sum_k w_k s^(f)(z1_k) s^(g)(z2_k) for the 16 pairs (f, g) of derivative orders (of the
    absolute values with ``absval``: the scale E|f| of the error estimate), where
    e^{2 z1_k} = e1 E1[k], e^{2 z2_k} = e2 E2[k]."""
    s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = 0.0
    s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = 0.0
    for k in range(w.size):
        a0, a1, a2, a3 = _tanh_derivatives(e1 * E1[k])
        b0, b1, b2, b3 = _tanh_derivatives(e2 * E2[k])
        wk = w[k]
        b0, b1, b2, b3 = wk * b0, wk * b1, wk * b2, wk * b3
        if absval:
            a0, a1, a2, a3 = abs(a0), abs(a1), abs(a2), abs(a3)
            b0, b1, b2, b3 = abs(b0), abs(b1), abs(b2), abs(b3)
        s00 += a0 * b0; s01 += a0 * b1; s02 += a0 * b2; s03 += a0 * b3
        s10 += a1 * b0; s11 += a1 * b1; s12 += a1 * b2; s13 += a1 * b3
        s20 += a2 * b0; s21 += a2 * b1; s22 += a2 * b2; s23 += a2 * b3
        s30 += a3 * b0; s31 += a3 * b1; s32 += a3 * b2; s33 += a3 * b3
    return (s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33)


@njit(**_OPT)
def _store(T, j, s):
    for p in range(16):
        T[p, j] = s[p]


@njit(**_OPT)
def _derivatives(E, D):
    """D[p] = tanh^(p)(z), p <= 3, from E = exp(2 z)."""
    for m in range(E.size):
        D[0, m], D[1, m], D[2, m], D[3, m] = _tanh_derivatives(E[m])


@njit(**_OPT)
def _cube(A, x1, x2, w2, x3, w3, x3c, w3c, m1, m2, pidx, t0, U, Uc, Ua):
    """U[t, b, i] = sum_j w2 s^(t0)(z0) T_pidx[t](x1_i, x2_j); Uc, Ua the same on the step-2h
    nodes (x3c, w3c: that rule's x3 nodes with the fine weights; m1, m2 its x1, x2 nodes) for
    the signed and the absolute integrand; zero on the other x1 nodes."""
    B = A.shape[0]
    n1, n2, n3, n3c = x1.size, x2.size, x3.size, x3c.size
    nt = t0.size
    E1 = np.empty(n3)
    E2 = np.empty(n3)
    C1 = np.empty(n3c)
    C2 = np.empty(n3c)
    X11 = np.empty(n1)
    X21 = np.empty(n1)
    X12 = np.empty(n2)
    X22 = np.empty(n2)
    E0 = np.empty(n2)
    D0 = np.empty((4, n2))
    W0 = np.empty((4, n2))
    T = np.zeros((16, n2))
    Tc = np.zeros((16, n2))
    Ta = np.zeros((16, n2))
    for b in range(B):
        # e^{2 z} as products of these per-coordinate exponentials (written out: a helper, even
        # a plain call, made the kernel 5-40 % slower)
        for k in range(n3):
            E1[k] = math.exp(2.0 * A[b, 1, 2] * x3[k])
            E2[k] = math.exp(2.0 * A[b, 2, 2] * x3[k])
        for k in range(n3c):
            C1[k] = math.exp(2.0 * A[b, 1, 2] * x3c[k])
            C2[k] = math.exp(2.0 * A[b, 2, 2] * x3c[k])
        for i in range(n1):
            X11[i] = math.exp(2.0 * A[b, 1, 0] * x1[i])
            X21[i] = math.exp(2.0 * A[b, 2, 0] * x1[i])
        for j in range(n2):
            X12[j] = math.exp(2.0 * A[b, 1, 1] * x2[j])
            X22[j] = math.exp(2.0 * A[b, 2, 1] * x2[j])
        for i in range(n1):
            for j in range(n2):
                E0[j] = math.exp(2.0 * (A[b, 0, 0] * x1[i] + A[b, 0, 1] * x2[j]))
            _derivatives(E0, D0)
            for f in range(4):
                for j in range(n2):
                    W0[f, j] = w2[j] * D0[f, j]
            for j in range(n2):
                e1 = X11[i] * X12[j]
                e2 = X21[i] * X22[j]
                _store(T, j, _line(e1, e2, E1, E2, w3, False))
                if m1[i] and m2[j]:
                    _store(Tc, j, _line(e1, e2, C1, C2, w3c, False))
                    _store(Ta, j, _line(e1, e2, C1, C2, w3c, True))
            for t in range(nt):
                p = pidx[t]
                f = t0[t]
                acc = 0.0
                for j in range(n2):
                    acc += W0[f, j] * T[p, j]
                U[t, b, i] = acc
                acc = 0.0
                acca = 0.0
                if m1[i]:
                    for j in range(n2):
                        acc += W0[f, j] * Tc[p, j]          # Tc, Ta: zero off the step-2h x2 nodes
                        acca += abs(W0[f, j]) * Ta[p, j]
                Uc[t, b, i] = acc
                Ua[t, b, i] = acca


@njit(**_OPT)
def _functions(E, fo, w, D, F):
    """F[f] = w * prod_l tanh^(fo[f, l])(z) (fo padded with -1) from E = exp(2 z)."""
    _derivatives(E, D)
    nf, fl = fo.shape
    for f in range(nf):
        for m in range(E.size):
            F[f, m] = w[m] * D[fo[f, 0], m]
        for l in range(1, fl):
            o = fo[f, l]
            if o >= 0:
                for m in range(E.size):
                    F[f, m] *= D[o, m]


@njit(**_OPT)
def _square(A, x1, x2, w2, m1, m2, fo, p0, p1, U, Uc, Ua):
    """Three samples (r = 2): U[p, b, i] = sum_j w2 F_p0[p](z0) F_p1[p](z1), the factor
    functions products of derivatives (orders fo); Uc, Ua the same on the step-2h nodes (m1,
    m2), signed and absolute; zero on the other x1 nodes."""
    B = A.shape[0]
    n1, n2 = x1.size, x2.size
    nf = fo.shape[0]
    npair = p0.size
    E = np.empty(n2)
    D = np.empty((4, n2))
    F0 = np.empty((nf, n2))
    F1 = np.empty((nf, n2))
    ones = np.ones(n2)
    mc = np.empty(n2)
    for j in range(n2):
        mc[j] = 1.0 if m2[j] else 0.0
    for b in range(B):
        for i in range(n1):
            for j in range(n2):
                E[j] = math.exp(2.0 * (A[b, 0, 0] * x1[i] + A[b, 0, 1] * x2[j]))
            _functions(E, fo, ones, D, F0)
            for j in range(n2):
                E[j] = math.exp(2.0 * (A[b, 1, 0] * x1[i] + A[b, 1, 1] * x2[j]))
            _functions(E, fo, w2, D, F1)
            for p in range(npair):
                a = F0[p0[p]]
                c = F1[p1[p]]
                acc = 0.0
                for j in range(n2):
                    acc += a[j] * c[j]
                U[p, b, i] = acc
                acc = 0.0
                acca = 0.0
                if m1[i]:
                    for j in range(n2):
                        v = mc[j] * a[j] * c[j]
                        acc += v
                        acca += abs(v)
                Uc[p, b, i] = acc
                Ua[p, b, i] = acca


@njit(**_OPT)
def _smoothed(c, s, x1, y, wy, wyc, m1, fo, Sm, Sc, Sa):
    """The smoothed line S_F(c x1; s) = E_y[F(c x1 + s y)] of the factor functions F (orders
    fo): Sm[l, b, i] with the fine y weights; on the step-2h x1 nodes (m1) Sc with the step-2h
    y weights and Sa = E_y|F| with the fine ones (zero on the other x1 nodes)."""
    B = c.size
    n1, ny = x1.size, y.size
    nf = fo.shape[0]
    Ey = np.empty(ny)
    E = np.empty(ny)
    D = np.empty((4, ny))
    F = np.empty((nf, ny))
    ones = np.ones(ny)
    for b in range(B):
        for k in range(ny):
            Ey[k] = math.exp(2.0 * s[b] * y[k])
        for i in range(n1):
            e = math.exp(2.0 * c[b] * x1[i])
            for k in range(ny):
                E[k] = e * Ey[k]
            _functions(E, fo, ones, D, F)
            for f in range(nf):
                acc = 0.0
                accc = 0.0
                acca = 0.0
                for k in range(ny):
                    v = F[f, k]
                    acc += wy[k] * v
                    accc += wyc[k] * v
                    acca += wy[k] * abs(v)
                Sm[f, b, i] = acc
                Sc[f, b, i] = accc if m1[i] else 0.0
                Sa[f, b, i] = acca if m1[i] else 0.0


@njit(**_OPT)
def _four_cube(A, x1, x2, w2, c2, x3, w3, c3, inner, inner_c, inner_a):
    """The inner sums of :func:`effth.numerics.sample_tables._outer_sum` for four distinct samples
    (r = 3, every power 1): with ``z = A x`` on the 3-D grid,
    ``t = sum_k w3 tanh z_1 tanh z_2`` (``tc`` with the step-2h weights ``c3``) and
    ``g = tanh z_0``, ``inner[b, i] = sum_j w2 g t``, ``inner_c = sum_j c2 g tc``,
    ``inner_a = sum_j w2 |g t|``.  tanh from the per-coordinate exponentials as in
    :func:`_cube`, the product of the two as one quotient
    :math:`(P-1)(Q-1)/((P+1)(Q+1))` (one division per node; exactly 0 for a zero input, where
    :math:`P=1`; no overflow: every :math:`|2z|\le354`, so the denominator stays below
    :math:`10^{307}`): 1.4 ns per node of the 3-D grid on one core."""
    B = A.shape[0]
    n1, n2, n3 = x1.size, x2.size, x3.size
    E1 = np.empty(n3)
    E2 = np.empty(n3)
    X11 = np.empty(n1)
    X21 = np.empty(n1)
    X12 = np.empty(n2)
    X22 = np.empty(n2)
    for b in range(B):
        for k in range(n3):
            E1[k] = math.exp(2.0 * A[b, 1, 2] * x3[k])
            E2[k] = math.exp(2.0 * A[b, 2, 2] * x3[k])
        for i in range(n1):
            X11[i] = math.exp(2.0 * A[b, 1, 0] * x1[i])
            X21[i] = math.exp(2.0 * A[b, 2, 0] * x1[i])
        for j in range(n2):
            X12[j] = math.exp(2.0 * A[b, 1, 1] * x2[j])
            X22[j] = math.exp(2.0 * A[b, 2, 1] * x2[j])
        for i in range(n1):
            acc = 0.0
            accc = 0.0
            acca = 0.0
            for j in range(n2):
                g = math.tanh(A[b, 0, 0] * x1[i] + A[b, 0, 1] * x2[j])
                e1 = X11[i] * X12[j]
                e2 = X21[i] * X22[j]
                t = 0.0
                tc = 0.0
                for k in range(n3):
                    P = e1 * E1[k]                  # tanh z = (P - 1) / (P + 1), P = e^{2z}
                    Q = e2 * E2[k]
                    p = ((P - 1.0) * (Q - 1.0)) / ((P + 1.0) * (Q + 1.0))
                    t += w3[k] * p
                    tc += c3[k] * p
                gt = g * t
                acc += w2[j] * gt
                accc += c2[j] * (g * tc)
                acca += w2[j] * abs(gt)
            inner[b, i] = acc
            inner_c[b, i] = accc
            inner_a[b, i] = acca
