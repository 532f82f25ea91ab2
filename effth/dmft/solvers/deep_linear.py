"""Deep linear DMFT: the closed PT x PT matrix equations, solved without sampling.

For ``phi(h) = h`` the single-site fields are linear in the Gaussian sources and every
order parameter follows from matrix algebra (Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71), with the
corrections of Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71): the responses ``A, B`` enter *without* a factor ``Delta``; the
predictions use the exact discrete-GD closure of Bordelon & Pehlevan (2022), eqs. (3), (21), App. M).  With ``g^ell`` sample independent,
vectors ``h^ell`` live on (time, sample) [length ``T n``] and ``g^ell`` on time [length ``T``]:

``h^ell = u^ell + gamma0 C^ell g^ell``, ``g^ell = r^ell + gamma0 D^ell h^ell``,

``C^ell_{(t mu), s} = A^{ell-1}_{(t mu), s} + eta Theta(t-s) sum_alpha H^{ell-1}_{mu alpha}(t,s) Delta_alpha(s)``,
``D^ell_{t, (s alpha)} = B^ell_{t, (s alpha)} + eta Theta(t-s) G^{ell+1}(t,s) Delta_alpha(s)``,

with ``Theta(0) = 0`` (left-Riemann sums of discrete GD, Bordelon & Pehlevan (2022), App. M).  With
``M_g = (1 - gamma0^2 D C)^{-1}`` (unit lower triangular, always invertible):

``G^ell = M_g [G^{ell+1} + gamma0^2 D H^{ell-1} D^T] M_g^T``,
``H^ell = H^{ell-1} + gamma0^2 [C Y + (C Y)^T]``, ``Y = M_g D H^{ell-1} + G^ell C^T / 2``,
``A^ell = C M_g`` (= ``M_h C``), ``B^{ell-1} = M_g D``,
``f_mu(t_i) = [(M_g D H^{L-1})^T + C^L G^L]_{(i mu), i}``  (= ``gamma0^-1 <h^L_mu(t_i) g^L(t_i)>``),

base cases ``H^0 = K^x`` (constant in time), ``G^{L+1} = 1``, ``A^0 = B^L = 0``.  By causality the
time-``t`` rows of every order parameter follow from earlier rows (``method='march'``, default);
alternatively the equations are iterated to a fixed point (``method='sweep'``: Gauss-Seidel sweeps
over layers in alternating direction, optional damping, continued over growing time windows).

Extensions: weight decay, trainable biases, several outputs
-----------------------------------------------------------
Derived from the discrete dynamics (Bordelon & Pehlevan (2022), App. H, I, J, M; Bordelon & Pehlevan (2022), App. D.8, G-M, §3.2) of
:func:`effth.simulation.training.simulate_training`.  With ``rho = 1 - eta lambda`` every
parameter obeys ``theta(t+1) = rho theta(t) + (GD update at t)``, hence (``g^{L}_c = w^L_c``)

``W^l(t) = rho^t W^l(0) + eta gamma0 N^-1/2 sum_{s<t} rho^{t-1-s} sum_{alpha c} Delta_{alpha c}(s) g^{l+1}_c(s) h^l_alpha(s)^T``,
``b^l(t) = rho^t b^l(0) + eta gamma0 sum_{s<t} rho^{t-1-s} sum_{alpha c} Delta_{alpha c}(s) g^l_c(s)``,
``w^L_c(t) = rho^t w^L_c(0) + eta gamma0 sum_{s<t} rho^{t-1-s} sum_alpha Delta_{alpha c}(s) h^L_alpha(s)``.

The initial weights enter the forward pass at ``t`` as ``rho^t W(0)`` and the backward pass at
``s`` as ``rho^s W(0)^T``.  Averaging over ``W(0)`` as without decay (``W(0) h / sqrt(N) =
u + A g``, ``W(0)^T g / sqrt(N) = r + B h``) gives, with ``R = diag_t(rho^t)``,

``h^l = R u^l + gamma0 C^l g^l``, ``g^l = R r^l + gamma0 D^l h^l``,
``u^l ~ GP(0, Hb^{l-1})``, ``Hb^{l-1} = H^{l-1} + b 1 1^T``, ``r^l ~ GP(0, G^{l+1})``,

``C^l_{(t mu), (s c)} = rho^t A^{l-1}_{(t mu), (s c)} + eta rho^{t-1-s} Theta(t-s) sum_alpha Hb^{l-1}_{mu alpha}(t,s) Delta_{alpha c}(s)``,
``D^l_{(t c), (s alpha)} = rho^t B^l_{(t c), (s alpha)} + eta rho^{t-1-s} Theta(t-s) sum_{c'} G^{l+1}_{c c'}(t,s) Delta_{alpha c'}(s)``,

where ``b = 1`` with biases (the bias drift is the ``Hb``-term's ``+ 1``; ``Hb^0 = K^x + 1`` is
the returned ``data.kx``), ``G^{L+1} = 1 1^T (x) I_C`` (the readout weights at ``t = 0``),
``Delta_{alpha c} = y_{alpha c} - f_{alpha c}``, and ``A^l = gamma0^-1 <d h^l / d r^l>``,
``B^{l-1} = gamma0^-1 <d g^l / d u^l>`` are the responses to the *undecayed* Gaussian parts
(the convention of :func:`effth.dmft.solve_monte_carlo`).  The sources that enter the
fields, ``R u`` and ``R r``, have covariances ``S_h = R Hb^{l-1} R`` and ``S_g = R G^{l+1} R``
(``rho^{t+s}`` factors), and relative to the responses to them, ``C M_g`` and ``M_g D``, the
response terms carry ``rho^{t+s} = e^{-lambda (t + s)}`` -- *not* the drift's ``rho^{t-1-s}``
that corrected here suggests ("same exponential weights"; against networks that choice, and
dropping the factors, is rejected).  For ``L = 1`` there are no responses and Bordelon & Pehlevan (2022), eq. (99) is
recovered.  Then, with ``M_g = (1 - gamma0^2 D C)^{-1}`` as before,

``G^l = M_g [S_g + gamma0^2 D S_h D^T] M_g^T``,
``H^l = S_h + gamma0^2 [C Y + (C Y)^T]``, ``Y = M_g D S_h + G^l C^T / 2``,
``A^l = C M_g R``, ``B^{l-1} = M_g D R``,
``f_{mu c}(t) = gamma0^-1 <h^L_mu(t) g^L_c(t)> = [(M_g D^L S_h^L)^T + C^L G^L]_{(t mu), (t c)}``.

With ``C`` outputs ``h`` stays scalar and ``g^l``, ``G^l`` carry output indices: vectors ``g``
have length ``T C``, ``G^l`` is ``T C x T C``.  Biases change only the forward kernel
(``H -> H + 1`` in the source covariance and the drift: the bias is a constant input ``1``
to every layer, and it does not back-propagate).  At a fixed point of the bias-free dynamics the
representer identity ``lambda (L + 1) f = K Delta`` holds (``L + 1``-homogeneous network,
Bordelon & Pehlevan (2022), eq. (98)).  The equations are marched in time exactly as without the extensions.


Langevin dynamics and momentum
------------------------------
Both enter through the trainer's per-parameter filter (:class:`~effth.dmft.grid.ParameterFilter`):
``theta(t) = a(t) theta(0) + sum_{s<t} k(t-1-s) [eta G(s) + sigma xi(s)]``.  Averaging over the
initial weights *and* the Langevin noise (Bordelon & Pehlevan (2022), App. K, eqs. (104)-(112)) the
random part of every weight matrix is a Gaussian process in time with covariance ``kappa(t, s) =
a(t) a(s) + sigma^2 sum_r k(t-1-r) k(s-1-r)`` per entry; hence, with ``A``, ``B`` the responses to
the total sources, ``S_h = kappa * Hb^{l-1}``, ``S_g = kappa * G^{l+1}``, the response terms
``kappa * A``, ``kappa * B``, and the drift weights ``eta k(t-1-s)`` in place of
``eta rho^{t-1-s}``.  Weight decay alone is ``kappa = rho^{t+s}``, ``k(j) = rho^j`` (the equations
above, unchanged); momentum (App. L) changes ``k`` (``1 - mu^{j+1}`` without decay, eq. (123)).
"""

from __future__ import annotations

from effth._signature import public

import time
from dataclasses import dataclass

import numpy as np

from effth._threads import limits_blas_threads
from effth._validate import check_memory

from effth.errors import ConvergenceError, DomainError
from effth._validate import weight_variance_values, width_ratio_values
from effth.dmft.grid import (TimeGrid, causal_mask, langevin_settings, parameter_filter,
                             prepare_targets, real_scalar)
