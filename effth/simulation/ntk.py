r"""Empirical NTK, dNTK and ddNTKs of finite-width MLPs, and their ensemble statistics.

The ground truth for the NTK-hierarchy theory of PDLT ch. 8-11 and ∞.  NumPy only; like
:mod:`effth.simulation.ensemble` this module never imports effth's theory, algebra, numerics or
codegen (only ``arch``, ``activations``, ``errors``, ``_threads`` and ``_progress``).

Every activation of the registry is accepted (a name, an alias, an
:class:`~effth.activations.Activation`, a SymPy expression in ``z``); its derivatives come from
:meth:`~effth.activations.Activation.numpy`.  For kinked activations one network's derivatives
are the almost-everywhere ones (exact at almost every parameter point), but ensemble statistics
whose book definition needs a Dirac part of :math:`\sigma^{(k)}` are refused
(:func:`simulate_ntk_ensemble`).

Conventions (PDLT, Roberts, Yaida & Hanin).  Network, PDLT (2.5) and (2.19)-(2.20):
:math:`z^{(1)}_{i;\delta}=b^{(1)}_i+\sum_k W^{(1)}_{ik}x_{k;\delta}`,
:math:`z^{(\ell+1)}_{i;\delta}=b^{(\ell+1)}_i+\sum_j W^{(\ell+1)}_{ij}\sigma(z^{(\ell)}_{j;\delta})`,
:math:`b\sim\mathcal N(0,C_b^{(\ell)})`, :math:`W^{(\ell)}\sim\mathcal N(0,C_W^{(\ell)}/n_{\ell-1})`.
Learning-rate tensor (8.6): diagonal, :math:`\lambda_b^{(\ell)}` for every bias of layer
:math:`\ell` and :math:`\lambda_W^{(\ell)}/n_{\ell-1}` for every weight of layer :math:`\ell`.

Per-network objects, all of the output layer :math:`L` (``v_{k;\delta}=\lambda\nabla_\theta
z_{k;\delta}`` is an "NTK direction"):

* NTK (7.17)/(8.5): :math:`\hat H_{i_1i_2;\delta_1\delta_2}=\sum_{\mu\nu}\lambda_{\mu\nu}
  \partial_\mu z_{i_1;\delta_1}\partial_\nu z_{i_2;\delta_2}`;
* dNTK (11.8): :math:`\widehat{dH}_{i_0i_1i_2;\delta_0\delta_1\delta_2}=D^2z_{i_0;\delta_0}
  [v_{i_1;\delta_1},v_{i_2;\delta_2}]`;
* first ddNTK (∞.5): :math:`\widehat{dd_IH}_{i_0i_1i_2i_3}=D^3z_{i_0;\delta_0}[v_1,v_2,v_3]`;
* second ddNTK (∞.7): :math:`\widehat{dd_{II}H}_{i_1i_2i_3i_4}=\langle\nabla^2z_{i_1;\delta_1}
  v_{i_3;\delta_3},\lambda\,\nabla^2z_{i_2;\delta_2}v_{i_4;\delta_4}\rangle`.

All derivatives are exact (no finite differences): backpropagation (8.16)–(8.18) gives
:math:`g^{(\ell)}_{i;\delta}=dz^{(L)}_{i;\delta}/dz^{(\ell)}_{\cdot;\delta}`; forward-mode
tangents along the rank-one NTK directions (the mixed-layer NTK
:math:`\sum\lambda\,\partial z^{(\ell)}\partial z^{(L)}`) and their second-order tangents are
propagated layer by layer; the last order is closed by a backward contraction with
:math:`g`; the ddNTK-II uses forward-over-reverse Hessian-vector products.  Everything is batched
over a leading axis of independent networks.  See ``docs/ntk_simulation.md``.
"""

from __future__ import annotations

from effth._signature import public

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .._validate import check_networks
from .._threads import blas_threads
from .._progress import progress_bar
from ..activations import get_activation
from effth.arch import MLP
from effth.arch._common import per_layer
from ..errors import DomainError
from .._display import depth_text, html_table, short
from .._results import WeightLayers
from ._inputs import as_generator, check_ensemble, check_inputs
from ._mlp import _ns
from ._backend import resolve as _resolve_backend
from ._jackknife import group_units, jackknife_error

__all__ = [
    "NTK_ESTIMATORS",
    "NTKEnsembleStatistics",
    "NTKResult",
    "empirical_ntk",
    "init_params",
    "simulate_ntk_ensemble",
]

#: Target number of float64 elements in the largest per-chunk temporary.
_CHUNK_ELEMENTS = 1 << 22


# ----------------------------------------------------------------------------- helpers
def _resolve_activation(activation: Any, argname: str = "activation"):
    """An :class:`~effth.activations.Activation` from a name, alias, Activation, SymPy
    expression in ``z`` or :class:`~effth.arch.MLP` (whose activation is used)."""
    if isinstance(activation, MLP):
        return activation.act
    try:
        return get_activation(activation)
    except DomainError as exc:
        raise type(exc)(f"{argname}: {exc}") from None


def _activation_derivs(activation: Any, order: int) -> tuple[Callable, ...]:
    """``(sigma, sigma', ..., sigma^(order))`` as float64 NumPy callables.

    Kinked activations give the regular part of each derivative (its almost-everywhere value),
    which is the exact derivative of one network at almost every parameter point.
    """
    if isinstance(activation, (tuple, list)):
        fs = tuple(activation)
        if len(fs) < order + 1 or not all(callable(f) for f in fs[:order + 1]):
            raise DomainError(f"activation as a sequence needs {order + 1} callables "
                              "(sigma and its derivatives)")
        return fs[:order + 1]
    act = _resolve_activation(activation)
    return tuple(act.numpy(k) for k in range(order + 1))


def _dirac_free_dntk(act, n_inputs: int, order: int, ddntk_II: bool) -> bool:
    r"""Whether the dNTK estimates of a kinked activation need no Dirac part: a single input, the
    piecewise-linear family (kink at 0, :math:`\sigma(0)=0`), ``order == 2`` without ddNTK-II.

    There every :math:`\sigma''=(a_+-a_-)\delta(z)` of :math:`\mathbb E[\widehat{dH}\,z]` meets a
    :math:`\sigma` of the same neuron and sample (the only pairings of the output weights,
    PDLT (11.67)-(11.71): :math:`\langle\sigma''\sigma\rangle=\langle\sigma''\sigma'\sigma'
    \sigma\rangle=0`), so the almost-everywhere derivative estimates the book's P and Q to
    :math:`O(1/n)` (the order of the estimators' own finite-width corrections)."""
    return (n_inputs == 1 and order == 2 and not ddntk_II
            and getattr(act, "family", None) == "piecewise_linear"
            and tuple(getattr(act, "kinks", ())) in ((), (0.0,)))


def _check_smooth_enough(act, order: int, ddntk_II: bool) -> None:
    r"""Reject ensemble statistics whose book definition needs a Dirac part of a derivative.

    The NTK statistics need :math:`\sigma'` (PDLT (8.12)), the dNTK ones :math:`\sigma''`
    (PDLT (11.24)), ddNTK-I :math:`\sigma'''` and ddNTK-II :math:`\sigma''` (PDLT (∞.169)-(∞.170)).
    Where such a derivative is a distribution (ReLU: :math:`\sigma''=\delta`, PDLT (∞.40); step:
    :math:`\sigma'=\delta`), the almost-everywhere derivative of each network misses the Dirac
    contributions to the expectations, so the ensemble average would not estimate the book's
    tensor.
    """
    need = {1: "the NTK statistics"}
    if order >= 2:
        need[2] = "the dNTK statistics P, Q (order >= 2)"
    elif ddntk_II:
        need[2] = "the ddNTK-II statistics S, T, U (ddntk_II=True)"
    if order >= 3:
        need[3] = "the ddNTK-I statistic R (order=3)"
    for k in sorted(need):
        sing = act.singular_part(k)
        if sing:
            kinks = sorted({float(c) for c, _, _ in sing})
            hint = ("pass order=1 (NTK statistics only) or use a smooth activation such as "
                    "'gelu' or 'swish'" if k >= 2 else
                    "use an activation whose first derivative has no jump")
            raise DomainError(
                f"activation {act!r}: its derivative of order {k} has a Dirac part at z = "
                f"{kinks} (a distribution, cf. PDLT (∞.40)), which {need[k]} need; the "
                f"almost-everywhere derivative of a simulated network misses it, so the ensemble "
                f"would not estimate the book's tensor. Fix: {hint}.")


