r"""Finite-width fluctuations of the DMFT: the O(1/N) covariance of kernels and predictions.

"Perturbative in width, non-perturbative in :math:`\gamma_0`" (Bordelon & Pehlevan (2022),
App. P.7, eqs. (174)-(175)): at width :math:`N` the order parameters of the DMFT fluctuate around
the saddle point :math:`k^*` with the Gaussian law

.. math:: k\sim\mathcal N\big(k^*,\ \tfrac1N(-\nabla^2S[k^*])^{-1}\big),

where :math:`S` is the DMFT action (Bordelon & Pehlevan (2022), eqs. (8)/(41), App. D.3-D.7)
and the Hessian blocks are the four-point single-site correlators of App. P.7.1.  This module
evaluates that Hessian in closed form for **deep linear networks** on the discrete GD grid of
:func:`effth.dmft.solve_deep_linear` and inverts it (:func:`deep_linear_fluctuations`), and
for **two-layer networks** with a smooth activation by the quadrature of
:func:`effth.dmft.solve_two_layer` (:func:`two_layer_fluctuations`), and for **deep nonlinear
networks** from the sampled single site at a :func:`effth.dmft.solve_monte_carlo` saddle
(:func:`deep_nonlinear_fluctuations`: :math:`N\,\mathrm{Cov}=(1-J)^{-1}\Sigma(1-J)^{-\top}`
with the Jacobian of the single-site map and the generalised covariances of App. P.7.1 by
pathwise derivatives; a Monte-Carlo estimate with its error, :meth:`DMFTFluctuations.variance_stderr`).

The action (deep linear, plain GD)
----------------------------------
Order parameters, per hidden layer :math:`\ell=1..L`: the kernels :math:`H^\ell` (``T n x T n``),
:math:`G^\ell` (``T x T``, the gradient field of a linear network is sample independent), the
responses :math:`A^\ell` (``T n x T``), :math:`B^\ell` (``T x T n``, :math:`\ell<L`) in the
scaled convention of the solver, and the predictions :math:`f` (``T x n``).  Their conjugates
:math:`\hat H,\hat G,\hat f` couple to the single-site observables
:math:`h h^\top`, :math:`g g^\top` and :math:`O_f(t)=\gamma_0^{-1}[h^L(t)g^L(t)-c\,h^L(0)g^L(0)]`
(:math:`c=1` for the centred output of :func:`effth.simulation.simulate_training`, whose
initial offset is removed; :math:`c=0` for the raw output, whose :math:`O(1/(\gamma_0\sqrt N))`
initial value then fluctuates too).  With the fields of the solver,

.. math:: h^\ell=u^\ell+\gamma_0C^\ell g^\ell,\qquad g^\ell=r^\ell+\gamma_0D^\ell h^\ell,\qquad
          u^\ell\sim\mathcal N(0,H^{\ell-1}),\ r^\ell\sim\mathcal N(0,G^{\ell+1}),

:math:`C^\ell=A^{\ell-1}+\eta\Theta H^{\ell-1}\Delta`, :math:`D^\ell=B^\ell+\eta\Theta G^{\ell+1}\Delta`,
:math:`\Delta=y-f` (Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (68)-(71) with the response
terms read without :math:`\Delta`), the action is

.. math:: S=-\sum_\ell\big[\hat H^\ell\!\cdot H^\ell+\hat G^\ell\!\cdot G^\ell\big]-\hat f\cdot f
          -\gamma_0^2\sum_{\ell<L}\mathrm{tr}\,A^\ell B^\ell+\sum_\ell\ln\mathcal Z_\ell,

.. math:: \ln\mathcal Z_\ell=-\ln\det\begin{pmatrix}1&-\gamma_0C^\ell\\-\gamma_0D^\ell&1\end{pmatrix}
          -\tfrac12\ln\det\big(1-\Sigma_\ell\,\mathcal J_\ell^{-\top}Q_\ell\,\mathcal J_\ell^{-1}\big),

the single-site moment generating function of App. D.5 (eq. (42)) done in closed form: the
Martin-Siggia-Rose integral over the linear fields gives the Jacobian determinant (which is 1
for causal :math:`C,D`, so that :math:`\partial\ln\mathcal Z/\partial B` is the response
:math:`\gamma_0^2A^\top` of App. D.6, eq. (53)), and the Gaussian average of
:math:`\exp(\tfrac12 v^\top Qv)`, :math:`v=(h,g)=\mathcal J^{-1}(u,r)`, the rest
(:math:`\Sigma=\mathrm{diag}(H^{\ell-1},G^{\ell+1})`; :math:`Q` holds the conjugates).  Its
stationary point is exactly the DMFT of :func:`~effth.dmft.solve_deep_linear` (tested:
:math:`\nabla S=0` there to rounding); its Hessian in all variables :math:`x=(k,\hat k)` gives
:math:`N\,\mathrm{Cov}(x)=-[\nabla^2S]^{-1}` (App. P.7, the Gaussian integral with the
conjugates on the imaginary axis).  The blocks are those listed in App. P.7.1: e.g.
:math:`\partial^2S/\partial\hat H\partial\hat H=\langle hhhh\rangle-HH`,
:math:`\partial^2S/\partial\hat H\partial H=-1+\partial H/\partial H'`,
:math:`\partial^2S/\partial H\partial H=0`, and the :math:`A`/:math:`B` blocks of second
response functions.  Here they are obtained by complex-step differentiation of the exact
gradient :math:`\nabla S` (analytic, no truncation error), so every block -- including the
ones App. P.7.1 lists but does not evaluate -- comes from the one closed form.

Limits
------
* :math:`\gamma_0\to0`: the kernels are frozen at their initial fluctuations, the four-point
  vertex of the NNGP (PDLT (4.119) at :math:`\sigma(z)=z`; :func:`effth.pdlt.deep_linear_flow`),
  and the centred predictions move only through the random initial NTK (tested).
* :math:`\gamma_0>0`: feature learning couples the kernel fluctuations across layers and times;
  the signal-to-noise of feature learning grows as :math:`\gamma_0^2\sqrt N` (eq. (175)).

Cost: the Hessian has ``2 n_k + n_AB`` rows (``n_k`` kernel and prediction entries,
``n_AB`` response entries; at most ``MAX_VARIABLES``), so ``T n`` (grid points times samples)
and ``L`` must stay small: under a second at ``T = 8, n = 2, L = 2``, about 30 s at
``T = 12, n = 3, L = 2`` (3912 rows) on one core.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from effth._signature import public
from effth.dmft.grid import TimeGrid, TrainingData, _html_table
from effth.dmft.result import DMFTResult, check_layer
from effth.dmft.solvers.deep_linear import solve_deep_linear
from effth.errors import DomainError
from effth._validate import integer

__all__ = ["DMFTFluctuations", "deep_linear_fluctuations", "deep_nonlinear_fluctuations",
           "two_layer_fluctuations"]

#: largest number of variables of the Hessian (memory ~ 8 MAX^2 bytes)
MAX_VARIABLES = 6000
_STEP = 1e-30                     # complex step


class _Layout:
    """Where each order parameter sits in the flat vectors ``q`` (kernels, f) and ``rho`` (A, B)."""

    def __init__(self, L: int, T: int, n: int, g_samples: bool = False):
        self.L, self.T, self.n, self.g_samples = L, T, n, g_samples
        Tn = T * n
        mG = Tn if g_samples else T          # g^l sample independent in a linear network
        self.iuH = np.triu_indices(Tn)
        self.iuG = np.triu_indices(mG)
        self.nH, self.nG, self.nf = len(self.iuH[0]), len(self.iuG[0]), Tn
        self.offH = [ell * self.nH for ell in range(L)]
        self.offG = [L * self.nH + ell * self.nG for ell in range(L)]
        self.off_f = L * (self.nH + self.nG)
        self.nq = self.off_f + self.nf
        self.nAB = Tn * T
        self.offA = [2 * ell * self.nAB for ell in range(L - 1)]
        self.offB = [(2 * ell + 1) * self.nAB for ell in range(L - 1)]
        self.nr = 2 * (L - 1) * self.nAB
        # full (i, j) -> unique index, for expanding covariances
        self.kH = np.zeros((Tn, Tn), dtype=int)
        self.kH[self.iuH] = np.arange(self.nH)
        self.kH[self.iuH[1], self.iuH[0]] = np.arange(self.nH)
        self.kG = np.zeros((mG, mG), dtype=int)
        self.kG[self.iuG] = np.arange(self.nG)
        self.kG[self.iuG[1], self.iuG[0]] = np.arange(self.nG)

    @property
    def size(self) -> int:
        return 2 * self.nq + self.nr


def _sym(vec: np.ndarray, size: int, iu) -> np.ndarray:
    """(B, m) unique entries -> (B, size, size) symmetric matrices."""
    out = np.zeros((vec.shape[0], size, size), dtype=vec.dtype)
    out[:, iu[0], iu[1]] = vec
    out[:, iu[1], iu[0]] = vec
    return out


def _conjugate(vec: np.ndarray, size: int, iu) -> np.ndarray:
    """Conjugates of unique entries -> the symmetric ``Q`` of ``1/2 v^T Q v = sum_{i<=j} qhat_ij v_i v_j``."""
    out = _sym(vec, size, iu)
    idx = np.arange(size)
    out[:, idx, idx] *= 2.0
    return out


def _layer_systems(lay: _Layout, kx, y, P, eta, gamma0, center, xq, xh, xr):
    """The point ``(q, qhat, rho)`` unpacked, then per layer ``ell = 1..L`` the single-site
    linear system at a batch of points ``(B, .)`` (complex allowed): ``J`` (its inverse ``Ji``)
    coupling ``h`` and ``g`` through the drifts ``C``, ``D``, the source covariance ``Sig`` and the
    conjugate coupling ``Q`` (the last layer's ``f_hat`` term included, indices ``ht``, ``gt``).
    Shared by :func:`_gradient` and the mean shift's kernel gradient."""
    L, T, n = lay.L, lay.T, lay.n
    Tn, m = T * n, T * n + T
    nb = xq.shape[0]
    dt = np.result_type(xq, xh, xr)
    H = [_sym(xq[:, o: o + lay.nH], Tn, lay.iuH) for o in lay.offH]
    G = [_sym(xq[:, o: o + lay.nG], T, lay.iuG) for o in lay.offG]
    f = xq[:, lay.off_f:].reshape(nb, T, n)
    Hh = [_conjugate(xh[:, o: o + lay.nH], Tn, lay.iuH) for o in lay.offH]
    Gh = [_conjugate(xh[:, o: o + lay.nG], T, lay.iuG) for o in lay.offG]
    fh = xh[:, lay.off_f:].reshape(nb, T, n)
    A = [xr[:, o: o + lay.nAB].reshape(nb, Tn, T) for o in lay.offA]
    B = [xr[:, o: o + lay.nAB].reshape(nb, T, Tn) for o in lay.offB]
    delta = y[None, None, :] - f[:, :, :P]                         # (B, T, P)
    mask = eta * np.tril(np.ones((T, T)), k=-1)                    # eta Theta(t - s), Theta(0) = 0
    H0 = np.broadcast_to(np.tile(kx, (T, T)), (nb, Tn, Tn))
    ones = np.broadcast_to(np.ones((T, T)), (nb, T, T))
    eye = np.eye(m)
    for ell in range(1, L + 1):
        Hp = H0 if ell == 1 else H[ell - 2]
        Gn = ones if ell == L else G[ell]
        Hp4 = Hp.reshape(nb, T, n, T, n)
        C = (np.einsum("btmsa,bsa->btms", Hp4[..., :P], delta) * mask[None, :, None, :]
             ).reshape(nb, Tn, T)
        Dd = np.zeros((nb, T, T, n), dtype=dt)
        Dd[..., :P] = Gn[:, :, :, None] * delta[:, None, :, :] * mask[None, :, :, None]
        D = Dd.reshape(nb, T, Tn)
        if ell >= 2:
            C = C + A[ell - 2]
        if ell <= L - 1:
            D = D + B[ell - 1]
        J = np.broadcast_to(eye, (nb, m, m)).astype(dt)
        J[:, :Tn, Tn:] = -gamma0 * C
        J[:, Tn:, :Tn] = -gamma0 * D
        Ji = np.linalg.inv(J)
        Sig = np.zeros((nb, m, m), dtype=dt)
        Sig[:, :Tn, :Tn] = Hp
        Sig[:, Tn:, Tn:] = Gn
        Q = np.zeros((nb, m, m), dtype=dt)
        Q[:, :Tn, :Tn] = Hh[ell - 1]
        Q[:, Tn:, Tn:] = Gh[ell - 1]
        ht = gt = None
        if ell == L:                     # f_hat couples to gamma0^-1 [h(t) g(t) - c h(0) g(0)]
            ht = np.arange(T)[:, None] * n + np.arange(n)[None, :]          # (T, n) h index
            gt = Tn + np.repeat(np.arange(T)[:, None], n, axis=1)           # (T, n) g index
            cpl = fh / gamma0
            Q[:, ht, gt] += cpl
            Q[:, gt, ht] += cpl
            if center:
                c0 = cpl.sum(axis=1)                                       # (B, n)
                Q[:, np.arange(n), Tn] -= c0
                Q[:, Tn, np.arange(n)] -= c0
        yield dict(ell=ell, nb=nb, dt=dt, Hp=Hp, Hp4=Hp4, Gn=Gn, delta=delta, mask=mask, eye=eye,
                   Ji=Ji, Sig=Sig, Q=Q, ht=ht, gt=gt, A=A, B=B)


def _gradient(lay: _Layout, kx, y, P, eta, gamma0, center, xq, xh, xr):
    """``(dS/dqhat, dS/drho)`` at a batch of points ``(B, .)`` (complex allowed: complex step)."""
    L, T, n = lay.L, lay.T, lay.n
    Tn = T * n
    out_H, out_G = [None] * L, [None] * L
    out_f = None
    dC, dD = [None] * L, [None] * L
    for s_ in _layer_systems(lay, kx, y, P, eta, gamma0, center, xq, xh, xr):
        ell, nb, dt, eye = s_["ell"], s_["nb"], s_["dt"], s_["eye"]
        Ji, Sig, Q, ht, gt, A, B = (s_[k] for k in ("Ji", "Sig", "Q", "ht", "gt", "A", "B"))
        JiT = np.swapaxes(Ji, 1, 2)
        V = Ji @ np.linalg.solve(eye - Sig @ (JiT @ Q @ Ji), Sig) @ JiT   # <v v^T>_Q
        out_H[ell - 1] = V[:, :Tn, :Tn][:, lay.iuH[0], lay.iuH[1]]
        out_G[ell - 1] = V[:, Tn:, Tn:][:, lay.iuG[0], lay.iuG[1]]
        if ell == L:
            hg = V[:, ht, gt]                                              # (B, T, n)
            out_f = (hg - (hg[:, :1, :] if center else 0.0)) / gamma0
        W = JiT @ Q @ V
        dC[ell - 1] = gamma0 * (W[:, :Tn, Tn:] + np.swapaxes(Ji[:, Tn:, :Tn], 1, 2))
        dD[ell - 1] = gamma0 * (W[:, Tn:, :Tn] + np.swapaxes(Ji[:, :Tn, Tn:], 1, 2))
    Oq = np.concatenate(out_H + out_G + [out_f.reshape(nb, -1)], axis=1)
    g_q = Oq - xq
    parts = []
    g2 = gamma0 ** 2
    for ell in range(1, L):              # A^ell enters layer ell+1's C, B^ell layer ell's D
        gA = -g2 * np.swapaxes(B[ell - 1], 1, 2) + dC[ell]
        gB = -g2 * np.swapaxes(A[ell - 1], 1, 2) + dD[ell - 1]
        parts += [gA.reshape(nb, -1), gB.reshape(nb, -1)]
    g_r = np.concatenate(parts, axis=1) if parts else np.zeros((nb, 0), dtype=dt)
    return g_q, g_r


def _deep_linear_saddle(who, X, y, depth, hidden_layers, gamma0, eta, steps, X_test, kernel,
                        center, chunk):
    """Checked arguments, the exact deep linear DMFT solution, its layout and its flat saddle:
    ``(gamma0, result, layout, q, rho)`` for the deep linear fluctuations and mean shift."""
    g0 = _common_arguments(center, gamma0, y, who)
    integer(chunk, "chunk", minimum=1)
    res = solve_deep_linear(X, y, depth=depth, hidden_layers=hidden_layers, gamma0=g0, eta=eta,
                            steps=steps, X_test=X_test, kernel=kernel, closure="exact")
    L, T, n = res.hidden_layers, res.grid.steps, res.data.n_all
    lay = _Layout(L, T, n)
    if lay.size > MAX_VARIABLES:
        raise DomainError(
            f"the action's Hessian would have {lay.size} rows (> {MAX_VARIABLES}) for "
            f"hidden_layers={L}, steps={T}, inputs={n}; use fewer steps (a larger eta) or inputs")
    q0, r0 = _saddle(res, lay)
    return g0, res, lay, q0, r0


def _saddle(res: DMFTResult, lay: _Layout):
    """The DMFT solution as the flat vectors ``q``, ``rho``."""
    L, T, n = lay.L, lay.T, lay.n
    Tn = T * n
    q = np.zeros(lay.nq)
    for ell in range(L):
        q[lay.offH[ell]: lay.offH[ell] + lay.nH] = res.phi[ell].reshape(Tn, Tn)[lay.iuH]
        q[lay.offG[ell]: lay.offG[ell] + lay.nG] = res.g[ell][:, 0, :, 0][lay.iuG]
    q[lay.off_f:] = res.f.reshape(-1)
    r = np.zeros(lay.nr)
    for ell in range(L - 1):
        r[lay.offA[ell]: lay.offA[ell] + lay.nAB] = res.A[ell].reshape(-1)
        r[lay.offB[ell]: lay.offB[ell] + lay.nAB] = res.B[ell].reshape(-1)
    return q, r


@public
@dataclass
class DMFTFluctuations:
    """The O(1/N) Gaussian fluctuations of the DMFT (Bordelon & Pehlevan (2022), App. P.7, eqs. (174)-(175)).

    Attributes
    ----------
    dmft : DMFTResult
        The saddle point (:func:`effth.dmft.solve_deep_linear` or
        :func:`effth.dmft.solve_two_layer`, exact closure; for
        :func:`deep_nonlinear_fluctuations` the given :func:`effth.dmft.solve_monte_carlo`
        result).
    center : bool
        Whether the predictions are the centred ``f - f(theta_0)`` (as
        :func:`effth.simulation.simulate_training` reports by default).
    propagator : ndarray, shape (n_k, n_k)
        ``N Cov(k)`` of the flat order parameters ``k`` (unique entries of ``H^ell``, of
        ``G^ell``, then ``f``): the kernel-and-prediction block of ``-[grad^2 S]^-1``.
    gradient_norm : float
        Max-abs of ``grad S`` at the saddle (``~1e-14``: the solver's DMFT is the stationary
        point of the action); ``nan`` for the sampled single site of
        :func:`deep_nonlinear_fluctuations` (see ``saddle_z`` there).
    asymmetry : float
        Max-abs asymmetry of the numerically assembled Hessian, relative to its largest entry
        (a consistency check of the blocks; ``~1e-12``).
    replica_propagators : ndarray, shape (R, n_k, n_k), or None
        :func:`deep_nonlinear_fluctuations` only: the propagators of the ``R`` independent
        samplings of the single site whose mean is ``propagator``; their spread is
        :meth:`variance_stderr`.  ``None`` for the closed-form theories.
    saddle_z : float
        :func:`deep_nonlinear_fluctuations` only: the largest ``|z|`` of the single-site map
        ``F(k*)`` (the kernels and predictions re-sampled at the saddle) against the saddle
        ``k*`` itself, in units of the combined Monte-Carlo error (1.5-5.5 at converged
        plain-GD saddles, the largest over the saddles; ``nan`` for the closed forms).
    saddles : int
        :func:`deep_nonlinear_fluctuations` only: the number of independent saddles averaged
        (``replica_propagators`` holds ``saddles x replicas`` propagators, saddle-major).

    Notes
    -----
    Read it with :meth:`variance`, :meth:`covariance` and :meth:`std` by the names of
    :meth:`DMFTResult.value` (``'f'``, ``'delta'``, ``'loss'``, ``'phi'``, ``'g'``, ``'ntk'``);
    ``widths=N`` divides by ``N`` (default: the width-independent ``N Cov``).  Quantities that
    are nonlinear in the order parameters (``'loss'``, ``'ntk'``) are linearised at the saddle.
    :meth:`variance_stderr` is the Monte-Carlo error of :meth:`variance` where the theory is sampled.
    """

    dmft: DMFTResult
    center: bool
    propagator: np.ndarray
    gradient_norm: float
    asymmetry: float
    _layout: _Layout = None
    replica_propagators: np.ndarray | None = None
    saddle_z: float = float("nan")
    saddles: int = 1

    _NAMES = ("f", "delta", "loss", "phi", "g", "ntk")

    @property
    def grid(self) -> TimeGrid:
        return self.dmft.grid

    @property
    def data(self) -> TrainingData:
        return self.dmft.data

    @property
    def gamma0(self) -> float:
        return self.dmft.gamma0

    @property
    def hidden_layers(self) -> int:
        return self.dmft.hidden_layers

    def _linear_map(self, name: str, layer):
        """``(shape, M)``: the quantity ``name`` is ``M dq`` to first order (``M`` dense or index)."""
        lay, res = self._layout, self.dmft
        T, n, L, P = lay.T, lay.n, lay.L, res.n_train
        if name not in self._NAMES:
            raise DomainError(f"unknown quantity name={name!r}; choose from {list(self._NAMES)}")
        if name in ("phi", "g"):
            if layer is None:
                raise DomainError(f"{name!r} is per layer: give layer= one of {list(res.layers)}")
            ell = check_layer(layer, res.layers, name)
            if name == "phi":
                return (T, n, T, n), lay.offH[ell] + lay.kH.reshape(-1)
            if lay.g_samples:
                return (T, n, T, n), lay.offG[ell] + lay.kG.reshape(-1)
            kG = np.broadcast_to(lay.kG[:, None, :, None], (T, n, T, n))
            return (T, n, T, n), lay.offG[ell] + kG.reshape(-1)
        if layer is not None:
            raise DomainError(f"{name!r} has no layer axis; drop layer={layer!r}")
        f_idx = lay.off_f + np.arange(T * n).reshape(T, n)
        if name == "f":
            return (T, n), f_idx.reshape(-1)
        if name == "delta":
            M = np.zeros((T * P, lay.nq))
            M[np.arange(T * P), f_idx[:, :P].reshape(-1)] = -1.0
            return (T, P), M
        if name == "loss":                     # d(1/2 sum Delta^2) = -sum Delta df
            M = np.zeros((T, lay.nq))
            for t in range(T):
                M[t, f_idx[t, :P]] = -res.delta[t, :P]
            return (T,), M
        # ntk: K(t,t) = sum_{l=0}^{L} G^{l+1}(t,t) H^l(t,t), H^0 = K^x, G^{L+1} = 1
        M = np.zeros((T, n, n, lay.nq))
        Hd = res.equal_time("phi")                               # (L, T, n, n)
        Gd = res.equal_time("g")                                 # (L, T, n, n)
        for t in range(T):
            tt = t * n + np.arange(n)
            for ell in range(L + 1):              # term G^{ell+1} H^ell, layer index ell
                Hl = res.data.kx if ell == 0 else Hd[ell - 1, t]
                Gl = np.ones((n, n)) if ell == L else Gd[ell, t]
                for a in range(n):
                    for b in range(n):
                        if ell < L:               # d G^{ell+1}(t, t)_{mu nu}
                            kg = lay.kG[tt[a], tt[b]] if lay.g_samples else lay.kG[t, t]
                            M[t, a, b, lay.offG[ell] + kg] += Hl[a, b]
                        if ell >= 1:              # d H^ell(t, t)_{mu nu}
                            M[t, a, b, lay.offH[ell - 1] + lay.kH[tt[a], tt[b]]] += Gl[a, b]
        return (T, n, n), M.reshape(T * n * n, lay.nq)

    def covariance(self, name: str, layer: int | None = None, *, widths: float | None = None) -> np.ndarray:
        """``Cov(name, name)`` of shape ``value_shape + value_shape`` (``N Cov`` unless ``widths``).

        Parameters
        ----------
        name : {'f', 'delta', 'loss', 'phi', 'g', 'ntk'}
            As :meth:`DMFTResult.value`.
        layer : int, optional
            Book layer ``1 .. L`` for ``'phi'``, ``'g'``.
        widths : float, optional
            The width ``N``: the covariance at that width, ``propagator / N``.
        """
        shape, M = self._linear_map(name, layer)
        S = self.propagator
        if M.ndim == 1:
            cov = S[np.ix_(M, M)]
        else:
            cov = M @ S @ M.T
        return cov.reshape(shape + shape) / _width(widths)

    def variance(self, name: str, layer: int | None = None, *, widths: float | None = None) -> np.ndarray:
        """``Var`` of every entry of ``name`` (shape of :meth:`DMFTResult.value`); ``N Var``
        unless ``widths`` is given."""
        shape, M = self._linear_map(name, layer)
        S = self.propagator
        if M.ndim == 1:
            var = S[M, M]
        else:
            var = np.einsum("ij,jk,ik->i", M, S, M)
        return var.reshape(shape) / _width(widths)

    def variance_stderr(self, name: str, layer: int | None = None, *, widths: float | None = None) -> np.ndarray | None:
        """Monte-Carlo standard error of :meth:`variance` (same shape; ``N Var`` units unless
        ``widths``): the spread of the independent single-site samplings
        (``replica_propagators``) ``/ sqrt(R)``, ``R - 1`` degrees of freedom: the error of
        the sampled Jacobian and covariances at the given saddle, without the saddle's own
        Monte-Carlo error.  With ``saddles = K >= 2`` independent solves it is the error of
        their mean from the spread of the ``K`` per-saddle means (saddle and sampling errors,
        ``K - 1`` degrees of freedom), at least the replicas' sampling error.  ``None`` for the closed-form
        theories (:func:`deep_linear_fluctuations`, :func:`two_layer_fluctuations`) and with one
        replica."""
        shape, M = self._linear_map(name, layer)
        reps = self.replica_propagators
        if reps is None or len(reps) < 2:
            return None
        if M.ndim == 1:
            var = reps[:, M, M]
        else:
            var = np.einsum("ij,rjk,ik->ri", M, reps, M)
        K = int(self.saddles)
        if K < 2:
            se = var.std(axis=0, ddof=1) / np.sqrt(len(reps))
        else:                          # one-way layout: saddles x replicas
            var = var.reshape(K, -1, var.shape[-1])
            R = var.shape[1]
            between = R * var.mean(axis=1).var(axis=0, ddof=1)
            within = var.var(axis=1, ddof=1).mean(axis=0) if R > 1 else 0.0 * between
            se = np.sqrt(np.maximum(between, within) / (K * R))
        return se.reshape(shape) / _width(widths)

    def std(self, name: str, layer: int | None = None, *, widths: float) -> np.ndarray:
        """Standard deviation of ``name`` across networks of width ``widths`` (the half-width of
        a one-sigma error band around :meth:`value`)."""
        return np.sqrt(np.maximum(self.variance(name, layer, widths=widths), 0.0))

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """The infinite-width prediction (the saddle point), :meth:`DMFTResult.value`."""
        return self.dmft.value(name, layer)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dmft.method}, activation={self.dmft.activation}, hidden_layers={self.hidden_layers}, "
                f"gamma0={self.gamma0:g}, eta={self.grid.eta:g}, steps={self.grid.steps}, "
                f"inputs={self.data.n_all}, center={self.center})")

    def _repr_html_(self) -> str:
        return _html_table(type(self).__name__, [
            ("hidden_layers", self.hidden_layers), ("gamma0", f"{self.gamma0:g}"),
            ("eta", f"{self.grid.eta:g}"), ("steps T", self.grid.steps),
            ("inputs n", self.data.n_all), ("center", self.center),
            ("|grad S| at saddle", f"{self.gradient_norm:.2g}")])


