r"""Finite-width networks trained by learning rules other than GD: the ground truth of the
learning-rule DMFT (Bordelon & Pehlevan, *The influence of learning rule on representation
dynamics in wide neural networks*, ICLR 2023).

The network is the mean-field network of :func:`~effth.simulation.simulate_training` (eq. (1)),
with ``L`` hidden layers of width ``N`` and no biases,

``h^1 = W^0 x / sqrt(D)``, ``h^{l+1} = W^l a^l / sqrt(N)``, ``f = w^L . a^L / (gamma0 N)``,

where the features are ``a^l = phi(h^l)``, or ``a^l = phi'(m^l) h^l`` with frozen gates
``m^l = M^l x / sqrt(D)`` for gated linear networks.  One Euler step of size ``eta`` moves the
weights by (eqs. (2)-(3))

``w^L += eta gamma0 sum_mu Delta_mu a^L_mu``,
``W^l += eta gamma0 / sqrt(N) sum_mu Delta_mu g~^{l+1}_mu a^l_mu^T``,
``W^0 += eta gamma0 / sqrt(D) sum_mu Delta_mu g~^1_mu x_mu^T``

with the rule's pseudo-gradient ``g~`` (Table 1): GD and GLN backpropagate through ``W^l(t)``;
ρ-FA through frozen ``B^l = rho W^l(0) + sqrt(1 - rho^2) W~^l`` (top layer
``rho w^L(0) + sqrt(1 - rho^2) w~^L``); DFA uses a frozen ``N(0, 1)`` vector ``z~^l`` per layer
(``g~^l = phi'(h^l) z~^l``); error-modulated Hebb uses ``g~^l_mu = Delta_mu a^l_mu`` (so the update
carries ``Delta^2``, App. G).  For GD this is exactly the trainer of
:func:`~effth.simulation.simulate_training` (learning rate ``eta gamma0^2 N``).

The forward pass is the shared batched pass of :mod:`effth.simulation._mlp` (the gated network
needs its gates between layers and has its own three-line forward pass).  NumPy only: this module
never imports theory code.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import numpy as np

from .._threads import limits_blas_threads

from .._display import depth_text, html_table, short
from .._progress import progress_bar
from .._results import HiddenLayers
from .._validate import integer, real_array, real_scalar
from effth.arch import resolve_depth
from ..errors import DomainError
from . import _mlp
from .training import (_Optimizer, _optimizer_settings, _resolve_callables, _resolve_seeds,
                       _resolve_widths)

__all__ = ["RuleTrainingRun", "simulate_rule_training"]

_ALIASES = {"gd": "gd", "gradient_descent": "gd", "backprop": "gd",
            "fa": "fa", "rho_fa": "fa", "feedback_alignment": "fa",
            "dfa": "dfa", "direct_feedback_alignment": "dfa",
            "hebb": "hebb", "hebbian": "hebb",
            "gln": "gln", "gated": "gln", "gated_linear": "gln"}


def _rule(rule, rho) -> tuple:
    """``(name, rho)`` from a name or any object with ``.name`` and ``.rho`` (the rule objects of
    :func:`effth.dmft.learning_rule`)."""
    if hasattr(rule, "name") and hasattr(rule, "rho") and not isinstance(rule, str):
        name, r = str(rule.name), rule.rho
        if rho is not None and real_scalar(rho, "rho") != real_scalar(r, "rho"):
            raise DomainError(f"rho={rho!r} contradicts the rule object {rule!r}")
    elif isinstance(rule, str):
        name = _ALIASES.get(rule.strip().lower().replace("-", "_").replace(" ", "_"))
        if name is None:
            raise DomainError(f"unknown learning rule {rule!r}; known: {sorted(set(_ALIASES))}")
        if rho is not None and name != "fa":
            raise DomainError(f"rho is a parameter of feedback alignment only, not of {name!r}")
        r = 0.0 if rho is None else rho
    else:
        raise DomainError(f"rule must be a name or a rule object, got {rule!r}")
    if name not in ("gd", "fa", "dfa", "hebb", "gln"):
        raise DomainError(f"unknown learning rule {name!r}")
    r = real_scalar(r, "rho")
    if not np.isfinite(r) or not -1.0 <= r <= 1.0:
        raise DomainError(f"rho={r!r} must be a finite number in [-1, 1]")
    return name, (r if name == "fa" else (1.0 if name in ("gd", "gln") else 0.0))


@public
@dataclass
class RuleTrainingRun(HiddenLayers):
    """Record of networks trained by a learning rule (one network per seed).

    Attributes
    ----------
    rule : str
    rho : float
    f : ndarray, shape (S, T, n), or (S, T, n, C) for 2-D targets
        Outputs (centred, ``f - f(theta_0)``, if ``center``).
    loss : ndarray, shape (S, T)
    phi, g, gtilde : ndarray, shape (S, L, T, n, T, n)
        Two-time ``Φ^l``, ``G^l = g^l . g^l / N`` and ``G~^l_{μν}(t, s) = g^l_μ(t) . g~^l_ν(s) / N``
        with ``g^l = gamma0 N df/dh^l`` (only equal times, zeros elsewhere, without
        ``record_kernels``); ``g``, ``gtilde`` gain two output axes ``(C, C)`` for 2-D targets.
    ntk : ndarray, shape (S, T, n, n), or (S, T, n, n, C, C)
        Empirical eNTK ``Σ_l G~^{l+1}(t, t) Φ^l(t, t)`` (eq. (4); ``Φ^0 = K^x``, ``G~^{L+1} = 1``).
    corr : ndarray, shape (S, T)
        ``corr(g, g~)`` over hidden layers and training points (Fig. 3c).
    hidden_layers, width, gamma0, eta, seeds
        ``width`` is the int ``N``, or the tuple ``(N_1, .., N_L)`` of unequal widths.
    temperature : float
        The Langevin temperature trained at (0: no noise).
    """

    rule: str
    rho: float
    f: np.ndarray
    loss: np.ndarray
    phi: np.ndarray
    g: np.ndarray
    gtilde: np.ndarray
    ntk: np.ndarray
    corr: np.ndarray
    hidden_layers: int
    width: int | tuple
    gamma0: float
    eta: float
    seeds: tuple
    temperature: float = 0.0

    _NAMES = ("f", "loss", "phi", "g", "gtilde", "ntk", "corr")

    @property
    def networks(self) -> int:
        return self.f.shape[0]

    def _raw(self, name, layer):
        if name not in self._NAMES:
            raise DomainError(f"unknown quantity {name!r}; known: {list(self._NAMES)}")
        arr = getattr(self, name)
        if name in ("phi", "g", "gtilde"):
            if layer is None:
                return arr
            if isinstance(layer, bool) or layer not in self.layers:
                raise DomainError(f"layer={layer!r} is not held; layers are {list(self.layers)}")
            return arr[:, int(layer) - 1]
        if layer is not None:
            raise DomainError(f"{name!r} has no layers")
        return arr

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """Seed mean of ``name`` (``'f'``, ``'loss'``, ``'phi'``, ``'g'``, ``'gtilde'``, ``'ntk'``,
        ``'corr'``), per layer for the kernels (``layer=None``: all layers)."""
        return self._raw(name, layer).mean(axis=0)

    def stderr(self, name: str, layer: int | None = None):
        """Seed-to-seed standard error of :meth:`value` (``None`` for one network)."""
        a = self._raw(name, layer)
        if a.shape[0] < 2:
            return None
        return a.std(axis=0, ddof=1) / np.sqrt(a.shape[0])

    def __repr__(self) -> str:
        return (f"RuleTrainingRun(rule={self.rule!r}, rho={self.rho:g}, {depth_text(self.depth)}, "
                f"widths={self.width}, networks={self.networks}, loss[-1]={self.loss[:, -1].mean():.4g})")

    def _repr_html_(self) -> str:
        return html_table("Learning-rule training", [
            ("rule", self.rule), ("rho", f"{self.rho:g}"), ("L", self.hidden_layers),
            ("N", self.width), ("networks", self.networks),
            ("loss (mean)", short(self.loss.mean(axis=0)[[0, -1]]))])


@public
@limits_blas_threads
def simulate_rule_training(X, y, *, rule="gd", rho=None, depth: int | None = None,
                           hidden_layers: int | None = None, widths, gamma0: float, eta: float,
                           steps: int, activation="linear", seed=0, networks: int | None = None,
                           X_test=None,
                           center: bool = True, record_kernels: bool = True,
                           progress: bool | None = None, weight_decay: float = 0.0,
                           momentum: float = 0.0, temperature: float = 0.0) -> RuleTrainingRun:
    """Train width-``N`` networks by a learning rule and record outputs, kernels and eNTKs.

    Parameters
    ----------
    X : array_like, shape (P, D)
    y : array_like, shape (P,) or (P, C)
        Targets; 2-D for ``C`` outputs (Bordelon & Pehlevan, ICLR 2023, App. C.1): readout
        ``w^L`` of shape ``(N, C)``, ρ-FA's top feedback and DFA's vectors ``(N, C)``, Hebb's
        ``g~^l_{mu c} = Delta_{mu c} a^l_mu``; then ``f`` is ``(S, T, n, C)``, ``g``, ``gtilde``
        ``(S, L, T, n, T, n, C, C)`` and ``ntk`` ``(S, T, n, n, C, C)``.
    rule : str or rule object
        ``'gd'``, ``'fa'``, ``'dfa'``, ``'hebb'``, ``'gln'`` or an object with ``.name`` and
        ``.rho`` (:func:`effth.dmft.learning_rule`).
    rho : float, optional
        Feedback alignment of ``'fa'`` in ``[-1, 1]`` (default 0).
    depth, hidden_layers : int
        Give exactly one.
    widths : int or sequence of int
        Hidden width ``N``, or one width ``N_l`` per hidden layer (Bordelon & Pehlevan (2022),
        App. D.8), as in :func:`~effth.simulation.simulate_training`: the reference width is
        ``N = N_L`` (readout ``f = w^L . a^L / (gamma0 N_L)``), each layer's multiplier is
        ``1 / sqrt(fan-in)``, ``g^l = gamma0 sqrt(N N_l) df/dh^l`` (so layer ``l`` feels
        ``gamma0 / sqrt(N_l / N)``), the update of ``W^l`` carries ``sqrt(N / N_{l+1})`` and the
        kernels are normalized by their own layer's width.  The rule's pseudo-gradients follow
        the same widths: ρ-FA's ``B^l`` has the shape of ``W^l`` and backpropagates with
        ``1 / sqrt(N_{l+1})``, DFA's ``z~^l`` has ``N_l`` entries.
    gamma0 : float
        Richness (nonzero).
    eta : float
        Euler step (module docstring).
    steps : int
        Recorded steps ``T`` (``T - 1`` updates); ``steps=1`` gives the networks at
        initialization (the empirical eNTK of Table 2's lazy limit).
    activation : str, Activation or sympy.Expr
        ``phi``; for ``'gln'`` the gate factor is ``phi'`` (``'relu'``: step gates).
    seed : int, sequence of int, SeedSequence or Generator
        One network per seed.
    networks : int, optional
        Train this many networks, seeded by ``SeedSequence(seed).spawn(networks)`` (as
        :func:`~effth.simulation.simulate_training`).
    X_test : array_like, shape (Q, D), optional
    center : bool
        Train and report ``f - f(theta_0)`` (removes the ``O(1 / (gamma0 sqrt N))`` initial
        output, which is 0 at infinite width; updates unchanged).
    record_kernels : bool
        Two-time kernels (memory ``S L (T n)^2``), else equal-time only.
    progress : bool or None
        Progress bar over networks.
    weight_decay : float
        ``lambda >= 0`` with ``eta lambda < 1``: every trained weight (``W^0 .. W^{L-1}``,
        ``w^L``; not the frozen feedback of ``'fa'``/``'dfa'`` nor the gates) is multiplied by
        ``1 - eta lambda`` per step (Bordelon & Pehlevan, ICLR 2023, App. C, eq. (50)).
    momentum : float
        Heavy-ball coefficient ``mu`` in ``[0, 1)`` (App. C, eqs. (51)-(53)):
        ``v <- mu v + (1 - mu) (u - eta lambda theta)``, ``theta <- theta + v`` around the
        rule's increment ``u``.  Both use the per-parameter update of
        :func:`~effth.simulation.simulate_training` (one optimizer for every trainer).
    temperature : float
        Langevin temperature ``1 / beta >= 0`` (Bordelon & Pehlevan (2022), App. K, eq. (100)),
        with the meaning it has in :func:`~effth.simulation.simulate_training`: every trained
        weight gets independent Gaussian noise of variance
        :func:`effth._langevin.langevin_noise` per step (``temperature (1 - rho^2) /
        weight_decay``, ``rho = 1 - eta weight_decay``; ``2 eta temperature`` without decay;
        inside the heavy-ball increment with momentum), drawn from the network's generator after
        its initial weights and frozen feedback (these are unchanged).  The frozen feedback of
        ``'fa'``/``'dfa'`` and the gates of ``'gln'`` get none.  ``rule='gd'`` reproduces
        :func:`~effth.simulation.simulate_training`'s noisy networks, seed for seed.
    """
    name, r = _rule(rule, rho)
    L = resolve_depth(depth, hidden_layers, minimum=2) - 1
    X = real_array(X, "X", finite=True)
    if X.ndim != 2:
        raise DomainError(f"X must be (P, D), got shape {X.shape}")
    Y = real_array(y, "y", finite=True)
    if Y.ndim not in (1, 2) or Y.shape[0] != X.shape[0] or Y.size == 0:
        raise DomainError(f"y must have shape ({X.shape[0]},) or ({X.shape[0]}, C), got shape "
                          f"{Y.shape}")
    if X_test is not None:
        Xt = real_array(X_test, "X_test", finite=True)
        if Xt.ndim != 2 or Xt.shape[1] != X.shape[1]:
            raise DomainError(f"X_test must be (Q, {X.shape[1]}), got shape {Xt.shape}")
        Xall = np.vstack([X, Xt])
    else:
        Xall = X
    Ns = _resolve_widths(widths, L)
    width = Ns[0] if len(set(Ns)) == 1 else Ns
    g0 = real_scalar(gamma0, "gamma0")
    eta = real_scalar(eta, "eta")
    if not np.isfinite(g0) or g0 == 0:
        raise DomainError(f"gamma0={gamma0!r} must be finite and nonzero")
    if not np.isfinite(eta) or eta < 0:
        raise DomainError(f"eta={eta!r} must be finite and >= 0")
    T = integer(steps, "steps", minimum=1)
    lam = real_scalar(weight_decay, "weight_decay")
    if not (np.isfinite(lam) and 0 <= eta * lam < 1 and lam >= 0):
        raise DomainError(f"weight_decay={weight_decay!r} must satisfy lambda >= 0 and "
                          "0 <= eta * weight_decay < 1")
    temp, mu = _optimizer_settings(temperature, momentum)
    from effth._validate import check_memory
    n_all, d_in = float(Xall.shape[0]), float(Xall.shape[1])
    cc = 1.0 if Y.ndim == 1 else float(Y.shape[1]) ** 2          # C x C gradient kernels
    N_ = float(max(Ns))
    check_memory(8.0 * (3 * L * N_ * N_ + N_ * d_in + (2 * L * T * T * n_all * n_all * cc
                                                       if record_kernels is True else 0)),
                 f"one network of width {width} with {L} hidden layers over {T} steps",
                 "lower widths or steps (record_kernels=False drops the two-time kernels)")
    _, (act, dact) = _resolve_callables(activation)
    seeds = _resolve_seeds(seed, networks)
    out = []
    with progress_bar(len(seeds), f"training {name} networks", progress=progress,
                      unit="net") as bar:
        for s in seeds:
            try:
                out.append(_train_one(Xall, Y, L, Ns, g0, eta, T, act, dact, name, r, s, center,
                                      record_kernels, lam, mu, temp))
            except FloatingPointError:
                raise DomainError(
                    f"training diverged (overflow) for seed {s!r}: rule={name!r}, eta={eta:g}, "
                    f"gamma0={g0:g}; use a smaller eta or gamma0") from None
            bar.update(1)
    f, loss, phi, g, gt, ntk, corr = (np.stack(a) for a in zip(*out))
    return RuleTrainingRun(rule=name, rho=r, f=f, loss=loss, phi=phi, g=g, gtilde=gt, ntk=ntk,
                           corr=corr, hidden_layers=L, width=width, gamma0=g0, eta=eta,
                           seeds=tuple(seeds), temperature=temp)


def _train_one(X, Y, L, Ns, g0, eta, T, act, dact, rule, rho, seed, center, record,
               weight_decay=0.0, momentum=0.0, temperature=0.0):
    """One network; ``Y`` is ``(P,)`` or ``(P, C)`` (``C`` outputs: readout ``w^L`` of shape
    ``(N, C)``, one true gradient ``g^l_c`` and pseudo-gradient ``g~^l_c`` per output).  ``Ns``
    holds the hidden widths ``(N_1, .., N_L)``; the reference width is ``N = N_L`` (App. D.8)."""
    n, D = X.shape
    multi = Y.ndim == 2
    Ym = Y if multi else Y[:, None]
    P, C = Ym.shape
    Ns = (Ns,) * L if np.ndim(Ns) == 0 else tuple(Ns)
    N = Ns[-1]
    rng = np.random.default_rng(seed)
    # the optimizer of simulate_training: decay, momentum and Langevin noise on trained weights
    opt = _Optimizer(eta, weight_decay, temperature, momentum, rng)
    out_shape = (N, C) if multi else (N,)
    W0 = rng.standard_normal((Ns[0], D))
    Ws = [rng.standard_normal((Ns[k + 1], Ns[k])) for k in range(L - 1)]
    w = rng.standard_normal(out_shape).reshape(N, C)
    if rule == "fa":                                  # frozen feedback, correlated by rho
        c = np.sqrt(max(0.0, 1.0 - rho * rho))
        Bs = [rho * W + c * rng.standard_normal(W.shape) for W in Ws]
        b_top = rho * w + c * rng.standard_normal(out_shape).reshape(N, C)
    elif rule == "dfa":
        zt = [rng.standard_normal((Nk, C) if multi else (Nk,)).reshape(Nk, C) for Nk in Ns]
    elif rule == "gln":
        gates = [dact(rng.standard_normal((Nk, D)) @ X.T / np.sqrt(D)).T for Nk in Ns]
    sD = 1.0 / np.sqrt(D)
    sNs = [1.0 / np.sqrt(Nk) for Nk in Ns]            # multiplier 1 / sqrt(fan-in) of W^l
    # the learning-rate factor sqrt(N / N_{l+1}) of the weights into layer l + 1 (1 at equal widths)
    lr = [eta * g0 if Nk == N else eta * g0 * np.sqrt(N / Nk) for Nk in Ns]
    kx = X @ X.T / D
    feats = [np.zeros((T, n, Nk)) for Nk in Ns]
    grads = [[np.zeros((T, n, Nk)) for Nk in Ns] for _ in range(C)]
    pgrads = [[np.zeros((T, n, Nk)) for Nk in Ns] for _ in range(C)]
    f_rec = np.zeros((T, n, C))
    ntk = np.zeros((T, n, n, C, C))
    corr = np.zeros(T)
    f0 = None
    with np.errstate(over="raise", invalid="raise"):
        for t in range(T):
            if rule == "gln":                         # gated forward: a^l = phi'(m^l) h^l
                h = [X @ W0.T * sD]
                a = [gates[0] * h[0]]
                for ell in range(L - 1):
                    h.append(a[-1] @ Ws[ell].T * sNs[ell])
                    a.append(gates[ell + 1] * h[-1])
                q = gates
            else:                                     # the shared batched pass
                layers = [W0[None]] + [W[None] for W in Ws] + [w[None, None, :, 0]]
                fp = _mlp.forward(layers, [None] * (L + 1), X, act, dact,
                                  scales=(sD,) + tuple(sNs[:-1]) + (1.0 / (g0 * N),))
                h = [z[0] for z in fp.z[:-1]]
                a = [s[0] for s in fp.s[1:]]
                q = [d[0] for d in fp.ds]
            f = np.stack([a[-1] @ w[:, k] / (g0 * N) for k in range(C)], axis=1)
            if f0 is None:
                f0 = f.copy() if center else np.zeros((n, C))
            f = f - f0
            f_rec[t] = f
            delta = np.zeros((n, C))
            delta[:P] = Ym - f[:P]
            # per output: true gradients g^l_c = gamma0 sqrt(N N_l) df_c/dh^l and the rule's
            # pseudo-gradients
            gs, gts = [], []
            for k in range(C):
                g = [None] * L
                g[L - 1] = q[L - 1] * w[:, k]
                for ell in range(L - 2, -1, -1):
                    g[ell] = q[ell] * (g[ell + 1] @ Ws[ell]) * sNs[ell + 1]
                if rule in ("gd", "gln"):
                    gt = g
                elif rule == "fa":
                    gt = [None] * L
                    gt[L - 1] = q[L - 1] * b_top[:, k]
                    for ell in range(L - 2, -1, -1):
                        gt[ell] = q[ell] * (gt[ell + 1] @ Bs[ell]) * sNs[ell + 1]
                elif rule == "dfa":
                    gt = [q[ell] * zt[ell][:, k] for ell in range(L)]
                else:                                 # Hebb: g~_mu c = Delta_mu c a_mu
                    gt = [delta[:, k, None] * a[ell] for ell in range(L)]
                gs.append(g)
                gts.append(gt)
            AA = np.array(a[-1] @ a[-1].T / N)
            for k in range(C):
                for k2 in range(C):
                    K = AA.copy() if k == k2 else np.zeros((n, n))
                    K += (gs[k][0] @ gts[k2][0].T / Ns[0]) * kx
                    for ell in range(1, L):
                        K += ((gs[k][ell] @ gts[k2][ell].T / Ns[ell])
                              * (a[ell - 1] @ a[ell - 1].T / Ns[ell - 1]))
                    ntk[t, :, :, k, k2] = K
            num = np.stack([np.stack([np.sum(gs[k][ell][:P] * gts[k][ell][:P], axis=-1)
                                      for ell in range(L)]) for k in range(C)])
            den = np.stack([np.stack([np.linalg.norm(gs[k][ell][:P], axis=-1)
                                      * np.linalg.norm(gts[k][ell][:P], axis=-1)
                                      for ell in range(L)]) for k in range(C)])
            corr[t] = float(np.mean(np.divide(num, den, out=np.zeros_like(num), where=den > 0)))
            for ell in range(L):
                feats[ell][t] = a[ell]
                for k in range(C):
                    grads[k][ell][t], pgrads[k][ell][t] = gs[k][ell], gts[k][ell]
            if t == T - 1:
                break
            w = opt.step("w", w, np.stack([lr[-1] * (a[-1].T @ delta[:, k]) for k in range(C)],
                                          axis=1))
            back = [sum(gts[k][ell] * delta[:, k, None] for k in range(C)) for ell in range(L)]
            for ell in range(L - 1):
                Ws[ell] = opt.step(("W", ell), Ws[ell],
                                   lr[ell + 1] * sNs[ell] * back[ell + 1].T @ a[ell])
            W0 = opt.step("W0", W0, lr[0] * sD * back[0].T @ X)
    loss = 0.5 * np.sum((Ym[None] - f_rec[:, :P]) ** 2, axis=(1, 2))
    idx = np.arange(T)

    def cross(A, B):
        """Two-time (or equal-time) kernels of per-layer fields, each over its own width."""
        if record:
            return np.stack([np.einsum("tan,sbn->tasb", x, z, optimize=True) / Nk
                             for x, z, Nk in zip(A, B, Ns)])
        out = np.zeros((L, T, n, T, n))
        for ell, (x, z, Nk) in enumerate(zip(A, B, Ns)):
            out[ell, idx, :, idx, :] = np.einsum("tan,tbn->tab", x, z) / Nk
        return out

    phi = cross(feats, feats)
    if not multi:
        return (f_rec[..., 0], loss, phi, cross(grads[0], grads[0]), cross(grads[0], pgrads[0]),
                ntk[..., 0, 0], corr)
    gg = np.stack([np.stack([cross(grads[k], grads[k2]) for k2 in range(C)], -1)
                   for k in range(C)], -2)
    gtt = np.stack([np.stack([cross(grads[k], pgrads[k2]) for k2 in range(C)], -1)
                    for k in range(C)], -2)
    return f_rec, loss, phi, gg, gtt, ntk, corr
