r"""The exact :math:`O(1/n)` kernel sector of a residual MLP: one neuron's history (PDLT app. B).

**The erratum.**  In the residual MLP (PDLT (B.4)),
:math:`z^{(\ell+1)}_i=\xi[b_i+\sum_jW_{ij}\sigma(z^{(\ell)}_j)]+\gamma z^{(\ell)}_i`, neuron
:math:`i` keeps :math:`\gamma z^{(\ell)}_i`, so its history
:math:`(z^{(1)}_i,\dots,z^{(\ell)}_i)` is :math:`O(1)`-correlated (covariance
:math:`\gamma^{(\ell)}\cdots K^{(\ell')}` between layers), and the metric
:math:`\widehat G^{(\ell+1)}=C_b+C_W\frac1n\sum_j\sigma(z^{(\ell)}_j)^2` holds the neuron's own
:math:`\sigma^2`.  The four-point vertex :math:`V^{(\ell+1)}` and the mean shift
:math:`G^{\{1\}(\ell+1)}` therefore need joint expectations over a neuron's history at every
Mehler order.  The book's (B.24) -- and the derivation pipeline
(``derive_initialization(..., residual=True)``), which closes the recursion layer by layer on
single-layer cumulants (:math:`K, V, G^{\{1\}}`, the three-point vertex :math:`T`) -- keeps
the orders :math:`m\le2` only: the printed (B.24), (B.26), (B.29) and the derived
:math:`V`, :math:`G^{\{1\}}` are low at the percent level for tanh, ReLU, GELU (exact when
:math:`\sigma^2` is a quadratic polynomial: affine :math:`\sigma`, :math:`|z|`).

**The exact recursion** (one input).  Given layer :math:`\ell`, the neurons of layer
:math:`\ell+1` are independent :math:`\mathcal N(\gamma z^{(\ell)}_i,\xi^2\widehat G^{(\ell+1)})`.
For functions :math:`a, b` of one neuron's preactivation let

.. math::
    \mathcal C_\ell(a,b)=n_{\ell-1}\,\mathrm{Cov}[a(z^{(\ell)}_k),b(z^{(\ell)}_m)]\ (k\ne m),\qquad
    \mathcal D_\ell(a)=n_{\ell-1}\big(\mathbb E[a(z^{(\ell)}_k)]-\langle a\rangle_{K^{(\ell)}}\big).

Conditioning on layer :math:`\ell`, writing :math:`A=\mathbb E[a(z^{(\ell+1)})\,|\,z^{(\ell)},
\widehat G]` and expanding in :math:`\delta\widehat G` to :math:`O(1/n)` (the back-reaction of
neuron :math:`k` on :math:`\widehat G` through its own :math:`\sigma(z_k)^2/n` included) gives,
with :math:`s=\sigma^2`, :math:`\tilde s=s-\langle s\rangle`, :math:`r=n_\ell/n_{\ell-1}`,
:math:`A'=\partial_GA`, :math:`\langle\cdot\rangle` over :math:`\mathcal N(0,K^{(\ell)})`,

.. math::
    \mathcal C_{\ell+1}(a,b)&=r\,\mathcal C_\ell(A,B)+C_W\langle B'\rangle\big[\langle A\tilde s\rangle+r\,\mathcal C_\ell(A,s)\big]
      +C_W\langle A'\rangle\big[\langle B\tilde s\rangle+r\,\mathcal C_\ell(s,B)\big]
      +C_W^2\langle A'\rangle\langle B'\rangle\big[\mathrm{Var}\,s+r\,\mathcal C_\ell(s,s)\big],\\
    \mathcal D_{\ell+1}(a)&=r\,\mathcal D_\ell(A)+C_W\big[\langle A'\tilde s\rangle+r\langle A'\rangle\mathcal D_\ell(s)
      +r\,\mathcal C_\ell(A',s)\big]+\tfrac12C_W^2\langle A''\rangle\big[\mathrm{Var}\,s+r\,\mathcal C_\ell(s,s)\big],

and :math:`V^{(\ell)}=\mathcal C_\ell(z^2,z^2)`, :math:`G^{\{1\}(\ell)}=\mathcal D_\ell(z^2)`,
:math:`T^{(\ell)}=\mathcal C_\ell(z^2,z)`, :math:`\mathcal C_1=\mathcal D_1=0`.  In the
orthonormal Hermite basis :math:`h_m(z)=\mathrm{He}_m(z/\sqrt K)/\sqrt{m!}` of each layer the
conditional expectation is diagonal (Mehler): :math:`h_m^{(\ell+1)}\mapsto\rho^m h_m^{(\ell)}`,
:math:`\rho=\gamma\sqrt{K^{(\ell)}/K^{(\ell+1)}}`, and :math:`\langle A'\rangle` reads the
order-2 coefficient only, so :math:`\mathcal C_\ell` has the rank-two form
:math:`\mathcal C_\ell[m,n]=\delta_{m2}c_n+\delta_{n2}c_m-\delta_{m2}\delta_{n2}c_2`: one vector
:math:`c` and one vector :math:`d=\mathcal D_\ell[h_m]` per layer, iterated exactly up to the
truncation order of the Hermite expansion of :math:`\sigma^2` (chosen so that :math:`\rho^m`
falls below 1e-17).  The pipeline's :math:`V` is this recursion with the history sums cut at
:math:`m\le2`; :math:`T` and :math:`K` agree exactly.  At :math:`\gamma=0` it is the plain MLP's
(PDLT (4.90), (4.115)).

**Two inputs.**  The law is :math:`z^{(\ell+1)}_i\,|\,\ell\sim\mathcal N(\gamma z^{(\ell)}_i,\xi^2\widehat G)`
with :math:`\widehat G` the :math:`2\times2` metric, and :math:`s` becomes the three pair
functions :math:`s_{\alpha\beta}=\sigma(z_\alpha)\sigma(z_\beta)`; :math:`A'` is the gradient
in :math:`G` (the recursions above hold with sums over pairs).  Each layer works in the whitened
coordinates :math:`u=L_\ell^{-1}z` (:math:`K^{(\ell)}=L_\ell L_\ell^\top`, Cholesky) with the
tensor-product Hermite basis :math:`h_{n_1}(u_1)h_{n_2}(u_2)`.  The skip's conditional mean keeps
the total degree :math:`m` and acts on the :math:`m+1` functions of degree :math:`m` by
:math:`\mathrm{Sym}^m(R)`, :math:`R=\gamma L_{\ell+1}^{-1}L_\ell` (lower triangular:
:math:`T[n,k]=\sqrt{n!/k!}\,[t^n](R^\top t)^k`); :math:`\partial_GA` multiplies the generating
polynomial by :math:`\tfrac12\xi^2\,t^\top L_{\ell+1}^{-1}E_pL_{\ell+1}^{-\top}t` (degree +2).
:math:`\langle A'\rangle` again reads degree 2 only, so :math:`\mathcal C_\ell` is held by three
rows (one per degree-2 function) and :math:`\mathcal D_\ell` by one vector, kept to the degree
:math:`M` with :math:`\|R\|^M<10^{-14}` (:math:`M\approx300` at :math:`\|R\|=0.9`, cost
:math:`\sum_m(m+1)^2\approx M^3/3` per layer, at most 800 degrees).  The coefficients of
:math:`s_{\alpha\beta}` come from nested Gauss-Legendre panels split at the kinks of
:math:`\sigma(z_1)` (outer, in :math:`u_1`) and of :math:`\sigma(L_{21}u_1+L_{22}u_2)` (inner, per
outer node).  A rank-one kernel (:math:`L_{22}<10^{-5}\sqrt{K_{22}}`, e.g. :math:`x_1=x_2`) gets
:math:`L_{22}=0` and the inverse that reads :math:`z_1`, which reduces the pair to one input.
For :math:`P\ge3` inputs a network's law on any two of them does not depend on the others, so
every :math:`G^{\{1\}}_{\alpha\beta}` and every :math:`V` component on at most two distinct
inputs is a pair's; the components on three or four distinct inputs would need the
:math:`\mathrm{Sym}^m` blocks of three or four variables (:math:`\sim m^{P-1}` functions per degree,
:math:`\sim M^{2P-1}` per layer: :math:`10^{11}` at :math:`P=3`), which are not implemented.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from effth._signature import public
from effth._validate import integer, real_array
from effth.activations import get_activation
from effth.errors import AccuracyWarning, DomainError

__all__ = ["residual_history_flow"]

_X = 14.0            # standardized half-width of the quadrature (sqrt(phi) < 1e-21 beyond)
_NODES = 20          # Gauss-Legendre nodes per panel
_MAX_ORDER = 4000    # Hermite orders kept at most
_TAIL = 1e-17        # rho^M at the truncation order M
_MAX_DEPTH = 1_000_000


def _panels(breaks: list[float], h: float) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre nodes and weights on [breaks[0], breaks[-1]], panels <= h."""
    from effth.numerics._rules import gauss_legendre

    t, w = gauss_legendre(_NODES)
    xs, ws = [], []
    for a, b in zip(breaks[:-1], breaks[1:]):
        k = max(1, int(math.ceil((b - a) / h)))
        edges = np.linspace(a, b, k + 1)
        half = 0.5 * np.diff(edges)
        mid = 0.5 * (edges[1:] + edges[:-1])
        xs.append((mid[:, None] + half[:, None] * t[None, :]).ravel())
        ws.append((half[:, None] * w[None, :]).ravel())
    return np.concatenate(xs), np.concatenate(ws)


