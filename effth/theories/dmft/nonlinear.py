"""Alternating Monte-Carlo solver of the DMFT for any activation (seed Algorithm 1, App. B).

Given the kernels of the previous iterate, each layer's single-site process is sampled and solved
by forward substitution on the discrete-GD grid (spec §3.2-§3.3).  With unscaled responses
``Abar = gamma0 A``, ``Bbar = gamma0 B`` (spec §8 #5):

``h_mu(t_i) = u_mu(t_i) + sum_{j<i} sum_alpha [Abar^{l-1} + gamma0 eta Delta_alpha(t_j) Phi^{l-1}_{mu alpha}(t_i, t_j)] g_alpha(t_j)``,
``z_mu(t_i) = r_mu(t_i) + sum_{j<=i} sum_alpha Bbar^l phi(h_alpha(t_j)) + sum_{j<i} sum_alpha gamma0 eta Delta_alpha(t_j) G^{l+1}_{mu alpha}(t_i, t_j) phi(h_alpha(t_j))``,
``g = phi'(h) z``,

with ``u^l ~ GP(0, Phi^{l-1})``, ``r^l ~ GP(0, G^{l+1})`` (``Phi^0 = K^x``, ``G^{L+1} = 1``).  The
equal-time block of ``Bbar`` is kept (spec §0 item 2, §2.3).  New estimates

``Phi = <phi(h) phi(h)^T>``, ``G = <g g^T>``, ``Abar^l = <d phi(h^l)/d r^l>``, ``Bbar^{l-1} = <d g^l / d u^l>``

use antithetic pairs ``(u, r), (u, -r)`` and either per-sample Jacobians of the linearised causal
system (spec §3.4: ``M = 1 - C Lambda_2 - C Lambda_1 D Lambda_1``, unit lower triangular,
``d phi/d r = Lambda_1 M^-1 C Lambda_1``, ``d g/d u = (Lambda_2 + Lambda_1 D Lambda_1) M^-1``)
or the Stein forms ``Abar = <phi(h) r^T> G^+``, ``Bbar = <g u^T> Phi^+`` (needed for kinked
activations such as ReLU, whose ``phi'' = delta`` pathwise Jacobians miss).  The iterate is damped,
``x <- (1 - beta) x + beta x_new``.  Predictions use the exact discrete-GD closure
``f_mu(t_i) = eta sum_{j<i} Phi^L_{mu alpha}(t_i, t_j) Delta_alpha(t_j) + gamma0^-1 <d phi(h^L_mu(t_i)) / d r^L>``
(spec §2.4; App. M eq. (132)) solved forward in time, or NTK-Euler.
"""

from __future__ import annotations

import time

import numpy as np

from ...activations import get_activation
from ...errors import ConvergenceError, DomainError
from .grid import TimeGrid, causal_mask, prepare_data
from .lazy import check_stability, lazy_kernels, static_ntk_dynamics, static_ntk_solve
from .result import Diagnostics, DMFTResult

__all__ = ["solve_monte_carlo"]


