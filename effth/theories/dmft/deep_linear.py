"""Deep linear DMFT: the closed PT x PT matrix equations, solved without sampling.

For ``phi(h) = h`` the single-site fields are linear in the Gaussian sources and every
order parameter follows from matrix algebra (seed §4.1, App. F, eqs. (11), (68)-(71), with the
corrections of spec §2.7: the responses ``A, B`` enter *without* a factor ``Delta``; the
predictions use the exact discrete-GD closure of spec §2.4).  With ``g^ell`` sample independent,
vectors ``h^ell`` live on (time, sample) [length ``T n``] and ``g^ell`` on time [length ``T``]:

``h^ell = u^ell + gamma0 C^ell g^ell``, ``g^ell = r^ell + gamma0 D^ell h^ell``,

``C^ell_{(t mu), s} = A^{ell-1}_{(t mu), s} + eta Theta(t-s) sum_alpha H^{ell-1}_{mu alpha}(t,s) Delta_alpha(s)``,
``D^ell_{t, (s alpha)} = B^ell_{t, (s alpha)} + eta Theta(t-s) G^{ell+1}(t,s) Delta_alpha(s)``,

with ``Theta(0) = 0`` (left-Riemann sums of discrete GD, spec §3.2).  With
``M_g = (1 - gamma0^2 D C)^{-1}`` (unit lower triangular, always invertible):

``G^ell = M_g [G^{ell+1} + gamma0^2 D H^{ell-1} D^T] M_g^T``,
``H^ell = H^{ell-1} + gamma0^2 [C Y + (C Y)^T]``, ``Y = M_g D H^{ell-1} + G^ell C^T / 2``,
``A^ell = C M_g`` (= ``M_h C``), ``B^{ell-1} = M_g D``,
``f_mu(t_i) = [(M_g D H^{L-1})^T + C^L G^L]_{(i mu), i}``  (= ``gamma0^-1 <h^L_mu(t_i) g^L(t_i)>``),

base cases ``H^0 = K^x`` (constant in time), ``G^{L+1} = 1``, ``A^0 = B^L = 0``.  The equations
are iterated to a fixed point (Gauss-Seidel sweeps over layers in alternating direction,
optional damping), continued over growing time windows.
"""

from __future__ import annotations

import time

import numpy as np

from ...errors import ConvergenceError, DomainError
from .grid import TimeGrid, causal_mask, prepare_data
from .lazy import check_stability, lazy_kernels, static_ntk_dynamics
from .result import Diagnostics, DMFTResult

__all__ = ["solve_deep_linear"]


