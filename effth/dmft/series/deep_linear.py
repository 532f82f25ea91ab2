r"""Deep linear DMFT to any order in :math:`\gamma_0^2` on the discrete gradient-descent grid.

For :math:`\phi(h)=h` every order parameter is an analytic function of :math:`x=\gamma_0^2`
(Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71), §2.10: odd orders vanish identically).  The closed equations (Bordelon & Pehlevan (2022), eq. (71) with the
corrected reading of Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71): responses without :math:`\Delta`, equal-time causality of §3.2)

.. math::
   C^\ell = A^{\ell-1} + \eta\,\Theta\,H^{\ell-1}\Delta,\quad D^\ell = B^\ell + \eta\,\Theta\,G^{\ell+1}\Delta,
   \quad M_g = (1 - \gamma_0^2 D^\ell C^\ell)^{-1},

   G^\ell = M_g[G^{\ell+1} + \gamma_0^2 D^\ell H^{\ell-1}D^{\ell\top}]M_g^\top,\quad
   H^\ell = H^{\ell-1} + \gamma_0^2[C^\ell Y + (C^\ell Y)^\top],\quad
   Y = M_gD^\ell H^{\ell-1} + \tfrac12 G^\ell C^{\ell\top},

   A^\ell = C^\ell M_g,\quad B^{\ell-1} = M_g D^\ell,\quad
   f(t_i) = [(M_gD^LH^{L-1})^\top + C^LG^L]_{(i\mu),i}

are causal, so they are solved by one forward pass in time.  Here that pass runs in truncated
power-series arithmetic (:class:`~effth.dmft.series.arith.TruncatedSeries`): every product is a Cauchy
product, every factor :math:`\gamma_0^2` a shift.  The output at order :math:`k` is the *exact*
:math:`\gamma_0^{2k}` Taylor coefficient of the discrete DMFT (in floating point, or in rational
arithmetic for rational data) -- no finite differences, no fit.  The order-:math:`k` equations are
the Cauchy-product recursion

.. math:: X_k = \sum_{i+j=k} (\dots)_i(\dots)_j,

whose :math:`k=0` part is the lazy (static-NTK) solution and whose :math:`k=1` part reproduces
Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here with discrete :math:`v_\alpha(t_i)=\eta\sum_{j<i}\Delta^0_\alpha(t_j)`,
:math:`v_{\alpha\beta}(t_i)=\eta\sum_{j<i}\Delta^0_\alpha(t_j)v_\beta(t_j)`.

This module never imports the solver (:mod:`effth.dmft.solvers.deep_linear`): the series is checked *against* it.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from effth.dmft.series.arith import TruncatedSeries as S

__all__ = ["DeepLinearSeriesArrays", "deep_linear_series_arrays"]


@public
@dataclass
class DeepLinearSeriesArrays:
    """Taylor coefficients (in ``gamma0**2``) of the deep linear DMFT on the grid.

    Attributes (order axis first; ``K`` = truncation order in ``gamma0**2``)
    ----------
    H : ndarray, shape (K+1, L, T, n, T, n)
        Feature kernels ``H^ell_{mu alpha}(t_i, t_j)``.
    G : ndarray, shape (K+1, L, T, T)
        Gradient kernels ``G^ell(t_i, t_j)`` (sample independent).
    A : ndarray, shape (K+1, L-1, T, n, T)
        Responses ``A^ell`` (scaled, seed D.7), rows ``(t mu)``, columns ``s``.
    B : ndarray, shape (K+1, L-1, T, T, n)
        Responses ``B^ell``.
    f : ndarray, shape (K+1, T, n)
        Predictions (training then test points).
    delta : ndarray, shape (K+1, T, P)
        Error signal ``y - f`` on the training points.
    ntk : ndarray, shape (K+1, T, n, n)
        Equal-time NTK ``K(t_i, t_i) = sum_ell G^{ell+1} H^ell``.
    """

    H: np.ndarray
    G: np.ndarray
    A: np.ndarray
    B: np.ndarray
    f: np.ndarray
    delta: np.ndarray
    ntk: np.ndarray


def _to_exact(a) -> np.ndarray:
    arr = np.asarray(a, dtype=object)
    return np.vectorize(lambda v: v if isinstance(v, Fraction) else Fraction(v), otypes=[object])(arr)


@public
def deep_linear_series_arrays(kx, y, *, hidden_layers: int, eta, steps: int, order: int,
                              closure: str = "exact", gradient_independent: bool = False,
                              exact: bool = False) -> DeepLinearSeriesArrays:
    r"""All Taylor coefficients up to ``gamma0**(2 order)`` of the discrete deep linear DMFT.

    Parameters
    ----------
    kx : ndarray, shape (n, n)
        Input kernel (training points first).
    y : ndarray, shape (P,)
        Targets.
    hidden_layers : int
        Number of hidden layers ``L``.
    eta : float or Fraction
        Step of the GD grid.
    steps : int
        Number of grid points ``T``.
    order : int
        Truncation order ``K`` in ``gamma0**2``.
    closure : {'exact', 'ntk'}
        Predictions from the single-site average (exact limit of discrete GD) or NTK-Euler.
    gradient_independent : bool
        Expand the gradient-independence ansatz (``A = B = 0``) instead of the DMFT.
    exact : bool
        Rational arithmetic (``Fraction``); inputs are converted exactly (pass Fractions or
        integers for exact data).

    Returns
    -------
    DeepLinearSeriesArrays
    """
    L, T, K = int(hidden_layers), int(steps), int(order)
    kx = _to_exact(kx) if exact else np.asarray(kx, dtype=float)
    y = _to_exact(y) if exact else np.asarray(y, dtype=float)
    eta = Fraction(eta) if exact else float(eta)
    n, P = kx.shape[0], y.shape[0]
    Tn = T * n

    def Z(*shape):
        return S.zeros(shape, K, exact)

    H0 = S.constant(np.tile(kx, (T, T)), K, exact)
    H = [Z(Tn, Tn) for _ in range(L)]
    G = [Z(T, T) for _ in range(L)]
    C = [Z(Tn, T) for _ in range(L)]
    D = [Z(T, Tn) for _ in range(L)]
    Af = [Z(Tn, T) for _ in range(L)]
    MD = [Z(T, Tn) for _ in range(L)]
    Mg = [Z(T, T) for _ in range(L)]
    Y = [Z(T, Tn) for _ in range(L)]
    Zs = [Z(T, T) for _ in range(L)]
    delta = Z(T, n)
    f = Z(T, n)
    ntk = Z(T, n, n)
    ones = S.constant(np.ones((T, T), dtype=object if exact else float)
                      if not exact else np.full((T, T), Fraction(1), dtype=object), K, exact)
    half = Fraction(1, 2) if exact else 0.5
    one = Fraction(1) if exact else 1.0
    K_prev = None
    for t in range(T):
        rt = slice(t * n, (t + 1) * n)
        m = (t + 1) * n
        for ell in range(1, L + 1):                                    # upward pass
            Hp = H0 if ell == 1 else H[ell - 2]
            c = C[ell - 1]
            if t:
                blk = Hp[rt, : t * n].reshape(n, t, n)
                c[rt, :t] = (blk * delta[:t].reshape(1, t, n)).sum(axis=2) * eta
                if ell >= 2 and not gradient_independent:
                    c[rt, :t] = c[rt, :t] + Af[ell - 2][rt, :t]
                Af[ell - 1][rt, :t] = c[rt, :t] @ Mg[ell - 1][:t, :t]
                Yl = Y[ell - 1]
                Yl[:t, rt] = MD[ell - 1][:t, : t * n] @ Hp[: t * n, rt] \
                    + (G[ell - 1][:t, :t] @ c[rt, :t].T) * half
                cy_row = c[rt, :t] @ Yl[:t, :m]
                cy_col = c[:m, :t] @ Yl[:t, rt]
                Hrow = Hp[rt, :m] + (cy_row + cy_col.T).times_x()
            else:
                Hrow = Hp[rt, :m].copy()
            H[ell - 1][rt, :m] = Hrow
            H[ell - 1][:m, rt] = Hrow.T
        for ell in range(L, 0, -1):                                    # downward pass
            Hp = H0 if ell == 1 else H[ell - 2]
            Gn = ones if ell == L else G[ell]
            d = D[ell - 1]
            if t:
                d[t, : t * n] = (Gn[t, :t].reshape(t, 1) * delta[:t]).reshape(t * n) * eta
            if ell <= L - 1 and not gradient_independent:
                d[t, :m] = d[t, :m] + MD[ell][t, :m]
            mg = Mg[ell - 1]
            mg[t, : t + 1] = (d[t, :m] @ Af[ell - 1][:m, : t + 1]).times_x()
            mg.c[0, t, t] = mg.c[0, t, t] + one
            MD[ell - 1][t, :m] = mg[t, : t + 1] @ d[: t + 1, :m]
            zrow = Gn[t, : t + 1] + ((d[t, :m] @ Hp[:m, :m]) @ d[: t + 1, :m].T).times_x()
            Zs[ell - 1][t, : t + 1] = zrow
            Zs[ell - 1][: t + 1, t] = zrow
            Grow = (mg[t, : t + 1] @ Zs[ell - 1][: t + 1, : t + 1]) @ mg[: t + 1, : t + 1].T
            G[ell - 1][t, : t + 1] = Grow
            G[ell - 1][: t + 1, t] = Grow
            Y[ell - 1][t, :m] = MD[ell - 1][t, :m] @ Hp[:m, :m] \
                + (G[ell - 1][t, :t] @ C[ell - 1][:m, :t].T) * half
        # equal-time NTK K(t, t) = G^1 K^x + sum_ell G^{ell+1} H^ell
        Kt = H0[rt, rt] * G[0][t, t].reshape(1, 1)
        for ell in range(1, L + 1):
            gnext = G[ell][t, t].reshape(1, 1) if ell < L else ones[t, t].reshape(1, 1)
            Kt = Kt + H[ell - 1][rt, t * n: (t + 1) * n] * gnext
        ntk[t] = Kt
        if closure == "exact":
            HpL = H0 if L == 1 else H[L - 2]
            f[t] = MD[L - 1][t, :m] @ HpL[:m, rt] + C[L - 1][rt, :t] @ G[L - 1][:t, t]
        elif t:
            f[t] = f[t - 1] + (K_prev[:, :P] @ delta[t - 1, :P]) * eta
        K_prev = Kt
        delta[t, :P] = y - f[t, :P]
    Hs = np.stack([h.c.reshape(K + 1, T, n, T, n) for h in H], axis=1)
    Gs = np.stack([g.c for g in G], axis=1)
    if L > 1:
        As = np.stack([a.c.reshape(K + 1, T, n, T) for a in Af[: L - 1]], axis=1)
        Bs = np.stack([b.c.reshape(K + 1, T, T, n) for b in MD[1:]], axis=1)
    else:
        As = np.zeros((K + 1, 0, T, n, T), dtype=Hs.dtype)
        Bs = np.zeros((K + 1, 0, T, T, n), dtype=Hs.dtype)
    return DeepLinearSeriesArrays(H=Hs, G=Gs, A=As, B=Bs, f=f.c, delta=delta.c[:, :, :P],
                                  ntk=ntk.c)
