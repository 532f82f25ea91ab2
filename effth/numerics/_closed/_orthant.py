r"""Gaussian orthant moments and Heaviside-times-polynomial expectations.

All functions are vectorized over a batch of covariances and are written to stay finite
on singular covariances (correlation exactly :math:`\pm1`, zero variances).

Zero-variance convention: a Heaviside factor whose argument has zero variance is given the
value :math:`\Theta(0)=1/2`, the limit of a vanishing independent perturbation.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager

import numpy as np

from ..._threads import thread_map
from ._poly import gaussian_moment, poly_mul

_LOCAL = threading.local()


@contextmanager
def shared_terms():
    """Within this context, closed forms evaluated on the *same* kernel array object share their
    sub-expressions across calls (absorbed kernels, conditional covariances, orthant moments):
    the many atoms of one batch of subsets (the NTK-hierarchy tables) repeat them.  Keyed by
    object identity; the arrays are kept alive until the context ends.  Per thread."""
    prev = getattr(_LOCAL, "memo", None)
    _LOCAL.memo = {} if prev is None else prev
    try:
        yield
    finally:
        _LOCAL.memo = prev


def shared_memo() -> dict | None:
    """The memo of the enclosing :func:`shared_terms` (None outside one)."""
    return getattr(_LOCAL, "memo", None)

__all__ = [
    "half_gaussian_moment",
    "orthant2_moment",
    "orthant3_probability",
    "orthant4_probability",
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


# Double-exponential (tanh-sinh) rules on (0, 1): s = 1/(1+exp(-2y)), y = (pi/2) sinh(tau),
# |tau| <= 3.1.  The rule of step h holds the nodes of step 2h, so one evaluation gives two
# estimates.  Step 1/10 (63 nodes) reaches 1e-16 on full-rank correlations and 1e-12 on rank-2
# ones; the correlations whose step-1/10 and step-1/5 estimates differ by more than _DE_ACCEPT
# (measured: then the error is below 1e-13 off near-duplicates) are redone at step 1/20, then 1/40.  The singular end
# point that a rank-deficient correlation creates at t = 1 (square-root or faster) is what the
# double-exponential clustering resolves.
def _de_rule(h: float, T: float = 3.1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes ``s``, weights ``w`` and the weights ``w2`` of the nested rule of step ``2h`` (zero
    on the nodes it lacks)."""
    n = int(round(T / h))
    k = np.arange(-n, n + 1)
    tau = k * h
    y = 0.5 * np.pi * np.sinh(tau)
    s = 1.0 / (1.0 + np.exp(-2.0 * y))
    w = 0.25 * np.pi * np.cosh(tau) / np.cosh(y) ** 2
    w2 = np.where(k % 2 == 0, 2 * h * w, 0.0)
    return s, h * w, w2


_DE_RULES = tuple(_de_rule(h) for h in (0.1, 0.05, 0.025))
_DE_ACCEPT = 1e-11
_DE_CHUNK = 2048          # correlations per chunk: the (chunk, nodes) temporaries stay in cache
_PAIRINGS = ((0, 1, 2, 3), (0, 2, 1, 3), (0, 3, 1, 2), (1, 2, 0, 3), (1, 3, 0, 2), (2, 3, 0, 1))