from effth.dmft.solvers.lazy import check_langevin_step, check_stability_along, check_stability, hidden_layer_count, lazy_kernels, static_ntk_dynamics, heavy_ball_ntk_dynamics
from effth.dmft.result import Diagnostics, DMFTResult

__all__ = ["solve_deep_linear"]


@dataclass(frozen=True)
class _Model:
    """Constants of the closed equations: step, ``gamma0^2``, decay, bias, targets, closure."""

    eta: float
    g2: float
    rho: float              # 1 - eta lambda
    lam: float              # lambda (NTK closure only)
    b: float                # 1.0 with biases (H -> H + 1 in the forward kernel), else 0.0
    Y: np.ndarray           # (P, C) targets
    closure: str
    gi: bool                # gradient independence: A = B = 0
    temperature: float = 0.0  # Langevin temperature 1/beta (App. K)
    momentum: float = 0.0     # heavy-ball coefficient mu (App. L)
    ratios: tuple | None = None  # width ratios a_l = N_l / N (App. D.8); None: equal widths
    variances: tuple | None = None  # sigma_l^2 of W^0 .. W^{L-1}, w^L (App. D.8); None: all 1

    def g2_at(self, ell: int) -> float:
        """``gamma_l^2 = gamma0^2 / a_l``: the squared feature strength of hidden layer ``ell``
        (``1 .. L``; Bordelon & Pehlevan (2022), App. D.8, eq. (58))."""
        return self.g2 if self.ratios is None else self.g2 / self.ratios[ell - 1]

    @property
    def C(self) -> int:
        return self.Y.shape[1]

    @property
    def plain(self) -> bool:
        """No decay and no bias (the outputs' count does not matter)."""
        return self.rho == 1.0 and self.b == 0.0 and self.temperature == 0.0 \
            and self.momentum == 0.0 and self.variances is None

    @property
    def unit(self) -> bool:
        """The noise kernel is ``kappa = 1`` (no decay, no Langevin noise)."""
        return self.rho == 1.0 and self.temperature == 0.0 and self.variances is None

    def layer_kappas(self, filt, L: int) -> list:
        """The noise kernels ``kappa_k(t, s) = sigma_k^2 a(t) a(s) + (kappa - a a^T)(t, s)`` of the
        weight layers ``k = 0 .. L`` (``W^k`` feeds ``h^{k+1}``, ``k = L`` is the readout): the
        covariance of each weight's random part (its initial value, variance ``sigma_k^2``, plus
        the Langevin noise, whose variance does not depend on ``sigma_k``; Bordelon & Pehlevan
        (2022), App. D.8, App. K).  All ``filt.kappa`` without ``variances``."""
        if self.variances is None:
            return [filt.kappa] * (L + 1)
        aa = np.outer(filt.init, filt.init)
        rest = filt.kappa - aa
        return [v * aa + rest for v in self.variances]

    def filter(self, T: int):
        """The optimizer's :class:`~effth.dmft.grid.ParameterFilter` on ``T`` grid points."""
        return parameter_filter(self.eta, T, self.lam, self.temperature, self.momentum)

    def powers(self, T: int) -> np.ndarray:
        """``a(t)`` for ``t < T`` (``rho^t`` without momentum)."""
        return self.filter(T).init

    def drift_weights(self, T: int) -> np.ndarray:
        """``(T, T)`` weights ``eta k(t-1-s) Theta(t - s)`` of the drift terms (``k(j) = rho^j``
        without momentum)."""
        mem = self.filter(T).memory
        k = np.subtract.outer(np.arange(T), np.arange(T)) - 1
        return np.where(k >= 0, self.eta * mem[np.maximum(k, 0)], 0.0)


