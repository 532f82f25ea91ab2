r"""Gaussian orthant moments and Heaviside-times-polynomial expectations.

All functions are vectorized over a batch of covariances and are written to stay finite
on singular covariances (correlation exactly :math:`\pm1`, zero variances).

Zero-variance convention: a Heaviside factor whose argument has zero variance is given the
value :math:`\Theta(0)=1/2`, the limit of a vanishing independent perturbation.
"""

from __future__ import annotations

import math

import numpy as np

from ._poly import gaussian_moment, poly_mul

__all__ = [
    "half_gaussian_moment",
    "orthant2_moment",
    "orthant3_probability",
    "orthant_moment",
    "orthant_closed",
    "theta_poly_expectation",
]


def half_gaussian_moment(var: np.ndarray, p: int) -> np.ndarray:
    r""":math:`\mathbb E[\Theta(w)w^p]=\tfrac12\mathbb E|w|^p=\frac{(2v)^{p/2}\Gamma(\frac{p+1}2)}{2\sqrt\pi}`, :math:`w\sim\mathcal N(0,v)`."""
    var = np.maximum(var, 0.0)
    c = 0.5 * 2.0 ** (p / 2) * math.gamma((p + 1) / 2) / math.sqrt(math.pi)
    if p == 0:
        return np.full(np.shape(var), 0.5)
    return c * var ** (p / 2)


def _angle(s11: np.ndarray, s12: np.ndarray, s22: np.ndarray) -> np.ndarray:
    r"""Orthant angle :math:`\psi=\pi-\arccos\rho\in[0,\pi]` computed as ``arctan2(sqrt(det), -s12)``.

    If a variance is zero the pair is treated as uncorrelated (:math:`\psi=\pi/2`).
    A determinant below :math:`8\epsilon_{\rm mach}\,s_{11}s_{22}` (indistinguishable from
    zero given the rounding of the entries) is set to zero, so that duplicated samples give the
    exact :math:`\rho=\pm1` limit rather than an :math:`O(\sqrt{\epsilon})` error.
    """
    # Work with the correlation, never with s11*s22: the product overflows for large kernels
    # (K ~ 1e200 silently turned an uncorrelated pair into a duplicated one).
    ok = (s11 > 0) & (s22 > 0)
    scale = np.sqrt(np.where(ok, s11, 1.0)) * np.sqrt(np.where(ok, s22, 1.0))
    rho = np.clip(np.where(ok, s12, 0.0) / scale, -1.0, 1.0)
    det = (1.0 - rho) * (1.0 + rho)
    det = np.where(det <= 8 * np.finfo(float).eps, 0.0, det)
    psi = np.arctan2(np.sqrt(det), -rho)
    return np.where(ok, psi, 0.5 * np.pi)


def _sincos_integrals(x: np.ndarray):
    r"""Return ``F(m, n)`` = :math:`\int_0^x\sin^m t\cos^n t\,dt` (memoized recursion)."""
    sx, cx = np.sin(x), np.cos(x)
    memo: dict = {}

    def F(m: int, n: int) -> np.ndarray:
        key = (m, n)
        if key in memo:
            return memo[key]
        if m == 0 and n == 0:
            v = x
        elif (m, n) == (1, 0):
            pos = cx >= 0
            v = np.where(pos, sx * sx / np.where(pos, 1.0 + cx, 1.0), 1.0 - cx)
        elif (m, n) == (0, 1):
            v = sx
        elif (m, n) == (1, 1):
            v = 0.5 * sx * sx
        elif n >= 2:
            v = (sx ** (m + 1) * cx ** (n - 1) + (n - 1) * F(m, n - 2)) / (m + n)
        else:  # m >= 2, n in {0, 1}
            v = (-(sx ** (m - 1)) * cx ** (n + 1) + (m - 1) * F(m - 2, n)) / (m + n)
        memo[key] = v
        return v

    return F, sx, cx