@dataclass
class _Net:
    """Forward/backward state of a batch of networks (internal)."""

    Ws: list            # Ws[l] (B, n_l, n_{l-1}), l = 1..L (index 0 unused)
    s: list             # s[l] (B, N, n_l) activations, s[0] = inputs
    d: dict             # d[k][l] (B, N, n_l): sigma^(k)(z^(l)), l = 1..L-1
    zL: np.ndarray      # (B, N, n_L)
    g: list             # g[l] (B, M, n_l) = dz^(L)_a / dz^(l)_{., delta_a}
    h: list             # h[l] (B, M, n_l) = W^(l+1)^T g^(l+1)
    ssd: list           # ssd[l] (B, N, N) = s^(l)_d . s^(l)_e
    gam: list           # gam[l] (B, M, M) = g^(l)_a . g^(l)_b
    dd: np.ndarray      # (M,) input of direction a
    do: np.ndarray      # (M,) output neuron of direction a
    xi: list | None = None   # xi[l], l = 1..L: residual branch gains (PDLT (B.4)); None: plain
    finite: list | None = None   # traced arrays (JAX): per layer 1..L, preactivations finite


def _forward_backward(Ws, bs, X, fs, outputs, res=None) -> _Net:
    r"""Forward and backward pass; ``res = (gamma, xi)`` (per weight layer, index 0 unused) makes
    it the residual MLP of PDLT (B.4): :math:`z^{(\ell+1)}=\xi^{(\ell+1)}[b+W\sigma(z^{(\ell)})]
    +\gamma^{(\ell+1)}z^{(\ell)}`, so :math:`g^{(\ell)}=\xi^{(\ell+1)}(g^{(\ell+1)}W^{(\ell+1)})
    \sigma'(z^{(\ell)})+\gamma^{(\ell+1)}g^{(\ell+1)}`."""
    xp = _ns(Ws[1])
    L = len(Ws) - 1
    gam_, xi_ = res if res is not None else ([0.0] * (L + 1), [1.0] * (L + 1))
    B = Ws[1].shape[0]
    N = X.shape[0]
    s = [xp.broadcast_to(X, (B,) + X.shape)]
    d = {k: [None] * L for k in range(1, len(fs))}
    z = xp.einsum("bkj,dj->bdk", Ws[1], X) + bs[1][:, None, :]
    if xi_[1] != 1.0:
        z = xi_[1] * z
    flags = None if xp is np else []        # under jax.jit: flags for the caller, no raise

    def check(z, layer):
        if flags is not None:
            flags.append(xp.isfinite(z).all())
        elif not np.isfinite(z).all():
            raise DomainError(f"non-finite preactivations in layer {layer}")
    for ell in range(1, L):
        check(z, ell)
        s.append(fs[0](z))
        for k, lst in d.items():
            lst[ell] = fs[k](z)
        branch = xp.matmul(s[ell], xp.swapaxes(Ws[ell + 1], 1, 2)) + bs[ell + 1][:, None, :]
        z = (branch if xi_[ell + 1] == 1.0 else xi_[ell + 1] * branch) + (gam_[ell + 1] * z if gam_[ell + 1] else 0.0)
    check(z, L)
    m = len(outputs)
    dd = np.tile(np.arange(N), m)
    do = np.repeat(np.asarray(outputs, dtype=np.intp), N)
    M = dd.size
    nL = Ws[L].shape[1]
    g = [None] * (L + 1)
    h = [None] * (L + 1)
    if xp is np:
        gL = np.zeros((B, M, nL))
        gL[:, np.arange(M), do] = 1.0
    else:
        onehot = np.zeros((M, nL))
        onehot[np.arange(M), do] = 1.0
        gL = xp.broadcast_to(xp.asarray(onehot), (B, M, nL))
    g[L] = gL
    for ell in range(L - 1, 0, -1):
        h[ell] = xp.matmul(g[ell + 1], Ws[ell + 1])
        g[ell] = h[ell] * d[1][ell][:, dd, :]
        if res is not None:
            g[ell] = xi_[ell + 1] * g[ell] + (gam_[ell + 1] * g[ell + 1] if gam_[ell + 1] else 0.0)
    ssd = [xp.matmul(sl, xp.swapaxes(sl, 1, 2)) for sl in s]
    gam = [None] + [xp.matmul(g[ell], xp.swapaxes(g[ell], 1, 2)) for ell in range(1, L + 1)]
    return _Net(Ws=Ws, s=s, d=d, zL=z, g=g, h=h, ssd=ssd, gam=gam, dd=dd, do=do,
                xi=None if res is None else list(xi_), finite=flags)


def _ntk(net: _Net, lb, lw, widths) -> np.ndarray:
    """H[b, a1, a2] over directions (8.7)."""
    L = len(net.Ws) - 1
    dd = net.dd
    H = 0.0
    for ell in range(1, L + 1):
        coef = lb[ell - 1] + lw[ell - 1] / widths[ell - 1] * net.ssd[ell - 1][:, dd[:, None], dd[None, :]]
        if net.xi is not None:          # d z / d theta of layer l carries the branch gain xi^(l)
            coef = net.xi[ell] ** 2 * coef
        H = H + net.gam[ell] * coef
    return H


def _tangents(net: _Net, lb, lw, widths, fs) -> tuple[list, list, list]:
    """First-order tangents Z1[l] (B, M, N, n_l) = d z^(l)_{.;delta0} along v_a, l = 1..L.

    Also S1[l] = sigma'(z^(l)) Z1[l] (activation tangents, S1[0] = 0) and
    X1[l] (B, N, M, N) = s^(l)_delta . S1[l]_{a; delta0}.
    """
    xp = _ns(net.Ws[1])
    L = len(net.Ws) - 1
    dd = net.dd
    B, M, _ = net.g[1].shape
    N = net.s[0].shape[1]
    Z1 = [None] * (L + 1)
    S1 = [None] * (L + 1)
    X1 = [None] * (L + 1)
    coef = lb[0] + lw[0] / widths[0] * net.ssd[0][:, dd, :]              # (B, M, N)
    Z1[1] = net.g[1][:, :, None, :] * coef[..., None]
    for ell in range(1, L):
        S1[ell] = net.d[1][ell][:, None, :, :] * Z1[ell]
        # X1[b, d, a, z] = s_{d} . S1_{a; z}
        X1[ell] = xp.moveaxis(xp.matmul(S1[ell].reshape(B, M * N, -1),
                                        xp.swapaxes(net.s[ell], 1, 2)).reshape(B, M, N, N), 3, 1)
        coef = lb[ell] + lw[ell] / widths[ell] * net.ssd[ell][:, dd, :]
        n_next = net.Ws[ell + 1].shape[1]
        prop = xp.matmul(S1[ell].reshape(B, M * N, -1), xp.swapaxes(net.Ws[ell + 1], 1, 2))
        Z1[ell + 1] = net.g[ell + 1][:, :, None, :] * coef[..., None] + prop.reshape(B, M, N, n_next)
    return Z1, S1, X1


def _gather_delta0(A: np.ndarray, dd: np.ndarray, axis_delta: int) -> np.ndarray:
    """Select, for every direction c0, the input delta(c0) on ``axis_delta``; the new axis
    (c0, size M) replaces it."""
    xp = _ns(A)
    return xp.take(A, dd, axis=axis_delta)


def _dntk(net: _Net, Z1, X1, lw, widths) -> np.ndarray:
    """dH[b, c0, a1, a2] (11.8), by the backward closing of the second-order tangent."""
    xp = _ns(net.Ws[1])
    L = len(net.Ws) - 1
    dd = net.dd
    B, M, _ = net.g[1].shape
    out = xp.zeros((B, M, M, M))
    for ell in range(1, L):
        c = lw[ell] / widths[ell]
        # X1g[b, a, a', c0] = s_{delta_a} . S1_{a'; delta(c0)}
        X1g = _gather_delta0(X1[ell][:, dd, :, :], dd, 3)
        t1 = net.gam[ell + 1][:, :, :, None] * xp.transpose(X1g, (0, 3, 1, 2))   # [c0,a,a']
        out += c * (t1 + xp.swapaxes(t1, 2, 3))
        hd2 = net.h[ell] * net.d[2][ell][:, dd, :]                               # (B, c0, n)
        Zc = xp.moveaxis(_gather_delta0(Z1[ell], dd, 2), 2, 1)                   # (B, c0, a, n)
        out += xp.matmul(hd2[:, :, None, :] * Zc, xp.swapaxes(Zc, 2, 3))
    return out


