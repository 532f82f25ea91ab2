"""Two-layer (L = 1) DMFT by forward marching in time: deterministic quadrature or Monte Carlo.

For one hidden layer the kernels that drive the single-site process are fixed, ``Phi^0 = K^x`` and
``G^2 = 1``, and there are no responses ``A``, ``B`` (Bordelon & Pehlevan (2022), eqs. (23), (33), (66)-(67)).  On the discrete-GD grid
(Bordelon & Pehlevan (2022), App. M; Bordelon & Pehlevan (2022), App. M) with weight decay ``lambda`` (``theta <- (1 - eta lambda) theta + ...``,
Bordelon & Pehlevan (2022), App. J in discrete time, ``rho = 1 - eta lambda``) the single-site fields are

``h_mu(t_i) = rho^i u_mu + gamma0 eta sum_alpha K^x_{mu alpha} a_alpha(i)``,
``z(t_i) = rho^i r + gamma0 eta sum_alpha b_alpha(i)``,  ``g = phi'(h) z``,

``a(i+1) = rho a(i) + Delta(t_i) g(t_i)``, ``b(i+1) = rho b(i) + Delta(t_i) phi(h(t_i))``,

with ``u ~ N(0, K^x)`` constant in time and ``r ~ N(0, 1)`` one scalar, and the predictions are the
exact single-site average ``f_mu(t_i) = gamma0^-1 <z(t_i) phi(h_mu(t_i))>`` (Bordelon & Pehlevan (2022), eqs. (3), (21), App. M), which
needs fields at ``t_i`` only.  ``Delta(t_i) = y - f(t_i)`` enters later times only, so the whole
DMFT is one forward pass: no fixed-point iteration at all.  The average over ``(u, r)`` -- a
``rank(K^x) + 1``-dimensional Gaussian -- is done by a deterministic tensor rule (for small ``P``;
the same rule as the two-layer gamma0-series, :func:`effth.dmft.solvers.lazy.lazy_rule_kind`) or by
antithetic Monte Carlo.
"""

from __future__ import annotations

from effth import _validate as _v
from effth._signature import public

import time

import numpy as np

from effth._threads import limits_blas_threads

from effth.errors import DomainError
from effth._validate import weight_variance_values, width_ratio_values
from effth.numerics._rules import covariance_root
from effth.dmft.solvers.lazy import lazy_nodes, lazy_rule_kind
from effth.dmft.grid import TimeGrid, langevin_settings, parameter_filter, prepare_targets, real_scalar
from effth.dmft.solvers.lazy import check_langevin_step, check_stability_along, activation_label, check_stability, lazy_kernels, resolve_activation, static_ntk_dynamics, static_ntk_solve
from effth.dmft.result import Diagnostics, DMFTResult

__all__ = ["solve_two_layer"]