def solve_deep_linear(X=None, y=None, *, depth: int, gamma0: float, eta: float, steps: int,
                      X_test=None, kernel=None, closure: str | None = None, damping: float = 1.0,
                      tol: float = 1e-10, max_iter: int = 500,
                      gradient_independent: bool = False, window: int | None = None,
                      method: str = "march") -> DMFTResult:
    """Solve the deep linear DMFT of seed 000 on the discrete-GD grid.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (see :func:`effth.theories.dmft.grid.prepare_data`).
    depth : int
        Number of hidden layers ``L >= 1``.
    gamma0 : float
        Feature-learning strength; results are even in ``gamma0`` (spec §2.10).
    eta : float
        GD step; the network's parameter learning rate is ``eta gamma0^2 N``.
    steps : int
        Number of grid points ``T``.
    closure : {'exact', 'ntk'}, optional
        Default ``'exact'``, but ``'ntk'`` with ``gradient_independent`` (the exact-f identity
        needs the responses; spec §7.4's GI values use NTK-Euler).  ``'exact'``: ``f(t_i) = gamma0^-1 <h^L g^L>`` (exact limit of discrete GD, spec §2.4);
        ``'ntk'``: ``f_{i+1} = f_i + eta K(t_i, t_i) Delta_i``.
    damping : float in (0, 1]
        ``beta`` of the update ``x <- (1 - beta) x + beta x_new``.
    tol : float
        Stop when the max-abs change of every kernel, response and ``Delta`` is below ``tol``.
    max_iter : int
        Raise :class:`ConvergenceError` (with iteration and residual) after this many sweeps.
    gradient_independent : bool
        Set ``A = B = 0`` (the gradient-independence ansatz, spec §2.7).
    window : int, optional
        ``method='sweep'`` only: grid points added per continuation stage (default 10).
    method : {'march', 'sweep'}
        ``'march'`` (default): exact forward recursion in time -- by causality the time-``t``
        rows of every order parameter follow from earlier rows in one upward pass over layers
        (``H``, ``A``) and one downward pass (``G``, ``B``, ``M_g``), with no iteration; the
        result is then checked by one sweep of the fixed-point map (``diagnostics.residuals``;
        ``ConvergenceError`` if that residual exceeds ``tol`` times the largest kernel entry).
        ``'sweep'``: damped Gauss-Seidel sweeps of the whole-window fixed point, continued over
        growing time windows (``damping``, ``max_iter``, ``window`` apply).

    Returns
    -------
    DMFTResult

    Raises
    ------
    DomainError
        Bad data, bad hyperparameters, or ``eta lambda_max(K_NTK) >= 2``.
    ConvergenceError
        Divergent or non-converging iteration.
    """
    if int(depth) != depth or depth < 1:
        raise DomainError(f"depth={depth!r} must be a positive integer")
    if not np.isfinite(gamma0):
        raise DomainError(f"gamma0={gamma0!r} must be finite")
    if closure is None:
        closure = "ntk" if gradient_independent else "exact"
    if closure not in ("exact", "ntk"):
        raise DomainError(f"closure={closure!r} must be 'exact' or 'ntk'")
    if not (0.0 < damping <= 1.0):
        raise DomainError(f"damping={damping!r} must lie in (0, 1]")
    if method not in ("march", "sweep"):
        raise DomainError(f"method={method!r} must be 'march' or 'sweep'")
    data = prepare_data(X, y, X_test=X_test, kernel=kernel)
    grid = TimeGrid(float(eta), int(steps))
    L, T, n, P = int(depth), grid.steps, data.n_all, data.n_train
    _, _, _, ntk0 = lazy_kernels(data.kx, L, "linear")
    check_stability(ntk0[:P, :P], grid.eta)
    g2 = float(gamma0) ** 2
    t0 = time.perf_counter()
    diag = Diagnostics(tol=tol)
    # Causality: the solution on the first Tk grid points does not depend on later times, so the
    # fixed point is continued over growing windows (each stage starts from the converged prefix,
    # extended by holding the last time).  This avoids the transient growth of a Picard iteration
    # of the Volterra-type equations over the whole horizon (spec §2.7: undamped iteration from a
    # cold start can diverge).
    if method == "march":
        state, f = _march(data, L, T, grid.eta, g2, closure, gradient_independent)
        # a-posteriori check: one undamped sweep of the fixed-point map from the marched state
        check = Diagnostics(tol=tol)
        _, _ = _iterate([list(x) if isinstance(x, list) else x.copy() for x in state], data, L, T,
                        grid.eta, g2, closure, 1.0, np.inf, 1, gradient_independent, check)
        diag.iterations = 1
        diag.residuals = check.residuals
        # the check is limited by rounding: relative to the kernels' magnitude
        scale = max(1.0, max(float(np.max(np.abs(x))) for x in state[0] + state[1]))
        diag.converged = check.residuals[-1] < tol * scale
        if not diag.converged:
            raise ConvergenceError(
                f"marched deep linear DMFT fails its fixed-point check: residual "
                f"{check.residuals[-1]:.3g} > tol {tol:.3g} x kernel scale {scale:.3g} on {T} grid "
                "points (kernels too large for double precision? lower gamma0 or eta)")
    else:
        width = window if window else 10
        stages = list(range(min(width, T), T, width)) + [T]
        state = _initial_state(data, L, stages[0], grid.eta, ntk0)
        for k, Tk in enumerate(stages):
            if k:
                state = _extend(state, stages[k - 1], Tk, n)
            # intermediate stages only need to bring the new window close: the prefix keeps
            # converging in every later stage (the final stage enforces ``tol`` everywhere)
            stage_tol = tol if Tk == T else max(tol, 1e-4)
            state, f = _iterate(state, data, L, Tk, grid.eta, g2, closure, damping, stage_tol,
                                max_iter, gradient_independent, diag)
    diag.seconds = time.perf_counter() - t0
    H, G, A, B, _ = state
    return DMFTResult(
        grid=grid, data=data, depth=L, gamma0=float(gamma0), activation="linear",
        phi=np.stack([h.reshape(T, n, T, n) for h in H]),
        g=np.stack([np.broadcast_to(gg[:, None, :, None], (T, n, T, n)) for gg in G]),
        A=np.stack([a.reshape(T, n, T, 1) for a in A]) if L > 1 else np.zeros((0, T, n, T, 1)),
        B=np.stack([b.reshape(T, 1, T, n) for b in B]) if L > 1 else np.zeros((0, T, 1, T, n)),
        f=f, delta=data.y - f[:, :P], method="deep_linear", closure=closure, diagnostics=diag)