@public
def solve_deep_linear(X=None, y=None, *, depth: int | None = None, hidden_layers: int | None = None,
                      gamma0: float, eta: float, steps: int,
                      X_test=None, kernel=None, closure: str | None = None, damping: float = 1.0,
                      tol: float = 1e-10, max_iter: int = 500,
                      gradient_independent: bool = False, window: int | None = None,
                      method: str = "march", weight_decay: float = 0.0,
                      bias: bool = False, temperature: float = 0.0,
                      momentum: float = 0.0, width_ratios=None,
                      weight_variances=None) -> DMFTResult:
    """Solve the deep linear DMFT of Bordelon & Pehlevan (2022) on the discrete-GD grid.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (see :func:`effth.dmft.grid.prepare_data`).  ``y`` of shape
        ``(P, C)`` gives ``C`` outputs (Bordelon & Pehlevan (2022), App. I; the conventions of
        :func:`effth.dmft.solve_two_layer`): ``g^l`` and ``G^l`` carry output indices,
        ``f_{mu c} = gamma0^-1 <h^L_mu g^L_c>``; then ``f`` is ``(T, n, C)``, ``delta``
        ``(T, P, C)``, ``g`` ``(L, T, n, T, n, C, C)`` (broadcast over samples), ``A``
        ``(L-1, T, n, T, 1, C)`` and ``B`` ``(L-1, T, 1, T, n, C)``, and ``data.y`` holds the
        first column.  ``(P, 1)`` equals the scalar solver.
    depth, hidden_layers : int
        Give exactly one: ``depth`` weight layers (output layer included, ``>= 2``) or
        ``hidden_layers = depth - 1`` (the paper's ``L >= 1``).
    gamma0 : float
        Feature-learning strength; results are even in ``gamma0`` (Bordelon & Pehlevan (2022), §5.2, App. P.1).  ``gamma0 = 0``
        (the static NTK) is solved exactly, except with weight decay (``DomainError``: the output
        factor ``1/gamma0`` makes that limit singular in the network).
    eta : float
        GD step; the network's parameter learning rate is ``eta gamma0^2 N``.
    steps : int
        Number of grid points ``T``.
    closure : {'exact', 'ntk'}, optional
        Default ``'exact'``, but ``'ntk'`` with ``gradient_independent`` (the exact-f identity
        needs the responses; the gradient-independence values of Bordelon & Pehlevan (2022) use
        NTK-Euler).  ``'exact'``: ``f(t_i) = gamma0^-1 <h^L g^L>`` (exact limit of discrete GD,
        Bordelon & Pehlevan (2022), eqs. (3), (21), App. M);
        ``'ntk'``: ``f_{i+1} = f_i + eta K(t_i, t_i) Delta_i`` (``- eta lambda (L + 1) f_i`` with
        weight decay: the ``(L+1)``-homogeneous network's gradient flow, Bordelon & Pehlevan (2022), App. J; not defined
        with both weight decay and biases, ``DomainError``).  Also with ``temperature > 0``: the
        Langevin drift of ``f``, eq. (102) of App. K, is ``K Delta - lambda theta . grad f +
        temperature Tr grad^2 f``, and for a linear network ``theta . grad f = (L + 1) f`` while
        its Ito term vanishes (``f`` is linear in every single weight: ``r = dg/dh = 0``), so the
        closure is the one above with the kernels of the noisy sources.  With ``momentum``
        ``mu`` (no weight decay or temperature): ``f_{i+1} = f_i + eta sum_{j<=i} (1 - mu)
        mu^{i-j} K(t_i, t_j) Delta_j``, the gradient of ``f`` at ``t_i`` against the heavy-ball
        step, with the two-time NTK ``K(t, s) = sum_l Hb^l(t, s) G^{l+1}(t, s)`` (App. L,
        eq. (122)).
    damping : float in (0, 1]
        ``beta`` of the update ``x <- (1 - beta) x + beta x_new``.
    tol : float
        Stop when the max-abs change of every kernel, response and ``Delta`` is below ``tol``.
    max_iter : int
        Raise :class:`ConvergenceError` (with iteration and residual) after this many sweeps.
    gradient_independent : bool
        Set ``A = B = 0`` (the gradient-independence ansatz, Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71)); works with every
        extension.
    window : int, optional
        ``method='sweep'`` only: grid points added per continuation stage (default 10).
    method : {'march', 'sweep'}
        ``'march'`` (default): exact forward recursion in time -- by causality the time-``t``
        rows of every order parameter follow from earlier rows in one upward pass over layers
        (``H``, ``A``) and one downward pass (``G``, ``B``, ``M_g``), with no iteration; the
        result is then checked by one sweep of the fixed-point map (``diagnostics.residuals``;
        ``ConvergenceError`` if that residual exceeds ``tol`` times the largest kernel entry).
        ``'sweep'``: damped Gauss-Seidel sweeps of the whole-window fixed point, continued over
        growing time windows (``damping``, ``max_iter``, ``window`` apply).  ``'sweep'`` solves
        the plain equations (with ``width_ratios`` and ``weight_variances``) only: with
        ``weight_decay``, ``bias``, a 2-D ``y``, ``temperature`` or ``momentum`` it raises
        :class:`DomainError` (its stable step-by-step closure is not derived for them; use
        ``'march'``).
    weight_decay : float
        ``lambda >= 0`` with ``0 <= eta lambda < 1``: every parameter (weights and biases) is
        multiplied by ``rho = 1 - eta lambda`` at each GD step (the discrete form of
        ``d theta/dt = -gamma^2 grad L - lambda theta``, Bordelon & Pehlevan (2022), App. J).  The Gaussian sources of
        ``h(t)``, ``g(t)`` then carry ``rho^t`` (covariances ``rho^{t+s} (H^{l-1} + b)``,
        ``rho^{t+s} G^{l+1}``), the drift terms the weight ``rho^{t-1-s}`` and the response terms
        ``rho^t`` times the responses to the undecayed sources (module docstring).
    bias : bool
        Trainable biases on every preactivation ``h^1 .. h^L`` (Bordelon & Pehlevan (2022), App. H), ``b(0) ~ N(0, 1)``,
        learning rate ``eta gamma0^2 N``: ``u^l ~ GP(0, H^{l-1} + 1 1^T)`` and the drift of
        ``h^l`` uses ``H^{l-1} + 1``.  The first layer's bias is folded into the returned
        ``data.kx`` (``K^x + 1``), and ``result.bias`` is set so that ``result.ntk`` adds
        ``G^{l+1}`` for the deeper layers.
    temperature : float
        Langevin temperature ``1/beta >= 0`` (Bordelon & Pehlevan (2022), App. K, eq. (100)):
        every parameter also receives independent Gaussian noise of variance
        ``temperature (1 - rho^2) / weight_decay`` per step (:class:`~effth.dmft.grid.ParameterFilter`;
        the trainer's ``temperature``).  In the paper's notation ``weight_decay = lambda / beta``,
        so the Gibbs equilibrium is the posterior with weight variance
        ``temperature / weight_decay`` (:func:`solve_deep_linear_equilibrium`).  The sources then
        have covariances ``kappa * (H^{l-1} + b)`` and ``kappa * G^{l+1}`` with the noise kernel
        ``kappa(t, s) = rho^{t+s} + C(t, s)`` (the discrete ``e^{-lambda(t+s)/beta} +
        C_{lambda,beta}(t, s)`` of eqs. (105)-(112)), and the response terms carry ``kappa``.
        Requires ``gamma0 != 0``; with ``closure='ntk'`` see ``closure``.  The step must satisfy
        ``eta (lambda_max(K_eq) + weight_decay) < 2`` with ``K_eq`` the lazy NTK at weight
        variance ``max(1, temperature / weight_decay)`` (the stability of the linearized
        Langevin step), else :class:`DomainError`.
    momentum : float
        Heavy-ball coefficient ``mu`` in ``[0, 1)`` (Bordelon & Pehlevan (2022), App. L, eq. (122)
        in discrete time, ``mu = exp(-eta / tau)``): ``v <- mu v + (1 - mu) eta (G - lambda theta)``,
        ``theta <- theta + v``; the drift terms carry the memory kernel ``k(t-1-s)``
        (``1 - mu^{t-s}`` without decay, eq. (123)) in place of ``rho^{t-1-s}``.  ``mu = 0`` is GD
        (``tau -> 0``).  The step must satisfy ``eta lambda_max(K_0) < 2 (1 + mu) / (1 - mu)``.
        With ``temperature > 0`` too (underdamped Langevin dynamics) the noise passes the same
        memory (``kappa`` of :class:`~effth.dmft.grid.ParameterFilter`).  With
        ``closure='ntk'`` only without weight decay and temperature (see ``closure``).
    width_ratios : sequence of float, optional
        ``a_1 .. a_L > 0``: hidden layer ``l`` has width ``N_l = a_l N`` (Bordelon & Pehlevan
        (2022), App. D.8), with ``gamma = gamma0 sqrt(N)`` and every kernel normalized by its own
        width, ``Phi^l = phi(h^l) . phi(h^l) / N_l``.  Layer ``l`` then feels the feature strength
        ``gamma_l = gamma0 / sqrt(a_l)`` (eq. (58)): its fields are
        ``h^l = u^l + gamma_l C^l g^l``, ``g^l = r^l + gamma_l D^l h^l`` with ``A^l``, ``B^{l-1}``
        scaled by the layer's own ``gamma_l`` -- the factors ``sqrt(a_{l-1} / a_l)``,
        ``sqrt(a_{l+1} / a_l)`` of the responses in eqs. (60), (63) cancel against the change of
        ``gamma`` between layers, so every equation above holds layer by layer with ``gamma0``
        replaced by ``gamma_l`` -- and ``f = gamma_L^{-1} <h^L g^L>``.  Only the ratio
        ``gamma0^2 / a_l`` matters (``(gamma0, a)`` and ``(c gamma0, c^2 a)`` are the same
        network).  ``None`` or all ones: equal widths (the equations unchanged, bit for bit).
        The trainer's counterpart: :func:`effth.simulation.simulate_training` with one width
        per hidden layer.
    weight_variances : sequence of float, optional
        ``sigma_0^2 .. sigma_L^2 > 0``, one per weight layer (``W^0`` on the inputs, the hidden
        ``W^1 .. W^{L-1}``, the readout ``w^L``): ``W^l_ij(0) ~ N(0, sigma_l^2)`` (Bordelon &
        Pehlevan (2022), App. D.8).  Averaging over ``W^{l-1}(0)`` gives the source
        ``u^l ~ GP(0, sigma_{l-1}^2 H^{l-1})`` and the response term ``sigma_{l-1}^2 A^{l-1}`` in
        ``C^l``; over ``W^l(0)``, ``r^l ~ GP(0, sigma_l^2 G^{l+1})`` and ``sigma_l^2 B^l`` in
        ``D^l``.  The drifts (the weight updates) carry no ``sigma``, nor does the NTK
        ``K = sum_l G^{l+1} H^l`` (eq. (59)).  With decay or Langevin noise ``sigma_l^2``
        multiplies the initial part of the noise kernel only, ``kappa_l = sigma_l^2 a(t) a(s) +
        (noise part)``.  At ``gamma0 = 0``: ``H^l = sigma_{l-1}^2 H^{l-1}``,
        ``G^l = sigma_l^2 G^{l+1}`` with ``G^{L+1} = sigma_L^2``.  ``None`` or all ones: the
        unit-variance equations, bit for bit; both methods (``'sweep'``: its stepwise exact
        closure carries ``sigma_{L-1}^2`` on the source and response terms).  Biases keep
        ``b(0) ~ N(0, 1)``: their source part is ``kappa * 1`` (the unit-variance noise kernel)
        next to ``kappa_{l-1} * H^{l-1}``, while drifts and NTK use ``H^{l-1} + 1``.  The
        trainer's counterpart: ``simulate_training(..., weight_variances=...)``.

    Returns
    -------
    DMFTResult
        ``A``, ``B`` in the scaled convention, as responses to the undecayed Gaussian parts
        (with ``temperature > 0``: to the total Gaussian sources, initial plus noise)
        (``A^l = gamma0^-1 <d h^l / d r^l>``, ``B^{l-1} = gamma0^-1 <d g^l / d u^l>``; row sums
        over the sample-independent index, ``nA = nB = 1``).

    Raises
    ------
    DomainError
        Bad data, bad hyperparameters, ``eta lambda_max(K_NTK) >= 2``, or an unsupported
        combination (see ``method``, ``closure``, ``gamma0``).
    ConvergenceError
        Divergent or non-converging iteration.
    """
    n_hidden = hidden_layer_count(depth, hidden_layers)
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
    data, Y, multi = prepare_targets(X, y, X_test=X_test, kernel=kernel, bias=bool(bias))
    gamma0, eta = real_scalar(gamma0, "gamma0"), real_scalar(eta, "eta")
    grid = TimeGrid(eta, steps)
    L, T, n, P, C = n_hidden, grid.steps, data.n_all, data.n_train, Y.shape[1]
    TnC = float(T) * n * max(C, 1)
    check_memory(8.0 * 12 * L * TnC ** 2,
                 f"the two-time fields of {L} hidden layer(s) on {T} steps x {n} inputs x {C} "
                 f"output(s) (about {12 * L} ({int(TnC)} x {int(TnC)}) matrices)",
                 "lower steps (memory grows as steps**2) or the number of inputs")
    rho, temperature, momentum = langevin_settings(grid.eta, weight_decay, temperature, momentum)
    lam = float(weight_decay)
    if momentum > 0 and closure == "ntk" and (lam > 0 or temperature > 0):
        raise DomainError("closure='ntk' with momentum solves momentum alone: with weight decay "
                          "the decay term grad f(t) . theta(s) of an earlier step is not a DMFT "
                          "order parameter, and Langevin noise is not in the closure; use "
                          "closure='exact'")
    if gamma0 == 0 and temperature > 0:
        raise DomainError("gamma0 = 0 with temperature > 0 is singular (output factor 1/gamma0); "
                          "use a small gamma0 > 0, or solve_deep_linear_equilibrium for the "
                          "gamma0 -> 0 equilibrium")
    if gamma0 == 0 and lam > 0:
        raise DomainError("gamma0 = 0 with weight decay (trivial fixed point f = K = 0; output "
                          "factor 1/gamma0) is not solved here; use gamma0 > 0")
    if closure == "ntk" and lam > 0 and bias:
        raise DomainError("closure='ntk' with weight decay needs a homogeneous network "
                          "(lambda (L+1) f term); with bias=True use closure='exact'")
    if method == "sweep" and (lam > 0 or bias or multi or temperature > 0 or momentum > 0):
        raise DomainError("method='sweep' solves the plain equations only (no weight_decay, "
                          "bias, 2-D y, temperature or momentum); use method='march'")
    ratios = width_ratio_values(width_ratios, L)
    variances = weight_variance_values(weight_variances, L + 1)
    model = _Model(eta=grid.eta, g2=float(gamma0) ** 2, rho=rho, lam=lam, b=float(bool(bias)),
                   Y=Y, closure=closure, gi=bool(gradient_independent), temperature=temperature,
                   momentum=momentum, ratios=ratios, variances=variances)
    ntk0 = lazy_kernels(data.kx, hidden_layers=L, bias=bool(bias),
                        weight_variances=variances)[3][:P, :P]
    edge = 2.0 * (1.0 + momentum) / (1.0 - momentum)
    check_stability(ntk0, grid.eta, edge=edge)
    if temperature > 0 or momentum > 0:
        _check_langevin_step(data.kx[:P, :P], L, bool(bias), grid.eta, lam, temperature,
                             momentum)
    t0 = time.perf_counter()
    diag = Diagnostics(tol=tol)
    # Causality: the solution on the first Tk grid points does not depend on later times, so the
    # fixed point is continued over growing windows (each stage starts from the converged prefix,
    # extended by holding the last time).  This avoids the transient growth of a Picard iteration
    # of the Volterra-type equations over the whole horizon (Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71): undamped iteration from a
    # cold start can diverge).
    if method == "march":
        state, f = _march(data, model, L, T)
        # a-posteriori check: one undamped sweep of the fixed-point map from the marched state
        check = Diagnostics(tol=tol)
        _iterate([list(x) if isinstance(x, list) else x.copy() for x in state], data, model, L, T,
                 1.0, np.inf, 1, check, stepwise=model.plain and C == 1)
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
        state = _initial_state(data, L, stages[0], grid.eta,
                               lazy_kernels(data.kx, hidden_layers=L,
                                            weight_variances=variances)[3])
        for k, Tk in enumerate(stages):
            if k:
                state = _extend(state, stages[k - 1], Tk, n)
            # intermediate stages only need to bring the new window close: the prefix keeps
            # converging in every later stage (the final stage enforces ``tol`` everywhere)
            stage_tol = tol if Tk == T else max(tol, 1e-4)
            state, f = _iterate(state, data, model, L, Tk, damping, stage_tol, max_iter, diag,
                                stepwise=True)
    diag.seconds = time.perf_counter() - t0
    H, G, A, B, delta = state
    pw = model.powers(T)
    # responses to the undecayed sources: A^l = C M_g R, B^{l-1} = M_g D R (without noise)
    undo = temperature == 0 and not np.all(pw == 1.0)
    A = [a * np.repeat(pw, C) for a in A] if undo else A
    B = [bb * np.repeat(pw, n) for bb in B] if undo else B
    if multi:
        g = np.stack([np.broadcast_to(gg.reshape(T, C, T, C).transpose(0, 2, 1, 3)[:, None, :, None],
                                      (T, n, T, n, C, C)) for gg in G])
        A = (np.stack([a.reshape(T, n, T, 1, C) for a in A]) if L > 1
             else np.zeros((0, T, n, T, 1, C)))
        B = (np.stack([bb.reshape(T, C, T, n).transpose(0, 2, 3, 1)[:, None] for bb in B])
             if L > 1 else np.zeros((0, T, 1, T, n, C)))
        delta = delta[:, :P]
    else:
        g = np.stack([np.broadcast_to(gg[:, None, :, None], (T, n, T, n)) for gg in G])
        A = np.stack([a.reshape(T, n, T, 1) for a in A]) if L > 1 else np.zeros((0, T, n, T, 1))
        B = np.stack([bb.reshape(T, 1, T, n) for bb in B]) if L > 1 else np.zeros((0, T, 1, T, n))
        f, delta = f[..., 0], delta[:, :P, 0]
    return check_stability_along(DMFTResult(
        grid=grid, data=data, hidden_layers=L, gamma0=float(gamma0), activation="linear",
        phi=np.stack([h.reshape(T, n, T, n) for h in H]), g=g, A=A, B=B, f=f, delta=delta,
        method="deep_linear", closure=closure, diagnostics=diag, bias=bool(bias)), edge=edge)