@public
@limits_blas_threads
def solve_two_layer(X=None, y=None, *, gamma0: float, eta: float, steps: int,
                    activation="tanh", X_test=None, kernel=None,
                    method: str = "quadrature", nodes: int | None = None, max_nodes: int = 64_000,
                    samples: int = 20_000, seed=0, weight_decay: float = 0.0,
                    two_time: bool = True, bias: bool = False,
                    quad_tol: float | None = 1e-4, quadrature_rule: str = "auto",
                    temperature: float = 0.0, momentum: float = 0.0,
                    width_ratios=None, weight_variances=None) -> DMFTResult:
    """Solve the two-layer (``L = 1``) DMFT, optionally with weight decay, in one pass over time.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (see :func:`effth.dmft.grid.prepare_data`).  ``y`` of shape
        ``(P, C)`` gives ``C`` outputs (Bordelon & Pehlevan (2022), App. I): ``z, g`` carry an output index, ``r ~ N(0, I_C)``,
        ``f_{mu c} = gamma0^-1 <z_c phi(h_mu)>``; then ``f`` is ``(T, n, C)``, ``delta`` ``(T, P, C)`` and
        ``g`` ``(1, T, n, T, n, C, C)``.
    gamma0, eta, steps
        Feature-learning strength, GD step (grid ``t_i = i eta``) and number of grid points.
    activation : str, Activation or sympy.Expr
        Any registered name or alias (``effth.available_activations()``), an
        :class:`~effth.activations.Activation`, or a SymPy expression in ``z``.
    method : {'quadrature', 'monte_carlo'}
        ``'quadrature'``: tensor rule over the ``rank(K^x) + 1`` Gaussian coordinates of
        ``(u, r)``: Gauss-Hermite in ``r``; in ``u`` Gauss-Hermite for polynomial activations
        (exact at low degree) and below 36 nodes, the truncated trapezoid rule from 36 nodes on
        for other activations (see ``quadrature_rule``; kinks such as ReLU converge slowly with either).
        ``'monte_carlo'``: ``samples`` antithetic draws ``(u, r), (u, -r)``.
    nodes : int, optional
        Nodes per dimension; default the largest with ``nodes**d <= max_nodes``, ``d`` =
        ``rank(K^x) + C`` (at most 80: 80 for one training point, 40 for two;
        ``DomainError`` if that is fewer than 5).
        Accuracy of the default (40 trapezoid nodes) against 160 (two points,
        ``K^x = [[1, .5], [.5, 1]]``, ``eta = 0.1``, ``T = 30``; largest error over the run
        relative to the largest entry of ``f`` / loss / ``Phi(t,t)`` / ``G(t,t)``):
        ``gamma0 = 0.3``: tanh 8e-6 / 1e-7 / 2e-5 / 2e-4, GELU 1e-8 / 4e-9 / 1e-8 / 2e-7,
        erf 1e-5 / 9e-7 / 3e-5 / 2e-4; ``gamma0 = 1``: tanh 3e-5 / 9e-6 / 2e-4 / 4e-4,
        GELU 4e-6 / 9e-7 / 2e-5 / 9e-5, erf 4e-5 / 2e-5 / 3e-4 / 7e-4 (the former default, 31
        Gauss-Hermite nodes, was 3-6x worse).  A relative accuracy of 1e-8 needs about 80 nodes in
        ``u`` even at ``gamma0 = 0.3`` (the gamma0^2 coefficients alone: 1.8e-4 at 40 nodes,
        1e-8 at 60, 1e-13 at 80); the integrand's strip of analyticity also narrows as
        ``gamma0 |r| t`` grows, so strong feature learning converges more slowly still.
        ``diagnostics.quadrature_error`` estimates the error, and a default budget that misses
        ``quad_tol`` is refused (see ``quad_tol``).
    quadrature_rule : {'auto', 'hermite', 'trapezoid'}
        Quadrature rule in ``u`` (:func:`effth.dmft.solvers.lazy.lazy_rule_kind`);
        ``'auto'`` as described under ``method``.
    weight_decay : float
        ``lambda >= 0``: every parameter is multiplied by ``1 - eta lambda`` at each GD step
        (the discrete form of ``d theta/dt = -gamma^2 grad L - lambda theta``, Bordelon & Pehlevan (2022), App. J).
    bias : bool
        Trainable bias on the hidden preactivation, ``h = W^0 x / sqrt(D) + b``, ``b(0) ~ N(0, 1)``,
        ``db/dt = gamma0 sum_mu Delta_mu g_mu`` (Bordelon & Pehlevan (2022), App. H): exactly the input kernel
        ``K^x + 1`` (the returned ``data.kx`` and hence the NTK include the ``+1``).
    temperature : float
        Langevin temperature ``1/beta >= 0`` (Bordelon & Pehlevan (2022), App. K; the meaning of
        :func:`~effth.dmft.solve_deep_linear`'s keyword and of the trainer's): every parameter gets
        noise of variance ``sigma^2 = temperature (1 - rho^2) / weight_decay`` per step, so each
        single site carries the noise paths ``nu(t+1) = rho nu(t) + sigma K^{1/2} xi_u(t)`` in ``h``
        and ``rho nz + sigma xi_r`` in ``z`` (at ``L = 1`` there are no response terms: the
        fields of eq. (112) with ``A = B = 0``).  With ``momentum`` too (underdamped Langevin
        dynamics, :class:`~effth.dmft.grid.ParameterFilter`) the noise enters the heavy-ball
        increment like the gradient, ``v_nu <- mu v_nu + (1 - mu) (sigma K^{1/2} xi_u - eta
        lambda nu)``, ``nu <- nu + v_nu`` (likewise ``nz``), with ``sigma^2`` of
        :func:`~effth.dmft.grid.langevin_noise` that keeps the prior ``temperature /
        weight_decay``; ``momentum=0`` is the GD noise recursion above bit for bit.
        ``method='monte_carlo'`` only (the noise paths are ``T``-dimensional); the step must
        satisfy ``eta (lambda_max(K_eq) + weight_decay) < 2 (1 + mu) / (1 - mu)`` with ``K_eq``
        the lazy NTK at weight variance ``max(1, temperature / weight_decay)``.
    momentum : float
        Heavy-ball coefficient ``mu`` in ``[0, 1)`` (Bordelon & Pehlevan (2022), App. L; as in
        :func:`~effth.dmft.solve_deep_linear`): the accumulated drifts obey
        ``v <- mu v + (1 - mu) (d - eta lambda a)``, ``a <- a + v``, and the initial parts carry
        ``a(t)`` of :class:`~effth.dmft.grid.ParameterFilter`.  Together with ``temperature > 0``
        see ``temperature`` (the noise paths follow the same heavy-ball memory).
    width_ratios : sequence of one float, optional
        ``(a_1,)``: hidden width ``N_1 = a_1 N`` against the reference width ``N`` of
        ``gamma = gamma0 sqrt(N)`` (Bordelon & Pehlevan (2022), App. D.8; the conventions of
        :func:`~effth.dmft.solve_deep_linear`).  The hidden layer feels ``gamma_1 = gamma0 /
        sqrt(a_1)`` in its drifts (eq. (58)) and ``f = gamma_1^-1 <z phi(h)>``: with one hidden
        layer this is the equal-width solver at ``gamma0 / sqrt(a_1)`` (``result.gamma0`` stays the
        given ``gamma0``).  ``None`` or ``(1,)``: equal widths, bit for bit.
    weight_variances : sequence of two floats, optional
        ``(sigma_0^2, sigma_1^2)``: initial variances of the input weights and the readout
        (Bordelon & Pehlevan (2022), App. D.8): ``u ~ N(0, sigma_0^2 K^x)``, ``r ~ N(0,
        sigma_1^2)`` (the nodes scaled by ``sigma``), the drifts and the NTK formula unchanged
        (lazy NTK ``sigma_1^2 <phi' phi'> K^x + Phi``).  ``None`` or ones: bit for bit the unit
        variances.  With ``bias`` the bias keeps its unit variance, ``u ~ N(0, sigma_0^2 K^x +
        1)``, and the drift and NTK use ``K^x + 1``; with ``temperature > 0`` only the initial
        parts scale with ``sigma``, the noise paths keep ``sigma^2 (K^x (+ 1))`` and ``sigma^2``
        per step (the Langevin noise does not depend on the initial variance).
    two_time : bool
        Form the two-time kernels (memory ``S T n`` for the field history); else only the
        equal-time blocks ``Phi(t, t)``, ``G(t, t)`` are filled (other entries zero).

    quad_tol : float or None
        Quadrature only: an error estimate of the returned rule, in
        ``result.diagnostics.quadrature_error`` (keys ``f``, ``loss``, ``phi``, ``g``: max-abs
        errors of ``f``, the loss, ``Phi(t,t)``, ``G(t,t)``; ``lazy_*``: their lazy parts).  For
        plain GD (no weight decay or momentum) it is the sum of two parts: the rule's error in the
        lazy limit, *exact* (the ``gamma0 -> 0`` march on the same nodes is static-NTK GD with the
        rule's kernels ``<phi phi^T>``, ``<phi' phi'^T>``; these against the closed forms or
        accurate two-dimensional rules of :func:`~effth.dmft.solvers.lazy.lazy_kernels`), plus
        the difference of what feature learning adds to it between this rule and a rerun at ``3/4``
        of the nodes (about ``0.4x`` the cost for three Gaussian dimensions, less for more), doubled
        for Gauss-Hermite, whose error oscillates with the node count.  With weight decay or
        momentum it is the plain difference to the rerun.  Checked as a bound against 90-200-node
        trapezoid rules (tanh, erf, GELU, softplus, sigmoid, swish; two and three Gaussian
        dimensions; ``gamma0`` 0.1-2: 1-100x the actual error), against the exact lazy limit,
        and in four dimensions with feature learning (``gamma0`` 0.5-2; 15-36 nodes: 1.9-24x):
        tanh and erf on three inputs of unit kernel diagonal against 44-node rules, erf with a
        trainable bias on three training and one test input against 4e6 Monte-Carlo samples
        (standard error 9e-4).  If the estimate for ``f`` exceeds ``quad_tol``, the default node budget
        (``nodes=None``) is refused with a ``DomainError`` naming what to pass (``nodes=``,
        ``max_nodes=``, ``method='monte_carlo'``, or a larger ``quad_tol``); given ``nodes`` only
        warn (:class:`~effth.errors.AccuracyWarning`).  When the exact lazy part alone exceeds
        ``quad_tol`` the default budget is refused before the time loop.  ``None`` skips the
        estimate and the check.  The default ``1e-4`` is met by the default nodes on two
        training points at moderate kernel scales (canonical two-point data, tanh, ``gamma0 =
        1``, ``eta = 0.1``, ``T = 30``: the default 40 nodes are 2.3e-5 off in ``f`` against 160
        nodes, the estimate reads 8.3e-5).  With ``rank(K^x) = 3`` (three training points, or two
        and a test point: four dimensions, 15 Gauss-Hermite nodes) the default is refused in the
        cases checked: tanh, unit kernel diagonal, ``gamma0 = 0.5``: 6e-5 off, estimated 2.8e-4;
        ``nodes=24`` (6.6x the points) is estimated at 9.4e-5 (1.0e-4 at ``gamma0 = 2``) and
        ``nodes=36`` (trapezoid, 33x) at 3.3e-5.  Erf with a trainable bias and ``K^x`` diagonal up to 6 is 0.04-0.05 off at 15
        nodes and still 0.01-0.03 at 20-24 (its narrow ``phi'`` is poorly resolved by every rule
        up to the 5e6-point cap): use ``method='monte_carlo'`` there.

    Returns
    -------
    DMFTResult
        ``method`` is ``'two_layer_quadrature'`` or ``'two_layer_monte_carlo'``; ``A``, ``B`` are
        empty (no responses at ``L = 1``).

    Raises
    ------
    DomainError
        Bad input, too many quadrature dimensions, ``eta lambda_max(K_NTK) >= 2``, or a default
        node budget whose estimated error exceeds ``quad_tol``.
    """
    if method not in ("quadrature", "monte_carlo"):
        raise DomainError(f"method={method!r} must be 'quadrature' or 'monte_carlo'")
    if quadrature_rule not in ("auto", "hermite", "trapezoid"):
        raise DomainError(f"quadrature_rule={quadrature_rule!r} must be 'auto', 'hermite' or "
                          "'trapezoid' (a learning rule is chosen with solve_rule_two_layer)")
    gamma0, eta = real_scalar(gamma0, "gamma0"), real_scalar(eta, "eta")
    if not np.isfinite(gamma0):
        raise DomainError(f"gamma0={gamma0!r} must be a finite real number")
    ratios = width_ratio_values(width_ratios, 1)
    variances = weight_variance_values(weight_variances, 2)
    act = resolve_activation(activation)
    grid = TimeGrid(eta, steps)
    rho, temperature, momentum = langevin_settings(grid.eta, weight_decay, temperature, momentum)
    if temperature > 0 and method != "monte_carlo":
        raise DomainError("temperature > 0 needs method='monte_carlo' (the single-site noise paths "
                          "are T-dimensional; no quadrature rule over them)")
    data, Y, multi = prepare_targets(X, y, X_test=X_test, kernel=kernel, bias=bool(bias))
    T, n, P, C = grid.steps, data.n_all, data.n_train, Y.shape[1]
    if gamma0 == 0 and (temperature > 0 or momentum > 0):
        raise DomainError("gamma0 = 0 with temperature or momentum is not solved here (output "
                          "factor 1/gamma0); use a small gamma0 > 0")
    if gamma0 == 0 and weight_decay == 0 and not multi:
        return static_ntk_solve(data, grid, act, hidden_layers=1, bias=bool(bias),
                                weight_variances=variances)
    if gamma0 == 0:
        raise DomainError("gamma0 = 0 with weight decay (trivial fixed point f = K = 0) or several "
                          "outputs is not solved here (output factor 1/gamma0); use gamma0 > 0")
    _, _, _, ntk0 = lazy_kernels(data.kx, act, hidden_layers=1, bias=bool(bias),
                                 weight_variances=variances)
    check_stability(ntk0[:P, :P], grid.eta, edge=2.0 * (1.0 + momentum) / (1.0 - momentum))
    lam = float(weight_decay)
    if (temperature > 0 or momentum > 0) and lam > 0:
        v = max(1.0, temperature / lam)
        check_langevin_step(_two_layer_eq_ntk(v, data.kx, act)[:P, :P], grid.eta, lam, v,
                            momentum)
    filt = parameter_filter(grid.eta, T, weight_decay, temperature, momentum)
    phi_f, dphi_f = act.numpy(0), act.numpy(1)
    gam = float(gamma0) if ratios is None else float(gamma0) / np.sqrt(ratios[0])  # gamma_1
    t0 = time.perf_counter()
    src = _source_kernel(data.kx, variances, bias)
    u, r, w, used, kind = _nodes(src, method, nodes, max_nodes, samples, seed, C, act,
                                 quadrature_rule)
    if variances is not None:               # u ~ N(0, sigma_0^2 K^x (+ 1)), r ~ N(0, sigma_1^2)
        u = u if bias else np.sqrt(variances[0]) * u
        r = np.sqrt(variances[1]) * r
    S = w.size
    lazy = exact = None
    if method == "quadrature" and quad_tol is not None and lam == 0 and momentum == 0:
        # the rule's own lazy limit against the exact one (closed forms / accurate 2-D rules)
        exact = _lazy_exact(data.kx, act, Y, grid.eta, T, variances, bias)
        lazy = _lazy_on_rule(u, w, phi_f, dphi_f, data.kx, Y, grid.eta, T, variances)
        e_lazy = float(np.max(np.abs(lazy[2] - exact[2])))
        if e_lazy > quad_tol and nodes is None:
            _too_coarse({"f": e_lazy, "lazy_f": e_lazy}, used, None, S, quad_tol, refuse=True)
    Kx_tr = data.kx[:, :P]                                  # (n, P): only training points drive
    a = np.zeros((S, P))                                    # sum_c Delta_c g_c, decayed
    b = np.zeros((S, C))
    mu = momentum
    if mu > 0:
        va, vb = np.zeros((S, P)), np.zeros((S, C))         # heavy-ball velocities of a, b
    noisy = temperature > 0
    if noisy:
        sigma = float(np.sqrt(filt.noise))
        root = covariance_root(data.kx)
        nrng = _noise_rng(seed)
        nu, nz = np.zeros((S, n)), np.zeros((S, C))          # Langevin noise parts of h, z
        if mu > 0:                                          # their heavy-ball velocities
            vnu, vnz = np.zeros((S, n)), np.zeros((S, C))
        half = S // 2
    if two_time:
        ph_hist = np.empty((T, S, n))
        g_hist = np.empty((T, S, n, C))
    phi = np.zeros((T, n, T, n))
    gg = np.zeros((T, n, C, T, n, C))
    f = np.zeros((T, n, C))
    delta = np.zeros((T, P, C))
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(T):
            decay = rho ** i if mu == 0 else filt.init[i]
            h = decay * u + gam * grid.eta * a @ Kx_tr.T
            z = decay * r + gam * grid.eta * b                              # (S, C)
            if noisy:
                h, z = h + nu, z + nz
            ph = phi_f(h)
            g = dphi_f(h)[:, :, None] * z[:, None, :]                       # (S, n, C)
            if two_time:
                ph_hist[i], g_hist[i] = ph, g
            else:
                phi[i, :, i, :] = (ph.T * w) @ ph
                gi = g.reshape(S, n * C)
                gg[i, :, :, i, :, :] = ((gi.T * w) @ gi).reshape(n, C, n, C)
            f[i] = (ph.T * w) @ z / gam
            if not np.all(np.isfinite(f[i])):
                raise DomainError(f"two-layer DMFT diverged at time step {i}; lower gamma0 or eta")
            delta[i] = Y - f[i, :P]
            da, db = np.einsum("sac,ac->sa", g[:, :P], delta[i]), ph[:, :P] @ delta[i]
            if mu == 0:
                a = rho * a + da
                b = rho * b + db
            else:
                va = mu * va + (1.0 - mu) * (da - grid.eta * lam * a)
                vb = mu * vb + (1.0 - mu) * (db - grid.eta * lam * b)
                a, b = a + va, b + vb
            if noisy:
                # antithetic like (u, r): the same xi_u for both halves, xi_r negated
                xu = nrng.standard_normal((half, root.shape[1]))
                xr = nrng.standard_normal((half, C))
                ku = sigma * (np.concatenate([xu, xu]) @ root.T)
                kr = sigma * np.concatenate([xr, -xr])
                if mu == 0:
                    nu, nz = rho * nu + ku, rho * nz + kr
                else:       # underdamped: the noise enters the heavy-ball increment (App. K, L)
                    vnu = mu * vnu + (1.0 - mu) * (ku - grid.eta * lam * nu)
                    vnz = mu * vnz + (1.0 - mu) * (kr - grid.eta * lam * nz)
                    nu, nz = nu + vnu, nz + vnz
    if two_time:
        Phm = ph_hist.transpose(1, 0, 2).reshape(S, T * n)
        Gm = g_hist.transpose(1, 0, 2, 3).reshape(S, T * n * C)
        phi = ((Phm.T * w) @ Phm).reshape(T, n, T, n)
        gg = ((Gm.T * w) @ Gm).reshape(T, n, C, T, n, C)
    gg = gg.transpose(0, 1, 3, 4, 2, 5)                                     # (T, n, T, n, C, C)
    if not multi:
        f, delta, gg = f[..., 0], delta[..., 0], gg[..., 0, 0]
    diag = Diagnostics(iterations=1, residuals=[0.0], converged=True, tol=0.0,
                       seconds=time.perf_counter() - t0)
    if method == "quadrature" and quad_tol is not None:
        coarse = max(2, (3 * used) // 4)
        kw = dict(kernel=data.kx - (1.0 if bias else 0.0), y=y, gamma0=float(gamma0), eta=grid.eta,
                  steps=T, activation=act, method="quadrature", nodes=coarse,
                  weight_decay=weight_decay, two_time=False, bias=bool(bias), quad_tol=None,
                  quadrature_rule=kind, momentum=momentum, width_ratios=ratios,
                  weight_variances=variances)
        if X_test is not None or X is not None:
            kw = dict(kw, kernel=None, X=X, X_test=X_test)
        lo = solve_two_layer(**kw)
        lazy_lo = None
        if lazy is not None:
            u2, _, w2, _, _ = _nodes(src, "quadrature", coarse, max_nodes, samples, seed, C,
                                     act, kind)
            if variances is not None and not bias:
                u2 = np.sqrt(variances[0]) * u2
            lazy_lo = _lazy_on_rule(u2, w2, phi_f, dphi_f, data.kx, Y, grid.eta, T, variances)
        f3 = f if multi else f[..., None]
        g6 = gg if multi else gg[..., None, None]
        lo_f = lo.f if multi else lo.f[..., None]
        lo_g = lo.g[0] if multi else lo.g[0][..., None, None]
        err = _error_estimate(f3, phi, g6, lo_f, lo.phi[0], lo_g, Y, P, lazy, lazy_lo, exact,
                              factor=2.0 if kind == "hermite" else 1.0)
        err.update(nodes=(used, coarse), rule=kind)
        diag.quadrature_error = err
        if err["f"] > quad_tol:
            _too_coarse(err, used, coarse, np.size(w), quad_tol, refuse=nodes is None)
    empty = np.zeros((0, T, n, T, n))
    return check_stability_along(DMFTResult(grid=grid, data=data, hidden_layers=1, gamma0=float(gamma0),
                      activation=activation_label(act),
                      phi=phi[None], g=gg[None], A=empty,
                      B=empty.copy(), f=f, delta=delta, method=f"two_layer_{method}",
                      closure="exact", diagnostics=diag, bias=bool(bias)))


def _lazy_dynamics(ntk, Y, eta, T):
    """Static-NTK GD for each output column: ``(T, n, C)``."""
    return np.stack([static_ntk_dynamics(ntk, Y[:, c], eta, T) for c in range(Y.shape[1])],
                    axis=-1)


def _source_kernel(kx, variances, bias):
    """The covariance the nodes ``u`` are drawn from: ``kx`` (``K^x (+ 1)``), scaled afterwards
    by ``sigma_0`` without a bias; with a bias and ``variances`` directly ``sigma_0^2 K^x + 1``
    (the bias keeps its unit variance, Bordelon & Pehlevan (2022), App. D.8, App. H)."""
    return variances[0] * (kx - 1.0) + 1.0 if variances is not None and bias else kx


def _lazy_exact(kx, act, Y, eta, T, variances=None, bias=False):
    """The exact lazy (``gamma0 -> 0``) kernels ``Phi``, ``dPhi`` and predictions ``(T, n, C)``
    (closed forms or accurate two-dimensional rules, :func:`lazy_kernels`)."""
    phi, dphi, _, ntk = lazy_kernels(kx, act, hidden_layers=1, bias=bool(bias),
                                     weight_variances=variances)
    return phi[0], dphi[0], _lazy_dynamics(ntk, Y, eta, T)


def _lazy_on_rule(u, w, phi_f, dphi_f, kx, Y, eta, T, variances=None):
    """The same lazy quantities as the tensor rule ``(u, w)`` computes them: the ``gamma0 -> 0``
    limit of the forward march on that rule (``<r r> = 1`` is exact on Gauss-Hermite; with
    ``variances`` the nodes ``u`` are already scaled and ``<r r> = sigma_1^2``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        ph, dph = phi_f(u), dphi_f(u)
        Phi, dPhi = (ph.T * w) @ ph, (dph.T * w) @ dph
    K = dPhi * kx + Phi if variances is None else variances[1] * dPhi * kx + Phi
    return Phi, dPhi, _lazy_dynamics(K, Y, eta, T)


def _error_estimate(f, phi, g, lo_f, lo_phi, lo_g, Y, P, lazy, lazy_lo, exact, factor=1.0):
    """Error estimates of ``f``, ``loss``, ``Phi(t,t)``, ``G(t,t)`` of the rule used.

    With a lazy reference (plain GD): the exact error of the rule's lazy limit plus ``factor``
    times the difference between the two rules of what feature learning adds to it,
    ``|(x_n - x_n^lazy) - (x_m - x_m^lazy)|`` (``factor = 2`` for Gauss-Hermite, whose error
    oscillates with the node count, so that the coarser rule need not be much worse; 1 for the
    trapezoid rule, whose error falls geometrically); without: the plain difference
    ``|x_n - x_m|``.
    ``f, lo_f`` are ``(T, n, C)``, ``phi`` ``(T, n, T, n)``, ``g`` ``(T, n, T, n, C, C)``.
    """
    T, C = f.shape[0], f.shape[-1]
    idx = np.arange(T)
    eq = lambda x: x[idx, :, idx]                                     # noqa: E731
    loss = lambda x: 0.5 * np.sum((Y[None] - x[:, :P]) ** 2, axis=(1, 2))   # noqa: E731
    hi = {"f": f, "loss": loss(f), "phi": eq(phi), "g": eq(g)}
    lo = {"f": lo_f, "loss": loss(lo_f), "phi": eq(lo_phi), "g": eq(lo_g)}
    if lazy is None:
        return {k: float(np.max(np.abs(hi[k] - lo[k]))) for k in hi}
    eye = np.eye(C)
    as_lazy = lambda L: {"f": L[2], "loss": loss(L[2]), "phi": L[0][None],  # noqa: E731
                         "g": (L[1][:, :, None, None] * eye)[None]}
    ln, lm, lx = as_lazy(lazy), as_lazy(lazy_lo), as_lazy(exact)
    err = {}
    for k in hi:
        e_lazy = float(np.max(np.abs(ln[k] - lx[k])))
        e_feat = float(np.max(np.abs((hi[k] - ln[k]) - (lo[k] - lm[k]))))
        # + the rounding of the weighted sums (a few hundred ulps of the largest entry)
        err[k] = float(e_lazy + factor * e_feat + 256 * np.finfo(float).eps * np.max(np.abs(hi[k])))
        err["lazy_" + k] = e_lazy
    return err


def _too_coarse(err, used, coarse, points, quad_tol, refuse):
    """Refuse (``DomainError``: the default node budget) or warn (``AccuracyWarning``: nodes
    given) when the estimated error of ``f`` exceeds ``quad_tol``."""
    d = max(1, int(round(np.log(max(points, 2)) / np.log(max(used, 2)))))
    how = ("the exact error of the rule's lazy limit" if coarse is None else
           f"the rule's lazy-limit error plus {used} nodes against {coarse}")
    more = int(np.ceil(1.5 * used))
    msg = (f"two-layer quadrature: estimated error of f is {err['f']:.2g} > quad_tol={quad_tol:g} "
           f"({how}; {used} nodes per dimension, {d} Gaussian dimensions, {points} points).  "
           f"Pass nodes= above {used} (e.g. nodes={more}: about {1.5 ** d:.1f}x the time; "
           f"nodes**{d} points, at most 5e6) or a larger max_nodes=, or method='monte_carlo' "
           "(statistical error ~ samples^-1/2), or a larger quad_tol (quad_tol=None skips the "
           "estimate) if this accuracy suffices")
    if refuse:
        raise DomainError(msg + "; the default node budget does not meet quad_tol")
    import warnings
    from effth.errors import AccuracyWarning
    warnings.warn(msg, AccuracyWarning, stacklevel=4)


def _two_layer_eq_ntk(v, kx, act):
    """Lazy two-layer NTK at weight variance ``v`` in both layers (biases too):
    ``v <phi'(u) phi'(u)^T> * K^x + <phi(u) phi(u)^T>``, ``u ~ N(0, v K^x)``."""
    phi1, dphi1, _, _ = lazy_kernels(v * kx, act, hidden_layers=1)
    return v * dphi1[0] * kx + phi1[0]


def _noise_rng(seed):
    """The Langevin-noise stream: a Generator as given, else one distinct from the node draws."""
    s = _v.seed(seed)
    if s is None or isinstance(s, np.random.Generator):
        return np.random.default_rng(s) if s is None else s
    if isinstance(s, np.random.SeedSequence):
        return np.random.default_rng(np.random.SeedSequence(s.entropy,
                                                            spawn_key=s.spawn_key + (104729,)))
    return np.random.default_rng([*(s if isinstance(s, tuple) else (s,)), 104729])


def _nodes(kx, method, nodes, max_nodes, samples, seed, C=1, act=None, rule="auto"):
    """Points ``u`` (S, n), ``r`` (S, C) and weights ``w`` (S,) of the Gaussian average over
    ``(u, r)``, the nodes per dimension and the rule in ``u`` (``None`` for Monte Carlo)."""
    root = covariance_root(kx)                              # u = root @ xi, xi ~ N(0, I_k)
    k = root.shape[1]
    if method == "monte_carlo":
        if int(samples) < 2:
            raise DomainError(f"samples={samples!r} must be >= 2")
        rng = _v.rng(seed)
        half = (int(samples) + 1) // 2
        xi = rng.standard_normal((half, k))
        rr = rng.standard_normal((half, C))
        u = np.concatenate([xi, xi]) @ root.T
        r = np.concatenate([rr, -rr])
        return u, r, np.full(2 * half, 1.0 / (2 * half)), None, None
    d = k + C
    if nodes is None:
        nodes = min(80, int(np.floor(max_nodes ** (1.0 / d) + 1e-9)))
        if nodes < 5:
            raise DomainError(
                f"quadrature over {d} Gaussian dimensions (rank K^x + C) allows only {nodes} "
                f"nodes each within max_nodes={max_nodes} points; use method='monte_carlo' "
                "for larger P (or raise max_nodes)")
    elif int(nodes) < 2 or int(nodes) ** d > 5_000_000:
        raise DomainError(f"nodes={nodes!r}: need >= 2 and nodes**{d} <= 5e6 points")
    kind = lazy_rule_kind(act, int(nodes), rule)
    u, r, w = lazy_nodes(kx, int(nodes), kind=kind, extra=C)
    return u, r, w, int(nodes), kind