def _march(data, L, T, eta, g2, closure, gradient_independent):
    """Exact forward recursion in time of the closed equations (module docstring).

    Row ``t`` of ``C^ell`` needs ``A^{ell-1}``, ``H^{ell-1}`` at row ``t`` and ``Delta`` before ``t``;
    row ``t`` of ``A^ell = C^ell M_g^ell`` and ``H^ell = H^{ell-1} + gamma0^2 [C Y + (C Y)^T]`` need
    ``M_g``, ``G^ell``, ``M_g D`` only at earlier rows (``C`` is strictly causal), so an upward pass
    over layers gives them.  Row ``t`` of ``D^ell`` needs ``B^ell = M_g^{ell+1} D^{ell+1}`` and
    ``G^{ell+1}`` at row ``t``; ``M_g = 1 + gamma0^2 D (C M_g)``, ``M_g D`` and
    ``G^ell = M_g [G^{ell+1} + gamma0^2 D H^{ell-1} D^T] M_g^T`` at row ``t`` then follow in a
    downward pass.  ``f(t)`` (exact closure) uses row ``t`` only and ``Delta(t)`` enters later rows.
    ``Y = M_g D H^{ell-1} + G^ell C^T / 2`` is filled column block ``t`` (rows ``< t``, upward) and
    row ``t`` (columns ``<= t``, downward).
    """
    n, P = data.n_all, data.n_train
    Tn = T * n
    kx = data.kx
    H0 = np.tile(kx, (T, T))
    H = [np.zeros((Tn, Tn)) for _ in range(L)]
    G = [np.zeros((T, T)) for _ in range(L)]
    C = [np.zeros((Tn, T)) for _ in range(L)]
    D = [np.zeros((T, Tn)) for _ in range(L)]
    Af = [np.zeros((Tn, T)) for _ in range(L)]       # C M_g
    MD = [np.zeros((T, Tn)) for _ in range(L)]       # M_g D
    Mg = [np.zeros((T, T)) for _ in range(L)]
    Y = [np.zeros((T, Tn)) for _ in range(L)]
    Z = [np.zeros((T, T)) for _ in range(L)]          # G^{ell+1} + gamma0^2 D H^{ell-1} D^T
    delta = np.zeros((T, n))
    f = np.zeros((T, n))
    ones = np.ones((T, T))
    K_prev = None                                    # K(t-1, t-1)[:, :P] for the NTK closure
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(T):
            rt = slice(t * n, (t + 1) * n)
            m = (t + 1) * n
            # ---------------- upward: C, A, Y column block t, H row t
            for ell in range(1, L + 1):
                Hp = H0 if ell == 1 else H[ell - 2]
                c = C[ell - 1]
                if t:
                    c[rt, :t] = eta * (Hp[rt, : t * n].reshape(n, t, n) * delta[:t][None]).sum(axis=2)
                    if ell >= 2 and not gradient_independent:
                        c[rt, :t] += Af[ell - 2][rt, :t]
                    Af[ell - 1][rt, :t] = c[rt, :t] @ Mg[ell - 1][:t, :t]
                    Yl = Y[ell - 1]
                    Yl[:t, rt] = MD[ell - 1][:t, : t * n] @ Hp[: t * n, rt] \
                        + 0.5 * G[ell - 1][:t, :t] @ c[rt, :t].T
                    cy_row = c[rt, :t] @ Yl[:t, :m]                   # (C Y)[t, s <= t]
                    cy_col = c[:m, :t] @ Yl[:t, rt]                   # (C Y)[s <= t, t]
                    Hrow = Hp[rt, :m] + g2 * (cy_row + cy_col.T)
                else:
                    Hrow = Hp[rt, :m].copy()
                Hl = H[ell - 1]
                Hl[rt, :m] = Hrow
                Hl[:m, rt] = Hrow.T
            # ---------------- downward: D, M_g, M_g D, G, Y row t
            for ell in range(L, 0, -1):
                Hp = H0 if ell == 1 else H[ell - 2]
                Gn = ones if ell == L else G[ell]
                d = D[ell - 1]
                if t:
                    d[t, : t * n] = eta * (Gn[t, :t][:, None] * delta[:t]).reshape(-1)
                if ell <= L - 1 and not gradient_independent:
                    d[t, :m] += MD[ell][t, :m]
                mg = Mg[ell - 1]
                mg[t, : t + 1] = g2 * d[t, :m] @ Af[ell - 1][:m, : t + 1]
                mg[t, t] += 1.0
                MD[ell - 1][t, :m] = mg[t, : t + 1] @ d[: t + 1, :m]
                # Z = G^{ell+1} + gamma0^2 D H^{ell-1} D^T (symmetric), row and column t;
                # G row t = (M_g Z M_g^T)[t, <= t]
                Zl = Z[ell - 1]
                zrow = Gn[t, : t + 1] + g2 * (d[t, :m] @ Hp[:m, :m]) @ d[: t + 1, :m].T
                Zl[t, : t + 1] = zrow
                Zl[: t + 1, t] = zrow
                Grow = (mg[t, : t + 1] @ Zl[: t + 1, : t + 1]) @ mg[: t + 1, : t + 1].T
                Gl = G[ell - 1]
                Gl[t, : t + 1] = Grow
                Gl[: t + 1, t] = Grow
                Y[ell - 1][t, :m] = MD[ell - 1][t, :m] @ Hp[:m, :m] \
                    + 0.5 * Gl[t, :t] @ C[ell - 1][:m, :t].T
            # ---------------- predictions and error signal at time t
            if closure == "exact":
                HpL = H0 if L == 1 else H[L - 2]
                f[t] = MD[L - 1][t, :m] @ HpL[:m, rt] + C[L - 1][rt, :t] @ G[L - 1][:t, t]
            elif t:
                f[t] = f[t - 1] + eta * K_prev @ delta[t - 1, :P]
            if closure == "ntk":
                K_prev = G[0][t, t] * kx[:, :P]
                for ell in range(1, L + 1):
                    gnext = G[ell][t, t] if ell < L else 1.0
                    K_prev = K_prev + gnext * H[ell - 1][rt, t * n: t * n + P]
            delta[t, :P] = data.y - f[t, :P]
            if not (np.all(np.isfinite(f[t])) and abs(G[0][t, t]) < 1e12):
                raise ConvergenceError(
                    f"deep linear DMFT diverged at time step {t} of {T} (kernels not finite or "
                    "above 1e12); lower gamma0 or eta")
    return (H, G, Af[: L - 1], MD[1:], delta), f


