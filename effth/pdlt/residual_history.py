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
    r"""The exact :math:`O(1/n)` kernel sector :math:`K, V, G^{\{1\}}, T` of a residual MLP, one input.

    Iterates the history recursion of the module docstring (PDLT (B.4); the exact form of the
    book's (B.24), (B.26), which keep only the Mehler orders :math:`m\le2` of the covariance of
    one neuron's :math:`\sigma^2` at different layers).  ``mlp_flow(net, X)`` calls it for a
    residual ``net`` with one input (``closure="history"``, the default there).

    Parameters
    ----------
    K1 : float or array_like (1, 1)
        First-layer kernel :math:`K^{(1)}` (PDLT (4.8)).
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
        correlation :math:`\rho=\gamma\sqrt{K^{(\ell)}/K^{(\ell+1)}}`, at most 4000).

    Returns
    -------
    dict
        ``{"K", "V", "G1", "T"}``: lists of arrays of shapes ``(1, 1)``, ``(1, 1, 1, 1)``,
        ``(1, 1)``, ``(1, 1, 1)``, indexed by ``layer - 1`` (as
        :func:`~effth.pdlt.initialization_flow`).

    Raises
    ------
    DomainError
        More than one input, a non-positive kernel, non-finite or negative hyperparameters, a
        non-positive ``xi`` or width ratio, more than 10^6 layers.

    Warns
    -----
    AccuracyWarning
        When the largest :math:`\rho` needs more than 4000 Hermite orders (:math:`\gamma\to1`).

    Examples
    --------
    >>> f = residual_history_flow(1.0, 3, "relu", c_w=1.5, gamma=[0.5, 0.0])
    >>> round(float(f["V"][2].ravel()[0]), 6)
    5.936057
    """
    Ka = real_array(K1, "K1", finite=True)
    if Ka.size != 1 or Ka.ndim not in (0, 2):
        raise DomainError(f"residual_history_flow is implemented for one input (K1 of shape (1, 1)); "
                          f"got K1 of shape {Ka.shape}: for several inputs use mlp_flow(..., "
                          "closure='cumulant') (the truncated PDLT (B.24))")
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
    # infinite-width kernels, and the history correlations rho that set the truncation
    mean_s = _Coefficients(act, 0)
    Ks = [k1]
    for j in range(L - 1):
        Ks.append(gm[j] ** 2 * Ks[-1] + xs[j] ** 2 * (cb[j] + cw[j] * float(mean_s(Ks[-1])[0])))
        if not 0 < Ks[-1] < math.inf:
            raise DomainError(f"the kernel is not positive and finite at layer {j + 2}: {Ks[-1]!r}")
    rho = [gm[j] * math.sqrt(Ks[j] / Ks[j + 1]) for j in range(L - 1)]   # signed
    if order is None:
        rmax = max(map(abs, rho), default=0.0)
        need = 8 if rmax == 0 else int(math.ceil(math.log(_TAIL) / math.log(rmax))) + 8
        M = max(8, min(need, _MAX_ORDER))
        if need > _MAX_ORDER:
            warnings.warn(f"the history correlation rho = {rmax:.6g} needs {need} Hermite orders; "
                          f"keeping {_MAX_ORDER} (tail rho^M = {rmax ** _MAX_ORDER:.2g})",
                          AccuracyWarning, stacklevel=2)
    else:
        M = integer(order, "order", minimum=4)
        if M > 5 * _MAX_ORDER:
            raise DomainError(f"order={M} exceeds {5 * _MAX_ORDER} Hermite orders")
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