def _check_langevin_step(kx, L, bias, eta, lam, temperature, momentum=0.0):
    """:class:`DomainError` unless ``eta (lambda_max(K_eq) + lambda) < 2 (1 + mu) / (1 - mu)``
    (:func:`~effth.dmft.solvers.lazy.check_langevin_step`: the linearized Langevin or heavy-ball
    step is stable for every NTK eigenvalue ``k``), here bounded by the lazy deep linear NTK at
    weight variance ``v = max(1, temperature / lambda)`` (the initial and the equilibrium
    prior).  Without decay there is no equilibrium and no fixed bound (the check at ``t = 0``
    and along the run remain)."""
    v = max(1.0, temperature / lam) if lam > 0 else np.inf
    if not np.isfinite(v):
        return                                       # no equilibrium: kernels grow, no fixed bound
    b = 1.0 if bias else 0.0
    H = [kx - b]                                     # raw K^x (data.kx holds K^x + 1 with biases)
    for _ in range(L):
        H.append(v * (H[-1] + b))                    # H^l = v (H^{l-1} + b), biases of variance v
    # NTK = sum_l G^{l+1} (H^l + b [l < L]) with G^{l+1} = v^{L-l}
    K = sum(v ** (L - ell) * (H[ell] + (b if ell < L else 0.0)) for ell in range(L + 1))
    check_langevin_step(K, eta, lam, v, momentum)


