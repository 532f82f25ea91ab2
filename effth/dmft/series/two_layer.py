r"""Two-layer (``L = 1``) DMFT of any activation to any order in :math:`\gamma_0`, field by field.

The single-site process of one hidden layer on the discrete-GD grid (Bordelon & Pehlevan (2022), eqs. (23), (33), (66)-(67), §3.2) is

.. math::
   h_\mu(t_i) = u_\mu + \gamma_0\eta\sum_{j<i}\sum_\alpha K^x_{\mu\alpha}\Delta_\alpha(t_j)\dot\phi(h_\alpha(t_j))z(t_j),
   \qquad z(t_i) = r + \gamma_0\eta\sum_{j<i}\sum_\alpha\Delta_\alpha(t_j)\phi(h_\alpha(t_j)),

with :math:`u\sim\mathcal N(0,K^x)`, :math:`r\sim\mathcal N(0,1)` (the lazy process) and
:math:`f_\mu(t_i)=\gamma_0^{-1}\langle z(t_i)\phi(h_\mu(t_i))\rangle`, :math:`\Delta=y-f`.
Expanding :math:`h=u+\sum_{n\ge1}\gamma_0^nh^{(n)}`, :math:`z=r+\sum_n\gamma_0^nz^{(n)}` (Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4)
and Taylor-expanding :math:`\phi(u+\delta)=\sum_k\phi^{(k)}(u)\delta^k/k!` makes every field
coefficient a polynomial in :math:`r` and in :math:`\phi^{(k)}(u_\alpha)` with time functions built
from :math:`\Delta^0` (and, from :math:`\gamma_0^3` on, :math:`\Delta_2,\dots`).  Every kernel
coefficient is then a Gaussian expectation over the lazy process :math:`(u,r)`.

Here the expansion is carried out *per point* of a tensor rule for the lazy Gaussian
:math:`(u,r)` (``rank K^x + 1`` dimensions; :func:`lazy_rule_kind`: the truncated trapezoid rule in
:math:`u` for non-polynomial activations from ``TRAPEZOID_FROM`` nodes on, Gauss-Hermite otherwise,
and always Gauss-Hermite in :math:`r`, in which every coefficient is a polynomial), in truncated
power-series arithmetic in
:math:`\gamma_0` (forward-mode Taylor arithmetic), and the averages are the rule's weighted sums:
the order-:math:`n` kernel coefficient is the rule's value of the Gaussian atoms of order
:math:`n`.  Odd orders of every kernel vanish by :math:`r\to-r` symmetry (exactly on the symmetric
rule, up to rounding).  This module does not import the solver (:mod:`effth.dmft.solvers.two_layer`).
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import numpy as np

from effth.activations import get_activation
from effth.errors import DomainError
from effth.numerics._rules import covariance_root
from effth.dmft.series.arith import TruncatedSeries as S
from effth.dmft.series.arith import compose
from effth.dmft.solvers.lazy import TRAPEZOID_FROM, gauss_hermite_lazy_nodes, lazy_nodes, lazy_rule_kind  # noqa: F401

__all__ = ["TwoLayerSeriesArrays", "TRAPEZOID_FROM", "gauss_hermite_lazy_nodes", "lazy_rule_kind",
           "lazy_nodes", "two_layer_series_arrays"]


@public
@dataclass
class TwoLayerSeriesArrays:
    """Taylor coefficients in ``gamma0`` (odd ones included, for the parity check).

    Attributes (order axis first, ``M`` = truncation order in ``gamma0``)
    ----------
    phi : ndarray, shape (M+1, T, n, n)
        Equal-time feature kernel ``Phi(t_i, t_i)``.
    g : ndarray, shape (M+1, T, n, n)
        Equal-time gradient kernel ``G(t_i, t_i)``.
    f : ndarray, shape (M+1, T, n)
        Predictions.
    delta : ndarray, shape (M+1, T, P)
        Error signal.
    ntk : ndarray, shape (M+1, T, n, n)
        ``K(t_i, t_i) = Phi + G * K^x``.
    """

    phi: np.ndarray
    g: np.ndarray
    f: np.ndarray
    delta: np.ndarray
    ntk: np.ndarray


def _mean_outer(a: S, b: S, w: np.ndarray) -> np.ndarray:
    """Series coefficients of ``<a_mu b_nu>`` for per-node series ``a, b`` of shape ``(S, n)``."""
    M = min(a.order, b.order)
    out = np.zeros((M + 1, a.shape[1], b.shape[1]))
    for k in range(M + 1):
        for j in range(k + 1):
            out[k] += np.einsum("s,sm,sn->mn", w, a.c[j], b.c[k - j], optimize=True)
    return out


@public
def two_layer_series_arrays(kx, y, *, activation: str, eta: float, steps: int, order: int,
                            nodes: int | None = None, closure: str = "exact",
                            rule: str = "auto") -> TwoLayerSeriesArrays:
    r"""Taylor coefficients up to ``gamma0**order`` (``order`` even) of the two-layer discrete DMFT.

    Parameters
    ----------
    kx : ndarray, shape (n, n)
        Input kernel (training points first).
    y : ndarray, shape (P,)
        Targets.
    activation : str
        Registry name; needs derivatives up to ``order + 1``.
    eta, steps : float, int
        GD grid.
    order : int
        Highest power of ``gamma0`` kept in the kernels and predictions.
    nodes : int, optional
        Nodes per dimension of the lazy ``u`` (``rank K^x`` dimensions).  Default: 100 for
        ``rank K^x <= 2``, else the most with ``nodes**rank * r_nodes <= 4e5`` (46 at rank 3).
        The coordinate ``r`` always has ``order // 2 + 3`` Gauss-Hermite nodes, exact: every
        coefficient up to ``gamma0**order`` is a polynomial of degree ``<= order + 3`` in ``r``.
        Accuracy of the default (tanh, GELU, erf; two points, ``K^x = [[1, .5], [.5, 1]]``,
        ``eta = 0.1``, ``T = 30``; against 160 nodes): the ``gamma0^2`` and ``gamma0^4``
        coefficients of ``f``, ``Phi``, ``G`` within 3e-13 of their largest entry (the former
        default, 24 Gauss-Hermite nodes: tanh 2e-2 at ``gamma0^2``, 0.4 at ``gamma0^4``).
    rule : {'auto', 'hermite', 'trapezoid'}
        The rule in ``u`` (:func:`lazy_rule_kind`): ``'auto'`` is Gauss-Hermite for polynomial
        activations or fewer than ``TRAPEZOID_FROM`` nodes, else the truncated trapezoid rule.
    closure : {'exact', 'ntk'}
        Predictions as the single-site average ``gamma0^-1 <z phi(h)>`` or by NTK-Euler,
        ``f(t_{i+1}) = f(t_i) + eta K(t_i, t_i) Delta(t_i)`` (in truncated series).

    Returns
    -------
    TwoLayerSeriesArrays
    """
    act = get_activation(activation)
    if act.kinks:                        # sigma'' has delta functions there: the pointwise
        raise DomainError(                # expansion below would drop them (wrong gamma0^2 sign)
            f"activation={act.name!r} has kinks at z = {list(act.kinks)}: the gamma0-expansion "
            "needs its derivatives pointwise, so only smooth activations are accepted here")
    kx = np.asarray(kx, dtype=float)
    y = np.asarray(y, dtype=float)
    n, P, T = kx.shape[0], y.size, int(steps)
    M = int(order) + 1                        # <z phi(h)> is needed one order higher than f
    r_nodes = int(order) // 2 + 3
    if nodes is None:
        k = covariance_root(kx).shape[1]
        nodes = 100 if k <= 2 else max(2, min(100, int((4e5 / r_nodes) ** (1.0 / k) + 1e-9)))
    kind = lazy_rule_kind(act, nodes, rule)
    u, r, w = lazy_nodes(kx, nodes, kind=kind, extra_nodes=r_nodes)
    r = r[:, 0]
    Sn = w.size
    derivs = [act.numpy(k)(u) for k in range(M + 2)]          # phi^(k)(u), (S, n)
    kx_tr = kx[:, :P]
    a = S.zeros((Sn, P), M)                   # sum_{j<i} Delta(t_j) g(t_j)
    b = S.zeros((Sn,), M)                     # sum_{j<i} Delta(t_j) . phi(h(t_j))
    phi_k = np.zeros((M, T, n, n))
    g_k = np.zeros((M, T, n, n))
    f_k = np.zeros((M, T, n))
    d_k = np.zeros((M, T, P))
    if closure not in ("exact", "ntk"):
        raise DomainError(f"closure={closure!r} must be 'exact' or 'ntk'")
    f_ntk = S.zeros((n,), M - 1)
    for i in range(T):
        dh = (a @ kx_tr.T).times_x() * eta                    # h - u  (S, n)
        zs = (b * eta).times_x() + S.constant(r, M)          # z      (S,)
        ph = compose(derivs, dh)
        dph = compose(derivs[1:], dh)
        g = dph * zs.reshape(Sn, 1)
        phi_k[:, i] = _mean_outer(ph, ph, w)[:M]
        g_k[:, i] = _mean_outer(g, g, w)[:M]
        if closure == "exact":
            zphi = (ph * zs.reshape(Sn, 1))
            zphi_mean = np.einsum("s,ksn->kn", w, zphi.c)     # <z phi(h)>, order 0 vanishes
            f_ser = S(zphi_mean).divide_x()                  # f = gamma0^-1 <z phi>, orders 0..M-1
        else:
            f_ser = f_ntk
        f_k[:, i] = f_ser.c
        dl = S.constant(y, M - 1) - f_ser[:P]
        d_k[:, i] = dl.c
        if closure == "ntk":
            ntk_i = S(phi_k[:, i] + g_k[:, i] * kx[None])
            f_ntk = f_ntk + (ntk_i[:, :P] @ dl) * eta
        dl_full = S(np.concatenate([dl.c, np.zeros((1, P))]))  # pad to order M (top unused)
        a = a + g[:, :P] * dl_full.reshape(1, P)
        b = b + (ph[:, :P] * dl_full.reshape(1, P)).sum(axis=1)
    ntk = phi_k + g_k * kx[None, None]
    K = int(order)
    return TwoLayerSeriesArrays(phi=phi_k[: K + 1], g=g_k[: K + 1], f=f_k[: K + 1],
                                delta=d_k[: K + 1], ntk=ntk[: K + 1])