def _second_tangents(net: _Net, Z1, S1, X1, lw, widths) -> tuple[list, list]:
    """Z2[l] (B, M, M, N, n_l): second-order tangents along (v_a, v_a'), l = 1..L-1, and
    S2[l] = sigma'' Z1_a Z1_a' + sigma' Z2 (activation second tangents)."""
    xp = _ns(net.Ws[1])
    L = len(net.Ws) - 1
    dd = net.dd
    B, M, _ = net.g[1].shape
    N = net.s[0].shape[1]
    Z2 = [None] * L
    S2 = [None] * L
    for ell in range(1, L):
        d2 = net.d[2][ell][:, None, None, :, :]
        S = d2 * Z1[ell][:, :, None] * Z1[ell][:, None, :]
        if Z2[ell] is not None:
            S = S + net.d[1][ell][:, None, None, :, :] * Z2[ell]
        S2[ell] = S
        if ell + 1 < L:
            c = lw[ell] / widths[ell]
            n_next = net.Ws[ell + 1].shape[1]
            g1 = net.g[ell + 1]                                         # (B, M, n')
            X1a = X1[ell][:, dd, :, :]                                  # (B, a, a', delta0)
            src = c * (g1[:, :, None, None, :] * X1a[..., None]
                       + g1[:, None, :, None, :] * xp.swapaxes(X1a, 1, 2)[..., None])
            prop = xp.matmul(S.reshape(B, M * M * N, -1), xp.swapaxes(net.Ws[ell + 1], 1, 2))
            Z2[ell + 1] = src + prop.reshape(B, M, M, N, n_next)
    return Z2, S2


def _ddntk_I(net: _Net, Z1, Z2, S2, lw, widths) -> np.ndarray:
    """ddIH[b, c0, a1, a2, a3] (∞.5), backward closing of the third-order tangent."""
    xp = _ns(net.Ws[1])
    L = len(net.Ws) - 1
    dd = net.dd
    B, M, _ = net.g[1].shape
    N = net.s[0].shape[1]
    out = xp.zeros((B, M, M, M, M))
    for ell in range(1, L):
        c = lw[ell] / widths[ell]
        # Y[b, delta, a', a'', delta0] = s_delta . S2_{a'a''; delta0}
        Y = xp.matmul(S2[ell].reshape(B, M * M * N, -1), xp.swapaxes(net.s[ell], 1, 2))
        Y = xp.moveaxis(Y.reshape(B, M, M, N, N), 4, 1)
        Yg = _gather_delta0(Y[:, dd], dd, 4)                 # (B, a, a', a'', c0)
        Yg = xp.moveaxis(Yg, 4, 1)                           # (B, c0, a, a', a'')
        gam = net.gam[ell + 1][:, :, :, None, None]          # [c0, a]
        t = gam * Yg                                         # Gamma[c0,a] Y[d_a, a', a'', d0]
        out += c * (t + xp.transpose(t, (0, 1, 3, 2, 4)) + xp.transpose(t, (0, 1, 3, 4, 2)))
        Zc = xp.moveaxis(_gather_delta0(Z1[ell], dd, 2), 2, 1)          # (B, c0, a, n)
        n_l = Zc.shape[-1]
        hd3 = net.h[ell] * net.d[3][ell][:, dd, :]
        AD = (hd3[:, :, None, None, :] * Zc[:, :, :, None, :] * Zc[:, :, None, :, :])
        out += xp.matmul(AD.reshape(B, M, M * M, n_l),
                         xp.swapaxes(Zc, 2, 3)).reshape(B, M, M, M, M)
        if Z2[ell] is not None:
            hd2 = net.h[ell] * net.d[2][ell][:, dd, :]
            Z2c = xp.moveaxis(_gather_delta0(Z2[ell], dd, 3), 3, 1)     # (B, c0, a', a'', n)
            T = xp.matmul(hd2[:, :, None, :] * Zc,
                          xp.swapaxes(Z2c.reshape(B, M, M * M, n_l), 2, 3)).reshape(B, M, M, M, M)
            out += T + xp.transpose(T, (0, 1, 3, 2, 4)) + xp.transpose(T, (0, 1, 3, 4, 2))
    return out


def _ddntk_II(net: _Net, Z1, S1, X1, lb, lw, widths) -> np.ndarray:
    """ddIIH[b, r1, r2, c3, c4] (∞.7) as inner products of Hessian-vector products."""
    xp = _ns(net.Ws[1])
    L = len(net.Ws) - 1
    dd = net.dd
    B, M, _ = net.g[1].shape
    N = net.s[0].shape[1]
    # gdot[l] (B, r, c, n_l): tangent of g^(l)_r along v_c.
    gdot = [None] * (L + 1)
    gdot[L] = xp.zeros((B, M, M, net.Ws[L].shape[1]))
    for ell in range(L - 1, 0, -1):
        c = lw[ell] / widths[ell]
        n_l = net.Ws[ell + 1].shape[2]
        hdot = (c * net.gam[ell + 1][..., None] * net.s[ell][:, dd, :][:, None, :, :]
                + xp.matmul(gdot[ell + 1].reshape(B, M * M, -1), net.Ws[ell + 1]).reshape(B, M, M, n_l))
        Z1r = xp.swapaxes(_gather_delta0(Z1[ell], dd, 2), 1, 2)          # (B, r, c, n)
        gdot[ell] = (net.d[2][ell][:, dd, :][:, :, None, :] * Z1r * net.h[ell][:, :, None, :]
                     + net.d[1][ell][:, dd, :][:, :, None, :] * hdot)
    out = xp.zeros((B, M, M, M, M))
    for ell in range(1, L + 1):
        gd = gdot[ell].reshape(B, M * M, -1)
        GG = xp.matmul(gd, xp.swapaxes(gd, 1, 2)).reshape(B, M, M, M, M)   # [r1,c3,r2,c4]
        GG = xp.transpose(GG, (0, 1, 3, 2, 4))                              # [r1,r2,c3,c4]
        ssd = net.ssd[ell - 1][:, dd[:, None], dd[None, :]]                 # [r1, r2]
        term = (lb[ell - 1] + lw[ell - 1] / widths[ell - 1] * ssd[..., None, None]) * GG
        if ell >= 2:
            cw = lw[ell - 1] / widths[ell - 1]
            # Gg[r1, c3, r2] = gdot[r1,c3] . g[r2]
            Gg = xp.matmul(gd, xp.swapaxes(net.g[ell], 1, 2)).reshape(B, M, M, M)
            X1p = X1[ell - 1]                                               # (B, N, M, N)
            # X1[delta_r1, c4, delta_r2] -> [r1, c4, r2]
            Xr = X1p[:, dd][:, :, :, dd]
            # (gdot[r1,c3].g[r2]) * X1[d_r1, c4, d_r2] -> [r1,r2,c3,c4]
            t2 = xp.einsum("bxcy,bxdy->bxycd", Gg, Xr)
            # (g[r1].gdot[r2,c4]) * X1[d_r2, c3, d_r1]
            t3 = xp.einsum("bydx,bycx->bxycd", Gg, Xr)
            S1f = S1[ell - 1].reshape(B, M * N, -1)
            SS = xp.matmul(S1f, xp.swapaxes(S1f, 1, 2)).reshape(B, M, N, M, N)
            SSg = SS[:, :, dd][:, :, :, :, dd]                              # [c3, r1, c4, r2]
            t4 = net.gam[ell][:, :, :, None, None] * xp.transpose(SSg, (0, 2, 4, 1, 3))
            term = term + cw * (t2 + t3 + t4)
        out += term
    return out