def orthant2_moment(s11: np.ndarray, s12: np.ndarray, s22: np.ndarray, p: int, q: int) -> np.ndarray:
    r"""Bivariate orthant moment :math:`\mathbb E[\Theta(w_1)\Theta(w_2)w_1^p w_2^q]`.

    With :math:`\psi=\pi-\arccos\rho` (so the orthant has opening angle :math:`\psi` in
    whitened polar coordinates),

    .. math::
        \mathbb E[\Theta(w_1)\Theta(w_2)w_1^pw_2^q]=
        \frac{\sigma_1^p\sigma_2^q\,2^{n/2}\Gamma(\tfrac n2+1)}{2\pi}
        \int_0^{\psi}\sin^p t\,\sin^q(\psi-t)\,dt,\qquad n=p+q,

    and :math:`\sin(\psi-t)=\sin\psi\cos t+\rho\sin t` is expanded binomially; the
    remaining :math:`\int_0^\psi\sin^a\cos^b` follow from the standard reduction formulas.
    For :math:`p=q` this is the arc-cosine kernel :math:`\frac{\sigma_1^n\sigma_2^n}{2\pi}J_n(\theta)`
    of Cho & Saul, "Kernel methods for deep learning", NIPS 2009.
    """
    psi = _angle(s11, s12, s22)
    F, sp, cp = _sincos_integrals(psi)
    rho = -cp
    A = 0.0
    for j in range(q + 1):
        term = math.comb(q, j) * F(p + j, q - j)
        if q - j:
            term = term * sp ** (q - j)
        if j:
            term = term * rho**j
        A = A + term
    n = p + q
    pref = 2.0 ** (n / 2) * math.gamma(n / 2 + 1) / (2 * math.pi)
    scale = 1.0
    if p:
        scale = scale * np.maximum(s11, 0.0) ** (p / 2)
    if q:
        scale = scale * np.maximum(s22, 0.0) ** (q / 2)
    return pref * scale * A


def orthant3_probability(S: np.ndarray) -> np.ndarray:
    r"""Trivariate orthant probability (Sheppard / Plackett):

    .. math::
        P(w_1>0,w_2>0,w_3>0)=\frac18+\frac1{4\pi}\left(\arcsin\rho_{12}+\arcsin\rho_{13}+\arcsin\rho_{23}\right),

    with :math:`\arcsin\rho_{ij}=\psi_{ij}-\pi/2` from :func:`_angle` (stable at :math:`\rho=\pm1`).
    """
    tot = 0.0
    for i, j in ((0, 1), (0, 2), (1, 2)):
        tot = tot + (_angle(S[..., i, i], S[..., i, j], S[..., j, j]) - 0.5 * np.pi)
    return 0.125 + tot / (4 * np.pi)