def _width(widths) -> float:
    if widths is None:
        return 1.0
    if isinstance(widths, bool) or not isinstance(widths, (int, float, np.integer, np.floating)):
        raise DomainError(f"widths={widths!r} must be a positive number (the width N)")
    if not (np.isfinite(widths) and widths > 0):
        raise DomainError(f"widths={widths!r} must be a positive finite number (the width N)")
    return float(widths)


def _common_arguments(center, gamma0, y, who: str) -> float:
    """The checks both fluctuation theories make: ``center`` a bool, ``gamma0`` finite and
    nonzero (returned as a float), one output."""
    if not isinstance(center, (bool, np.bool_)):
        raise DomainError(f"center={center!r} must be True or False")
    try:
        g0 = float(gamma0)
    except (TypeError, ValueError):
        raise DomainError(f"gamma0={gamma0!r} must be a real number") from None
    if not np.isfinite(g0) or g0 == 0.0:
        raise DomainError(f"gamma0={gamma0!r} must be finite and nonzero (the output factor "
                          "1/gamma0); approach the lazy limit with a small gamma0")
    if y is not None and np.ndim(y) != 1:
        raise DomainError(f"{who} takes one output: y must be 1-D")
    return g0


@public
def deep_linear_fluctuations(X=None, y=None, *, depth: int | None = None,
                             hidden_layers: int | None = None, gamma0: float, eta: float,
                             steps: int, X_test=None, kernel=None, center: bool = True,
                             chunk: int = 128) -> DMFTFluctuations:
    r"""O(1/N) covariance of the kernels and predictions of deep linear networks (Bordelon & Pehlevan (2022), App. P.7).

    Solves the DMFT (:func:`effth.dmft.solve_deep_linear`, exact closure), then evaluates the
    Hessian of the DMFT action at that saddle point in closed form (module docstring) and
    inverts it: :math:`N\,\mathrm{Cov}=-[\nabla^2S]^{-1}` (eq. (174) and the text after it),
    non-perturbatively in :math:`\gamma_0`.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data as :func:`effth.dmft.prepare_data` (one output).
    depth, hidden_layers : int
        Give exactly one (``hidden_layers = depth - 1 >= 1``).
    gamma0 : float
        Feature-learning strength, nonzero (the μP output factor is :math:`1/\gamma_0`; the lazy
        limit is reached smoothly as :math:`\gamma_0\to0`, results are even in :math:`\gamma_0`).
    eta, steps
        The GD grid (:class:`effth.dmft.TimeGrid`).
    center : bool
        ``True`` (default): covariance of the centred predictions ``f - f(theta_0)``, as
        :func:`effth.simulation.simulate_training` reports them by default; ``False``: the raw
        output, whose initial value :math:`O(1/(\gamma_0\sqrt N))` fluctuates too.
    chunk : int
        Directions per batched complex-step evaluation (memory ``~ chunk (T(n+1))^2``).

    Returns
    -------
    DMFTFluctuations

    Raises
    ------
    DomainError
        ``gamma0 = 0``, a 2-D ``y``, a problem whose Hessian exceeds ``MAX_VARIABLES`` rows
        (fewer ``steps`` or inputs), a singular Hessian, and everything
        :func:`effth.dmft.solve_deep_linear` rejects.
    """
    g0, res, lay, q0, r0 = _deep_linear_saddle("deep_linear_fluctuations", X, y, depth,
                                               hidden_layers, gamma0, eta, steps, X_test, kernel,
                                               center, chunk)
    P = res.n_train
    kx, yv, eta_ = res.data.kx, res.data.y, res.grid.eta
    args = (lay, kx, yv, P, eta_, g0, bool(center))
    gq, gr = _gradient(*args, q0[None], np.zeros((1, lay.nq)), r0[None])
    grad_norm = float(max(np.max(np.abs(gq)), np.max(np.abs(gr)) if gr.size else 0.0))
    scale = max(1.0, float(np.max(np.abs(q0))))
    if grad_norm > 1e-7 * scale:
        raise DomainError(f"the DMFT solution is not stationary for the action (|grad S| = "
                          f"{grad_norm:.3g}); the grid is too coarse for the solver's accuracy")
    # Jacobian of (dS/dqhat, dS/drho) by complex steps along every variable (q, qhat, rho)
    nq, nr, nx = lay.nq, lay.nr, lay.size
    x0 = np.concatenate([q0, np.zeros(nq), r0])
    jac = np.zeros((nq + nr, nx))
    for start in range(0, nx, int(chunk)):
        idx = np.arange(start, min(nx, start + int(chunk)))
        X0 = np.repeat(x0[None].astype(complex), idx.size, axis=0)
        X0[np.arange(idx.size), idx] += 1j * _STEP
        gq, gr = _gradient(*args, X0[:, :nq], X0[:, nq: 2 * nq], X0[:, 2 * nq:])
        jac[:, idx] = np.concatenate([gq, gr], axis=1).imag.T / _STEP
    Hs = np.zeros((nx, nx))
    Hs[nq:, :] = jac                                   # rows qhat, rho
    Hs[:nq, nq:] = jac[:, :nq].T                       # rows q: S_qq = 0 (the site is normalised)
    top = float(np.max(np.abs(Hs)))
    asym = float(np.max(np.abs(Hs[nq:, nq:] - Hs[nq:, nq:].T))) / top
    Hs[nq:, nq:] = 0.5 * (Hs[nq:, nq:] + Hs[nq:, nq:].T)
    rhs = np.zeros((nx, nq))
    rhs[np.arange(nq), np.arange(nq)] = 1.0
    try:
        sol = np.linalg.solve(Hs, rhs)
    except np.linalg.LinAlgError:
        raise DomainError("the Hessian of the DMFT action is singular at this saddle point") from None
    prop = -sol[:nq]
    prop = 0.5 * (prop + prop.T)
    if not np.all(np.isfinite(prop)):
        raise DomainError("the Hessian of the DMFT action is singular at this saddle point")
    return DMFTFluctuations(dmft=res, center=bool(center), propagator=prop,
                            gradient_norm=grad_norm, asymmetry=asym, _layout=lay)