# ----------------------------------------------------------------------------- public API
@public
@dataclass(frozen=True)
class NTKResult:
    r"""Empirical NTK hierarchy of one network (or a batch, with a leading axis).

    Neural indices run over the selected ``outputs`` (positions ``0..m-1``), sample indices over
    the selected inputs.  Index layout follows the book's subscripts, neurons first:

    Attributes
    ----------
    outputs : tuple of int
        Output neurons selected.
    z : ndarray (m, N)
        Output preactivations :math:`z^{(L)}_{i;\delta}`.
    H : ndarray (m, m, N, N)
        ``H[i1, i2, d1, d2]`` :math:`=\hat H_{i_1i_2;\delta_1\delta_2}` (8.5).
    dH : ndarray (m, m, m, N, N, N) or None
        ``dH[i0, i1, i2, d0, d1, d2]`` :math:`=\widehat{dH}_{i_0i_1i_2;\delta_0\delta_1\delta_2}` (11.8).
    ddIH : ndarray (m,)*4 + (N,)*4 or None
        :math:`\widehat{dd_IH}_{i_0i_1i_2i_3;\delta_0\delta_1\delta_2\delta_3}` (∞.5).
    ddIIH : ndarray (m,)*4 + (N,)*4 or None
        :math:`\widehat{dd_{II}H}_{i_1i_2i_3i_4;\delta_1\delta_2\delta_3\delta_4}` (∞.7).
    """

    outputs: tuple[int, ...]
    z: np.ndarray
    H: np.ndarray
    dH: np.ndarray | None = None
    ddIH: np.ndarray | None = None
    ddIIH: np.ndarray | None = None

    @property
    def batch(self) -> int | None:
        """Number of networks on the leading axis, or ``None`` for a single network."""
        return int(self.z.shape[0]) if self.z.ndim == 3 else None

    @property
    def n_inputs(self) -> int:
        """Number of inputs :math:`N` (sample indices)."""
        return int(self.z.shape[-1])

    @property
    def order(self) -> int:
        """Highest derivative computed: 1 (NTK), 2 (dNTK) or 3 (ddNTK-I)."""
        return 3 if self.ddIH is not None else 2 if self.dH is not None else 1

    def _computed(self) -> str:
        return ", ".join(k for k in ("H", "dH", "ddIH", "ddIIH") if getattr(self, k) is not None)

    def __repr__(self) -> str:
        b = "" if self.batch is None else f"batch={self.batch}, "
        return (f"NTKResult({b}outputs={short(self.outputs)}, inputs={self.n_inputs}, "
                f"computed=[{self._computed()}])")

    def _repr_html_(self) -> str:
        rows = [("networks", 1 if self.batch is None else self.batch),
                ("outputs", short(self.outputs)), ("inputs", self.n_inputs),
                ("computed", self._computed())]
        return html_table("NTKResult", rows)


def _unflatten(T: np.ndarray, m: int, N: int, k: int) -> np.ndarray:
    """(B, M, ..., M) over k direction axes -> (B, m, ..., m, N, ..., N)."""
    xp = _ns(T)
    B = T.shape[0]
    T = T.reshape((B,) + (m, N) * k)
    perm = (0,) + tuple(1 + 2 * j for j in range(k)) + tuple(2 + 2 * j for j in range(k))
    return xp.transpose(T, perm)


def _check_finite(arrays) -> None:
    for name, a in zip(("z", "H", "dH", "ddIH", "ddIIH"), arrays):
        if a is not None and not np.isfinite(a).all():
            raise DomainError(f"non-finite values in {name} (overflowing network or activation "
                              "derivative)")


def _compute(Ws, bs, X, fs, lb, lw, widths, outputs, order: int, ddII: bool, res=None,
             flags: list | None = None):
    """``(z, H, dH, ddIH, ddIIH)`` of a batch of networks; under ``jax.jit`` the per-layer
    finiteness flags of the preactivations are appended to ``flags`` instead of raising."""
    if res is not None and (order >= 2 or ddII):
        raise DomainError("residual networks: only the NTK statistics (order=1) are simulated")
    net = _forward_backward(Ws, bs, X, fs, outputs, res)
    if flags is not None and net.finite is not None:
        flags.extend(net.finite)
    xp = _ns(Ws[1])
    m, N = len(outputs), X.shape[0]
    z = xp.transpose(net.zL[:, :, list(outputs)], (0, 2, 1))
    H = _unflatten(_ntk(net, lb, lw, widths), m, N, 2)
    dH = ddI = ddIIr = None
    if order >= 2 or ddII:
        Z1, S1, X1 = _tangents(net, lb, lw, widths, fs)
        if order >= 2:
            dH = _unflatten(_dntk(net, Z1, X1, lw, widths), m, N, 3)
        if order >= 3:
            Z2, S2 = _second_tangents(net, Z1, S1, X1, lw, widths)
            ddI = _unflatten(_ddntk_I(net, Z1, Z2, S2, lw, widths), m, N, 4)
        if ddII:
            ddIIr = _unflatten(_ddntk_II(net, Z1, S1, X1, lb, lw, widths), m, N, 4)
    return z, H, dH, ddI, ddIIr


