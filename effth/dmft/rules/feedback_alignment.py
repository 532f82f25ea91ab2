r"""Sampled DMFT of deep nonlinear networks trained by ρ-FA (Bordelon & Pehlevan, ICLR 2023, eq. (40)),
the true-gradient fields of the rules whose forward fields close without them
(:func:`march_true_gradient`: ``G``, ``G~`` and the eNTK of DFA, Hebb and ρ-FA) and the deep
gated linear network (:func:`march_gln`).  The rest of this docstring describes ρ-FA.

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
``gamma0^{-1} ρ <∂φ(h^L(t))/∂ž^L>`` (Stein's lemma), tracked by forward-mode derivatives
(they need ``φ''`` pointwise); for activations with kinks (ReLU) the term is the direct average
``gamma0^{-1} <w^L(0) [φ(h^L(t)) - φ(h^L(0))]>`` (``d2fn=None``; the subtracted term has mean 0,
a control variate).

The responses are estimated by causal Stein regression on the sampled sources
(``<φ(h(t)) v(<t)^T> Σ_{vv}^+`` and ``<g~(t) u(<=t)^T> Φ^+``), and all fields are marched in
time (every row at time ``t`` needs earlier rows only), so no fixed-point iteration is needed.
"""

from __future__ import annotations

import time

import numpy as np

from effth.dmft._batches import batch_gram, batch_gram_equal_time
from effth.errors import DomainError


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


