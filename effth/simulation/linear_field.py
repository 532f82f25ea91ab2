r"""Ground truth for the random-data deep linear DMFT: finite networks in field form.

Bordelon & Pehlevan, "Deep Linear Network Training Dynamics from Random Initialization: Data,
Width, Depth, and Hyperparameter Transfer".  A deep linear network of width ``N`` on inputs of
dimension ``D`` learns a linear teacher ``y = w_* . x / sqrt(D) + sigma eps`` from ``P`` Gaussian
examples ``x ~ N(0, I_D)``.  The network

``f(x) = (N gamma0)^-1 (w^L)^T W^{L-1}/sqrt(N) ... W^1/sqrt(N) W^0 x``

(all weights ``N(0, 1)``; no ``1/sqrt(D)`` on ``W^0`` -- the printed eq. (1) carries one, the
fields (9), (26) and the DMFT do not) is trained by gradient descent with raw learning rate
``N eta gamma0^2`` on the halved MSE ``(2P)^-1 sum_mu Delta_mu^2``.  The simulator runs it in the
training-set-averaged field form of eqs. (4)-(5), (24)-(26): for ``t = 0, 1, ..``

``g^L = w^L``, ``g^l = W^l^T g^{l+1} / sqrt(N)``, ``v = w_* - sqrt(D)/(N gamma0) W^0^T g^1``,
``Delta = X v / sqrt(D) + sigma eps``, ``h^0 = sqrt(D)/P X^T Delta``, ``h^1 = W^0 h^0 / sqrt(D)``,
``h^{l+1} = W^l h^l / sqrt(N)``; record ``L = |v|^2/D + sigma^2`` and ``L_hat = |Delta|^2/P``;
``W^0 += eta gamma0 / sqrt(D) g^1 h^0^T``, ``W^l += eta gamma0 / sqrt(N) g^{l+1} h^l^T``,
``w^L += eta gamma0 h^L``.

Variants: population data (``alpha = inf``: ``h^0 = v``), online SGD (fresh ``B = alpha_B D``
samples and noise each step, App. D), centering (``f(x, t) - f(x, 0)``, App. A.3), residual
branches ``I + beta W^l / sqrt(N)`` (App. C, updates carry ``beta``), layer-dependent widths
``N_l = a_l N`` (App. F, eq. (100): readout ``1/(N_L gamma0)``, each ``W^l`` divided by the square
root of its fan-in), initial weight variances ``W^l(0) ~ N(0, sigma_l^2)`` (B&P 2022
app. D.8) and several output channels (App. G, eqs. (102)-(105), the updates summed over
channels).  Networks are batched over a leading axis.
"""

from __future__ import annotations

from .._validate import rng as _rng
from effth._signature import public

import math
from dataclasses import dataclass, field

import numpy as np

from .._display import depth_text, html_table, short
from .._progress import progress_bar
from .._threads import blas_threads
from .._validate import (integer, positive, real_scalar, teacher_signal,
                         weight_variance_values, width_ratio_values)
from effth.arch import resolve_depth
from effth.arch._common import resolve_branch_scale
from ..errors import ConvergenceError, DomainError

__all__ = ["LinearFieldRun", "simulate_linear_field", "simulate_power_law"]


def _rank1(W, alpha, g, h):
    """In place ``W[n] += alpha g[n] h[n]^T`` for every network ``n`` (BLAS ``dger`` on the
    C-ordered matrices' transposes: no temporary of the stack's size)."""
    try:
        from scipy.linalg.blas import dger
    except ImportError:                    # pragma: no cover - scipy is a dependency
        W += alpha * g[:, :, None] * h[:, None, :]
        return
    for i in range(W.shape[0]):
        dger(alpha, h[i], g[i], a=W[i].T, overwrite_a=1)


