r"""DMFT of deep linear networks trained on random data at finite data and width ratios.

Bordelon & Pehlevan, "Deep Linear Network Training Dynamics from Random Initialization: Data,
Width, Depth, and Hyperparameter Transfer".  Isotropic Gaussian inputs ``x ~ N(0, I_D)``, a
linear teacher ``y = w_* . x / sqrt(D) + sigma eps``, and a deep linear network of width ``N``
trained on ``P`` examples, in the proportional limit with ``alpha = P / D`` and ``nu = N / D``
fixed (eqs. (6)-(7)).  The theory closes on ``T x T`` correlation and response matrices (the
paper's App. A, eq. (65)); because the network is linear every single-site variable is a linear
functional of Gaussian sources, so the equations are solved *exactly* by marching in time -- no
sampling, no fixed-point iteration.

The model (the "field form" whose exact limit the DMFT is)
---------------------------------------------------------
``f(x) = (N gamma0)^-1 (w^L)^T W^{L-1}/sqrt(N) ... W^1/sqrt(N) W^0 x``, all weights ``N(0, 1)``,
trained by gradient descent with parameter learning rate ``N eta gamma0^2`` on
``(2P)^-1 sum_mu Delta_mu^2``.  Losses are the un-halved mean squared errors
``L(t) = C_v(t, t) + sigma^2`` (test) and ``L_hat(t) = C_Delta(t, t)`` (train), eq. (10).

Errata of the printed equations (each is checked by the tests against simulated networks)
---------------------------------------------------------------------------------------------
* The printed model (1) carries ``1/sqrt(D)`` on the first layer and its stated learning rate
  refers to the un-halved loss; the fields (9), (26) and the DMFT (65) describe the network above
  (no ``1/sqrt(D)``, halved loss).  With the printed (1) the finite-width term
  ``1/(nu gamma0^2)`` would vanish.
* The printed sums ``sum_{t' < t}`` over the responses ``R_hr`` in the ``h``-equations must
  include ``t' = t``: ``v(t)`` contains the initial-function noise ``-r^0(t)`` at the same time,
  so ``R^0_hr(t, t) != 0``.  For one hidden layer at ``eta = 0.2``, ``gamma0 = nu = 1`` and
  population data this gives ``C_v(1, 1) = 427/625``; the printed form gives ``0.80``.
* In the ``v``-equation of (65) the coefficient of ``C_g^1`` is ``eta`` (not ``eta gamma0``) and
  ``h^0`` appears once; the data-site memory term carries ``1/alpha`` (missing in (62)).
* The bias term of (13) sums over ``s <= t`` (not ``s < t``): ``bias(t) = S (sum_{s<=t} H(t,s))^2``
  with the transfer function ``H = (I + K R_Delta)^-1``.
* The centering correction (69) prints ``+ eta sum C_g^1 h^0``; the sign is ``-``.
* Residual networks (App. C): the cross-layer responses carry ``beta delta_{k, l+1}`` on
  ``d h^{l+1} / d u^k`` and ``beta delta_{k l}`` on ``d g^l / d r^k`` (the printed list puts the
  delta on ``d g / d u`` and ``d g / d r``); the printed infinite-depth equation (85) is garbled and
  is not used: the infinite-depth limit is approached by the finite-``L`` residual theory with
  ``beta = beta0 / sqrt(L)`` at increasing ``L``.

Extensions
----------
Layer-dependent widths ``N_l = a_l N`` (App. F, ``width_ratios=``): the backward fields gain
``a_{l+1} / a_l`` and the input site the readout-width factors (see :func:`solve_random_data`).
Several output channels (App. G, ``outputs=``): the same equations on the time-major grid of
``(t, c)`` points.  Initial weight variances ``W^l(0) ~ N(0, sigma_l^2)`` (B&P 2022 app. D.8,
``weight_variances=``): ``sigma_l^2`` on the sources and response terms of ``W^l`` (see
:func:`solve_random_data`).  Structured data at finite width and batch: the approximate theory of App. E
(:func:`solve_power_law` with ``width=``, ``batch=``).

Scaled responses
----------------
All responses are proportional to ``gamma0``; the solver stores ``R / gamma0`` so that only
``gamma0^2`` and the initial-function variance ``1 / (nu gamma0^2)`` enter.  This makes the NTK
parameterization (``gamma0^2 = gamma0_ref^2 nu_ref / nu``) exact at ``nu = inf`` (the lazy limit).
"""

from __future__ import annotations

from effth._signature import public

import math
import time
from dataclasses import dataclass, field

import numpy as np

from effth._display import depth_text, html_table, short
from effth._progress import progress_bar
from effth._results import HiddenLayers
from effth._threads import blas_threads
from effth._validate import (check_memory, integer, positive, real_array, real_number, real_scalar,
                             teacher_signal, weight_variance_values, width_ratio_values)
from effth.arch import resolve_depth
from effth.arch._common import resolve_branch_scale
from effth.errors import ConvergenceError, DomainError
from effth.dmft.grid import TimeGrid

__all__ = ["RandomDataResult", "LearningRateSweep", "PowerLawResult", "DepthExtrapolation",
           "solve_random_data",
           "learning_rate_sweep", "max_stable_learning_rate", "resnet_kernel", "gamma0_at",
           "solve_power_law", "power_law_exponent", "extrapolate_depth"]

_BLOWUP = 1e3          # L(t) > 1e3 L(0) (or non-finite) counts as divergence


# --------------------------------------------------------------------------- parameters
@public
def gamma0_at(gamma0, nu, parameterization: str = "mup", reference_nu: float = 1.0) -> float:
    r"""``gamma0`` of the network at width ratio ``nu`` (eq. (6) and §3 of the paper).

    ``'mup'`` (mean field): ``gamma0`` independent of ``nu``.  ``'ntk'``:
    ``gamma0(nu) = gamma0 sqrt(reference_nu / nu)`` so that ``nu gamma0^2`` is fixed and the two
    parameterizations coincide at ``nu = reference_nu``.  ``nu > 0`` (``inf`` allowed: the
    infinite-width limit); NaN is refused.
    """
    g, n = real_number(gamma0, "gamma0"), positive(nu, "nu", allow_inf=True)
    if parameterization == "mup":
        return g
    if parameterization == "ntk":
        return 0.0 if math.isinf(n) else g * math.sqrt(positive(reference_nu, "reference_nu") / n)
    raise DomainError(f"parameterization={parameterization!r} must be 'mup' or 'ntk'")


@dataclass(frozen=True)
class _Params:
    L: int
    T: int
    eta: float
    g2: float            # gamma0^2
    iv: float            # 1 / (nu gamma0^2): initial-function variance (0 at nu = inf in muP)
    alpha: float         # inf: population
    alpha_b: float | None
    sigma: float
    S: float
    centering: bool
    beta: float | None   # residual branch scale (None: plain network)
    variant: str | None = None   # private: 'printed_sums' / 'printed_v' reproduce the printed errata
    widths: tuple | None = None  # a_l = N_l / N per hidden layer (App. F); None: equal widths
    C: int = 1                   # output channels (App. G)
    signal_matrix: np.ndarray | None = None   # (C, C) S_cc' = w*_c . w*_c' / D when C > 1
    variances: tuple | None = None   # sigma_l^2 of W^0 .. W^{L-1}, w^L (B&P 2022 app. D.8); None: 1


def _params(depth, hidden_layers, alpha, nu, gamma0, eta, steps, sigma, signal, centering,
            batch_ratio, parameterization, reference_nu, branch_scale, branch_scale0,
            width_ratios=None, outputs=1, weight_variances=None):
    L = resolve_depth(depth, hidden_layers) - 1
    C = integer(outputs, "outputs", minimum=1)
    signal, signal_matrix = teacher_signal(signal, C)
    alpha = positive(alpha, "alpha", allow_inf=True)
    nu = positive(nu, "nu", allow_inf=True)
    eta = positive(eta, "eta")
    T = integer(steps, "steps", minimum=1)
    n = T * C
    check_memory(8.0 * (4 * (L + 2) ** 2 + 16) * float(n) ** 2,
                 f"the two-time order parameters of {L} hidden layer(s) on {T} steps"
                 + (f" and {C} output channels" if C > 1 else "")
                 + f" (about {4 * (L + 2) ** 2 + 16} ({n} x {n}) arrays)",
                 "lower steps (memory grows as (steps outputs)**2, work as (steps outputs)**3)")
    sigma = real_scalar(sigma, "sigma")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise DomainError(f"sigma={sigma!r} (label-noise scale) must be finite and >= 0")
    S = signal
    # the order parameters hold sigma^2, signal^2 and 1/nu: beyond float64 the run "diverges"
    # for a reason that is not the learning rate
    for v, name in ((sigma, "sigma"), (S, "signal")):
        if v > 1e150:
            raise DomainError(f"{name}={v:g} squared overflows float64 (the loss holds {name}^2); "
                              f"rescale: the dynamics are homogeneous in the target scale")
    if nu < 1e-150:
        raise DomainError(f"nu={nu:g} is too small: 1/nu (the finite-width variance) overflows "
                          "float64; nu = N/D is a width ratio, give nu >= 1e-150")
    if not isinstance(centering, (bool, np.bool_)):
        raise DomainError(f"centering={centering!r} must be a bool")
    g = real_scalar(gamma0, "gamma0")
    if not (math.isfinite(g) and g >= 0):
        raise DomainError(f"gamma0={gamma0!r} must be finite and >= 0")
    ref = positive(reference_nu, "reference_nu")
    if parameterization == "mup":
        if g == 0 and not math.isinf(nu):
            raise DomainError("gamma0 = 0 at finite nu in muP: the initial-function variance "
                              "1/(nu gamma0^2) diverges; use a small positive gamma0 (with "
                              "centering=True for the lazy limit) or parameterization='ntk'")
        g2 = g * g
        iv = 0.0 if math.isinf(nu) else 1.0 / (nu * g2)
    elif parameterization == "ntk":
        if g == 0:
            raise DomainError("parameterization='ntk' needs gamma0 > 0 (its value at "
                              "nu = reference_nu)")
        g2 = 0.0 if math.isinf(nu) else g * g * ref / nu
        iv = 1.0 / (g * g * ref)
    else:
        raise DomainError(f"parameterization={parameterization!r} must be 'mup' or 'ntk'")
    ab = None
    if batch_ratio is not None:
        ab = positive(batch_ratio, "batch_ratio")
        if not math.isinf(alpha):
            raise DomainError("online SGD (batch_ratio=) draws fresh data each step: leave "
                              "alpha at inf")
    beta = resolve_branch_scale(branch_scale, branch_scale0, L)
    widths = width_ratio_values(width_ratios, L)
    if widths is not None and beta is not None:
        raise DomainError("width_ratios= with a residual network: the skip connections "
                          "I + beta W / sqrt(N) need equal hidden widths (App. C); drop "
                          "width_ratios or the branch scale")
    variances = weight_variance_values(weight_variances, L + 1)
    return _Params(L=L, T=T, eta=eta, g2=g2, iv=iv, alpha=alpha, alpha_b=ab, sigma=sigma, S=S,
                   centering=bool(centering), beta=beta, widths=widths, C=C,
                   signal_matrix=signal_matrix, variances=variances)