def _hermite_coefficients(f, K: float, order: int, kinks: tuple) -> np.ndarray:
    r""":math:`\langle f\,h_m\rangle_K` for :math:`m=0..`\ ``order`` (orthonormal Hermite basis at
    :math:`K`), and last :math:`\langle f^2\rangle_K`, by composite Gauss-Legendre quadrature
    split at the kinks of ``f``."""
    sK = math.sqrt(K)
    inner = sorted({float(c) / sK for c in kinks if abs(float(c) / sK) < _X})
    x, w = _panels([-_X, *inner, _X], min(0.25, 6.0 / math.sqrt(order + 1.0)))  # 1.5 periods
    W = w * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * f(sK * x)
    out = np.empty(order + 2)
    out[-1] = W @ f(sK * x)          # <f^2>_K: Var f without Parseval's slowly converging tail
    h_prev, h = np.zeros_like(x), np.ones_like(x)
    for m in range(order + 1):
        out[m] = W @ h
        h_prev, h = h, (x * h - math.sqrt(m) * h_prev) / math.sqrt(m + 1.0)
    return out


class _Coefficients:
    """Hermite coefficients of sigma^2 at a kernel K, cached (exact scaling for homogeneous sigma)."""

    def __init__(self, act, order: int):
        self.act, self.order = act, order
        sig = act.numpy(0)
        self.s = lambda z: np.asarray(sig(z), dtype=float) ** 2
        self.kinks = tuple(act.kinks)
        self.degree = 2 * act.homogeneity if act.homogeneity is not None else None
        self._cache: dict = {}

    def __call__(self, K: float) -> np.ndarray:
        if self.degree is not None and all(float(c) == 0 for c in self.kinks):
            if "unit" not in self._cache:
                self._cache["unit"] = _hermite_coefficients(self.s, 1.0, self.order, self.kinks)
            unit = self._cache["unit"]
            return np.append(K ** (self.degree / 2) * unit[:-1], K ** self.degree * unit[-1])
        if K not in self._cache:
            self._cache[K] = _hermite_coefficients(self.s, K, self.order, self.kinks)
        return self._cache[K]