def _two_layer_march(u, r, kx, delta, eta, gamma0, T, fns, center, ddelta=None):
    """Per-node observables of the two-layer single site on the GD grid (Bordelon & Pehlevan
    (2022), eqs. (23), (66) in discrete time, App. M): ``phi(h)``, ``g = phi'(h) z`` and
    ``O_f = gamma0^-1 [z phi(h) - c z(0) phi(h(0))]``, each ``(S, T n)``, with the fields driven
    by the given error signal ``delta`` ``(T, P)``; with ``ddelta`` also their exact derivatives
    along that change of the error signal (forward mode, needs ``phi''``)."""
    phi_f, dphi_f, d2phi_f = fns
    S, n = u.shape[0], kx.shape[0]
    P = delta.shape[1]
    kx_tr = kx[:, :P]
    tangent = ddelta is not None
    a, b = np.zeros((S, P)), np.zeros(S)
    da, db = np.zeros((S, P)), np.zeros(S)
    out = np.zeros((3, S, T, n))
    dout = np.zeros((3, S, T, n)) if tangent else None
    for i in range(T):
        h = u + gamma0 * eta * a @ kx_tr.T
        z = r + gamma0 * eta * b
        ph, d1 = phi_f(h), dphi_f(h)
        g = d1 * z[:, None]
        out[0, :, i], out[1, :, i], out[2, :, i] = ph, g, z[:, None] * ph / gamma0
        if tangent:
            dh = gamma0 * eta * da @ kx_tr.T
            dz = gamma0 * eta * db
            dph = d1 * dh
            dg = d2phi_f(h) * dh * z[:, None] + d1 * dz[:, None]
            dout[0, :, i], dout[1, :, i] = dph, dg
            dout[2, :, i] = (dz[:, None] * ph + z[:, None] * dph) / gamma0
            da = da + dg[:, :P] * delta[i] + g[:, :P] * ddelta[i]
            db = db + dph[:, :P] @ delta[i] + ph[:, :P] @ ddelta[i]
        a = a + g[:, :P] * delta[i]
        b = b + ph[:, :P] @ delta[i]
    if center:
        out[2] -= out[2, :, :1]
        if tangent:
            dout[2] -= dout[2, :, :1]
    out = out.reshape(3, S, T * n)
    return (out, dout.reshape(3, S, T * n)) if tangent else out