def solve_monte_carlo(X=None, y=None, *, depth: int, gamma0: float, eta: float, steps: int,
                      activation: str = "tanh", X_test=None, kernel=None, samples: int = 2000,
                      iterations: int = 15, damping: float = 0.6, tol: float = 0.0,
                      responses: str = "auto", closure: str = "exact", batches: int = 4,
                      seed=0, diverge_at: float = 1e6) -> DMFTResult:
    """Solve the nonlinear DMFT by alternating Monte Carlo (seed Algorithm 1).

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (see :func:`effth.theories.dmft.grid.prepare_data`).
    depth : int
        Hidden layers ``L``.
    gamma0 : float
        Feature-learning strength.  ``gamma0 = 0`` returns the static-NTK solution.
    eta, steps
        GD step and number of grid points.
    activation : str
        Registry name (``effth.get_activation``).
    samples : int
        Monte-Carlo draws ``S`` per layer and iteration (rounded up to an even number: antithetic
        pairs ``(u, r)``, ``(u, -r)``).
    iterations : int
        Number of damped sweeps (the paper uses about 15).  Stops early if ``tol > 0`` and the
        max-abs change of the kernels falls below ``tol``.
    damping : float in (0, 1]
        ``beta``; the paper uses 0.6.
    responses : {'auto', 'jacobian', 'stein'}
        How ``Abar``, ``Bbar`` and the readout response are estimated; ``'auto'`` is
        ``'stein'`` for activations with kinks, else ``'jacobian'``.
    closure : {'exact', 'ntk'}
        Prediction rule (see :class:`DMFTResult`).
    batches : int
        The last sweep's samples are split into this many independent batches to estimate the
        Monte-Carlo standard error of ``Phi``, ``G`` (``result.stderr``).
    seed : int or numpy.random.Generator
    diverge_at : float
        Raise :class:`ConvergenceError` when a kernel entry exceeds this magnitude.

    Returns
    -------
    DMFTResult
        ``A``, ``B`` in the scaled convention (divided by ``gamma0``).

    Raises
    ------
    DomainError, ConvergenceError
    """
    if int(depth) != depth or depth < 1:
        raise DomainError(f"depth={depth!r} must be a positive integer")
    if closure not in ("exact", "ntk") or responses not in ("auto", "jacobian", "stein"):
        raise DomainError(f"closure={closure!r} / responses={responses!r} not recognised")
    if not (0.0 < damping <= 1.0):
        raise DomainError(f"damping={damping!r} must lie in (0, 1]")
    if int(samples) < 4 or int(batches) < 1:
        raise DomainError(f"samples={samples!r} must be >= 4 and batches >= 1")
    act = get_activation(activation)
    data = prepare_data(X, y, X_test=X_test, kernel=kernel)
    grid = TimeGrid(float(eta), int(steps))
    L, T, n, P = int(depth), grid.steps, data.n_all, data.n_train
    if gamma0 == 0:
        return static_ntk_solve(data, grid, L, act.name)
    if responses == "auto":
        responses = "stein" if act.kinks else "jacobian"
    phi_f, dphi_f, ddphi_f = act.numpy(0), act.numpy(1), act.numpy(2)
    phi0, _, g0, ntk0 = lazy_kernels(data.kx, L, act.name)
    check_stability(ntk0[:P, :P], grid.eta)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    S = int(samples) + int(samples) % 2
    gam = float(gamma0)
    t0 = time.perf_counter()
    Tn = T * n
    strict = np.kron(causal_mask(T), np.ones((n, n)))              # j < i blocks
    lower = strict + np.kron(np.eye(T), np.eye(n))                  # j <= i, diagonal in mu at j = i
    K0 = np.tile(data.kx, (T, T))
    ones = np.ones((Tn, Tn))
    Phi = [np.tile(p, (T, T)) for p in phi0]
    G = [np.tile(g, (T, T)) for g in g0]
    Ab = [np.zeros((Tn, Tn)) for _ in range(L - 1)]
    Bb = [np.zeros((Tn, Tn)) for _ in range(L - 1)]
    delta = data.pad(data.y - static_ntk_dynamics(ntk0, data.y, grid.eta, T)[:, :P])
    diag = Diagnostics(tol=tol)
    stderr = None
    for it in range(1, int(iterations) + 1):
        last = it == int(iterations)
        dcol = np.tile(delta.reshape(1, Tn), (Tn, 1))               # Delta_alpha(t_j) by column
        Phin, Gn, Abn, Bbn = [None] * L, [None] * L, [None] * (L - 1), [None] * (L - 1)
        batch_phi, batch_g = [None] * L, [None] * L
        with np.errstate(over="ignore", invalid="ignore"):
            for ell in range(1, L + 1):
                Pprev = K0 if ell == 1 else Phi[ell - 2]
                Gnext = ones if ell == L else G[ell]
                C = gam * grid.eta * strict * Pprev * dcol
                D = gam * grid.eta * strict * Gnext * dcol
                if ell >= 2:
                    C = C + Ab[ell - 2]
                if ell <= L - 1:
                    D = D + Bb[ell - 1]
                u = _sample(rng, Pprev, S // 2)
                r = _sample(rng, Gnext, S // 2)
                u = np.concatenate([u, u])
                r = np.concatenate([r, -r])
                h, z = _solve_fields(u, r, C, D, phi_f, dphi_f, T, n)
                ph, d1 = phi_f(h), dphi_f(h)
                g = d1 * z
                Phin[ell - 1] = ph.T @ ph / S
                Gn[ell - 1] = g.T @ g / S
                if last:
                    batch_phi[ell - 1] = _batch_means(ph, batches)
                    batch_g[ell - 1] = _batch_means(g, batches)
                need_A, need_B = ell <= L - 1, ell >= 2
                if responses == "stein":
                    if need_A:
                        Abn[ell - 1] = strict * ((ph.T @ r / S) @ np.linalg.pinv(Gnext, hermitian=True))
                    if need_B:
                        Bbn[ell - 2] = lower * ((g.T @ u / S) @ np.linalg.pinv(Pprev, hermitian=True))
                    if ell == L:
                        # r^L is one N(0,1) scalar: <d phi(h^L)/d r^L> = <phi(h^L) r^L>
                        readout = (ph * r[:, :1]).mean(axis=0)
                else:
                    d2 = ddphi_f(h) * z
                    Abl, Bbl, readout = _jacobians(C, D, d1, d2, need_A, need_B, ell == L)
                    if need_A:
                        Abn[ell - 1] = strict * Abl
                    if need_B:
                        Bbn[ell - 2] = lower * Bbl
        bad = [x for x in Phin + Gn if not np.all(np.isfinite(x)) or np.max(np.abs(x)) > diverge_at]
        if bad:
            raise ConvergenceError(
                f"Monte-Carlo DMFT diverged at iteration {it} (kernel magnitude "
                f"{max(float(np.nanmax(np.abs(x))) if np.any(np.isfinite(x)) else np.inf for x in bad):.3g}); "
                "lower gamma0 or eta, raise samples, or damp more")
        if closure == "exact":
            f = _exact_closure(Phin[-1], readout.reshape(T, n) / gam, data, grid.eta)
        else:
            f = _ntk_euler(data.kx, Phin, Gn, data.y, grid.eta)
        delta_new = data.pad(data.y - f[:, :P])
        res = max(max(float(np.max(np.abs(a - b))) for a, b in zip(Phin + Gn, Phi + G)),
                  float(np.max(np.abs(delta_new - delta))))
        diag.residuals.append(res)
        diag.iterations = it
        b = damping
        Phi = [(1 - b) * x + b * xn for x, xn in zip(Phi, Phin)]
        G = [(1 - b) * x + b * xn for x, xn in zip(G, Gn)]
        Ab = [(1 - b) * x + b * xn for x, xn in zip(Ab, Abn)]
        Bb = [(1 - b) * x + b * xn for x, xn in zip(Bb, Bbn)]
        delta = (1 - b) * delta + b * delta_new
        if last:
            stderr = {"phi": np.stack([_sem(x).reshape(T, n, T, n) for x in batch_phi]),
                      "g": np.stack([_sem(x).reshape(T, n, T, n) for x in batch_g])}
        if tol > 0 and res < tol:
            diag.converged = True
            if not last:
                stderr = None
            break
    diag.converged = diag.converged or tol == 0
    diag.seconds = time.perf_counter() - t0
    f = _closure_f(closure, Phi, G, data, grid, f)
    return DMFTResult(
        grid=grid, data=data, depth=L, gamma0=gam, activation=act.name,
        phi=np.stack([x.reshape(T, n, T, n) for x in Phi]),
        g=np.stack([x.reshape(T, n, T, n) for x in G]),
        A=np.stack([x.reshape(T, n, T, n) / gam for x in Ab]) if L > 1 else np.zeros((0, T, n, T, n)),
        B=np.stack([x.reshape(T, n, T, n) / gam for x in Bb]) if L > 1 else np.zeros((0, T, n, T, n)),
        f=f, delta=data.y - f[:, :P], method="monte_carlo", closure=closure, diagnostics=diag,
        stderr=stderr)


def _closure_f(closure, Phi, G, data, grid, f_last):
    """Predictions consistent with the returned (damped) kernels (NTK closure) or the last sweep."""
    if closure == "ntk":
        return _ntk_euler(data.kx, Phi, G, data.y, grid.eta)
    return f_last


def _sample(rng, K, count):
    """``count`` draws of ``N(0, K)`` via ``eigh`` with negative eigenvalues clipped (spec §3.5).

    The symmetric square root ``V sqrt(lambda) V^T`` is used: unlike ``V sqrt(lambda)`` it is a
    continuous function of ``K`` (eigenvectors of near-degenerate kernels are not), so equal
    kernels up to rounding give equal samples (exact ``gamma0 -> -gamma0`` symmetry)."""
    lam, V = np.linalg.eigh(0.5 * (K + K.T))
    root = (V * np.sqrt(np.clip(lam, 0.0, None))) @ V.T
    return rng.standard_normal((count, K.shape[0])) @ root


def _solve_fields(u, r, C, D, phi_f, dphi_f, T, n):
    """Forward substitution in time (spec §3.3) for all samples at once: ``h``, ``z`` of shape (S, Tn)."""
    S = u.shape[0]
    h = np.zeros((S, T * n))
    z = np.zeros((S, T * n))
    g = np.zeros((S, T * n))
    ph = np.zeros((S, T * n))
    for i in range(T):
        b = slice(i * n, (i + 1) * n)
        h[:, b] = u[:, b] + g[:, : i * n] @ C[b, : i * n].T
        ph[:, b] = phi_f(h[:, b])
        z[:, b] = r[:, b] + ph[:, : (i + 1) * n] @ D[b, : (i + 1) * n].T
        g[:, b] = dphi_f(h[:, b]) * z[:, b]
    return h, z


def _jacobians(C, D, d1, d2, need_A, need_B, need_readout, chunk=256):
    """Sample means of the per-sample Jacobians of the linearised causal system (spec §3.4)."""
    S, Tn = d1.shape
    A = np.zeros((Tn, Tn)) if need_A else None
    B = np.zeros((Tn, Tn)) if need_B else None
    readout = np.zeros(Tn) if need_readout else None
    eye = np.eye(Tn)
    for s0 in range(0, S, chunk):
        l1, l2 = d1[s0:s0 + chunk], d2[s0:s0 + chunk]
        CL1 = C[None] * l1[:, None, :]                                  # C Lambda_1
        L1DL1 = l1[:, :, None] * D[None] * l1[:, None, :]                # Lambda_1 D Lambda_1
        M = eye[None] - C[None] * l2[:, None, :] - CL1 @ L1DL1
        if need_A or need_B:
            Minv = np.linalg.inv(M)
            if need_A:
                A += np.sum(l1[:, :, None] * (Minv @ CL1), axis=0)
            if need_B:
                Bm = L1DL1.copy()
                Bm[:, np.arange(Tn), np.arange(Tn)] += l2
                B += np.sum(Bm @ Minv, axis=0)
            if need_readout:
                readout += np.sum(l1 * np.einsum("sij,sj->si", Minv, CL1.sum(axis=2)), axis=0)
        elif need_readout:
            v = np.linalg.solve(M, CL1.sum(axis=2)[..., None])[..., 0]
            readout += np.sum(l1 * v, axis=0)
    return (None if A is None else A / S, None if B is None else B / S,
            None if readout is None else readout / S)


def _exact_closure(PhiL, a, data, eta):
    """``f_mu(t_i) = a_mu(t_i) + eta sum_{j<i} sum_alpha Phi^L_{mu alpha}(t_i, t_j) Delta_alpha(t_j)``,
    ``Delta = y - f``, solved forward in time with ``a = gamma0^-1 <d phi(h^L)/d r^L>`` fixed."""
    T, n = a.shape
    P = data.n_train
    Ph = PhiL.reshape(T, n, T, n)
    f = a.copy()
    delta = np.zeros((T, P))
    for i in range(T):
        if i:
            f[i] += eta * np.einsum("msa,sa->m", Ph[i, :, :i, :P], delta[:i])
        delta[i] = data.y - f[i, :P]
    return f


def _ntk_euler(kx, Phi, G, y, eta):
    """NTK-Euler predictions from (Tn x Tn) kernels."""
    n = kx.shape[0]
    T = Phi[0].shape[0] // n
    idx = np.arange(T)
    diag = lambda X: X.reshape(T, n, T, n)[idx, :, idx, :]
    K = diag(G[0]) * kx[None]
    for ell in range(len(Phi)):
        K = K + (diag(G[ell + 1]) if ell + 1 < len(G) else 1.0) * diag(Phi[ell])
    P = y.size
    f = np.zeros((T, n))
    for i in range(T - 1):
        f[i + 1] = f[i] + eta * K[i][:, :P] @ (y - f[i, :P])
    return f


def _batch_means(x, batches):
    """Per-batch second-moment estimates ``x^T x / m`` (antithetic partners kept together)."""
    S = x.shape[0] // 2
    out = []
    for k in range(batches):
        sl = slice(k * S // batches, (k + 1) * S // batches)
        xb = np.concatenate([x[:S][sl], x[S:][sl]])
        out.append(xb.T @ xb / xb.shape[0])
    return np.stack(out)


def _sem(x):
    return x.std(axis=0, ddof=1) / np.sqrt(x.shape[0]) if x.shape[0] > 1 else np.zeros(x.shape[1:])
