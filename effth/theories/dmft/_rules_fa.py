r"""Sampled DMFT of deep nonlinear networks trained by ρ-FA (Bordelon & Pehlevan, ICLR 2023, eq. (40)).

For ρ-FA no hidden field depends on the backward sources ``r^ℓ`` of the true gradient, so the
responses ``A`` vanish, and the pseudo-gradient chain closes on its own with the responses
``C`` and ``D``.  On the Euler grid (bars: raw responses, ``gamma0`` absorbed):

``h^ℓ(t) = u^ℓ(t) + Σ_{s<t} [C̄^{ℓ-1}(t,s) + eta gamma0 Φ^{ℓ-1}(t,s) Δ(s)] g~^ℓ(s)``,
``ž^ℓ(t) = ρ v^ℓ(t) + sqrt(1-ρ²) ζ~^ℓ(t) + ρ Σ_{s<=t} D̄^ℓ(t,s) φ(h^ℓ(s))``, ``g~^ℓ = φ'(h^ℓ) ž^ℓ``,

``u^ℓ ~ GP(0, Φ^{ℓ-1})``, ``v^ℓ, ζ~^ℓ ~ GP(0, G~~^{ℓ+1})`` independent, ``G~~ = <g~ g~>``,
``G~~^{L+1} = 1`` (``v^L = w^L(0)``, ``ζ~^L = w~^L`` static), ``C̄^ℓ(t,s) = <∂φ(h^ℓ(t))/∂v^ℓ(s)>``
(strictly causal), ``D̄^ℓ(t,s) = <∂g~^{ℓ+1}(t)/∂u^{ℓ+1}(s)>`` (causal with equal time),
``D̄^L = 0``.  The readout closure is
``f(t) = eta Σ_{s<t} Φ^L(t,s) Δ(s) + gamma0^{-1} <w^L(0) φ(h^L(t))>`` with the last term
``gamma0^{-1} ρ <∂φ(h^L(t))/∂ž^L>`` (Stein's lemma), tracked by forward-mode derivatives.

The responses are estimated by causal Stein regression on the sampled sources
(``<φ(h(t)) v(<t)^T> Σ_{vv}^+`` and ``<g~(t) u(<=t)^T> Φ^+``), and all fields are marched in
time (every row at time ``t`` needs earlier rows only), so no fixed-point iteration is needed.
"""

from __future__ import annotations

import time

import numpy as np

from ...errors import DomainError


def _pinv_psd(C, rcond):
    ev, V = np.linalg.eigh(0.5 * (C + C.T))
    keep = ev > rcond * max(ev.max(), 1e-300)
    return (V[:, keep] / ev[keep]) @ V[:, keep].T


def _conditional(rng, C, Uprev, rows, past, rcond):
    """Draw the block ``rows`` of a Gaussian process with covariance ``C`` given ``Uprev``
    (samples of the block ``past``)."""
    C_tt = C[rows, rows]
    if past.stop > 0:
        inv = _pinv_psd(C[past, past], rcond)
        M = C[rows, past] @ inv
        schur = C_tt - M @ C[rows, past].T
        mean = Uprev @ M.T
    else:
        schur, mean = C_tt, 0.0
    es, ES = np.linalg.eigh(0.5 * (schur + schur.T))
    root = ES * np.sqrt(np.clip(es, 0, None))
    return mean + rng.standard_normal((Uprev.shape[0], root.shape[0])) @ root.T