# --------------------------------------------------------------------------- result
@public
@dataclass(repr=False)
class RandomDataResult(HiddenLayers):
    r"""Order parameters of the random-data DMFT on the time grid ``t = 0 .. T-1`` (GD steps).

    Names for :meth:`value`: ``'test_loss'`` (alias ``'loss'``) ``L(t) = C_v(t,t) + sigma^2``;
    ``'train_loss'`` ``C_Delta(t,t)`` (``None`` for online SGD); ``'bias'``,
    ``'width_variance'``, ``'data_variance'`` -- the corrected decomposition of (13),
    ``L = bias + width_variance + data_variance + sigma^2``; two-time ``(T, T)`` matrices
    ``'C_v'``, ``'C_delta'``, ``'K'`` (the kernel ``gamma0^-1 R^1_gu + eta C^1_g`` of the input
    site), ``'transfer'`` (``H = (I + K R_Delta)^-1``), ``'R_delta'``, ``'R_vu'``; per hidden layer
    ``'C_h'``, ``'C_g'`` (``layer = 1..L``; ``layer=0`` gives ``C_h^0``).

    With ``C = outputs > 1`` channels (App. G) the losses and the decomposition are summed over
    the channels (the un-halved loss ``sum_c <Delta_c^2>``), ``'channel_loss'`` ``(T, C)`` is the
    test loss of each channel, and the two-time matrices have shape ``(T, C, T, C)``
    (``C_v[t, c, s, c'] = <v_c(t) v_c'(s)>``).  ``width_ratios`` holds ``a_l = N_l / N``
    (``None``: equal widths, App. F); ``weight_variances`` the initial variances
    ``sigma_0^2 .. sigma_L^2`` (``None``: all 1).
    """

    hidden_layers: int
    grid: TimeGrid
    alpha: float
    nu: float
    gamma0_sq: float
    init_variance: float
    sigma: float
    signal: float
    centering: bool
    batch_ratio: float | None
    branch_scale: float | None
    arrays: dict = field(default_factory=dict)
    seconds: float = 0.0
    width_ratios: tuple | None = None
    outputs: int = 1
    weight_variances: tuple | None = None

    @property
    def steps(self) -> int:
        return self.grid.steps

    @property
    def test_loss(self) -> np.ndarray:
        return self.arrays["test_loss"]

    @property
    def train_loss(self) -> np.ndarray | None:
        return self.arrays["train_loss"]

    _PER_LAYER = ("C_h", "C_g")
    _NAMES = ("test_loss", "loss", "train_loss", "bias", "width_variance", "data_variance",
              "C_v", "C_delta", "K", "transfer", "R_delta", "R_vu", "C_h", "C_g", "channel_loss")
    _TWO_TIME = ("C_v", "C_delta", "K", "transfer", "R_delta", "R_vu", "C_h", "C_g")

    def _shape(self, out, name):
        if self.outputs == 1 or name not in self._TWO_TIME:
            return out
        T, C = self.steps, self.outputs
        return out.reshape(T, C, T, C)

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """The prediction ``name`` (see the class docstring)."""
        if name not in self._NAMES:
            raise DomainError(f"unknown quantity name={name!r}; choose from {list(self._NAMES)}")
        if name in self._PER_LAYER:
            lo = 0 if name == "C_h" else 1
            if layer is None:
                raise DomainError(f"{name!r} is per layer: give layer= in {lo}..{self.hidden_layers}")
            if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not (
                    lo <= int(layer) <= self.hidden_layers):
                raise DomainError(f"layer={layer!r} not held for {name!r}; layers are "
                                  f"{lo}..{self.hidden_layers}")
            return self._shape(self.arrays[name][int(layer) - lo], name)
        if layer is not None:
            raise DomainError(f"{name!r} has no layer axis; drop layer={layer!r}")
        name = "test_loss" if name == "loss" else name
        if name == "channel_loss":
            return self.arrays.get("channel_loss", self.arrays["test_loss"][:, None])
        out = self.arrays[name]
        if out is None:
            raise DomainError(f"{name!r} is not defined for online SGD (every batch is fresh)")
        return self._shape(out, name)

    def stderr(self, name: str, layer: int | None = None):
        """``None``: the theory is deterministic."""
        self.value(name, layer)
        return None

    def _desc(self):
        kind = ("SGD alpha_B=%g" % self.batch_ratio if self.batch_ratio is not None
                else "alpha=%g" % self.alpha)
        res = "" if self.branch_scale is None else f", beta={self.branch_scale:g}"
        if self.width_ratios is not None:
            res += f", width_ratios={short(list(self.width_ratios))}"
        if self.outputs > 1:
            res += f", outputs={self.outputs}"
        if self.weight_variances is not None:
            res += f", weight_variances={short(list(self.weight_variances))}"
        return (f"{depth_text(self.depth)}, {kind}, nu={self.nu:g}, "
                f"gamma0={math.sqrt(self.gamma0_sq):g}, eta={self.grid.eta:g}, steps={self.steps}{res}")

    def __repr__(self) -> str:
        return f"RandomDataResult({self._desc()}, final test loss={self.test_loss[-1]:.4g})"

    def _repr_html_(self) -> str:
        rows = [("depth (hidden_layers)", f"{self.depth} ({self.hidden_layers})"),
                ("alpha", self.alpha), ("nu", self.nu), ("batch ratio", self.batch_ratio),
                ("gamma0", f"{math.sqrt(self.gamma0_sq):g}"), ("eta", self.grid.eta),
                ("steps", self.steps), ("sigma", self.sigma), ("centering", self.centering),
                ("branch scale", self.branch_scale), ("width ratios", self.width_ratios),
                ("outputs", self.outputs), ("weight variances", self.weight_variances),
                ("test loss", short(np.round(self.test_loss, 4))),
                ("seconds", f"{self.seconds:.3g}")]
        return html_table("RandomDataResult", rows)


# --------------------------------------------------------------------------- solver core
class _Diverged(Exception):
    def __init__(self, step, loss):
        super().__init__(step, loss)
        self.step, self.loss = step, loss


def _sym(M, t, row):
    M[t, :t + 1] = row
    M[:t + 1, t] = row


def _blocks(t, C):
    """Rows of time step ``t`` on the time-major grid ``(t, c) -> t C + c``: the block itself,
    the earlier steps and everything up to and including ``t``."""
    return slice(t * C, (t + 1) * C), slice(0, t * C), slice(0, (t + 1) * C)


def _bsym(M, r, up, rows):
    """Write the block row ``rows`` of step ``r`` and its transpose (a symmetric matrix)."""
    M[r, up] = rows
    M[up, r] = rows.T