def _check_params(params, X):
    if not isinstance(params, (list, tuple)) or len(params) < 1:
        raise DomainError("params must be a non-empty sequence of (W, b) pairs, one per layer")
    Ws, bs = [None], [None]
    batched = None
    for ell, pair in enumerate(params, start=1):
        try:
            W, b = pair
        except (TypeError, ValueError):
            raise DomainError(f"params[{ell - 1}] must be a (W, b) pair") from None
        if np.iscomplexobj(W) or np.iscomplexobj(b):
            raise DomainError(f"params[{ell - 1}]: W and b must be real, got a complex array")
        W = np.asarray(W, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if batched is None:
            batched = W.ndim == 3
        if W.ndim != (3 if batched else 2) or b.ndim != W.ndim - 1:
            raise DomainError(f"layer {ell}: W must be (n_l, n_l-1) and b (n_l,) "
                              "(with one leading batch axis on all or none)")
        if not batched:
            W, b = W[None], b[None]
        if b.shape[-1] != W.shape[1] or b.shape[0] != W.shape[0]:
            raise DomainError(f"layer {ell}: b has shape {b.shape[1:]}, expected ({W.shape[1]},)")
        prev = X.shape[1] if ell == 1 else Ws[-1].shape[1]
        if W.shape[2] != prev:
            raise DomainError(f"layer {ell}: W has {W.shape[2]} columns, expected {prev}")
        if W.shape[0] != (Ws[1].shape[0] if ell > 1 else W.shape[0]):
            raise DomainError("all layers must have the same batch size")
        Ws.append(W)
        bs.append(b)
    return Ws, bs, bool(batched)


def _check_outputs(outputs, n_out) -> tuple[int, ...]:
    if outputs is None:
        outputs = range(min(3, n_out))
    try:
        out = tuple(int(o) for o in outputs)
    except (TypeError, ValueError):
        raise DomainError(f"outputs must be an iterable of ints, got {outputs!r}") from None
    if not out or len(set(out)) != len(out) or min(out) < 0 or max(out) >= n_out:
        raise DomainError(f"outputs must be distinct ints in 0..{n_out - 1}, got {outputs!r}")
    return out


@public
def empirical_ntk(params: Sequence, X: Any, activation: Any, *, lambda_b: Any = 1.0,
                  lambda_w: Any = 1.0, outputs: Iterable[int] | None = None,
                  inputs: Iterable[int] | None = None, order: int = 3,
                  ddntk_II: bool | None = None) -> NTKResult:
    r"""Exact NTK, dNTK and ddNTKs of one network (or a batch of networks).

    Parameters
    ----------
    params : sequence of (W, b)
        ``W^(l)`` of shape ``(n_l, n_{l-1})`` and ``b^(l)`` of shape ``(n_l,)``, l = 1..L, in the
        book's parameterization (no explicit width factors: ``z = b + W sigma``).  A leading
        batch axis on every array (``(B, n_l, n_{l-1})``, ``(B, n_l)``) treats ``B`` networks at
        once; the results then carry the same leading axis.
    X : array_like (N_D, n_0)
        Inputs, one per row.
    activation : str, Activation, sympy.Expr, MLP or sequence of callables
        A registered activation name or alias, an :class:`~effth.activations.Activation`, a SymPy
        expression in ``z``, an :class:`~effth.arch.MLP` (whose activation is used), or
        ``(sigma, sigma', sigma'', sigma''')`` as vectorized callables.  Kinked activations use
        their almost-everywhere derivatives (the exact derivatives of the network at almost every
        parameter point).
    lambda_b, lambda_w : float or sequence of L floats
        :math:`\lambda_b^{(\ell)}` and the width-rescaled :math:`\lambda_W^{(\ell)}` of (8.6);
        the per-weight rate is :math:`\lambda_W^{(\ell)}/n_{\ell-1}`.
    outputs : iterable of int, optional
        Output neurons to keep (default ``0..min(3, n_L)-1``).
    inputs : iterable of int, optional
        Rows of ``X`` to use (default all).
    order : {1, 2, 3}
        1: NTK only; 2: plus dNTK; 3: plus both ddNTKs.
    ddntk_II : bool, optional
        Compute the second ddNTK (default ``order >= 3``).

    Returns
    -------
    NTKResult

    Notes
    -----
    Cost per network with ``M = m N_D`` directions: NTK :math:`O(L n^2 M)`; dNTK adds the
    first-order tangents :math:`O(L n^2 M N_D)` and an :math:`O(L n M^3)` contraction; ddNTK-I
    the second-order tangents :math:`O(L n^2 M^2 N_D)` and :math:`O(L n M^4)`; ddNTK-II
    :math:`O(L n^2 M^2 + L n M^4)`.
    """
    Xa = check_inputs(X)
    if inputs is not None:
        idx = np.asarray(list(inputs), dtype=np.intp)
        if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= Xa.shape[0]:
            raise DomainError(f"inputs must index rows of X (0..{Xa.shape[0] - 1}), got {inputs!r}")
        Xa = Xa[idx]
    if order not in (1, 2, 3):
        raise DomainError(f"order must be 1, 2 or 3, got {order!r}")
    Ws, bs, batched = _check_params(params, Xa)
    L = len(Ws) - 1
    widths = (Xa.shape[1],) + tuple(W.shape[1] for W in Ws[1:])
    out = _check_outputs(outputs, widths[-1])
    lb = per_layer(lambda_b, L, "lambda_b")
    lw = per_layer(lambda_w, L, "lambda_w")
    do_II = (order >= 3) if ddntk_II is None else bool(ddntk_II)
    fs = _activation_derivs(activation, 3 if (order >= 3 or do_II) else 2)
    z, H, dH, ddI, ddII = _compute(Ws, bs, Xa, fs, lb, lw, widths, out, order, do_II)
    _check_finite((z, H, dH, ddI, ddII))
    if not batched:
        z, H = z[0], H[0]
        dH = None if dH is None else dH[0]
        ddI = None if ddI is None else ddI[0]
        ddII = None if ddII is None else ddII[0]
    return NTKResult(outputs=out, z=z, H=H, dH=dH, ddIH=ddI, ddIIH=ddII)


@public
def init_params(net: MLP, n_in: int,
                seed: int | np.random.SeedSequence | np.random.Generator | None = 0,
                networks: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    r"""Draw parameters of ``net`` at initialization (the book's parameterization).

    :math:`b^{(\ell)}_i\sim\mathcal N(0, C_b^{(\ell)})` and
    :math:`W^{(\ell)}_{ij}\sim\mathcal N(0, C_W^{(\ell)}/n_{\ell-1})`, PDLT (2.19)-(2.20).
    A residual MLP has the same parameters (its gains :math:`\gamma, \xi` of PDLT (B.4) are
    not parameters; :func:`simulate_ntk_ensemble` applies them).

    Parameters
    ----------
    net : MLP
        Architecture with numeric hidden widths.
    n_in : int
        Input dimension :math:`n_0`.
    seed : int, SeedSequence, Generator or None, default 0
        Source of the draws (``numpy.random.default_rng(seed)``; a Generator is used as is).
    networks : int, optional
        Number of independent networks on a leading batch axis (default: one network, no axis).

    Returns
    -------
    list of (W, b)
        ``[(W1, b1), ..., (WL, bL)]`` with ``W^(l)`` of shape ``(n_l, n_{l-1})`` and ``b^(l)`` of
        shape ``(n_l,)`` (with a leading ``networks`` axis if given).

    Raises
    ------
    DomainError
        ``net`` not an MLP or with symbolic widths, bad ``n_in`` or ``networks``.
    """
    if not isinstance(net, MLP):
        raise DomainError(f"net must be an effth.arch.MLP, got {type(net).__name__}")
    if isinstance(n_in, bool) or not isinstance(n_in, (int, np.integer)) or n_in < 1:
        raise DomainError(f"n_in must be a positive int (the input dimension n_0), got {n_in!r}")
    if networks is not None and (isinstance(networks, bool)
                                 or not isinstance(networks, (int, np.integer)) or networks < 1):
        raise DomainError(f"networks must be a positive int or None, got {networks!r}")
    rng = as_generator(seed)
    widths = net.layer_widths(int(n_in))
    lead = () if networks is None else (int(networks),)
    out = []
    for ell in range(1, net.depth + 1):
        W = rng.standard_normal(lead + (widths[ell], widths[ell - 1]))
        W *= np.sqrt(net.c_w_at(ell) / widths[ell - 1])
        b = rng.standard_normal(lead + (widths[ell],)) * np.sqrt(net.c_b_at(ell))
        out.append((W, b))
    return out


# ----------------------------------------------------------------------------- ensemble
#: Estimator behind each statistic of :class:`NTKEnsembleStatistics`.  ``n = n_{L-1}``;
#: ``i != j`` are two distinct selected output neurons (all ordered pairs averaged).
NTK_ESTIMATORS: Mapping[str, str] = MappingProxyType({
    "G": "mean of z_{i;a} z_{i;b} (output metric)",
    "H": "mean of H_hat_{ii;a b} (NTK mean, (8.58)); -> Theta + O(1/n)",
    "H_offdiag": "mean of H_hat_{ij;a b}, i != j (exactly 0 in expectation)",
    "A": "n Cov(H_hat_{ii;12}, H_hat_{jj;34}), i != j, unbiased (8.82)",
    "B": "B[a,b,c,d] = B_{a1 a3 a2 a4} = n E[H_hat_{ij;a1a2} H_hat_{ij;a3a4}], i != j (8.82)",
    "H_var_same": "n Cov(H_hat_{ii;12}, H_hat_{ii;34}) = A_(12)(34) + B_1324 + B_1423 (8.82)",
    "D": "n Cov(z_{i;1} z_{i;2}, H_hat_{jj;34}), i != j, unbiased (8.67)",
    "F": "F[a,b,c,d] = F_{a1 a3 a2 a4} = n E[z_{i;a1} z_{j;a2} H_hat_{ij;a3a4}], i != j (8.67)",
    "P": "n E[dH_{ijj;d0d1d2} z_{i;d3}], i != j (11.45)",
    "Q": "n E[dH_{iij;d0d1d2} z_{j;d3}], i != j (11.45)",
    "PQ_same": "n E[dH_{iii;d0d1d2} z_{i;d3}] = P_0123 + Q_0123 + Q_0213 (11.45)",
    "R": "n E[ddIH_{iijj;d0d1d2d3}], i != j (∞.11)",
    "S": "n E[ddIIH_{iijj;d1d2d3d4}], i != j (∞.12)",
    "T": "T[a,b,c,d] = T_{d1 d3 d4 d2} = n E[ddIIH_{ijij;d1d2d3d4}], i != j (∞.12)",
    "U": "U[a,b,c,d] = U_{d1 d4 d2 d3} = n E[ddIIH_{ijji;d1d2d3d4}], i != j (∞.12)",
})


@public
@dataclass(frozen=True)
class NTKEnsembleStatistics(WeightLayers):
    r"""Ensemble statistics of the output-layer NTK hierarchy, with jackknife standard errors.

    Every statistic is an ndarray over sample indices (``(N, N)`` for ``G``, ``H``,
    ``H_offdiag``; ``(N, N, N, N)`` otherwise) stored in :attr:`stats` and reachable as an
    attribute (``st.A``); its standard error is ``st.err["A"]`` (also ``st.A_err``).  The
    finite-width tensors are normalized with :math:`n=n_{L-1}` as in the book (PDLT (8.31),
    (8.37), (11.30), (∞.11)-(∞.12)) and
    stored with the book's slot order, e.g. ``B[a,b,c,d]`` :math:`=B_{abcd}` where
    :math:`(a,c)` are the sample indices of the first NTK and :math:`(b,d)` of the second.
    Cross-neuron statistics need at least two selected outputs (NaN otherwise); dNTK and
    ddNTK statistics are NaN when not computed.

    Read it like every effth result: :attr:`layers` is ``(L,)`` (the output layer), and
    ``st.value(name)`` / ``st.stderr(name)`` give the estimate and its standard error with
    ``name`` one of ``"G"``, ``"Theta"`` (the NTK mean ``H``, PDLT (8.58); it tends to the
    frozen NTK :math:`\Theta` as :math:`n\to\infty`), ``"A"``, ``"B"``, ``"D"``, ``"F"``,
    ``"P"``, ``"Q"``, ``"R"``, ``"S"``, ``"T"``, ``"U"``, or a raw key of :attr:`stats`.

    Attributes
    ----------
    widths : tuple of int
        ``(n_0, ..., n_L)``.
    networks, n_groups : int
        Number of networks, jackknife groups.
    outputs : tuple of int
        Output neurons used.
    lambda_b, lambda_w : tuple of float
        Learning rates per layer.
    stats, err : mapping str -> ndarray
        Estimates and standard errors; the estimators are described in :data:`NTK_ESTIMATORS`.
    """

    widths: tuple[int, ...]
    networks: int
    n_groups: int
    outputs: tuple[int, ...]
    lambda_b: tuple[float, ...]
    lambda_w: tuple[float, ...]
    stats: Mapping[str, np.ndarray]
    err: Mapping[str, np.ndarray]
    estimators: Mapping[str, str] = field(default_factory=lambda: NTK_ESTIMATORS, repr=False)

    def __getattr__(self, name: str):
        stats = object.__getattribute__(self, "stats")
        if name in stats:
            return stats[name]
        if name.endswith("_err") and name[:-4] in stats:
            return object.__getattribute__(self, "err")[name[:-4]]
        raise AttributeError(name)

    # ------------------------------------------------------------ one protocol for all results
    @property
    def depth(self) -> int:
        """Number of weight layers :math:`L` (PDLT's :math:`L`)."""
        return len(self.widths) - 1


    @property
    def layers(self) -> tuple[int, ...]:
        """Book layer numbers held: ``(L,)``, the output layer."""
        return (self.depth,)

    @property
    def names(self) -> tuple[str, ...]:
        """Names accepted by :meth:`value` and :meth:`stderr`."""
        return tuple(_NTK_NAMES) + tuple(k for k in self.stats if k not in _NTK_NAMES.values())

    def _key(self, name: str, layer: int | None) -> str:
        if layer is not None:
            if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
                    or int(layer) not in self.layers:
                raise DomainError(f"layer={layer!r} is not held: this NTK ensemble holds layers "
                                  f"{self.layers} (the output layer L = {self.depth})")
        key = _NTK_NAMES.get(name, name)
        if not isinstance(name, str) or key not in self.stats:
            raise DomainError(f"unknown statistic name={name!r}; available: {', '.join(self.names)}")
        return key

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        r"""Ensemble mean of statistic ``name`` at the output layer.

        Parameters
        ----------
        name : str
            ``"G"`` (metric, ``(N, N)``), ``"Theta"`` (NTK mean :math:`H`, ``(N, N)``; it tends to
            the frozen NTK :math:`\Theta` as :math:`n\to\infty`), ``"A"``, ``"B"``, ``"D"``,
            ``"F"``, ``"P"``, ``"Q"``, ``"R"``, ``"S"``, ``"T"``, ``"U"`` (``(N, N, N, N)``), or a
            raw key of :attr:`stats` (``"H"``, ``"H_offdiag"``, ``"H_var_same"``, ``"PQ_same"``).
        layer : int, optional
            Book layer number; only the output layer :math:`L` is held, so ``None`` means it.

        Returns
        -------
        ndarray

        Raises
        ------
        DomainError
            Unknown name, or a layer other than :math:`L`.
        """
        return self.stats[self._key(name, layer)]

    def stderr(self, name: str, layer: int | None = None) -> np.ndarray:
        """Jackknife standard error of :meth:`value` (same shape; NaN where not estimable)."""
        return self.err[self._key(name, layer)]

    def __repr__(self) -> str:
        return (f"NTKEnsembleStatistics({depth_text(self.depth)}, widths={short(self.widths)}, "
                f"networks={self.networks}, outputs={short(self.outputs)}, "
                f"inputs={self.stats['G'].shape[0]}, order={self.order})")

    @property
    def order(self) -> int:
        """Highest statistic order computed: 1 (NTK), 2 (+ P, Q) or 3 (+ R, S, T, U)."""
        if np.isfinite(self.stats["R"]).any():
            return 3
        return 2 if np.isfinite(self.stats["PQ_same"]).any() else 1

    def _repr_html_(self) -> str:
        rows = [("layers", self.layers), ("widths", short(self.widths)), ("networks", self.networks),
                ("estimators", f"unbiased (see .estimators); jackknife SE over {self.n_groups} "
                               "groups"), ("outputs", short(self.outputs)),
                ("inputs", self.stats["G"].shape[0]), ("order", self.order),
                ("statistics", ", ".join(self.names))]
        return html_table("NTKEnsembleStatistics", rows)


#: Book symbols read by :meth:`NTKEnsembleStatistics.value` -> keys of ``stats``.
_NTK_NAMES = {"G": "G", "Theta": "H", "A": "A", "B": "B", "D": "D", "F": "F", "P": "P",
              "Q": "Q", "R": "R", "S": "S", "T": "T", "U": "U"}


#: Statistic -> the per-chunk sum it needs beyond the always-present ones (absent: NaN by design).
_SOURCE = {"H_offdiag": "Hoff", "A": "HHcross", "B": "Bm", "D": "Dm", "F": "Fm", "P": "Pm",
           "Q": "Qm", "PQ_same": "PQs", "R": "Rm", "S": "Sm", "T": "Tm", "U": "Um"}

_SUM_KEYS = ("zz", "Hd", "Hoff", "Hsame", "HdHd", "HHcross", "Bm", "Dm", "zzHd", "Fm",
             "Pm", "Qm", "PQs", "Rm", "Sm", "Tm", "Um")


def _features(z, H, dH, ddI, ddII) -> dict[str, np.ndarray]:
    """Per-chunk sums over networks of the per-network features (see NTK_ESTIMATORS)."""
    xp = _ns(z)
    _B, m, _N = z.shape
    f: dict[str, np.ndarray] = {}
    diag = np.arange(m)
    Hii = H[:, diag, diag]                                    # (B, m, N, N)
    zz_i = xp.einsum("Zia,Zic->Ziac", z, z)
    Hd = Hii.mean(1)
    zz = zz_i.mean(1)
    f["zz"] = zz.sum(0)
    f["Hd"] = Hd.sum(0)
    f["Hsame"] = xp.einsum("Ziab,Zicd->abcd", Hii, Hii) / m
    f["HdHd"] = xp.einsum("Zab,Zcd->abcd", Hd, Hd)
    f["zzHd"] = xp.einsum("Zab,Zcd->abcd", zz, Hd)
    if dH is not None:
        f["PQs"] = xp.einsum("Ziabc,Zid->abcd", dH[:, diag, diag, diag], z) / m
    pairs = [(i, j) for i in range(m) for j in range(m) if i != j]
    if pairs:
        I = np.array([p[0] for p in pairs])
        J = np.array([p[1] for p in pairs])
        npairs = len(pairs)
        f["Hoff"] = H[:, I, J].sum((0, 1)) / npairs
        f["HHcross"] = xp.einsum("Zpab,Zpcd->abcd", Hii[:, I], Hii[:, J]) / npairs
        Hij = H[:, I, J]                                        # (B, p, N, N)
        f["Bm"] = xp.einsum("Zpab,Zpcd->abcd", Hij, Hij) / npairs
        f["Dm"] = xp.einsum("Zpab,Zpcd->abcd", zz_i[:, I], Hii[:, J]) / npairs
        # F[a1, a3, a2, a4] = z_{i;a1} z_{j;a2} H_{ij;a3a4}
        f["Fm"] = xp.einsum("Zpa,Zpc,Zpbd->abcd", z[:, I], z[:, J], Hij) / npairs
        if dH is not None:
            f["Pm"] = xp.einsum("Zpxyz,Zpw->xyzw", dH[:, I, J, J], z[:, I]) / npairs
            f["Qm"] = xp.einsum("Zpxyz,Zpw->xyzw", dH[:, I, I, J], z[:, J]) / npairs
        if ddI is not None:
            f["Rm"] = ddI[:, I, I, J, J].sum((0, 1)) / npairs
        if ddII is not None:
            f["Sm"] = ddII[:, I, I, J, J].sum((0, 1)) / npairs
            f["Tm"] = ddII[:, I, J, I, J].sum((0, 1)) / npairs
            f["Um"] = ddII[:, I, J, J, I].sum((0, 1)) / npairs
    return f


def _host_chunks(net, Xa, units, children, fs, lb, lw, widths, out, order, do_II, resid,
                 overflow):
    """Per-chunk feature sums on NumPy (the chunks of ``units``, in order)."""
    for (_, _, mnet), child in zip(units, children):
        params = init_params(net, Xa.shape[1], child, networks=mnet)
        Ws = [None] + [p[0] for p in params]
        bs = [None] + [p[1] for p in params]
        res = _compute(Ws, bs, Xa, fs, lb, lw, widths, out, order, do_II, resid)
        _check_finite(res)
        feats = _features(*res)
        for v in feats.values():
            if not np.isfinite(v).all():
                raise DomainError(overflow)
        yield feats


def _device_chunks(be, net, Xa, units, children, lb, lw, widths, out, order, do_II, resid,
                   overflow):
    """Per-chunk feature sums on the backend ``be``: every chunk padded to the largest (one
    compilation); the next chunk is drawn and launched before the current one is read back."""
    from ._backend import activation
    with be.scope():
        fs = tuple(activation(net.act, k, be) for k in range(4 if (order >= 3 or do_II) else 3))
        m_pad = max(u[2] for u in units)
        fn = _device_program(be, net, fs, lb, lw, widths, out, order, do_II, resid, m_pad)
        X = be.put(Xa)

        def launch(i):
            m = units[i][2]
            mask = np.zeros(m_pad)
            mask[:m] = 1.0
            if be.draws == "device":
                source = be.key(children[i])
            else:
                params = init_params(net, Xa.shape[1], children[i], networks=m)
                pad = [(np.concatenate([W, np.zeros((m_pad - m,) + W.shape[1:])]),
                        np.concatenate([b, np.zeros((m_pad - m,) + b.shape[1:])]))
                       for W, b in params]
                source = ([be.put(W) for W, _ in pad], [be.put(b) for _, b in pad])
            return fn(source, X, be.put(mask))

        def finish(res):
            feats, layer_ok, tensor_ok, feats_ok = res
            layer_ok = be.get(layer_ok)
            if not layer_ok.all():
                raise DomainError(f"non-finite preactivations in layer {int(np.argmin(layer_ok)) + 1}")
            tensor_ok = be.get(tensor_ok)
            if not tensor_ok.all():
                name = ("z", "H", "dH", "ddIH", "ddIIH")[int(np.argmin(tensor_ok))]
                raise DomainError(f"non-finite values in {name} (overflowing network or "
                                  "activation derivative)")
            if not all(bool(v) for v in feats_ok.values()):
                raise DomainError(overflow)
            return {k: be.get(v) for k, v in feats.items()}

        pending = None
        for i in range(len(units)):
            nxt = launch(i)
            if pending is not None:
                yield finish(pending)
            pending = nxt
        if pending is not None:
            yield finish(pending)


def _estimates(S: dict[str, np.ndarray], count: int, n: int, N: int) -> dict[str, np.ndarray]:
    nan2 = np.full((N, N), np.nan)
    nan4 = np.full((N, N, N, N), np.nan)

    def mean(k, shape4=True):
        return S[k] / count if k in S else (nan4 if shape4 else nan2)

    def ustat(ka, kb, kab):   # unbiased E[a] (x) E[b] from independent networks
        return (np.multiply.outer(S[ka], S[kb]) - S[kab]) / (count * (count - 1))

    out = {"G": S["zz"] / count, "H": S["Hd"] / count, "H_offdiag": mean("Hoff", False)}
    HH = ustat("Hd", "Hd", "HdHd")
    out["H_var_same"] = n * (S["Hsame"] / count - HH)
    out["A"] = n * (S["HHcross"] / count - HH) if "HHcross" in S else nan4
    out["B"] = n * np.einsum("acbd->abcd", mean("Bm"))
    out["D"] = n * (S["Dm"] / count - ustat("zz", "Hd", "zzHd")) if "Dm" in S else nan4
    out["F"] = n * mean("Fm")
    out["P"] = n * mean("Pm")
    out["Q"] = n * mean("Qm")
    out["PQ_same"] = n * mean("PQs")
    out["R"] = n * mean("Rm")
    out["S"] = n * mean("Sm")
    out["T"] = n * np.einsum("adbc->abcd", mean("Tm"))
    out["U"] = n * np.einsum("acdb->abcd", mean("Um"))
    return out


_COMPILED: dict = {}


def _device_program(be, net: MLP, fs, lb, lw, widths, outputs, order, ddII, resid, m: int):
    """Compiled chunk of :func:`simulate_ntk_ensemble` on the backend ``be`` for ``m`` networks
    (a 0/1 mask over them; padding networks have zero parameters and their features are
    zeroed): ``fn(source, X, mask) -> (features, layer_flags, tensor_flags, feature_flags)``
    with ``source`` the parameters ``(Ws, bs)`` (``draws="host"``) or a ``jax.random`` key.
    Cached for later runs of the same architecture and sizes."""
    key = (net.act, widths, tuple(net.c_w_at(k) for k in range(1, net.depth + 1)),
           tuple(net.c_b_at(k) for k in range(1, net.depth + 1)), lb, lw, outputs, order, ddII,
           None if resid is None else tuple(map(tuple, resid)), m, be.name, be.draws)
    fn = _COMPILED.get(key)
    if fn is not None:
        return fn
    xp = be.xp
    L = net.depth

    def chunk(source, X, mask):
        live = mask > 0.5
        if be.draws == "device":                # one draw of every layer's normals, sliced
            import jax
            shapes = [sh for ell in range(1, L + 1)
                      for sh in ((widths[ell], widths[ell - 1]), (widths[ell],))]
            sizes = [int(np.prod(sh)) for sh in shapes]
            offs = np.concatenate([[0], np.cumsum(sizes)])
            flat = jax.random.normal(source, (m, int(offs[-1])), dtype=xp.float64)
            flat = xp.where(live[:, None], flat, 0.0)
            parts = [flat[:, offs[i]:offs[i + 1]].reshape((m,) + sh) for i, sh in enumerate(shapes)]
            Ws = [parts[2 * ell - 2] * np.sqrt(net.c_w_at(ell) / widths[ell - 1])
                  for ell in range(1, L + 1)]
            bs = [parts[2 * ell - 1] * np.sqrt(net.c_b_at(ell)) for ell in range(1, L + 1)]
        else:
            Ws, bs = source
        flags: list = []
        res = _compute([None] + list(Ws), [None] + list(bs), X, fs, lb, lw, widths, outputs,
                       order, ddII, resid, flags)
        tensor_ok = xp.stack([xp.all(xp.isfinite(a)) if a is not None else xp.asarray(True)
                              for a in res])
        res = tuple(None if a is None else
                    xp.where(live.reshape((m,) + (1,) * (a.ndim - 1)), a, 0.0) for a in res)
        feats = _features(*res)
        feats_ok = {k: xp.all(xp.isfinite(v)) for k, v in feats.items()}
        return feats, xp.stack(flags), tensor_ok, feats_ok

    if len(_COMPILED) >= 16:
        _COMPILED.clear()
    fn = _COMPILED[key] = be.jit(chunk)
    return fn


@public
def simulate_ntk_ensemble(net: MLP, X: Any, *, networks: int,
                          seed: int | np.random.SeedSequence | np.random.Generator | None = 0,
                          lambda_b: Any = 1.0, lambda_w: Any = 1.0,
                          outputs: Iterable[int] | None = None, order: int = 3,
                          ddntk_II: bool | None = None,
                          batch: int | None = None,
                          progress: bool | None = None, backend: str = "numpy",
                          draws: str = "host") -> NTKEnsembleStatistics:
    r"""Simulate ``networks`` random networks and estimate the NTK hierarchy statistics.

    For the output layer :math:`L` of ``net`` (so ``n = n_{L-1}``), estimates with
    delete-one-group jackknife standard errors:

    * ``H``: NTK mean :math:`H_{\delta_1\delta_2}` (8.58), ``G``: output metric;
    * ``A``, ``B``: NTK variance decomposition (8.82) (``H_var_same``: same-neuron variance);
    * ``D``, ``F``: NTK–preactivation cross-correlation (8.67)/(8.37);
    * ``P``, ``Q``: dNTK–preactivation decomposition (11.45)/(11.30) (``order >= 2``);
    * ``R`` (∞.11) and ``S``, ``T``, ``U`` (∞.12): ddNTK means (``order >= 3``).

    See :data:`NTK_ESTIMATORS` for every estimator.

    Parameters
    ----------
    net : MLP
        Architecture with numeric widths; cross-neuron statistics need ``n_out >= 2``.  A
        residual MLP (``gamma=``, ``xi=``, PDLT (B.4)) is simulated as written, for the NTK
        statistics (``order=1``) only.
    X : array_like (N_D, n_0)
        Inputs.
    networks : int
        Number of networks (>= 2; >= 4 for standard errors).
    seed : int, SeedSequence, Generator or None, default 0
        Seed of ``numpy.random.default_rng``; one spawned child generator per chunk, so
        results are reproducible for the same ``(seed, networks, batch)``.
    lambda_b, lambda_w : float or sequence
        Learning rates (8.6) per weight layer.
    outputs : iterable of int, optional
        Output neurons used (default ``0..min(2, n_out)-1``: two neurons suffice for every
        decomposition; more neurons average more pairs at a cost ~ ``m^4``).
    order : {1, 2, 3}
        1: NTK statistics; 2: plus P, Q; 3: plus R, S, T, U.
    ddntk_II : bool, optional
        Compute S, T, U (default ``order >= 3``).
    batch : int, optional
        Networks per chunk (default targets ~32 MB temporaries).
    progress : bool, optional
        Draw a progress bar over the chunks (``None``: when stderr is a terminal or in a
        notebook, unless ``EFFTH_PROGRESS=0``).
    backend : {"numpy", "jax"}
        Array library of the forward/backward passes, the tangents and the per-chunk feature
        sums: ``"numpy"`` (default) or ``"jax"`` (one compiled function per run on JAX's default
        device, float64 in JAX's scoped ``enable_x64``; chunks sized to the accelerator's memory
        unless ``batch`` is given; ``pip install effth[jax]``).  The estimators and the jackknife
        run on the host.
    draws : {"host", "device"}
        ``"host"`` (default): the parameters come from :func:`init_params` with the seed's
        generators, so for the same ``(seed, networks, batch)`` both backends simulate the same
        networks and agree to round-off; ``"device"`` (``backend="jax"``): ``jax.random`` on the
        device (reproducible, other networks: agreement within standard errors).

    Returns
    -------
    NTKEnsembleStatistics
        Read with ``st.value("Theta")``, ``st.stderr("B")``, ... (``st.layers == (L,)``).

    Raises
    ------
    DomainError
        Bad arguments; an activation whose derivative needed by the requested order is a
        distribution (ReLU-like kinks for ``order >= 2``, steps for any order: the ensemble would
        not estimate the book's tensors; one exception: P and Q, ``order=2``, of the
        piecewise-linear family at a single input, where the Dirac parts meet
        :math:`\sigma(0)=0`, PDLT (11.67)-(11.71)); overflowing networks or statistics (the
        message names the layer or the statistic).

    Notes
    -----
    Every activation of the registry is accepted (a name, an alias, an
    :class:`~effth.activations.Activation` or a SymPy expression in ``z``, through ``net``);
    the derivatives :math:`\sigma^{(k)}`, ``k = 1, 2, 3``, come from
    :meth:`~effth.activations.Activation.numpy`.
    """
    from effth.arch._common import require_plain
    if order != 1 or ddntk_II:
        require_plain(net, "simulate_ntk_ensemble with order >= 2 or ddntk_II (residual networks: "
                      "order=1)")
    Xa = check_ensemble(net, X, networks, batch)
    be = _resolve_backend(backend, draws)
    if order not in (1, 2, 3):
        raise DomainError(f"order must be 1, 2 or 3, got {order!r}")
    size = int(networks)
    widths = net.layer_widths(Xa.shape[1])
    L = net.depth
    N = Xa.shape[0]
    out = _check_outputs(outputs if outputs is not None else range(min(2, net.n_out)), net.n_out)
    lb = per_layer(lambda_b, L, "lambda_b")
    lw = per_layer(lambda_w, L, "lambda_w")
    do_II = (order >= 3) if ddntk_II is None else bool(ddntk_II)
    if not _dirac_free_dntk(net.act, N, order, do_II):
        _check_smooth_enough(net.act, order, do_II)
    else:
        _check_smooth_enough(net.act, 1, False)
    fs = _activation_derivs(net, 3 if (order >= 3 or do_II) else 2)
    resid = (([0.0] + [float(net.gamma_at(k)) for k in range(1, L + 1)],
              [1.0] + [float(net.xi_at(k)) for k in range(1, L + 1)]) if net.residual else None)
    M = len(out) * N
    nmax = max(widths)
    per_net = max(max(widths[k] * widths[k - 1] for k in range(1, L + 1)), M * N * nmax,
                  (M * M * N * nmax if order >= 3 else 0), (M * M * nmax if do_II else 0),
                  (M ** 4 if order >= 3 or do_II else M ** 3))
    check_networks(size, per_net if be.is_numpy else per_net * 2e9 / be.flop_rate(),
                   "an NTK ensemble")
    if batch is not None:
        bsz = int(batch)
    elif be.is_numpy:
        bsz = max(1, _CHUNK_ELEMENTS // per_net)
    else:                               # the largest temporary: a quarter of the chunk budget
        bsz = max(1, int(be.chunk_bytes() // (4 * 8 * per_net)))
    K, units = group_units(size, bsz)
    rng = as_generator(seed)
    children = rng.spawn(len(units))
    groups: list[dict[str, np.ndarray]] = [{} for _ in range(K)]
    counts = np.zeros(K, dtype=np.int64)
    overflow = (f"the products of the output-layer (layer {L}) NTK hierarchy and preactivations "
                "summed over networks overflow float64 (fourth moments); use a smaller c_w (or "
                "c_b), smaller learning rates, a smaller depth or smaller inputs")
    if be.is_numpy:
        chunks = _host_chunks(net, Xa, units, children, fs, lb, lw, widths, out, order, do_II,
                              resid, overflow)
    else:
        chunks = _device_chunks(be, net, Xa, units, children, lb, lw, widths, out, order, do_II,
                                resid, overflow)
    with blas_threads(), progress_bar(len(units), "NTK ensemble", progress=progress,
                                      unit="chunk") as bar, \
            np.errstate(over="ignore", invalid="ignore"):
        for (k, _, mnet), feats in zip(units, chunks):
            for name, v in feats.items():
                groups[k][name] = groups[k].get(name, 0.0) + v
            counts[k] += mnet
            bar.update()
    total = {name: sum(g[name] for g in groups) for name in groups[0]}
    n = widths[L - 1]
    with np.errstate(over="ignore", invalid="ignore"):
        est = _estimates(total, size, n, N)
        if K >= 2:
            loo = [_estimates({nm: total[nm] - groups[k][nm] for nm in total}, size - int(counts[k]),
                              n, N) for k in range(K)]
            err = {name: jackknife_error(np.stack([e[name] for e in loo])) for name in est}
        else:
            err = {name: np.full_like(v, np.nan) for name, v in est.items()}
    for name, v in est.items():
        # NaN by design: statistics not computed (order) or needing two outputs (their sums are
        # absent); otherwise a non-finite estimate (or error) can only come from overflow.
        if _SOURCE.get(name) is not None and _SOURCE[name] not in total:
            continue
        if not np.isfinite(v).all() or (K >= 2 and not np.isfinite(err[name]).all()):
            raise DomainError(f"the estimate of {name!r} at the output layer (layer {L}) is not "
                              "finite (overflow of its fourth moments); reduce c_w, the depth or "
                              "the input scale")
    return NTKEnsembleStatistics(widths=widths, networks=size, n_groups=K, outputs=out,
                                 lambda_b=lb, lambda_w=lw, stats=MappingProxyType(est),
                                 err=MappingProxyType(err))