@public
def two_layer_fluctuations(X=None, y=None, *, gamma0: float, eta: float, steps: int,
                           activation="tanh", X_test=None, kernel=None, center: bool = True,
                           nodes: int | None = None, max_nodes: int = 64_000) -> DMFTFluctuations:
    r"""O(1/N) covariance of kernels and predictions of two-layer networks (Bordelon & Pehlevan (2022), App. P.7).

    With one hidden layer there are no responses and the fields depend on the order parameters
    only through the predictions (eqs. (23), (66)), so the Hessian of App. P.7.1 has the blocks
    :math:`-\partial^2S/\partial\hat k\partial\hat k=\kappa=\langle OO
angle-\langle O
angle
    \langle O
angle` (the four-point single-site correlators of :math:`O=(\phi\phi, gg,
    z\phi/\gamma_0)`), :math:`-\partial^2S/\partial\hat k\partial k=-1+D`,
    :math:`D=\partial\langle O
angle/\partial f`, and :math:`\partial^2S/\partial k\partial k=0`;
    its inverse is the propagator :math:`N\,\mathrm{Cov}(k)=(1-D)^{-1}\kappa(1-D)^{-	op}`.  The
    Gaussian average over :math:`(u,r)` is the tensor quadrature of
    :func:`effth.dmft.solve_two_layer` (``nodes``, ``max_nodes`` as there), :math:`D` is
    the exact derivative of the marched fields (forward mode, exact for the rule).

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (one output).
    gamma0, eta, steps
        Nonzero feature-learning strength and the GD grid.
    activation : str, Activation or sympy.Expr
        A smooth activation (tanh, erf, linear, ...); kinked ones (ReLU) are rejected
        (:math:`D` needs :math:`\phi''`).
    center : bool
        Centred predictions ``f - f(theta_0)`` (default, as the trainer reports) or the raw output.

    Returns
    -------
    DMFTFluctuations
        ``dmft`` is the :func:`effth.dmft.solve_two_layer` solution with the same rule.

    Raises
    ------
    DomainError
        ``gamma0 = 0``, 2-D ``y``, a kinked activation, a problem too large (``MAX_VARIABLES``),
        or what :func:`effth.dmft.solve_two_layer` rejects.
    """
    from effth.dmft.solvers.lazy import resolve_activation
    from effth.dmft.solvers.two_layer import _nodes, solve_two_layer

    g0 = _common_arguments(center, gamma0, y, "two_layer_fluctuations")
    res = solve_two_layer(X, y, gamma0=g0, eta=eta, steps=steps, activation=activation,
                          X_test=X_test, kernel=kernel, method="quadrature", nodes=nodes,
                          max_nodes=max_nodes, quad_tol=None)
    act = resolve_activation(activation)
    if tuple(getattr(act, "kinks", ())):
        raise DomainError(f"activation {res.activation!r} has kinks at {tuple(act.kinks)}: the "
                          "response of the fields to the predictions needs phi'' (a delta there); "
                          "use a smooth activation")
    fns = (act.numpy(0), act.numpy(1), act.numpy(2))
    T, n, P = res.grid.steps, res.data.n_all, res.n_train
    lay = _Layout(1, T, n, g_samples=True)
    if 2 * lay.nq > MAX_VARIABLES:
        raise DomainError(f"the action's Hessian would have {2 * lay.nq} rows (> {MAX_VARIABLES}) "
                          f"for steps={T}, inputs={n}; use fewer steps (a larger eta) or inputs")
    u, r, w, _, _ = _nodes(res.data.kx, "quadrature", nodes, max_nodes, 0, 0, 1, act, "auto")
    r = r[:, 0]
    kx, yv, eta_ = res.data.kx, res.data.y, res.grid.eta
    delta0 = yv[None, :] - res.f[:, :P]                   # the saddle's error signal
    iH, jH, iG, jG = lay.iuH[0], lay.iuH[1], lay.iuG[0], lay.iuG[1]

    def observables(ph, g, of):
        return np.concatenate([ph[:, iH] * ph[:, jH], g[:, iG] * g[:, jG], of], axis=1)

    O = observables(*_two_layer_march(u, r, kx, delta0, eta_, g0, T, fns, bool(center)))
    mean = w @ O
    q0 = np.concatenate([res.phi[0].reshape(T * n, T * n)[lay.iuH],
                         res.g[0].reshape(T * n, T * n)[lay.iuG], res.f.reshape(-1)])
    grad_norm = float(np.max(np.abs(mean - q0)))
    dev = O - mean
    kappa = (dev.T * w) @ dev
    D = np.zeros((lay.nq, lay.nq))
    for t in range(T):                    # D = d<O>/df: f enters the fields through Delta = y - f
        for alpha in range(P):
            dd = np.zeros((T, P))
            dd[t, alpha] = -1.0
            (ph, g, _), (dph, dg, dof) = _two_layer_march(u, r, kx, delta0, eta_, g0, T, fns,
                                                          bool(center), dd)
            dO = np.concatenate([dph[:, iH] * ph[:, jH] + ph[:, iH] * dph[:, jH],
                                 dg[:, iG] * g[:, jG] + g[:, iG] * dg[:, jG], dof], axis=1)
            D[:, lay.off_f + t * n + alpha] = w @ dO
    M = np.eye(lay.nq) - D
    prop = np.linalg.solve(M, np.linalg.solve(M, kappa).T)
    prop = 0.5 * (prop + prop.T)
    return DMFTFluctuations(dmft=res, center=bool(center), propagator=prop,
                            gradient_norm=grad_norm, asymmetry=0.0, _layout=lay)