def _initial_state(data, L, T, eta, ntk0):
    """Lazy kernels tiled in time, ``A = B = 0``, static-NTK error signal."""
    n, P = data.n_all, data.n_train
    H0 = np.tile(data.kx, (T, T))
    f0 = static_ntk_dynamics(ntk0, data.y, eta, T)
    return ([H0.copy() for _ in range(L)], [np.ones((T, T)) for _ in range(L)],
            [np.zeros((T * n, T)) for _ in range(L - 1)],
            [np.zeros((T, T * n)) for _ in range(L - 1)], data.pad(data.y - f0[:, :P]))


def _extend(state, T_old, T_new, n):
    """Extend a converged state from ``T_old`` to ``T_new`` grid points (hold the last time)."""
    H, G, A, B, delta = state
    idx = np.minimum(np.arange(T_new), T_old - 1)
    strict = causal_mask(T_new)
    lower = causal_mask(T_new, strict=False)
    H = [h.reshape(T_old, n, T_old, n)[idx][:, :, idx].reshape(T_new * n, T_new * n) for h in H]
    G = [gg[idx][:, idx] for gg in G]
    A = [(a.reshape(T_old, n, T_old)[idx][:, :, idx] * strict[:, None, :]).reshape(T_new * n, T_new)
         for a in A]
    B = [(b.reshape(T_old, T_old, n)[idx][:, idx] * lower[:, :, None]).reshape(T_new, T_new * n)
         for b in B]
    return H, G, A, B, delta[idx]