# --------------------------------------------------------------------------- two inputs
_MAX_ORDER2 = 800    # total Hermite degree kept at most for two inputs
_H2 = 1.0            # widest quadrature panel for two inputs
_W2 = 12.0           # panel width x sqrt(degree + 1): 2.7 periods of the top Hermite function per panel
_TAIL2 = 1e-14       # |R|^M at the truncation degree M, two inputs (measured: 1e-16 from 1e-17)
_SINGULAR = 1e-5     # L_22 / sqrt(K_22) below which a pair's kernel is rank one (correlation > 1 - 5e-11)


def _hermite_table(x: np.ndarray, order: int) -> np.ndarray:
    """Orthonormal Hermite values h_0..h_order at x, shape (order + 1,) + x.shape."""
    out = np.empty((order + 1,) + x.shape)
    out[0] = 1.0
    if order >= 1:
        out[1] = x
    for m in range(1, order):
        out[m + 1] = (x * out[m] - math.sqrt(m) * out[m - 1]) / math.sqrt(m + 1.0)
    return out


def _pair_coefficients(sig, kinks: tuple, L: np.ndarray, order: int):
    r"""Hermite coefficients of the three pair functions :math:`s_p=\sigma(z_\alpha)\sigma(z_\beta)`,
    :math:`p=11,12,22`, at :math:`z=Lu`, :math:`u\sim\mathcal N(0,I_2)` (L lower triangular,
    :math:`L_{22}\ge0`): ``S[p, n1, n2]`` :math:`=\langle s_p\,h_{n_1}(u_1)h_{n_2}(u_2)\rangle` for
    :math:`n_1,n_2\le` ``order``, and the second moments ``M[p, q]`` :math:`=\langle s_ps_q\rangle`.

    Nested composite Gauss-Legendre quadrature, exact at the kinks: the outer rule in
    :math:`u_1` is split where :math:`\sigma(z_1)` kinks; for every outer node the inner rule in
    :math:`u_2` has its panel that holds a kink of :math:`\sigma(L_{21}u_1+L_{22}u_2)` replaced
    by panels split there.  The shared part is two matrix products."""
    L11, L21, L22 = float(L[0, 0]), float(L[1, 0]), float(L[1, 1])
    h = min(_H2, _W2 / math.sqrt(order + 1.0))
    br1 = {float(c) / L11 for c in kinks}
    if L22 == 0.0 and L21 != 0.0:
        br1 |= {float(c) / L21 for c in kinks}
    x1, w1 = _panels([-_X, *sorted(b for b in br1 if abs(b) < _X), _X], h)
    w1 = w1 * np.exp(-0.5 * x1 * x1) / math.sqrt(2.0 * math.pi)
    H1 = _hermite_table(x1, order).T                          # (Q1, order + 1)
    s1 = np.asarray(sig(L11 * x1), dtype=float)
    if L22 == 0.0:                                            # rank one: z_2 = L21 u_1
        s2 = np.asarray(sig(L21 * x1), dtype=float)
        f = np.stack([s1 * s1, s1 * s2, s2 * s2])             # (3, Q1)
        S = np.zeros((3, order + 1, order + 1))
        S[:, :, 0] = (f * w1) @ H1
        return S, np.einsum("pi,qi,i->pq", f, f, w1)
    k = max(1, int(math.ceil(2 * _X / h)))
    edges = np.linspace(-_X, _X, k + 1)
    x2, w2 = _panels(list(edges), 2 * _X / k * (1 + 1e-9))    # k panels of _NODES nodes
    w2 = w2 * np.exp(-0.5 * x2 * x2) / math.sqrt(2.0 * math.pi)
    H2 = _hermite_table(x2, order).T                          # (Q2, order + 1)
    Q1 = x1.size
    mask = np.ones((Q1, x2.size))
    extra_x, extra_w = [[] for _ in range(Q1)], [[] for _ in range(Q1)]
    for i in range(Q1):
        cuts = sorted((float(c) - L21 * x1[i]) / L22 for c in kinks)
        cuts = [u for u in cuts if -_X < u < _X]
        for pnl in sorted({min(int((u + _X) / (2 * _X / k)), k - 1) for u in cuts}):
            a, b = edges[pnl], edges[pnl + 1]
            mask[i, pnl * _NODES:(pnl + 1) * _NODES] = 0.0
            xe, we = _panels([a, *[u for u in cuts if a < u < b], b], b - a)
            extra_x[i].append(xe)
            extra_w[i].append(we)
    s2 = np.asarray(sig(L21 * x1[:, None] + L22 * x2[None, :]), dtype=float)     # (Q1, Q2)
    W = mask * w2[None, :]
    f = [np.broadcast_to((s1 * s1)[:, None], s2.shape), s1[:, None] * s2, s2 * s2]
    inner = np.stack([(fp * W) @ H2 for fp in f])             # (3, Q1, order + 1)
    Mom = np.array([[((f[p] * f[q] * W).sum(1)) @ w1 for q in range(3)] for p in range(3)])
    ne = max((sum(len(x) for x in row) for row in extra_x), default=0)
    if ne:
        xe = np.zeros((Q1, ne))
        we = np.zeros((Q1, ne))
        for i in range(Q1):
            if extra_x[i]:
                a = np.concatenate(extra_x[i])
                xe[i, :a.size] = a
                we[i, :a.size] = np.concatenate(extra_w[i])
        we *= np.exp(-0.5 * xe * xe) / math.sqrt(2.0 * math.pi)
        se = np.asarray(sig(L21 * x1[:, None] + L22 * xe), dtype=float)
        fe = [np.broadcast_to((s1 * s1)[:, None], se.shape), s1[:, None] * se, se * se]
        Mom += np.array([[((fe[p] * fe[q] * we).sum(1)) @ w1 for q in range(3)]
                         for p in range(3)])
        step = max(1, 2_000_000 // (ne * (order + 1)))
        for i0 in range(0, Q1, step):
            He = _hermite_table(xe[i0:i0 + step], order)      # (order + 1, rows, ne)
            for p in range(3):
                inner[p, i0:i0 + step] += np.einsum("ie,mie->im", fe[p][i0:i0 + step]
                                                    * we[i0:i0 + step], He)
    S = np.stack([H1.T @ (w1[:, None] * inner[p]) for p in range(3)])
    return S, Mom


def _flat(S: np.ndarray, M: int) -> np.ndarray:
    """Grid coefficients [..., n1, n2] -> the degree-ordered basis: degree m at offset
    m(m+1)/2, entry i = n2 (n1 = m - i)."""
    out = np.empty(S.shape[:-2] + ((M + 1) * (M + 2) // 2,))
    for m in range(M + 1):
        i = np.arange(m + 1)
        out[..., m * (m + 1) // 2 + i] = S[..., m - i, i]
    return out


def _plog(e: np.ndarray, r: float) -> np.ndarray:
    """log|r|^e with 0^0 = 1."""
    if r == 0.0:
        return np.where(e == 0, 0.0, -np.inf)
    return e * math.log(abs(r))


def _sym_power(R: np.ndarray, m: int, lg: np.ndarray) -> np.ndarray:
    r"""The degree-m block of the conditional mean (Mehler, two variables): for
    :math:`u'=Ru+\eta` (:math:`\mathrm{Cov}\,\eta=I-RR^\top`, R lower triangular),
    :math:`\mathbb E[h_n(u')\,|\,u]=\sum_kT[n,k]h_k(u)`, :math:`T[n,k]=\sqrt{n!/k!}\,[t^n](R^\top t)^k`
    -- :math:`\mathrm{Sym}^m` of R in the orthonormal Hermite basis (entries bounded by 1).
    With i = n_2, i' = k_2 (n_1 = m - i): :math:`T=\sqrt{n_2!\,k_1!/(n_1!\,k_2!)}\,
    R_{11}^{n_1}R_{22}^{k_2}R_{21}^{i-i'}/(i-i')!` for :math:`i\ge i'`, a Toeplitz core between two
    diagonal scalings, formed in logarithms."""
    i = np.arange(m + 1)
    a = 0.5 * (lg[i] - lg[m - i]) + _plog(m - i, R[0, 0])          # row scaling (n)
    b = 0.5 * (lg[m - i] - lg[i]) + _plog(i, R[1, 1])              # column scaling (k)
    c = _plog(i, R[1, 0]) - lg[i]                                   # Toeplitz core, j = i - i'
    sa = np.sign(R[0, 0]) ** (m - i)
    sb = np.sign(R[1, 1]) ** i
    sc = np.sign(R[1, 0]) ** i
    j = np.subtract.outer(i, i)
    low = j >= 0
    jj = np.where(low, j, 0)
    with np.errstate(invalid="ignore"):
        T = np.exp(a[:, None] + b[None, :] + c[jj]) * (sa[:, None] * sb[None, :] * sc[jj])
    T[~low] = 0.0
    return np.nan_to_num(T, nan=0.0)


def _raise(Y: np.ndarray, quad: np.ndarray, M: int) -> np.ndarray:
    r"""Multiply :math:`\sum_j Y_j t^j/\sqrt{j!}` by the quadratic
    :math:`q_0t_1^2+q_1t_1t_2+q_2t_2^2` and return the coefficients in the same normalization
    (degree raised by 2, cut at M)."""
    out = np.zeros_like(Y)
    for m in range(M - 1):
        a, b = m * (m + 1) // 2, (m + 2) * (m + 3) // 2
        y = Y[a:a + m + 1]
        i = np.arange(m + 3)
        n1, n2 = m + 2 - i, i
        blk = np.zeros(m + 3)
        blk[:m + 1] += quad[0] * np.sqrt(n1[:m + 1] * (n1[:m + 1] - 1.0)) * y
        blk[1:m + 2] += quad[1] * np.sqrt(n1[1:m + 2] * n2[1:m + 2]) * y
        blk[2:] += quad[2] * np.sqrt(n2[2:] * (n2[2:] - 1.0)) * y
        out[b:b + m + 3] += blk
    return out


_D1, _D2 = slice(1, 3), slice(3, 6)           # degree-1 and degree-2 blocks of the flat basis
_PAIRS = ((0, 0), (0, 1), (1, 1))
_E = [np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 0.0]]),
      np.array([[0.0, 0.0], [0.0, 1.0]])]       # tau^T E_p tau = the sum over ordered pairs in p
_SQ2 = math.sqrt(2.0)


def _series_length(rmax: float, order, tail: float, cap: int, message: str, stacklevel: int) -> int:
    """Hermite orders kept: enough for ``rmax**M < tail`` (at least 8, at most ``cap``, with an
    :class:`AccuracyWarning` built from ``message`` beyond it), or the user's ``order`` (an int
    >= 4, at most ``5 cap``)."""
    if order is None:
        need = 8 if rmax == 0 else int(math.ceil(math.log(tail) / math.log(rmax))) + 8
        if need > cap:
            warnings.warn(message.format(r=rmax, need=need, cap=cap, tail=rmax ** cap),
                          AccuracyWarning, stacklevel=stacklevel)
        return max(8, min(need, cap))
    M = integer(order, "order", minimum=4)
    if M > 5 * cap:
        raise DomainError(f"order={M} exceeds {5 * cap} Hermite orders")
    return M


def _cholesky2(K: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """Lower Cholesky factor L of a 2x2 kernel and its (generalized) inverse; a rank-one K
    (L22 / sqrt(K22) < 1e-5: z_2 = (L21 / L11) z_1) gets L22 = 0 and the inverse that reads z_1."""
    k11, k12, k22 = float(K[0, 0]), float(K[0, 1]), float(K[1, 1])
    if not (0 < k11 < math.inf and 0 < k22 < math.inf):
        raise DomainError(f"the kernel is not positive and finite at layer {layer}: {K.tolist()}")
    L11 = math.sqrt(k11)
    L21 = k12 / L11
    l22sq = k22 - L21 * L21
    if l22sq < -1e-10 * k22:
        raise DomainError(f"the kernel at layer {layer} is not positive semi-definite: {K.tolist()}")
    L22 = math.sqrt(max(l22sq, 0.0))
    if L22 < _SINGULAR * math.sqrt(k22):         # z_2 = (L21 / L11) z_1: L21 = +-sqrt(K22) exactly
        L21 = math.copysign(math.sqrt(k22), k12)
        return np.array([[L11, 0.0], [L21, 0.0]]), np.array([[1.0 / L11, 0.0], [0.0, 0.0]])
    return (np.array([[L11, 0.0], [L21, L22]]),
            np.array([[1.0 / L11, 0.0], [-L21 / (L11 * L22), 1.0 / L22]]))


def _quad_coeffs(Mat: np.ndarray) -> np.ndarray:
    """t^T Mat t -> (t1^2, t1 t2, t2^2) coefficients."""
    return np.array([Mat[0, 0], 2.0 * Mat[0, 1], Mat[1, 1]])


def _deg2(q: np.ndarray) -> np.ndarray:
    """Quadratic coefficients -> the degree-2 block (sqrt(n!) [t^n])."""
    return np.array([_SQ2 * q[0], q[1], _SQ2 * q[2]])


def _pair_flow(K1: np.ndarray, L: int, act, cw, cb, gm, xs, rt, order) -> dict:
    """The two-input history recursion (see the module docstring): K, V, G1, T of shapes
    (2, 2), (2, 2, 2, 2), (2, 2), (2, 2, 2) per layer."""
    sig = act.numpy(0)
    kinks = tuple(act.kinks)
    # infinite-width kernels (cheap pass) and the largest history correlation |R|
    Ks = [np.array(K1, dtype=float)]
    chol = [_cholesky2(Ks[0], 1)]
    for j in range(L - 1):
        S0, _ = _pair_coefficients(sig, kinks, chol[-1][0], 0)
        m0 = S0[:, 0, 0]
        G = cb[j] + cw[j] * np.array([[m0[0], m0[1]], [m0[1], m0[2]]])
        Ks.append(gm[j] ** 2 * Ks[-1] + xs[j] ** 2 * G)
        chol.append(_cholesky2(Ks[-1], j + 2))
    rho = [np.linalg.norm(gm[j] * chol[j + 1][1] @ chol[j][0], 2) for j in range(L - 1)]
    M = _series_length(max(rho, default=0.0), order, _TAIL2, _MAX_ORDER2,
                       "the history correlation |R| = {r:.6g} needs {need} Hermite degrees for "
                       "two inputs; keeping {cap} (tail {tail:.2g})", stacklevel=4)
    lg = np.array([math.lgamma(k + 1.0) for k in range(M + 2)])
    N = (M + 1) * (M + 2) // 2
    c, d = np.zeros((3, N)), np.zeros(N)
    out = {"K": [Ks[0]], "V": [np.zeros((2,) * 4)], "G1": [np.zeros((2, 2))],
           "T": [np.zeros((2,) * 3)]}
    for j in range(L - 1):
        (Lc, _), (Ln, Lni) = chol[j], chol[j + 1]
        x, r, C_w = xs[j], rt[j], cw[j]
        Sg, Mom = _pair_coefficients(sig, kinks, Lc, M)
        S = _flat(Sg, M)                                   # (3, N)
        mean = S[:, 0].copy()
        cov = Mom - np.outer(mean, mean)
        St = S.copy()
        St[:, 0] = 0.0
        # C S_p (the functions r C(., s_p)) and C(s_p, s_q)
        cS = c @ S.T                                       # cS[q, p] = c_q . S_p
        cD = c[:, _D2]
        CS = S[:, _D2] @ c                                 # sum_q S_p[q] c_q (as rows over N)
        CS[:, _D2] += cS.T - S[:, _D2] @ cD.T
        Css = S[:, _D2] @ cS + (S[:, _D2] @ cS).T - S[:, _D2] @ cD @ S[:, _D2].T
        Wpq = cov + r * Css
        Y = St + r * CS                                    # y_p
        # the skip's conditional mean, Sym^m(R), degree by degree
        R = gm[j] * Lni @ Lc
        Z = np.vstack([c, Y, d[None, :]])                  # 7 vectors
        Zh = np.empty_like(Z)
        for m in range(M + 1):
            a = m * (m + 1) // 2
            T = _sym_power(R, m, lg)
            Zh[:, a:a + m + 1] = Z[:, a:a + m + 1] @ T.T
            if m == 2:
                T2 = T
        cT, Yh, dT = Zh[:3], Zh[3:6], Zh[6]
        quads = [0.5 * x * x * _quad_coeffs(Lni @ E @ Lni.T) for E in _E]   # Q_p(t) with xi^2/2
        phi = np.array([_deg2(q) for q in quads])          # phi~_p on the degree-2 block, (3, 3)
        c_new = r * T2 @ cT
        c_new[:, _D2] += C_w * (Yh[:, _D2].T @ phi)        # C_W sum_p phi_p[k'] yh_p[q']
        c_new += C_w * phi.T @ Yh                          # C_W sum_p phi_p[q'] yh_p[k']
        c_new[:, _D2] += C_w ** 2 * phi.T @ Wpq @ phi
        d_new = r * dT
        for p in range(3):
            d_new += C_w * _raise(Yh[p], quads[p], M)
        d_new[_D2] += C_w * r * phi.T @ (S @ d)
        # (1/2) C_W^2 sum_pq <A''_pq> W_pq: the quartic (xi^4/4) sum W_pq Q_p Q_q
        quart = np.zeros(5)
        for p in range(3):
            for q in range(3):
                quart += Wpq[p, q] * np.convolve(quads[p], quads[q])      # (xi^2/2)^2 Q_p Q_q
        i4 = np.arange(5)
        fact = np.sqrt(np.exp(lg[4 - i4] + lg[i4]))
        d_new[10:15] += 0.5 * C_w ** 2 * fact * quart
        c, d = c_new, d_new
        # read K, V, G1, T off the layer-(j+2) basis
        A2 = np.empty((2, 2, 3))
        for al in range(2):
            for be in range(2):
                A2[al, be] = [_SQ2 * Ln[al, 0] * Ln[be, 0],
                              Ln[al, 0] * Ln[be, 1] + Ln[al, 1] * Ln[be, 0],
                              _SQ2 * Ln[al, 1] * Ln[be, 1]]
        cDD = 0.5 * (c[:, _D2] + c[:, _D2].T)
        V = np.einsum("abq,qr,cdr->abcd", A2, cDD, A2)
        G1 = A2 @ d[_D2]
        Tv = np.einsum("abq,qk,ck->abc", A2, c[:, _D1], Ln)
        if not (np.all(np.isfinite(V)) and np.all(np.isfinite(G1)) and np.all(np.isfinite(Tv))):
            raise DomainError(f"V, G1 or T overflows or is undefined at layer {j + 2}")
        out["K"].append(Ks[j + 1])
        out["V"].append(V)
        out["G1"].append(G1)
        out["T"].append(Tv)
    return out


def _per_layer(x: Any, L: int, name: str, default: float, positive: bool = False,
               signed: bool = False) -> np.ndarray:
    """One finite value per step l -> l+1 (layers 2..L), from a scalar or an (L-1)-sequence."""
    if x is None:
        return np.full(L - 1, float(default))
    a = real_array(x, name, finite=True)
    if a.ndim == 0:
        a = np.full(L - 1, float(a))
    if a.shape != (L - 1,):
        raise DomainError(f"{name} must be a number or one value per layer 2..L ({L - 1} values), "
                          f"got shape {a.shape}")
    if not signed and np.any(a < 0) or positive and np.any(a == 0):
        raise DomainError(f"{name} must be {'positive' if positive else 'non-negative'}, got {a}")
    return a


@public
def residual_history_flow(K1: Any, depth: int, activation: Any, *, c_w: Any = 1.0,
                          c_b: Any = 0.0, ratios: Any = 1.0, gamma: Any = 0.0, xi: Any = 1.0,
                          order: int | None = None) -> dict:
    r"""The exact :math:`O(1/n)` kernel sector :math:`K, V, G^{\{1\}}, T` of a residual MLP, one or two inputs.

    Iterates the history recursion of the module docstring (PDLT (B.4); the exact form of the
    book's (B.24), (B.26), which keep only the Mehler orders :math:`m\le2` of the covariance of
    one neuron's :math:`\sigma^2` at different layers).  ``mlp_flow(net, X)`` calls it for a
    residual ``net`` on one or two inputs, and for every pair of three or more
    (``closure="history"``, the default there).

    Parameters
    ----------
    K1 : float or array_like (1, 1) or (2, 2)
        First-layer kernel :math:`K^{(1)}` (PDLT (4.8)) of one or two inputs.
    depth : int
        Last layer :math:`L` (>= 1); layers ``1..L`` are returned.
    activation : str or Activation
    c_w, c_b, gamma, xi : float or sequence of ``depth - 1`` values
        :math:`C_W^{(\ell)}, C_b^{(\ell)}, \gamma^{(\ell)}, \xi^{(\ell)}` of layers
        :math:`\ell=2..L` (as :func:`~effth.pdlt.initialization_flow`).
    ratios : float or sequence of ``depth - 1`` values
        :math:`n_\ell/n_{\ell-1}`, :math:`\ell=1..L-1`.
    order : int, optional
        Hermite orders kept (default: where :math:`\rho^m<10^{-17}` for the largest history
        correlation :math:`\rho=\gamma\sqrt{K^{(\ell)}/K^{(\ell+1)}}`, at most 4000; two
        inputs: the total degree where :math:`\|R\|^m<10^{-14}`, at most 800).

    Returns
    -------
    dict
        ``{"K", "V", "G1", "T"}``: lists of arrays of shapes ``(P, P)``, ``(P, P, P, P)``,
        ``(P, P)``, ``(P, P, P)`` (``P`` = 1 or 2 inputs), indexed by ``layer - 1`` (as
        :func:`~effth.pdlt.initialization_flow`).

    Raises
    ------
    DomainError
        More than two inputs, a non-symmetric, non-positive-semi-definite or non-positive-diagonal
        kernel, non-finite or negative hyperparameters, a non-positive ``xi`` or width ratio,
        more than 10^6 layers.

    Warns
    -----
    AccuracyWarning
        When the largest :math:`\rho` needs more than 4000 Hermite orders (one input) or the
        largest :math:`\|R\|` more than 800 degrees (two inputs) (:math:`\gamma\to1`).

    Examples
    --------
    >>> f = residual_history_flow(1.0, 3, "relu", c_w=1.5, gamma=[0.5, 0.0])
    >>> round(float(f["V"][2].ravel()[0]), 6)
    5.936057
    """
    Ka = real_array(K1, "K1", finite=True)
    two = Ka.shape == (2, 2)
    if not two and (Ka.size != 1 or Ka.ndim not in (0, 2)):
        raise DomainError(f"residual_history_flow takes one or two inputs (K1 of shape (1, 1) or "
                          f"(2, 2)); got K1 of shape {Ka.shape}: for more inputs mlp_flow(net, X) "
                          "assembles the exact pair components (docs/residual.md)")
    if two and not np.allclose(Ka, Ka.T, rtol=1e-12, atol=0.0):
        raise DomainError(f"K1 must be symmetric, got {Ka.tolist()}")
    k1 = float(Ka.ravel()[0])
    if not 0 < k1 < math.inf:
        raise DomainError(f"K1 must be positive and finite, got {k1!r}")
    L = integer(depth, "depth", minimum=1)
    if L > _MAX_DEPTH:
        raise DomainError(f"depth={L} exceeds {_MAX_DEPTH} layers (the flow keeps every layer)")
    act = get_activation(activation)
    cw, cb = _per_layer(c_w, L, "c_w", 1.0), _per_layer(c_b, L, "c_b", 0.0)
    gm = _per_layer(gamma, L, "gamma", 0.0, signed=True)
    xs = _per_layer(xi, L, "xi", 1.0, positive=True)
    rt = _per_layer(ratios, L, "ratios", 1.0, positive=True)
    if two:
        if order is not None:
            order = integer(order, "order", minimum=4)
            if order > 2 * _MAX_ORDER2:
                raise DomainError(f"order={order} exceeds {2 * _MAX_ORDER2} Hermite degrees for "
                                  "two inputs")
        return _pair_flow(0.5 * (Ka + Ka.T), L, act, cw, cb, gm, xs, rt, order)
    # infinite-width kernels, and the history correlations rho that set the truncation
    mean_s = _Coefficients(act, 0)
    Ks = [k1]
    for j in range(L - 1):
        Ks.append(gm[j] ** 2 * Ks[-1] + xs[j] ** 2 * (cb[j] + cw[j] * float(mean_s(Ks[-1])[0])))
        if not 0 < Ks[-1] < math.inf:
            raise DomainError(f"the kernel is not positive and finite at layer {j + 2}: {Ks[-1]!r}")
    rho = [gm[j] * math.sqrt(Ks[j] / Ks[j + 1]) for j in range(L - 1)]   # signed
    M = _series_length(max(map(abs, rho), default=0.0), order, _TAIL, _MAX_ORDER,
                       "the history correlation rho = {r:.6g} needs {need} Hermite orders; "
                       "keeping {cap} (tail rho^M = {tail:.2g})", stacklevel=3)
    coeffs = _Coefficients(act, M)
    m = np.arange(M + 1, dtype=float)
    c, d = np.zeros(M + 1), np.zeros(M + 1)
    out = {"K": [np.array([[k1]])], "V": [np.zeros((1,) * 4)], "G1": [np.zeros((1, 1))],
           "T": [np.zeros((1,) * 3)]}
    for j in range(L - 1):                      # the step from layer j + 1 to layer j + 2
        K, Kn, x, r, C_w = Ks[j], Ks[j + 1], xs[j], rt[j], cw[j]
        s_all = coeffs(K)
        s, var_s = s_all[:-1], s_all[-1] - s_all[0] ** 2
        st = s.copy()
        st[0] = 0.0
        p = rho[j]
        R = p ** m
        u2 = x * x / (math.sqrt(2.0) * Kn)
        cs = c @ s
        Cs = c * s[2]
        Cs[2] += cs - c[2] * s[2]
        v = var_s + r * (2.0 * s[2] * cs - c[2] * s[2] ** 2)
        y = st + r * Cs
        w = R * y
        c_new = r * p * p * R * c + C_w * u2 * w
        c_new[2] += C_w * u2 * w[2] + C_w ** 2 * v * u2 * u2
        # D1^T y: (xi^2/2) sqrt(n(n-1)) rho^(n-2) y_(n-2) / K', n >= 2
        D1 = np.zeros(M + 1)
        D1[2:] = 0.5 * x * x * np.sqrt(m[2:] * (m[2:] - 1.0)) * p ** (m[2:] - 2.0) / Kn
        d_new = r * R * d
        d_new[2:] += C_w * D1[2:] * y[:-2]
        d_new[2] += C_w * r * u2 * (d @ s)
        d_new[4] += 0.5 * C_w ** 2 * v * x ** 4 * math.sqrt(6.0) / (2.0 * Kn * Kn)
        c, d = c_new, d_new
        V, G1, T = 2.0 * Kn * Kn * c[2], math.sqrt(2.0) * Kn * d[2], math.sqrt(2.0) * Kn ** 1.5 * c[1]
        if not all(map(math.isfinite, (V, G1, T))):
            raise DomainError(f"V, G1 or T overflows or is undefined at layer {j + 2}")
        out["K"].append(np.array([[Kn]]))
        out["V"].append(np.full((1,) * 4, V))
        out["G1"].append(np.array([[G1]]))
        out["T"].append(np.full((1,) * 3, T))
    return out