@public
@dataclass(repr=False)
class LinearFieldRun:
    """Losses of simulated field-form networks (one row per network).

    ``value(name)`` is the mean over networks and ``stderr(name)`` its standard error, for
    ``'test_loss'`` (alias ``'loss'``) and ``'train_loss'`` (shape ``(T,)``; the train loss is not
    defined for online SGD; with several outputs both are summed over the channels), and
    ``'channel_loss'`` ``(T, C)``, the test loss per channel.  Raw arrays ``test_loss``,
    ``train_loss`` are ``(networks, T)``, ``channel_test_loss`` ``(networks, T, C)`` (``None``
    for one output).
    """

    hidden_layers: int
    dim: int
    width: int
    samples: int | None
    eta: float
    gamma0: float
    steps: int
    test_loss: np.ndarray
    train_loss: np.ndarray | None
    settings: dict = field(default_factory=dict)
    channel_test_loss: np.ndarray | None = None

    @property
    def depth(self) -> int:
        return self.hidden_layers + 1

    @property
    def layers(self) -> tuple:
        return ()

    @property
    def networks(self) -> int:
        return self.test_loss.shape[0]

    def _raw(self, name, layer):
        if layer is not None:
            raise DomainError(f"{name!r} has no layer axis; drop layer={layer!r}")
        if name in ("test_loss", "loss"):
            return self.test_loss
        if name == "channel_loss":
            return self.test_loss[:, :, None] if self.channel_test_loss is None \
                else self.channel_test_loss
        if name == "train_loss":
            if self.train_loss is None:
                raise DomainError("'train_loss' is not defined for online SGD")
            return self.train_loss
        raise DomainError(f"unknown quantity name={name!r}; choose from "
                          "['test_loss', 'loss', 'train_loss', 'channel_loss']")

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        return self._raw(name, layer).mean(axis=0)

    def stderr(self, name: str, layer: int | None = None) -> np.ndarray:
        x = self._raw(name, layer)
        if x.shape[0] < 2:
            return np.full(x.shape[1:], np.inf)
        return x.std(axis=0, ddof=1) / math.sqrt(x.shape[0])

    def __repr__(self) -> str:
        return (f"LinearFieldRun({depth_text(self.depth)}, "
                f"D={self.dim}, N={self.width}, P={self.samples}, gamma0={self.gamma0:g}, "
                f"eta={self.eta:g}, steps={self.steps}, networks={self.networks})")

    def _repr_html_(self) -> str:
        rows = [("depth (hidden_layers)", f"{self.depth} ({self.hidden_layers})"),
                ("D, N, P", f"{self.dim}, {self.width}, {self.samples}"),
                ("gamma0", f"{self.gamma0:g}"), ("eta", f"{self.eta:g}"), ("steps", self.steps),
                ("networks", self.networks),
                ("mean test loss", short(np.round(self.value('test_loss'), 4)))]
        rows += [(k, v) for k, v in self.settings.items()]
        return html_table("LinearFieldRun", rows)