def _march(p: _Params, check: bool = True):
    """Causal time-stepping of the corrected equations (non-residual and residual networks).

    Every matrix lives on the time-major grid of ``T C`` points ``(t, c)`` (``C`` output
    channels, App. G: the order parameters carry channel pairs ``(c, c')``); at step ``t`` the
    block of ``C`` rows is computed at once.  At ``C = 1`` the blocks are single rows and every
    operation is the scalar-output one.  Layer-dependent widths (App. F) enter as the factors
    of :func:`_width_factors`."""
    L, T, eta, g2, C = p.L, p.T, p.eta, p.g2, p.C
    n = T * C
    pop = math.isinf(p.alpha) and p.alpha_b is None
    sgd = p.alpha_b is not None
    Z = lambda: np.zeros((n, n))                      # noqa: E731
    eye = np.eye(C)
    Smat = np.array([[p.S]]) if p.signal_matrix is None else p.signal_matrix
    rho, cK, iv_r, iv_h = _width_factors(p)
    var = p.variances
    if var is not None:           # W^0(0) ~ N(0, sigma_0^2): the noise r^0 and its response
        iv_r, iv_h = var[0] * iv_r, var[0] * iv_h
    Ch = [Z() for _ in range(L + 1)]                  # C_h^0 .. C_h^L
    Cg = [Z() for _ in range(L + 2)]                  # index 1..L; L+1 = output "gradient"
    Cg[L + 1] = np.ones((n, n)) if C == 1 else np.kron(np.ones((T, T)), eye)
    Vw, Vr, Vu = np.zeros((n, C)), Z(), Z()          # v = Vw w_* + Vr r^0 + Vu u^0
    Hw, H0r, H0u = np.zeros((n, C)), Z(), Z()        # h^0, likewise
    Du, De = Z(), np.zeros((n, C))                    # Delta = Du u_Delta + De sigma eps
    Cv, CD = Z(), Z()
    Kmat = Z()
    if p.beta is None:
        hid = _PlainHidden(L, T, C, rho, var)
    else:
        hid = _ResidualHidden(L, T, p.beta, C, var)
    Su = Z()
    L0 = None
    for t in range(T):
        r, pre, up = _blocks(t, C)
        hid.backward(t, Ch, Cg, eta, g2)
        # ------------------------------------------------------------ input sites
        R1 = hid.R1gu_scaled(t) if var is None else var[0] * hid.R1gu_scaled(t)
        K = R1 + (eta * math.sqrt(g2) if p.variant == "printed_v" else eta) * Cg[1][r, pre]
        if cK != 1.0:
            K = cK * K
        Kmat[r, pre] = K
        Vw[r] = eye - K @ Hw[pre]
        Vr[r, up] = -K @ H0r[pre, up]
        Vr[r, r] -= eye
        if p.centering:
            Vr[r, 0:C] += eye
        Vu[r, up] = -K @ H0u[pre, up]
        Sr = Cg[1][up, up] * iv_r
        if pop:
            su_part = 0.0
        else:
            # v(t) depends on u^0 at earlier times only (Vu[t, t] = 0), so row t of
            # Su = C_Delta / alpha (computed below) is not needed yet
            su_part = (Vu[r, up] @ Su[up, up]) @ Vu[up, up].T
        _bsym(Cv, r, up, (Vw[r] @ Smat) @ Vw[up].T + (Vr[r, up] @ Sr) @ Vr[up, up].T + su_part)
        # ------------------------------------------------------------ data sites
        if pop or sgd:
            Du[r, r] = eye
            De[r] = eye
            if sgd:
                noise = np.zeros((C, (t + 1) * C))
                noise[:, t * C:] = p.sigma ** 2 * eye
            else:
                noise = p.sigma ** 2 * (1.0 if C == 1 else np.tile(eye, (1, t + 1)))
            _bsym(CD, r, up, Cv[r, up] + noise)
        else:
            Du[r, up] = (Vu[r, pre] / p.alpha) @ Du[pre, up]
            Du[r, r] += eye
            De[r] = eye + (Vu[r, pre] / p.alpha) @ De[pre]
            _bsym(CD, r, up, (Du[r, up] @ Cv[up, up]) @ Du[up, up].T
                  + (p.sigma ** 2 * De[r]) @ De[up].T)
        if sgd:
            Su[r, r] = CD[r, r] / p.alpha_b
        elif not pop:
            _bsym(Su, r, up, CD[r, up] / p.alpha)
        # ------------------------------------------------------------ h^0
        Hw[r] = Du[r, up] @ Vw[up]
        H0r[r, up] = Du[r, up] @ Vr[up, up]
        H0u[r, up] = Du[r, up] @ Vu[up, up]
        if not pop:
            H0u[r, r] += eye
        _bsym(Ch[0], r, up, (Hw[r] @ Smat) @ Hw[up].T + (H0r[r, up] @ Sr) @ H0r[up, up].T
              + (H0u[r, up] @ Su[up, up]) @ H0u[up, up].T)
        hid.forward(t, Ch, Cg, H0r, eta, g2, iv_h, p.variant == "printed_sums")
        if check:
            test = float(np.trace(Cv[r, r])) + C * p.sigma ** 2
            if t == 0:
                L0 = test
            if not (np.isfinite(test) and np.all(np.isfinite(CD[r, r])) and test <= _BLOWUP * L0
                    and np.all(np.isfinite(Ch[L][r, up]))):
                raise _Diverged(t, test)
    dvar_m = None if pop else Vu @ Su @ Vu.T if C > 1 else None
    if C == 1:
        bias = p.S * Vw[:, 0] ** 2
        wvar = np.einsum("ts,su,tu->t", Vr, Cg[1] * iv_r, Vr)
        dvar = np.zeros(T) if pop else np.einsum("ts,su,tu->t", Vu, Su, Vu)
        test = np.diag(Cv) + p.sigma ** 2
        train = None if sgd else np.diag(CD).copy()
        per_channel = None
    else:
        def tr(M):                                    # sum over c of the (t, c), (t, c) entries
            return np.diag(M).reshape(T, C).sum(axis=1)
        bias = tr(Vw @ Smat @ Vw.T)
        wvar = tr(Vr @ (Cg[1] * iv_r) @ Vr.T)
        dvar = np.zeros(T) if pop else tr(dvar_m)
        per_channel = np.diag(Cv).reshape(T, C) + p.sigma ** 2
        test = per_channel.sum(axis=1)
        train = None if sgd else tr(CD)
    transfer = np.linalg.inv(np.eye(n) + Kmat @ Du)
    arrays = dict(test_loss=test, train_loss=train, bias=bias,
                  width_variance=wvar, data_variance=dvar, C_v=Cv, C_delta=CD, K=Kmat,
                  transfer=transfer, R_delta=Du, R_vu=Vu, C_h=np.array(Ch),
                  C_g=np.array(Cg[1:L + 1]))
    if C > 1:
        arrays["channel_loss"] = per_channel
    return arrays


def _width_factors(p: _Params):
    r"""The factors of layer-dependent widths ``N_l = a_l N`` (App. F, eqs. (100)-(101)).

    With ``rho_l = a_{l+1} / a_l`` the backward field of layer ``l < L`` is
    ``g^l = r^l + rho_l sum_{s<t} [R^{l+1}_gu + eta gamma0 C^{l+1}_g] h^l`` with
    ``r^l ~ rho_l C^{l+1}_g`` (the gradient kernels are normalized by their own width, the
    weight ``W^l`` by its fan-in ``N_l``); the forward fields are unchanged.  The readout is
    ``1 / (N_L gamma0)``, so the input site sees the kernel ``(a_1 / a_L) K``, the
    initial-function noise ``r^0 ~ (a_1 / a_L^2) C^1_g / (nu gamma0^2)`` and the first hidden
    layer the response ``R^0_hr / (a_L nu gamma0)``.  Returns ``(rho, cK, iv_r, iv_h)`` with
    ``rho[l]`` for ``l = 1 .. L-1``; equal widths give ones and the unchanged ``iv``."""
    if p.widths is None:
        return None, 1.0, p.iv, p.iv
    a = p.widths
    rho = [None] + [a[l] / a[l - 1] for l in range(1, p.L)]   # rho[l] = a_{l+1} / a_l
    aL = a[-1]
    return rho, a[0] / aL, p.iv * a[0] / aL ** 2, p.iv / aL


class _PlainHidden:
    """Hidden sites of the non-residual network: ``h = H_u u + H_r r``, ``g = G_u u + G_r r``
    (responses stored divided by ``gamma0``), on the time-major grid of ``T C`` points
    (``C`` output channels); ``rho[l]`` are the width factors of :func:`_width_factors` and
    ``var[l]`` the initial weight variances ``sigma_l^2`` (B&P 2022 app. D.8): averaging over
    ``W^l(0)`` gives the sources ``u^{l+1} ~ sigma_l^2 C^l_h``, ``r^l ~ sigma_l^2 C^{l+1}_g``
    (``r^L ~ sigma_L^2``) and the response terms ``sigma_l^2 R^l_hr`` (in ``h^{l+1}``),
    ``sigma_l^2 R^{l+1}_gu`` (in ``g^l``); the drifts ``eta C`` carry no ``sigma``."""

    def __init__(self, L, T, C=1, rho=None, var=None):
        n = T * C
        Z = lambda: np.zeros((n, n))              # noqa: E731
        self.L, self.C, self.rho, self.var = L, C, rho, var
        self.eye = np.eye(C)
        self.Hu = [None] + [Z() for _ in range(L)]
        self.Hr = [None] + [Z() for _ in range(L)]     # H_r / gamma0
        self.Gu = [None] + [Z() for _ in range(L + 1)]  # G_u / gamma0 ; Gu[L+1] = 0
        self.Gr = [None] + [Z() for _ in range(L)]

    def _sources(self, l, Ch, Cg, rho, up):
        """Covariances of ``u^l`` (from ``W^{l-1}(0)``) and ``r^l`` (from ``W^l(0)``)."""
        Su = Ch[l - 1][up, up]
        Sg = Cg[l + 1][up, up] if rho == 1.0 else rho * Cg[l + 1][up, up]
        if self.var is not None:
            Su, Sg = self.var[l - 1] * Su, self.var[l] * Sg
        return Su, Sg

    def backward(self, t, Ch, Cg, eta, g2):
        r, pre, up = _blocks(t, self.C)
        for l in range(self.L, 0, -1):
            R = self.Gu[l + 1][r, pre]
            if self.var is not None:
                R = self.var[l] * R
            B = R + eta * Cg[l + 1][r, pre]
            rho = 1.0 if (self.rho is None or l == self.L) else self.rho[l]
            if rho != 1.0:
                B = rho * B
            self.Gu[l][r, up] = B @ self.Hu[l][pre, up]
            self.Gr[l][r, up] = g2 * (B @ self.Hr[l][pre, up])
            self.Gr[l][r, r] += self.eye
            Gu, Gr = self.Gu[l], self.Gr[l]
            Su, Sg = self._sources(l, Ch, Cg, rho, up)
            _bsym(Cg[l], r, up, g2 * ((Gu[r, up] @ Su) @ Gu[up, up].T)
                  + (Gr[r, up] @ Sg) @ Gr[up, up].T)

    def R1gu_scaled(self, t):
        r, pre, _ = _blocks(t, self.C)
        return self.Gu[1][r, pre]

    def forward(self, t, Ch, Cg, H0r, eta, g2, iv, printed=False):
        r, pre, up = _blocks(t, self.C)
        for l in range(1, self.L + 1):
            if l == 1:
                A = iv * H0r[r, up]                     # sigma_0^2 is in iv
            elif self.var is None:
                A = self.Hr[l - 1][r, up].copy()        # s <= t
            else:
                A = self.var[l - 1] * self.Hr[l - 1][r, up]
            if printed:
                A[:, r] = 0.0                                                   # printed s < t
            A[:, pre] += eta * Ch[l - 1][r, pre]                                # s <  t
            self.Hu[l][r, up] = g2 * (A @ self.Gu[l][up, up])
            self.Hu[l][r, r] += self.eye
            self.Hr[l][r, up] = A @ self.Gr[l][up, up]
            Hu, Hr = self.Hu[l], self.Hr[l]
            rho = 1.0 if (self.rho is None or l == self.L) else self.rho[l]
            Su, Sg = self._sources(l, Ch, Cg, rho, up)
            _bsym(Ch[l], r, up, (Hu[r, up] @ Su) @ Hu[up, up].T
                  + g2 * ((Hr[r, up] @ Sg) @ Hr[up, up].T))