def _iterate(state, data, L, T, eta, g2, closure, damping, tol, max_iter, gradient_independent,
             diag):
    """Fixed-point sweeps of the closed equations on ``T`` grid points (see module docstring)."""
    H, G, A, B, delta = state
    n, P = data.n_all, data.n_train
    mask = causal_mask(T).astype(float)
    H0 = np.tile(data.kx, (T, T))
    ones = np.ones((T, T))
    beta = damping
    for it in range(1, max_iter + 1):
        res = 0.0
        # Gauss-Seidel over layers, alternating direction: information travels through all
        # layers in one sweep (H upwards, G downwards).
        order = range(1, L + 1) if it % 2 else range(L, 0, -1)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for ell in order:
                Hprev = H0 if ell == 1 else H[ell - 2]
                Gnext = ones if ell == L else G[ell]
                C = np.einsum("imjn,jn->imj", Hprev.reshape(T, n, T, n), delta) * (
                    eta * mask[:, None, :])
                C = C.reshape(T * n, T)
                D = (eta * mask * Gnext)[:, :, None] * delta[None, :, :]
                D = D.reshape(T, T * n)
                if not gradient_independent:
                    if ell >= 2:
                        C = C + A[ell - 2]
                    if ell <= L - 1:
                        D = D + B[ell - 1]
                DC = D @ C
                try:
                    if not np.all(np.isfinite(DC)):
                        raise np.linalg.LinAlgError("non-finite kernels")
                    Mg = np.linalg.inv(np.eye(T) - g2 * DC)
                except np.linalg.LinAlgError as exc:
                    raise ConvergenceError(
                        f"deep linear DMFT iteration diverged at iteration {diag.iterations + 1} "
                        f"(grid points {T}, {exc}; last residual "
                        f"{diag.residuals[-1] if diag.residuals else float('nan'):.3g}); "
                        "lower gamma0 or eta, or damp") from None
                E = D @ Hprev
                MgE = Mg @ E
                Gl = Mg @ (Gnext + g2 * (E @ D.T)) @ Mg.T
                CY = C @ (MgE + 0.5 * Gl @ C.T)
                Hl = Hprev + g2 * (CY + CY.T)
                if ell == L and closure == "exact":
                    f_new = _exact_closure(Hprev, Gl, Mg,
                                           None if (L == 1 or gradient_independent)
                                           else A[ell - 2], data, eta)
                res = max(res, float(np.max(np.abs(Hl - H[ell - 1]))),
                          float(np.max(np.abs(Gl - G[ell - 1]))))
                H[ell - 1] = (1 - beta) * H[ell - 1] + beta * Hl
                G[ell - 1] = (1 - beta) * G[ell - 1] + beta * Gl
                if ell <= L - 1:
                    Al = C @ Mg
                    res = max(res, float(np.max(np.abs(Al - A[ell - 1]))))
                    A[ell - 1] = (1 - beta) * A[ell - 1] + beta * Al
                if ell >= 2:
                    Bl = Mg @ D
                    res = max(res, float(np.max(np.abs(Bl - B[ell - 2]))))
                    B[ell - 2] = (1 - beta) * B[ell - 2] + beta * Bl
            if closure == "ntk":
                f_new = _ntk_euler(data.kx, H, G, data.y, eta)
            delta_new = data.pad(data.y - f_new[:, :P])
            res = max(res, float(np.max(np.abs(delta_new - delta))))
        diag.residuals.append(res)
        diag.iterations += 1
        if not np.isfinite(res) or res > 1e8:
            raise ConvergenceError(
                f"deep linear DMFT iteration diverged at iteration {diag.iterations} "
                f"(grid points {T}, residual {res:.3g}); lower gamma0 or eta, or damp")
        delta = (1 - beta) * delta + beta * delta_new
        if res < tol:
            diag.converged = True
            return (H, G, A, B, delta), f_new
    diag.converged = False
    raise ConvergenceError(
        f"deep linear DMFT did not converge in {max_iter} iterations on {T} grid points "
        f"(last residual {diag.residuals[-1]:.3g} > tol {tol:.3g}); raise max_iter or damp")


