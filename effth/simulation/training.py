"""Finite-width networks trained by full-batch gradient descent: the ground truth of the DMFT.

The network of Bordelon & Pehlevan (seed 000, eq. (1), (13); spec §1.1-§1.2, §1.7), with ``L``
hidden layers of width ``N`` and no biases:

``h^1 = W^0 x / sqrt(D)``, ``h^{l+1} = m W^l phi(h^l)``, ``f = m w^L . phi(h^L) / gamma``,
``gamma = gamma0 sqrt(N)``, loss ``1/2 sum_mu (f_mu - y_mu)^2``,

trained by full-batch GD.  Two equivalent parameterizations (spec §1.7, exact at any ``N``):

* ``'mean_field'`` (the seed's): ``m = 1/sqrt(N)``, all weights ``N(0, 1)``, parameter learning
  rate ``eta gamma0^2 N``;
* ``'mup'``: ``m = 1``, hidden and readout weights ``N(0, 1/N)``, learning rate ``eta gamma0^2``
  for them (``eta gamma0^2 N`` for the input layer, whose parameterization is shared).

One GD step is one DMFT grid step ``t -> t + eta``.  Recorded at every step (before the update):
outputs, loss, the feature and gradient fields from which the kernels
``Phi^l(t, s) = phi(h^l(t)) . phi(h^l(s)) / N`` and ``G^l(t, s) = g^l(t) . g^l(s) / N`` with
``g^l = gamma0 N df/dh^l`` (seed eq. (16)) are formed, and the NTK
``K(t, t) = sum_l G^{l+1} Phi^l`` (seed eq. (19)).

NumPy only: this module never imports theory code (it is the ground truth).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DomainError

__all__ = ["ACTIVATIONS", "TrainingRun", "simulate_training"]


def _relu(z):
    return np.maximum(z, 0.0)


#: activation name -> (phi, phi')
ACTIVATIONS = {
    "linear": (lambda z: z, lambda z: np.ones_like(z)),
    "tanh": (np.tanh, lambda z: 1.0 - np.tanh(z) ** 2),
    "relu": (_relu, lambda z: (z > 0).astype(float)),
}


@dataclass
class TrainingRun:
    """Record of GD training of finite-width networks over several seeds.

    Sample axes have length ``n = P + Q`` (training points, then test points); layer
    ``l = 1 .. L`` sits at index ``l - 1``.

    Attributes
    ----------
    f : ndarray, shape (S, T, n) [or (S, T, n, C) for 2-D targets]
        Outputs at steps ``0 .. T-1`` (centred, ``f - f(theta_0)``, if ``center``).
    loss : ndarray, shape (S, T)
        ``1/2 sum_mu (f_mu - y_mu)^2`` over training points.
    phi : ndarray, shape (S, L, T, n, T, n)
        Two-time feature kernels ``Phi^l(t, s)``.
    g : ndarray, shape (S, L, T, n, T, n) [or (S, L, T, n, T, n, C, C)]
        Two-time gradient kernels ``G^l(t, s)`` (``G^{l, c c'}`` for ``C`` outputs, seed App. I).
    ntk : ndarray, shape (S, T, n, n) [or (S, T, n, n, C, C)]
        Equal-time NTK ``sum_{l=0}^{L} G^{l+1}(t,t) Phi^l(t,t)`` (``Phi^0 = K^x``, ``G^{L+1} = 1``;
        ``+ sum_l G^l`` with biases; ``Phi^L delta_{c c'}`` for several outputs, seed eq. (95));
        for the mean-field parameterization it equals ``gamma^2 grad f . grad f``.
    kx : ndarray, shape (n, n)
        ``X X^T / D``.
    width, depth, gamma0, eta, seeds
        The settings used.
    h : ndarray, shape (S, L, T, n, N), or None
        Preactivations of every neuron (``record_preactivations=True``).
    """

    f: np.ndarray
    loss: np.ndarray
    phi: np.ndarray
    g: np.ndarray
    ntk: np.ndarray
    kx: np.ndarray
    width: int
    depth: int
    gamma0: float
    eta: float
    seeds: tuple
    h: np.ndarray | None = None

    def mean(self, name: str) -> np.ndarray:
        """Average over seeds of ``'f'``, ``'loss'``, ``'phi'``, ``'g'`` or ``'ntk'``."""
        return getattr(self, name).mean(axis=0)

    def stderr(self, name: str) -> np.ndarray:
        """Standard error over seeds (0 for a single seed)."""
        x = getattr(self, name)
        if x.shape[0] < 2:
            return np.zeros(x.shape[1:])
        return x.std(axis=0, ddof=1) / np.sqrt(x.shape[0])


def simulate_training(X, y, *, depth: int, width: int, gamma0: float, eta: float, steps: int,
                      activation: str = "tanh", seeds=(0,), X_test=None,
                      parameterization: str = "mean_field", center: bool = True,
                      record_kernels: bool = True, weight_decay: float = 0.0,
                      bias: bool = False, record_preactivations: bool = False) -> TrainingRun:
    """Train width-``N`` networks by full-batch GD and record outputs and kernels.

    Parameters
    ----------
    X : array_like, shape (P, D)
        Training inputs.
    y : array_like, shape (P,) or (P, C)
        Targets; a 2-D ``y`` trains ``C`` outputs ``f_c = m w^L_c . phi(h^L) / gamma`` (seed
        App. I), and the output axis ``c`` is appended to ``f`` and (as ``c, c'``) to ``g``, ``ntk``.
    depth : int
        Number of hidden layers ``L``.
    width : int
        ``N``.
    gamma0 : float
        Feature-learning strength (``gamma = gamma0 sqrt(N)``); must be nonzero.
    eta : float
        DMFT time step; the parameter learning rate is ``eta gamma0^2 N`` (mean field).
    steps : int
        Number of recorded steps ``T`` (``T - 1`` updates).
    activation : {'linear', 'tanh', 'relu'}
    seeds : iterable of int
        One independent initialization per seed (``numpy.random.default_rng(seed)``).
    X_test : array_like, shape (Q, D), optional
        Test inputs, recorded but not trained on.
    parameterization : {'mean_field', 'mup'}
        See the module docstring; both give the same trajectories up to rounding.
    center : bool
        Train and report the centred output ``f(theta) - f(theta_0)`` (spec §8 #22: removes the
        ``O(1/(gamma0 sqrt N))`` initial offset, which the DMFT sets to 0; gradients unchanged).
    record_kernels : bool
        Form the two-time kernels (memory ``S L (T n)^2``); else ``phi`` and ``g`` hold only the
        equal-time diagonal blocks in the same layout (other entries zero).
    weight_decay : float
        ``lambda >= 0``: each GD step is ``theta <- (1 - eta lambda) theta + lr * grad`` for every
        parameter (the discrete form of ``d theta/dt = -gamma^2 grad L - lambda theta``, seed
        App. J).  With ``center`` the constant ``f(theta_0)`` is still subtracted.
    bias : bool
        Trainable biases on every preactivation, ``h^{l} += b^{l}`` (``l = 1 .. L``), ``b(0) ~ N(0, 1)``,
        learning rate ``eta gamma0^2 N`` in both parameterizations (seed App. H:
        ``db/dt = gamma0 sum_mu Delta_mu g_mu``); each adds ``G^l`` to the NTK (spec §8 #25).  For
        ``L = 1`` this is the input-kernel shift ``K^x -> K^x + 1``.
    record_preactivations : bool
        Keep every neuron's preactivation ``h^l_{mu i}(t)`` (``TrainingRun.h``, memory
        ``S L T n N``) -- the finite-width counterpart of the DMFT's single-site fields (seed
        Fig. 1b-c).

    Returns
    -------
    TrainingRun
    """
    if activation not in ACTIVATIONS:
        raise DomainError(f"activation {activation!r} not simulated; choose from {sorted(ACTIVATIONS)}")
    if parameterization not in ("mean_field", "mup"):
        raise DomainError(f"parameterization={parameterization!r}: use 'mean_field' or 'mup'")
    if not (np.isfinite(gamma0) and gamma0 != 0):
        raise DomainError(f"gamma0={gamma0!r} must be finite and nonzero (output factor 1/gamma0)")
    if not (np.isfinite(eta) and eta > 0):
        raise DomainError(f"eta={eta!r} must be positive")
    if not (np.isfinite(weight_decay) and 0 <= eta * weight_decay < 1):
        raise DomainError(f"weight_decay={weight_decay!r} must satisfy 0 <= eta * weight_decay < 1")
    if int(depth) != depth or depth < 1 or int(width) != width or width < 1:
        raise DomainError(f"depth={depth!r} and width={width!r} must be positive integers")
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    if X.ndim != 2 or y.ndim not in (1, 2) or y.shape[0] != X.shape[0]:
        raise DomainError(f"X must be (P, D) and y (P,) or (P, C), got {X.shape} and {y.shape}")
    multi = y.ndim == 2
    Y = y.reshape(y.shape[0], -1)
    if X_test is not None:
        X = np.vstack([X, np.asarray(X_test, dtype=float)])
    seeds = tuple(int(s) for s in seeds)
    runs = [_train_one(X, Y, int(depth), int(width), float(gamma0), float(eta), int(steps),
                       activation, s, parameterization, center, record_kernels,
                       float(weight_decay), bool(bias), bool(record_preactivations))
            for s in seeds]
    f, loss, phi, g = (np.stack([r[k] for r in runs]) for k in range(4))
    h = np.stack([r[4] for r in runs]) if record_preactivations else None
    kx = X @ X.T / X.shape[1]
    T, C = int(steps), Y.shape[1]
    idx = np.arange(T)
    phid = phi[:, :, idx, :, idx, :].transpose(1, 2, 0, 3, 4)       # (S, L, T, n, n)
    gd = g[:, :, idx, :, idx, :].transpose(1, 2, 0, 3, 4, 5, 6)     # (S, L, T, n, n, C, C)
    one = 1.0 if bias else 0.0
    ntk = gd[:, 0] * (kx + one)[..., None, None] + phid[:, -1][..., None, None] * np.eye(C)
    for ell in range(1, depth):
        ntk = ntk + gd[:, ell] * (phid[:, ell - 1] + one)[..., None, None]
    if not multi:
        f, g, ntk = f[..., 0], g[..., 0, 0], ntk[..., 0, 0]
    return TrainingRun(f=f, loss=loss, phi=phi, g=g, ntk=ntk, kx=kx, width=int(width),
                       depth=int(depth), gamma0=float(gamma0), eta=float(eta), seeds=seeds, h=h)


def _train_one(X, Y, L, N, gamma0, eta, T, activation, seed, parameterization, center, record,
               weight_decay=0.0, bias=False, keep_h=False):
    act, dact = ACTIVATIONS[activation]
    n, D = X.shape
    P, C = Y.shape
    rng = np.random.default_rng(seed)
    mf = parameterization == "mean_field"
    # weights drawn identically in both parameterizations (so trajectories can be compared)
    W0 = rng.standard_normal((N, D))
    Ws = [rng.standard_normal((N, N)) for _ in range(L - 1)]
    w = rng.standard_normal(N) if C == 1 else rng.standard_normal((N, C))
    w = w.reshape(N, C)
    bs = [rng.standard_normal(N) if bias else np.zeros(N) for _ in range(L)]
    m = 1.0 / np.sqrt(N) if mf else 1.0
    if not mf:
        Ws = [W / np.sqrt(N) for W in Ws]
        w = w / np.sqrt(N)
    lr = eta * gamma0 ** 2 * N if mf else eta * gamma0 ** 2
    lr0 = eta * gamma0 ** 2 * N
    inv_gamma = 1.0 / (gamma0 * np.sqrt(N))
    rho = 1.0 - eta * weight_decay
    feats = np.zeros((L, T, n, N))
    pre = np.zeros((L, T, n, N)) if keep_h else None
    grads = np.zeros((L, T, n, N, C))
    f_rec = np.zeros((T, n, C))
    f0 = None
    with np.errstate(over="raise", invalid="raise"):
        for t in range(T):
            hs = [X @ W0.T / np.sqrt(D) + bs[0]]
            for ell, W in enumerate(Ws):
                hs.append(m * act(hs[-1]) @ W.T + bs[ell + 1])
            phis = [act(h) for h in hs]
            f = m * inv_gamma * phis[-1] @ w                                  # (n, C)
            if f0 is None:
                f0 = f.copy() if center else np.zeros((n, C))
            f = f - f0
            # backprop e^l_c = df_c/dh^l, shape (n, N, C)
            es = [None] * L
            es[-1] = dact(hs[-1])[:, :, None] * (m * inv_gamma * w)[None]
            for ell in range(L - 2, -1, -1):
                es[ell] = dact(hs[ell])[:, :, None] * (m * np.matmul(Ws[ell].T, es[ell + 1]))
            f_rec[t] = f
            for ell in range(L):
                feats[ell, t] = phis[ell]
                if keep_h:
                    pre[ell, t] = hs[ell]
                grads[ell, t] = gamma0 * N * es[ell]
            if t == T - 1:
                break
            delta = np.zeros((n, C))
            delta[:P] = Y - f[:P]
            # GD: theta <- rho theta + lr * sum_mu,c Delta_mu,c df_mu,c/dtheta  (rho = 1 - eta lambda)
            back = [np.einsum("mjc,mc->mj", e, delta) for e in es]           # sum_c Delta_c e_c
            w = rho * w + lr * (m * inv_gamma) * (phis[-1].T @ delta)
            for ell in range(L - 1):
                Ws[ell] = rho * Ws[ell] + lr * m * back[ell + 1].T @ phis[ell]
            W0 = rho * W0 + lr0 * back[0].T @ X / np.sqrt(D)
            if bias:
                bs = [rho * b + lr0 * bk.sum(axis=0) for b, bk in zip(bs, back)]
    if not np.all(np.isfinite(f_rec)):
        raise DomainError("training diverged (non-finite outputs); lower eta")
    loss = 0.5 * np.sum((Y[None] - f_rec[:, :P]) ** 2, axis=(1, 2))
    if record:
        phi = np.einsum("ltan,lsbn->ltasb", feats, feats, optimize=True) / N
        g = np.einsum("ltanc,lsbnd->ltasbcd", grads, grads, optimize=True) / N
    else:
        phi = np.zeros((L, T, n, T, n))
        g = np.zeros((L, T, n, T, n, C, C))
        idx = np.arange(T)
        phi[:, idx, :, idx, :] = np.einsum("ltan,ltbn->tlab", feats, feats) / N
        g[:, idx, :, idx, :] = np.einsum("ltanc,ltbnd->tlabcd", grads, grads) / N
    return f_rec, loss, phi, g, pre