class _ResidualHidden:
    """Hidden sites of the residual network (App. C, corrected), expanded over the sources of
    every layer: ``h^l = sum_k Hu[l][k] u^k + Hr[l][k] r^k`` (and likewise ``g``).

    Sources ``u^1 ~ C_h^0``, ``u^k ~ C_h^{k-1}`` (``k = 2..L``), ``r^k ~ C_g^{k+1}``
    (``k = 1..L-1``), ``r^L ~ 1 1^T``.  Equations, with ``J`` the strict causal mask:
    ``h^1 = u^1 + gamma0 Abar^0 g^1``, ``h^{l+1} = h^l + beta u^{l+1} + beta gamma0 Abar^l g^{l+1}``,
    ``g^L = r^L + eta gamma0 J h^L``, ``g^l = g^{l+1} + beta r^l + beta gamma0 Bbar^{l+1} h^l``,
    with ``Abar^0 = iv R^0_hr + eta C^0_h J``, ``Abar^l = Rt^l_hr + eta beta C^l_h J``,
    ``Bbar^{l+1} = Rt^{l+1}_gu + eta beta C^{l+1}_g J`` (``Rt = R / gamma0``; the same-layer
    responses ``R^l_hr = d h^l / d r^l``, ``R^l_gu = d g^l / d u^l`` include the branch factor).
    Storage: coefficient arrays ``[layer][source] -> (T C, T C)``; ``u``-coefficients of ``g``
    and ``r``-coefficients of ``h`` carry one factor ``gamma0`` and are stored divided by it.
    With ``C`` output channels (App. G) the readout source ``r^L_c`` is independent per channel
    and ``g^L_c`` collects ``h^L_c`` of its own channel only.
    """

    def __init__(self, L, T, beta, C=1, var=None):
        self.L, self.T, self.beta, self.C, self.var = L, T, beta, C, var
        self.eye = np.eye(C)
        n = T * C
        self.Hu = np.zeros((L + 1, L + 1, n, n))   # [l][k]  d h^l / d u^k
        self.Hr = np.zeros((L + 1, L + 1, n, n))   # / gamma0
        self.Gu = np.zeros((L + 2, L + 1, n, n))   # / gamma0
        self.Gr = np.zeros((L + 2, L + 1, n, n))

    def _cov_sources(self, Ch, Cg, up):
        # views: rows written during this step's layer loop are seen by the later layers
        return ([Ch[k - 1][up, up] for k in range(1, self.L + 1)],
                [Cg[k + 1][up, up] for k in range(1, self.L + 1)])

    def _add_row(self, row, k, Xu, Xr, Su, Sr, r, up, g2, u_scaled):
        """Add to ``row`` the covariance row of a field with coefficients ``Xu`` on ``u^k`` and
        ``Xr`` on ``r^k``; ``sigma_{k-1}^2`` on ``u^k`` (from ``W^{k-1}(0)``), ``sigma_k^2`` on
        ``r^k`` (B&P 2022 app. D.8).  ``u_scaled``: the ``g2`` factor sits on the ``u`` part
        (``g``) or the ``r`` part (``h``)."""
        a = (Xu[r, up] @ Su[k - 1]) @ Xu[up, up].T
        c = (Xr[r, up] @ Sr[k - 1]) @ Xr[up, up].T
        if self.var is not None:
            a, c = self.var[k - 1] * a, self.var[k] * c
        row += g2 * a if u_scaled else a
        row += c if u_scaled else g2 * c

    def backward(self, t, Ch, Cg, eta, g2):
        L, b, C = self.L, self.beta, self.C
        r, pre, up = _blocks(t, C)
        Su, Sr = self._cov_sources(Ch, Cg, up)
        for l in range(L, 0, -1):
            if l == L:
                Bv = eta * np.ones(t) if C == 1 else eta * np.tile(self.eye, (1, t))
                scale = 1.0
            else:
                R = self.Gu[l + 1][l + 1][r, pre]
                if self.var is not None:
                    R = self.var[l] * R
                Bv = R + eta * b * Cg[l + 1][r, pre]
                scale = b
            for k in range(1, L + 1):
                gu = scale * (Bv @ self.Hu[l][k][pre, up])
                gr = scale * g2 * (Bv @ self.Hr[l][k][pre, up])
                if l < L:
                    gu = gu + self.Gu[l + 1][k][r, up]
                    gr = gr + self.Gr[l + 1][k][r, up]
                self.Gu[l][k][r, up] = gu
                self.Gr[l][k][r, up] = gr
            self.Gr[l][l][r, r] += (1.0 if l == L else b) * self.eye
            row = np.zeros((C, (t + 1) * C))
            for k in range(1, L + 1):
                self._add_row(row, k, self.Gu[l][k], self.Gr[l][k], Su, Sr, r, up, g2, True)
            _bsym(Cg[l], r, up, row)

    def R1gu_scaled(self, t):
        r, pre, _ = _blocks(t, self.C)
        return self.Gu[1][1][r, pre]

    def forward(self, t, Ch, Cg, H0r, eta, g2, iv, printed=False):
        L, b, C = self.L, self.beta, self.C
        r, pre, up = _blocks(t, C)
        Su, Sr = self._cov_sources(Ch, Cg, up)
        for l in range(1, L + 1):
            if l == 1:
                A = iv * H0r[r, up]
                scale = 1.0
                A[:, pre] += eta * Ch[0][r, pre]
            else:
                A = self.Hr[l - 1][l - 1][r, up].copy()
                if self.var is not None:
                    A *= self.var[l - 1]
                A[:, pre] += eta * b * Ch[l - 1][r, pre]
                scale = b
            if printed:
                A[:, r] = 0.0
            for k in range(1, L + 1):
                hu = scale * g2 * (A @ self.Gu[l][k][up, up])
                hr = scale * (A @ self.Gr[l][k][up, up])
                if l > 1:
                    hu = hu + self.Hu[l - 1][k][r, up]
                    hr = hr + self.Hr[l - 1][k][r, up]
                self.Hu[l][k][r, up] = hu
                self.Hr[l][k][r, up] = hr
            self.Hu[l][l][r, r] += (1.0 if l == 1 else b) * self.eye
            row = np.zeros((C, (t + 1) * C))
            for k in range(1, L + 1):
                self._add_row(row, k, self.Hu[l][k], self.Hr[l][k], Su, Sr, r, up, g2, False)
            _bsym(Ch[l], r, up, row)
            # the u^k sources for k > l are not yet defined at layer l: covariances use
            # C_h^{k-1} rows up to t, all computed (k-1 <= l - 1 < l) before they are needed.