# ---------------------------------------------------------------------------------------------
# deep nonlinear networks: the Hessian of App. P.7.1 from the sampled single site
# ---------------------------------------------------------------------------------------------

class _Site:
    """One layer's single site at fixed sources: the fields ``V = (phi(h), g, z)`` ``(S, 3 T n)``
    and their pathwise derivatives with respect to the sources ``s = (u, r)`` (``m = 2 T n``),
    by central differences of the forward substitution of
    :func:`effth.dmft.solvers.monte_carlo._solve_fields` (common random numbers)."""

    def __init__(self, s, Cm, Dm, fns, T, n, eps):
        self.s, self.Cm, self.Dm, self.fns, self.T, self.n, self.eps = s, Cm, Dm, fns, T, n, eps
        self.Tn, self.m = T * n, 2 * T * n

    def V(self, s):
        from effth.dmft.solvers.monte_carlo import _solve_fields
        Tn = self.Tn
        h, z, g = _solve_fields(s[:, :Tn], s[:, Tn:], self.Cm, self.Dm, self.fns[0], self.fns[1],
                                self.T, self.n, 1)
        return np.concatenate([self.fns[0](h), g, z], axis=1)

    def _shift(self, s):
        E = self.eps * np.eye(self.m)
        return np.concatenate([s[None] + E[:, None], s[None] - E[:, None]]).reshape(-1, self.m)

    def jac(self, s):
        """``(S, 3Tn, m)``."""
        S = s.shape[0]
        Vs = self.V(self._shift(s)).reshape(2, self.m, S, -1)
        return ((Vs[0] - Vs[1]) / (2 * self.eps)).transpose(1, 2, 0)

    def hess(self, s):
        """``(S, 3Tn, m, m)``."""
        S = s.shape[0]
        J = self.jac(self._shift(s)).reshape(2, self.m, S, -1, self.m)
        return ((J[0] - J[1]) / (2 * self.eps)).transpose(1, 2, 3, 0)

    def third_entries(self, count, a, b, c, chunk=64):
        """Means over the first ``count`` samples of the third derivatives
        ``d^3 V / ds_a ds_b ds_c`` ``(3Tn, len(a))`` at the index triples ``(a, b, c)``: the product of
        the three central differences, the same stencil as :meth:`third_mean` restricted to
        the entries needed (8 evaluations per triple and sample)."""
        s = self.s[:count]
        out = np.zeros((3 * self.Tn, len(a)))
        signs = np.array([[x, y, w] for x in (1, -1) for y in (1, -1) for w in (1, -1)], float)
        for start in range(0, len(a), chunk):
            sl = slice(start, min(len(a), start + chunk))
            k = sl.stop - sl.start
            E = np.zeros((k, 3, self.m))
            E[np.arange(k), 0, np.asarray(a[sl])] = self.eps
            E[np.arange(k), 1, np.asarray(b[sl])] = self.eps
            E[np.arange(k), 2, np.asarray(c[sl])] = self.eps
            shifts = np.einsum("qd,kdm->qkm", signs, E)                  # (8, k, m)
            Vs = self.V((s[None, None] + shifts[:, :, None]).reshape(-1, self.m))
            Vs = Vs.reshape(8, k, count, -1).mean(axis=2)                  # (8, k, 3Tn)
            w = signs.prod(axis=1)
            out[:, sl] = np.einsum("q,qkf->fk", w, Vs) / (8 * self.eps ** 3)
        return out

    def third_mean(self, count):
        """Mean of the third derivatives ``(3Tn, m, m, m)`` over the first ``count`` samples."""
        out = np.zeros((3 * self.Tn, self.m, self.m, self.m))
        s = self.s[:count]
        for c in range(self.m):
            e = np.zeros(self.m)
            e[c] = self.eps
            out[..., c] = (self.hess(s + e) - self.hess(s - e)).mean(axis=0) / (2 * self.eps)
        return out


