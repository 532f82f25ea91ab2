"""Alternating Monte-Carlo solver of the DMFT for any activation (Bordelon & Pehlevan (2022), Algorithm 1, App. B).

Given the kernels of the previous iterate, each layer's single-site process is sampled and solved
by forward substitution on the discrete-GD grid (Bordelon & Pehlevan (2022), App. M; App. B).  With unscaled responses
``Abar = gamma0 A``, ``Bbar = gamma0 B`` (corrected here):

``h_mu(t_i) = u_mu(t_i) + sum_{j<i} sum_alpha [Abar^{l-1} + gamma0 eta Delta_alpha(t_j) Phi^{l-1}_{mu alpha}(t_i, t_j)] g_alpha(t_j)``,
``z_mu(t_i) = r_mu(t_i) + sum_{j<=i} sum_alpha Bbar^l phi(h_alpha(t_j)) + sum_{j<i} sum_alpha gamma0 eta Delta_alpha(t_j) G^{l+1}_{mu alpha}(t_i, t_j) phi(h_alpha(t_j))``,
``g = phi'(h) z``,

with ``u^l ~ GP(0, Phi^{l-1})``, ``r^l ~ GP(0, G^{l+1})`` (``Phi^0 = K^x``, ``G^{L+1} = 1``).  The
equal-time block of ``Bbar`` is kept (Bordelon & Pehlevan (2022), App. D (the equal-time part of B, kept here) item 2, §2.3).  New estimates

``Phi = <phi(h) phi(h)^T>``, ``G = <g g^T>``, ``Abar^l = <d phi(h^l)/d r^l>``, ``Bbar^{l-1} = <d g^l / d u^l>``

use antithetic pairs ``(u, r), (u, -r)`` and either per-sample Jacobians of the linearised causal
system (Bordelon & Pehlevan (2022), App. B: ``M = 1 - C Lambda_2 - C Lambda_1 D Lambda_1``, unit lower triangular,
``d phi/d r = Lambda_1 M^-1 C Lambda_1``, ``d g/d u = (Lambda_2 + Lambda_1 D Lambda_1) M^-1``)
or the Stein forms ``Abar = <phi(h) r^T> G^+``, ``Bbar = <g u^T> Phi^+`` (needed for kinked
activations such as ReLU, whose ``phi'' = delta`` pathwise Jacobians miss).  The iterate is damped,
``x <- (1 - beta) x + beta x_new``.  Predictions use the exact discrete-GD closure
``f_mu(t_i) = eta sum_{j<i} Phi^L_{mu alpha}(t_i, t_j) Delta_alpha(t_j) + gamma0^-1 <d phi(h^L_mu(t_i)) / d r^L>``
(Bordelon & Pehlevan (2022), eqs. (3), (21), App. M; App. M eq. (132)) solved forward in time, or NTK-Euler.

Extensions: weight decay, trainable biases, several outputs
---------------------------------------------------------------
Derived here from the discrete dynamics (Bordelon & Pehlevan (2022), App. H, I, J, M; Bordelon & Pehlevan (2022), App. D.8, G-M, §3.2).  With
``rho = 1 - eta lambda`` every parameter obeys ``theta(t+1) = rho theta(t) + (GD update at t)``, so

``W^l(t) = rho^t W^l(0) + eta gamma0 N^-1/2 sum_{s<t} rho^{t-1-s} sum_{alpha c} Delta_{alpha c}(s) g^{l+1}_{alpha c}(s) phi(h^l_alpha(s))^T``,
``b^l(t) = rho^t b^l(0) + eta gamma0 sum_{s<t} rho^{t-1-s} sum_{alpha c} Delta_{alpha c}(s) g^l_{alpha c}(s)``.

The initial weights enter the forward pass at ``t_i`` as ``rho^i W(0)`` and the backward pass at
``t_j`` as ``rho^j W(0)^T``.  Averaging over ``W(0)`` exactly as without decay therefore gives, in
terms of the *undecayed* Gaussian parts ``uh^l ~ GP(0, Phit^{l-1})``, ``rh^l ~ GP(0, G^{l+1})`` of
the fields ``chi = W(0) phi / sqrt(N) = uh + Abar g`` and ``xi = W(0)^T g / sqrt(N) = rh + Bbar phi``,

``h_mu(t_i) = rho^i [uh_mu(t_i) + sum_{j<i} sum_{alpha c} Abar^{l-1}_{mu, alpha c}(i, j) g_{alpha c}(t_j)]``
``          + gamma0 eta sum_{j<i} rho^{i-1-j} sum_{alpha c} Delta_{alpha c}(t_j) Phit^{l-1}_{mu alpha}(t_i, t_j) g_{alpha c}(t_j)``,
``z_{mu c}(t_i) = rho^i [rh_{mu c}(t_i) + sum_{j<=i} sum_alpha Bbar^l_{mu c, alpha}(i, j) phi(h_alpha(t_j))]``
``          + gamma0 eta sum_{j<i} rho^{i-1-j} sum_{alpha c'} Delta_{alpha c'}(t_j) G^{l+1}_{mu alpha, c c'}(t_i, t_j) phi(h_alpha(t_j))``,
``g_{mu c} = phi'(h_mu) z_{mu c}``,  ``Abar^l = <d phi(h^l) / d rh^l>``,  ``Bbar^{l-1} = <d g^l / d uh^l>``,

with ``Phit^{l-1} = Phi^{l-1} + b 1 1^T`` (``b = 1`` with biases; ``Phit^0 = K^x + b`` is the
returned ``data.kx``), ``G^{L+1}_{cc'} = delta_{cc'}`` (``rh^L`` is one ``N(0, I_C)`` vector per
neuron: the readout weights at ``t = 0``) and ``Delta_{alpha c} = y_{alpha c} - f_{alpha c}``.
Equivalently, the sources that enter the fields are ``u(t_i) = rho^i uh(t_i)`` and
``r(t_i) = rho^i rh(t_i)``, with covariances ``rho^{i+j} Phit^{l-1}(t_i, t_j)`` and
``rho^{i+j} G^{l+1}(t_i, t_j)``, and the response terms ``A, B`` carry the weight
``rho^{i+j} = e^{-lambda (t + s)}`` relative to ``d/du``, ``d/dr`` -- *not* the drift terms'
``rho^{i-1-j}`` (for ``L = 1`` there are no responses and eq. (99) of Bordelon & Pehlevan (2022) is recovered).
Biases only add the ``+ 1`` to the forward kernel (source covariance and drift); the bias column
does not back-propagate, so ``z`` and the form of the responses are unchanged.  With ``C``
outputs ``h`` stays scalar, ``z, g`` carry an output index, ``G^l`` is ``(C x C)``-valued and
``Abar`` maps ``g`` (index ``alpha c``) into ``h``, ``Bbar`` maps ``phi(h)`` into ``z`` (index
``mu c``).  The per-sample Jacobian system keeps dimension ``T n`` for ``h`` (``Lambda_1`` acts on
``z`` as ``diag(phi'(h)) (x) I_C``, ``Lambda_2`` stacks ``phi''(h) z_c``).  The exact closure is

``f_{mu c}(t_i) = gamma0^-1 <z^L_c(t_i) phi(h^L_mu(t_i))> = eta sum_{j<i} rho^{i-1-j} sum_alpha Phi^L_{mu alpha}(t_i, t_j) Delta_{alpha c}(t_j) + gamma0^-1 rho^i <d phi(h^L_mu(t_i)) / d rh^L_c>``.

Stein responses and Monte-Carlo noise
-------------------------------------
The plain Stein forms ``<phi(h) r^T> G^+`` amplify Monte-Carlo noise by the inverse eigenvalues of
nearly time-constant kernels (tanh or linear, ``L = 2``: divergence within a few sweeps).  Here
they are computed as a *causal* regression against the sampled sources themselves: row
``(t_i, mu)`` of ``Abar`` is regressed on the sources at times ``t_j < t_i`` and row ``(t_i, mu)``
of ``Bbar`` on those at ``t_j < t_i`` plus ``uh_mu(t_i)`` -- exact in expectation because the
responses are causal, and exact sample by sample where ``phi`` is linear in the sources.  Source
columns are orthogonalised in time order, and an innovation (the part of a column not explained
by earlier ones) whose share of the column's variance is below ``stein_cut**2 / (S/2)`` is dropped,
since a response to it cannot be resolved from ``S/2`` independent antithetic pairs (its effect
is carried by the earlier, correlated columns).  See ``_stein``.  The readout response at layer
``L`` is regressed on the sampled ``rh^L`` (``C`` dimensions) the same way.

Long horizons
-------------
The damped iteration over whole trajectories can blow up from a cold start when feature learning
is strong over many steps (weight-decay fixed points), and its Monte-Carlo noise is amplified
through the fixed point.  ``windows`` solves growing time windows (by causality a window's
solution is the restriction of the full one), ``average`` returns the means of the last sweeps'
estimates, with standard errors from their spread.
"""

from __future__ import annotations

from effth import _validate as _v
from effth._signature import public

import time
import warnings
from types import SimpleNamespace

import numpy as np

from effth._threads import limits_blas_threads
from effth._validate import weight_variance_values, width_ratio_values
from effth.errors import ConvergenceError, DomainError
from effth.dmft.grid import (TimeGrid, causal_mask, langevin_settings, parameter_filter,
                             prepare_targets, real_scalar)
from effth.dmft.solvers.lazy import (_pair_cov, activation_label, check_langevin_step,
                   check_stability, check_stability_along, gaussian_expectation, is_linear,
                   hidden_layer_count, lazy_kernels,
                   resolve_activation, heavy_ball_ntk_dynamics, static_ntk_dynamics,
                   static_ntk_solve)
from effth._progress import progress_bar
from effth.dmft.result import Diagnostics, DMFTResult

__all__ = ["solve_monte_carlo"]