class RuleFields:
    r"""The rule hook of the marcher: the pseudo-gradient fields of a learning rule.

    Bordelon & Pehlevan (ICLR 2023), eqs. (2)-(3), (40) and App. E: in a linear network every
    rule moves the weights along a pseudo-gradient ``g~``, so only the forward field's drift and
    the kernel ``G~^{l+1} = <g^{l+1} g~^{l+1}>`` in the true gradient's drift differ between
    rules.  The true gradient ``g^l`` stays sample independent and obeys
    ``g^l = r^l + gamma0 D^l h^l``, ``D^l = B^l + eta Theta(t-s) G~^{l+1}(t, s) Delta(s)``
    (the corrected eqs. (58), (62), (64)); the forward field is ``h^l = h^^l + gamma0 C^l g^l``
    with a rule-specific source part ``h^^l``:

    * ``'gd'`` (GD, and GLN with linear gates): ``g~ = g``, ``h^^l = u^l`` and ``C^l`` carries
      the drift (the plain equations of the module docstring; ``solve_deep_linear``);
    * ``'static'`` (ρ-FA and DFA): ``g~^l = v^l`` is one static ``N(0, 1)`` coordinate per
      neuron with ``Cov(r^l(t), v^l) = rho G~^{l+1}(t)`` (``rho = 0`` for DFA), ``C = 0`` and
      ``h^^l = u^l + c^l v^l``,
      ``c^l(t) = rho c^{l-1}(t) + eta gamma0 sum_{s<t} H^{l-1}(t, s) Delta(s)``;
      then ``G~^l(t) = rho G~^{l+1}(t) + gamma0 (D^l c^l)(t)``;
    * ``'hebb'`` (error-modulated Hebb): ``g~^l_mu = Delta_mu h^l_mu``, ``C = 0`` and
      ``h^^l = Lambda^l u^l``, ``Lambda^l = (1 - eta gamma0 H^{l-1} Delta^2)^{-1}`` (strictly
      causal); ``G~^l(t; s, nu) = gamma0 (D^l H^l)(t; s, nu) Delta_nu(s)``.

    With ``C = 0`` (every rule but GD) ``M_g = 1``, ``H^l = <h^^l h^^l>``,
    ``G^l = G^{l+1} + gamma0^2 D H^l D^T + gamma0 (X D^T + D X^T)`` with
    ``X = <r^l h^^l> = rho G~^{l+1} c^{lT}`` (``'static'`` only), ``B^{l-1} = D^l Lambda^l``,
    and the exact closure ``f(t) = gamma0^{-1} <g^L(t) h^L(t)> = (D^L H^L)(t, t) + rho c^L(t) /
    gamma0``.  The hook holds its per-layer state (``c``, ``Lambda``, ``D H``, ``G~``) for the
    caller; ``G~^l`` is kept as a ``(T, T n)`` array ``[t, (s, nu)]`` (the ``g`` side is sample
    independent).

    Weight decay and momentum (App. C, eqs. (50)-(53)) enter through the optimizer's
    :class:`~effth.dmft.grid.ParameterFilter` as for GD: the sources and the response terms
    carry ``a(t)`` (``kappa = a(t) a(s)``, applied by the marcher), the drift weights
    ``k(t-1-s)`` (in ``dw``), and the hook multiplies the feedback coordinate's forward term
    ``rho c^{l-1}(t)`` and its correlation ``rho G~^{l+1}(t)`` with ``r^l(t)`` by ``a(t)`` (the
    initial weights inside ``W^l(t)``; the frozen feedback itself does not decay).  With ``C``
    outputs (App. C.1) ``g`` rows carry an output index (see :meth:`allocate`).
    """

    def __init__(self, kind: str = "gd", rho: float = 1.0, gamma0: float = 1.0):
        if kind not in ("gd", "static", "hebb"):
            raise DomainError(f"unknown rule hook {kind!r}")
        self.kind, self.rho, self.g0 = kind, float(rho), float(gamma0)

    def allocate(self, L: int, T: int, n: int, delta: np.ndarray, init=None):
        """Per-layer state for ``L`` layers on ``T`` grid points and ``n`` samples; ``delta`` is
        the marcher's ``(T, n, C)`` error array (filled in as the march proceeds; ``(T, n)``:
        one output); ``init`` the optimizer's ``a(t)`` (:class:`~effth.dmft.grid.ParameterFilter`,
        default ``1``).

        With ``C`` outputs (App. C.1) the feedback coordinate is one per output, ``v^l_c``
        (independent ``N(0, 1)``), ``c^l`` is ``(T n, C)``, ``G~^{l+1}(t)`` a ``C x C`` matrix,
        and Hebb's pseudo-gradient is ``g~^l_{mu c} = Delta_{mu c} h^l_mu`` (the update carries
        ``|Delta_mu|^2``)."""
        Tn = T * n
        self._delta = delta if delta.ndim == 3 else delta[..., None]
        self.C = C = self._delta.shape[2]
        self.a = np.ones(T) if init is None else np.asarray(init, dtype=float)
        self.cv = [np.zeros((Tn, C)) for _ in range(L)] if self.kind == "static" else None
        self.lam = [np.zeros((Tn, Tn)) for _ in range(L)] if self.kind == "hebb" else None
        self.gh = [np.zeros((T * C, Tn)) for _ in range(L)] if self.kind == "hebb" else None
        self.d = [np.zeros((T, C, C)) for _ in range(L)] if self.kind == "static" else None

    def source_row(self, ell, t, n, Hp, S, dw, Hl):
        """Row ``t`` (against ``s <= t``) of ``<h^^l h^^l>`` written into ``Hl``; ``dw`` is
        ``(t, n, C)``: ``Delta(s)`` times the drift weights."""
        rt, m, tn = slice(t * n, (t + 1) * n), (t + 1) * n, t * n
        C = self.C
        if self.kind == "static":
            cv = self.cv[ell - 1]
            c = (self.rho * self.a[t] * self.cv[ell - 2][rt]) if ell >= 2 else np.zeros((n, C))
            if t:
                c = c + self.g0 * (Hp[rt, :tn] @ dw.reshape(tn, C))
            cv[rt] = c
            row = S[rt, :m] + c @ cv[:m].T
        else:
            lam = self.lam[ell - 1]
            if t:
                w = sum(dw[..., k].ravel() * self._delta[:t, :, k].ravel() for k in range(C))
                lam[rt, :m] = self.g0 * (Hp[rt, :tn] * w[None, :]) @ lam[:tn, :m]
            lam[rt, rt] += np.eye(n)
            row = (lam[rt, :m] @ S[:m, :m]) @ lam[:m, :m].T
        Hl[rt, :m] = row
        Hl[:m, rt] = row.T

    def drift_rows(self, ell, t, n, L, dw):
        """Rows ``(t, c)`` of ``D^l``'s drift, ``sum_{c'} G~^{l+1}_{c c'}(t; s, nu) dw_{s nu c'}``
        for ``s < t`` (``G~^{L+1} = 1``), shape ``(C, t n)``."""
        C, tn = self.C, t * n
        if ell == L:
            return dw.transpose(2, 0, 1).reshape(C, tn)
        if self.kind == "static":
            return self.d[ell][t] @ dw.reshape(tn, C).T
        gh = self.gh[ell][t * C:(t + 1) * C, :tn]
        return sum((gh * self._delta[:t, :, k].ravel()) * dw[..., k].ravel() for k in range(C))

    def response(self, ell, t, n, MD):
        """Rows ``(t, c)`` of ``B^l = D^{l+1} Lambda^{l+1}``."""
        m, C = (t + 1) * n, self.C
        if self.kind == "hebb":
            return MD[ell][t * C:(t + 1) * C, :m] @ self.lam[ell][:m, :m]
        return MD[ell][t * C:(t + 1) * C, :m]

    def cross_row(self, ell, t, n, L, drow, Dl):
        """``(X D^T + D X^T)(t, s <= t)`` (rows ``c``, columns ``(s, c'')``) and, for the next
        layer down, ``G~^l`` row ``t``."""
        m, C = (t + 1) * n, self.C
        if self.kind == "static":
            # xr(s) = a(s) rho G~^{l+1}(s) = <r^l(s) v^l> a(s) (C x C), G~^{L+1} = I
            if ell == L:
                xr = (self.rho * self.a[: t + 1])[:, None, None] * np.eye(C)[None]
            else:
                xr = (self.rho * self.a[: t + 1])[:, None, None] * self.d[ell][: t + 1]
            cv = self.cv[ell - 1]
            q = (Dl[: (t + 1) * C, :m] @ cv[:m]).reshape(t + 1, C, C)   # (D c)(s), s <= t
            self.d[ell - 1][t] = xr[t] + self.g0 * q[t]
            # [c, (s, c'')] = xr(t) q(s)^T + q(t) xr(s)^T
            one = np.einsum("ab,scb->asc", xr[t], q)
            two = np.einsum("ab,scb->asc", q[t], xr)
            return self.g0 * (one + two).reshape(C, (t + 1) * C)
        return None

    def closure_row(self, ell, t, n, drows, Hl):
        """``gamma0^{-1} <g^L_c(t) h^L_mu(t)>`` as ``(n, C)``; for Hebb also stores
        ``gamma0 (D H)`` rows ``(t, c)``."""
        rt, m, C = slice(t * n, (t + 1) * n), (t + 1) * n, self.C
        dh = drows[:, :m] @ Hl[:m, :m]
        if self.kind == "hebb":
            self.gh[ell - 1][t * C:(t + 1) * C, :m] = self.g0 * dh
        f = dh[:, t * n: m].T.copy()
        if self.kind == "static" and ell == len(self.cv):
            f = f + self.rho * self.a[t] * self.cv[ell - 1][rt] / self.g0
        return f

    def finish(self, MD, H):
        """Hebb: the full two-time ``gamma0 <g^l(t) h^l(s)> = gamma0 (D^l H^l)(t, s)``."""
        if self.kind == "hebb":
            self.gh = [self.g0 * (dl @ hl) for dl, hl in zip(MD, H)]

    def ntk_drive(self, t, n, P, kx, H, delta_t, s=None):
        """``K(t, s) Delta(s)`` with ``K_{mu nu}(t, s) = sum_l G~^{l+1}(t; s, nu) H^l_{mu nu}(t, s)``
        (``C x C`` blocks with ``C`` outputs), the gradient of ``f(t)`` against the update made
        at ``s`` (``s = t`` when not given); ``delta_t`` is ``Delta(s)``, ``(P, C)``, the
        result ``(n, C)``."""
        L = len(H)
        s = t if s is None else s
        rt, cs = slice(t * n, (t + 1) * n), slice(s * n, s * n + P)
        C = self.C
        if C > 1:
            drive = np.zeros((n, C))
            w2 = np.sum(delta_t ** 2, axis=1)                       # Hebb: |Delta_nu(s)|^2
            for ell in range(L + 1):
                Hd = kx[:, :P] if ell == 0 else H[ell - 1][rt, cs]
                if ell == L:
                    drive = drive + Hd @ delta_t
                elif self.kind == "static":
                    drive = drive + Hd @ (delta_t @ self.d[ell][t].T)
                else:
                    gh = self.gh[ell][t * C:(t + 1) * C, cs]
                    drive = drive + Hd @ (gh.T * w2[:, None])
            return drive
        delta_t = delta_t[:, 0]
        drive = np.zeros(n)
        for ell in range(L + 1):
            Hd = kx[:, :P] if ell == 0 else H[ell - 1][rt, cs]
            if ell == L:
                gt = np.ones(P)
            elif self.kind == "static":
                gt = np.full(P, self.d[ell][t, 0, 0])
            else:
                gt = self.gh[ell][t, cs] * delta_t
            drive = drive + Hd @ (gt * delta_t)
        return drive[:, None]