def _nonlinear_site_hessian(res, samples, seed, eps, center, third, response_noise=True,
                            check=None):
    """``(J, Sigma, nq)`` of :func:`_deep_nonlinear_fluctuations` (see there).  ``check``, a
    dict, receives the single-site map at the saddle: ``'est'``, ``'se'`` (its sampling error)
    and ``'saddle'`` (the saddle's own values) of every order parameter ``k``."""
    from effth.dmft.solvers.lazy import is_linear, resolve_activation
    from effth.dmft.solvers.monte_carlo import _root

    act = resolve_activation(res.activation)
    fns = (act.numpy(0), act.numpy(1), act.numpy(2))
    L, T, n, P, g0, eta = (res.hidden_layers, res.grid.steps, res.data.n_all, res.n_train,
                           res.gamma0, res.grid.eta)
    Tn = T * n
    lay = _Layout(L, T, n, g_samples=True)
    rng = np.random.default_rng(seed)
    tt = np.repeat(np.arange(T), n)                         # time of index (t, mu)
    mask_a = tt[None, :] < tt[:, None]                      # Ab: r-time < phi-time
    mask_b = tt[None, :] <= tt[:, None]                     # Bb: u-time <= g-time
    ia, ib = np.nonzero(mask_a), np.nonzero(mask_b)
    na, nb = len(ia[0]), len(ib[0])
    nk = lay.nq + (L - 1) * (na + nb)
    offa = [lay.nq + k * na for k in range(L - 1)]
    offb = [lay.nq + (L - 1) * na + k * nb for k in range(L - 1)]
    Phi = [res.phi[k].reshape(Tn, Tn) for k in range(L)]
    G = [res.g[k].reshape(Tn, Tn) for k in range(L)]
    Ab = [g0 * res.A[k].reshape(Tn, Tn) for k in range(L - 1)]
    Bb = [g0 * res.B[k].reshape(Tn, Tn) for k in range(L - 1)]
    delta = np.zeros((T, n))
    delta[:, :P] = res.delta
    dl = delta.reshape(Tn)
    train = np.tile(np.arange(n) < P, T)
    strict = np.kron(np.tril(np.ones((T, T)), -1), np.ones((n, n)))
    K0 = np.tile(res.data.kx, (T, T))
    iH, jH = lay.iuH
    J = np.zeros((nk, nk))
    Sig = np.zeros((nk, nk))
    est, est_se = np.zeros(nk), np.zeros(nk)
    for ell in range(1, L + 1):
        Pprev = K0 if ell == 1 else Phi[ell - 2]
        Gnext = np.ones((Tn, Tn)) if ell == L else G[ell]
        Cm = g0 * eta * strict * Pprev * dl[None, :]
        Dm = g0 * eta * strict * Gnext * dl[None, :]
        if ell >= 2:
            Cm = Cm + Ab[ell - 2]
        if ell <= L - 1:
            Dm = Dm + Bb[ell - 1]
        s = np.concatenate([rng.standard_normal((samples, Tn)) @ _root(Pprev),
                            rng.standard_normal((samples, Tn)) @ _root(Gnext)], axis=1)
        site = _Site(s, Cm, Dm, fns, T, n, eps)
        V, Jv, Hv = site.V(s), site.jac(s), site.hess(s)
        # third derivatives (Price's theorem on the responses); zero for a linear activation
        T3 = None
        if L > 1 and (ell <= L - 1 or ell >= 2):
            # entries [field, response source, i, j] the Price terms of the responses read:
            # i <= j both u (the kernel below) or both r (the kernel above), every response source
            src = np.unique(np.concatenate([Tn + ia[1]] * (ell <= L - 1) + [ib[1]] * (ell >= 2)))
            pairs = ([(i, j) for i, j in zip(iH, jH)] if ell >= 2 else []) + \
                    ([(Tn + i, Tn + j) for i, j in zip(iH, jH)] if ell <= L - 1 else [])
            ta3 = np.repeat(src, len(pairs))
            tb3 = np.tile([p[0] for p in pairs], len(src))
            tc3 = np.tile([p[1] for p in pairs], len(src))
            T3 = {}
            vals = (np.zeros((3 * Tn, len(ta3))) if is_linear(act)
                    else site.third_entries(third, ta3, tb3, tc3))
            for k in range(len(ta3)):
                T3[(int(ta3[k]), int(tb3[k]), int(tc3[k]))] = vals[:, k]
        # observables as sums of products V_a V_b: rows (output index, a, b, coefficient)
        terms = [(lay.offH[ell - 1] + k, iH[k], jH[k], 1.0) for k in range(lay.nH)]
        terms += [(lay.offG[ell - 1] + k, Tn + iH[k], Tn + jH[k], 1.0) for k in range(lay.nG)]
        if ell == L:
            for k in range(Tn):
                terms.append((lay.off_f + k, 2 * Tn + k, k, 1.0 / g0))
                if center:
                    terms.append((lay.off_f + k, 2 * Tn + k % n, k % n, -1.0 / g0))
        to, ta, tb, tc = (np.array(x) for x in zip(*terms))
        rows = np.unique(to)
        W = np.zeros((len(to), len(rows)))
        W[np.arange(len(to)), np.searchsorted(rows, to)] = tc
        O = (V[:, ta] * V[:, tb]) @ W                                          # (S, nO)
        dO = np.einsum("stp,tk->skp", Jv[:, ta] * V[:, tb, None] + V[:, ta, None] * Jv[:, tb], W)
        # the site's outputs Y: observables, then responses (means of Jv entries)
        out_idx = [rows]
        # generalized observables of this site (the conjugate of each of its outputs):
        # plain O, or X = d_p (. W_w) (p a source, w a field index of V)
        gen_p, gen_w, gen_idx = [], [], []
        if ell <= L - 1:                 # Ab^ell = <d phi / d r>; conjugate Bb^ell_{ji}: d_{r_j}(. phi_i)
            out_idx.append(offa[ell - 1] + np.arange(na))
            gen_idx.append(offa[ell - 1] + np.arange(na))
            gen_p.append(Tn + ia[1])
            gen_w.append(ia[0])
        if ell >= 2:                     # Bb^{ell-1} = <d g / d u>; conjugate Ab^{ell-1}_{ji}: d_{u_j}(. g_i)
            out_idx.append(offb[ell - 2] + np.arange(nb))
            gen_idx.append(offb[ell - 2] + np.arange(nb))
            gen_p.append(ib[1])
            gen_w.append(Tn + ib[0])
        # response outputs as (field index k, source index l) of the Jacobian
        resp_k, resp_l = [], []
        if ell <= L - 1:
            resp_k.append(ia[0]); resp_l.append(Tn + ia[1])
        if ell >= 2:
            resp_k.append(Tn + ib[0]); resp_l.append(ib[1])
        rk = np.concatenate(resp_k) if resp_k else np.zeros(0, int)
        rl = np.concatenate(resp_l) if resp_l else np.zeros(0, int)
        out_all = np.concatenate(out_idx)
        nR = len(rk)
        Y = np.concatenate([O, Jv[:, rk, rl]], axis=1)            # the site's outputs per sample
        est[out_all] = Y.mean(axis=0)
        est_se[out_all] = Y.std(axis=0, ddof=1) / np.sqrt(samples)

        def dmean(i_src, wfield):
            """d<Y>/d(parameter moving source i_src by W_wfield per sample), for all outputs Y
            (observables, responses): (nO + nR,)."""
            w = V[:, wfield]
            a = (dO[:, :, i_src] * w[:, None]).mean(axis=0)
            b = (Hv[:, rk, i_src, rl] * w[:, None] + Jv[:, rk, i_src] * Jv[:, wfield, rl]).mean(axis=0)
            return np.concatenate([a, b])

        def price(i, j):
            """d<Y>/dK_ij of the source covariance (i, j both u or both r), unique entry."""
            c = 1.0 if i != j else 0.5
            d2O = np.einsum("st,tk->sk", Hv[:, ta, i, j] * V[:, tb] + Jv[:, ta, i] * Jv[:, tb, j]
                            + Jv[:, ta, j] * Jv[:, tb, i] + V[:, ta] * Hv[:, tb, i, j], W)
            a = d2O.mean(axis=0)
            b = (np.array([T3[(int(l_), min(i, j), max(i, j))][k_] for k_, l_ in zip(rk, rl)])
                 if nR else np.zeros(0))
            return c * np.concatenate([a, b])

        # J: derivatives of this site's outputs with respect to every input order parameter
        col = {}
        def add(kidx, vec):
            col[kidx] = col.get(kidx, 0.0) + vec
        for k in range(lay.nH):          # the kernel below, Phi^{ell-1}: source covariance and drift
            if ell == 1:
                break
            a, b = iH[k], jH[k]
            v = price(a, b)
            for (x, y) in {(a, b), (b, a)}:
                if strict[x, y]:
                    v = v + g0 * eta * dl[y] * dmean(x, Tn + y)
            add(lay.offH[ell - 2] + k, v)
        for k in range(lay.nG):          # the kernel above, G^{ell+1}
            if ell == L:
                break
            a, b = iH[k], jH[k]
            v = price(Tn + a, Tn + b)
            for (x, y) in {(a, b), (b, a)}:
                if strict[x, y]:
                    v = v + g0 * eta * dl[y] * dmean(Tn + x, y)
            add(lay.offG[ell] + k, v)
        for y in range(Tn):              # the predictions through Delta = y - f
            if not train[y]:
                continue
            v = 0.0
            for x in range(Tn):
                if strict[x, y]:
                    v = v - g0 * eta * (Pprev[x, y] * dmean(x, Tn + y) + Gnext[x, y] * dmean(Tn + x, y))
            add(lay.off_f + y, v)
        if ell >= 2:                     # Ab^{ell-1} causal entries in Cm
            for k in range(na):
                add(offa[ell - 2] + k, dmean(ia[0][k], Tn + ia[1][k]))
        if ell <= L - 1:                 # Bb^ell causal entries in Dm
            for k in range(nb):
                add(offb[ell - 1] + k, dmean(Tn + ib[0][k], ib[1][k]))
        for kidx, v in col.items():
            J[out_all, kidx] += v
        # Sigma: generalized covariances of this site's outputs
        Oc = O - O.mean(axis=0)
        Sig[np.ix_(rows, rows)] += Oc.T @ Oc / samples
        if gen_p and response_noise:
            gp, gw, gi = np.concatenate(gen_p), np.concatenate(gen_w), np.concatenate(gen_idx)
            Wg = V[:, gw]                                                    # (S, nX)
            Jg = Jv[:, gw, gp]                                               # d_p W_w
            cross = (dO[:, :, gp] * Wg[:, None, :] + O[:, :, None] * Jg[:, None, :]).mean(axis=0) \
                - np.outer(O.mean(axis=0), Jg.mean(axis=0))
            Sig[np.ix_(rows, gi)] += cross
            Sig[np.ix_(gi, rows)] += cross.T
            Hpp = Hv[:, gw[:, None], gp[:, None], gp[None, :]]              # (S, nX, nX): d_p d_p' W_w
            JJ = Jv[:, gw[:, None], gp[None, :]]                             # d_p' W_w
            A1 = (Hpp * Wg[:, None, :]).mean(axis=0)                        # H_w[p,p'] W_w'
            XX = (A1 + A1.T + (Jg[:, :, None] * Jg[:, None, :]).mean(axis=0)
                  + (JJ * np.swapaxes(JJ, 1, 2)).mean(axis=0)
                  - np.outer(Jg.mean(axis=0), Jg.mean(axis=0)))
            Sig[np.ix_(gi, gi)] += XX
    if check is not None:
        saddle, saddle_se = np.zeros(nk), np.zeros(nk)
        se_of = (res.mc_stderr or {}).get
        for ell in range(L):
            saddle[lay.offH[ell]: lay.offH[ell] + lay.nH] = Phi[ell][iH, jH]
            saddle[lay.offG[ell]: lay.offG[ell] + lay.nG] = G[ell][iH, jH]
            for key, off in (("phi", lay.offH[ell]), ("g", lay.offG[ell])):
                if se_of(key) is not None:
                    saddle_se[off: off + lay.nH] = np.asarray(se_of(key))[ell].reshape(Tn, Tn)[iH, jH]
        saddle[lay.off_f: lay.off_f + Tn] = np.asarray(res.f).reshape(Tn)
        if se_of("f") is not None:
            saddle_se[lay.off_f: lay.off_f + Tn] = np.asarray(se_of("f")).reshape(Tn)
        for k in range(L - 1):
            saddle[offa[k]: offa[k] + na] = Ab[k][ia]
            saddle[offb[k]: offb[k] + nb] = Bb[k][ib]
        check.update(est=est, se=est_se, saddle=saddle, saddle_se=saddle_se, nq=lay.nq)
    return J, Sig, lay