def _exact_closure(Hm, GL, Mg, Am, data, eta):
    """Exact discrete-GD predictions ``f(t_i) = gamma0^-1 <h^L(t_i) g^L(t_i)>`` solved forward in time.

    With the kernels ``H^{L-1}``, ``G^L``, ``A^{L-1}`` and ``M_g`` of the last layer held fixed,
    ``f_mu(t_i) = sum_s A^{L-1}_{(i mu), s} G^L(s, i)
    + eta sum_{s<i} sum_alpha [H^{L-1}_{mu alpha}(i, s) G^L(s, i)
    + sum_{s < t' <= i} M_g(i, t') H^{L-1}_{alpha mu}(s, i)] Delta_alpha(s)``
    (the closed form of spec §2.4 with ``D^L = eta Theta Delta``) depends on ``Delta`` at earlier
    times only, so ``Delta_i = y - f(t_i)`` is solved step by step.  Substituting ``Delta`` from
    the previous sweep instead (Picard) amplifies errors like a Volterra iteration and diverges
    from a cold start (spec §2.7).
    """
    T = GL.shape[0]
    n, P = data.n_all, data.n_train
    H4 = Hm.reshape(T, n, T, n)
    # c[i, s] = sum_{s < t' <= i} Mg[i, t']   (zero for s >= i)
    cum = np.cumsum(Mg[:, ::-1], axis=1)[:, ::-1]          # cum[i, s] = sum_{t' >= s} Mg[i, t']
    c = np.zeros((T, T))
    c[:, :-1] = cum[:, 1:]
    c = np.tril(c, k=-1)
    W = eta * (H4 * GL.T[:, None, :, None] + c[:, None, :, None] * H4.transpose(2, 3, 0, 1))
    W = W * np.tril(np.ones((T, T)), k=-1)[:, None, :, None]
    f = np.zeros((T, n))
    if Am is not None:
        f += np.einsum("ims,si->im", Am.reshape(T, n, T), GL)
    delta = np.zeros((T, P))
    for i in range(T):
        if i:
            f[i] += np.einsum("msa,sa->m", W[i, :, :i, :P], delta[:i])
        delta[i] = data.y - f[i, :P]
    return f


def _ntk_euler(kx, H, G, y, eta):
    """NTK-Euler closure ``f_{i+1} = f_i + eta K(t_i, t_i) Delta_i`` from the current kernels."""
    T = G[0].shape[0]
    n = kx.shape[0]
    P = y.size
    idx = np.arange(T)
    Kd = G[0][idx, idx][:, None, None] * kx[None]
    for ell in range(len(H)):
        Hd = H[ell].reshape(T, n, T, n)[idx, :, idx, :]
        gnext = G[ell + 1][idx, idx] if ell + 1 < len(G) else np.ones(T)
        Kd = Kd + gnext[:, None, None] * Hd
    f = np.zeros((T, n))
    for i in range(T - 1):
        f[i + 1] = f[i] + eta * Kd[i][:, :P] @ (y - f[i, :P])
    return f