@limits_blas_threads
def _march(data, model, L, T, rule=None):
    """Exact forward recursion in time of the closed equations (module docstring).

    Row ``t`` of ``C^ell`` needs ``A^{ell-1}``, ``H^{ell-1}`` at row ``t`` and ``Delta`` before ``t``;
    row ``t`` of ``A^ell = C^ell M_g^ell`` and ``H^ell = S_h + gamma0^2 [C Y + (C Y)^T]`` need
    ``M_g``, ``G^ell``, ``M_g D`` only at earlier rows (``C`` is strictly causal), so an upward pass
    over layers gives them.  Row ``t`` of ``D^ell`` needs ``B^ell = M_g^{ell+1} D^{ell+1}`` and
    ``G^{ell+1}`` at row ``t``; ``M_g = 1 + gamma0^2 D (C M_g)``, ``M_g D`` and
    ``G^ell = M_g [S_g + gamma0^2 D S_h D^T] M_g^T`` at row ``t`` then follow in a downward pass.
    ``f(t)`` (exact closure) uses row ``t`` only and ``Delta(t)`` enters later rows.
    ``Y = M_g D S_h + G^ell C^T / 2`` is filled column block ``t`` (rows ``< t``, upward) and
    row ``t`` (columns ``<= t``, downward).  "Row ``t``" is the block of ``n`` (``h`` side) or ``C``
    (``g`` side) rows of time ``t``.  Internally ``A``, ``B`` are the responses to the decayed
    sources, ``C M_g`` and ``M_g D``; they enter ``C``, ``D`` with the weight ``rho^{t+s}``.

    ``rule``: a :class:`RuleFields` hook (``None`` or ``'gd'``: the GD equations above).  For
    the other rules ``C = 0`` and ``M_g = 1``; the hook gives the forward source rows, the kernel
    ``G~^{l+1}`` of ``D``'s drift, the cross terms of ``G`` and the closure (with weight decay,
    momentum and several outputs; no bias, Langevin noise or unequal widths), and keeps its
    state (``c``, ``Lambda``, ``G~``) for the caller.
    """
    n, P, C = data.n_all, data.n_train, model.C
    eta, g2, b = model.eta, model.g2, model.b
    Tn, TC = T * n, T * C
    filt = model.filter(T)
    mem = filt.memory
    kaps = model.layer_kappas(filt, L)                  # kappa_k(t, s) of weight layer k
    knl = [np.repeat(k, n, axis=1) for k in kaps]
    kcl = [np.repeat(k, C, axis=1) for k in kaps]
    decayed = not model.unit
    H0 = np.tile(data.kx, (T, T))                       # Hb^0 (the first bias is in data.kx)
    H = [np.zeros((Tn, Tn)) for _ in range(L)]
    # biases with weight variances: the bias keeps unit variance, its source kappa (not kappa_k)
    kbl = np.repeat(filt.kappa, n, axis=1) if b and model.variances is not None else None
    # source covariances S_h^ell = R Hb^{ell-1} R; without decay and bias simply H^{ell-1}
    if model.plain:
        Sh = [H0] + H[: L - 1]
    elif kbl is not None:            # kappa_0 * K^x + kappa * 1
        Sh = [(H0 - b) * np.kron(kaps[0], np.ones((n, n))) + b * np.kron(filt.kappa,
                                                                          np.ones((n, n)))] \
            + [np.zeros((Tn, Tn)) for _ in range(L - 1)]
    else:
        Sh = [H0 * np.kron(kaps[0], np.ones((n, n)))] + [np.zeros((Tn, Tn)) for _ in range(L - 1)]
    G = [np.zeros((TC, TC)) for _ in range(L)]
    Gtop = np.kron(np.ones((T, T)), np.eye(C))           # G^{L+1} = 1 1^T (x) I_C
    Cm = [np.zeros((Tn, TC)) for _ in range(L)]
    Dm = [np.zeros((TC, Tn)) for _ in range(L)]
    Af = [np.zeros((Tn, TC)) for _ in range(L)]       # C M_g
    MD = [np.zeros((TC, Tn)) for _ in range(L)]       # M_g D
    Mg = [np.zeros((TC, TC)) for _ in range(L)]
    Y = [np.zeros((TC, Tn)) for _ in range(L)]
    Z = [np.zeros((TC, TC)) for _ in range(L)]        # S_g + gamma0^2 D S_h D^T
    delta = np.zeros((T, n, C))
    f = np.zeros((T, n, C))
    eye = np.eye(C)
    kappa_decay = 1.0 - eta * model.lam * (L + 1)     # NTK closure: f <- (1 - eta lambda kappa) f
    drive = None                                      # NTK closure: K(t-1, t-1) Delta(t-1)
    if rule is not None and rule.kind == "gd":
        rule = None                                   # the plain equations are GD's
    if rule is not None:
        if (model.b != 0.0 or model.temperature != 0.0 or model.gi or model.ratios is not None
                or model.variances is not None):
            raise DomainError("the learning-rule hook marches the equations without bias, "
                              "Langevin noise, unequal widths, weight variances or gradient "
                              "independence")
        rule.allocate(L, T, n, delta, filt.init)
    ymax = max(1.0, float(np.max(np.abs(model.Y))))
    f_rule = None
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(T):
            rt, gt = slice(t * n, (t + 1) * n), slice(t * C, (t + 1) * C)
            m, mc = (t + 1) * n, (t + 1) * C
            tn, tc = t * n, t * C
            # Delta(s) eta k(t-1-s), s < t: the drift weights of row t, shape (t, n, C)
            dw = delta[:t] * (eta * mem[:t][::-1])[:, None, None]
            # ---------------- upward: C, A, Y column block t, H row t
            for ell in range(1, L + 1):
                Hp = H0 if ell == 1 else H[ell - 2]
                S = Sh[ell - 1]
                if rule is not None:                  # C = 0: H^l = <h^ h^> (RuleFields)
                    rule.source_row(ell, t, n, Hp, S, dw, H[ell - 1])
                    if ell < L and not model.plain:          # source of the next layer
                        Srow = H[ell - 1][rt, :m] * knl[ell][t, :m]
                        Sh[ell][rt, :m] = Srow
                        Sh[ell][:m, rt] = Srow.T
                    continue
                c = Cm[ell - 1]
                if t:
                    # drift: sum_alpha Hb_{mu alpha}(t, s) dw_{s alpha c}
                    hrow = Hp[rt, :tn] + b if ell >= 2 else Hp[rt, :tn]
                    c[rt, :tc] = np.matmul(hrow.reshape(n, t, n).transpose(1, 0, 2),
                                           dw).transpose(1, 0, 2).reshape(n, tc)
                    if ell >= 2 and not model.gi:
                        resp = Af[ell - 2][rt, :tc]
                        c[rt, :tc] += resp * kcl[ell - 1][t, :tc] if decayed else resp
                    Af[ell - 1][rt, :tc] = c[rt, :tc] @ Mg[ell - 1][:tc, :tc]
                    Yl = Y[ell - 1]
                    Yl[:tc, rt] = MD[ell - 1][:tc, :tn] @ S[:tn, rt] \
                        + 0.5 * G[ell - 1][:tc, :tc] @ c[rt, :tc].T
                    cy_row = c[rt, :tc] @ Yl[:tc, :m]                 # (C Y)[t, s <= t]
                    cy_col = c[:m, :tc] @ Yl[:tc, rt]                 # (C Y)[s <= t, t]
                    Hrow = S[rt, :m] + model.g2_at(ell) * (cy_row + cy_col.T)
                else:
                    Hrow = S[rt, :m].copy()
                Hl = H[ell - 1]
                Hl[rt, :m] = Hrow
                Hl[:m, rt] = Hrow.T
                if ell < L and not model.plain:              # source of the next layer
                    Srow = ((Hrow + b) * knl[ell][t, :m] if kbl is None
                            else Hrow * knl[ell][t, :m] + b * kbl[t, :m])
                    Sh[ell][rt, :m] = Srow
                    Sh[ell][:m, rt] = Srow.T
            # ---------------- downward: D, M_g, M_g D, G, Y row t
            for ell in range(L, 0, -1):
                S = Sh[ell - 1]
                Gn = Gtop if ell == L else G[ell]
                d = Dm[ell - 1]
                if rule is not None:                  # M_g = 1, drift along G~^{l+1}
                    if t:
                        d[gt, :tn] = rule.drift_rows(ell, t, n, L, dw)
                    if ell <= L - 1:
                        resp = rule.response(ell, t, n, MD)
                        d[gt, :m] += resp * knl[ell][t, :m] if decayed else resp
                    Mg[ell - 1][gt, gt] = eye
                    MD[ell - 1][gt, :m] = d[gt, :m]
                    Hl = H[ell - 1]
                    sg = Gn[gt, :mc] * kcl[ell][t, :mc] if decayed else Gn[gt, :mc]
                    zrow = sg + g2 * (d[gt, :m] @ Hl[:m, :m]) @ d[:mc, :m].T
                    x = rule.cross_row(ell, t, n, L, d[gt, :m], d)
                    if x is not None:
                        zrow = zrow + x
                    Gl = G[ell - 1]
                    Gl[gt, :mc] = zrow
                    Gl[:mc, gt] = zrow.T
                    f_l = rule.closure_row(ell, t, n, d[gt, :m], Hl)
                    f_rule = f_l if ell == L else f_rule
                    continue
                if t:
                    if ell == L:                               # G^{L+1}_{cc'} = delta_{cc'}
                        d[gt, :tn] = dw.transpose(2, 0, 1).reshape(C, tn)
                    else:
                        d[gt, :tn] = np.matmul(Gn[gt, :tc].reshape(C, t, C).transpose(1, 0, 2),
                                               dw.transpose(0, 2, 1)).transpose(1, 0, 2).reshape(C, tn)
                if ell <= L - 1 and not model.gi:
                    resp = MD[ell][gt, :m]
                    d[gt, :m] += resp * knl[ell][t, :m] if decayed else resp
                mg = Mg[ell - 1]
                g2 = model.g2_at(ell)
                mg[gt, :mc] = g2 * d[gt, :m] @ Af[ell - 1][:m, :mc]
                mg[gt, gt] += eye
                MD[ell - 1][gt, :m] = mg[gt, :mc] @ d[:mc, :m]
                # Z = S_g + gamma0^2 D S_h D^T (symmetric), row and column t;
                # G row t = (M_g Z M_g^T)[t, <= t]
                Zl = Z[ell - 1]
                sg = Gn[gt, :mc] * kcl[ell][t, :mc] if decayed else Gn[gt, :mc]
                zrow = sg + g2 * (d[gt, :m] @ S[:m, :m]) @ d[:mc, :m].T
                Zl[gt, :mc] = zrow
                Zl[:mc, gt] = zrow.T
                Grow = (mg[gt, :mc] @ Zl[:mc, :mc]) @ mg[:mc, :mc].T
                Gl = G[ell - 1]
                Gl[gt, :mc] = Grow
                Gl[:mc, gt] = Grow.T
                Y[ell - 1][gt, :m] = MD[ell - 1][gt, :m] @ S[:m, :m] \
                    + 0.5 * Gl[gt, :tc] @ Cm[ell - 1][:m, :tc].T
            # ---------------- predictions and error signal at time t
            if model.closure == "exact" and rule is not None:
                f[t] = f_rule
            elif model.closure == "exact":
                f[t] = (MD[L - 1][gt, :m] @ Sh[L - 1][:m, rt]).T \
                    + Cm[L - 1][rt, :tc] @ G[L - 1][:tc, gt]
            elif t:
                f[t] = kappa_decay * f[t - 1] + eta * drive
            delta[t, :P] = model.Y - f[t, :P]
            if model.closure == "ntk" and model.momentum > 0:
                # heavy ball: f(t+1) - f(t) = grad f(t) . (theta(t+1) - theta(t))
                #   = eta sum_{s<=t} (1 - mu) mu^(t-s) K(t, s) Delta(s)   (App. L, eq. (122))
                mu = model.momentum
                drive = sum((1.0 - mu) * mu ** (t - s) * _ntk_pair(rule, data, H, G, b, t, s, n,
                                                                     C, P, L, delta[s, :P])
                            for s in range(t + 1))
            elif model.closure == "ntk":
                drive = _ntk_pair(rule, data, H, G, b, t, t, n, C, P, L, delta[t, :P])
            if not (np.all(np.isfinite(f[t])) and np.max(np.abs(G[0][gt, gt])) < 1e12
                    and (rule is None or np.max(np.abs(delta[t])) < 1e6 * ymax)):
                raise ConvergenceError(
                    f"deep linear DMFT diverged at time step {t} of {T} (kernels not finite or "
                    "above 1e12); lower gamma0 or eta")
    if rule is not None:
        rule.finish(MD, H)
    return (H, G, Af[: L - 1], MD[1:], delta), f