#: bytes per sample and (T n)^3 of the second pathwise derivatives of one layer's site (measured
#: peak ~1200 at T n = 6, 8)
_SITE_BYTES = 1300.0
#: seconds per sample and (T n)^4 (first and second derivatives) or (T n)^5 (third derivatives)
#: of one layer's site: optimistic bounds (measured 3.5e-7 and 1e-7 on one core)
_SITE_SECONDS, _THIRD_SECONDS = 1e-7, 3e-8


def _saddle_consistency(check) -> tuple[float, float]:
    """``(max |z|, rms z)`` of the single-site map against the saddle over the kernels and
    predictions (the entries with a Monte-Carlo error)."""
    nq = check["nq"]
    d = (check["est"] - check["saddle"])[:nq]
    se = np.sqrt(check["se"][:nq] ** 2 + check["saddle_se"][:nq] ** 2)
    ok = se > 1e-12 * max(1.0, float(np.max(np.abs(check["saddle"][:nq]))))
    if not np.any(ok):
        return 0.0, 0.0
    z = d[ok] / se[ok]
    return float(np.max(np.abs(z))), float(np.sqrt(np.mean(z ** 2)))


def _check_nonlinear_saddle(res, center) -> None:
    """The refusals of :func:`deep_nonlinear_fluctuations` that the result itself shows."""
    from effth.dmft.solvers.lazy import resolve_activation

    if not isinstance(res, DMFTResult) or type(res) is not DMFTResult:
        raise DomainError(f"res must be a DMFTResult of solve_monte_carlo (or solve_two_layer), "
                          f"got {type(res).__name__}")
    method = str(res.method)
    if not (method == "monte_carlo" or method.startswith("two_layer")):
        raise DomainError(f"res comes from method={method!r}: deep_nonlinear_fluctuations "
                          "samples the single site of solve_monte_carlo (or solve_two_layer); "
                          "use deep_linear_fluctuations for solve_deep_linear's closed form")
    if res.closure != "exact":
        raise DomainError(f"res was solved with closure={res.closure!r}: the fluctuations of the "
                          "predictions f = <z phi>/gamma0 need closure='exact'")
    if res.bias:
        raise DomainError("res has trainable biases: not covered by deep_nonlinear_fluctuations "
                          "(solve without bias=True)")
    if np.ndim(res.f) != 2 or np.ndim(res.data.y) != 1:
        raise DomainError("res has several outputs: deep_nonlinear_fluctuations takes one output "
                          "(a 1-D y)")
    if res.A.shape[1:] != (res.grid.steps, res.data.n_all) * 2 and res.hidden_layers > 1:
        raise DomainError(f"res holds responses of shape {res.A.shape[1:]}, not "
                          f"(T, n, T, n): not a one-output Monte-Carlo saddle")
    _common_arguments(center, res.gamma0, None, "deep_nonlinear_fluctuations")
    act = resolve_activation(res.activation)
    if tuple(getattr(act, "kinks", ())):
        raise DomainError(f"activation {res.activation!r} has kinks at {tuple(act.kinks)}: the "
                          "pathwise second and third derivatives of the fields need a smooth "
                          "activation")