def _condition_on_zero(S: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Density at 0 of :math:`w_j` times nothing, and the covariance of :math:`w_{-j}\mid w_j=0`.

    Returns ``(sjj_safe, S_cond)``. Where :math:`S_{jj}=0` the caller's coefficient
    :math:`S_{ij}/\sqrt{2\pi S_{jj}}` vanishes (PSD) and ``sjj_safe`` is 1. Conditional variances
    below :math:`10^{-12}` of the unconditional ones are set to exactly zero (with their row
    and column), so that exactly duplicated variables give the symmetric limit instead of
    rounding noise.
    """
    d = S.shape[-1]
    keep = [i for i in range(d) if i != j]
    sjj = S[..., j, j]
    pos = sjj > 0
    sjj_safe = np.where(pos, sjj, 1.0)
    col = S[..., keep, j]
    Sc = S[..., keep, :][..., :, keep] - col[..., :, None] * col[..., None, :] / sjj_safe[..., None, None]
    Sc = 0.5 * (Sc + np.swapaxes(Sc, -1, -2))
    dg = np.diagonal(Sc, axis1=-2, axis2=-1)
    dg0 = np.diagonal(S[..., keep, :][..., :, keep], axis1=-2, axis2=-1)
    small = dg <= 1e-12 * dg0
    mask = ~(small[..., :, None] | small[..., None, :])
    Sc = np.where(mask, Sc, 0.0)
    return sjj_safe, Sc


def orthant_moment(S: np.ndarray, powers: tuple[int, ...]) -> np.ndarray:
    r""":math:`\mathbb E[\prod_j\Theta(w_j)w_j^{a_j}]`, :math:`w\sim\mathcal N(0,S)`.

    Up to two variables: :func:`half_gaussian_moment` / :func:`orthant2_moment`; three
    variables without powers: :func:`orthant3_probability`. Otherwise Stein's lemma on a
    power :math:`w_i`,

    .. math::
        \mathbb E[w_i h]=\sum_jS_{ij}\,\mathbb E[\partial_jh],\qquad
        \partial_j\Theta(w_j)=\delta(w_j),

    gives polynomial-derivative terms of lower degree and delta terms that are
    :math:`S_{ij}(2\pi S_{jj})^{-1/2}` times an orthant moment of :math:`w_{-j}\mid w_j=0`
    (one variable fewer). Closed for three variables with any powers and for four variables
    with odd total degree.
    """
    m = len(powers)
    if m == 0:
        return np.ones(S.shape[:-2])
    if m == 1:
        return half_gaussian_moment(S[..., 0, 0], powers[0])
    if m == 2:
        return orthant2_moment(S[..., 0, 0], S[..., 0, 1], S[..., 1, 1], powers[0], powers[1])
    if not any(powers):
        if m == 3:
            return orthant3_probability(S)
        raise NotImplementedError("orthant probabilities of more than three variables")
    i = next(t for t, a in enumerate(powers) if a)
    n1 = list(powers)
    n1[i] -= 1
    res = np.zeros(S.shape[:-2])
    for j in range(m):
        if n1[j] > 0:
            n2 = list(n1)
            n2[j] -= 1
            res = res + S[..., i, j] * n1[j] * orthant_moment(S, tuple(n2))
        else:
            sjj_safe, Sc = _condition_on_zero(S, j)
            coef = np.where(S[..., j, j] > 0, S[..., i, j], 0.0) / np.sqrt(2 * np.pi * sjj_safe)
            res = res + coef * orthant_moment(Sc, tuple(n1[:j] + n1[j + 1 :]))
    return res


def orthant_closed(m: int, total_degree: int) -> bool:
    """Whether :func:`orthant_moment` is closed for ``m`` variables and this total degree."""
    return m <= 3 or (m == 4 and total_degree % 2 == 1)


def theta_poly_expectation(
    K: np.ndarray,
    slots: tuple[int, ...],
    noise: tuple[float, ...],
    poly: dict,
) -> np.ndarray:
    r""":math:`\mathbb E[\prod_j\Theta(z_{s_j}+\eta_j)\,P(z)]`, :math:`z\sim\mathcal N(0,K)`, :math:`\eta_j\sim\mathcal N(0,v_j)`.

    The :math:`\eta_j` are independent of each other and of :math:`z`, with :math:`v_j>0`,
    so :math:`w_j=z_{s_j}+\eta_j` has a positive-definite covariance
    :math:`S=K_{ss}+\mathrm{diag}(v)`. Conditioning, :math:`z=Bw+r` with
    :math:`B=K_{\cdot s}S^{-1}` and :math:`r\perp w`, :math:`\mathrm{Cov}(r)=K-BK_{s\cdot}`; the
    polynomial is expanded in :math:`(w,r)` and each monomial factorizes into an orthant
    moment of :math:`w` (:func:`orthant_moment`) times an Isserlis moment of :math:`r`.
    """
    m = len(slots)
    k = K.shape[-1]
    if m == 0:
        from ._poly import poly_expectation

        return poly_expectation(poly, K)
    idx = list(slots)
    S = K[..., idx, :][..., :, idx] + np.diag(np.asarray(noise, dtype=float))
    Czw = K[..., :, idx]  # (..., k, m)
    B = np.swapaxes(np.linalg.solve(S, np.swapaxes(Czw, -1, -2)), -1, -2)  # (..., k, m)
    R = K - B @ np.swapaxes(Czw, -1, -2)
    R = 0.5 * (R + np.swapaxes(R, -1, -2))
    nv = m + k
    lin = []
    for s in range(k):
        d: dict = {}
        for j in range(m):
            e = [0] * nv
            e[j] = 1
            d[tuple(e)] = B[..., s, j]
        e = [0] * nv
        e[m + s] = 1
        d[tuple(e)] = 1.0
        lin.append(d)
    powcache: dict = {}

    def linpow(s: int, p: int) -> dict:
        if (s, p) not in powcache:
            if p == 0:
                powcache[(s, p)] = {(0,) * nv: 1.0}
            else:
                powcache[(s, p)] = poly_mul(linpow(s, p - 1), lin[s])
        return powcache[(s, p)]

    expanded: dict = {}
    for e, c in poly.items():
        q: dict = {(0,) * nv: c}
        for s, p in enumerate(e):
            if p:
                q = poly_mul(q, linpow(s, p))
        for ee, cc in q.items():
            expanded[ee] = expanded[ee] + cc if ee in expanded else cc
    res = np.zeros(K.shape[:-2])
    ocache: dict = {}
    for ee, cc in expanded.items():
        a, b = ee[:m], ee[m:]
        if sum(b) % 2:
            continue
        if a not in ocache:
            ocache[a] = orthant_moment(S, a)
        rb = gaussian_moment(b, R) if any(b) else 1.0
        res = res + cc * ocache[a] * rb
    return res