def _ntk_pair(rule, data, H, G, b, t, s, n, C, P, L, delta_s):
    """``K(t, s) Delta(s)``, the NTK-Euler closure's drive: the gradient of ``f(t)`` against the
    update at ``s`` (``s <= t``), ``(n, C)``.  Plain equations:
    ``sum_l [Hb^l(t, s) Delta(s)] G^{l+1}(t, s)`` with ``G^{L+1} = I``; a rule hook supplies
    ``G~^{l+1}(t; s)`` instead."""
    if rule is not None:
        return rule.ntk_drive(t, n, P, data.kx, H, delta_s, s=s)
    rt, gt, gs, cs = (slice(t * n, (t + 1) * n), slice(t * C, (t + 1) * C),
                      slice(s * C, (s + 1) * C), slice(s * n, s * n + P))
    drive = (data.kx[:, :P] @ delta_s) @ G[0][gt, gs]
    for ell in range(1, L + 1):
        hd = H[ell - 1][rt, cs] @ delta_s
        drive = drive + ((hd + b * delta_s.sum(axis=0)) @ G[ell][gt, gs] if ell < L else hd)
    return drive


def _initial_state(data, L, T, eta, ntk0):
    """Lazy kernels tiled in time, ``A = B = 0``, static-NTK error signal (plain equations)."""
    n, P = data.n_all, data.n_train
    H0 = np.tile(data.kx, (T, T))
    f0 = static_ntk_dynamics(ntk0, data.y, eta, T)
    return ([H0.copy() for _ in range(L)], [np.ones((T, T)) for _ in range(L)],
            [np.zeros((T * n, T)) for _ in range(L - 1)],
            [np.zeros((T, T * n)) for _ in range(L - 1)],
            data.pad(data.y - f0[:, :P])[:, :, None])


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