@public
def deep_nonlinear_fluctuations(res, *, center: bool = True, samples: int = 2000,
                                replicas: int = 4, seed=0, eps: float = 1e-3,
                                third_samples: int = 1000, check_saddle: bool = True) -> DMFTFluctuations:
    r"""O(1/N) covariance of the kernels and predictions of deep nonlinear networks (Bordelon & Pehlevan (2022), App. P.7).

    The Gaussian fluctuations :math:`k\sim\mathcal N(k^*,\tfrac1N(-\nabla^2S[k^*])^{-1})` of
    eq. (174) at a saddle :math:`k^*` of :func:`effth.dmft.solve_monte_carlo` (any smooth
    activation, any depth, plain full-batch GD, one output), with the Hessian blocks of App. P.7.1
    estimated from the sampled single site.  The order parameters are
    :math:`k=(\Phi^\ell,G^\ell,f)` *and the causal entries of the responses*
    :math:`\bar A^\ell=\langle\partial\phi(h^\ell)/\partial r^\ell\rangle`,
    :math:`\bar B^\ell=\langle\partial g^{\ell+1}/\partial u^{\ell+1}\rangle` (App. D.6, eq.
    (53)); their conjugates are :math:`\hat k` and the *anticausal* entries of the partner
    response (the pairing :math:`-\mathrm{tr}\,\bar A\bar B` of the action).  With
    :math:`\partial^2S/\partial k\partial k=0` (the site is normalised for causal fields),

    .. math:: N\,\mathrm{Cov}(k)=(1-J)^{-1}\Sigma(1-J)^{-\top},

    :math:`J=\partial F/\partial k` the Jacobian of the single-site map :math:`k\mapsto F(k)`
    (the blocks :math:`-1+\partial H/\partial H'` of App. P.7.1) and :math:`\Sigma` the
    generalised covariances of the site's observables (the blocks
    :math:`\langle hhhh\rangle-HH`, and for the responses the Martin-Siggia-Rose correlators with
    the response fields :math:`\hat u,\hat r`, written as derivatives with respect to the
    sources).  Derivatives with respect to drifts and responses are pathwise, those with respect
    to a source covariance by Price's theorem, all by central differences (step ``eps``) of the
    solver's forward substitution on common random numbers; the third derivatives that the
    responses' Price terms need use the first ``third_samples`` draws.  Checks
    (``docs/dmft.md``): :func:`deep_linear_fluctuations` at :math:`\phi=\mathrm{id}`,
    :func:`two_layer_fluctuations` at :math:`L=1`, and tanh μP networks at :math:`L=2`.

    Parameters
    ----------
    res : DMFTResult or sequence of DMFTResult
        A converged saddle of :func:`effth.dmft.solve_monte_carlo` (``method='monte_carlo'``,
        ``closure='exact'``, one output, no biases, a smooth activation; either ``responses``
        mode: a ``'stein'`` saddle, whose response entries differ but whose action on the
        fields is the same, gave the covariance of a ``'jacobian'`` one within 1 standard error
        at tanh, ``L = 2``) or of :func:`effth.dmft.solve_two_layer` (``L = 1``).  Weight decay,
        Langevin noise, momentum, unequal widths and weight variances are not covered; a
        result is not told apart by its fields, so the saddle is checked instead
        (``check_saddle``).  A sequence: ``K >= 2`` independent solves of the same problem
        (e.g. ``seed=0, 1, 2``); each gets ``replicas`` samplings, the result is the mean over
        all, its saddle (``dmft``) the mean of the solves, and :meth:`DMFTFluctuations.variance_stderr`
        then includes the saddles' own Monte-Carlo error (from their spread).
    center : bool
        ``True``: the centred predictions ``f - f(theta_0)`` of
        :func:`effth.simulation.simulate_training`; ``False``: the raw output.
    samples : int
        Single-site draws per layer and replica.  Memory about ``1300 samples (T n)^3`` bytes
        (refused above the memory bound, ``$EFFTH_MAX_BYTES``); time about ``L samples (T n)^4``
        times ``3.5e-7`` s per replica on one core, plus the third derivatives.
    replicas : int
        Independent samplings of the site (seeds spawned from ``seed``); ``propagator`` is their
        mean and :meth:`DMFTFluctuations.variance_stderr` their spread ``/ sqrt(replicas)`` (at least 2
        for an error estimate).  The relative error of an entry of ``N Var`` falls like
        ``1 / sqrt(replicas * samples)``: 1-10% at ``replicas * samples = 4000``, 0.5-3% at
        16000 (tanh, ``L = 2``, ``T n = 6``; ``docs/dmft.md``).
    seed : int
    eps : float
        Central-difference step of the pathwise derivatives, ``0 < eps <= 0.1`` (the fields are
        smooth: truncation error ``O(eps^2)``, rounding ``O(1e-16 / eps^3)`` in the third
        derivatives).
    third_samples : int
        Draws (at most ``samples``) for the mean third derivatives (``L >= 2``; they cost
        about ``1e-7 L (T n)^5`` s per draw and replica).
    check_saddle : bool
        Re-sample the single-site map at the saddle and refuse it if it is no plain-GD fixed
        point: max ``|z| > 8`` over the kernels and predictions, ``z`` the difference over the
        combined sampling error of the site and the saddle's ``res.stderr`` (an unconverged
        solve, or one with weight decay, noise, momentum, unequal widths or weight variances;
        only gross departures: the entries' errors are strongly correlated, so a tighter
        bound would refuse good saddles).  The statistic is ``saddle_z`` of the result.

    Returns
    -------
    DMFTFluctuations
        ``variance``/``covariance``/``std`` as for the closed forms; ``variance_stderr`` the Monte-Carlo
        error of ``variance`` from the replicas.  With one saddle the saddle's own error
        (``res.stderr``) is not in it; pass several independent solves to include it.

    Raises
    ------
    DomainError
        A result of another solver (deep linear, static NTK, rules, CNN), the NTK closure,
        biases, several outputs, a kinked activation, ``gamma0 = 0``, bad ``samples``,
        ``replicas``, ``eps``, ``third_samples``, a problem above the memory or work bound,
        a saddle that fails ``check_saddle``, a singular ``1 - J``.
    """
    from effth._validate import check_memory, check_work

    saddles = list(res) if isinstance(res, (list, tuple)) else [res]
    if not saddles:
        raise DomainError("res is an empty sequence: give a DMFTResult of solve_monte_carlo")
    for r in saddles:
        _check_nonlinear_saddle(r, center)
    res = saddles[0]
    for r in saddles[1:]:
        if not (r.hidden_layers == res.hidden_layers and r.grid.steps == res.grid.steps
                and r.grid.eta == res.grid.eta and r.gamma0 == res.gamma0
                and r.activation == res.activation and r.data.kx.shape == res.data.kx.shape
                and np.allclose(r.data.kx, res.data.kx) and np.allclose(r.data.y, res.data.y)):
            raise DomainError("the saddles in res solve different problems (data, grid, depth, "
                              "gamma0 or activation differ): give independent solves of one "
                              "problem (other seeds)")
    samples, replicas, third_samples = (integer(v, name, minimum=1) for v, name in (
        (samples, "samples"), (replicas, "replicas"), (third_samples, "third_samples")))
    if samples < 100:
        raise DomainError(f"samples={samples} is too few for the single-site covariances "
                          "(at least 100; use more replicas rather than fewer samples)")
    if third_samples > samples:
        raise DomainError(f"third_samples={third_samples} must not exceed samples={samples}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) \
            or not (np.isfinite(eps) and 0.0 < eps <= 0.1):
        raise DomainError(f"eps={eps!r} must be a finite step with 0 < eps <= 0.1")
    seed = integer(seed, "seed")
    L, Tn = res.hidden_layers, res.grid.steps * res.data.n_all
    lay = _Layout(L, res.grid.steps, res.data.n_all, g_samples=True)
    rows = lay.nq + (L - 1) * Tn * (Tn + 1)
    check_memory(_SITE_BYTES * max(samples, third_samples) * Tn ** 3 + 24.0 * rows ** 2,
                 f"the single site's second derivatives (samples={samples}, T n={Tn}: "
                 f"about {_SITE_BYTES:g} samples (T n)^3 bytes)",
                 "use fewer samples (and more replicas), fewer steps or inputs")
    seconds = len(saddles) * replicas * L * (_SITE_SECONDS * samples * Tn ** 4
                              + (_THIRD_SECONDS * third_samples * Tn ** 5 if L > 1 else 0.0))
    check_work(seconds, f"deep_nonlinear_fluctuations ({len(saddles)} saddle(s), replicas={replicas}, samples={samples}, "
               f"third_samples={third_samples}, T n={Tn}, L={L}; cost ~ samples (T n)^4 + "
               "third_samples (T n)^5 per layer)",
               "use fewer samples or third_samples, fewer steps (a larger eta) or inputs")
    fits, reps_all, zs = [], [], []
    for k, r in enumerate(saddles):
        check = {}
        sk = int(seed) if len(saddles) == 1 else int(np.random.SeedSequence([int(seed), k]).generate_state(1)[0])
        try:
            fl, reps = _deep_nonlinear_fluctuations(r, center=bool(center), samples=int(samples),
                                                    replicas=int(replicas), seed=sk,
                                                    eps=float(eps), third_samples=int(third_samples),
                                                    check=check)
        except np.linalg.LinAlgError:
            raise DomainError("1 - J is singular at this saddle (the single-site map has a unit "
                              "eigenvalue)") from None
        zmax, zrms = _saddle_consistency(check)
        if check_saddle and zmax > 8.0:
            raise DomainError(
                f"res{'' if len(saddles) == 1 else f'[{k}]'} is not a fixed point of the plain-GD "
                f"single site: re-sampled at the saddle, the kernels and predictions differ by up "
                f"to {zmax:.3g} (rms {zrms:.3g}) standard errors. An unconverged solve (more "
                "iterations or samples), or one with weight decay, temperature, momentum, "
                "width_ratios or weight_variances, which deep_nonlinear_fluctuations does not "
                "cover; check_saddle=False skips the test")
        if not np.all(np.isfinite(fl.propagator)):
            raise DomainError("the sampled propagator is not finite (1 - J singular at this saddle)")
        fits.append(fl)
        reps_all += [rp.propagator for rp in reps]
        zs.append(zmax)
    fl = fits[0]
    if len(saddles) > 1:
        fl.dmft = _mean_saddle(saddles)
        fl.propagator = np.mean([f.propagator for f in fits], axis=0)
    fl.replica_propagators = np.stack(reps_all)
    fl.saddles = len(saddles)
    fl.saddle_z = float(max(zs))
    return fl


def _mean_saddle(saddles):
    """The mean of independent Monte-Carlo solves of one problem (``mc_stderr / sqrt(K)``)."""
    import dataclasses

    K = len(saddles)
    mean = {k: np.mean([getattr(r, k) for r in saddles], axis=0)
            for k in ("phi", "g", "A", "B", "f", "delta")}
    se = None
    if all(r.mc_stderr for r in saddles):
        keys = set.intersection(*(set(r.mc_stderr) for r in saddles))
        se = {k: np.sqrt(np.mean([np.asarray(r.mc_stderr[k]) ** 2 for r in saddles], axis=0) / K)
              for k in keys}
    return dataclasses.replace(saddles[0], mc_stderr=se, fields=None, **mean)


def _deep_nonlinear_fluctuations(res: DMFTResult, *, center: bool = True, samples: int = 4000,
                                 replicas: int = 4, seed=0, eps: float = 1e-3,
                                 third_samples: int = 1000, response_noise: bool = True,
                                 check=None):
    """``(DMFTFluctuations, replicas)`` at the saddle ``res`` (a
    :func:`effth.dmft.solve_monte_carlo` or deep linear result, one output, plain GD); no
    input checks (:func:`deep_nonlinear_fluctuations` is the public form).  ``check``: a dict
    that receives the single-site map at the saddle (mean of the replicas)."""
    props, checks = [], []
    for rep in range(int(replicas)):
        checks.append({})
        J, Sig, lay = _nonlinear_site_hessian(res, int(samples), [int(seed), rep], eps, bool(center),
                                               int(third_samples), bool(response_noise),
                                               check=checks[-1])
        M = np.eye(J.shape[0]) - J
        prop = np.linalg.solve(M, np.linalg.solve(M, Sig).T)
        props.append(0.5 * (prop + prop.T)[:lay.nq, :lay.nq])
    if check is not None:
        R = len(checks)
        check.update(checks[0])
        check["est"] = np.mean([c["est"] for c in checks], axis=0)
        check["se"] = np.sqrt(np.sum([c["se"] ** 2 for c in checks], axis=0)) / R
    make = lambda prop: DMFTFluctuations(dmft=res, center=bool(center), propagator=prop,
                                         gradient_norm=float("nan"), asymmetry=0.0, _layout=lay)
    return make(np.mean(props, axis=0)), [make(p) for p in props]
