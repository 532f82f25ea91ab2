r"""Deep nonlinear DMFT at :math:`O(\gamma_0^2)`: lazy responses, field expansion, Price propagation.

At :math:`\gamma_0\to0` every layer's sources are time-constant Gaussians, :math:`u^\ell\sim
\mathcal N(0,\Phi^{\ell-1}_0)` and :math:`r^\ell\sim\mathcal N(0,G^{\ell+1}_0)` (``n``-dimensional,
one component per sample).  On the discrete-GD grid (Bordelon & Pehlevan (2022), App. M, the single-site equations of
:mod:`effth.dmft.solvers.monte_carlo`) write :math:`C^\ell=\gamma_0\tilde C^\ell+O(\gamma_0^3)`,
:math:`D^\ell=\gamma_0\tilde D^\ell+O(\gamma_0^3)` as matrices on (time, sample) pairs
:math:`a=(t_i,\mu)`:

.. math::
   \tilde C^\ell_{ab} = A^{\ell-1}_{0,ab} + \eta\,\Theta(i>j)\,\Delta^0_\beta(t_j)\,\Phi^{\ell-1}_{0,\mu\beta},
   \qquad
   \tilde D^\ell_{ab} = B^{\ell}_{0,ab} + \eta\,\Theta(i>j)\,\Delta^0_\beta(t_j)\,G^{\ell+1}_{0,\mu\beta},

(:math:`b=(t_j,\beta)`, :math:`A^0_0=B^L_0=0`).  The lazy responses are obtained from the
per-sample Jacobians of Bordelon & Pehlevan (2022), App. B at first order in :math:`\gamma_0` (derived here; Bordelon & Pehlevan (2022), App. P.2-P.6
states the same structure):

.. math::
   A^\ell_{0,ab} = \tilde C^\ell_{ab}\langle\dot\phi_\mu\dot\phi_\beta\rangle,\qquad
   B^{\ell-1}_{0,ab} = \tilde C^\ell_{ab}\langle\ddot\phi_\mu\ddot\phi_\beta\rangle G^{\ell+1}_{0,\mu\beta}
   + \tilde D^\ell_{ab}\langle\dot\phi_\mu\dot\phi_\beta\rangle
   + \delta_{ab}\sum_c\big[\tilde C^\ell_{ac}G^{\ell+1}_{0,\mu\gamma}\langle\dddot\phi_\mu\dot\phi_\gamma\rangle
   + \tilde D^\ell_{ac}\langle\ddot\phi_\mu\phi_\gamma\rangle\big],

averages over :math:`u^\ell` (the last term is the equal-time part :math:`b^\ell` of Bordelon & Pehlevan (2022), App. P.2-P.6, with
its :math:`b^{\ell+1}` terms carried by :math:`\tilde D^\ell`).  :math:`A` runs up the network and
:math:`B` down, so one upward and one downward pass fix all of them.

The :math:`O(\gamma_0^2)` kernels are a *self* part plus a *Price* part.  The self part expands the
fields with lazy sources, :math:`h^{(1)}=\tilde C(\dot\phi\,r)`, :math:`z^{(1)}=\tilde D\phi`,
:math:`h^{(2)}=\tilde C g^{(1)}`, :math:`z^{(2)}=\tilde D(\dot\phi h^{(1)})`,
:math:`g^{(1)}=\ddot\phi h^{(1)}r+\dot\phi z^{(1)}`, and averages the second-order part of
:math:`\phi(h)\phi(h)^\top` and :math:`gg^\top` on a tensor Gauss-Hermite rule for :math:`u` times a
3-point rule per dimension of :math:`r` (exact: :math:`r` enters these terms with degree at most 4).
The Price part carries the :math:`O(\gamma_0^2)` change of the source covariances (Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4,
paper (155)-(157)), with :math:`d_a=\Phi^{\ell-1}_{2,aa}`:

.. math::
   \Phi^\ell_{2,ab} \mathrel{+}= \tfrac12 d_a\langle\ddot\phi_\mu\phi_\beta\rangle + \Phi^{\ell-1}_{2,ab}\langle\dot\phi_\mu\dot\phi_\beta\rangle + \tfrac12 d_b\langle\phi_\mu\ddot\phi_\beta\rangle,

.. math::
   G^\ell_{2,ab} \mathrel{+}= G^{\ell+1}_{0,\mu\beta}\big[\tfrac12 d_a\langle\dddot\phi_\mu\dot\phi_\beta\rangle + \Phi^{\ell-1}_{2,ab}\langle\ddot\phi_\mu\ddot\phi_\beta\rangle + \tfrac12 d_b\langle\dot\phi_\mu\dddot\phi_\beta\rangle\big] + G^{\ell+1}_{2,ab}\langle\dot\phi_\mu\dot\phi_\beta\rangle

(coefficient 1 on the last term; paper (164) prints 1/2, Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4).  :math:`\Phi_2` therefore runs
up the network and :math:`G_2` down.  The NTK is
:math:`K_2=G^1_2K^x+\sum_{\ell<L}(G^{\ell+1}_2\Phi^\ell_0+G^{\ell+1}_0\Phi^\ell_2)+\Phi^L_2` (paper
(167) with its index corrected) and the error follows NTK-Euler,
:math:`\Delta_2(t_{i+1})=\Delta_2(t_i)-\eta[K_0\Delta_2(t_i)+K_2(t_i,t_i)\Delta^0(t_i)]`.

This module does not import the solvers.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import numpy as np

from effth.activations import get_activation
from effth.errors import DomainError
from effth.numerics._rules import gaussian_tensor_rule
from effth.dmft.grid import causal_mask
from effth.dmft.solvers.lazy import is_linear, lazy_kernels, static_ntk_dynamics

__all__ = ["DeepSeriesArrays", "deep_nonlinear_order2_arrays", "lazy_atoms", "price_g", "price_phi",
           "source_rule_kind", "top_response_b"]

_MAX_POINTS = 4_000_000


@public
@dataclass
class DeepSeriesArrays:
    """Coefficients of :math:`\\gamma_0^0` and :math:`\\gamma_0^2` (leading axis of length 2).

    Attributes
    ----------
    phi, g : ndarray, shape (2, L, T, n, T, n)
        Two-time kernels :math:`\\Phi^\\ell`, :math:`G^\\ell`.
    ntk : ndarray, shape (2, T, n, n)
        Equal-time NTK.
    f : ndarray, shape (2, T, n)
    delta : ndarray, shape (2, T, P)
        NTK-Euler predictions and error.
    A, B : ndarray, shape (L-1, T, n, T, n)
        Lazy responses :math:`A^\\ell_0`, :math:`B^\\ell_0` (scaled convention, as in
        :class:`~effth.dmft.result.DMFTResult`).
    self_phi, self_g : ndarray, shape (L, T, n, T, n)
        The self parts of :math:`\\Phi_2`, :math:`G_2` (without Price propagation), for diagnostics.
    """

    phi: np.ndarray
    g: np.ndarray
    ntk: np.ndarray
    f: np.ndarray
    delta: np.ndarray
    A: np.ndarray
    B: np.ndarray
    self_phi: np.ndarray
    self_g: np.ndarray


def _rule(cov: np.ndarray, nodes: int, kind: str = "hermite"):
    """Tensor rule for ``N(0, cov)``: points ``(S, n)``, weights ``(S,)``."""
    u, _, w = gaussian_tensor_rule(cov, nodes, max_points=_MAX_POINTS, kind=kind)
    return u, w


@public
def source_rule_kind(act) -> str:
    """Rule for the non-polynomial lazy source ``u``: Gauss-Hermite for polynomial activations
    (exact), the trapezoid rule otherwise (geometric convergence for tanh-like poles)."""
    return "hermite" if is_linear(act) else "trapezoid"


def _product_rule(rule_u, rule_r):
    (u, wu), (r, wr) = rule_u, rule_r
    U = np.repeat(u, r.shape[0], axis=0)
    R = np.tile(r, (u.shape[0], 1))
    return U, R, np.repeat(wu, r.shape[0]) * np.tile(wr, wu.size)


def _atoms(derivs, w):
    """``atoms[i][j][mu, nu] = <phi^(i)(u_mu) phi^(j)(u_nu)>`` on a rule."""
    return [[np.einsum("s,sm,sn->mn", w, a, b, optimize=True) for b in derivs] for a in derivs]


@public
def lazy_atoms(cov: np.ndarray, act, nodes: int):
    """``atoms[i][j][mu, nu] = <phi^(i)(u_mu) phi^(j)(u_nu)>``, ``u ~ N(0, cov)``, ``i, j <= 3``."""
    u, w = _rule(cov, nodes, source_rule_kind(act))
    return _atoms([act.numpy(k)(u) for k in range(4)], w)


@public
def price_phi(P2, at, tile):
    """Price term of a source-covariance correction ``P2`` (``(Tn, Tn)``) in ``<phi phi^T>``."""
    da = np.diag(P2)
    return (0.5 * da[:, None] * tile(at[2][0]) + P2 * tile(at[1][1])
            + 0.5 * da[None, :] * tile(at[0][2]))


@public
def price_g(P2, at, Gn, tile):
    """Price term of ``P2`` in ``<g g^T>`` at the lazy level (``Gn``: tiled lazy ``G^{l+1}``)."""
    da = np.diag(P2)
    return Gn * (0.5 * da[:, None] * tile(at[3][1]) + P2 * tile(at[2][2])
                 + 0.5 * da[None, :] * tile(at[1][3]))


@public
def top_response_b(Ct, Dt, at, Gn, tile):
    """Lazy response map: ``<d g/d u>`` at first order in ``C = Ct``, ``D = Dt`` (with the
    equal-time diagonal)."""
    b = np.sum(Ct * Gn * tile(at[3][1]), axis=1) + np.sum(Dt * tile(at[2][0]), axis=1)
    return Ct * tile(at[2][2]) * Gn + Dt * tile(at[1][1]) + np.diag(b)


@public
def deep_nonlinear_order2_arrays(kx, y, *, hidden_layers: int, activation: str, eta: float, steps: int,
                                 nodes: int = 20, chunk: int = 20_000) -> DeepSeriesArrays:
    r"""Lazy values and :math:`O(\gamma_0^2)` coefficients of the deep nonlinear discrete DMFT.

    Parameters
    ----------
    kx : ndarray, shape (n, n)
        Input kernel (training points first).
    y : ndarray, shape (P,)
        Targets.
    hidden_layers : int
        Hidden layers ``L``.
    activation : str
        Registry name with at least three derivatives.
    eta, steps : float, int
        GD grid.
    nodes : int
        Gauss-Hermite nodes per dimension of each layer's ``u`` (``r`` uses 3, which is exact).
    chunk : int
        Quadrature points per block (memory).

    Returns
    -------
    DeepSeriesArrays
    """
    act = get_activation(activation)
    if act.kinks:
        raise DomainError(f"{act.name!r} has kinks: the gamma0-expansion needs phi''' "
                          "(delta functions and their derivatives for a kinked activation)")
    kx = np.asarray(kx, dtype=float)
    y = np.asarray(y, dtype=float)
    L, T, n, P = int(hidden_layers), int(steps), kx.shape[0], y.size
    Tn = T * n
    phi0, dphi0, g0, ntk0 = lazy_kernels(kx, act, hidden_layers=L)
    fns = [act.numpy(k) for k in range(4)]
    f0 = static_ntk_dynamics(ntk0, y, eta, T)
    delta0 = y[None] - f0[:, :P]
    dpad = np.zeros((T, n))
    dpad[:, :P] = delta0
    strict = np.kron(causal_mask(T), np.ones((n, n)))
    dcol = np.tile(dpad.reshape(1, Tn), (Tn, 1))
    tile = lambda m: np.tile(m, (T, T))                              # noqa: E731
    prev = [kx] + [phi0[ell] for ell in range(L - 1)]               # Phi^{ell-1}_0, ell = 1..L
    nxt = [g0[ell + 1] for ell in range(L - 1)] + [np.ones((n, n))]  # G^{ell+1}_0

    rules, atoms = [], []
    for ell in range(L):
        ru = _rule(prev[ell], nodes, source_rule_kind(act))
        rr = _rule(nxt[ell], 3)
        if ru[1].size * rr[1].size > _MAX_POINTS:
            raise DomainError(f"layer {ell + 1}: {ru[1].size * rr[1].size} quadrature points "
                              f"(rank of the lazy kernels ~ {n} samples); lower nodes or samples")
        rules.append((ru, rr))
        atoms.append(_atoms([f(ru[0]) for f in fns], ru[1]))

    # lazy responses: A up, then D~ and B down
    Ct = []
    A0 = [np.zeros((Tn, Tn)) for _ in range(L - 1)]
    for ell in range(L):
        c = eta * strict * tile(prev[ell]) * dcol
        if ell >= 1:
            c = c + A0[ell - 1]
        Ct.append(c)
        if ell <= L - 2:
            A0[ell] = c * tile(atoms[ell][1][1])
    Dt = [None] * L
    B0 = [np.zeros((Tn, Tn)) for _ in range(L - 1)]
    for ell in range(L - 1, -1, -1):
        d = eta * strict * tile(nxt[ell]) * dcol
        if ell <= L - 2:
            d = d + B0[ell]
        Dt[ell] = d
        if ell >= 1:
            B0[ell - 1] = top_response_b(Ct[ell], d, atoms[ell], tile(nxt[ell]), tile)

    # self parts of the O(gamma0^2) kernels
    self_phi = np.zeros((L, Tn, Tn))
    self_g = np.zeros((L, Tn, Tn))
    for ell in range(L):
        U, R, w = _product_rule(*rules[ell])
        for s0 in range(0, w.size, chunk):
            sl = slice(s0, s0 + chunk)
            p, sp = _second_order_kernels(U[sl], R[sl], w[sl], fns, Ct[ell], Dt[ell], T)
            self_phi[ell] += p
            self_g[ell] += sp

    # Price propagation: Phi_2 up, G_2 down
    phi2 = self_phi.copy()
    for ell in range(1, L):
        phi2[ell] += price_phi(phi2[ell - 1], atoms[ell], tile)
    g2 = self_g.copy()
    for ell in range(L - 1, -1, -1):
        if ell >= 1:
            g2[ell] += price_g(phi2[ell - 1], atoms[ell], tile(nxt[ell]), tile)
        if ell <= L - 2:
            g2[ell] += g2[ell + 1] * tile(atoms[ell][1][1])

    # NTK (two-time) and its equal-time diagonal; NTK-Euler predictions
    K2 = g2[0] * tile(kx) + phi2[L - 1]
    for ell in range(1, L):
        K2 = K2 + g2[ell] * tile(phi0[ell - 1]) + tile(g0[ell]) * phi2[ell - 1]
    idx = np.arange(T)
    K2d = K2.reshape(T, n, T, n)[idx, :, idx, :]
    f2 = np.zeros((T, n))
    for i in range(T - 1):
        d2 = -f2[i, :P]
        f2[i + 1] = f2[i] + eta * (ntk0[:, :P] @ d2 + K2d[i][:, :P] @ delta0[i])
    shape5 = (L, T, n, T, n)
    stack = lambda a, b: np.stack([a, b])                               # noqa: E731
    phi_0 = np.stack([tile(phi0[ell]) for ell in range(L)])
    g_0 = np.stack([tile(g0[ell]) for ell in range(L)])
    return DeepSeriesArrays(
        phi=stack(phi_0.reshape(shape5), phi2.reshape(shape5)),
        g=stack(g_0.reshape(shape5), g2.reshape(shape5)),
        ntk=stack(np.broadcast_to(ntk0, (T, n, n)).copy(), K2d),
        f=stack(f0, f2), delta=stack(delta0, -f2[:, :P]),
        A=np.stack([a.reshape(T, n, T, n) for a in A0]) if L > 1 else np.zeros((0, T, n, T, n)),
        B=np.stack([b.reshape(T, n, T, n) for b in B0]) if L > 1 else np.zeros((0, T, n, T, n)),
        self_phi=self_phi.reshape(shape5), self_g=self_g.reshape(shape5))


def _second_order_kernels(U, R, w, fns, Ct, Dt, T):
    """Weighted sums of the ``gamma0^2`` parts of ``phi(h) phi(h)^T`` and ``g g^T`` on a block of
    quadrature points (sources time-constant: tiled over the ``T`` grid points)."""
    u = np.tile(U, (1, T))
    r = np.tile(R, (1, T))
    p0, p1, p2, p3 = (f(u) for f in fns)
    h1 = (p1 * r) @ Ct.T
    z1 = p0 @ Dt.T
    g1 = p2 * h1 * r + p1 * z1
    h2 = g1 @ Ct.T
    z2 = (p1 * h1) @ Dt.T
    f1 = p1 * h1
    f2 = p1 * h2 + 0.5 * p2 * h1 * h1
    g0 = p1 * r
    g2 = (p2 * h2 + 0.5 * p3 * h1 * h1) * r + p2 * h1 * z1 + p1 * z2
    wc = w[:, None]
    cross_phi = (wc * p0).T @ f2
    cross_g = (wc * g0).T @ g2
    return ((wc * f1).T @ f1 + cross_phi + cross_phi.T,
            (wc * g1).T @ g1 + cross_g + cross_g.T)