@public
def solve_monte_carlo(X=None, y=None, *, depth: int | None = None, hidden_layers: int | None = None,
                      gamma0: float, eta: float, steps: int, activation="tanh", X_test=None, kernel=None, samples: int = 2000,
                      iterations: int | None = None, damping: float = 0.6, tol: float = 0.0,
                      responses: str = "auto", closure: str = "exact", batches: int = 16,
                      seed=0, diverge_at: float = 1e6, weight_decay: float = 0.0,
                      bias: bool = False, stein_cut: float = 2.0, windows: int = 1,
                      average: int = 1, keep_fields: bool = False,
                      gradient_independent: bool = False, replicas: int = 8,
                      progress: bool | None = None, width_ratios=None,
                      temperature: float = 0.0, momentum: float = 0.0,
                      max_iterations: int = 200, drift_z: float = 2.5,
                      weight_variances=None) -> DMFTResult:
    """Solve the nonlinear DMFT by alternating Monte Carlo (Bordelon & Pehlevan (2022), Algorithm 1).

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (see :func:`effth.dmft.grid.prepare_data`).  ``y`` of shape
        ``(P, C)`` gives ``C`` outputs (Bordelon & Pehlevan (2022), App. I; same conventions as
        :func:`effth.dmft.solve_two_layer`): ``z, g`` carry an output index,
        ``f_{mu c} = gamma0^-1 <z^L_c phi(h^L_mu)>``; then ``f`` is ``(T, n, C)``, ``delta``
        ``(T, P, C)``, ``g`` ``(L, T, n, T, n, C, C)`` and ``A``, ``B`` ``(L-1, T, n, T, n, C)``
        (see Returns).
    depth, hidden_layers : int
        Give exactly one: ``depth`` weight layers (output layer included, ``>= 2``) or
        ``hidden_layers = depth - 1`` (the paper's ``L >= 1``).
    gamma0 : float
        Feature-learning strength.  ``gamma0 = 0`` returns the static-NTK solution (not
        available with weight decay or several outputs, whose output factor is ``1/gamma0``).
    eta, steps
        GD step and number of grid points.
    activation : str, Activation or sympy.Expr
        Any registered name or alias (``effth.available_activations()``), an
        :class:`~effth.activations.Activation`, or a SymPy expression in ``z``.
    samples : int
        Monte-Carlo draws ``S`` per layer and iteration (rounded up to an even number: antithetic
        pairs ``(u, r)``, ``(u, -r)``).
    iterations : int or None
        ``None`` (default): sweep until converged (below).  An integer: exactly this many damped
        sweeps per time window (the paper uses about 15), stopping early if ``tol > 0`` and the
        max-abs change of the kernels falls below ``tol``; ``result.diagnostics.converged`` is
        then ``None`` without ``tol``.  Fifteen sweeps are too few where feature learning is
        strong over many steps: at ``L = 2``, ``gamma0 = 1``, ``eta = 0.2``, 20 steps (linear
        activation, against the exact deep linear solver, 2000 samples, 8 seeds) the
        predictions sat 4.6-9.4 standard errors off after 15 sweeps; the default stopped after
        26-47 sweeps within 2.8.
    max_iterations, drift_z
        The convergence test of ``iterations=None``.  After each sweep ``k >= 10`` the means of
        the monitored order parameters -- ``f`` (all times, points, outputs; not with
        ``closure='ntk'`` and ``replicas=1``) and the equal-time kernels ``Phi^l(t, t)``,
        ``G^l(t, t)`` -- over the block of the last ``w = ceil(k/4)`` sweeps and over the block
        of ``w`` sweeps ending at sweep ``k/2`` are compared; the window ends when every entry
        differs by less than ``drift_z`` standard errors (the replicas' spread of each sweep's
        estimate, or with ``replicas=1`` its batch errors, ``/ sqrt(w)``) on three consecutive
        sweeps, or at ``tol``.  The
        replicas run in lockstep and stop together.  Not converged after ``max_iterations``
        sweeps: :class:`~effth.errors.ConvergenceError`.  ``diagnostics.iterations`` is the
        number of sweeps run (all windows).
        ``diagnostics.criterion`` states the rule, ``diagnostics.drift`` holds the statistic
        after each sweep of the last window.
    damping : float in (0, 1]
        ``beta``; the paper uses 0.6.
    responses : {'auto', 'jacobian', 'stein'}
        How ``Abar``, ``Bbar`` and the readout response are estimated; ``'auto'`` is
        ``'stein'`` for activations with kinks, else ``'jacobian'``.  Both work with every
        extension below.  ``'stein'`` is the fast path for smooth activations too: it needs no
        per-sample ``(T n)^2`` Jacobian inverses.  In one measured case (tanh) it took 2.6 s
        against 67 s for ``'jacobian'`` and gave the same answer within 0.12-0.43 standard
        errors; pass ``responses='stein'`` when the Jacobians are too slow.
    closure : {'exact', 'ntk'}
        Prediction rule (see :class:`DMFTResult`).  ``'ntk'`` (NTK-Euler) with weight decay or
        a temperature takes the Euler step of eq. (102) (Bordelon & Pehlevan (2022), App. K),
        ``f <- f + eta K Delta - eta lambda theta . grad f + (sigma^2 / 2) Tr grad^2 f``: ``f``
        is then no function of the NTK alone, and the extra terms are single-site averages,
        ``theta . grad f = f + gamma0^-1 sum_l <g^l h^l>`` and the Ito term ``Tr grad^2 f =
        gamma0^-1 sum_l <r^l> (<phi(h^{l-1})^2> + b)`` with ``r^l = dg^l/dh^l`` (its recursion
        over the layers in ``_ntk_euler``).  It converges to the exact closure as ``eta -> 0``
        (both ``O(eta)`` from the continuous-time limit).  Needs equal widths and no momentum
        there (``DomainError``).
    batches : int
        With ``replicas = 1`` only: the last sweep's samples are split into this many batches
        to estimate the standard error of ``Phi``, ``G`` and (exact closure) ``f``.  This is the
        noise of one sweep given its input kernels only: it misses the noise carried by the
        damped state through the fixed point, and underestimates the error of ``f`` (by 1.9x
        against the exact deep linear solver, ``L = 2``, ``gamma0 = 1``: z-variance 3.6 over 20
        seeds).  Prefer ``replicas >= 2``.
    replicas : int
        The ``samples`` are split over this many independent solves (seeds spawned from
        ``seed``), each a whole alternating iteration with ``samples / replicas`` draws; the
        result is their mean and ``result.stderr`` (``'phi'``, ``'g'``, ``'f'``) the spread of
        the replicas ``/ sqrt(replicas)``: the error of the whole solve, noise propagated
        through the fixed point included (coverage tested against the exact deep linear solver).
        The cost is that of one solve with ``samples`` draws.  The estimated error has
        ``replicas - 1`` degrees of freedom: z-scores follow Student's t with ``replicas - 1``
        degrees of freedom (variance ``(R-1)/(R-3)``, 1.4 at the default 8).  Reduced to
        ``samples // 32`` when that is smaller (at least 32 draws per replica); the replica
        count used is ``result.diagnostics.replicas``.  The mean of replicas carries the
        ``O(replicas / samples)`` bias of a nonlinear fixed point at ``samples / replicas``
        draws (below 0.5 standard error in the coverage checks).
    seed : int or numpy.random.Generator
    diverge_at : float
        Raise :class:`ConvergenceError` when a kernel entry exceeds this magnitude.  Residuals
        that grow (median of the last three above 5x that of the first three) set
        ``result.diagnostics.diverged`` and issue a :class:`UserWarning`; ``tol = 0`` (no
        tolerance asked) leaves ``result.diagnostics.converged = None``.
    weight_decay : float
        ``lambda >= 0`` with ``0 <= eta lambda < 1``: every parameter (weights and biases) is
        multiplied by ``rho = 1 - eta lambda`` at each GD step (discrete form of
        ``d theta/dt = -gamma^2 grad L - lambda theta``, Bordelon & Pehlevan (2022), App. J).  The Gaussian sources of
        ``h(t_i)``, ``z(t_i)`` then have covariances ``rho^{i+j} Phit^{l-1}``,
        ``rho^{i+j} G^{l+1}``, the drift terms the weight ``rho^{i-1-j}`` and the response terms
        ``rho^{i+j}`` (module docstring).
    bias : bool
        Trainable biases on every preactivation ``h^1 .. h^L`` (Bordelon & Pehlevan (2022), App. H), ``b(0) ~ N(0, 1)``,
        learning rate ``eta gamma0^2 N``: ``u^l ~ GP(0, Phi^{l-1} + 1 1^T)`` and the drift of
        ``h^l`` uses ``Phi^{l-1} + 1``.  The first layer's bias is folded into the returned
        ``data.kx`` (``K^x + 1``), and ``result.bias`` is set so that ``result.ntk`` adds
        ``G^{l+1}`` for the deeper layers.
    stein_cut : float
        Stein responses only (module docstring): a source innovation enters the causal Stein
        regression only if it carries more than ``stein_cut**2 / (S/2)`` of its column's
        variance, i.e. if the response to it is resolved to better than ``1/stein_cut`` of its
        natural scale.  ``0`` selects the plain pseudo-inverse forms ``<phi r^T> G^+``,
        ``<g u^T> Phi^+`` of Bordelon & Pehlevan (2022), App. B (unstable for smooth deep networks).
    windows : int
        Growing time windows: the sweeps are first run on the first ``ceil(T k / windows)`` grid
        points, ``k = 1 .. windows``, each window starting from the previous window's state
        continued in time (kernels and ``Delta`` held at their last values, responses zero).  By
        causality the fields up to ``t_i`` do not depend on later times, so this only changes
        the starting point; it tames the fixed-point iteration over long horizons (e.g. a
        weight-decay fixed point), which from a cold start can blow up.  ``iterations`` sweeps
        are run per window; ``result.stderr`` comes from the last one.
    average : int
        Return the means of the undamped estimates (kernels, responses, ``f``) of the last
        ``average`` sweeps instead of the damped state and the last sweep's ``f`` (Bordelon & Pehlevan (2022), App. B).
        Sweep-to-sweep fluctuations include the noise propagated through the fixed point, which
        the batch errors of one sweep miss and which dominates for strong feature learning
        (e.g. weight-decay fixed points); ``result.stderr`` then comes from that spread (its
        standard deviation ``/ sqrt(average)``, at least the last sweep's batch error
        ``/ sqrt(average)``; checks found it conservative: successive sweeps anticorrelate).
    gradient_independent : bool
        Set ``A = B = 0`` (the gradient-independence ansatz, Bordelon & Pehlevan (2022), §5, Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71)) and keep the
        self-consistent kernels.  Requires ``closure='ntk'`` (the exact closure needs the readout
        response, which the ansatz drops), as in :func:`solve_deep_linear`.
    keep_fields : bool
        Return the last sweep's single-site preactivations ``h^ell_mu(t)`` as
        ``result.fields`` ``(L, S, T, n)`` (samples of the non-Gaussian field densities, seed
        Fig. 1b-c; the first ``S/2`` and last ``S/2`` rows are antithetic partners).
    progress : bool, optional
        Show a progress bar over the sweeps with the current residual (``None``: only in a
        terminal or notebook, unless ``EFFTH_PROGRESS=0``; see ``docs/conventions.md``).

    Returns
    -------
    DMFTResult
        ``A``, ``B`` in the scaled convention (divided by ``gamma0``), as responses to the
        undecayed Gaussian parts ``rh``, ``uh`` (module docstring; at ``lambda = 0`` the usual
        ``gamma0^-1 <d phi/d r>``, ``gamma0^-1 <d g/d u>``).  With ``C`` outputs
        ``A[l-1, t, mu, s, alpha, c] = gamma0^-1 <d phi(h^l_mu(t)) / d rh^l_{alpha c}(s)>`` and
        ``B[l-1, t, mu, s, alpha, c] = gamma0^-1 <d g^{l+1}_{mu c}(t) / d uh^{l+1}_alpha(s)>``.
        Stein responses are determined only on the directions the sampled sources resolve (as
        with the paper's pseudo-inverse): their action on the fields is the Jacobian one, their
        individual entries need not be.  ``stderr`` holds ``'phi'``, ``'g'`` and, for the exact
        closure or with ``average``, ``'f'``.

    width_ratios : sequence of float, optional
        ``a_1 .. a_L > 0``: hidden widths ``N_l = a_l N`` (Bordelon & Pehlevan (2022), App. D.8;
        the conventions of :func:`effth.dmft.solve_deep_linear`).  Layer ``l``'s drifts carry
        ``gamma_l = gamma0 / sqrt(a_l)`` (eq. (58)), the responses enter the next (previous)
        layer's field with ``sqrt(a_{l-1} / a_l)`` (``sqrt(a_{l+1} / a_l)``, eqs. (60), (63)), the
        readout response with ``1 / gamma_L``; the returned ``A^l``, ``B^{l-1}`` are divided by
        their own layer's ``gamma_l``.  ``None`` or all ones: equal widths, bit for bit.
    weight_variances : sequence of float, optional
        ``sigma_0^2 .. sigma_L^2 > 0``, the initial variances of ``W^0 .. W^{L-1}, w^L``
        (Bordelon & Pehlevan (2022), App. D.8; the conventions of
        :func:`effth.dmft.solve_deep_linear`): the sources are sampled with covariances
        ``sigma_{l-1}^2 Phi^{l-1}``, ``sigma_l^2 G^{l+1}`` (the readout ``sigma_L^2``), the
        responses to them enter with ``sigma_{l-1}^2`` (``C^l``) and ``sigma_l^2`` (``D^l``), and
        the exact closure's readout term is ``sigma_L^2 <d phi(h^L) / d r^L>``; drifts and the
        NTK formula carry no ``sigma``.  ``None`` or all ones: bit for bit the unit variances.
        Biases keep ``b(0) ~ N(0, 1)``: ``u^l ~ GP(0, sigma_{l-1}^2 Phi^{l-1} + 1)``.  With a
        temperature each weight layer ``k`` has its own noise kernel ``kappa_k = sigma_k^2 a(t)
        a(s) + (kappa - a a^T)(t, s)`` (the initial part scales, the noise does not) in its
        sources, responses and (``k = L``) the readout term; the biases keep ``kappa``.
    temperature : float
        Langevin temperature ``1/beta >= 0`` (Bordelon & Pehlevan (2022), App. K, eq. (100); the
        meaning of :func:`~effth.dmft.solve_deep_linear`'s and the trainer's keyword): noise of
        variance ``temperature (1 - rho^2) / weight_decay`` per step on every parameter
        (:class:`~effth.dmft.grid.ParameterFilter`).  The Gaussian sources are then sampled with
        covariances ``kappa * Phit^{l-1}``, ``kappa * G^{l+1}`` (the noise kernel ``kappa(t, s)``,
        the discrete ``e^{-lambda (t+s)/beta} + C_{lambda,beta}(t, s)`` of eqs. (105)-(112)), the
        responses (returned ``A``, ``B``) are those to the total sources and enter the fields as
        ``kappa * A``, ``kappa * B``, and the readout source is a process ``r^L(t)``: the exact
        closure's readout term is ``gamma_L^-1 sum_{s<t} kappa(t, s) <d phi(h^L(t)) / d r^L(s)>``.
        The step must satisfy ``eta (lambda_max(K_eq) + weight_decay) < 2`` with ``K_eq`` the lazy
        NTK at weight variance ``max(1, temperature / weight_decay)``.  Long runs approach the
        Bayesian posterior (App. K.3), up to the discrete chain's ``O(eta)`` bias.
    momentum : float
        Heavy-ball coefficient ``mu`` in ``[0, 1)`` (Bordelon & Pehlevan (2022), App. L,
        ``mu = exp(-eta / tau)``; the trainer's update ``v <- mu v + (1 - mu)(eta G - eta lambda
        theta)``, ``theta <- theta + v``): the drifts carry the memory kernel ``k(t-1-s)`` (eq.
        (123)) and the initial parts ``a(t)`` of the filter; stability edge ``eta
        lambda_max(K_0) < 2 (1 + mu) / (1 - mu)``.  With ``temperature > 0`` too (underdamped
        Langevin dynamics) the noise passes the same memory (``kappa`` of the filter).  With
        ``closure='ntk'`` (no weight decay or temperature) ``f`` steps along the heavy-ball
        update with the two-time NTK, ``f(t+1) = f(t) + eta sum_{s<=t} (1 - mu) mu^{t-s}
        K(t, s) Delta(s)``.  ``temperature = momentum = 0`` is the GD solver bit for bit.

    Raises
    ------
    DomainError
        Bad data or hyperparameters (``eta lambda`` outside ``[0, 1)``, ``y`` not ``(P,)`` or
        ``(P, C)``, non-finite values), ``eta lambda_max(K_NTK) >= 2``, ``gamma0 = 0`` with
        weight decay or several outputs, negative
        ``temperature``, ``momentum`` outside ``[0, 1)``, ``gamma0 = 0`` with temperature or
        momentum, ``closure='ntk'`` with momentum and weight decay or a
        temperature (or, with weight decay or a temperature, with ``width_ratios``), a Langevin step past its stable bound.
    ConvergenceError
        A kernel entry exceeds ``diverge_at`` (or is not finite); ``iterations=None`` and the
        drift test not passed within ``max_iterations`` sweeps.
    """
    kwargs = {k: v for k, v in locals().items() if k not in ("seed", "progress")}
    gamma0, eta = real_scalar(gamma0, "gamma0"), real_scalar(eta, "eta")
    hidden_layer_count(depth, hidden_layers)
    if closure not in ("exact", "ntk") or responses not in ("auto", "jacobian", "stein"):
        raise DomainError(f"closure={closure!r} / responses={responses!r} not recognised")
    if not (0.0 < damping <= 1.0):
        raise DomainError(f"damping={damping!r} must lie in (0, 1]")
    if int(samples) < 4 or int(batches) < 2:
        raise DomainError(f"samples={samples!r} must be >= 4 and batches={batches!r} >= 2 (a "
                          "standard error needs two batches)")
    adaptive = iterations is None
    if adaptive:
        if isinstance(max_iterations, (bool, np.bool_)) or int(max_iterations) != max_iterations \
                or max_iterations < _FIRST_STOP:
            raise DomainError(f"max_iterations={max_iterations!r} must be an integer >= "
                              f"{_FIRST_STOP} (the earliest sweep the drift test can stop at)")
        if not (np.isfinite(drift_z) and drift_z > 0):
            raise DomainError(f"drift_z={drift_z!r} must be a finite number > 0")
    elif isinstance(iterations, (bool, np.bool_)) or int(iterations) != iterations or iterations < 1:
        raise DomainError(f"iterations={iterations!r} must be a positive integer or None (adaptive)")
    n_max = int(max_iterations) if adaptive else int(iterations)
    kwargs["n_max"], kwargs["adaptive"] = n_max, adaptive
    _v.check_memory(8.0 * float(samples) * float(steps),   # >= one float per sample and time
                    f"the sampled fields of samples={samples} over steps={steps}", "lower samples")
    _v.check_work(1e-9 * float(n_max) * float(samples) * float(steps),   # >= 1 ns per draw
                  f"solve_monte_carlo with {'max_iterations' if adaptive else 'iterations'}={n_max}",
                  f"lower {'max_iterations' if adaptive else 'iterations'} or samples")
    if not np.isfinite(gamma0):
        raise DomainError(f"gamma0={gamma0!r} must be finite")
    if int(windows) != windows or windows < 1:
        raise DomainError(f"windows={windows!r} must be a positive integer")
    if int(average) != average or not 1 <= average <= n_max:
        raise DomainError(f"average={average!r} must be an integer in [1, iterations]")
    if not (np.isfinite(stein_cut) and stein_cut >= 0):
        raise DomainError(f"stein_cut={stein_cut!r} must be a finite number >= 0")
    if isinstance(replicas, (bool, np.bool_)) or int(replicas) != replicas or replicas < 1:
        raise DomainError(f"replicas={replicas!r} must be a positive integer")
    if not (np.isfinite(tol) and tol >= 0):
        raise DomainError(f"tol={tol!r} must be a finite number >= 0")
    n_hidden = hidden_layer_count(depth, hidden_layers)
    kwargs["width_ratios"] = width_ratio_values(width_ratios, n_hidden)
    kwargs["weight_variances"] = weight_variance_values(weight_variances, n_hidden + 1)
    R = min(int(replicas), max(1, int(samples) // 32))
    if R > 1 and gamma0 != 0:
        return _replicated(dict(kwargs, replicas=1), R, seed, progress)
    chain = _chain(kwargs, seed, monitor_se=adaptive)
    if not adaptive:
        return _run_alone(chain, progress)
    return _lockstep([chain], kwargs, progress)[0]


_MIN_SWEEPS = 10            # adaptive solves: fewest sweeps before the drift test may stop them
_PATIENCE = 3               # consecutive sweeps below drift_z that end a window
_FIRST_STOP = _MIN_SWEEPS + _PATIENCE - 1   # the earliest sweep an adaptive window can end


def _finish(chain, bar):
    """Run a fixed-sweep chain to its end (it stops itself), one ``bar`` tick per sweep; its
    result."""
    try:
        next(chain)
        while True:
            bar.update()
            chain.send(False)
    except StopIteration as done:
        return done.value


def _run_alone(chain, progress=False):
    """Run a fixed-sweep chain to its end under its own progress bar; its result."""
    with progress_bar(None, "DMFT Monte-Carlo sweeps", progress=progress, unit="sweep") as bar:
        return _finish(chain, bar)


def _equal_time(Phi, G, T, n, C, shaped=False):
    """The equal-time blocks ``Phi^l(t, t)``, ``G^l(t, t)`` of every layer, flattened into one
    vector (``Phi`` ``(T n, T n)`` and ``G`` ``(T n C, T n C)`` matrices, or with ``shaped`` the
    ``(T, n, T, n)`` and ``(T, n, T, n, C, C)`` arrays of ``result.stderr``)."""
    idx = np.arange(T)
    out = []
    for p in Phi:
        out.append(np.asarray(p).reshape(T, n, T, n)[idx, :, idx, :].ravel())
    for g in G:
        g = np.asarray(g)
        g = g[idx, :, idx] if shaped else g.reshape(T, n, C, T, n, C)[idx, :, :, idx]
        out.append(g.ravel())
    return np.concatenate(out)


def _drift(hist):
    """The drift statistic of :class:`~effth.dmft.result.Diagnostics` over the ``k`` sweeps
    ``hist`` (``(mean, variance)`` of the monitored order parameters after each sweep): with
    blocks of ``w = ceil(k / 4)`` sweeps, the last one ``(k - w, k]`` and the one ending half-way,
    ``(k/2 - w, k/2]``, the largest ``|difference of the block means| / sqrt(var_1 / w + var_2 /
    w)`` (block variances averaged over their sweeps; sweeps treated as independent).  The blocks
    lie ``k/2`` sweeps apart, so a geometric approach ``c^k`` leaves at most
    ``c^(k/2) / (1 - c^(k/2))`` times the measured change.  ``nan`` before ``_MIN_SWEEPS``."""
    k = len(hist)
    if k < _MIN_SWEEPS:
        return float("nan")
    w, h = -(-k // 4), k // 2
    m = np.stack([x[0] for x in hist])
    v = np.stack([x[1] for x in hist])
    d = m[k - w:].mean(axis=0) - m[h - w:h].mean(axis=0)
    var = (v[k - w:].mean(axis=0) + v[h - w:h].mean(axis=0)) / w
    scale = 1e-12 * max(float(np.max(np.abs(m[-1]))), 1e-150)
    var = np.maximum(var, scale ** 2)                     # entries without noise: round-off only
    return float(np.max(np.abs(d) / np.sqrt(var)))


def _criterion_text(drift_z, n_max, tol):
    text = (f"stop after sweep k when the means of f and of the equal-time kernels over the "
            f"blocks of ceil(k/4) sweeps ending at k and at k/2 differ by less than {drift_z:g} "
            f"standard errors (after at least "
            f"{_MIN_SWEEPS} sweeps, at most {n_max})")
    return text + (f", or the residual falls below tol={tol:g}" if tol > 0 else "")


def _lockstep(chains, kw, progress):
    """Run the chains of an adaptive solve together (:func:`_drive`) and set the shared
    diagnostics (criterion, drift, converged) of their results."""
    n_max, drift_z, tol = kw["n_max"], float(kw["drift_z"]), float(kw["tol"])
    results, drift, ok = _drive(chains, n_max, drift_z, tol, progress)
    if ok is None:                              # gamma0 = 0: the static solve, no sweeps
        return results
    for r in results:
        d = r.diagnostics
        d.criterion, d.drift, d.drift_z, d.converged = (_criterion_text(drift_z, n_max, tol),
                                                       drift, drift_z, ok)
    return results


_KNOBS = ("raise max_iterations or samples, damp more (lower damping), use windows, or pass "
          "iterations= for a fixed number of sweeps")


def _drive(chains, n_max, drift_z, tol, progress, label="DMFT Monte-Carlo sweeps", knobs=_KNOBS):
    """Drive the chains (generators, see :func:`_chain`) of an adaptive solve sweep by sweep
    together: after each sweep the mean and standard error of the monitored order parameters
    (the spread of the chains, or one chain's batch errors ``se``) enter :func:`_drift`; the
    window ends when it stays below ``drift_z`` for ``_PATIENCE`` sweeps (or every residual is
    below ``tol``), at the latest after ``n_max`` sweeps.  Returns ``(results, drift, True)``
    (``(results, [], None)`` when the chains ran no sweep); :class:`~effth.errors.ConvergenceError`
    when the last window did not converge.  Shared by the MLP and CNN solvers."""
    R = len(chains)
    try:
        mons = [next(c) for c in chains]
    except StopIteration as done:               # no sweeps (the static solve)
        return [done.value], [], None
    hist, drift, ok, results, calm = [], [], None, [None] * R, 0
    with progress_bar(None, label, progress=progress, unit="sweep") as bar:
        while True:
            x = np.stack([m.x for m in mons])
            if R > 1:
                mean, var = x.mean(axis=0), x.var(axis=0, ddof=1) / R
            else:
                mean, var = x[0], mons[0].se ** 2
            hist.append((mean, var))
            z = _drift(hist)
            if mons[0].final:
                drift.append(z)
            calm = calm + 1 if z < drift_z else 0
            stop = calm >= _PATIENCE or (tol > 0 and max(m.res for m in mons) < tol)
            end = stop or mons[0].it >= n_max
            if mons[0].final and end:
                ok = stop
            if end:
                hist, calm = [], 0
            bar.update()
            nxt = []
            for i, c in enumerate(chains):
                try:
                    nxt.append(c.send(end))
                except StopIteration as done:
                    results[i] = done.value
            if all(r is not None for r in results):
                break
            mons = nxt
    if not ok:
        last = drift[-1] if drift else float("nan")
        raise ConvergenceError(
            f"Monte-Carlo DMFT did not converge in max_iterations={n_max} sweeps: the order "
            f"parameters (f, Phi, G) still drift by {last:.3g} standard errors between the last "
            f"blocks of sweeps (threshold drift_z={drift_z:g}); {knobs}")
    return results, drift, True


def _chain(kw, seed, monitor_se=False):
    """One alternating Monte-Carlo solve (Bordelon & Pehlevan (2022), Algorithm 1) as a generator.

    After each sweep it yields the monitored order parameters (``x``: ``f`` and the equal-time
    blocks of the new ``Phi^l``, ``G^l``; ``se``: their batch standard errors when
    ``monitor_se``; ``res``, ``it``, ``final``: the window is the whole grid) and receives whether
    to end the current window (a fixed-sweep chain ends each window itself after
    ``kw['n_max']`` sweeps or at ``tol``).  Returns the :class:`DMFTResult`."""
    X, y, X_test, kernel = kw["X"], kw["y"], kw["X_test"], kw["kernel"]
    gamma0, eta, steps, activation = kw["gamma0"], kw["eta"], kw["steps"], kw["activation"]
    samples, damping, tol, responses = kw["samples"], kw["damping"], kw["tol"], kw["responses"]
    closure, batches, diverge_at = kw["closure"], kw["batches"], kw["diverge_at"]
    weight_decay, bias, stein_cut, windows = (kw["weight_decay"], kw["bias"], kw["stein_cut"],
                                              kw["windows"])
    average, keep_fields, gradient_independent = kw["average"], kw["keep_fields"], \
        kw["gradient_independent"]
    temperature, momentum, ratios = kw["temperature"], kw["momentum"], kw["width_ratios"]
    variances = kw["weight_variances"]
    iterations, adaptive = kw["n_max"], kw["adaptive"]
    gamma0, eta = real_scalar(gamma0, "gamma0"), real_scalar(eta, "eta")
    n_hidden = hidden_layer_count(kw["depth"], kw["hidden_layers"])
    act = resolve_activation(activation)
    grid = TimeGrid(eta, steps)
    rho, temperature, momentum = langevin_settings(grid.eta, weight_decay, temperature, momentum)
    data, Y, multi = prepare_targets(X, y, X_test=X_test, kernel=kernel, bias=bool(bias))
    _v.check_target_scale(Y, 2, "the loss sum Delta^2 / 2")
    L, T, n, P, C = n_hidden, grid.steps, data.n_all, data.n_train, Y.shape[1]
    if momentum > 0 and closure == "ntk" and (weight_decay > 0 or temperature > 0):
        raise DomainError("closure='ntk' with momentum solves momentum alone: with weight decay "
                          "the decay term grad f(t) . theta(s) of an earlier step is not a DMFT "
                          "order parameter, and the Langevin terms of eq. (102) are derived "
                          "without momentum; use closure='exact'")
    langevin_ntk = closure == "ntk" and (weight_decay > 0 or temperature > 0)
    if langevin_ntk and ratios is not None:
        raise DomainError("closure='ntk' with weight decay or temperature needs equal widths "
                          "(width_ratios=None): its terms of eq. (102) are derived for one width; "
                          "use closure='exact'")
    if gamma0 == 0 and (temperature > 0 or momentum > 0):
        raise DomainError("gamma0 = 0 with temperature or momentum is not solved here (output "
                          "factor 1/gamma0); use a small gamma0 > 0")
    if gamma0 == 0:
        if weight_decay > 0 or multi:
            raise DomainError("gamma0 = 0 with weight decay (trivial fixed point f = K = 0) or "
                              "several outputs is not solved here (output factor 1/gamma0); "
                              "use gamma0 > 0")
        return static_ntk_solve(data, grid, act, hidden_layers=L, bias=bool(bias),
                                weight_variances=variances)
    if gradient_independent and closure != "ntk":
        raise DomainError("gradient_independent=True needs closure='ntk' (A = B = 0 drops the readout "
                          "response of the exact closure)")
    if responses == "auto":
        responses = "stein" if act.kinks else "jacobian"
    elif responses == "jacobian" and act.kinks:
        raise DomainError(f"responses='jacobian' needs a smooth activation; {act.name} has kinks "
                          "(its Jacobian responses are not functions): use responses='stein'")
    phi_f, dphi_f, ddphi_f = act.numpy(0), act.numpy(1), act.numpy(2)
    phi0, _, g0, ntk0 = lazy_kernels(data.kx, act, hidden_layers=L, bias=bool(bias),
                                     weight_variances=variances)
    edge = 2.0 * (1.0 + momentum) / (1.0 - momentum)
    check_stability(ntk0[:P, :P], grid.eta, edge=edge)
    if (temperature > 0 or momentum > 0) and weight_decay > 0:
        v = max(1.0, temperature / float(weight_decay))
        check_langevin_step(_lazy_ntk_at_variance(data.kx, act, L, bool(bias), v)[:P, :P],
                            grid.eta, float(weight_decay), v, momentum)
    plain = temperature == 0 and momentum == 0
    rng = _v.rng(seed)
    S = int(samples) + int(samples) % 2
    gam = float(gamma0)
    one = 1.0 if bias else 0.0
    t0 = time.perf_counter()
    # per-layer feature strengths gamma_l = gamma0 / sqrt(a_l) (App. D.8, eq. (58))
    gams = [gam] * L if ratios is None else [gam / np.sqrt(a) for a in ratios]
    ctx = dict(L=L, n=n, C=C, S=S, gam=gam, gams=gams, ratios=ratios, eta=grid.eta, one=one,
               variances=variances, ito=langevin_ntk,
               rng=rng, stein_cut=stein_cut,
               responses=responses, fns=(phi_f, dphi_f, ddphi_f),
               fields=[None] * L if keep_fields else None, gi=bool(gradient_independent))
    T_all = T
    Phi = ext = None
    acc = []                                 # undamped estimates of the last `average` sweeps
    diag = Diagnostics(tol=tol)
    window_ends = sorted({-(-T_all * k // int(windows)) for k in range(1, int(windows) + 1)})
    for T in window_ends:
        # growing windows (causal: earlier times unchanged); the optimizer's filter
        filt = None if plain else parameter_filter(grid.eta, T, weight_decay, temperature,
                                                   momentum)
        w = _window(T, n, C, rho, data.kx, filt, variances)
        if Phi is None:
            Phi = [np.tile(p, (T, T)) for p in phi0]
            G = [np.kron(np.tile(g, (T, T)), np.eye(C)) for g in g0]
            Ab = [np.zeros((T * n, T * n * C)) for _ in range(L - 1)]
            Bb = [np.zeros((T * n * C, T * n)) for _ in range(L - 1)]
            delta = np.stack([Y[:, c] - static_ntk_dynamics(ntk0, Y[:, c], grid.eta, T)[:, :P]
                              for c in range(C)], axis=-1)                     # (T, P, C)
        else:
            Phi, G, Ab, Bb, delta = _extend(Phi, G, Ab, Bb, delta, T, n, C)
        stderr = None
        for it in range(1, int(iterations) + 1):
            last = (it == int(iterations) or monitor_se) and T == T_all
            Phin, Gn, Abn, Bbn, ro, bat, extn = _sweep(ctx, w, Phi, G, Ab, Bb, delta,
                                                       batches if last or monitor_se else 0)
            bad = [x for x in Phin + Gn
                   if not np.all(np.isfinite(x)) or np.max(np.abs(x)) > diverge_at]
            if bad:
                size = max(float(np.nanmax(np.abs(x))) if np.any(np.isfinite(x)) else np.inf
                           for x in bad)
                raise ConvergenceError(
                    f"Monte-Carlo DMFT diverged at iteration {it} (window of {T} steps; kernel "
                    f"magnitude {size:.3g}); lower gamma0 or eta, raise samples, damp more, or use "
                    "more windows")
            if closure == "exact":
                f = _exact_closure(Phin[-1], w.rt[:, None, None] * ro.mean(axis=0) / gams[-1],
                                   Y, grid.eta, rho, w.mem)
            else:
                f = _ntk_euler(data.kx, Phin, Gn, Y, grid.eta, one,
                               _langevin_terms(w, extn, variances, weight_decay, gam, L)
                               if langevin_ntk else None, momentum=momentum)
            delta_new = Y[None] - f[:, :P]
            res = max(max(float(np.max(np.abs(x - xo))) for x, xo in zip(Phin + Gn, Phi + G)),
                      float(np.max(np.abs(delta_new - delta))))
            diag.residuals.append(res)
            diag.iterations += 1
            if T == T_all and (adaptive or it > int(iterations) - int(average)):
                acc = (acc + [(Phin, Gn, Abn, Bbn, f)])[-int(average):]
            mix = lambda old, new: [(1 - damping) * x + damping * xn for x, xn in zip(old, new)]
            Phi, G, Ab, Bb = mix(Phi, Phin), mix(G, Gn), mix(Ab, Abn), mix(Bb, Bbn)
            if langevin_ntk:            # the single-site averages of eq. (102), damped alike
                ext = extn if it == 1 or ext is None or len(ext[0][0]) != T else \
                    [mix(e, en) for e, en in zip(ext, extn)]
            delta = (1 - damping) * delta + damping * delta_new
            if last or monitor_se:
                stderr = _batch_stderr(bat, ro, closure, w, Y, gams[-1], grid.eta, rho, batches)
            if adaptive:
                eq = _equal_time(Phin, Gn, T, n, C)
                x = np.concatenate([f.ravel(), eq])
                se = None
                if monitor_se:
                    eq_se = _equal_time(list(stderr["phi"]), list(stderr["g"]), T, n, C,
                                        shaped=True)
                    f_se = stderr.get("f")
                    # NTK-Euler: no batch error of f, only the kernels are monitored
                    x = x if f_se is not None else eq
                    se = eq_se if f_se is None else np.concatenate([f_se.ravel(), eq_se])
                if (yield SimpleNamespace(x=x, se=se, res=res, it=it, final=T == T_all)):
                    break
            else:
                yield None
                if tol > 0 and res < tol:
                    diag.converged = T == T_all
                    break
    if tol == 0 and not adaptive:
        diag.converged = None                   # no tolerance asked: nothing was tested
    _flag_growth(diag)
    T = T_all
    if int(average) > 1 and len(acc) > 1:
        Phi, G, f, stderr = _average(acc, stderr, T, n, C, Y)
        Ab = [np.mean([x[2][k] for x in acc], axis=0) for k in range(L - 1)]
        Bb = [np.mean([x[3][k] for x in acc], axis=0) for k in range(L - 1)]
    diag.seconds = time.perf_counter() - t0
    if closure == "ntk":
        f = _ntk_euler(data.kx, Phi, G, Y, grid.eta, one,
                       _langevin_terms(w, ext, variances, weight_decay, gam, L)
                       if langevin_ntk else None, momentum=momentum)
    gg = np.stack([x.reshape(T, n, C, T, n, C).transpose(0, 1, 3, 4, 2, 5) for x in G])
    A = (np.stack([x.reshape(T, n, T, n, C) / gams[k] for k, x in enumerate(Ab)]) if L > 1
         else np.zeros((0, T, n, T, n, C)))
    B = (np.stack([x.reshape(T, n, C, T, n).transpose(0, 1, 3, 4, 2) / gams[k + 1]
                   for k, x in enumerate(Bb)])
         if L > 1 else np.zeros((0, T, n, T, n, C)))
    delta_out = Y[None] - f[:, :P]
    if not multi:
        f, delta_out, gg, A, B = f[..., 0], delta_out[..., 0], gg[..., 0, 0], A[..., 0], B[..., 0]
        if stderr is not None:
            stderr["g"] = stderr["g"][..., 0, 0]
            if "f" in stderr:
                stderr["f"] = stderr["f"][..., 0]
    return check_stability_along(DMFTResult(
        grid=grid, data=data, hidden_layers=L, gamma0=gam, activation=activation_label(act),
        phi=np.stack([x.reshape(T, n, T, n) for x in Phi]), g=gg, A=A, B=B,
        f=f, delta=delta_out, method="monte_carlo", closure=closure, diagnostics=diag,
        mc_stderr=stderr, bias=bool(bias),
        fields=np.stack(ctx["fields"]) if keep_fields else None), edge=edge)




def _lazy_ntk_at_variance(kx, act, L, bias, v):
    """The lazy NTK ``(n, n)`` of ``L`` hidden layers with every weight (and bias) of variance
    ``v`` (the Langevin prior ``temperature / weight_decay``, Bordelon & Pehlevan (2022),
    App. K.2): ``Phi^l = <phi phi>`` over sources ``N(0, v (Phi^{l-1} + b))``,
    ``G^l = v <phi' phi'> G^{l+1}`` with ``G^{L+1} = 1``, ``K = sum_l G^{l+1} (Phi^l + b)``
    (no ``b`` on the readout term)
    (``kx`` holds ``K^x + b``); ``v = 1`` is :func:`~effth.dmft.solvers.lazy.lazy_kernels`."""
    b = 1.0 if bias else 0.0
    phis, dphis, prev = [], [], v * kx
    for _ in range(L):
        if is_linear(act):
            p, d = prev, np.ones_like(prev)
        else:
            cov = _pair_cov(prev)
            p = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], cov, act)
            d = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], cov, act)
        phis.append(0.5 * (p + p.T))
        dphis.append(d)
        prev = v * (phis[-1] + b)
    g, nxt = [None] * L, v * np.ones_like(kx)
    for ell in range(L - 1, -1, -1):
        g[ell] = dphis[ell] * nxt
        nxt = v * g[ell]
    K = g[0] * kx + phis[-1]
    for ell in range(1, L):
        K = K + g[ell] * (phis[ell - 1] + b)
    return K


def _flag_growth(diag):
    """Set ``diag.diverged`` (and warn) when the residuals grew: median of the last three above
    5x the median of the first three (a plateau at the Monte-Carlo noise floor is not growth)."""
    r = diag.residuals
    if len(r) >= 6 and np.median(r[-3:]) > 5 * np.median(r[:3]):
        diag.diverged = True
        warnings.warn(f"Monte-Carlo DMFT iteration is diverging: residuals grew from "
                      f"{min(r):.3g} to {r[-1]:.3g} over {len(r)} sweeps; the result is not a fixed "
                      "point (lower gamma0 or eta, raise samples, damp more, or use windows)",
                      UserWarning, stacklevel=3)


def _replicated(kwargs, R, seed, progress):
    """Mean of ``R`` independent solves with ``samples / R`` draws each; standard errors from
    their spread (the error of the whole alternating solve).  Fixed sweeps: the solves run one
    after the other; adaptive (``iterations=None``): in lockstep, stopped together by the drift
    of their mean (:func:`_lockstep`)."""
    S = int(kwargs["samples"])
    kwargs["samples"] = -(-S // R)
    seed = _v.seed(seed)
    if isinstance(seed, np.random.Generator):
        children = seed.spawn(R)
    else:
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        children = [np.random.default_rng(c) for c in ss.spawn(R)]
    caught = []
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        if kwargs["adaptive"]:
            subs = _lockstep([_chain(kwargs, c) for c in children], kwargs, progress)
        else:
            subs = []
            with progress_bar(R, "DMFT Monte-Carlo replicas", progress=progress,
                              unit="replica") as bar:
                for child in children:
                    subs.append(_run_alone(_chain(kwargs, child)))
                    bar.update()
    for w in got:
        if "diverging" not in str(w.message) and "stable region" not in str(w.message):
            caught.append(w)
    first = subs[0]
    stack = {k: np.stack([getattr(r, k) for r in subs]) for k in ("phi", "g", "A", "B", "f", "delta")}
    mean = {k: v.mean(axis=0) for k, v in stack.items()}
    stack["loss"] = np.stack([r.loss for r in subs])
    se = {k: stack[k].std(axis=0, ddof=1) / np.sqrt(R) for k in ("phi", "g", "f", "loss")}
    res = np.max(np.array([r.diagnostics.residuals for r in subs]), axis=0)
    diag = Diagnostics(iterations=first.diagnostics.iterations, residuals=[float(x) for x in res],
                       tol=float(kwargs["tol"]), seconds=sum(r.diagnostics.seconds for r in subs),
                       replicas=R)
    conv = [r.diagnostics.converged for r in subs]
    if kwargs["adaptive"]:
        fd = first.diagnostics
        diag.converged, diag.criterion, diag.drift, diag.drift_z = (fd.converged, fd.criterion,
                                                                    fd.drift, fd.drift_z)
    else:
        diag.converged = None if kwargs["tol"] == 0 else all(conv)
    if any(r.diagnostics.diverged for r in subs):
        diag.diverged = True
        warnings.warn("Monte-Carlo DMFT iteration is diverging in "
                      f"{sum(r.diagnostics.diverged for r in subs)} of {R} replicas (residuals "
                      "grew); the result is not a fixed point (lower gamma0 or eta, raise samples, "
                      "damp more, or use windows)", UserWarning, stacklevel=3)
    for msg in dict.fromkeys((str(w.message), w.category) for w in caught):  # once each
        warnings.warn(msg[0], msg[1], stacklevel=3)
    fields = (np.concatenate([r.fields for r in subs], axis=1)
              if first.fields is not None else None)
    return check_stability_along(DMFTResult(grid=first.grid, data=first.data, hidden_layers=first.hidden_layers,
                      gamma0=first.gamma0, activation=first.activation, phi=mean["phi"],
                      g=mean["g"], A=mean["A"], B=mean["B"], f=mean["f"], delta=mean["delta"],
                      method="monte_carlo", closure=first.closure, diagnostics=diag,
                      mc_stderr=se, bias=first.bias, fields=fields),
                      edge=2.0 * (1.0 + kwargs["momentum"]) / (1.0 - kwargs["momentum"]))


def _noise_blocks(kap, n, C):
    """The noise kernel ``kap`` ``(T, T)`` spread over the flattened ``(t, mu(, c))`` blocks of
    the sources (``n``, ``nc``) and of the responses (``a``: ``(Tn, TnC)``, ``b``: ``(TnC, Tn)``)."""
    return SimpleNamespace(
        kappa=kap, n=np.kron(kap, np.ones((n, n))), nc=np.kron(kap, np.ones((n * C, n * C))),
        a=np.kron(kap, np.ones((n, n * C))), b=np.kron(kap, np.ones((n * C, n))))


def _window(T, n, C, rho, kx, filt=None, variances=None):
    """Constants of a window of ``T`` steps (flattened time-major, index ``(i n + mu) C + c``).

    ``filt``: the optimizer's :class:`~effth.dmft.grid.ParameterFilter` on ``T`` points with
    momentum or a temperature (``None``: plain GD or weight decay, ``a(t) = rho^t``,
    ``k(j) = rho^j``).  Momentum alone keeps ``kappa = a a^T`` (the sources are ``a(t)`` times the
    undecayed ones, as with decay); with a temperature ``kappa`` does not factorize, the sources
    are sampled with covariance ``kappa * Phi`` directly and ``kap_a``, ``kap_b`` weight the
    response terms (``dr = 1``: responses to the total sources).  With a temperature and
    ``variances`` (``sigma_k^2`` of ``W^k``, ``k = 0 .. L``) each weight layer has its own kernel
    ``kappa_k = sigma_k^2 a a^T + (kappa - a a^T)`` (``noisy.layers[k]``: the initial part
    scales, the noise does not; Bordelon & Pehlevan (2022), App. D.8, App. K), while the biases
    keep ``kappa``."""
    lag = np.subtract.outer(np.arange(T), np.arange(T)) - 1
    mem = kap = None
    if filt is None:
        rt = rho ** np.arange(T)
        decay = np.tril(rho ** np.maximum(lag, 0), -1)                 # [j < i] rho^{i-1-j}
    else:
        mem = filt.memory
        decay = np.where(lag >= 0, mem[np.maximum(lag, 0)], 0.0)       # [j < i] k(i-1-j)
        rt = filt.init
        if filt.noise > 0:
            kap, rt = filt.kappa, np.ones(T)
    past, eye_t = causal_mask(T), np.eye(T)
    noisy = None if kap is None else _noise_blocks(kap, n, C)
    if noisy is not None:
        noisy.layers = None
        if variances is not None:
            aa = np.outer(filt.init, filt.init)
            noisy.layers = [_noise_blocks(v * aa + (kap - aa), n, C) for v in variances]
    return SimpleNamespace(
        mem=mem, noisy=noisy,
        T=T, rt=rt, dr_n=np.repeat(rt, n), dr_nc=np.repeat(rt, n * C),  # D_rho on (t, mu(, c))
        noise=0.0 if filt is None else float(filt.noise),
        strict_r=np.kron(decay, np.ones((n, n))),
        mask_a=np.kron(past, np.ones((n, n * C))),                       # (Tn, TnC): j < i
        mask_b=(np.kron(past, np.ones((n * C, n)))                       # (TnC, Tn): j < i, and
                + np.kron(eye_t, np.kron(np.eye(n), np.ones((C, 1))))),  # j = i diagonal in mu
        K0=np.tile(kx, (T, T)),
        g_top=np.kron(np.ones((T * n, T * n)), np.eye(C)),               # G^{L+1} = 1 (x) I_C
        pre_a=np.repeat(np.arange(T) * n * C, n),                        # Stein: columns j < i
        pre_b=np.repeat(np.arange(T) * n, n * C),                        # columns j < i
        eq_b=np.repeat(np.arange(T * n), C))                             # and the column (i, mu)


@limits_blas_threads
def _sweep(ctx, w, Phi, G, Ab, Bb, delta, batches):
    """One sweep over the layers with the previous iterate's kernels (Jacobi style).

    Returns the new ``Phi``, ``G``, ``Abar``, ``Bbar`` (lists over layers), the per-sample readout
    responses ``<d phi(h^L) / d rh^L>`` ``(S, T, n, C)`` and, if ``batches``, per-batch kernel
    estimates ``(phi, g)`` for the standard errors."""
    L, n, C, S, gam, eta, one = (ctx[k] for k in ("L", "n", "C", "S", "gam", "eta", "one"))
    phi_f, dphi_f, ddphi_f = ctx["fns"]
    T = w.T
    Tn, TnC, P = T * n, T * n * C, delta.shape[1]
    dl = np.zeros((T, n, C))
    dl[:, :P] = delta
    dl = dl.reshape(Tn, C)                                  # Delta_{alpha c}(t_j) by (j, alpha)
    Phin, Gn, Abn, Bbn = [None] * L, [None] * L, [None] * (L - 1), [None] * (L - 1)
    bphi, bg = [None] * L, [None] * L
    ext = [None] * L if ctx["ito"] else None
    with np.errstate(over="ignore", invalid="ignore"):
        for ell in range(1, L + 1):
            Pprev = w.K0 if ell == 1 else Phi[ell - 2] + one
            Gnext = w.g_top if ell == L else G[ell]
            gam = ctx["gams"][ell - 1]
            Cm = ((gam * eta * w.strict_r * Pprev)[:, :, None] * dl[None]).reshape(Tn, TnC)
            Dm = (gam * eta * np.einsum("acbd,bd->acb", Gnext.reshape(Tn, C, Tn, C), dl)
                  * w.strict_r[:, None, :]).reshape(TnC, Tn)
            a = ctx["ratios"]
            nz = w.noisy                # Langevin: kappa * (response to the total source)
            v = ctx["variances"]        # sigma_k^2 of W^k (App. D.8): W^{l-1} feeds h^l
            kl = None if nz is None else nz.layers   # Langevin and variances: kappa_k per layer
            if ell >= 2:      # raw response of layer l-1, times sqrt(a_{l-1} / a_l) (eq. (60))
                if kl is not None:
                    resp = kl[ell - 1].a * Ab[ell - 2]
                else:
                    resp = w.dr_n[:, None] * Ab[ell - 2] if nz is None else nz.a * Ab[ell - 2]
                    resp = resp if v is None else v[ell - 1] * resp
                Cm = Cm + (resp if a is None else np.sqrt(a[ell - 2] / a[ell - 1]) * resp)
            if ell <= L - 1:  # raw response of layer l+1, times sqrt(a_{l+1} / a_l) (eq. (63))
                if kl is not None:
                    resp = kl[ell].b * Bb[ell - 1]
                else:
                    resp = w.dr_nc[:, None] * Bb[ell - 1] if nz is None else nz.b * Bb[ell - 1]
                    resp = resp if v is None else v[ell] * resp
                Dm = Dm + (resp if a is None else np.sqrt(a[ell] / a[ell - 1]) * resp)
            if kl is not None:          # kappa_{l-1} * Phi^{l-1} + kappa * 1 (bias), kappa_l * G
                Pprev = (kl[ell - 1].n * (Pprev - one) + nz.n * one if one
                         else kl[ell - 1].n * Pprev)
                Gnext = kl[ell].nc * Gnext
            elif nz is not None:        # total sources (initial weights and noise): kappa * K
                Pprev, Gnext = nz.n * Pprev, nz.nc * Gnext
            elif v is not None:         # u^l ~ sigma_{l-1}^2 Phi^{l-1} (+ 1), r^l ~ sigma_l^2 G^{l+1}
                Pprev = v[ell - 1] * (Pprev - one) + one if one else v[ell - 1] * Pprev
                Gnext = v[ell] * Gnext
            uh = _sample(ctx["rng"], Pprev, S // 2)
            rh = _sample(ctx["rng"], Gnext, S // 2)
            uh = np.concatenate([uh, uh])                               # antithetic (u, r), (u, -r)
            rh = np.concatenate([rh, -rh])
            h, z, g = _solve_fields(uh * w.dr_n, rh * w.dr_nc, Cm, Dm, phi_f, dphi_f, T, n, C)
            if ctx["fields"] is not None:
                ctx["fields"][ell - 1] = h.reshape(S, T, n)
            ph, d1 = phi_f(h), dphi_f(h)
            Phin[ell - 1] = ph.T @ ph / S
            Gn[ell - 1] = g.T @ g / S
            if ctx["ito"]:    # <g h>, <phi''(h) z>, <phi'(h)^2> per (t, mu(, c)): eq. (102)
                ext[ell - 1] = [(g.reshape(S, T, n, C) * h.reshape(S, T, n, 1)).mean(axis=0),
                                (ddphi_f(h).reshape(S, T, n, 1)
                                 * z.reshape(S, T, n, C)).mean(axis=0),
                                (d1 ** 2).reshape(S, T, n).mean(axis=0)]
            if batches:
                bphi[ell - 1], bg[ell - 1] = _batch_means(ph, batches), _batch_means(g, batches)
            need_A, need_B = ell <= L - 1 and not ctx["gi"], ell >= 2 and not ctx["gi"]
            if ctx["responses"] == "stein":
                cut = ctx["stein_cut"]
                if need_A:
                    Abn[ell - 1] = w.mask_a * _stein(ph, rh, Gnext, cut, True, w.pre_a)
                if need_B:
                    Bbn[ell - 2] = w.mask_b * _stein(g, uh, Pprev, cut, False, w.pre_b, w.eq_b)
                if ell == L and nz is not None:
                    ro = _readout_regression(ph, rh, (nz if kl is None else kl[L]).kappa, T,
                                             n, C)
                elif ell == L:
                    # rh^L is one N(0, I_C) vector: <d phi(h^L)/d rh^L_c> = <phi(h^L) rh^L_c>,
                    # regressed on the sample's own <rh rh^T> (exact for phi linear in rh)
                    r0 = rh[:, :C]
                    ro = ph[:, :, None] * (r0 @ np.linalg.inv(r0.T @ r0 / S))[:, None, :]
            else:
                Abl, Bbl, ro = _jacobians(Cm, Dm, d1, ddphi_f(h), z, w.dr_nc, C, need_A,
                                          need_B, ell == L,
                                          kappa=None if nz is None else
                                          (nz if kl is None else kl[L]).kappa)
                if need_A:                                              # d/d rh = (d/d r) D_rho
                    Abn[ell - 1] = w.mask_a * Abl * w.dr_nc[None, :]
                if need_B:
                    Bbn[ell - 2] = w.mask_b * Bbl * w.dr_n[None, :]
    if ctx["gi"]:
        Abn, Bbn = [np.zeros_like(x) for x in Ab], [np.zeros_like(x) for x in Bb]
    if ctx["variances"] is not None and (w.noisy is None or w.noisy.layers is None):
        ro = ctx["variances"][-1] * ro   # readout w^L(0) . phi / N = sigma_L^2 <d phi / d r^L>
    return Phin, Gn, Abn, Bbn, ro.reshape(S, T, n, C), (bphi, bg), ext


def _readout_regression(ph, rh, kappa, T, n, C):
    """Per-sample terms ``(S, T, n, C)`` whose mean is ``<r^L_c(t_i) phi(h^L_mu(t_i))>`` when the
    readout source ``r^L`` is a process in time (Langevin noise; covariance ``kappa (x) I_C``,
    the same for every ``mu``).  ``phi(h(t_i))`` depends on ``r(t_j)``, ``j < i``, only, so with
    ``J = <d phi(h(t_i)) / d r(t_j)>`` Stein gives ``sum_{j<i} kappa(i, j) J_{ij}``; ``J`` is the
    regression on the sample's own past sources (exact sample by sample for ``phi`` linear in
    them; the constant-source form of the GD path is the case ``kappa = 1``)."""
    S = ph.shape[0]
    r = rh.reshape(S, T, n, C)[:, :, 0, :].reshape(S, T * C)      # one source per (t, c)
    ph = ph.reshape(S, T, n)
    out = np.zeros((S, T, n, C))
    for i in range(1, T):
        X = r[:, : i * C]
        k = np.kron(kappa[:i, i][:, None], np.eye(C))             # Cov(r(t_j)_c', r(t_i)_c)
        wts = X @ np.linalg.solve(X.T @ X / S, k)                  # (S, C)
        out[:, i] = ph[:, i, :, None] * wts[:, None, :]
    return out.reshape(S, T * n, C)


def _batch_stderr(bat, ro, closure, w, Y, gam, eta, rho, batches):
    """Standard errors of ``Phi``, ``G`` and (exact closure) ``f`` from the batches of a sweep."""
    (bphi, bg), T = bat, w.T
    n, C = ro.shape[2], ro.shape[3]
    out = {"phi": np.stack([_sem(x).reshape(T, n, T, n) for x in bphi]),
           "g": np.stack([_sem(x).reshape(T, n, C, T, n, C).transpose(0, 1, 3, 4, 2, 5)
                          for x in bg])}
    if closure == "exact":
        rb = _batch_means(ro.reshape(ro.shape[0], -1), batches, second=False)
        fb = np.stack([
            _exact_closure(pb, w.rt[:, None, None] * r.reshape(T, n, C) / gam, Y, eta, rho, w.mem)
            for pb, r in zip(bphi[-1], rb)])
        out["f"] = _sem(fb)
        out["loss"] = _sem(_losses(fb, Y))
    return out


def _losses(fs: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """``(k, T)`` training losses ``1/2 sum (y - f)^2`` of ``k`` estimates ``fs`` ``(k, T, n, C)``."""
    P = Y.shape[0]
    d = Y[None, None] - fs[:, :, :P]
    return 0.5 * np.sum(d.reshape(d.shape[0], d.shape[1], -1) ** 2, axis=2)


def _average(acc, stderr, T, n, C, Y=None):
    """Means of the last ``k`` sweeps' undamped ``Phi``, ``G``, ``f`` and their standard errors:
    the sweep-to-sweep spread / sqrt(k), and at least the last sweep's batch error / sqrt(k)."""
    k = len(acc)
    out, se = [], {}
    for j, name in ((0, "phi"), (1, "g"), (4, "f")):
        xs = np.stack([np.stack(a[j]) if j < 4 else a[j] for a in acc])
        out.append(xs.mean(axis=0))
        spread = xs.std(axis=0, ddof=1) / np.sqrt(k)
        if name == "phi":
            spread = spread.reshape(-1, T, n, T, n)
        elif name == "g":
            spread = spread.reshape(-1, T, n, C, T, n, C).transpose(0, 1, 2, 4, 5, 3, 6)
        batch = None if stderr is None else stderr.get(name)
        se[name] = spread if batch is None else np.maximum(spread, batch / np.sqrt(k))
    if Y is not None:
        ls = _losses(np.stack([a[4] for a in acc]), Y)
        spread = ls.std(axis=0, ddof=1) / np.sqrt(k)
        batch = None if stderr is None else stderr.get("loss")
        se["loss"] = spread if batch is None else np.maximum(spread, batch / np.sqrt(k))
    return list(out[0]), list(out[1]), out[2], se


def _extend(Phi, G, Ab, Bb, delta, T, n, C):
    """Extend the state of a solved window to ``T`` steps: kernels and ``Delta`` continued
    constant from the window's last time, responses by zeros (an initial guess only)."""
    t = np.minimum(np.arange(T), delta.shape[0] - 1)
    i_n = (t[:, None] * n + np.arange(n)).ravel()
    i_nc = (t[:, None] * n * C + np.arange(n * C)).ravel()

    def pad(x, rows, cols):
        out = np.zeros((rows, cols))
        out[: x.shape[0], : x.shape[1]] = x
        return out

    return ([x[np.ix_(i_n, i_n)] for x in Phi], [x[np.ix_(i_nc, i_nc)] for x in G],
            [pad(x, T * n, T * n * C) for x in Ab], [pad(x, T * n * C, T * n) for x in Bb],
            delta[t])


def _sample(rng, K, count):
    """``count`` draws of ``N(0, K)`` via ``eigh`` with negative eigenvalues clipped (Bordelon & Pehlevan (2022), App. B).

    The symmetric square root ``V sqrt(lambda) V^T`` is used: unlike ``V sqrt(lambda)`` it is a
    continuous function of ``K`` (eigenvectors of near-degenerate kernels are not), so equal
    kernels up to rounding give equal samples (exact ``gamma0 -> -gamma0`` symmetry)."""
    return rng.standard_normal((count, K.shape[0])) @ _root(K)


def _root(K):
    """The symmetric square root ``V sqrt(max(lambda, 0)) V^T`` of ``K`` (:func:`_sample`)."""
    lam, V = np.linalg.eigh(0.5 * (K + K.T))
    return (V * np.sqrt(np.clip(lam, 0.0, None))) @ V.T


def _semichol(gram, tol):
    """Lower-triangular ``L`` with ``gram = L L^T`` on the kept columns (order preserved): column
    ``k`` is dropped when its innovation variance given the earlier kept columns is at most
    ``tol`` times its variance.  Returns ``L`` restricted to the kept columns and their indices."""
    d = gram.shape[0]
    L = np.zeros((d, d))
    keep = np.zeros(d, dtype=bool)
    for k in range(d):
        piv = gram[k, k] - L[k, :k] @ L[k, :k]
        if gram[k, k] <= 0 or piv <= tol * gram[k, k]:
            continue
        keep[k] = True
        L[k, k] = np.sqrt(piv)
        L[k + 1:, k] = (gram[k + 1:, k] - L[k + 1:, :k] @ L[k, :k]) / L[k, k]
    idx = np.flatnonzero(keep)
    return L[np.ix_(idx, idx)], idx


def _stein(y, x, K, cut, flip, past, eq=None):
    """Causal Stein regression: ``J ~ <d y / d x>`` for sources ``x ~ N(0, K)`` (Bordelon & Pehlevan (2022), App. B).

    Row ``r`` of ``J`` is supported on the source columns ``k < past[r]`` (time-major order: the
    strict past of the row) and, if ``eq`` is given, the equal-time column ``eq[r]``.  Because the
    true response is causal, regressing ``y_r`` on exactly those columns of the *sampled* sources
    is exact in expectation (Stein: ``<y x_a^T> = J_a <x_a x_a^T>`` when ``J`` lives on ``a``),
    and fitting against the sample's own covariance removes the noise that is linear in the
    sources (exact for linear ``phi``).  The columns are orthogonalised in time order (semi-definite
    Cholesky of the sample Gram matrix, one factor shared by all rows); an innovation carrying at
    most ``cut**2 / m`` of its column's variance (``m`` independent antithetic pairs) is dropped:
    a response to it could not be resolved to better than ``1/cut`` of its natural scale, and
    its effect is carried by the earlier, correlated columns.  ``cut = 0``: the plain
    pseudo-inverse form ``<y x^T> K^+`` (Bordelon & Pehlevan (2022), eq. (53)), unstable for slowly varying kernels.

    ``y``, ``x`` are antithetic: rows ``S/2..`` are the partners of rows ``..S/2`` with ``x``
    negated (``flip``: the ``r``-sources) or repeated (the ``u``-sources)."""
    S = y.shape[0]
    if cut == 0:
        return (y.T @ x / S) @ np.linalg.pinv(K, hermitian=True)
    m = S // 2
    xp = x[:m] - x[:m].mean(axis=0)
    yp = 0.5 * (y[:m] - y[m:]) if flip else 0.5 * (y[:m] + y[m:])  # independent pair rows
    yp = yp - yp.mean(axis=0)
    tol = cut ** 2 / m
    gram = xp.T @ xp / m
    L, idx = _semichol(gram, tol)
    Linv = np.linalg.inv(L)
    E = xp[:, idx] @ Linv.T                                         # unit-variance innovations
    M = idx[None, :] < past[:, None]                                # (rows, kept): strict past
    D = (yp.T @ E / m) * M                                          # <y_r eps_k>
    J = np.zeros((y.shape[1], x.shape[1]))
    J[:, idx] = D @ Linv
    if eq is not None:
        # equal-time column q = eq[r]: its innovation given the strict past of row r
        cq = (E.T @ xp[:, eq] / m) * M.T                            # (kept, rows)
        e = xp[:, eq] - E @ cq
        ve = np.mean(e ** 2, axis=0)
        ok = ve > tol * np.diag(gram)[eq]
        d = np.where(ok, np.mean((yp - E @ D.T) * e, axis=0) / np.where(ok, ve, 1.0), 0.0)
        J[np.arange(y.shape[1]), eq] += d
        J[:, idx] -= (d[:, None] * cq.T) @ Linv
    return J


def _solve_fields(u, r, Cm, Dm, phi_f, dphi_f, T, n, C):
    """Forward substitution in time (Bordelon & Pehlevan (2022), App. B) for all samples at once.

    ``h`` (S, Tn), ``z`` and ``g`` (S, TnC), index ``(i n + mu) C + c``; ``Cm`` (Tn, TnC) maps
    ``g`` into ``h``, ``Dm`` (TnC, Tn) maps ``phi(h)`` into ``z``."""
    S = u.shape[0]
    nC = n * C
    h = np.zeros((S, T * n))
    ph = np.zeros((S, T * n))
    z = np.zeros((S, T * nC))
    g = np.zeros((S, T * nC))
    for i in range(T):
        b, bc = slice(i * n, (i + 1) * n), slice(i * nC, (i + 1) * nC)
        h[:, b] = u[:, b] + g[:, : i * nC] @ Cm[b, : i * nC].T
        ph[:, b] = phi_f(h[:, b])
        z[:, bc] = r[:, bc] + ph[:, : (i + 1) * n] @ Dm[bc, : (i + 1) * n].T
        g[:, bc] = (dphi_f(h[:, b])[:, :, None] * z[:, bc].reshape(S, n, C)).reshape(S, nC)
    return h, z, g


def _unit_lower_inverse(M: np.ndarray, block: int = 16) -> np.ndarray:
    """Inverse of a batch ``(..., n, n)`` of unit lower-triangular matrices by recursive 2x2
    blocking, ``[[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]]``: batched matrix
    products only, about a third of the flops of a general ``inv`` (LU and back-substitution),
    and exact in the zero upper triangle."""
    n = M.shape[-1]
    if n <= block:
        return np.linalg.inv(M)
    k = n // 2
    Ai = _unit_lower_inverse(M[..., :k, :k], block)
    Di = _unit_lower_inverse(M[..., k:, k:], block)
    out = np.zeros_like(M)
    out[..., :k, :k] = Ai
    out[..., k:, k:] = Di
    out[..., k:, :k] = -(Di @ (M[..., k:, :k] @ Ai))
    return out


def _jacobians(Cm, Dm, d1, d2, z, rcol, C, need_A, need_B, need_readout, chunk=128,
               kappa=None):
    """Sample means of the per-sample Jacobians of the linearised causal system (Bordelon & Pehlevan (2022), App. B).

    With ``Lambda_1 = diag(phi'(h))`` (on ``z``: ``(x) I_C``) and ``Lambda_2`` the stack of
    ``diag(phi''(h) z_c)``: ``M = 1 - Cm Lambda_2 - Cm Lambda_1 Dm Lambda_1`` (T n x T n, unit lower
    triangular), ``d phi/d r = Lambda_1 M^-1 Cm Lambda_1`` (Tn x TnC), ``d g/d u = (Lambda_2 +
    Lambda_1 Dm Lambda_1) M^-1`` (TnC x Tn).  The readout response ``d phi / d rh^L_c`` (per
    sample, ``(S, Tn, C)``) sums ``d phi/d r`` over the columns of output ``c`` weighted by
    ``rcol`` (``r = rcol * rh``).  With ``kappa`` (Langevin noise: the readout source is a
    process ``r(t)`` of covariance ``kappa (x) I_C``) it is instead
    ``sum_j kappa(i, j) d phi(h(t_i)) / d r_c(t_j)``, whose mean is ``<r_c(t_i) phi(h(t_i))>``."""
    S, Tn = d1.shape
    A = np.zeros((Tn, Tn * C)) if need_A else None
    B = np.zeros((Tn * C, Tn)) if need_B else None
    readout = np.zeros((S, Tn, C)) if need_readout else None
    eye = np.eye(Tn)
    Cm3 = Cm.reshape(Tn, Tn, C)
    wsum = lambda w, X: np.matmul(w.T[:, None, :], X.transpose(1, 0, 2))[:, 0, :]  # sum_s w X
    for s0 in range(0, S, chunk):
        sl = slice(s0, s0 + chunk)
        l1 = d1[sl]
        m = l1.shape[0]
        l1c = np.repeat(l1, C, axis=1)                                      # (m, TnC)
        l2 = d2[sl][:, :, None] * z[sl].reshape(m, Tn, C)                   # (m, Tn, C)
        CL1 = Cm[None] * l1c[:, None, :]                                    # Cm Lambda_1
        CL2 = Cm3[None, :, :, 0] * l2[:, None, :, 0]                        # Cm Lambda_2
        for c in range(1, C):
            CL2 += Cm3[None, :, :, c] * l2[:, None, :, c]
        DL1 = Dm[None] * l1[:, None, :]                                     # Dm Lambda_1
        M = eye[None] - CL2 - CL1 @ DL1
        if need_readout and kappa is not None:
            T = kappa.shape[0]
            E = np.kron(np.eye(T), np.kron(np.ones((Tn // T, 1)), np.eye(C)))       # (TnC, TC)
            v = np.matmul(CL1, E)                                                  # (m, Tn, TC)
        elif need_readout:
            v = np.matmul(CL1, np.kron(np.ones((Tn, 1)), np.eye(C)) * rcol[:, None])  # (m, Tn, C)
        if need_A or need_B:
            Minv = _unit_lower_inverse(M)        # M is unit lower triangular (causality)
            if need_A:
                A += wsum(l1, Minv @ CL1)
            if need_B:
                B += (wsum(l2.reshape(m, Tn * C), np.repeat(Minv, C, axis=1))
                      + wsum(l1c, DL1 @ Minv))
            if need_readout:
                readout[sl] = _kappa_sum(l1[:, :, None] * (Minv @ v), kappa, C)
        elif need_readout:
            readout[sl] = _kappa_sum(l1[:, :, None] * np.linalg.solve(M, v), kappa, C)
    return (None if A is None else A / S, None if B is None else B / S, readout)


def _kappa_sum(R, kappa, C):
    """``R`` ``(m, Tn, C)`` unchanged, or with ``kappa``: ``R`` ``(m, Tn, TC)`` of
    ``d phi(h(t_i)) / d r_c(t_j)`` contracted to ``sum_j kappa(i, j) R[.., (i mu), (j c)]``."""
    if kappa is None:
        return R
    m, Tn, _ = R.shape
    T = kappa.shape[0]
    R = R.reshape(m, T, Tn // T, T, C)
    return np.einsum("ij,minjc->minc", kappa, R).reshape(m, Tn, C)


def _exact_closure(PhiL, a, Y, eta, rho=1.0, memory=None):
    """``f_{mu c}(t_i) = a_{mu c}(t_i) + eta sum_{j<i} rho^{i-1-j} sum_alpha Phi^L_{mu alpha}(t_i,
    t_j) Delta_{alpha c}(t_j)``, ``Delta = Y - f``, solved forward in time with ``a`` ``(T, n, C)``
    fixed (``a = gamma0^-1 rho^i <d phi(h^L)/d rh^L>``).  ``memory``: the drift weights
    ``k(i-1-j)`` of :class:`~effth.dmft.grid.ParameterFilter` in place of ``rho^{i-1-j}``
    (momentum, Langevin)."""
    T, n, C = a.shape
    P = Y.shape[0]
    Ph = PhiL.reshape(T, n, T, n)
    f = a.copy()
    delta = np.zeros((T, P, C))
    for i in range(T):
        if i:
            w = (eta * rho ** np.arange(i - 1, -1, -1) if memory is None
                 else eta * memory[i - 1::-1])
            f[i] += np.einsum("msa,sac->mc", Ph[i, :, :i, :P] * w[None, :, None], delta[:i])
        delta[i] = Y - f[i, :P]
    return f


def _langevin_terms(w, ext, variances, weight_decay, gam, L):
    """The constants of the NTK-Euler closure under weight decay and Langevin noise (eq. (102)
    of Bordelon & Pehlevan (2022), App. K): ``lam`` (weight decay), ``half`` (half the noise
    variance per step, ``sigma^2 / 2``), ``gam`` (``gamma0``), the per-layer single-site
    averages ``ext`` (``<g h>``, ``<phi''(h) z>``, ``<phi'(h)^2>``) and ``kap[l]`` (``T``,) the
    variance ``kappa_l(t, t)`` of the random part of ``W^l`` (``l = 1 .. L-1``), which carries
    ``r = dg/dh`` down through the layers."""
    noisy = w.noisy
    kap = [None] * L
    for ell in range(1, L):
        if noisy is not None:
            k = (noisy if noisy.layers is None else noisy.layers[ell]).kappa
            kap[ell] = np.diag(k).copy()
        else:
            kap[ell] = (w.rt ** 2) * (1.0 if variances is None else variances[ell])
    half = 0.0 if noisy is None else 0.5 * w.noise
    return SimpleNamespace(lam=float(weight_decay), half=half, gam=float(gam), ext=ext, kap=kap)


def _ntk_euler(kx, Phi, G, Y, eta, one=0.0, lang=None, momentum=0.0):
    """NTK-Euler predictions ``(T, n, C)`` from ``(T n, T n)`` kernels ``Phi``, ``(T n C, T n C)``
    kernels ``G``: ``K^{cc'} = G^1 K^x + sum_l G^{l+1} (Phi^l + one) + Phi^L delta_{cc'}``.

    With ``lang`` (:func:`_langevin_terms`: weight decay ``lambda`` and/or Langevin noise of
    variance ``sigma^2`` per step) the Euler step of eq. (102) of Bordelon & Pehlevan (2022),
    App. K, in the network's mean-field units:

    ``f(t+1) = f + eta K Delta - eta lambda theta . grad f + (sigma^2 / 2) Tr grad^2 f``, with
    ``theta . grad f = f + gamma0^-1 sum_l <g^l h^l>`` (readout, then ``W^{l-1}`` and ``b^l``
    together) and ``Tr grad^2 f = gamma0^-1 sum_l <r^l> (<phi(h^{l-1})^2> + b)`` (``phi(h^0)^2``
    the diagonal of ``K^x``), where ``r^l = dg^l/dh^l`` obeys ``<r^L> = <phi''(h^L) z^L>``,
    ``<r^l> = <phi''(h^l) z^l> + <phi'(h^l)^2> kappa_l(t, t) <r^{l+1}>`` (the paper's
    ``r^{l+1}``; ``sigma^2 = 2 eta / beta`` to first order).  For a linear network these are
    ``(L + 1) f`` and 0.

    With heavy-ball ``momentum`` ``mu`` (and no ``lang``) ``f`` steps along the heavy-ball update
    with the two-time NTK, ``f(t+1) = f(t) + eta sum_{s<=t} (1 - mu) mu^{t-s} K(t, s) Delta(s)``
    (App. L, eq. (122))."""
    n = kx.shape[0]
    T = Phi[0].shape[0] // n
    P, C = Y.shape
    idx = np.arange(T)
    dphi = lambda X: X.reshape(T, n, T, n)[idx, :, idx, :][:, :, None, :, None]
    dg = lambda X: X.reshape(T, n, C, T, n, C)[idx, :, :, idx, :, :]     # (T, n, C, n, C)
    K = dg(G[0]) * kx[None, :, None, :, None]
    for ell in range(1, len(Phi)):
        K = K + dg(G[ell]) * (dphi(Phi[ell - 1]) + one)
    K = K + dphi(Phi[-1]) * np.eye(C)[None, None, :, None, :]
    f = np.zeros((T, n, C))
    if momentum > 0:
        mu = momentum
        full = lambda X: X.reshape(T, n, T, n)[:, :, None, :, :, None]
        K2 = G[0].reshape(T, n, C, T, n, C) * kx[None, :, None, None, :, None]
        for ell in range(1, len(Phi)):
            K2 = K2 + G[ell].reshape(T, n, C, T, n, C) * (full(Phi[ell - 1]) + one)
        K2 = K2 + full(Phi[-1]) * np.eye(C)[None, None, :, None, None, :]
        return heavy_ball_ntk_dynamics(K2, Y, eta, mu)
    if lang is None:
        for i in range(T - 1):
            f[i + 1] = f[i] + eta * np.einsum("mcad,ad->mc", K[i][:, :, :P], Y - f[i, :P])
        return f
    L = len(Phi)
    ext = lang.ext
    gh = sum(e[0] for e in ext) / lang.gam                          # (T, n, C)
    ito = np.zeros((T, n, C))
    if lang.half > 0:
        r = ext[L - 1][1]                                           # <r^L>
        for ell in range(L, 0, -1):
            if ell < L:
                r = ext[ell - 1][1] + ext[ell - 1][2][:, :, None] * lang.kap[ell][:, None, None] * r
            sq = (np.diag(kx)[None] if ell == 1 else
                  Phi[ell - 2].reshape(T, n, T, n)[idx, :, idx, :].diagonal(axis1=1, axis2=2) + one)
            ito = ito + r * np.broadcast_to(sq, (T, n))[:, :, None]
        ito = lang.half * ito / lang.gam
    for i in range(T - 1):
        f[i + 1] = (f[i] + eta * np.einsum("mcad,ad->mc", K[i][:, :, :P], Y - f[i, :P])
                    - eta * lang.lam * (f[i] + gh[i]) + ito[i])
    return f


def _batch_means(x, batches, second=True):
    """Per-batch estimates ``x^T x / m`` (or means of ``x`` if not ``second``), antithetic
    partners kept together."""
    S = x.shape[0] // 2
    out = []
    for k in range(batches):
        sl = slice(k * S // batches, (k + 1) * S // batches)
        xb = np.concatenate([x[:S][sl], x[S:][sl]])
        out.append(xb.T @ xb / xb.shape[0] if second else xb.mean(axis=0))
    return np.stack(out)


def _sem(x):
    return x.std(axis=0, ddof=1) / np.sqrt(x.shape[0]) if x.shape[0] > 1 else np.zeros(x.shape[1:])