@public
def solve_random_data(*, depth: int | None = None, hidden_layers: int | None = None,
                      alpha: float = np.inf, nu: float = np.inf, gamma0: float, eta: float,
                      steps: int, sigma: float = 0.0, signal: float | np.ndarray = 1.0,
                      centering: bool = False, batch_ratio: float | None = None,
                      parameterization: str = "mup", reference_nu: float = 1.0,
                      branch_scale: float | None = None,
                      branch_scale0: float | None = None, width_ratios=None, outputs: int = 1,
                      weight_variances=None, _variant: str | None = None) -> RandomDataResult:
    r"""Solve the finite-``(alpha, nu)`` DMFT of a deep linear network trained on random data.

    Bordelon & Pehlevan, "Deep Linear Network Training Dynamics from Random Initialization"
    (App. A, eq. (65), with the corrections listed in the module docstring).  The ``T x T``
    correlations and responses are marched exactly in time: at step ``t`` the backward pass
    ``g^L .. g^1``, then the input sites (``v``), the data sites (``Delta``, eq. (15)), ``h^0``, and
    the forward pass ``h^1 .. h^L``.  Cost ``O(L T^3)`` (``O(L^2 T^3)`` for residual networks).

    Parameters
    ----------
    depth, hidden_layers : int
        Give exactly one: weight layers (``>= 2``) or the paper's ``L = depth - 1``.
    alpha : float
        Data ratio ``P / D`` (``inf``: population gradient descent).
    nu : float
        Width ratio ``N / D`` (``inf``: infinite width).
    gamma0 : float
        Richness.  With ``parameterization='ntk'`` this is its value at ``nu = reference_nu``
        and the network uses ``gamma0 sqrt(reference_nu / nu)`` (see :func:`gamma0_at`).
    eta : float
        Effective learning rate (the network's raw rate is ``N eta gamma0^2`` on the halved MSE).
    steps : int
        Number of time-grid points ``T`` (``t = 0`` is initialization).
    sigma : float
        Label-noise scale; the test loss includes ``sigma^2``.
    signal : float or (C, C) array
        ``S = |w_*|^2 / D``; with ``outputs = C > 1`` also the matrix ``S_cc' = w*_c . w*_c' / D``.
    centering : bool
        Train ``f(x, t) - f(x, 0)`` (App. A.3, eq. (69) with its sign corrected): removes the
        initial-function variance ``1/(nu gamma0^2)``.
    batch_ratio : float, optional
        Online SGD with fresh batches of ``B = batch_ratio D`` samples per step (App. D,
        eqs. (86)-(88)); ``alpha`` must stay ``inf``.  No train loss is defined.
    parameterization : {'mup', 'ntk'}
    reference_nu : float
        Width ratio at which the NTK parameterization uses ``gamma0`` itself.
    branch_scale, branch_scale0 : float, optional
        Residual network (App. C): branches ``I + beta W / sqrt(N)``; ``branch_scale0`` gives
        ``beta = beta0 / sqrt(L)`` (depth-muP).  The residual network has ``L - 1`` blocks.
    width_ratios : sequence of float, optional
        ``a_1 .. a_L > 0``: hidden layer ``l`` has width ``N_l = a_l N``, i.e. width ratio
        ``nu_l = a_l nu`` (App. F, eqs. (100)-(101)).  The readout is ``1 / (N_L gamma0)`` as in
        (100) and the raw learning rate ``N_L eta gamma0^2``; each hidden weight ``W^l`` is
        divided by the square root of its fan-in ``N_l``.  The order parameters are normalized by
        their own layer's width, so the backward fields gain ``rho_l = a_{l+1} / a_l``:
        ``g^l = r^l + rho_l sum_{s<t} [R^{l+1}_gu + eta gamma0 C^{l+1}_g] h^l`` with
        ``r^l ~ rho_l C^{l+1}_g``; the input site sees ``(a_1 / a_L) K``, the initial-function
        noise ``r^0 ~ (a_1 / a_L^2) C^1_g / (nu gamma0^2)`` (so ``L(0) = S + 1/(nu_L gamma0^2)``)
        and the first hidden layer the response ``R^0_hr / (nu_L gamma0)``.  The lazy NTK stays
        ``L + 1``.  ``None`` or all ones: the equal-width equations, bit for bit.  Not with
        residual branches.
    outputs : int
        Number ``C`` of output channels (App. G, eqs. (102)-(108)): readouts ``w^L_c``, a teacher
        ``w*_c`` per channel, label noise independent per channel, loss
        ``(2P)^-1 sum_mu sum_c Delta_muc^2``.  The order parameters carry channel pairs: the
        theory is the one-output theory on the time-major grid of ``T C`` points ``(t, c)``, with
        every causal sum over ``s < t`` (``s <= t`` for ``R_hr``) running over all channels ``c'``
        and the readout source ``r^L_c`` independent per channel.  Then ``signal`` is a number
        (``S`` times the identity) or the ``(C, C)`` matrix ``S_cc' = w*_c . w*_c' / D``.
        Cost ``O(L (T C)^3)``.
    weight_variances : sequence of float, optional
        ``sigma_0^2 .. sigma_L^2 > 0``, one per weight layer (``W^0`` on the inputs, the hidden
        ``W^1 .. W^{L-1}``, the readout ``w^L``): ``W^l_ij(0) ~ N(0, sigma_l^2)`` (Bordelon &
        Pehlevan (2022), App. D.8, carried into the field form of eqs. (24)-(26)).  Writing
        ``W^l(t) = W^l(0) + (updates)``, the updates give the drifts ``eta C`` unchanged, and the
        Gaussian average over ``W^l(0)`` (the MSR step behind eq. (65)) gives every source
        covariance and every response term it produces a factor ``sigma_l^2``:
        ``u^{l+1} ~ GP(0, sigma_l^2 C^l_h)`` and ``h^{l+1} = u^{l+1} + gamma0 sum_{s<=t}
        [sigma_l^2 R^l_hr + eta C^l_h] g^{l+1}`` (the drift term only over ``s < t``);
        ``r^l ~ GP(0, sigma_l^2 C^{l+1}_g)`` and
        ``g^l = r^l + gamma0 sum_{s<t} [sigma_l^2 R^{l+1}_gu + eta C^{l+1}_g] h^l``, the readout
        ``r^L ~ sigma_L^2`` with the drift ``eta 1`` unchanged.  At the input site ``W^0(0)``
        gives the kernel ``K = sigma_0^2 gamma0^-1 R^1_gu + eta C^1_g``, the initial-function
        noise ``r^0 ~ sigma_0^2 C^1_g / (nu gamma0^2)`` and the first-layer response
        ``sigma_0^2 R^0_hr / (nu gamma0)``.  Hence ``C^1_g(0, 0) = sigma_1^2 .. sigma_L^2`` and
        ``L(0) = S + sigma_0^2 .. sigma_L^2 / (nu gamma0^2) + sigma^2``; in the lazy limit
        ``K = eta kappa`` with the NTK ``kappa = sum_l prod_{k != l} sigma_k^2`` and
        ``L(t) = S (1 - eta kappa)^(2t)`` (population, centered).  With ``width_ratios`` the
        width factors multiply on top.  Residual branches (App. C): the same factors on each
        ``W^l(0)`` (``u^{l+1}``, ``r^l`` and their responses), so
        ``C^1_g(0, 0) = sigma_L^2 prod_{l=1}^{L-1} (1 + beta^2 sigma_l^2)`` and the lazy NTK is
        ``(sigma_0^2 + sigma_L^2) P + beta^2 sigma_0^2 sigma_L^2 sum_l P / (1 + beta^2 sigma_l^2)``,
        ``P = prod_{l=1}^{L-1} (1 + beta^2 sigma_l^2)``.  ``None`` or all ones: the
        unit-variance equations, bit for bit.

    Returns
    -------
    RandomDataResult

    Warns
    -----
    AccuracyWarning
        Finite data near the edge of stability: ``q = eta kappa (1 + alpha^-1/2)^2 >= 1.5``, with
        ``kappa`` the lazy NTK eigenvalue (``L + 1``, or :func:`resnet_kernel`) and
        ``(1 + alpha^-1/2)^2`` the top of the Marchenko-Pastur spectrum of the data (``q = 2`` is
        the lazy stability edge).  The theory is the ``D -> infinity`` limit there too, but finite
        networks approach it slowly: at ``L = 2``, ``alpha = 2``, ``nu = gamma0 = 1``,
        ``eta = 0.2`` (``q = 1.75``) the test-loss gap times ``D`` at ``t = 59`` grows from -11 at
        ``D = 400`` to about -18 from ``D = 1600`` on (the gap is half the loss at ``D = 800``);
        at ``eta = 0.1`` (``q = 0.87``) it is about 1 at every ``D``.

    Raises
    ------
    DomainError
        Non-positive or non-finite ``alpha``, ``nu``, ``eta``; negative ``sigma``; wrong types.
    ConvergenceError
        The marched solution diverged (non-finite, or the test loss grew above ``1e3`` times its
        initial value): ``eta`` is above the maximal stable learning rate.
    """
    p = _params(depth, hidden_layers, alpha, nu, gamma0, eta, steps, sigma, signal, centering,
                batch_ratio, parameterization, reference_nu, branch_scale, branch_scale0,
                width_ratios, outputs, weight_variances)
    if _variant is not None:      # the printed (erroneous) equations, for tests that reject them
        import dataclasses
        p = dataclasses.replace(p, variant=_variant)
    t0 = time.perf_counter()
    with blas_threads(), np.errstate(over="ignore", invalid="ignore"):
        try:
            arrays = _march(p)
        except _Diverged as exc:
            if p.variances is None:
                c, what, short_ = (p.L + 1) * p.eta, "(L+1) eta", "(L+1) eta"
            else:
                c, what, short_ = (_lazy_ntk(p.variances, p.beta) * p.eta, "eta kappa (kappa = sum_l "
                                   "prod_{k!=l} sigma_k^2 without branches, the lazy NTK)",
                                   "eta kappa")
            raise ConvergenceError(
                f"the DMFT solution diverged at step {exc.step} of {p.T} (test loss "
                f"{exc.loss:.3g}): eta={p.eta:g} is above the maximal stable learning rate "
                f"(for comparison, the lazy infinite-width limit of this depth is stable for "
                f"{what} < 2, here {short_} = {c:g}; finite data, SGD noise and feature "
                f"learning lower the bound); lower eta") from None
    _warn_edge(p)
    return RandomDataResult(hidden_layers=p.L, grid=TimeGrid(p.eta, p.T), alpha=p.alpha,
                            nu=real_scalar(nu, "nu"), gamma0_sq=p.g2, init_variance=p.iv,
                            sigma=p.sigma, signal=p.S, centering=p.centering,
                            batch_ratio=p.alpha_b, branch_scale=p.beta, arrays=arrays,
                            seconds=time.perf_counter() - t0, width_ratios=p.widths,
                            outputs=p.C, weight_variances=p.variances)


EDGE_WARNING = 1.5     # q = eta kappa lambda_+ from which finite-D networks approach slowly