@public
def simulate_linear_field(*, dim: int, depth: int | None = None, hidden_layers: int | None = None,
                          alpha: float = np.inf, nu: float, gamma0: float, eta: float,
                          steps: int, sigma: float = 0.0, signal: float | np.ndarray = 1.0,
                          centering: bool = False, batch_ratio: float | None = None,
                          parameterization: str = "mup", reference_nu: float = 1.0,
                          branch_scale: float | None = None, branch_scale0: float | None = None,
                          width_ratios=None, outputs: int = 1, weight_variances=None,
                          networks: int = 8, seed=0, progress: bool | None = None) -> LinearFieldRun:
    r"""Train ``networks`` independent field-form deep linear networks on random data.

    Parameters
    ----------
    dim : int
        Input dimension ``D``; ``N = round(nu D)``, ``P = round(alpha D)``,
        ``B = round(batch_ratio D)``.
    depth, hidden_layers : int
        Exactly one (``hidden_layers`` is the paper's ``L``).
    alpha, nu, gamma0, eta, steps, sigma, signal, centering, batch_ratio, parameterization,
    reference_nu, branch_scale, branch_scale0
        As in ``effth.dmft.solve_random_data`` (``nu`` must be finite; ``gamma0 > 0``).
        Each network draws its own teacher ``w_* ~ N(0, I_D)``, rescaled to ``|w_*|^2 = signal D``,
        its own data set and its own initialization.
    width_ratios : sequence of float, optional
        ``a_1 .. a_L > 0``: hidden layer ``l`` has ``N_l = round(a_l nu D)`` units (App. F,
        eq. (100)): ``W^0`` is ``N_1 x D``, ``W^l`` is ``N_{l+1} x N_l`` divided by
        ``sqrt(N_l)`` in the fields and its update, the readout ``w^L`` has ``N_L`` entries and
        ``v = w_* - sqrt(D)/(N_L gamma0) W^0^T g^1`` (raw learning rate ``N_L eta gamma0^2``).
        Not with residual branches.
    outputs : int
        ``C`` output channels (App. G, eqs. (102)-(105), with the sign of the ``W^l`` update in
        (104) corrected to ``+``): readouts ``w^L_c``, teachers ``w*_c`` (the ``D x C`` teacher
        of each network is drawn Gaussian and orthonormalized to the exact Gram matrix
        ``w*_c . w*_c' = D S_cc'``, ``signal`` a number or the ``(C, C)`` matrix), independent
        label noise per channel, and the updates sum over channels:
        ``W^0 += eta gamma0 / sqrt(D) sum_c g^1_c h^0_c^T`` and likewise for ``W^l``.  The losses
        are summed over the channels; ``channel_test_loss`` holds them per channel.
    weight_variances : sequence of float, optional
        ``sigma_0^2 .. sigma_L^2 > 0``, one per weight layer (``W^0``, the hidden
        ``W^1 .. W^{L-1}``, the readout ``w^L``): the initial weights are drawn as before and
        scaled by ``sigma_l``, ``W^l_ij(0) ~ N(0, sigma_l^2)`` (Bordelon & Pehlevan (2022),
        App. D.8); the fields, updates and learning rate are unchanged.  ``None`` or all ones:
        the unit-variance networks, bit for bit (same draws).  Residual branches too.
    networks : int
        Number of independent networks (batched).
    seed : int, SeedSequence, Generator or None

    Returns
    -------
    LinearFieldRun

    Raises
    ------
    DomainError
        Bad arguments.
    ConvergenceError
        A network's loss overflowed (``eta`` too large).
    """
    L = resolve_depth(depth, hidden_layers) - 1
    D = integer(dim, "dim", minimum=1)
    T = integer(steps, "steps", minimum=1)
    n_net = integer(networks, "networks", minimum=1)
    nu = positive(nu, "nu")
    alpha = positive(alpha, "alpha", allow_inf=True)
    eta = positive(eta, "eta")
    g = positive(gamma0, "gamma0")
    sigma = real_scalar(sigma, "sigma")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise DomainError(f"sigma={sigma!r} must be finite and >= 0")
    C = integer(outputs, "outputs", minimum=1)
    S, Smat = teacher_signal(signal, C)
    if parameterization == "ntk":
        g = g * math.sqrt(positive(reference_nu, "reference_nu") / nu)
    elif parameterization != "mup":
        raise DomainError(f"parameterization={parameterization!r} must be 'mup' or 'ntk'")
    beta = resolve_branch_scale(branch_scale, branch_scale0, L)
    N = max(1, int(round(nu * D)))
    ratios = width_ratio_values(width_ratios, L)
    if ratios is not None and beta is not None:
        raise DomainError("width_ratios= with a residual network: the skip connections "
                          "I + beta W / sqrt(N) need equal hidden widths (App. C)")
    variances = weight_variance_values(weight_variances, L + 1)
    Ns = [N] * L if ratios is None else [max(1, int(round(a * nu * D))) for a in ratios]
    sgd = batch_ratio is not None
    if sgd:
        B = max(1, int(round(positive(batch_ratio, "batch_ratio") * D)))
        if not math.isinf(alpha):
            raise DomainError("online SGD (batch_ratio=) draws fresh data: leave alpha at inf")
        P = None
    else:
        P = None if math.isinf(alpha) else max(1, int(round(alpha * D)))
    per_net = (float(Ns[0]) * D + sum(float(Ns[l + 1]) * Ns[l] for l in range(L - 1))
               + float(P or 0) * D)
    from effth._validate import check_memory, check_work
    check_memory(8.0 * (per_net + 2.0 * n_net * T), f"one network of {N} x {D} weights and "
                 f"{n_net} loss curves of {T} steps", "lower dim, nu, steps or networks")
    check_work(float(n_net) * T * (1e-6 + per_net / 2e9), f"{n_net} networks trained for {T} steps",
               "lower networks, steps or dim")
    rng = _rng(seed)
    # chunks of networks so that the weights stay below ~ 3e7 floats
    chunk = max(1, min(n_net, int(3e7 // max(per_net, 1))))
    test = np.empty((n_net, T))
    train = None if sgd else np.empty((n_net, T))
    chan = None if C == 1 else np.empty((n_net, T, C))
    sD = math.sqrt(D)
    sNs = [None] + [math.sqrt(Ns[l - 1]) for l in range(1, L + 1)]   # sNs[l] = sqrt(N_l)
    NL = Ns[-1]
    ch = () if C == 1 else (C,)               # trailing channel axis (none for one output)

    def mv(W, x, transpose=False):            # batched W x (or W^T x), per channel
        if C > 1:                              # stacked matrix products (BLAS)
            return np.matmul(W.transpose(0, 2, 1) if transpose else W, x)
        return np.einsum("nij,ni->nj" if transpose else "nij,nj->ni", W, x)

    def rank1(W, a, gv, hv):                  # W += a sum_c g_c h_c^T
        if C == 1:
            _rank1(W, a, gv, hv)
        else:
            for c in range(C):
                _rank1(W, a, np.ascontiguousarray(gv[..., c]), np.ascontiguousarray(hv[..., c]))

    def sq(x, axis):                          # |x|^2 per network (and per channel)
        return np.sum(x * x, axis=axis)
    with blas_threads(), progress_bar(n_net, "linear-field networks", progress=progress) as bar:
        for start in range(0, n_net, chunk):
            n = min(chunk, n_net - start)
            if C == 1:
                ws = rng.standard_normal((n, D))
                ws *= np.sqrt(S * D / np.sum(ws ** 2, axis=1, keepdims=True))
            else:
                ws = _teachers(rng.standard_normal((n, D, C)), Smat, D)
            W0 = rng.standard_normal((n, Ns[0], D))
            Ws = [rng.standard_normal((n, Ns[l], Ns[l - 1])) for l in range(1, L)]   # W^1 .. W^{L-1}
            wL = rng.standard_normal((n, NL) + ch)
            if variances is not None:          # W^l(0) ~ N(0, sigma_l^2), same draws
                sd = [math.sqrt(v) for v in variances]
                W0 *= sd[0]
                for l in range(1, L):
                    Ws[l - 1] *= sd[l]
                wL = wL * sd[L]
            if P is not None:
                X = rng.standard_normal((n, P, D))
                eps = rng.standard_normal((n, P) + ch)
            c0 = None
            for t in range(T):
                gs = [None] * (L + 1)
                gs[L] = wL
                for l in range(L - 1, 0, -1):
                    back = mv(Ws[l - 1], gs[l + 1], transpose=True) / sNs[l]
                    gs[l] = back if beta is None else gs[l + 1] + beta * back
                out = mv(W0, gs[1], transpose=True) * (sD / (NL * g))
                if centering:
                    if c0 is None:
                        c0 = out.copy()
                    out = out - c0
                v = ws - out
                per = sq(v, 1) / D + sigma ** 2             # (n,) or (n, C)
                if chan is not None:
                    chan[start:start + n, t] = per
                    per = per.sum(axis=1)
                test[start:start + n, t] = per
                if sgd:
                    Xb = rng.standard_normal((n, B, D))
                    delta = (mv(Xb, v) / sD + sigma * rng.standard_normal((n, B) + ch))
                    h0 = mv(Xb, delta, transpose=True) * (sD / B)
                elif P is None:
                    if train is not None:
                        train[start:start + n, t] = test[start:start + n, t]
                    h0 = v
                else:
                    delta = mv(X, v) / sD + sigma * eps
                    tr = sq(delta, 1) / P
                    train[start:start + n, t] = tr if C == 1 else tr.sum(axis=1)
                    h0 = mv(X, delta, transpose=True) * (sD / P)
                if not np.all(np.isfinite(test[start:start + n, t])) or np.any(
                        test[start:start + n, t] > 1e12):
                    raise ConvergenceError(f"simulated network loss overflowed at step {t}: "
                                           f"eta={eta:g} is too large for these networks; lower eta")
                if t == T - 1:
                    break
                hs = [None] * (L + 1)
                hs[1] = mv(W0, h0) / sD
                for l in range(1, L):
                    fwd = mv(Ws[l - 1], hs[l]) / sNs[l]
                    hs[l + 1] = fwd if beta is None else hs[l] + beta * fwd
                # updates (all from the fields at step t)
                rank1(W0, eta * g / sD, gs[1], np.ascontiguousarray(h0))
                br = 1.0 if beta is None else beta
                for l in range(1, L):
                    rank1(Ws[l - 1], eta * g * br / sNs[l], gs[l + 1], hs[l])
                wL = wL + eta * g * hs[L]
            bar.update(n)
    settings = dict(alpha=alpha, nu=nu, sigma=sigma, signal=S if Smat is None else Smat,
                    centering=bool(centering), batch_ratio=batch_ratio, branch_scale=beta,
                    parameterization=parameterization)
    if ratios is not None:
        settings["widths"] = tuple(Ns)
    if variances is not None:
        settings["weight_variances"] = variances
    if C > 1:
        settings["outputs"] = C
    return LinearFieldRun(hidden_layers=L, dim=D, width=N, samples=P, eta=eta, gamma0=g, steps=T,
                          test_loss=test, train_loss=train, settings=settings,
                          channel_test_loss=chan)




def _teachers(G, Smat, D):
    """Teachers ``(n, D, C)`` with the exact Gram matrix ``W*^T W* = D S`` per network: the
    Gaussian draws ``G`` orthonormalized (QR) and mapped by a square root of ``S``."""
    Q, R = np.linalg.qr(G)
    Q = Q * np.sign(np.diagonal(R, axis1=1, axis2=2))[:, None, :]
    w, U = np.linalg.eigh(Smat)
    root = (U * np.sqrt(np.clip(w, 0.0, None))) @ U.T
    return math.sqrt(D) * Q @ root


@public
def simulate_power_law(*, width: int, depth: int | None = None, hidden_layers: int | None = None,
                       capacity: float, source: float, modes: int, gamma0: float, eta: float,
                       steps: int, batch: int | None = None, sigma: float = 0.0,
                       networks: int = 4, seed=0, progress: bool | None = None) -> LinearFieldRun:
    r"""Centered deep linear networks on structured (power-law) data, the field form of App. E.

    Inputs ``x ~ N(0, Lambda)`` with ``lambda_k = k^-a`` (``a = capacity``) over ``modes`` modes,
    target ``y = sum_k w*_k x_k + sigma eps`` with ``(w*_k)^2 lambda_k = k^(-a b - 1)``
    (``b = source``).  There are no ``sqrt(D)`` factors: ``v = w* - (N gamma0)^-1 (W^0(t)^T g^1(t)
    - W^0(0)^T g^1(0))``, ``Delta = X v + sigma eps`` on a fresh batch of ``batch`` samples,
    ``h^0 = X^T Delta / B`` (``batch=None``: the population gradient ``h^0 = Lambda v``),
    ``h^1 = W^0 h^0``, ``W^0 += eta gamma0 g^1 h^0^T``, other layers as in
    :func:`simulate_linear_field`.  Test loss ``sum_k lambda_k v_k^2 + sigma^2``.

    Parameters
    ----------
    width : int
        ``N`` (absolute, not a ratio).
    batch : int, optional
        ``B`` (absolute); ``None`` for population gradient descent.
    """
    L = resolve_depth(depth, hidden_layers) - 1
    N = integer(width, "width", minimum=1)
    M = integer(modes, "modes", minimum=1)
    T = integer(steps, "steps", minimum=1)
    n_net = integer(networks, "networks", minimum=1)
    a, b = positive(capacity, "capacity"), positive(source, "source")
    if a <= 1:
        raise DomainError(f"capacity={a!r} must exceed 1 (trace-class spectrum)")
    g, eta = positive(gamma0, "gamma0"), positive(eta, "eta")
    sigma = real_scalar(sigma, "sigma")
    if not (math.isfinite(sigma) and sigma >= 0):
        raise DomainError(f"sigma={sigma!r} must be finite and >= 0")
    B = None if batch is None else integer(batch, "batch", minimum=1)
    rng = _rng(seed)
    k = np.arange(1, M + 1, dtype=float)
    lam = k ** (-a)
    ws = np.sqrt(k ** (-a * b - 1 + a))
    sl, sN = np.sqrt(lam), math.sqrt(N)
    test = np.empty((n_net, T))
    with blas_threads(), progress_bar(n_net, "power-law networks", progress=progress) as bar:
        for i in range(n_net):
            W0 = rng.standard_normal((N, M))
            Ws = [rng.standard_normal((N, N)) for _ in range(L - 1)]
            wL = rng.standard_normal(N)
            c0 = None
            for t in range(T):
                gs = [None] * (L + 1)
                gs[L] = wL
                for l in range(L - 1, 0, -1):
                    gs[l] = Ws[l - 1].T @ gs[l + 1] / sN
                out = W0.T @ gs[1] / (N * g)
                if c0 is None:
                    c0 = out.copy()
                v = ws - (out - c0)
                test[i, t] = float(lam @ (v * v)) + sigma ** 2
                if not np.isfinite(test[i, t]) or test[i, t] > 1e12:
                    raise ConvergenceError(f"simulated network loss overflowed at step {t}: "
                                           f"eta={eta:g} is too large; lower eta")
                if t == T - 1:
                    break
                if B is None:
                    h0 = lam * v
                else:
                    X = rng.standard_normal((B, M)) * sl
                    delta = X @ v + sigma * rng.standard_normal(B)
                    h0 = X.T @ delta / B
                hs = [None] * (L + 1)
                hs[1] = W0 @ h0
                for l in range(1, L):
                    hs[l + 1] = Ws[l - 1] @ hs[l] / sN
                W0 += (eta * g) * np.outer(gs[1], h0)
                for l in range(1, L):
                    Ws[l - 1] += (eta * g / sN) * np.outer(gs[l + 1], hs[l])
                wL = wL + eta * g * hs[L]
            bar.update(1)
    settings = dict(capacity=a, source=b, modes=M, batch=B, sigma=sigma, centering=True)
    return LinearFieldRun(hidden_layers=L, dim=M, width=N, samples=B, eta=eta, gamma0=g, steps=T,
                          test_loss=test, train_loss=None, settings=settings)