def march_fa(data, L, rho, g0, eta, T, fn, dfn, d2fn, S, nb, rng, rcond=1e-9, opt=None, Y=None):
    """March the ρ-FA single-site process; returns ``(f, f_se, D, Phi (L, Tn, Tn), Phi_se,
    GG (L, TnC, TnC), seconds, samples)`` with ``f``, ``f_se``, ``D`` of shape ``(T, n, C)``.

    ``Y`` ``(P, C)`` (default: the scalar targets): ``C`` outputs (App. C.1) give the readout,
    the top feedback ``ρ w^L(0) + sqrt(1-ρ²) w~^L`` and the chain ``ž^ℓ_c``, ``g~^ℓ_c``, ``v^ℓ_c``,
    ``ζ~^ℓ_c`` one column per output (columns ``(t, μ, c)``, covariances ``G~~^{ℓ+1}_{cc'}``);
    ``h^ℓ`` moves by ``Σ_c [C̄_c + eta gamma0 Φ Δ_c] g~_c``, ``D̄^ℓ_c = <∂g~^{ℓ+1}_c/∂u^{ℓ+1}>``,
    and the closure's Stein term is ``ρ <∂φ(h^L(t))/∂ž^L_c>``.

    ``opt`` (:class:`effth.dmft.rules._filter.RuleFilter`): weight decay and momentum,
    ``h^ℓ(t) = a(t) [u^ℓ(t) + Σ C̄ g~] + Σ_{s<t} k(t-1-s) (...)`` and
    ``f(t) = eta Σ_{s<t} k(t-1-s) Φ^L(t,s) Δ(s) + a(t) gamma0^{-1} <w^L(0) φ(h^L(t))>`` (the
    pseudo-gradient chain runs through the frozen feedback and carries no ``a``)."""
    plain = opt is None or opt.plain
    P, n = data.n_train, data.n_all
    Y = data.y[:, None] if Y is None else np.asarray(Y, dtype=float)
    C = Y.shape[1]
    nc = n * C
    Nn = T * n
    NC = Nn * C
    start = time.perf_counter()
    c = np.sqrt(max(0.0, 1.0 - rho * rho))
    H = [np.zeros((S, Nn)) for _ in range(L)]
    Aphi = [np.zeros((S, Nn)) for _ in range(L)]
    Zc = [np.zeros((S, NC)) for _ in range(L)]             # ž_c at (t, μ, c)
    Gt = [np.zeros((S, NC)) for _ in range(L)]             # g~_c
    U = [np.zeros((S, Nn)) for _ in range(L)]
    V = [np.zeros((S, NC)) for _ in range(L)]
    Zeta = [np.zeros((S, NC)) for _ in range(L)]
    Phi = [np.zeros((Nn, Nn)) for _ in range(L)]
    PhiB = [np.zeros((nb, Nn, Nn)) for _ in range(L)]
    GG = [np.zeros((NC, NC)) for _ in range(L)]
    Cb = [np.zeros((Nn, NC)) for _ in range(L)]            # C̄^ℓ_c(t, s), s < t
    Db = [np.zeros((NC, Nn)) for _ in range(L)]            # D̄^ℓ_c(t, s), s <= t
    r_top = rng.standard_normal((S, C))
    w_tilde = rng.standard_normal((S, C))
    ev, EV = np.linalg.eigh(data.kx)
    u1 = rng.standard_normal((S, n)) @ (EV * np.sqrt(np.clip(ev, 0, None))).T
    Kx_t = np.tile(data.kx, (T, T))
    dh_top = np.zeros((S, Nn, C))                          # ∂h^L / ∂ž^L_c (static ž^L)
    f = np.zeros((T, n, C))
    f_se = np.zeros((T, n, C))
    D = np.zeros((T, n, C))
    eye = np.eye(C)
    for t in range(T):
        rs, p = slice(t * n, (t + 1) * n), slice(0, t * n)
        rc, pc = slice(t * nc, (t + 1) * nc), slice(0, t * nc)
        stop = rs.stop
        dp = D[:t].ravel()                                 # (s, ν, c)
        at = 1.0 if plain else opt.init(t)
        kw = None if (plain or t == 0) else opt.past(t, n)
        # ------------------------------------------------------------------ forward, l = 1..L
        for l in range(L):
            prev = Kx_t if l == 0 else Phi[l - 1]
            U[l][:, rs] = u1 if l == 0 else _conditional(rng, prev, U[l][:, p], rs, p, rcond)
            h = U[l][:, rs].copy() if plain else at * U[l][:, rs]
            if t > 0:
                kern = eta * g0 * (prev[rs, p] if C == 1 else np.repeat(prev[rs, p], C, axis=1)) \
                    * dp[None, :]
                if kw is not None:
                    kern = kern * np.repeat(kw, C)[None, :]
                if l > 0:
                    kern = kern + (Cb[l - 1][rs, pc] if plain else at * Cb[l - 1][rs, pc])
                h += Gt[l][:, pc] @ kern.T
                if l == L - 1 and d2fn is not None:        # forward-mode ∂h^L(t)/∂ž^L_c
                    hp = H[l][:, p]
                    if C == 1:
                        dg = d2fn(hp) * Zc[l][:, pc] * dh_top[:, p, 0] + dfn(hp)
                        dh_top[:, rs, 0] = dg @ kern.T
                    else:   # ∂g~_{c'}(s)/∂ž_c = φ''(h) ž_{c'} ∂h(s)/∂ž_c + φ'(h) δ_{cc'}
                        zc = Zc[l][:, pc].reshape(S, t * n, C)
                        dg = ((d2fn(hp)[:, :, None, None] * zc[:, :, :, None]
                               * dh_top[:, p, None, :]) + dfn(hp)[:, :, None, None] * eye)
                        dh_top[:, rs] = np.einsum("sjkc,mjk->smc", dg,
                                                  kern.reshape(n, t * n, C), optimize=True)
            H[l][:, rs] = h
            a = fn(h)
            Aphi[l][:, rs] = a
            blk = a.T @ Aphi[l][:, :stop] / S
            Phi[l][rs, :stop] = blk
            Phi[l][:stop, rs] = blk.T
            bb = batch_gram(a, Aphi[l][:, :stop], nb)
            PhiB[l][:, rs, :stop] = bb
            PhiB[l][:, :stop, rs] = bb.transpose(0, 2, 1)
            # C̄^l(t, s<t) = <φ(h^l(t)) v^l(<t)^T> Σ_vv^+  (causal Stein regression)
            if t > 0 and l < L - 1:
                Svv = GG[l + 1][pc, pc]
                Cb[l][rs, pc] = (a.T @ V[l][:, pc] / S) @ _pinv_psd(Svv, rcond)
        # ------------------------------------------------------------------ readout closure
        if d2fn is not None:      # Stein: <w^L_c(0) φ(h^L(t))> = ρ <∂φ(h^L(t))/∂ž^L_c>
            w0a = rho * dfn(H[L - 1][:, rs])[:, :, None] * dh_top[:, rs]
        else:                     # kinked φ: the direct average, control variate φ(h^L(0))
            if t == 0:
                a_top0 = Aphi[L - 1][:, rs].copy()
            w0a = r_top[:, None, :] * (Aphi[L - 1][:, rs] - a_top0)[:, :, None]
        if not plain:
            w0a = at * w0a
        ph, phb = Phi[L - 1][rs, p], PhiB[L - 1][:, rs, p]
        if kw is not None:
            ph, phb = ph * kw[None, :], phb * kw[None, None, :]
        for k in range(C):
            dk = D[:t, :, k].ravel()
            f[t, :, k] = (eta * ph @ dk if t > 0 else 0.0) + np.mean(w0a[:, :, k], axis=0) / g0
            if t > 0:
                per = eta * phb @ dk
                per = per + w0a[:, :, k].reshape(nb, S // nb, n).mean(1) / g0
                f_se[t, :, k] = per.std(axis=0, ddof=1) / np.sqrt(nb)
        D[t, :P] = Y - f[t, :P]
        if not np.all(np.isfinite(f[t])) or np.abs(D[t]).max() > 1e6 * max(1.0, np.abs(Y).max()):
            raise DomainError(f"the ρ-FA dynamics diverge at step {t}; use a smaller eta or gamma0")
        # ------------------------------------------------------------------ backward, l = L..1
        for l in range(L - 1, -1, -1):
            if l == L - 1:
                V[l][:, rc] = np.tile(r_top, n) if C > 1 else r_top
                Zeta[l][:, rc] = np.tile(w_tilde, n) if C > 1 else w_tilde
                z = np.broadcast_to(np.tile(rho * r_top + c * w_tilde, n) if C > 1
                                    else rho * r_top + c * w_tilde, (S, nc))
            else:
                V[l][:, rc] = _conditional(rng, GG[l + 1], V[l][:, pc], rc, pc, rcond)
                Zeta[l][:, rc] = _conditional(rng, GG[l + 1], Zeta[l][:, pc], rc, pc, rcond)
                # D̄^l_c(t, s<=t) = <g~^{l+1}_c(t) u^{l+1}(<=t)^T> Φ^l(<=t)^+
                Db[l][rc, :stop] = (Gt[l + 1][:, rc].T @ U[l + 1][:, :stop] / S) @ _pinv_psd(
                    Phi[l][:stop, :stop], rcond)
                z = (rho * V[l][:, rc] + c * Zeta[l][:, rc]
                     + rho * Aphi[l][:, :stop] @ Db[l][rc, :stop].T)
            Zc[l][:, rc] = z
            gt = dfn(H[l][:, rs]) * z if C == 1 else (
                dfn(H[l][:, rs])[:, :, None] * z.reshape(S, n, C)).reshape(S, nc)
            Gt[l][:, rc] = gt
            blk = gt.T @ Gt[l][:, :rc.stop] / S
            GG[l][rc, :rc.stop] = blk
            GG[l][:rc.stop, rc] = blk.T
    Phi_se = [pb.std(axis=0, ddof=1) / np.sqrt(nb) for pb in PhiB]
    samples = {"h": H, "u": U, "a": Aphi, "gtilde": Gt, "v": V, "r_top": r_top, "phi": Phi,
               "gtilde_tilde": GG}
    return (f, f_se, D, np.stack(Phi), np.stack(Phi_se), np.stack(GG), time.perf_counter() - start,
            samples)


def _draw_given(rng, C_tt, C_tx, C_xx, X, rcond):
    """Draw ``y ~ N(0, C_tt)`` jointly Gaussian with the sampled block ``X`` (covariances
    ``C_tx = Cov(y, x)``, ``C_xx``), conditionally on ``X``."""
    if C_xx.shape[0]:
        M = C_tx @ _pinv_psd(C_xx, rcond)
        schur, mean = C_tt - M @ C_tx.T, X @ M.T
    else:
        schur, mean = C_tt, 0.0
    es, ES = np.linalg.eigh(0.5 * (schur + schur.T))
    root = ES * np.sqrt(np.clip(es, 0, None))
    return mean + rng.standard_normal((X.shape[0], root.shape[0])) @ root.T


def march_true_gradient(data, L, g0, eta, T, dfn, samples, D, nb, rng, rho=None, rcond=1e-9,
                        opt=None):
    r"""The true-gradient fields of a rule whose forward fields close without them (DFA, Hebb,
    ρ-FA), marched causally in time on the sampled forward fields (eq. (40), z-equation):

    ``z^L(t) = w^L(0) + eta gamma0 Σ_{s<t} Σ_ν Δ_ν(s) φ(h^L_ν(s))`` (the readout, delta rule),
    ``z^ℓ(t) = r^ℓ(t) + Σ_{s<=t} B̄^ℓ(t,s) φ(h^ℓ(s)) + eta gamma0 Σ_{s<t} G̃^{ℓ+1}(t,s) Δ(s) φ(h^ℓ(s))``,
    ``g^ℓ = φ'(h^ℓ) z^ℓ``,

    with ``r^ℓ ~ GP(0, G^{ℓ+1})`` (ρ-FA: jointly Gaussian with the feedback source ``v^ℓ``,
    ``Cov(r^ℓ(t), v^ℓ(s)) = G̃^{ℓ+1}(t, s)``, and ``r^L = v^L = w^L(0)``; DFA, Hebb: independent
    of every forward source, ``w^L(0)`` a fresh draw) and the raw response
    ``B̄^ℓ(t,s) = <∂g^{ℓ+1}(t)/∂u^{ℓ+1}(s)>`` from causal Stein regression on the forward sources
    ``u^{ℓ+1} ~ GP(0, Φ^ℓ)`` (``<g^{ℓ+1}(t) u^{ℓ+1}(<=t)^T> Φ^ℓ(<=t)^+``).  Nothing in the forward
    dynamics depends on these fields, so they are a pass over the stored samples.

    ``samples``: the forward solver's per-layer ``(S, T n)`` samples ``'h'``, ``'u'``, ``'a'``
    (features), ``'gtilde'`` and ``'phi'`` (``Φ^ℓ``), and for ρ-FA ``'v'``, ``'r_top'``,
    ``'gtilde_tilde'`` (``G̃̃^{ℓ+1}``, the covariance of ``v^ℓ``).  Returns ``G (L, Tn, Tn)``,
    ``G̃ (L, Tn, Tn)`` (``G̃^ℓ(t, s) = <g^ℓ(t) g̃^ℓ(s)>``), the equal-time eNTK ``K (T, n, n)`` and
    their batch standard errors (the spread of ``nb`` independent sample batches, which ignores
    the noise of the estimated kernels fed into the conditional draws).

    ``D`` is ``(T, n, C)``: with ``C`` outputs (App. C.1) the readout ``w^L`` has ``C`` columns,
    ``z^ℓ_c``, ``g^ℓ_c`` carry an output index (columns ``(t, μ, c)``, ``r^ℓ_c`` with covariance
    ``G^{ℓ+1}_{cc'}``), the pseudo-gradient samples ``'gtilde'`` are ``(S, T n C)`` and the drift
    contracts ``Σ_{c'} G̃^{ℓ+1}_{cc'}(t,s) Δ_{c'}(s)``; the kernels are ``(L, TnC, TnC)`` and the
    eNTK ``(T, n, n, C, C)``.  ``opt`` (:class:`effth.dmft.rules._filter.RuleFilter`): weight
    decay and momentum, ``z^ℓ(t) = a(t) [r^ℓ(t) + Σ B̄ φ] + Σ_{s<t} k(t-1-s) (...)``.
    """
    n = data.n_all
    C = D.shape[2]
    nc = n * C
    H, U, A, Gt, Phi = (samples[k] for k in ("h", "u", "a", "gtilde", "phi"))
    S, Tn = H[0].shape
    TnC = Tn * C
    fa = rho is not None
    plain = opt is None or opt.plain
    r_top = samples["r_top"] if fa else rng.standard_normal((S, C))
    R = [np.zeros((S, TnC)) for _ in range(L)]
    Gs = [np.zeros((S, TnC)) for _ in range(L)]
    G = [np.zeros((TnC, TnC)) for _ in range(L)]
    GT = [np.zeros((TnC, TnC)) for _ in range(L)]
    Bb = [np.zeros((TnC, Tn)) for _ in range(L)]
    Dr = D.ravel()                                     # (s, ν, c)
    for t in range(T):
        rs, p = slice(t * n, (t + 1) * n), slice(0, t * n)
        rc, pc = slice(t * nc, (t + 1) * nc), slice(0, t * nc)
        stop, tn = rs.stop, t * n
        at = 1.0 if plain else opt.init(t)
        kw = None if (plain or t == 0) else opt.past(t, n)
        for l in range(L - 1, -1, -1):
            if l == L - 1:
                R[l][:, rc] = np.repeat(r_top, n, axis=0).reshape(S, nc) if C > 1 else r_top
                top = r_top if plain else at * r_top
                if t:
                    feat = A[l][:, :tn] if kw is None else A[l][:, :tn] * kw[None, :]
                    top = top + np.stack([eta * g0 * (feat @ D[:t, :, c].ravel())
                                          for c in range(C)], axis=1)
                z = np.broadcast_to(top[:, None, :], (S, n, C)).reshape(S, nc)
            else:
                Gn, GTn = G[l + 1], GT[l + 1]
                if fa:      # condition on v^l (all times) and r^l (earlier times)
                    Vl = samples["v"][l]
                    C_xx = np.block([[samples["gtilde_tilde"][l + 1], GTn[pc, :].T],
                                     [GTn[pc, :], Gn[pc, pc]]])
                    C_tx = np.hstack([GTn[rc, :], Gn[rc, pc]])
                    R[l][:, rc] = _draw_given(rng, Gn[rc, rc], C_tx, C_xx,
                                              np.hstack([Vl, R[l][:, pc]]), rcond)
                else:
                    R[l][:, rc] = _draw_given(rng, Gn[rc, rc], Gn[rc, pc], Gn[pc, pc], R[l][:, pc],
                                              rcond)
                Bb[l][rc, :stop] = (Gs[l + 1][:, rc].T @ U[l + 1][:, :stop] / S) @ _pinv_psd(
                    Phi[l][:stop, :stop], rcond)
                z = R[l][:, rc] + A[l][:, :stop] @ Bb[l][rc, :stop].T
                if not plain:
                    z = at * z
                if t:       # eta gamma0 sum_{s<t} k(t-1-s) sum_c' G~_cc'(t, s) Delta_c'(s) phi(s)
                    wgt = eta * g0 * GTn[rc, pc] * Dr[None, :t * nc]
                    if C > 1:
                        wgt = wgt.reshape(nc, tn, C).sum(axis=2)
                    if kw is not None:
                        wgt = wgt * kw[None, :]
                    z = z + A[l][:, p] @ wgt.T
            g = (dfn(H[l][:, rs])[:, :, None] * z.reshape(S, n, C)).reshape(S, nc)
            Gs[l][:, rc] = g
            blk = g.T @ Gs[l][:, :rc.stop] / S
            G[l][rc, :rc.stop] = blk
            G[l][:rc.stop, rc] = blk.T
            GT[l][rc] = g.T @ Gt[l] / S
    # batch errors; the eNTK K(t) = sum_l G~^{l+1}(t, t) Phi^l(t, t), G~^{L+1} = 1, Phi^0 = K^x
    idx = np.arange(T)
    eye = np.eye(C)

    def per_batch(x, y):
        return batch_gram(x, y, nb)

    def eq(x, y, outputs=True):    # per-batch equal-time (nb, T, n, n, C, C) / (nb, T, n, n)
        b = batch_gram_equal_time(x, y, nb, T)
        return b.reshape(nb, T, n, C, n, C).transpose(0, 1, 2, 4, 3, 5) if outputs else b

    def diag(K2, outputs=True):    # equal-time (T, n, n, C, C) / (T, n, n) of a two-time kernel
        m = nc if outputs else n
        out = K2.reshape(T, m, T, m)[idx, :, idx, :]
        return out.reshape(T, n, C, n, C).transpose(0, 1, 3, 2, 4) if outputs else out

    se = lambda b: b.std(axis=0, ddof=1) / np.sqrt(nb)
    G_se = [se(per_batch(x, x)) for x in Gs]
    GT_se = [se(per_batch(x, y)) for x, y in zip(Gs, Gt)]
    kx = data.kx[:, :, None, None]
    K = diag(GT[0]) * kx
    Kb = eq(Gs[0], Gt[0]) * kx[None, None]
    for l in range(L):
        phi_tt = diag(Phi[l], False)[..., None, None]
        phib = eq(A[l], A[l], False)[..., None, None]
        if l < L - 1:
            K = K + diag(GT[l + 1]) * phi_tt
            Kb = Kb + eq(Gs[l + 1], Gt[l + 1]) * phib
        else:
            K, Kb = K + phi_tt * eye, Kb + phib * eye
    return np.stack(G), np.stack(GT), K, np.stack(G_se), np.stack(GT_se), se(Kb)


def march_gln(data, L, g0, eta, T, dfn, S, nb, rng, rcond=1e-9, opt=None, Y=None):
    r"""Sampled DMFT of a deep gated linear network trained by GD (eq. (40) with
    ``φ(h) -> φ'(m) h``).

    With frozen gates ``q^ℓ_μ = φ'(m^ℓ_μ)``, ``m^ℓ ~ N(0, K^x)`` per neuron (one independent draw
    per layer), the features are ``a^ℓ = q^ℓ h^ℓ`` and the gradients ``g^ℓ = q^ℓ z^ℓ``; on the
    Euler grid (raw responses, ``gamma0`` absorbed)

    ``h^ℓ(t) = u^ℓ(t) + Σ_{s<t} [Ā^{ℓ-1}(t,s) + eta gamma0 Φ^{ℓ-1}(t,s) Δ(s)] g^ℓ(s)``,
    ``z^ℓ(t) = r^ℓ(t) + Σ_{s<t} [B̄^ℓ(t,s) + eta gamma0 G^{ℓ+1}(t,s) Δ(s)] a^ℓ(s)``,

    ``u^ℓ ~ GP(0, Φ^{ℓ-1})``, ``r^ℓ ~ GP(0, G^{ℓ+1})``, ``Φ^0 = K^x``, ``G^{L+1} = 1`` (``r^L =
    w^L(0)`` static), ``Ā^0 = B̄^L = 0``.  The gates do not depend on ``h``, so both responses
    ``Ā^ℓ(t,s) = <∂a^ℓ(t)/∂r^ℓ(s)>`` and ``B̄^ℓ(t,s) = <∂g^{ℓ+1}(t)/∂u^{ℓ+1}(s)>`` are strictly
    causal: by causal Stein regression on the sampled sources (``<a^ℓ(t) r^ℓ(<t)^T>
    G^{ℓ+1}(<t)^+`` and ``<g^{ℓ+1}(t) u^{ℓ+1}(<t)^T> Φ^ℓ(<t)^+``) every row at time ``t`` needs
    earlier rows only, and the process is marched in time (forward pass, closure, backward pass)
    without a fixed-point loop.  The readout closure is
    ``f(t) = eta Σ_{s<t} Φ^L(t,s) Δ(s) + gamma0^{-1} <∂a^L(t)/∂r^L>`` (Stein's lemma on
    ``<w^L(0) a^L(t)>``), the derivative tracked in forward mode.

    Returns ``(f, f_se, D, Phi, Phi_se, G, G_se, K, K_se, seconds)``: ``f``, ``f_se``, ``D``
    ``(T, n, C)``, ``Phi`` ``(L, Tn, Tn)``, ``G`` ``(L, TnC, TnC)`` and the equal-time eNTK
    ``K = Σ_ℓ G^{ℓ+1} Φ^ℓ`` ``(T, n, n, C, C)``.

    ``Y`` ``(P, C)`` (default: the scalar targets): ``C`` outputs (App. C.1); the readout
    ``w^L`` gets ``C`` columns and ``z^ℓ_c``, ``g^ℓ_c = q^ℓ z^ℓ_c``, ``r^ℓ_c`` (covariance
    ``G^{ℓ+1}_{cc'}``, ``G^{L+1} = I_C``), ``Ā^ℓ_c`` and ``B̄^ℓ_c`` an output index (columns
    ``(t, μ, c)``); ``h^ℓ`` moves by ``Σ_c [Ā_c + eta gamma0 Φ Δ_c] g_c``, the ``z`` drift contracts
    ``Σ_{c'} G^{ℓ+1}_{cc'} Δ_{c'}``, and the closure's Stein term is ``<∂a^L(t)/∂r^L_c>``, tracked
    in forward mode with ``∂z^L_{c'}/∂r^L_c``.

    ``opt`` (:class:`effth.dmft.rules._filter.RuleFilter`): weight decay and momentum; the
    initial-weight parts carry ``a(t)`` (``h = a(t) [u + Σ Ā g] + ...``, ``z = a(t) [r + Σ B̄ a]
    + ...``, ``w^L(t) = a(t) w^L(0) + ...``) and the feature-learning sums ``k(t-1-s)``.
    """
    plain = opt is None or opt.plain
    P, n = data.n_train, data.n_all
    Y = data.y[:, None] if Y is None else np.asarray(Y, dtype=float)
    C = Y.shape[1]
    nc = n * C
    Nn = T * n
    NC = Nn * C
    start = time.perf_counter()
    ev, EV = np.linalg.eigh(data.kx)
    root = EV * np.sqrt(np.clip(ev, 0, None))
    def gate():
        m = rng.standard_normal((S, n)) @ root.T
        return np.tile(np.broadcast_to(np.asarray(dfn(m), dtype=float), m.shape), T)

    Q = [gate() for _ in range(L)]                  # q^l = phi'(m^l), frozen, tiled over time
    QC = Q if C == 1 else [np.repeat(q, C, axis=1) for q in Q]      # on the (t, mu, c) columns
    u1 = rng.standard_normal((S, n)) @ root.T
    r_top = rng.standard_normal((S, C))
    H, A, U = ([np.zeros((S, Nn)) for _ in range(L)] for _ in range(3))
    Z, Gs, R = ([np.zeros((S, NC)) for _ in range(L)] for _ in range(3))
    Phi = [np.zeros((Nn, Nn)) for _ in range(L)]
    G = [np.zeros((NC, NC)) for _ in range(L)]
    Ab = [np.zeros((Nn, NC)) for _ in range(L)]
    Bb = [np.zeros((NC, Nn)) for _ in range(L)]
    Kx_t = np.tile(data.kx, (T, T))
    eye = np.eye(C)
    dz_top = np.zeros((S, NC, C))                    # ∂z^L_{c'} / ∂r^L_c (broadcast over mu)
    dh_top = np.zeros((S, Nn, C))                    # ∂h^L / ∂r^L_c
    f = np.zeros((T, n, C))
    D = np.zeros((T, n, C))
    for t in range(T):
        rs, p = slice(t * n, (t + 1) * n), slice(0, t * n)
        rc, pc = slice(t * nc, (t + 1) * nc), slice(0, t * nc)
        stop, tn = rs.stop, t * n
        dp = D[:t].ravel()                           # (s, nu, c)
        at = 1.0 if plain else opt.init(t)
        kw = None if (plain or t == 0) else opt.past(t, n)
        # ------------------------------------------------------------------ forward, l = 1..L
        for l in range(L):
            prev = Kx_t if l == 0 else Phi[l - 1]
            U[l][:, rs] = u1 if l == 0 else _conditional(rng, prev, U[l][:, p], rs, p, rcond)
            h = U[l][:, rs].copy() if plain else at * U[l][:, rs]
            if t:
                kern = eta * g0 * (prev[rs, p] if C == 1 else np.repeat(prev[rs, p], C, axis=1)) \
                    * dp[None, :]
                if kw is not None:
                    kern = kern * np.repeat(kw, C)[None, :]
                if l > 0:
                    # Ā^{l-1}_c(t, s<t) = <a^{l-1}(t) r^{l-1}_c(<t)^T> G^l(<t)^+
                    Ab[l - 1][rs, pc] = (A[l - 1][:, rs].T @ R[l - 1][:, pc] / S) @ _pinv_psd(
                        G[l][pc, pc], rcond)
                    kern = kern + (Ab[l - 1][rs, pc] if plain else at * Ab[l - 1][rs, pc])
                h += Gs[l][:, pc] @ kern.T
                if l == L - 1:
                    if C == 1:
                        dh_top[:, rs, 0] = (Q[l][:, p] * dz_top[:, pc, 0]) @ kern.T
                    else:
                        dh_top[:, rs] = np.einsum("sjc,mj->smc", QC[l][:, pc, None]
                                                  * dz_top[:, pc], kern, optimize=True)
            H[l][:, rs] = h
            a = Q[l][:, rs] * h
            A[l][:, rs] = a
            blk = a.T @ A[l][:, :stop] / S
            Phi[l][rs, :stop] = blk
            Phi[l][:stop, rs] = blk.T
        # ------------------------------------------------------------------ readout closure
        stein = np.mean(Q[L - 1][:, rs, None] * dh_top[:, rs], axis=0)          # (n, C)
        ph = Phi[L - 1][rs, p] if kw is None else Phi[L - 1][rs, p] * kw[None, :]
        for k in range(C):
            f[t, :, k] = (eta * ph @ D[:t, :, k].ravel() if t else 0.0) + (
                stein[:, k] if plain else at * stein[:, k]) / g0
        D[t, :P] = Y - f[t, :P]
        if not np.all(np.isfinite(f[t])) or np.abs(D[t]).max() > 1e6 * max(1.0, np.abs(Y).max()):
            raise DomainError(f"the gated-network dynamics diverge at step {t}; use a smaller eta "
                              "or gamma0")
        # ------------------------------------------------------------------ backward, l = L..1
        for l in range(L - 1, -1, -1):
            if l == L - 1:
                R[l][:, rc] = r_top if C == 1 else np.tile(r_top, n)
                top = (r_top if plain else at * r_top).copy()               # (S, C)
                dz = np.broadcast_to(eye if plain else at * eye, (S, C, C)).copy()
                if t:
                    Dk = D[:t].reshape(tn, C) if kw is None else D[:t].reshape(tn, C) * kw[:, None]
                    if C == 1:
                        top += (eta * g0 * (A[l][:, :tn] @ Dk[:, 0]))[:, None]
                        dz[:, 0, 0] += eta * g0 * ((Q[l][:, :tn] * dh_top[:, :tn, 0]) @ Dk[:, 0])
                    else:
                        top += eta * g0 * (A[l][:, :tn] @ Dk)
                        dz += eta * g0 * np.einsum("sjc,jk->skc", Q[l][:, :tn, None]
                                                   * dh_top[:, :tn], Dk, optimize=True)
                z = np.broadcast_to(top[:, None, :], (S, n, C)).reshape(S, nc)
                dz_top[:, rc] = np.broadcast_to(dz[:, None], (S, n, C, C)).reshape(S, nc, C)
            else:
                R[l][:, rc] = _conditional(rng, G[l + 1], R[l][:, pc], rc, pc, rcond)
                z = R[l][:, rc].copy() if plain else at * R[l][:, rc]
                if t:
                    Bb[l][rc, p] = (Gs[l + 1][:, rc].T @ U[l + 1][:, p] / S) @ _pinv_psd(
                        Phi[l][p, p], rcond)
                    learn = eta * g0 * G[l + 1][rc, pc] * dp[None, :]
                    if C > 1:           # sum_c' G_cc'(t, s) Delta_c'(s)
                        learn = learn.reshape(nc, tn, C).sum(axis=2)
                    if kw is not None:
                        learn = learn * kw[None, :]
                    z += A[l][:, p] @ ((Bb[l][rc, p] if plain else at * Bb[l][rc, p]) + learn).T
            Z[l][:, rc] = z
            g = QC[l][:, rc] * z
            Gs[l][:, rc] = g
            blk = g.T @ Gs[l][:, :rc.stop] / S
            G[l][rc, :rc.stop] = blk
            G[l][:rc.stop, rc] = blk.T
    # batch errors and the eNTK
    m = S // nb
    idx = np.arange(T)
    se = lambda b: b.std(axis=0, ddof=1) / np.sqrt(nb)

    def per_batch(x):
        return batch_gram(x, x, nb)

    def eq(x, outputs):            # per-batch equal-time (nb, T, n, n, C, C) / (nb, T, n, n)
        b = batch_gram_equal_time(x, x, nb, T)
        return b.reshape(nb, T, n, C, n, C).transpose(0, 1, 2, 4, 3, 5) if outputs else b

    def diag(K2, outputs):
        mm = nc if outputs else n
        out = K2.reshape(T, mm, T, mm)[idx, :, idx, :]
        return out.reshape(T, n, C, n, C).transpose(0, 1, 3, 2, 4) if outputs else out

    Phi_se = [se(per_batch(a)) for a in A]
    G_se = [se(per_batch(g)) for g in Gs]
    kx = data.kx[:, :, None, None]
    K = diag(G[0], True) * kx + diag(Phi[L - 1], False)[..., None, None] * eye
    Kb = eq(Gs[0], True) * kx[None, None] + eq(A[L - 1], False)[..., None, None] * eye
    for l in range(1, L):
        K = K + diag(G[l], True) * diag(Phi[l - 1], False)[..., None, None]
        Kb = Kb + eq(Gs[l], True) * eq(A[l - 1], False)[..., None, None]
    # f errors: the batch spread of the closure
    fb = np.zeros((nb, T, n, C))
    for t in range(T):
        rs, p = slice(t * n, (t + 1) * n), slice(0, t * n)
        st = (Q[L - 1][:, rs, None] * dh_top[:, rs]).reshape(nb, m, n, C).mean(axis=1) / g0
        if t:
            bg = batch_gram(A[L - 1][:, rs], A[L - 1][:, p], nb)
            if not plain:
                bg = bg * opt.past(t, n)[None, None, :]
            for k in range(C):
                fb[:, t, :, k] = eta * bg @ D[:t, :, k].ravel()
        fb[:, t] += st if plain else opt.init(t) * st
    return (f, se(fb), D, np.stack(Phi), np.stack(Phi_se), np.stack(G), np.stack(G_se), K, se(Kb),
            time.perf_counter() - start)