def lazy_edge_ratio(p: _Params) -> float | None:
    """``q = eta kappa (1 + alpha^-1/2)^2`` of a full-batch run on finite data (``None`` at
    ``alpha = inf``): the largest lazy GD multiplier is ``1 - q``, unstable at ``q = 2``."""
    if math.isinf(p.alpha):
        return None
    kappa = (p.L + 1.0) if p.beta is None else resnet_kernel(hidden_layers=p.L,
                                                               branch_scale=p.beta)
    if p.variances is not None:
        kappa = _lazy_ntk(p.variances, p.beta)
    return p.eta * kappa * (1.0 + p.alpha ** -0.5) ** 2


def _lazy_ntk(variances, beta=None) -> float:
    """Lazy NTK eigenvalue with initial variances: ``sum_l prod_{k != l} sigma_k^2`` (``L + 1``
    at unit variances); residual (branch scale ``beta``): with ``P = prod_{l=1}^{L-1}
    (1 + beta^2 sigma_l^2)``, ``(sigma_0^2 + sigma_L^2) P + beta^2 sigma_0^2 sigma_L^2
    sum_{l=1}^{L-1} P / (1 + beta^2 sigma_l^2)`` (input, readout and branch layers; at unit
    variances :func:`resnet_kernel`)."""
    v = list(variances)
    if beta is None:
        return float(sum(math.prod(v[:l] + v[l + 1:]) for l in range(len(v))))
    b2, mid = beta * beta, v[1:-1]
    P = math.prod(1.0 + b2 * s for s in mid)
    return float((v[0] + v[-1]) * P + b2 * v[0] * v[-1] * sum(P / (1.0 + b2 * s) for s in mid))


def _warn_edge(p: _Params) -> None:
    import warnings
    from effth.errors import AccuracyWarning
    q = lazy_edge_ratio(p)
    if q is not None and q >= EDGE_WARNING and p.T > 1:
        warnings.warn(
            f"eta={p.eta:g} on finite data (alpha={p.alpha:g}) is near the edge of stability: "
            f"q = eta kappa (1 + alpha^-1/2)^2 = {q:.3g} >= {EDGE_WARNING} (kappa = lazy NTK "
            f"eigenvalue, q = 2 is the lazy edge).  The theory is the D -> infinity limit, but "
            "finite networks approach it slowly here (measured at L = 2, alpha = 2, q = 1.75: "
            "half the test loss at D = 800, the 1/D law only from D ~ 1600 on); compare with "
            "simulations at large D, or lower eta", AccuracyWarning, stacklevel=4)


# --------------------------------------------------------------------------- residual kernel
@public
def resnet_kernel(*, depth: int | None = None, hidden_layers: int | None = None,
                  branch_scale: float | None = None, branch_scale0: float | None = None) -> float:
    r"""Lazy NTK eigenvalue of the residual network on isotropic data (App. C).

    ``kappa(L, beta) = 2 (1 + beta^2)^(L-1) + (L - 1) beta^2 (1 + beta^2)^(L-2)``: the first and
    last layers contribute ``(1 + beta^2)^(L-1)`` each, every one of the ``L - 1`` branches
    ``beta^2 (1 + beta^2)^(L-2)``.  In the lazy limit ``v(t) = (1 - eta kappa)^t w_*``.  With
    ``beta = beta0 / sqrt(L)`` (``branch_scale0``) ``kappa -> (2 + beta0^2) exp(beta0^2)``.
    """
    L = resolve_depth(depth, hidden_layers) - 1
    if (branch_scale is None) == (branch_scale0 is None):
        raise DomainError("give exactly one of branch_scale= (beta) or branch_scale0= (beta0)")
    b = (real_scalar(branch_scale, "branch_scale") if branch_scale is not None
         else real_scalar(branch_scale0, "branch_scale0") / math.sqrt(L))
    if not (math.isfinite(b) and b >= 0):
        raise DomainError(f"branch scale beta={b!r} must be finite and >= 0")
    b2 = b * b
    return 2 * (1 + b2) ** (L - 1) + (L - 1) * b2 * (1 + b2) ** (L - 2) if L > 1 else 2.0