def _orthant4_integrals(R: np.ndarray, mu: np.ndarray, rule: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The pair integrals of :func:`orthant4_probability` on one rule and its nested half:
    ``(P, P_half)`` for the correlations ``R (B, 4, 4)`` with eigenvalues ``mu (B, 4)``."""
    s, w, w2 = rule
    mu = mu[:, None, :]
    tot = np.full(R.shape[0], 0.0625)
    tot2 = tot.copy()
    for i, j, k, l in _PAIRINGS:
        r = R[:, i, j][:, None]
        U = np.arcsin(r)
        cU = np.cos(U)
        zero = r == 0
        rs = np.where(zero, 1.0, r)
        half = 0.5 * U * s                          # v/2, v = U - u the distance from t = 1
        a, b = np.sin(half), np.cos(half)
        sv, cv = 2 * a * b, 1 - 2 * a * a
        su = r * cv - cU * sv                       # sin u
        c2 = (cU * cv + r * sv) ** 2                # cos^2 u
        tm1 = np.where(zero, -1.0, -2 * a * (r * a + cU * b) / rs)     # t - 1, no cancellation
        t = 1.0 + tm1
        det = np.prod(mu + tm1[:, :, None] * (mu - 1.0), axis=-1)
        rkl, rki, rkj, rli, rlj = (R[:, p, q][:, None] for p, q in
                                   ((k, l), (k, i), (k, j), (l, i), (l, j)))
        N = t * (rkl * c2 + t * (su * (rki * rlj + rkj * rli) - (rki * rli + rkj * rlj)))
        g = np.arctan2(N, np.sqrt(np.clip(c2 * det, 0.0, None)))
        c = U[:, 0] / (4 * np.pi ** 2)
        tot = tot + 0.5 * np.pi * c + (g @ w) * c
        tot2 = tot2 + 0.5 * np.pi * c + (g @ w2) * c
    return tot, tot2


def _compiled_orthant4():
    """The numba kernel of the pair integrals (:mod:`._orthant_kernel`), or None: numba missing
    or ``EFFTH_FUSED=0`` (the NumPy path, :func:`_orthant4_integrals`, then runs)."""
    from .._tanh_fused import available
    if not available():
        return None
    from ._orthant_kernel import _PAIRINGS as pairings, orthant4_rule

    def integrals(R: np.ndarray, mu: np.ndarray, rule: tuple) -> tuple[np.ndarray, np.ndarray]:
        out, out2 = np.empty(len(R)), np.empty(len(R))
        orthant4_rule(np.ascontiguousarray(R), np.ascontiguousarray(mu), *rule, pairings, out, out2)
        return out, out2
    return integrals


def orthant4_probability(S: np.ndarray) -> np.ndarray:
    r"""Quadrivariate orthant probability :math:`P(w_1>0,\dots,w_4>0)`, :math:`w\sim\mathcal N(0,S)`, as one
    smooth one-dimensional integral per pair (Plackett's reduction).

    With the correlation :math:`R` and the path :math:`R(t)=I+t(R-I)`, the heat-equation identity
    :math:`\partial\varphi_R/\partial\rho_{ij}=\partial_i\partial_j\varphi_R` gives
    :math:`\partial P/\partial\rho_{ij}=\varphi_2(0,0;\rho_{ij})\,P(w_k>0,w_l>0\mid w_i=w_j=0)`,
    and the bivariate conditional orthant probability is :math:`\tfrac14+\arcsin\rho_{kl\cdot ij}/(2\pi)`.
    Integrating from :math:`P(I)=1/16` and substituting :math:`t\rho_{ij}=\sin u` (which removes the
    :math:`(1-t^2\rho_{ij}^2)^{-1/2}` of the density),

    .. math::
        P=\frac1{16}+\sum_{i<j}\Big[\frac{\arcsin\rho_{ij}}{8\pi}+\frac1{4\pi^2}
        \int_0^{\arcsin\rho_{ij}}\arctan\frac{N_{kl}(t)}{\sqrt{\cos^2u\,\det R(t)}}\,du\Big],

    :math:`\{k,l\}` the complementary pair and :math:`N_{kl}=t\rho_{kl}\cos^2u-t^2(\rho_{ki}\rho_{li}
    +\rho_{kj}\rho_{lj})+t^2\sin u\,(\rho_{ki}\rho_{lj}+\rho_{kj}\rho_{li})`, the partial
    covariance times :math:`\det R_{ij}(t)` (so :math:`\arcsin\rho_{kl\cdot ij}` is this arctangent, without
    the cancellation of :math:`1-\rho^2`).  :math:`\det R(t)=\prod_m(\mu_m+(t-1)(\mu_m-1))` from the
    eigenvalues :math:`\mu_m` of :math:`R`, with :math:`t-1` formed without cancellation.  The
    integrand is bounded; a singular :math:`R` gives it square-root (or faster) behaviour at
    :math:`t=1`, which double-exponential rules resolve (nested steps 1/10, 1/20, 1/40, each
    correlation refined until two successive estimates agree to :math:`10^{-11}`; absolute error
    about :math:`10^{-16}` on full-rank correlations and below :math:`3\times10^{-14}` on rank-2
    and rank-3 ones, checked against a 30-digit adaptive integration and a step-1/80 rule; nearly duplicated samples are limited by the
    conditioning of :math:`P` itself, :math:`\sim\epsilon/\sqrt{1-\rho^2}`).

    Conventions as :func:`orthant3_probability`: a zero-variance variable is independent of the
    others (:math:`\Theta(0)=1/2`).  Checked against :math:`1/5` for :math:`\rho_{ij}=1/2`
    (Steck 1962: :math:`1/(n+1)` for equicorrelation 1/2) and products of bivariate ones.
    """
    S = np.asarray(S, dtype=float)
    d = np.sqrt(np.clip(np.diagonal(S, axis1=-2, axis2=-1), 0.0, None))
    ok = d > 0
    ds = np.where(ok, d, 1.0)
    R = S / ds[..., :, None] / ds[..., None, :]
    R = np.clip(np.where(ok[..., :, None] & ok[..., None, :], R, 0.0), -1.0, 1.0)
    i4 = np.arange(4)
    R[..., i4, i4] = 1.0
    # exactly duplicated pairs (to rounding, the threshold of _angle): w_j = w_i drops w_j, and
    # w_j = -w_i leaves an empty orthant; the integral below would approach these limits slowly
    dup = np.zeros(R.shape[:-2], dtype=bool)
    reduced = np.zeros(R.shape[:-2])
    for i, j, _, _ in _PAIRINGS:
        r = R[..., i, j]
        hit = ((1.0 - r) * (1.0 + r) <= 8 * np.finfo(float).eps) & ~dup
        if hit.any():
            keep = [m for m in range(4) if m != j]
            sub = R[hit][:, keep][:, :, keep]
            reduced[hit] = np.where(r[hit] > 0, orthant3_probability(sub), 0.0)
            dup |= hit
    out4 = reduced
    R = R[~dup]                    # the integral only where no pair was reduced exactly
    mu = np.clip(np.linalg.eigvalsh(R), 0.0, None)
    integrals = _compiled_orthant4() or _orthant4_integrals

    def run(lo: int) -> np.ndarray:
        Rc, mc = R[lo:lo + _DE_CHUNK], mu[lo:lo + _DE_CHUNK]
        out = np.empty(len(Rc))
        todo = np.arange(len(Rc))
        for n, rule in enumerate(_DE_RULES):
            p, p2 = integrals(Rc[todo], mc[todo], rule)
            out[todo] = p
            ok = np.abs(p - p2) <= _DE_ACCEPT
            if n == len(_DE_RULES) - 1 or ok.all():
                break
            todo = todo[~ok]
        return out

    if len(R):
        out4[~dup] = np.clip(np.concatenate(thread_map(run, range(0, len(R), _DE_CHUNK))), 0.0, 1.0)
    return out4


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
    kk = np.array(keep)
    sub = S[..., kk[:, None], kk[None, :]]             # one gather of the kept block
    Sc = sub - col[..., :, None] * col[..., None, :] / sjj_safe[..., None, None]
    Sc = 0.5 * (Sc + np.swapaxes(Sc, -1, -2))
    dg = np.diagonal(Sc, axis1=-2, axis2=-1)
    dg0 = np.diagonal(sub, axis1=-2, axis2=-1)
    small = dg <= 1e-12 * dg0
    mask = ~(small[..., :, None] | small[..., None, :])
    Sc = np.where(mask, Sc, 0.0)
    return sjj_safe, Sc


def orthant_moment(S: np.ndarray, powers: tuple[int, ...], _memo: dict | None = None) -> np.ndarray:
    r""":math:`\mathbb E[\prod_j\Theta(w_j)w_j^{a_j}]`, :math:`w\sim\mathcal N(0,S)`.

    Up to two variables: :func:`half_gaussian_moment` / :func:`orthant2_moment`; three
    variables without powers: :func:`orthant3_probability`, four: :func:`orthant4_probability`. Otherwise Stein's lemma on a
    power :math:`w_i`,

    .. math::
        \mathbb E[w_i h]=\sum_jS_{ij}\,\mathbb E[\partial_jh],\qquad
        \partial_j\Theta(w_j)=\delta(w_j),

    gives polynomial-derivative terms of lower degree and delta terms that are
    :math:`S_{ij}(2\pi S_{jj})^{-1/2}` times an orthant moment of :math:`w_{-j}\mid w_j=0`
    (one variable fewer). Closed for up to four variables with any powers (four variables with
    an even total degree end on :func:`orthant4_probability`, a one-dimensional integral).
    """
    # the recursion reaches the same (covariance, powers) along several paths (the four-variable
    # probability three times from E[prod relu]); memoized on the covariance object
    memo = {} if _memo is None else _memo
    key = (id(S), tuple(powers))
    if key in memo:
        return memo[key][1]
    val = _orthant_moment(S, tuple(powers), memo)
    memo[key] = (S, val)            # S kept alive: its id stays unique while the memo lives
    return val


def _orthant_moment(S: np.ndarray, powers: tuple[int, ...], memo: dict) -> np.ndarray:
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
        if m == 4:
            return orthant4_probability(S)
        raise NotImplementedError("orthant probabilities of more than four variables")
    i = next(t for t, a in enumerate(powers) if a)
    n1 = list(powers)
    n1[i] -= 1
    res = np.zeros(S.shape[:-2])
    for j in range(m):
        if n1[j] > 0:
            n2 = list(n1)
            n2[j] -= 1
            res = res + S[..., i, j] * n1[j] * orthant_moment(S, tuple(n2), memo)
        else:
            sjj_safe, Sc = _condition_on_zero(S, j)
            coef = np.where(S[..., j, j] > 0, S[..., i, j], 0.0) / np.sqrt(2 * np.pi * sjj_safe)
            res = res + coef * orthant_moment(Sc, tuple(n1[:j] + n1[j + 1 :]), memo)
    return res


def orthant_closed(m: int, total_degree: int) -> bool:
    """Whether :func:`orthant_moment` is closed for ``m`` variables and this total degree."""
    return m <= 4


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
    memo = shared_memo()
    key = ("theta", id(K), tuple(slots), tuple(noise))
    if memo is not None and key in memo:
        parts = memo[key][1]
    else:
        parts = _theta_parts(K, slots, noise)
        if memo is not None:
            memo[key] = (K, parts)
    S, conditional, linpow, ocache, rcache = parts
    nv = m + k
    expanded: dict = {}
    for e, c in poly.items():
        q: dict = {(0,) * nv: c}
        for s, p in enumerate(e):
            if p:
                q = poly_mul(q, linpow(s, p))
        for ee, cc in q.items():
            expanded[ee] = expanded[ee] + cc if ee in expanded else cc
    res = np.zeros(K.shape[:-2])
    for ee, cc in expanded.items():
        a, b = ee[:m], ee[m:]
        if sum(b) % 2:
            continue
        if a not in ocache:
            ocache[a] = orthant_moment(S, a)
        if b not in rcache:
            rcache[b] = gaussian_moment(b, conditional()[1]) if any(b) else 1.0
        res = res + cc * ocache[a] * rcache[b]
    return res


def _theta_parts(K: np.ndarray, slots: tuple, noise: tuple) -> tuple:
    """What :func:`theta_poly_expectation` needs of ``(K, slots, noise)`` besides the polynomial:
    ``S``, a function returning ``(B, R)`` (the regression of z on w and the residual
    covariance, computed on first call: a polynomial without powers of z -- erf's orthant
    probabilities -- never needs them, and their batched solve was a quarter of an erf flow), the
    powers of the conditional linear forms and caches of the orthant and Isserlis moments."""
    m = len(slots)
    k = K.shape[-1]
    idx = list(slots)
    S = K[..., idx, :][..., :, idx] + np.diag(np.asarray(noise, dtype=float))
    nv = m + k
    held: dict = {}

    def conditional() -> tuple:
        if not held:
            Czw = K[..., :, idx]  # (..., k, m)
            B = np.swapaxes(np.linalg.solve(S, np.swapaxes(Czw, -1, -2)), -1, -2)  # (..., k, m)
            R = K - B @ np.swapaxes(Czw, -1, -2)
            held["B"], held["R"] = B, 0.5 * (R + np.swapaxes(R, -1, -2))
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
            held["lin"] = lin
        return held["B"], held["R"]

    powcache: dict = {}

    def linpow(s: int, p: int) -> dict:
        if (s, p) not in powcache:
            if p == 0:
                powcache[(s, p)] = {(0,) * nv: 1.0}
            else:
                conditional()
                powcache[(s, p)] = poly_mul(linpow(s, p - 1), held["lin"][s])
        return powcache[(s, p)]

    return S, conditional, linpow, {}, {}
