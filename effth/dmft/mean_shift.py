r"""The O(1/N) shift of the mean of the DMFT order parameters and predictions at finite width.

At width :math:`N` the order parameters :math:`x=(k,\hat k,\rho)` of the DMFT have the weight
:math:`e^{NS[x]}` (Bordelon & Pehlevan (2022), App. P.7; :math:`S` the action of
:mod:`effth.dmft.fluctuations`).  Expanding :math:`S=S^*+\tfrac12\,\delta x^\top H\delta x
+\tfrac16 S_{abc}\delta x_a\delta x_b\delta x_c+\dots` around the saddle (:math:`H=\nabla^2S`) and
averaging the cubic term against the Gaussian (Wick, three pairings) gives the **mean**

.. math:: \langle x_a\rangle=x_a^*+\frac1N\,\delta x_a+O(N^{-2}),\qquad
          \delta x_a=\tfrac12\,(H^{-1})_{ab}\,S_{bcd}\,(H^{-1})_{cd},

the cubic term of eq. (174), :math:`-\langle x_aU\rangle_c` with
:math:`U=-\tfrac{N}{6}S_{abc}\delta x_a\delta x_b\delta x_c` (equivalently:
:math:`\langle x\rangle` is the stationary point of the one-loop action
:math:`S-\tfrac1{2N}\ln\det(-\nabla^2S)`).  There is no further O(1) term: for deep linear
networks the finite-:math:`N` integral is exactly :math:`\int dx\,e^{NS[x]}` (the average over
the Gaussian initial weights is exact, each conjugate pair enters linearly, the response
variables :math:`A,B` replace their conjugates by a linear change of variables, constant
Jacobian).  An observable :math:`O(k)` that is nonlinear in the order parameters (the loss,
the NTK) also gets the quadratic term of eq. (174),

.. math:: \langle O\rangle=O(k^*)+\frac1N\Big[\nabla O\cdot\delta k
          +\tfrac12\,\mathrm{Tr}\,\big(N\mathrm{Cov}(k)\,\nabla^2O\big)\Big],\qquad
          N\mathrm{Cov}(k)=-(H^{-1})_{kk}.

(App. P.7 writes the weight as :math:`e^{-NS}`; there the Gaussian term
:math:`+\tfrac1{2N}\mathrm{Tr}[\nabla^2S]^{-1}\nabla^2O` of eq. (174) is right, but the cubic
term needs a minus sign, :math:`-\tfrac1{\sqrt N}\nabla O\cdot\langle\delta\,U\rangle_0`, as
eq. (172) at :math:`n=1` is :math:`-\langle OU\rangle_c`.  With the weight :math:`e^{NS}` used
here they read as above; the measured networks fix the sign.)

Evaluation
----------
:math:`w_b=S_{bcd}(H^{-1})_{cd}=\sum_k h_k^{-1}\,\partial_b D^2S[u_k,u_k]` over the
eigenpairs :math:`(h_k,u_k)` of :math:`H`: second directional derivatives of the full gradient
:math:`\nabla S` (all variables), taken without subtractive cancellation as
:math:`D^2F[u,u]=\mathrm{Im}\,[F(x+\omega\epsilon u)+F(x-\omega\epsilon u)]/\epsilon^2
+O(\epsilon^4)`, :math:`\omega=e^{i\pi/4}` (the gradient is analytic).  The gradient in the
conjugates and responses is :func:`effth.dmft.fluctuations._gradient`; the gradient in the
kernels and predictions, :math:`\partial S/\partial k=-\hat k+\partial\sum_\ell\ln\mathcal
Z_\ell/\partial k`, is :func:`_kernel_gradient` below, in closed form from
:math:`\ln\mathcal Z_\ell=-\ln\det\mathcal J-\tfrac12\ln\det(1-\Sigma M)`,
:math:`M=\mathcal J^{-\top}Q\mathcal J^{-1}`:

.. math:: \frac{\partial\ln\mathcal Z}{\partial\Sigma}=\tfrac12M(1-\Sigma M)^{-1},\qquad
          \frac{\partial\ln\mathcal Z}{\partial C}, \frac{\partial\ln\mathcal Z}{\partial D}
          \ \text{as the response gradients of} \ \texttt{\_gradient},

chained through :math:`\Sigma=\mathrm{diag}(H^{\ell-1},G^{\ell+1})`,
:math:`C^\ell=A^{\ell-1}+\eta\Theta H^{\ell-1}\Delta`, :math:`D^\ell=B^\ell+\eta\Theta G^{\ell+1}\Delta`,
:math:`\Delta=y-f`.  Tested: the full Hessian from it is symmetric (the mixed blocks are
computed twice, once from each side) and its kernel-kernel block vanishes at the saddle.

Cost: about three times :func:`effth.dmft.deep_linear_fluctuations` (``2 x`` rows gradient
evaluations for the third derivatives, one eigendecomposition of the Hessian).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from effth._signature import public
from effth.dmft.fluctuations import (DMFTFluctuations, _deep_linear_saddle, _gradient, _Layout,
                                     _layer_systems, _width)
from effth.errors import DomainError

__all__ = ["DMFTMeanShift", "deep_linear_mean_shift", "two_layer_mean_shift"]

_STEP = 1e-30                          # complex step of the Hessian (as effth.dmft.fluctuations)
_OMEGA = np.exp(1j * np.pi / 4)        # direction of the second-derivative step


def _unique(full: np.ndarray, iu) -> np.ndarray:
    """Gradient in the unique entries ``(i <= j)`` of a symmetric matrix from the gradient in
    its independent entries ``full`` ``(B, m, m)``: ``g_ij + g_ji`` off the diagonal."""
    g = full + np.swapaxes(full, 1, 2)
    idx = np.arange(full.shape[1])
    g[:, idx, idx] = full[:, idx, idx]
    return g[:, iu[0], iu[1]]


def _kernel_gradient(lay: _Layout, kx, y, P, eta, gamma0, center, xq, xh, xr):
    """``dS/dq`` (kernels ``H^l``, ``G^l`` and predictions ``f``) at a batch of points
    ``(B, .)`` (complex allowed): ``-qhat`` plus the derivative of ``sum_l ln Z_l`` through the
    source covariances and the drifts ``C^l``, ``D^l`` (module docstring).  The layer algebra is
    that of :func:`effth.dmft.fluctuations._gradient`."""
    L, T, n = lay.L, lay.T, lay.n
    Tn = T * n
    out = gf = None
    for s_ in _layer_systems(lay, kx, y, P, eta, gamma0, center, xq, xh, xr):
        ell, nb, dt, eye = s_["ell"], s_["nb"], s_["dt"], s_["eye"]
        Ji, Sig, Q, Hp4, Gn, delta, mask = (s_[k] for k in ("Ji", "Sig", "Q", "Hp4", "Gn", "delta",
                                                             "mask"))
        if out is None:
            out = -xh.astype(dt, copy=True)
            gf = np.zeros((nb, T, n), dtype=dt)
        JiT = np.swapaxes(Ji, 1, 2)
        M = JiT @ Q @ Ji
        gSig = 0.5 * np.swapaxes(np.linalg.solve(np.swapaxes(eye - Sig @ M, 1, 2), M), 1, 2)
        V = Ji @ np.linalg.solve(eye - Sig @ M, Sig) @ JiT
        W = JiT @ Q @ V
        gC = (gamma0 * (W[:, :Tn, Tn:] + np.swapaxes(Ji[:, Tn:, :Tn], 1, 2))).reshape(nb, T, n, T)
        gD = (gamma0 * (W[:, Tn:, :Tn] + np.swapaxes(Ji[:, :Tn, Tn:], 1, 2))).reshape(nb, T, T, n)
        # the predictions, through Delta = y - f in C and D
        gf[..., :P] -= np.einsum("btms,btmsa,ts->bsa", gC, Hp4[..., :P], mask)
        gf[..., :P] -= np.einsum("btsa,bts,ts->bsa", gD[..., :P], Gn, mask)
        if ell >= 2:                     # H^{ell-1}: source covariance and drift C
            gH = gSig[:, :Tn, :Tn].reshape(nb, T, n, T, n).copy()
            gH[..., :P] += np.einsum("btms,bsa,ts->btmsa", gC, delta, mask)
            o = lay.offH[ell - 2]
            out[:, o: o + lay.nH] += _unique(gH.reshape(nb, Tn, Tn), lay.iuH)
        if ell <= L - 1:                 # G^{ell+1}: source covariance and drift D
            gG = gSig[:, Tn:, Tn:] + np.einsum("btsa,bsa,ts->bts", gD[..., :P], delta, mask)
            o = lay.offG[ell]
            out[:, o: o + lay.nG] += _unique(gG, lay.iuG)
    out[:, lay.off_f:] += gf.reshape(nb, -1)
    return out


def _full_gradient(args, X):
    """``grad S`` in all variables ``x = (q, qhat, rho)`` at the points ``X`` ``(B, size)``."""
    lay = args[0]
    nq = lay.nq
    xq, xh, xr = X[:, :nq], X[:, nq: 2 * nq], X[:, 2 * nq:]
    gk = _kernel_gradient(*args, xq, xh, xr)
    gh, gr = _gradient(*args, xq, xh, xr)
    return np.concatenate([gk, gh, gr], axis=1)


@public
@dataclass(repr=False)       # the repr of DMFTFluctuations, under this class's name
class DMFTMeanShift(DMFTFluctuations):
    """The O(1/N) mean and covariance of the deep linear DMFT (Bordelon & Pehlevan (2022), App. P.7, eq. (174)).

    A :class:`~effth.dmft.DMFTFluctuations` (``covariance``, ``variance``, ``std`` as there)
    that also carries the shift of the mean.

    Attributes
    ----------
    shift_vector : ndarray, shape (n_k,)
        ``delta k``: ``N (<k> - k*)`` at leading order for the flat order parameters ``k``
        (unique entries of ``H^ell``, of ``G^ell``, then ``f``; the layout of ``propagator``).
    symmetry_error : float
        Max-abs asymmetry of the full Hessian (all its rows from the closed-form gradient),
        relative to its largest entry (``~1e-12``).

    Notes
    -----
    :meth:`shift` gives ``N (<O> - O*)`` for the names of :meth:`DMFTResult.value`
    (``'f'``, ``'delta'``, ``'loss'``, ``'phi'``, ``'g'``, ``'ntk'``; the loss and the NTK,
    quadratic in the order parameters, include ``1/2 Tr(N Cov grad^2 O)``); :meth:`mean`
    gives ``O* + shift / N`` at ``widths=N``.
    """

    shift_vector: np.ndarray = None
    symmetry_error: float = float("nan")

    def _quadratic(self, name: str):
        """``1/2 Tr(N Cov grad^2 O)`` of the loss and the NTK (zero for the linear names)."""
        lay, res, S = self._layout, self.dmft, self.propagator
        T, n, L, P = lay.T, lay.n, lay.L, res.n_train
        if name == "loss":                     # 1/2 sum_mu Delta^2: 1/2 sum Var f
            idx = lay.off_f + np.arange(T * n).reshape(T, n)[:, :P]
            return 0.5 * S[idx, idx].sum(axis=1)
        out = np.zeros((T, n, n))
        if name == "ntk":                      # sum_l G^{l+1}(t,t) H^l(t,t): Cov(G^{l+1}, H^l)
            for t in range(T):
                tt = t * n + np.arange(n)
                for ell in range(1, L):
                    iH = lay.offH[ell - 1] + lay.kH[np.ix_(tt, tt)]
                    iG = lay.offG[ell] + lay.kG[t, t]
                    out[t] += S[iH, iG]
        return out

    def shift(self, name: str, layer: int | None = None) -> np.ndarray:
        """``N (<name> - name*)`` at leading order in ``1/N`` (shape of :meth:`DMFTResult.value`):
        the cubic term of eq. (174) and, for the loss and the NTK, the quadratic one."""
        shape, M = self._linear_map(name, layer)
        d = self.shift_vector[M] if M.ndim == 1 else M @ self.shift_vector
        d = d.reshape(shape)
        if name in ("loss", "ntk"):
            d = d + self._quadratic(name)
        return d

    def mean(self, name: str, layer: int | None = None, *, widths: float) -> np.ndarray:
        """The mean of ``name`` across networks of width ``widths``: ``value + shift / N``."""
        N = _width(widths)
        return self.value(name, layer) + self.shift(name, layer) / N


def _check_step(step) -> float:
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)):
        raise DomainError(f"step={step!r} must be a positive number (the second-derivative step)")
    if not (np.isfinite(step) and 0 < step <= 0.1):
        raise DomainError(f"step={step!r} must be in (0, 0.1] (the second-derivative step, "
                          "error O(step^4))")
    return float(step)


@public
def deep_linear_mean_shift(X=None, y=None, *, depth: int | None = None,
                           hidden_layers: int | None = None, gamma0: float, eta: float,
                           steps: int, X_test=None, kernel=None, center: bool = True,
                           chunk: int = 128, step: float = 1e-3) -> DMFTMeanShift:
    r"""O(1/N) shift of the mean of kernels and predictions of deep linear networks (Bordelon & Pehlevan (2022), App. P.7, eq. (174)).

    Solves the DMFT (:func:`effth.dmft.solve_deep_linear`, exact closure), evaluates the
    Hessian :math:`H` and the third derivatives of the DMFT action at the saddle (module
    docstring) and returns :math:`\delta x=\tfrac12H^{-1}S^{(3)}\!:\!H^{-1}`, so that
    :math:`\langle k\rangle=k^*+\delta k/N+O(N^{-2})`, together with the Gaussian covariance
    :math:`-H^{-1}/N` of :func:`effth.dmft.deep_linear_fluctuations` (non-perturbatively in
    :math:`\gamma_0`).

    Parameters
    ----------
    X, y, X_test, kernel, depth, hidden_layers, gamma0, eta, steps, center, chunk
        As :func:`effth.dmft.deep_linear_fluctuations`.
    step : float
        Step of the second directional derivatives along the complex diagonal (Richardson
        from ``step`` and ``step / 2``: error ``O(step^8)``, no cancellation); default ``1e-3``
        (relative error ``< 1e-7`` at ``gamma0 >= 0.1``, ``~1e-4`` at ``gamma0 = 1e-3``).

    Returns
    -------
    DMFTMeanShift

    Raises
    ------
    DomainError
        What :func:`effth.dmft.deep_linear_fluctuations` rejects, and ``step`` outside (0, 0.1].
    """
    eps = _check_step(step)
    g0, res, lay, q0, r0 = _deep_linear_saddle("deep_linear_mean_shift", X, y, depth,
                                               hidden_layers, gamma0, eta, steps, X_test, kernel,
                                               center, chunk)
    P = res.n_train
    args = (lay, res.data.kx, res.data.y, P, res.grid.eta, g0, bool(center))
    nq, nx = lay.nq, lay.size
    x0 = np.concatenate([q0, np.zeros(nq), r0])
    g_at = _full_gradient(args, x0[None])[0]
    grad_norm = float(np.max(np.abs(g_at)))
    if grad_norm > 1e-7 * max(1.0, float(np.max(np.abs(q0)))):
        raise DomainError(f"the DMFT solution is not stationary for the action (|grad S| = "
                          f"{grad_norm:.3g}); the grid is too coarse for the solver's accuracy")
    chunk = int(chunk)
    Hs = np.zeros((nx, nx))
    for start in range(0, nx, chunk):
        idx = np.arange(start, min(nx, start + chunk))
        X0 = np.repeat(x0[None].astype(complex), idx.size, axis=0)
        X0[np.arange(idx.size), idx] += 1j * _STEP
        Hs[:, idx] = _full_gradient(args, X0).imag.T / _STEP
    top = float(np.max(np.abs(Hs)))
    asym = float(np.max(np.abs(Hs - Hs.T))) / top
    Hs = 0.5 * (Hs + Hs.T)
    # equilibrate (x = d x'): the blocks scale with different powers of gamma0
    d = 1.0 / np.sqrt(np.max(np.abs(Hs), axis=1))
    h, U = np.linalg.eigh(d[:, None] * Hs * d[None, :])
    if not np.all(np.isfinite(h)) or np.min(np.abs(h)) < 1e-13 * np.max(np.abs(h)):
        raise DomainError("the Hessian of the DMFT action is singular at this saddle point")
    U = d[:, None] * U                                # eigen-directions in x
    w = np.zeros(nx)                                  # S_bcd (H^-1)_cd
    for start in range(0, nx, chunk):
        k = np.arange(start, min(nx, start + chunk))
        d2 = []
        for e in (eps, eps / 2):        # Richardson: O(e^4) -> O(e^8)
            dirs = (_OMEGA * e) * U[:, k].T
            F = _full_gradient(args, np.concatenate([x0 + dirs, x0 - dirs]))
            d2.append((F[: k.size] + F[k.size:]).imag / e ** 2)    # D^2 grad S [u_k, u_k]
        d2 = (16.0 * d2[1] - d2[0]) / 15.0
        w += (d2 / h[k, None]).sum(axis=0)
    Hinv = (U / h) @ U.T
    dx = 0.5 * Hinv @ w
    prop = -Hinv[:nq, :nq]
    prop = 0.5 * (prop + prop.T)
    return DMFTMeanShift(dmft=res, center=bool(center), propagator=prop, gradient_norm=grad_norm,
                         asymmetry=asym, _layout=lay, shift_vector=dx[:nq], symmetry_error=asym)


@public
def two_layer_mean_shift(X=None, y=None, *, gamma0: float, eta: float, steps: int,
                         activation="tanh", X_test=None, kernel=None, center: bool = True,
                         nodes: int | None = None, max_nodes: int = 64_000,
                         step: float = 1e-4) -> DMFTMeanShift:
    r"""O(1/N) shift of the mean of kernels and predictions of two-layer networks (Bordelon & Pehlevan (2022), App. P.7, eq. (174)).

    One hidden layer: :math:`S=-\hat k\cdot k+\ln\langle e^{\hat k\cdot O}\rangle`, the fields
    depend on the order parameters only through the predictions :math:`f` (eqs. (23), (66)), so
    (:func:`effth.dmft.two_layer_fluctuations`) :math:`H=\begin{pmatrix}0&-M^\top\\-M&\kappa
    \end{pmatrix}`, :math:`M=1-D`, :math:`H^{-1}=\begin{pmatrix}-P&-M^{-1}\\-M^{-\top}&0
    \end{pmatrix}` with :math:`P=M^{-1}\kappa M^{-\top}`.  The vanishing conjugate block of
    :math:`H^{-1}` removes the third cumulant of :math:`O`; what is left of
    :math:`\delta x=\tfrac12H^{-1}S^{(3)}\!:\!H^{-1}` needs
    :math:`\partial^2\langle O\rangle/\partial f\partial f` (central differences of the exact
    forward-mode tangent of the marched fields) and :math:`\partial\kappa/\partial f` (the
    tangent itself):

    .. math:: w_{f_b}=-2\,\partial_b\partial_c\langle O_d\rangle M^{-1}_{cd},\quad
              w_{\hat k_b}=-\partial_c\partial_d\langle O_b\rangle P_{cd}
              -2\,\partial_c\kappa_{bd}M^{-1}_{cd},\quad
              \delta k=-\tfrac12\,(P\,w_k+M^{-1}w_{\hat k}).

    Parameters
    ----------
    X, y, gamma0, eta, steps, activation, X_test, kernel, center, nodes, max_nodes
        As :func:`effth.dmft.two_layer_fluctuations` (a smooth activation).
    step : float
        Step of the central differences of the tangent (error ``O(step^2)``); default ``1e-4``.

    Returns
    -------
    DMFTMeanShift

    Raises
    ------
    DomainError
        What :func:`effth.dmft.two_layer_fluctuations` rejects, and a ``step`` outside (0, 0.1].
    """
    from effth.dmft.fluctuations import _two_layer_march, two_layer_fluctuations
    from effth.dmft.solvers.lazy import resolve_activation
    from effth.dmft.solvers.two_layer import _nodes

    h = _check_step(step)
    fl = two_layer_fluctuations(X, y, gamma0=gamma0, eta=eta, steps=steps, activation=activation,
                                X_test=X_test, kernel=kernel, center=center, nodes=nodes,
                                max_nodes=max_nodes)
    res, lay, g0 = fl.dmft, fl._layout, float(gamma0)
    act = resolve_activation(activation)
    fns = (act.numpy(0), act.numpy(1), act.numpy(2))
    T, n, P = res.grid.steps, res.data.n_all, res.n_train
    u, r, wq, _, _ = _nodes(res.data.kx, "quadrature", nodes, max_nodes, 0, 0, 1, act, "auto")
    r = r[:, 0]
    kx, eta_ = res.data.kx, res.grid.eta
    delta0 = res.data.y[None, :] - res.f[:, :P]
    iH, jH, iG, jG = lay.iuH[0], lay.iuH[1], lay.iuG[0], lay.iuG[1]
    fidx = lay.off_f + (np.arange(T)[:, None] * n + np.arange(P)[None, :]).reshape(-1)
    TP = T * P

    def unit(k):
        e = np.zeros((T, P))
        e.flat[k] = -1.0                                   # d Delta / d f
        return e

    def obs_and_tangent(delta, k):
        (ph, g, of), (dph, dg, dof) = _two_layer_march(u, r, kx, delta, eta_, g0, T, fns,
                                                       bool(center), unit(k))
        O = np.concatenate([ph[:, iH] * ph[:, jH], g[:, iG] * g[:, jG], of], axis=1)
        dO = np.concatenate([dph[:, iH] * ph[:, jH] + ph[:, iH] * dph[:, jH],
                             dg[:, iG] * g[:, jG] + g[:, iG] * dg[:, jG], dof], axis=1)
        return O, dO

    # M = 1 - D, its inverse and the propagator (as two_layer_fluctuations)
    O0 = None
    dOs = []
    for k in range(TP):
        O0, dO = obs_and_tangent(delta0, k)
        dOs.append(dO)
    mean = wq @ O0
    D = np.zeros((lay.nq, lay.nq))
    for k in range(TP):
        D[:, fidx[k]] = wq @ dOs[k]
    Mi = np.linalg.inv(np.eye(lay.nq) - D)
    Pr = fl.propagator
    Mf = Mi[fidx]                                          # (TP, nq): rows c = f entries
    Pff = Pr[np.ix_(fidx, fidx)]
    # d kappa_{bd} / d f_c contracted with M^-1_{cd}
    Oc = O0 - mean
    wk_hat = np.zeros(lay.nq)
    for c in range(TP):
        dOc = dOs[c] - wq @ dOs[c]
        wk_hat -= 2.0 * (wq[:, None] * dOc).T @ (Oc @ Mf[c]) + 2.0 * (wq[:, None] * Oc).T @ (dOc @ Mf[c])
    # second derivatives d_b d_c <O>: central differences in f_c of the exact tangent along f_b
    X2 = np.zeros((lay.nq, TP, TP))
    for c in range(TP):
        for b in range(TP):
            _, dp = obs_and_tangent(delta0 + h * unit(c), b)
            _, dm = obs_and_tangent(delta0 - h * unit(c), b)
            X2[:, b, c] = wq @ (dp - dm) / (2 * h)
    X2 = 0.5 * (X2 + np.swapaxes(X2, 1, 2))
    wk = np.zeros(lay.nq)
    wk[fidx] = -2.0 * np.einsum("dbc,cd->b", X2, Mf)
    wk_hat -= np.einsum("bcd,cd->b", X2, Pff)
    dq = -0.5 * (Pr @ wk + Mi @ wk_hat)
    return DMFTMeanShift(dmft=res, center=fl.center, propagator=Pr, gradient_norm=fl.gradient_norm,
                         asymmetry=0.0, _layout=lay, shift_vector=dq, symmetry_error=0.0)
