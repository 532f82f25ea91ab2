r"""Independent numeric oracle: PDLT's *printed* NTK-hierarchy recursions (errata corrected).

Test helper for the NTK hierarchy (PDLT ch. 8, 9, 11, ∞).  NumPy/SciPy only; it imports nothing from effth's ``theories``,
``algebra``, ``numerics`` or ``codegen`` (only :func:`effth.activations.get_activation` to
obtain :math:`\sigma,\sigma',\sigma'',\sigma'''`), so it is an independent reference for both
the derived flow and the simulator.

What is implemented, at leading order in :math:`1/n` (:math:`G\to K`, :math:`H\to\Theta`):

* multi-input (:func:`book_flow`): :math:`K` (4.118), :math:`V` (4.119), :math:`\Theta` (9.5),
  :math:`D` (8.77), :math:`F` (8.79), :math:`B` (8.89), :math:`A` (8.97), :math:`P` (11.49,
  corrected), :math:`Q` (11.52), :math:`R` (∞.172), :math:`S` (∞.174), :math:`T` (∞.175),
  :math:`U` (∞.176) — spec ch5-8 §1.6, ch9-11 §1.3/§1.7, chinf §3.3 (checked against the seed
  text, lines 9420ff.).  Every "raised-index" term is evaluated *literally as printed*, with
  the inverse kernel over the whole dataset (no Stein rewriting), e.g.
  :math:`\sum\langle z_{\beta_1}\sigma_{\alpha_1}\sigma'_{\alpha_3}\rangle K^{\beta_1\gamma_1}\cdots`;
* single-input (:func:`single_input_flow`): (9.6), (9.13)–(9.16), (9.19), (11.55)–(11.56),
  (∞.14)–(∞.17) as printed in spec ch9-11 §1.2/§1.7 and chinf §3.5 (with closed-form ReLU
  moments for the NTK-variance sector, :func:`relu_moments`).

Storage (the book's slot order, as :func:`effth.simulation.simulate_ntk_ensemble`):
``V[a,b,c,d]`` :math:`=V_{(ab)(cd)}`, ``A[a,b,c,d]`` :math:`=A_{(ab)(cd)}`, ``D[a,b,c,d]``
:math:`=D_{abcd}`, ``B[p,q,r,s]`` :math:`=B_{pqrs}` (NTK pairs (p,r), (q,s)), ``F[p,q,r,s]``
:math:`=F_{pqrs}` (preactivations p, r; NTK samples q, s), ``P[0,1,2,3]``, ``Q[0,1,2,3]``,
``R[0,1,2,3]``, ``S[1,2,3,4]`` as printed, ``T[a,b,c,d]`` :math:`=T_{abcd}` (the recursion is
printed for :math:`T_{\delta_1\delta_3\delta_4\delta_2}`), ``U[a,b,c,d]`` :math:`=U_{abcd}`
(printed for :math:`U_{\delta_1\delta_4\delta_2\delta_3}`).

Gaussian expectations: tensor-product probabilists' Gauss–Hermite in the number of *distinct*
samples of each expectation, on the symmetric square root (``eigh``) of the sub-kernel — so the
quadrature is covariant under permutations of the inputs.  ``nodes`` per dimension for one or
two distinct samples (default 160), ``nodes3`` for three (default 64).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.polynomial.hermite_e import hermegauss

__all__ = ["TENSORS", "Gauss", "book_flow", "derivs", "relu_moments", "single_input_flow"]

#: names of the finite-width tensors (all vanish at layer 1)
TENSORS = ("V", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U")
Z = -1  # factor kind "z" (the bare preactivation); kinds 0..3 are sigma^(k)


def derivs(activation: Any) -> tuple[Callable, ...]:
    """``(σ, σ', σ'', σ''')`` vectorized callables from a registered name or a 4-tuple."""
    if isinstance(activation, (tuple, list)):
        fs = tuple(activation)
        if len(fs) < 4:
            fs = fs + (lambda z: np.full_like(z, np.nan),) * (4 - len(fs))
        return fs
    from effth.activations import get_activation

    act = get_activation(activation)
    return tuple(act.numpy(k) for k in range(4))


class Gauss:
    """Memoized Gaussian expectations of products of :math:`\\sigma^{(k)}(z_a)` and :math:`z_a`
    under :math:`z\\sim\\mathcal N(0,K)` (``K`` the whole dataset kernel)."""

    def __init__(self, K: np.ndarray, fs: Sequence[Callable], nodes: int = 160, nodes3: int = 64):
        self.K = np.asarray(K, dtype=float)
        self.fs = fs
        self.nodes = {1: nodes, 2: nodes, 3: nodes3, 4: max(16, nodes3 // 2)}
        self._grid: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        self._vals: dict[tuple, np.ndarray] = {}
        self._memo: dict[tuple, float] = {}

    def grid(self, S: tuple[int, ...]):
        if S not in self._grid:
            m = self.nodes[len(S)]
            x, w = hermegauss(m)
            w = w / math.sqrt(2.0 * math.pi)
            sub = self.K[np.ix_(S, S)]
            lam, Uv = np.linalg.eigh(sub)
            root = Uv * np.sqrt(np.clip(lam, 0.0, None))          # root @ root.T = sub
            X = np.stack(np.meshgrid(*([x] * len(S)), indexing="ij")).reshape(len(S), -1)
            W = np.prod(np.stack(np.meshgrid(*([w] * len(S)), indexing="ij")).reshape(len(S), -1), 0)
            self._grid[S] = (root @ X, W)
        return self._grid[S]

    def _v(self, S, a, kind):
        key = (S, a, kind)
        if key not in self._vals:
            z = self.grid(S)[0][S.index(a)]
            self._vals[key] = z if kind == Z else self.fs[kind](z)
        return self._vals[key]

    def E(self, *factors: tuple[int, int]) -> float:
        """``E((a, k), (b, l), ...)`` = ⟨f_k(z_a) f_l(z_b) ...⟩ with f_{-1}(z) = z."""
        key = tuple(sorted(factors))
        if key not in self._memo:
            S = tuple(sorted({a for a, _ in key}))
            _, W = self.grid(S)
            prod = W.copy()
            for a, k in key:
                prod = prod * self._v(S, a, k)
            self._memo[key] = float(prod.sum())
        return self._memo[key]


def _t2(G: Gauss, N: int, k1: int, k2: int) -> np.ndarray:
    return np.array([[G.E((a, k1), (b, k2)) for b in range(N)] for a in range(N)])


def _t4(G: Gauss, N: int, ks: tuple[int, int, int, int]) -> np.ndarray:
    out = np.empty((N,) * 4)
    for idx in itertools.product(range(N), repeat=4):
        out[idx] = G.E(*zip(idx, ks))
    return out


def _ez(G: Gauss, N: int, k1: int, k2: int) -> np.ndarray:
    """``ez[β, a, b] = ⟨z_β f_k1(z_a) f_k2(z_b)⟩``."""
    out = np.empty((N,) * 3)
    for b_, a, b in itertools.product(range(N), repeat=3):
        out[b_, a, b] = G.E((b_, Z), (a, k1), (b, k2))
    return out


def _ezz(G: Gauss, N: int, k1: int, k2: int) -> np.ndarray:
    """``ezz[β1, β2, a, b] = ⟨(z_β1 z_β2 − K_β1β2) f_k1(z_a) f_k2(z_b)⟩``."""
    out = np.empty((N,) * 4)
    for b1, b2, a, b in itertools.product(range(N), repeat=4):
        out[b1, b2, a, b] = (G.E((b1, Z), (b2, Z), (a, k1), (b, k2))
                             - G.K[b1, b2] * G.E((a, k1), (b, k2)))
    return out


def _per_layer(v: Any, L: int) -> list[float]:
    """Per-layer values, index 1..L (index 0 unused)."""
    if callable(v):
        return [float("nan")] + [float(v(l)) for l in range(1, L + 1)]
    if np.ndim(v) == 0:
        return [float("nan")] + [float(v)] * L
    v = [float(x) for x in v]
    if len(v) != L:
        raise ValueError(f"need {L} per-layer values, got {len(v)}")
    return [float("nan")] + v


def book_flow(activation: Any, X: Any = None, depth: int = 3, c_w: Any = 1.0, c_b: Any = 0.0,
              lambda_b: Any = 1.0, lambda_w: Any = 1.0, ratios: Any = 1.0, *, K1: Any = None,
              Theta1: Any = None, nodes: int = 160, nodes3: int = 64) -> dict[str, list[np.ndarray]]:
    r"""Leading-order multi-input flow of the book's printed recursions, layers 1..depth.

    Parameters
    ----------
    activation : str or 4-tuple of callables (σ, σ', σ'', σ''')
    X : (N, n0) inputs (N ≤ 3), giving :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}XX^\top/n_0` and
        :math:`\Theta^{(1)}=\lambda_b^{(1)}+\lambda_W^{(1)}XX^\top/n_0`; or pass ``K1`` and
        ``Theta1`` directly.
    c_w, c_b, lambda_b, lambda_w : scalar, per-layer sequence (layers 1..depth) or callable l -> value.
    ratios : :math:`n_\ell/n_{\ell-1}` entering the recursion *to* layer ℓ+1; scalar, sequence
        over ℓ=1..depth (index ℓ-1; the ℓ=1 entry multiplies zero tensors) or callable.

    Returns
    -------
    dict name -> list over layers 1..depth of arrays: ``K``, ``Theta`` (N, N); ``V, A, B, D,
    F, P, Q, R, S, T, U`` (N, N, N, N) in the book's slot order (module docstring).
    """
    L = int(depth)
    cw, cb, lb, lw = (_per_layer(v, L) for v in (c_w, c_b, lambda_b, lambda_w))
    rho = _per_layer(ratios, L)
    fs = derivs(activation)
    if K1 is None or Theta1 is None:
        Xa = np.atleast_2d(np.asarray(X, dtype=float))
        xx = Xa @ Xa.T / Xa.shape[1]
        K = cb[1] + cw[1] * xx if K1 is None else np.asarray(K1, float)
        Th = lb[1] + lw[1] * xx if Theta1 is None else np.asarray(Theta1, float)
    else:
        K, Th = np.asarray(K1, float), np.asarray(Theta1, float)
    N = K.shape[0]
    z4 = np.zeros((N,) * 4)
    cur = {"K": K, "Theta": Th, **{t: z4.copy() for t in TENSORS}}
    out = {k: [v] for k, v in cur.items()}
    for l in range(1, L):
        cur = _step(cur, fs, cw[l + 1], cb[l + 1], lb[l + 1], lw[l + 1], rho[l], nodes, nodes3)
        for k, v in cur.items():
            out[k].append(v)
    return out


def _step(c: dict, fs, CW: float, Cb: float, lamb: float, lamW: float, rho: float,
          nodes: int, nodes3: int) -> dict:
    K, Th = c["K"], c["Theta"]
    V, A, B, D, F, P, Q, R, S, T, U = (c[t] for t in TENSORS)
    N = K.shape[0]
    G = Gauss(K, fs, nodes, nodes3)
    Ki = np.linalg.inv(K)
    s, d, dd, ddd = 0, 1, 2, 3
    e_ss, e_dd = _t2(G, N, s, s), _t2(G, N, d, d)
    e_dds, e_dd2, e_ddd = _t2(G, N, dd, s), _t2(G, N, dd, dd), _t2(G, N, ddd, d)   # <σ''_a σ_b>, <σ''σ''>, <σ'''_a σ'_b>
    E = G.E
    ssss = _t4(G, N, (s, s, s, s))
    ssdd = _t4(G, N, (s, s, d, d))          # <σ_a σ_b σ'_c σ'_d>
    dddd = _t4(G, N, (d, d, d, d))
    zz_ss, zz_dd = _ezz(G, N, s, s), _ezz(G, N, d, d)
    z_sd = _ez(G, N, s, d)                  # <z_β σ_a σ'_b>
    z_ds = np.transpose(z_sd, (0, 2, 1))    # <z_β σ'_a σ_b>
    z_ddd = _ez(G, N, dd, d)                # <z_β σ''_a σ'_b>
    Vup = np.einsum("pa,qb,rc,sd,abcd->pqrs", Ki, Ki, Ki, Ki, V)

    new: dict[str, np.ndarray] = {}
    new["K"] = Cb + CW * e_ss
    new["Theta"] = lamb + lamW * e_ss + CW * e_dd * Th
    # (4.119)
    new["V"] = (CW ** 2 * (ssss - np.multiply.outer(e_ss, e_ss))
                + rho * CW ** 2 / 4 * np.einsum("pqrs,pqab,rscd->abcd", Vup, zz_ss, zz_ss))
    # Omega (8.74), Theta treated as constant
    Om = lamW * e_ss + CW * Th * e_dd
    OmOm = (lamW ** 2 * ssss + lamW * CW * ssdd * Th[None, None]
            + lamW * CW * np.transpose(ssdd, (2, 3, 0, 1)) * Th[:, :, None, None]
            + CW ** 2 * dddd * np.multiply.outer(Th, Th))
    ssOm = lamW * ssss + CW * ssdd * Th[None, None]            # <σ_a σ_b Ω_cd>
    zz_Om = lamW * zz_ss + CW * zz_dd * Th[None, None]          # <(zz-K)_β1β2 Ω_ab>
    # (8.77)
    Dterm = np.einsum("pqab,pg,qh,ghcd->abcd", zz_ss, Ki, Ki, D) * e_dd[None, None]
    new["D"] = (CW * (ssOm - np.multiply.outer(e_ss, Om))
                + rho * CW / 4 * np.einsum("pqrs,pqab,rscd->abcd", Vup, zz_ss, zz_Om)
                + rho * CW ** 2 / 2 * Dterm)
    # (8.79): F[p,q,r,s] = F_{α1 α3 α2 α4} with (α1,α3,α2,α4) = (p,q,r,s)
    Fn = np.empty((N,) * 4)
    Bn = np.empty((N,) * 4)
    for p, q, r, t in itertools.product(range(N), repeat=4):
        Fn[p, q, r, t] = (CW ** 2 * E((p, s), (r, s), (q, d), (t, d)) * Th[q, t]
                          + rho * CW ** 2 * np.einsum("x,y,xg,yh,gh->", z_sd[:, p, q], z_sd[:, r, t],
                                                      Ki, Ki, F[:, q, :, t]))
        # (8.89): B[p,q,r,s] = B_{α1 α3 α2 α4}; NTK pairs (α1,α2) = (p,r) and (α3,α4) = (q,s)
        Bn[p, q, r, t] = CW ** 2 * (E((p, d), (r, d), (q, d), (t, d)) * Th[p, r] * Th[q, t]
                                    + rho * e_dd[p, q] * e_dd[r, t] * B[p, q, r, t])
    new["F"], new["B"] = Fn, Bn
    # (8.97)
    ODa = np.einsum("pqab,pg,qh,ghcd->abcd", zz_Om, Ki, Ki, D) * e_dd[None, None]
    new["A"] = (OmOm - np.multiply.outer(Om, Om)
                + rho / 4 * np.einsum("pqrs,pqab,rscd->abcd", Vup, zz_Om, zz_Om)
                + rho * CW ** 2 * np.multiply.outer(e_dd, e_dd) * A
                + rho * CW / 2 * (ODa + np.transpose(ODa, (2, 3, 0, 1))))
    # P (11.49 corrected), Q (11.52), R (∞.172), S (∞.174), T (∞.175), U (∞.176)
    Y_ds = np.einsum("gb,bxy->gxy", Ki, z_ds)     # Σ_β K^{γβ} <z_β σ'_x σ_y>
    Y_ddd = np.einsum("gb,bxy->gxy", Ki, z_ddd)   # Σ_β K^{γβ} <z_β σ''_x σ'_y>
    Pn, Qn, Rn, Sn, Tn, Un = (np.empty((N,) * 4) for _ in range(6))
    for i0, i1, i2, i3 in itertools.product(range(N), repeat=4):
        t0 = CW ** 2 * E((i0, dd), (i1, d), (i2, d), (i3, s)) * Th[i0, i1] * Th[i0, i2]
        Pn[i0, i1, i2, i3] = t0 + rho * CW ** 2 * e_dd[i1, i2] * (
            e_dds[i0, i3] * P[i0, i1, i2, i0] + e_dd[i0, i3] * P[i0, i1, i2, i3]
            + e_dds[i0, i3] * B[i0, i0, i1, i2])
        Qn[i0, i1, i2, i3] = (t0 + lamW / CW * Fn[i1, i0, i3, i2]
                              + rho * CW ** 2 * e_dd[i0, i1] * (e_dds[i2, i3] * Q[i0, i1, i2, i2]
                                                                + e_dd[i2, i3] * Q[i0, i1, i2, i3])
                              + rho * CW ** 2 * Th[i0, i1] * np.einsum(
                                  "g,h,gh->", Y_ddd[:, i0, i1], Y_ds[:, i2, i3], F[:, i0, :, i2]))
        # R_{δ0δ1δ2δ3}
        d0, d1, d2, d3 = i0, i1, i2, i3
        a23 = rho * CW * e_dd[d2, d3]
        Rn[d0, d1, d2, d3] = (
            lamW * CW * E((d0, dd), (d1, s), (d2, d), (d3, d)) * Th[d0, d2] * Th[d0, d3]
            + a23 * lamW * e_dds[d0, d1] * B[d0, d0, d2, d3]
            + a23 * lamW * (e_dds[d0, d1] * P[d0, d2, d3, d0] + e_dd[d0, d1] * P[d0, d2, d3, d1])
            + CW ** 2 * E((d0, ddd), (d1, d), (d2, d), (d3, d)) * Th[d0, d1] * Th[d0, d2] * Th[d0, d3]
            + a23 * CW * e_ddd[d0, d1] * B[d0, d0, d2, d3] * Th[d0, d1]
            + a23 * CW * (e_ddd[d0, d1] * P[d0, d2, d3, d0] + e_dd2[d0, d1] * P[d0, d2, d3, d1]) * Th[d0, d1]
            + a23 * CW * e_dd[d0, d1] * R[d0, d1, d2, d3])
        # S_{δ1δ2δ3δ4}
        a1, a2, a3, a4 = i0, i1, i2, i3
        Sn[a1, a2, a3, a4] = (
            CW * lamW * E((a1, d), (a2, d), (a3, d), (a4, d)) * Th[a1, a3] * Th[a2, a4]
            + rho * CW * e_dd[a3, a4] * (lamW * e_dd[a1, a2] + CW * Th[a1, a2] * e_dd2[a1, a2]) * B[a1, a2, a3, a4]
            + CW ** 2 * E((a1, dd), (a2, dd), (a3, d), (a4, d)) * Th[a1, a2] * Th[a1, a3] * Th[a2, a4]
            + rho * CW ** 2 * e_dd[a1, a2] * e_dd[a3, a4] * S[a1, a2, a3, a4])
        # T_{δ1δ3δ4δ2} stored at T[δ1, δ3, δ4, δ2]
        Fc = lambda Y1, x1, x3, Y2, x2, x4, f1, f2: np.einsum(
            "g,h,gh->", Y1[:, x1, x3], Y2[:, x2, x4], F[:, f1, :, f2])
        Tn[a1, a3, a4, a2] = (
            lamW ** 2 * E((a1, d), (a2, d), (a3, s), (a4, s)) * Th[a1, a2]
            + rho * lamW ** 2 * Fc(Y_ds, a1, a3, Y_ds, a2, a4, a1, a2)
            + CW * lamW * E((a1, d), (a2, dd), (a3, s), (a4, d)) * Th[a2, a1] * Th[a2, a4]
            + rho * CW * lamW * Th[a2, a4] * Fc(Y_ds, a1, a3, Y_ddd, a2, a4, a1, a2)
            + rho * CW * lamW * e_dd[a2, a4] * (e_dds[a1, a3] * Q[a2, a4, a1, a1] + e_dd[a1, a3] * Q[a2, a4, a1, a3])
            + CW * lamW * E((a2, d), (a1, dd), (a4, s), (a3, d)) * Th[a1, a2] * Th[a1, a3]
            + rho * CW * lamW * Th[a1, a3] * Fc(Y_ds, a2, a4, Y_ddd, a1, a3, a2, a1)
            + rho * CW * lamW * e_dd[a1, a3] * (e_dds[a2, a4] * Q[a1, a3, a2, a2] + e_dd[a2, a4] * Q[a1, a3, a2, a4])
            + rho * CW ** 2 * e_dd[a1, a3] * e_dd[a2, a4] * T[a1, a3, a4, a2]
            + CW ** 2 * E((a1, dd), (a2, dd), (a3, d), (a4, d)) * Th[a1, a2] * Th[a1, a3] * Th[a2, a4]
            + rho * CW ** 2 * Th[a1, a3] * Th[a2, a4] * Fc(Y_ddd, a1, a3, Y_ddd, a2, a4, a1, a2)
            + rho * CW ** 2 * Th[a2, a4] * e_dd[a1, a3] * (e_ddd[a2, a4] * Q[a1, a3, a2, a2] + e_dd2[a2, a4] * Q[a1, a3, a2, a4])
            + rho * CW ** 2 * Th[a1, a3] * e_dd[a2, a4] * (e_ddd[a1, a3] * Q[a2, a4, a1, a1] + e_dd2[a1, a3] * Q[a2, a4, a1, a3]))
        # U_{δ1δ4δ2δ3} stored at U[δ1, δ4, δ2, δ3]
        Un[a1, a4, a2, a3] = (
            CW ** 2 * E((a1, dd), (a2, dd), (a3, d), (a4, d)) * Th[a1, a2] * Th[a1, a3] * Th[a2, a4]
            + rho * CW ** 2 * e_dd[a1, a4] * e_dd[a2, a3] * U[a1, a4, a2, a3])
    new.update(P=Pn, Q=Qn, R=Rn, S=Sn, T=Tn, U=Un)
    return new


# ----------------------------------------------------------------------------- single input
def gh_moments(activation: Any, nodes: int = 160) -> Callable[[float], dict[str, float]]:
    """Single-input Gaussian moments at variance K by Gauss–Hermite (smooth σ)."""
    fs = derivs(activation)
    x, w = hermegauss(nodes)
    w = w / math.sqrt(2.0 * math.pi)

    def moments(K: float) -> dict[str, float]:
        z = math.sqrt(K) * x
        s, s1, s2, s3 = (f(z) for f in fs)
        E = lambda f: float(w @ f)
        return {
            "g": E(s * s), "zs1s": E(z * s1 * s), "s1s1": E(s1 * s1), "zs2s1": E(z * s2 * s1),
            "s4": E(s ** 4), "s2s12": E(s * s * s1 * s1), "s14": E(s1 ** 4), "s2s": E(s2 * s), "s2s1s1s": E(s2 * s1 * s1 * s),
            "s3s1": E(s3 * s1), "s2s2": E(s2 * s2), "s3s13": E(s3 * s1 ** 3), "s22s12": E(s2 * s2 * s1 * s1)}
    return moments


def relu_moments(K: float) -> dict[str, float]:
    """Closed-form ReLU moments for the NTK-variance sector (Θ, V, D, F, A, B); the σ''-sector
    entries are NaN (σ'' = δ(z) is distributional: the smooth recursions for P, Q, R, S, T, U
    do not apply)."""
    nan = float("nan")
    return {"g": K / 2, "zs1s": K / 2, "s1s1": 0.5, "zs2s1": 0.0, "s4": 1.5 * K * K, "s2s12": K / 2, "s14": 0.5,
                "s2s": nan, "s2s1s1s": nan, "s3s1": nan, "s2s2": nan, "s3s13": nan, "s22s12": nan}


def single_input_flow(moments: Callable[[float], dict[str, float]] | Any, depth: int, c_b: float,
                      c_w: float, x2: float, lambda_b: Any = 1.0, lambda_w: Any = 1.0
                      ) -> list[dict[str, float]]:
    """Single-input leading-order recursions as printed (uniform C's and widths), layers 1..depth.

    ``moments`` is a callable K -> dict (see :func:`gh_moments`, :func:`relu_moments`) or an
    activation accepted by :func:`gh_moments`.  Returns a list of dicts with K, V, Theta, D, F,
    B, A, P, Q, R, S, T, U."""
    mom = moments if callable(moments) else gh_moments(moments)
    L = int(depth)
    lb, lw = _per_layer(lambda_b, L), _per_layer(lambda_w, L)
    CW, Cb = float(c_w), float(c_b)
    K, Th = Cb + CW * x2, lb[1] + lw[1] * x2
    V = D = F = B = A = P = Q = R = S = T = U = 0.0
    rows = [{"K": K, "V": V, "Theta": Th, "D": D, "F": F, "B": B, "A": A, "P": P, "Q": Q, "R": R, "S": S, "T": T, "U": U}]
    for l in range(1, L):
        m = mom(K)
        lW = lw[l + 1]
        g = m["g"]
        chipar = CW * m["zs1s"] / K
        chiperp = CW * m["s1s1"]
        h = CW * m["zs2s1"] / (2 * K)
        r = lW / CW
        brV = CW ** 2 * m["s4"] - (CW * g) ** 2 + chipar ** 2 * V
        brT = CW ** 2 * m["s2s12"] - CW * g * chiperp + 2 * h * chipar * V
        Vn = chipar ** 2 * V + CW ** 2 * (m["s4"] - g * g)                               # (9.19)
        Dn = chiperp * chipar * D + r * brV + Th * brT                                    # (9.13)
        Fn = chipar ** 2 * F + CW ** 2 * m["s2s12"] * Th                                  # (9.14)
        Bn = chiperp ** 2 * B + CW ** 2 * m["s14"] * Th ** 2                              # (9.15)
        An = (chiperp ** 2 * A + r ** 2 * brV + 2 * r * Th * brT + 2 * r * chiperp * chipar * D
              + 4 * h * chiperp * Th * D + Th ** 2 * (CW ** 2 * m["s14"] - chiperp ** 2 + (2 * h) ** 2 * V))  # (9.16)
        mPQ = CW * chiperp * m["s2s"] + chiperp ** 2
        Pn = CW ** 2 * m["s2s1s1s"] * Th ** 2 + CW * chiperp * m["s2s"] * B + mPQ * P     # (11.55)
        Qn = CW ** 2 * m["s2s1s1s"] * Th ** 2 + r * Fn + 2 * h * chipar * Th * F + mPQ * Q  # (11.56)
        # (∞.14)-(∞.17)
        Rn = (chiperp ** 2 * R + lW * CW * m["s2s1s1s"] * Th ** 2 + CW ** 2 * m["s3s13"] * Th ** 3
              + chiperp * (lW * m["s2s"] + CW * Th * m["s3s1"]) * (B + P)
              + chiperp * (lW * m["s1s1"] + CW * Th * m["s2s2"]) * P)
        Sn = (chiperp ** 2 * S + CW * lW * m["s14"] * Th ** 2 + CW ** 2 * m["s22s12"] * Th ** 3
              + chiperp * (lW * m["s1s1"] + CW * Th * m["s2s2"]) * B)
        Tn = (chiperp ** 2 * T + 2 * CW * lW * m["s2s1s1s"] * Th ** 2 + CW ** 2 * m["s22s12"] * Th ** 3
              + lW ** 2 * m["s2s12"] * Th
              + (lW * m["zs1s"] + CW * Th * m["zs2s1"]) ** 2 * F / K ** 2
              + 2 * chiperp * (lW * (m["s2s"] + m["s1s1"]) + CW * Th * (m["s3s1"] + m["s2s2"])) * Q)
        Un = chiperp ** 2 * U + CW ** 2 * m["s22s12"] * Th ** 3
        Th = lb[l + 1] + lW * g + chiperp * Th                                            # (9.6)
        K = Cb + CW * g
        V, D, F, B, A, P, Q, R, S, T, U = Vn, Dn, Fn, Bn, An, Pn, Qn, Rn, Sn, Tn, Un
        rows.append({"K": K, "V": V, "Theta": Th, "D": D, "F": F, "B": B, "A": A, "P": P, "Q": Q, "R": R, "S": S, "T": T, "U": U})
    return rows