@limits_blas_threads
def _iterate(state, data, model, L, T, damping, tol, max_iter, diag, stepwise):
    """Fixed-point sweeps of the closed equations on ``T`` grid points (see module docstring).

    ``stepwise``: the exact closure solved forward in time with the kernels held fixed
    (:func:`_exact_closure`, plain equations with one output; needed for the sweeps); otherwise
    ``f`` is the closed form evaluated with the current ``Delta`` (enough for checking a fixed
    point, a Picard iteration of it is unstable).
    """
    H, G, A, B, delta = state
    n, P, C = data.n_all, data.n_train, model.C
    g2, b = model.g2, model.b
    W = model.drift_weights(T)[:, None, :, None]
    filt = model.filter(T)
    kaps = model.layer_kappas(filt, L)                     # kappa_k(t, s) of weight layer k
    decayed = not model.unit
    Rnc = [np.kron(k, np.ones((n, C))) for k in kaps]      # kappa_k(t, s) on (h, g) index pairs
    Rnn = [np.kron(k, np.ones((n, n))) for k in kaps]
    # biases with weight variances: the bias keeps unit variance, its source kappa (not kappa_k)
    Sbias = (b * np.kron(filt.kappa, np.ones((n, n)))
             if b and model.variances is not None else None)
    Rcc = [np.kron(k, np.ones((C, C))) for k in kaps]
    H0 = np.tile(data.kx, (T, T))
    Gtop = np.kron(np.ones((T, T)), np.eye(C))
    diagonal = np.arange(T)
    beta = damping
    for it in range(1, max_iter + 1):
        res = 0.0
        # Gauss-Seidel over layers, alternating direction: information travels through all
        # layers in one sweep (H upwards, G downwards).
        order = range(1, L + 1) if it % 2 else range(L, 0, -1)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            for ell in order:
                g2 = model.g2_at(ell)
                Hb = H0 if ell == 1 else (H[ell - 2] + b if b else H[ell - 2])
                Gnext = Gtop if ell == L else G[ell]
                Cm = (np.einsum("tmsa,sac->tmsc", Hb.reshape(T, n, T, n), delta) * W
                      ).reshape(T * n, T * C)
                Dm = (np.einsum("tcsd,sad->tcsa", Gnext.reshape(T, C, T, C), delta) * W
                      ).reshape(T * C, T * n)
                if not model.gi:
                    if ell >= 2:
                        Cm = Cm + (Rnc[ell - 1] * A[ell - 2] if decayed else A[ell - 2])
                    if ell <= L - 1:
                        Dm = Dm + (Rnc[ell].T * B[ell - 1] if decayed else B[ell - 1])
                if Sbias is not None:
                    Sh = (Hb - b) * Rnn[ell - 1] + Sbias
                else:
                    Sh = Hb * Rnn[ell - 1] if decayed else Hb
                Sg = Gnext * Rcc[ell] if decayed else Gnext
                DC = Dm @ Cm
                try:
                    if not np.all(np.isfinite(DC)):
                        raise np.linalg.LinAlgError("non-finite kernels")
                    Mg = np.linalg.inv(np.eye(T * C) - g2 * DC)
                except np.linalg.LinAlgError as exc:
                    raise ConvergenceError(
                        f"deep linear DMFT iteration diverged at iteration {diag.iterations + 1} "
                        f"(grid points {T}, {exc}; last residual "
                        f"{diag.residuals[-1] if diag.residuals else float('nan'):.3g}); "
                        "lower gamma0 or eta, or damp") from None
                E = Dm @ Sh
                MgE = Mg @ E
                Gl = Mg @ (Sg + g2 * (E @ Dm.T)) @ Mg.T
                CY = Cm @ (MgE + 0.5 * Gl @ Cm.T)
                Hl = Sh + g2 * (CY + CY.T)
                if ell == L and model.closure == "exact":
                    if stepwise and model.variances is None:
                        f_new = _exact_closure(Hb, Gl, Mg, None if (L == 1 or model.gi)
                                               else A[ell - 2], data, model.eta)[..., None]
                    elif stepwise:      # sigma_{L-1}^2 on the source and response terms
                        v = model.variances[L - 1]
                        f_new = _exact_closure(Hb, Gl, Mg, None if (L == 1 or model.gi)
                                               else v * A[ell - 2], data, model.eta,
                                               source=v)[..., None]
                    else:
                        F = (MgE.T + Cm @ Gl).reshape(T, n, T, C)
                        f_new = F[diagonal, :, diagonal, :]
                res = max(res, float(np.max(np.abs(Hl - H[ell - 1]))),
                          float(np.max(np.abs(Gl - G[ell - 1]))))
                H[ell - 1] = (1 - beta) * H[ell - 1] + beta * Hl
                G[ell - 1] = (1 - beta) * G[ell - 1] + beta * Gl
                if ell <= L - 1:
                    Al = Cm @ Mg
                    res = max(res, float(np.max(np.abs(Al - A[ell - 1]))))
                    A[ell - 1] = (1 - beta) * A[ell - 1] + beta * Al
                if ell >= 2:
                    Bl = Mg @ Dm
                    res = max(res, float(np.max(np.abs(Bl - B[ell - 2]))))
                    B[ell - 2] = (1 - beta) * B[ell - 2] + beta * Bl
            if model.closure == "ntk":
                f_new = _ntk_euler(data, H, G, model)
            delta_new = np.zeros_like(delta)
            delta_new[:, :P] = model.Y - f_new[:, :P]
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


def _exact_closure(Hm, GL, Mg, Am, data, eta, source=1.0):
    """Exact discrete-GD predictions ``f(t_i) = gamma0^-1 <h^L(t_i) g^L(t_i)>`` solved forward in time.

    With the kernels ``H^{L-1}``, ``G^L``, ``A^{L-1}`` and ``M_g`` of the last layer held fixed,
    ``f_mu(t_i) = sum_s A^{L-1}_{(i mu), s} G^L(s, i)
    + eta sum_{s<i} sum_alpha [H^{L-1}_{mu alpha}(i, s) G^L(s, i)
    + sum_{s < t' <= i} M_g(i, t') H^{L-1}_{alpha mu}(s, i)] Delta_alpha(s)``
    (the closed form of Bordelon & Pehlevan (2022), eqs. (3), (21), App. M with ``D^L = eta Theta Delta``) depends on ``Delta`` at earlier
    times only, so ``Delta_i = y - f(t_i)`` is solved step by step.  Substituting ``Delta`` from
    the previous sweep instead (Picard) amplifies errors like a Volterra iteration and diverges
    from a cold start (Bordelon & Pehlevan (2022), §4.1, App. F, eqs. (11), (68)-(71)).
    ``source``: ``sigma_{L-1}^2`` multiplying the ``M_g`` term, whose ``H^{L-1}`` is the source
    covariance ``sigma_{L-1}^2 H^{L-1}`` (App. D.8; ``Am`` then holds ``sigma_{L-1}^2 A``).
    """
    T = GL.shape[0]
    n, P = data.n_all, data.n_train
    H4 = Hm.reshape(T, n, T, n)
    # c[i, s] = sum_{s < t' <= i} Mg[i, t']   (zero for s >= i)
    cum = np.cumsum(Mg[:, ::-1], axis=1)[:, ::-1]          # cum[i, s] = sum_{t' >= s} Mg[i, t']
    c = np.zeros((T, T))
    c[:, :-1] = cum[:, 1:]
    c = np.tril(c, k=-1)
    W = eta * (H4 * GL.T[:, None, :, None]
               + (c[:, None, :, None] if source == 1.0 else source * c[:, None, :, None])
               * H4.transpose(2, 3, 0, 1))
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


def _ntk_euler(data, H, G, model):
    """NTK-Euler closure ``f_{i+1} = (1 - eta lambda (L+1)) f_i + eta K(t_i, t_i) Delta_i`` from
    the current kernels, ``K = G^1 Hb^0 + sum_{l=1}^{L-1} G^{l+1} (H^l + b) + H^L`` (per output
    pair ``c c'``)."""
    n, P, C, L = data.n_all, data.n_train, model.C, len(H)
    T = G[0].shape[0] // C
    if model.momentum > 0:          # two-time K(t_i, t_j) against the heavy-ball step
        Hf = [data.kx[None, :, None].repeat(T, 0).repeat(T, 2)] \
            + [h.reshape(T, n, T, n) + model.b for h in H[:-1]] + [H[-1].reshape(T, n, T, n)]
        Gf = [gg.reshape(T, C, T, C) for gg in G] + [np.eye(C)[None, :, None].repeat(T, 0)
                                                     .repeat(T, 2)]
        K2 = sum(h[:, :, None, :, :, None] * gd[:, None, :, :, None, :] for h, gd in zip(Hf, Gf))
        return heavy_ball_ntk_dynamics(K2, model.Y, model.eta, model.momentum)
    idx = np.arange(T)
    Hd = [data.kx[None].repeat(T, 0)] + [h.reshape(T, n, T, n)[idx, :, idx, :] + model.b
                                         for h in H[:-1]]
    Hd.append(H[-1].reshape(T, n, T, n)[idx, :, idx, :])
    Gd = [gg.reshape(T, C, T, C)[idx, :, idx, :] for gg in G]
    Gd.append(np.broadcast_to(np.eye(C), (T, C, C)))                # G^{L+1} = I_C
    shrink = 1.0 - model.eta * model.lam * (L + 1)
    f = np.zeros((T, n, C))
    for i in range(T - 1):
        delta = model.Y - f[i, :P]
        drive = sum((h[i][:, :P] @ delta) @ gd[i] for h, gd in zip(Hd, Gd))
        f[i + 1] = shrink * f[i] + model.eta * drive
    return f