# --------------------------------------------------------------------------- learning-rate sweeps
def _stable(p: _Params) -> tuple[bool, float]:
    """Whether ``T`` steps stay below the divergence threshold; the final test loss."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            arrays = _march(p)
    except _Diverged:
        return False, math.inf
    return True, float(arrays["test_loss"][-1])


@public
@dataclass(repr=False)
class LearningRateSweep:
    """Final test loss ``L(T-1)`` on an ``eta`` grid for several width ratios (``inf``: diverged).

    Attributes
    ----------
    etas : ndarray (n_eta,)
    nus : ndarray (n_nu,)
    final_loss : ndarray (n_nu, n_eta)
    parameterization : str
    """

    etas: np.ndarray
    nus: np.ndarray
    final_loss: np.ndarray
    parameterization: str
    hidden_layers: int
    steps: int

    @property
    def optimal_eta(self) -> np.ndarray:
        """Per width ratio, the grid ``eta`` with the smallest final test loss (``nan`` where
        every ``eta`` diverged: no optimum on the grid)."""
        out = self.etas[np.argmin(self.final_loss, axis=1)].astype(float)
        out[~np.isfinite(self.final_loss).any(axis=1)] = np.nan
        return out

    @property
    def best_loss(self) -> np.ndarray:
        return np.min(self.final_loss, axis=1)

    @property
    def largest_stable_eta(self) -> np.ndarray:
        """Per width ratio, the largest grid ``eta`` that did not diverge (``nan`` if none)."""
        out = np.full(self.nus.size, np.nan)
        for i, row in enumerate(self.final_loss):
            ok = np.isfinite(row)
            if ok.any():
                out[i] = self.etas[ok].max()
        return out

    def value(self, name: str, layer=None):
        if layer is not None:
            raise DomainError("a learning-rate sweep has no layer axis")
        try:
            return {"final_loss": self.final_loss, "optimal_eta": self.optimal_eta,
                    "best_loss": self.best_loss}[name]
        except KeyError:
            raise DomainError(f"unknown quantity name={name!r}; choose from "
                              "['final_loss', 'optimal_eta', 'best_loss']") from None

    def stderr(self, name: str, layer=None):
        self.value(name, layer)
        return None

    @property
    def layers(self) -> tuple:
        return ()

    def __repr__(self) -> str:
        return (f"LearningRateSweep({self.parameterization}, hidden_layers={self.hidden_layers}, "
                f"steps={self.steps}, etas={self.etas.size} in [{self.etas.min():g}, "
                f"{self.etas.max():g}], nus={short(self.nus.tolist())}, optimal eta="
                f"{short(np.round(self.optimal_eta, 4).tolist())})")

    def _repr_html_(self) -> str:
        rows = [(f"nu={n:g}", f"optimal eta {e:.4g}, loss {b:.4g}")
                for n, e, b in zip(self.nus, self.optimal_eta, self.best_loss)]
        return html_table(f"LearningRateSweep ({self.parameterization})", rows)


@public
def learning_rate_sweep(etas, nus, *, depth: int | None = None, hidden_layers: int | None = None,
                        gamma0: float, steps: int, alpha: float = np.inf, sigma: float = 0.0,
                        signal: float | np.ndarray = 1.0, centering: bool = False,
                        batch_ratio: float | None = None, parameterization: str = "mup",
                        reference_nu: float = 1.0, branch_scale: float | None = None,
                        branch_scale0: float | None = None, width_ratios=None,
                        outputs: int = 1, weight_variances=None,
                        progress: bool | None = None) -> LearningRateSweep:
    r"""Final test loss over a grid of learning rates and width ratios (the paper's Fig. 2).

    In muP (``gamma0`` fixed) the optimal ``eta`` is nearly width independent and wider networks
    are better; in the NTK parameterization (``gamma0 ~ nu^-1/2``) the optimum shifts with ``nu``
    (§3, App. B).  A run whose loss diverges (non-finite, or above ``1e3`` times its initial
    value within ``steps``) is recorded as ``inf``.  Other arguments as in
    :func:`solve_random_data`.
    """
    for arg, name in ((etas, "etas"), (nus, "nus")):
        if np.ndim(arg) > 1:
            raise DomainError(f"{name} must be a number or a 1-D grid, got shape {np.shape(arg)}")
    E = real_array(etas, "etas", finite=True).ravel()
    Nu = real_array(nus, "nus").ravel()
    if E.size == 0 or Nu.size == 0:
        raise DomainError("etas and nus must be non-empty")
    if np.any(E <= 0):
        raise DomainError("every eta in etas must be positive")
    if np.any(np.isnan(Nu)) or np.any(Nu <= 0):
        raise DomainError("every nu in nus must be positive (inf allowed)")
    out = np.empty((Nu.size, E.size))
    base = None
    with blas_threads(), progress_bar(out.size, "learning-rate sweep", progress=progress) as bar:
        for i, nu in enumerate(Nu):
            for j, eta in enumerate(E):
                p = _params(depth, hidden_layers, alpha, nu, gamma0, eta, steps, sigma, signal,
                            centering, batch_ratio, parameterization, reference_nu, branch_scale,
                            branch_scale0, width_ratios, outputs, weight_variances)
                base = p
                out[i, j] = _stable(p)[1]
                bar.update(1)
    return LearningRateSweep(etas=E, nus=Nu, final_loss=out, parameterization=parameterization,
                             hidden_layers=base.L, steps=base.T)


@public
def max_stable_learning_rate(*, depth: int | None = None, hidden_layers: int | None = None,
                             gamma0: float, steps: int, alpha: float = np.inf, nu: float = np.inf,
                             sigma: float = 0.0, signal: float | np.ndarray = 1.0, centering: bool = False,
                             batch_ratio: float | None = None, parameterization: str = "mup",
                             reference_nu: float = 1.0, branch_scale: float | None = None,
                             branch_scale0: float | None = None, width_ratios=None,
                             outputs: int = 1, weight_variances=None, tol: float = 1e-3,
                             eta_start: float | None = None) -> float:
    r"""Largest ``eta`` whose run stays bounded for ``steps`` steps, by bisection in ``log eta``.

    "Bounded" means finite with ``L(t) <= 1e3 L(0)`` for every ``t < steps`` (the paper's App. B,
    Fig. 7; the printed (70) is a heuristic for ``gamma0 >> 1``).  Slightly unstable rates grow
    slowly, so the estimate converges to the true boundary from above as ``steps`` grows.
    In the lazy infinite-width limit the boundary is ``(L + 1) eta = 2`` (population),
    ``2 / (1 + alpha^-1/2)^2`` (finite data) and ``2 alpha_B / (1 + alpha_B)`` (online SGD).

    Parameters
    ----------
    tol : float
        Relative width of the final bracket (other arguments as in :func:`solve_random_data`,
        ``width_ratios``, ``outputs`` and ``weight_variances`` included; with
        ``weight_variances`` the lazy boundary is ``eta kappa = 2``,
        ``kappa = sum_l prod_{k != l} sigma_k^2``).
    eta_start : float, optional
        Initial guess (default ``2 / (L + 1)``).
    """
    tol = positive(tol, "tol")
    if tol < 1e-14:
        raise DomainError(f"tol={tol:g} is below the 1e-14 a bisection in float64 can resolve "
                          "(the bracket cannot shrink further); pass tol >= 1e-14")

    def stable(eta):
        p = _params(depth, hidden_layers, alpha, nu, gamma0, eta, steps, sigma, signal, centering,
                    batch_ratio, parameterization, reference_nu, branch_scale, branch_scale0,
                    width_ratios, outputs, weight_variances)
        return _stable(p)[0]

    L = resolve_depth(depth, hidden_layers) - 1
    e0 = 2.0 / (L + 1) if eta_start is None else positive(eta_start, "eta_start")
    with blas_threads():
        lo, hi = e0, e0
        if stable(e0):
            for _ in range(60):
                hi *= 2.0
                if not stable(hi):
                    break
                lo = hi
            else:
                raise ConvergenceError(f"no unstable learning rate found up to eta={hi:g}")
        else:
            for _ in range(60):
                lo /= 2.0
                if stable(lo):
                    break
                hi = lo
            else:
                raise ConvergenceError(f"no stable learning rate found down to eta={lo:g}")
        while hi / lo - 1.0 > tol:
            mid = math.sqrt(lo * hi)
            if stable(mid):
                lo = mid
            else:
                hi = mid
    return lo


# --------------------------------------------------------------------------- depth extrapolation
@public
@dataclass(frozen=True)
class DepthExtrapolation:
    """Polynomial fit ``value(L) = limit + c_1 / L + ... + c_k / L^k`` over finite depths."""

    depths: np.ndarray
    values: np.ndarray
    limit: float
    coefficients: np.ndarray

    def __repr__(self) -> str:
        return (f"DepthExtrapolation(limit={self.limit:.6g}, depths={short(self.depths.tolist())}, "
                f"order={self.coefficients.size - 1})")


@public
def extrapolate_depth(depths, values, order: int | None = None) -> DepthExtrapolation:
    r"""Infinite-depth limit from residual networks at finite ``L`` with ``beta = beta0/sqrt(L)``.

    The finite-``L`` theory is the Euler discretization (step ``1/L`` in layer time) of the
    infinite-depth equations of App. C.1, so its error is a power series in ``1/L``; this fits a
    polynomial in ``1/L`` of degree ``order`` (default: ``len(depths) - 1``, i.e. Richardson
    extrapolation) and returns its value at ``1/L = 0``.  The printed infinite-depth equation
    (85) is garbled and is not used.
    """
    Ls = real_array(depths, "depths", finite=True).ravel()
    v = real_array(values, "values", finite=True).ravel()
    if Ls.size != v.size or Ls.size < 2 or np.any(Ls <= 0):
        raise DomainError("depths and values must have the same length >= 2, depths positive")
    k = Ls.size - 1 if order is None else integer(order, "order", minimum=1)
    if k > Ls.size - 1:
        raise DomainError(f"order={k} needs at least {k + 1} depths")
    coef = np.polyfit(1.0 / Ls, v, k)[::-1]
    return DepthExtrapolation(depths=Ls, values=v, limit=float(coef[0]), coefficients=coef)


# --------------------------------------------------------------------------- structured data
@public
@dataclass(repr=False)
class PowerLawResult:
    """Test loss of the structured-data DMFT (App. E).

    ``value('test_loss')`` ``(T,)``; ``value('K')`` the two-time kernel of the input sites; at
    infinite width and batch ``value('mode_error')`` ``(T, M)`` the (deterministic) per-mode
    errors ``v_k(t)``; at finite ``N`` or ``B`` (the approximate theory) ``value('mode_loss')``
    ``(T, M)`` the per-mode losses ``lambda_k <v_k(t)^2>`` and ``value('C_v')`` ``(T, T)``.
    ``width``, ``batch``: ``None`` for infinite."""

    hidden_layers: int
    eta: float
    gamma0: float
    capacity: float
    source: float
    eigenvalues: np.ndarray
    arrays: dict
    width: int | None = None
    batch: int | None = None

    @property
    def test_loss(self) -> np.ndarray:
        return self.arrays["test_loss"]

    @property
    def layers(self) -> tuple:
        return ()

    def value(self, name, layer=None):
        if layer is not None:
            raise DomainError("no layer axis here")
        name = "test_loss" if name == "loss" else name
        if name not in self.arrays:
            raise DomainError(f"unknown quantity name={name!r}; choose from {list(self.arrays)}")
        return self.arrays[name]

    def stderr(self, name, layer=None):
        self.value(name, layer)
        return None

    def __repr__(self) -> str:
        fin = "".join(f", {n}={v}" for n, v in (("width", self.width), ("batch", self.batch))
                      if v is not None)
        return (f"PowerLawResult(hidden_layers={self.hidden_layers}, a={self.capacity:g}, "
                f"b={self.source:g}, modes={self.eigenvalues.size}, gamma0={self.gamma0:g}, "
                f"eta={self.eta:g}, steps={self.test_loss.size}{fin})")


@public
def solve_power_law(*, depth: int | None = None, hidden_layers: int | None = None,
                    capacity: float, source: float, gamma0: float, eta: float, steps: int,
                    modes: int = 2000, sigma: float = 0.0, width: int | None = None,
                    batch: int | None = None, progress: bool | None = None) -> PowerLawResult:
    r"""Structured-data DMFT with power-law spectra at infinite width and batch (App. E).

    Inputs ``x ~ N(0, Lambda)``, ``lambda_k = k^-a`` (``a = capacity``), target weights with
    ``(w*_k)^2 lambda_k = k^(-a b - 1)`` (``b = source``), truncated to ``modes`` modes.  (The
    paper calls these exponents ``alpha, beta``; they are renamed here to avoid the clash with the
    data ratio and the branch scale.)  At ``N, B = inf`` the mode sites are deterministic,
    ``v_k(t) = w*_k - sum_{s<t} K(t, s) lambda_k v_k(s)`` (eqs. (90)-(94), with ``K`` the input-site
    kernel ``gamma0^-1 R^1_gu + eta C^1_g``; the printed (93) drops the ``eta``), the first hidden
    layer sees ``C^0_h = sum_k lambda_k^2 v_k v_k`` (a sum over modes), and
    ``L(t) = sum_k lambda_k v_k(t)^2 + sigma^2``.  Hard tasks (``b < 1``) approach
    ``L ~ t^(-2b/(1+b))`` in the rich regime for one hidden layer (eqs. (21), (99)); the lazy
    exponent is ``b``.

    ``width=N`` and/or ``batch=B`` give the paper's *approximate* theory at finite width and
    batch (App. E, eqs. (90)-(94); their Fig. 6a), the network trained by online SGD on fresh
    batches of ``B`` samples (``batch=None``: the population gradient) and centered, as in
    :func:`effth.simulation.linear_field.simulate_power_law`.  Each mode site is then a Gaussian
    process,

    ``v_k(t) = w*_k - r^0_k(t) + r^0_k(0) - sum_{s<t} K(t, s) h^0_k(s)``,
    ``h^0_k(t) = lambda_k v_k(t) + u^0_k(t)``,

    with the limited-width noise ``r^0_k ~ GP(0, C^1_g / (N gamma0^2))`` and the batch noise
    ``u^0_k`` white with variance ``lambda_k (C_v(t, t) + sigma^2) / B``; the order parameters are
    sums over modes (eqs. (91)-(92)): ``C_v = sum_k lambda_k <v_k v_k>``,
    ``C^0_h = sum_k <h^0_k h^0_k>``, ``R^0_hr = sum_k <d h^0_k / d r^0_k>``, which enters the first
    hidden layer as ``(N gamma0)^-1 sum_{s<=t} R^0_hr(t, s) g^1(s)`` (equal time included, as in
    the isotropic theory); the hidden layers follow the isotropic equations.  The theory is the
    isotropic proportional-limit DMFT with ``D`` replaced by the modes: it keeps the ``O(1/N)``
    terms of the rectangular input layer and the ``O(1/B)`` noise of the batch gradient, but not
    the ``O(1/N)`` fluctuations of the ``N x N`` hidden layers nor the correlated part
    ``Lambda v v^T Lambda / B`` of the batch-gradient covariance (nor the bias it gives the
    transfer function, "not finite batch effects for SGD" in §4), which are of the same order
    when the data's effective dimension is finite: it is exact only as ``N, B -> infinity``
    and approximate at ``N, B ~ 16``, where the paper finds it "begins to become accurate".
    Memory ``2 M T^2`` floats (per-mode responses), work ``O(M T^3 + L T^3)``.
    """
    L = resolve_depth(depth, hidden_layers) - 1
    a = positive(capacity, "capacity")
    b = positive(source, "source")
    if a <= 1:
        raise DomainError(f"capacity={a!r} must exceed 1 (trace-class spectrum sum_k k^-a < inf)")
    g = real_scalar(gamma0, "gamma0")
    if not (math.isfinite(g) and g > 0):
        raise DomainError(f"gamma0={gamma0!r} must be positive and finite (use a small value, "
                          "e.g. 1e-4, for the lazy limit)")
    eta = positive(eta, "eta")
    T = integer(steps, "steps", minimum=1)
    M = integer(modes, "modes", minimum=1)
    sigma = real_scalar(sigma, "sigma")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise DomainError(f"sigma={sigma!r} must be finite and >= 0")
    Nw = None if width is None else integer(width, "width", minimum=1)
    Bt = None if batch is None else integer(batch, "batch", minimum=1)
    k = np.arange(1, M + 1, dtype=float)
    lam = k ** (-a)
    wstar = np.sqrt(k ** (-a * b - 1 + a))
    g2 = g * g
    if Nw is not None or Bt is not None:
        check_memory(8.0 * (2.0 * M + 4 * (L + 2) ** 2 + 8) * float(T) ** 2,
                     f"the per-mode responses of {M} modes on {T} steps (2 x {M} ({T} x {T}) "
                     "arrays)", "lower modes or steps")
        with blas_threads(), np.errstate(over="ignore", invalid="ignore"), \
                progress_bar(T, "power-law DMFT (finite N, B)", progress=progress) as bar:
            arrays = _power_law_finite(L, T, eta, g2, lam, wstar, sigma, Nw, Bt, bar)
        return PowerLawResult(hidden_layers=L, eta=eta, gamma0=g, capacity=a, source=b,
                              eigenvalues=lam, arrays=arrays, width=Nw, batch=Bt)
    V = np.zeros((T, M))
    Ch = [np.zeros((T, T)) for _ in range(L + 1)]
    Cg = [np.zeros((T, T)) for _ in range(L + 2)]
    Cg[L + 1] = np.ones((T, T))
    hid = _PlainHidden(L, T)
    Kmat = np.zeros((T, T))
    H0 = np.zeros((T, M))          # h^0_k = lambda_k v_k
    zero = np.zeros((T, T))
    with blas_threads(), np.errstate(over="ignore", invalid="ignore"), \
            progress_bar(T, "power-law DMFT", progress=progress) as bar:
        for t in range(T):
            hid.backward(t, Ch, Cg, eta, g2)
            K = hid.R1gu_scaled(t)[0] + eta * Cg[1][t, :t]
            Kmat[t, :t] = K
            V[t] = wstar - K @ H0[:t]
            H0[t] = lam * V[t]
            _sym(Ch[0], t, H0[:t + 1] @ H0[t])
            hid.forward(t, Ch, Cg, zero, eta, g2, 0.0)
            loss = float(lam @ V[t] ** 2)
            if not np.isfinite(loss) or loss > _BLOWUP * (float(lam @ wstar ** 2)):
                raise ConvergenceError(f"the power-law DMFT diverged at step {t}: eta={eta:g} is "
                                       "too large; lower eta")
            bar.update(1)
    test = (V ** 2) @ lam + sigma ** 2
    return PowerLawResult(hidden_layers=L, eta=eta, gamma0=g, capacity=a, source=b, eigenvalues=lam,
                          arrays=dict(test_loss=test, mode_error=V, K=Kmat))


def _mode_sum(a, V):
    """``sum_m sum_u a[m, u] V[m, s, u]`` over the modes (stacked BLAS products, no copies)."""
    return np.matmul(V, a[:, :, None])[:, :, 0].sum(axis=0)


def _power_law_finite(L, T, eta, g2, lam, wstar, sigma, N, B, bar):
    """March the approximate finite-(N, B) structured-data theory (see :func:`solve_power_law`).

    Per mode ``k`` the coefficients of ``v_k`` on its sources: ``Vw`` (``w*_k``, ``(T, M)``),
    ``Vr`` (``r^0_k``, ``(M, T, T)``) and ``Vu`` (``u^0_k``, ``(M, T, T)``); every mode shares the
    kernel ``K`` and the covariance of ``r^0``, and ``u^0_k`` is white with variance
    ``lambda_k C_Delta(t, t) / B``."""
    M = lam.size
    iv = 0.0 if N is None else 1.0 / (N * g2)
    ib = 0.0 if B is None else 1.0 / B
    Z = lambda: np.zeros((T, T))                      # noqa: E731
    Ch = [Z() for _ in range(L + 1)]
    Cg = [Z() for _ in range(L + 2)]
    Cg[L + 1] = np.ones((T, T))
    hid = _PlainHidden(L, T)
    Kmat, Cv, H0r = Z(), Z(), Z()
    Vw = np.zeros((T, M))
    Vr = np.zeros((M, T, T))
    Vu = np.zeros((M, T, T))
    cd = np.zeros(T)                                  # C_Delta(t, t) = C_v(t, t) + sigma^2
    w2 = wstar ** 2
    L0 = float(lam @ w2)
    for t in range(T):
        up = slice(0, t + 1)
        hid.backward(t, Ch, Cg, eta, g2)
        K = hid.R1gu_scaled(t)[0] + eta * Cg[1][t, :t]
        Kmat[t, :t] = K
        lK = lam[:, None] * K[None, :]                                  # (M, t)
        # v_k(t) = w*_k - (r^0_k(t) - r^0_k(0)) - sum_{s<t} K(t,s) (lambda_k v_k(s) + u^0_k(s))
        Vw[t] = 1.0 - np.einsum("ms,sm->m", lK, Vw[:t])
        Vr[:, t, up] = -np.matmul(lK[:, None, :], Vr[:, :t, up])[:, 0]
        Vr[:, t, t] -= 1.0
        Vr[:, t, 0] += 1.0                                              # centering
        Vu[:, t, up] = -np.matmul(lK[:, None, :], Vu[:, :t, up])[:, 0]
        Vu[:, t, :t] -= K[None, :]
        Sr = Cg[1][up, up] * iv
        # u^0_k(s) has variance lambda_k cd(s) ib; Vu[:, t, t] = 0, so cd(t) is not needed yet
        su = cd[up] * ib
        A = Vr[:, t, up] @ Sr                                           # (M, t+1)
        row = (lam * w2 * Vw[t]) @ Vw[up].T
        row = row + _mode_sum(lam[:, None] * A, Vr[:, up, up])
        row = row + _mode_sum((lam * lam)[:, None] * (Vu[:, t, up] * su), Vu[:, up, up])
        _sym(Cv, t, row)
        cd[t] = Cv[t, t] + sigma ** 2
        su = cd[up] * ib
        # h^0_k = lambda_k v_k + u^0_k: coefficients lambda_k V and lambda_k Vu + I
        row0 = (lam ** 2 * w2 * Vw[t]) @ Vw[up].T
        row0 = row0 + _mode_sum((lam ** 2)[:, None] * A, Vr[:, up, up])
        Hu_t = lam[:, None] * Vu[:, t, up]
        Hu_t[:, t] += 1.0
        bu = lam[:, None] * (Hu_t * su)              # u^0 part: (lambda Vu + I) diag (lambda Vu + I)^T
        row0 = row0 + _mode_sum(lam[:, None] * bu, Vu[:, up, up]) + bu.sum(axis=0)
        _sym(Ch[0], t, row0)
        H0r[t, up] = lam @ Vr[:, t, up]                                  # sum_k d h^0_k / d r^0_k
        hid.forward(t, Ch, Cg, H0r, eta, g2, iv)
        if not np.isfinite(cd[t]) or cd[t] > _BLOWUP * (L0 + sigma ** 2):
            raise ConvergenceError(f"the power-law DMFT diverged at step {t}: eta={eta:g} is "
                                   "too large; lower eta")
        bar.update(1)
    mode_loss = (lam[:, None] * np.sum((Vr @ (Cg[1] * iv)) * Vr, axis=2)).T + lam * w2 * Vw ** 2
    mode_loss += ((lam * lam * ib)[:, None] * ((Vu ** 2) @ cd)).T
    return dict(test_loss=np.diag(Cv) + sigma ** 2, K=Kmat, C_v=Cv, mode_loss=mode_loss)


@public
def power_law_exponent(result, t_min: float, t_max: float | None = None, sigma: float = 0.0) -> float:
    r"""Exponent ``p`` of ``L(t) - sigma^2 ~ t^-p`` by least squares in ``log t`` over
    ``t_min <= t < t_max`` (grid steps)."""
    loss = real_array(result.value("test_loss") if hasattr(result, "value") else result, "result")
    if loss.ndim != 1 or loss.size < 3:
        raise DomainError(f"result must be a run with a test loss or a 1-D loss curve of >= 3 "
                          f"steps, got shape {loss.shape}")
    t = np.arange(loss.size, dtype=float)
    hi = loss.size if t_max is None else real_scalar(t_max, "t_max")
    lo = real_scalar(t_min, "t_min")
    m = (t >= lo) & (t < hi) & (t > 0)
    y = loss[m] - sigma ** 2
    if m.sum() < 2 or np.any(y <= 0):
        raise DomainError("power_law_exponent needs >= 2 points with positive loss - sigma^2 in the window")
    return float(-np.polyfit(np.log(t[m]), np.log(y), 1)[0])