def march_fa(data, L, rho, g0, eta, T, fn, dfn, d2fn, S, nb, rng, rcond=1e-9):
    """March the ρ-FA single-site process; returns ``(f, f_se, D, Phi (L, Tn, Tn), Phi_se,
    GG (L, Tn, Tn), seconds)``."""
    P, n = data.n_train, data.n_all
    Nn = T * n
    start = time.perf_counter()
    c = np.sqrt(max(0.0, 1.0 - rho * rho))
    H = [np.zeros((S, Nn)) for _ in range(L)]
    Aphi = [np.zeros((S, Nn)) for _ in range(L)]
    Zc = [np.zeros((S, Nn)) for _ in range(L)]             # ž
    Gt = [np.zeros((S, Nn)) for _ in range(L)]             # g~
    U = [np.zeros((S, Nn)) for _ in range(L)]
    V = [np.zeros((S, Nn)) for _ in range(L)]
    Zeta = [np.zeros((S, Nn)) for _ in range(L)]
    Phi = [np.zeros((Nn, Nn)) for _ in range(L)]
    PhiB = [np.zeros((nb, Nn, Nn)) for _ in range(L)]
    GG = [np.zeros((Nn, Nn)) for _ in range(L)]
    Cb = [np.zeros((Nn, Nn)) for _ in range(L)]            # C̄^ℓ(t, s), s < t
    Db = [np.zeros((Nn, Nn)) for _ in range(L)]            # D̄^ℓ(t, s), s <= t
    r_top = rng.standard_normal((S, 1))
    w_tilde = rng.standard_normal((S, 1))
    ev, EV = np.linalg.eigh(data.kx)
    u1 = rng.standard_normal((S, n)) @ (EV * np.sqrt(np.clip(ev, 0, None))).T
    Kx_t = np.tile(data.kx, (T, T))
    dh_top = np.zeros((S, Nn))                             # ∂h^L / ∂ž^L (static ž^L)
    f = np.zeros((T, n))
    f_se = np.zeros((T, n))
    D = np.zeros((T, n))
    for t in range(T):
        rs, p = slice(t * n, (t + 1) * n), slice(0, t * n)
        stop = rs.stop
        dp = D[:t].ravel()
        # ------------------------------------------------------------------ forward, l = 1..L
        for l in range(L):
            prev = Kx_t if l == 0 else Phi[l - 1]
            U[l][:, rs] = u1 if l == 0 else _conditional(rng, prev, U[l][:, p], rs, p, rcond)
            h = U[l][:, rs].copy()
            if t > 0:
                kern = eta * g0 * prev[rs, p] * dp[None, :]
                if l > 0:
                    kern = kern + Cb[l - 1][rs, p]
                h += Gt[l][:, p] @ kern.T
                if l == L - 1:                             # forward-mode ∂h^L(t)/∂ž^L
                    dg = d2fn(H[l][:, p]) * Zc[l][:, p] * dh_top[:, p] + dfn(H[l][:, p])
                    dh_top[:, rs] = dg @ kern.T
            H[l][:, rs] = h
            a = fn(h)
            Aphi[l][:, rs] = a
            blk = a.T @ Aphi[l][:, :stop] / S
            Phi[l][rs, :stop] = blk
            Phi[l][:stop, rs] = blk.T
            bb = np.einsum("bsi,bsj->bij", a.reshape(nb, S // nb, n),
                           Aphi[l][:, :stop].reshape(nb, S // nb, stop)) / (S // nb)
            PhiB[l][:, rs, :stop] = bb
            PhiB[l][:, :stop, rs] = bb.transpose(0, 2, 1)
            # C̄^l(t, s<t) = <φ(h^l(t)) v^l(<t)^T> Σ_vv^+  (causal Stein regression)
            if t > 0 and l < L - 1:
                Svv = GG[l + 1][p, p]
                Cb[l][rs, p] = (a.T @ V[l][:, p] / S) @ _pinv_psd(Svv, rcond)
        # ------------------------------------------------------------------ readout closure
        stein = rho * np.mean(dfn(H[L - 1][:, rs]) * dh_top[:, rs], axis=0)
        f[t] = (eta * Phi[L - 1][rs, p] @ dp if t > 0 else 0.0) + stein / g0
        if t > 0:
            per = eta * PhiB[L - 1][:, rs, p] @ dp
            per = per + rho * (dfn(H[L - 1][:, rs]) * dh_top[:, rs]).reshape(nb, S // nb, n).mean(1) / g0
            f_se[t] = per.std(axis=0, ddof=1) / np.sqrt(nb)
        D[t, :P] = data.y - f[t, :P]
        if not np.all(np.isfinite(f[t])) or np.abs(D[t]).max() > 1e6 * max(1.0, np.abs(data.y).max()):
            raise DomainError(f"the ρ-FA dynamics diverge at step {t}; use a smaller eta or gamma0")
        # ------------------------------------------------------------------ backward, l = L..1
        for l in range(L - 1, -1, -1):
            if l == L - 1:
                V[l][:, rs] = r_top
                Zeta[l][:, rs] = w_tilde
                z = np.broadcast_to(rho * r_top + c * w_tilde, (S, n))
            else:
                V[l][:, rs] = _conditional(rng, GG[l + 1], V[l][:, p], rs, p, rcond)
                Zeta[l][:, rs] = _conditional(rng, GG[l + 1], Zeta[l][:, p], rs, p, rcond)
                # D̄^l(t, s<=t) = <g~^{l+1}(t) u^{l+1}(<=t)^T> Φ^l(<=t)^+
                Db[l][rs, :stop] = (Gt[l + 1][:, rs].T @ U[l + 1][:, :stop] / S) @ _pinv_psd(
                    Phi[l][:stop, :stop], rcond)
                z = (rho * V[l][:, rs] + c * Zeta[l][:, rs]
                     + rho * Aphi[l][:, :stop] @ Db[l][rs, :stop].T)
            Zc[l][:, rs] = z
            gt = dfn(H[l][:, rs]) * z
            Gt[l][:, rs] = gt
            blk = gt.T @ Gt[l][:, :stop] / S
            GG[l][rs, :stop] = blk
            GG[l][:stop, rs] = blk.T
    Phi_se = [pb.std(axis=0, ddof=1) / np.sqrt(nb) for pb in PhiB]
    return f, f_se, D, np.stack(Phi), np.stack(Phi_se), np.stack(GG), time.perf_counter() - start
