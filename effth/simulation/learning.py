r"""Ensembles of networks trained in the book's parameterization: the ground truth of kernel
learning (PDLT ch. 7 and 10).

Network, PDLT (2.5), (2.19)-(2.20): :math:`z^{(1)}=b^{(1)}+W^{(1)}x`,
:math:`z^{(\ell+1)}=b^{(\ell+1)}+W^{(\ell+1)}\sigma(z^{(\ell)})`, with
:math:`b^{(\ell)}\sim\mathcal N(0,C_b^{(\ell)})` and
:math:`W^{(\ell)}\sim\mathcal N(0,C_W^{(\ell)}/n_{\ell-1})` (no width factors in the forward
pass).  Training: tensorial gradient descent (7.11),
:math:`\theta_\mu\leftarrow\theta_\mu-\eta\sum_\nu\lambda_{\mu\nu}\,d\mathcal L_\mathcal A/d\theta_\nu`,
with the diagonal learning-rate tensor (8.6): :math:`\lambda_b^{(\ell)}` for every bias of layer
:math:`\ell` and :math:`\lambda_W^{(\ell)}/n_{\ell-1}` for every weight of layer :math:`\ell`.  The
NTK of these networks is :math:`\hat H=\sum_{\mu\nu}\lambda_{\mu\nu}\partial_\mu z\,\partial_\nu z`
(7.17)/(8.7), the same tensor :func:`~effth.simulation.empirical_ntk` computes with the same
:math:`\lambda`'s.

The loss is extensive (7.4): MSE :math:`\frac12\sum_{\tilde\alpha,i}(z_{i;\tilde\alpha}-
y_{i;\tilde\alpha})^2` (7.2), or cross-entropy :math:`-\sum_{\tilde\alpha}\sum_i p_{i;\tilde\alpha}
\log\mathrm{softmax}(z_{\tilde\alpha})_i` (10.36); its error factor (7.16) is :math:`\epsilon=z-y`,
resp. :math:`\mathrm{softmax}(z)-p`.  ``method="newton"`` replaces each step by the second-order
update (10.19) with :math:`\eta\kappa=\eta\,\tilde H^{-1}` (Newton's method (10.25), the giant
leap (10.30)), built from each network's own empirical training NTK.

Everything is batched over a leading axis of networks through the pass of
:mod:`effth.simulation._mlp`, in chunks that bound memory, on NumPy or (``backend="jax"``) JAX's
device (:mod:`effth.simulation._backend`).  This module never imports theory code.  See
``docs/training.md``.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import log_softmax

from .._display import activation_text, depth_text, html_table, short
from .._progress import progress_bar
from .._threads import blas_threads
from .._validate import check_memory, integer
from effth.arch import MLP
from effth.arch._common import as_real
from ..errors import DomainError
from . import _mlp
from ._backend import activation as _backend_activation, resolve as _resolve_backend
from ._inputs import as_generator
from ._jackknife import MAX_GROUPS, jackknife_error
from .ntk import init_params
from .training import _real_array, _real_scalar, _resolve_callables

__all__ = ["TrainedEnsemble", "train_ensemble"]

#: Target number of float64 elements in the largest per-chunk temporary.
_CHUNK_ELEMENTS = 1 << 22

#: a network whose training loss exceeds this multiple of max(initial loss, |y|^2 / 2) diverged
_RUNAWAY = 1e6

_NAMES = ("f", "loss", "ntk", "mean", "covariance")

_LINEAR = (lambda z: z, lambda z: np.ones_like(z))


@public
@dataclass(frozen=True, eq=False)
class TrainedEnsemble:
    r"""Outputs of an ensemble of independently initialized networks trained on the same data.

    Raw arrays carry a leading network axis ``S``; ``T`` is the number of recorded steps
    (``recorded``: the update counts recorded, ``0`` and the last always included); ``C = n_out`` (the
    trailing output axis is dropped when ``n_out = 1``).

    Attributes
    ----------
    f_train : ndarray (S, T, P[, C])
        Outputs :math:`z^{(L)}` on the training inputs.
    f_test : ndarray (S, T, Q[, C])
        Outputs on the test inputs (``Q = 0`` without ``X_test``).
    loss : ndarray (S, T)
        Training loss :math:`\mathcal L_\mathcal A` (extensive, (7.4)).
    recorded : ndarray (T,) of int
        Recorded step numbers (number of updates done before the record).
    ntk : ndarray (S, T, n, n[, C, C]) or None
        Empirical NTK (8.7) on train-then-test inputs (``record_ntk=True``).
    net : MLP
        The architecture trained.
    eta, lambda_b, lambda_w, method, loss_kind
        The settings (``lambda_*``: one value per weight layer ``1..L``).

    Notes
    -----
    Read like every effth result (``docs/conventions.md``): ``value(name, step=None)``,
    ``stderr(name, step=None)``, ``layers == ()``.  Names:

    * ``"f"`` ``(T, n[, C])``: mean over networks, train points then test points;
    * ``"loss"`` ``(T,)``; ``"ntk"`` ``(T, n, n[, C, C])`` if recorded;
    * ``"mean"`` ``(Q[, C])``: ensemble mean of the test outputs at the last step (or at
      ``step=``; ``step=0`` is the initialization);
    * ``"covariance"`` ``(Q, Q[, C, C])``: ensemble covariance across networks of the test
      outputs, :math:`\mathrm{Cov}[z_{i;\dot\beta_1},z_{j;\dot\beta_2}]` at
      ``[b1, b2, i, j]`` (unbiased, ``ddof=1``); its stderr is the delete-one-group jackknife
      over ``K = min(32, S // 2)`` contiguous blocks of networks.

    With ``step=`` a time-dependent name is read at that recorded step (no time axis).
    """

    f_train: np.ndarray
    f_test: np.ndarray
    loss: np.ndarray
    recorded: np.ndarray
    net: MLP
    eta: float
    lambda_b: tuple
    lambda_w: tuple
    method: str
    loss_kind: str
    ntk: np.ndarray | None = None

    # ------------------------------------------------------------------ metadata
    @property
    def depth(self) -> int:
        """Number of weight layers :math:`L` (output included)."""
        return self.net.depth

    @property
    def hidden_layers(self) -> int:
        """``depth - 1``."""
        return self.net.depth - 1

    @property
    def widths(self) -> tuple:
        """Hidden widths :math:`n_1..n_{L-1}`."""
        return self.net.widths

    @property
    def layers(self) -> tuple:
        """``()``: the recorded quantities have no layer axis."""
        return ()

    @property
    def networks(self) -> int:
        """Number of trained networks ``S``."""
        return int(self.f_train.shape[0])

    @property
    def outputs(self) -> int:
        """Output width ``C = n_out``."""
        return self.net.n_out

    @property
    def n_train(self) -> int:
        return int(self.f_train.shape[2])

    @property
    def n_test(self) -> int:
        return int(self.f_test.shape[2])

    # ------------------------------------------------------------------ reading
    def _step_index(self, step) -> int | None:
        if step is None:
            return None
        if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
            raise DomainError(f"step={step!r} must be an int, one of the recorded steps")
        hit = np.nonzero(self.recorded == int(step))[0]
        if hit.size == 0:
            raise DomainError(f"step={step!r} was not recorded; recorded steps: "
                              f"{short(int(s) for s in self.recorded)}")
        return int(hit[0])

    def _raw(self, name: str, layer, step) -> np.ndarray:
        """``(S, ...)`` samples of ``name`` (a time axis unless ``step`` is given)."""
        if not isinstance(name, str) or name not in _NAMES:
            raise DomainError(f"unknown quantity name={name!r}; choose from {list(_NAMES)}")
        if layer is not None:
            raise DomainError(f"{name!r} has no layer axis (layers == ()); drop layer={layer!r}")
        i = self._step_index(step)
        if name == "f":
            x = np.concatenate([self.f_train, self.f_test], axis=2)
        elif name == "loss":
            x = self.loss
        elif name == "ntk":
            if self.ntk is None:
                raise DomainError("the NTK was not recorded; pass record_ntk=True to train_ensemble")
            x = self.ntk
        else:
            if self.n_test == 0:
                raise DomainError(f"{name!r} is a statistic of the test outputs; pass X_test= to "
                                  "train_ensemble")
            x = self.f_test[:, -1 if i is None else i]
            return x
        return x if i is None else x[:, i]

    def value(self, name: str, layer: int | None = None, step: int | None = None) -> np.ndarray:
        """Ensemble mean of ``name``, or for ``"covariance"`` the ensemble covariance (see the
        class notes); ``step`` picks one recorded step (default: all for ``"f"``, ``"loss"``,
        ``"ntk"``, the last one for ``"mean"`` and ``"covariance"``)."""
        x = self._raw(name, layer, step)
        if name == "covariance":
            return _covariance(x)
        return x.mean(axis=0)

    def mean(self, name: str, layer: int | None = None, step: int | None = None) -> np.ndarray:
        """Alias of :meth:`value`."""
        return self.value(name, layer, step)

    def stderr(self, name: str, layer: int | None = None, step: int | None = None):
        """Standard error of :meth:`value`: ``std / sqrt(S)`` over networks (``None`` for one
        network); for ``"covariance"`` the delete-one-group jackknife over
        ``K = min(32, S // 2)`` blocks of networks (``None`` for ``S < 4``)."""
        x = self._raw(name, layer, step)
        S = x.shape[0]
        if name == "covariance":
            if S < 4:
                return None
            K = min(MAX_GROUPS, S // 2)
            bounds = np.linspace(0, S, K + 1).round().astype(int)
            loo = np.stack([_covariance(np.concatenate([x[:bounds[k]], x[bounds[k + 1]:]]))
                            for k in range(K)])
            return jackknife_error(loo)
        if S < 2:
            return None
        return x.std(axis=0, ddof=1) / np.sqrt(S)

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        C = f", outputs={self.outputs}" if self.outputs > 1 else ""
        return (f"TrainedEnsemble(networks={self.networks}, {depth_text(self.depth)}, widths={short(self.widths or ())}, "
                f"activation={activation_text(self.net.act)}, method={self.method!r}, loss={self.loss_kind!r}, "
                f"eta={self.eta:g}, updates={int(self.recorded[-1])}, train={self.n_train}, "
                f"test={self.n_test}{C})")

    def _repr_html_(self) -> str:
        rows = [("networks", self.networks), ("depth", self.depth),
                ("hidden_layers", self.hidden_layers), ("widths", short(self.widths or ())),
                ("activation", activation_text(self.net.act)), ("c_w, c_b", f"{short(self.net.c_w)}, "
                                                          f"{short(self.net.c_b)}"),
                ("lambda_b, lambda_w", f"{short(self.lambda_b)}, {short(self.lambda_w)}"),
                ("method, loss", f"{self.method}, {self.loss_kind}"), ("eta", f"{self.eta:g}"),
                ("updates", int(self.recorded[-1])), ("recorded points", len(self.recorded)),
                ("train / test points", f"{self.n_train} / {self.n_test}"),
                ("outputs", self.outputs),
                ("final training loss (mean)", f"{float(self.loss[:, -1].mean()):.4g}")]
        return html_table("TrainedEnsemble", rows)


def _covariance(x: np.ndarray) -> np.ndarray:
    """Unbiased covariance over axis 0 of ``x`` ``(S, Q[, C])``: ``(Q, Q[, C, C])``."""
    S = x.shape[0]
    d = (x - x.mean(axis=0)).reshape(S, -1)
    cov = d.T @ d / (S - 1) if S > 1 else np.full((d.shape[1],) * 2, np.nan)
    if x.ndim == 2:
        return cov
    Q, C = x.shape[1:]
    return cov.reshape(Q, C, Q, C).transpose(0, 2, 1, 3)


# ---------------------------------------------------------------------------- validation
def _rates(value: Any, L: int, name: str) -> tuple:
    if isinstance(value, (str, bytes)):
        raise DomainError(f"{name} must be a number or one number per weight layer ({L})")
    if np.ndim(value) == 0:
        vals = (as_real(value, name),) * L
    else:
        vals = tuple(as_real(v, name) for v in np.asarray(value, dtype=object).ravel())
        if len(vals) != L:
            raise DomainError(f"{name} needs one value or {L} (one per weight layer), "
                              f"got {len(vals)}")
    if not all(np.isfinite(v) and v >= 0 for v in vals):
        raise DomainError(f"{name} must be finite and non-negative, got {vals}")
    return vals


def _targets(y, P: int, C: int, loss: str) -> np.ndarray:
    """Targets as ``(P, C)``: MSE values, or cross-entropy probabilities (labels one-hot)."""
    if loss == "cross_entropy":
        raw = np.asarray(y) if not isinstance(y, np.ndarray) else y
        if raw.ndim == 1 and raw.dtype.kind in "iu":
            if raw.shape[0] != P or raw.min(initial=0) < 0 or raw.max(initial=0) >= C:
                raise DomainError(f"y as class labels must be {P} ints in 0..{C - 1}, got {y!r}")
            return np.eye(C)[raw]
        Y = _real_array(y, "y")
        if Y.shape != (P, C):
            raise DomainError(f"y for cross_entropy must be {P} int labels or ({P}, {C}) "
                              f"probabilities, got shape {Y.shape}")
        if (Y < 0).any() or not np.allclose(Y.sum(axis=1), 1.0, rtol=0, atol=1e-9):
            raise DomainError("y for cross_entropy must hold probabilities (rows >= 0 summing to 1)")
        return Y
    Y = _real_array(y, "y")
    if Y.ndim == 1 and C == 1:
        Y = Y[:, None]
    if Y.shape != (P, C):
        want = f"({P},) or ({P}, 1)" if C == 1 else f"({P}, {C})"
        raise DomainError(f"y must have shape {want} (P = X.shape[0] rows, n_out = {C} "
                          f"columns), got shape {Y.shape}")
    return Y


def _check_params(params, widths: tuple, networks) -> tuple[list, list]:
    """User-given initial parameters ``[(W, b), ...]`` (with or without a network axis)."""
    L = len(widths) - 1
    if not isinstance(params, (list, tuple)) or len(params) != L:
        raise DomainError(f"params must be a list of {L} (W, b) pairs, one per weight layer "
                          "(as returned by init_params)")
    Ws, bs = [], []
    S = None
    for ell, pair in enumerate(params, start=1):
        try:
            W, b = pair
        except (TypeError, ValueError):
            raise DomainError(f"params[{ell - 1}] must be a (W, b) pair") from None
        W = _real_array(W, f"params[{ell - 1}] W")
        b = _real_array(b, f"params[{ell - 1}] b")
        if W.ndim == 2:
            W, b = W[None], b[None]
        want = (widths[ell], widths[ell - 1])
        if W.ndim != 3 or W.shape[1:] != want or b.shape != (W.shape[0], widths[ell]):
            raise DomainError(f"params[{ell - 1}]: W must be {want} and b ({widths[ell]},), with "
                              f"one leading network axis on all or none; got {W.shape}, {b.shape}")
        if S is None:
            S = W.shape[0]
        if W.shape[0] != S:
            raise DomainError("params: every layer must have the same number of networks")
        Ws.append(W)
        bs.append(b)
    if networks is not None and networks != S:
        raise DomainError(f"networks={networks} differs from the {S} networks in params")
    return Ws, bs


# ---------------------------------------------------------------------------- training
def _loss_and_eps(z: np.ndarray, Y: np.ndarray, kind: str):
    """Per-network loss ``(S,)`` and error factor (7.16) ``(S, P, C)``."""
    if kind == "mse":
        eps = z - Y
        return 0.5 * np.sum(eps * eps, axis=(1, 2)), eps
    logq = log_softmax(z, axis=2)
    loss = -np.sum(Y * logq, axis=(1, 2))
    return loss, np.exp(logq) - Y


def _train_ntk(fp, Ws, C, rate_b, rate_w):
    """Training-set NTK ``(S, P C, P C)`` from the Jacobians of a forward pass."""
    S, P = fp.out.shape[:2]
    eye = np.broadcast_to(np.eye(C), (S, P, C, C))
    jac = _mlp.backward(Ws, fp, eye)
    return _mlp.ntk(fp, jac, rate_b, rate_w).reshape(S, P * C, P * C)


def _run_chunk(Ws, bs, X, Xt, Y, fns, kind, method, eta, steps, rec, rate_b, rate_w,
               record_ntk, first):
    act, dact = fns
    S = Ws[0].shape[0]
    P, C = Y.shape
    T = len(rec)
    Q = 0 if Xt is None else Xt.shape[0]
    Xall = X if Xt is None else np.vstack([X, Xt])
    f_tr = np.empty((S, T, P, C))
    f_te = np.empty((S, T, Q, C))
    loss_rec = np.empty((S, T))
    ntk_rec = np.empty((S, T, P + Q, C, P + Q, C)) if record_ntk else None
    ref = None
    r = 0
    for t in range(steps + 1):
        fp = _mlp.forward(Ws, bs, X, act, dact)
        z = fp.out
        loss, eps = _loss_and_eps(z, Y, kind)
        if ref is None:
            ref = np.maximum(loss, 0.5 * np.sum(Y * Y) if kind == "mse" else 1.0)
            ref = np.where(ref > 0, ref, 1.0)
        bad = ~(np.isfinite(loss) & (loss <= _RUNAWAY * ref) & np.isfinite(z).all(axis=(1, 2)))
        if bad.any():
            k = int(np.argmax(bad))
            raise _Diverged(t, first + k, float(loss[k]), float(ref[k]))
        if r < T and rec[r] == t:
            f_tr[:, r] = z
            loss_rec[:, r] = loss
            if Q:
                f_te[:, r] = _mlp.forward(Ws, bs, Xt, act).out
            if record_ntk:
                fa = _mlp.forward(Ws, bs, Xall, act, dact)
                eye = np.broadcast_to(np.eye(C), (S, P + Q, C, C))
                ntk_rec[:, r] = _mlp.ntk(fa, _mlp.backward(Ws, fa, eye), rate_b, rate_w)
            r += 1
        if t == steps:
            break
        if method == "newton":
            H = _train_ntk(fp, Ws, C, rate_b, rate_w)
            try:
                v = np.linalg.solve(H, eps.reshape(S, P * C, 1)).reshape(S, P, C)
            except np.linalg.LinAlgError:
                raise DomainError(f"method='newton': the training NTK of a network is singular at "
                                  f"step {t} (duplicate training inputs, or more training "
                                  "outputs P*C than parameters); use method='gd'") from None
            eps = v
        g = _mlp.backward(Ws, fp, eps)
        dW, db = _mlp.param_grads(fp, g)
        for ell in range(len(Ws)):                  # in place: the chunk owns its copies
            dW[ell] *= eta * rate_w[ell]
            Ws[ell] -= dW[ell]
            db[ell] *= eta * rate_b[ell]
            bs[ell] -= db[ell]
    if ntk_rec is not None:
        ntk_rec = ntk_rec.transpose(0, 1, 2, 4, 3, 5)           # (S, T, n, n, C, C)
    return f_tr, f_te, loss_rec, ntk_rec


_COMPILED: dict = {}


def _device_program(be, fns, kind, method, eta, rate_b, rate_w, C, record_ntk, key):
    """Compiled ``step(Ws, bs, X, Y)`` and ``record(Ws, bs, Xt, Xall)`` of :func:`_run_chunk` on
    the backend ``be`` (cached by ``key``: the architecture, data shapes and hyperparameters)."""
    got = _COMPILED.get(key)
    if got is not None:
        return got
    import jax
    xp = be.xp
    act, dact = fns

    def loss_eps(z, Y):
        if kind == "mse":
            eps = z - Y
            return 0.5 * xp.sum(eps * eps, axis=(1, 2)), eps
        logq = jax.nn.log_softmax(z, axis=2)
        return -xp.sum(Y * logq, axis=(1, 2)), xp.exp(logq) - Y

    def step(Ws, bs, X, Y):
        fp = _mlp.forward(Ws, bs, X, act, dact)
        z = fp.out
        loss, eps = loss_eps(z, Y)
        finite = xp.isfinite(z).all(axis=(1, 2))
        solved = xp.ones(z.shape[0], dtype=bool)
        if method == "newton":
            S, P = z.shape[:2]
            eye = xp.broadcast_to(xp.eye(C), (S, P, C, C))
            H = _mlp.ntk(fp, _mlp.backward(Ws, fp, eye), rate_b, rate_w).reshape(S, P * C, P * C)
            eps = xp.linalg.solve(H, eps.reshape(S, P * C, 1)).reshape(S, P, C)
            solved = xp.isfinite(eps).all(axis=(1, 2))
        g = _mlp.backward(Ws, fp, eps)
        dW, db = _mlp.param_grads(fp, g)
        newW = [W - d * (eta * rate_w[ell]) for ell, (W, d) in enumerate(zip(Ws, dW))]
        newb = [b - d * (eta * rate_b[ell]) for ell, (b, d) in enumerate(zip(bs, db))]
        return z, loss, finite, solved, newW, newb

    def record(Ws, bs, Xt, Xall):
        f_te = None if Xt is None else _mlp.forward(Ws, bs, Xt, act).out
        ntk = None
        if record_ntk:
            fa = _mlp.forward(Ws, bs, Xall, act, dact)
            S, n = fa.out.shape[:2]
            eye = xp.broadcast_to(xp.eye(C), (S, n, C, C))
            ntk = _mlp.ntk(fa, _mlp.backward(Ws, fa, eye), rate_b, rate_w)
        return f_te, ntk

    if len(_COMPILED) >= 16:
        _COMPILED.clear()
    got = _COMPILED[key] = (be.jit(step), be.jit(record))
    return got


def _run_chunk_device(be, programs, Ws, bs, X, Xt, Y, kind, steps, rec, record_ntk, first):
    """:func:`_run_chunk` on the backend ``be``: the same updates, compiled; the divergence
    checks and the records on the host (one small transfer per step)."""
    step, record = programs
    S = Ws[0].shape[0]
    P, C = Y.shape
    T = len(rec)
    Q = 0 if Xt is None else Xt.shape[0]
    f_tr = np.empty((S, T, P, C))
    f_te = np.empty((S, T, Q, C))
    loss_rec = np.empty((S, T))
    ntk_rec = np.empty((S, T, P + Q, C, P + Q, C)) if record_ntk else None
    Ws, bs = [be.put(W) for W in Ws], [be.put(b) for b in bs]
    Xd, Yd = be.put(X), be.put(Y)
    Xtd = None if Xt is None else be.put(Xt)
    Xall = be.put(X if Xt is None else np.vstack([X, Xt]))
    ref = None
    r = 0
    for t in range(steps + 1):
        z, loss, finite, solved, newW, newb = step(Ws, bs, Xd, Yd)
        loss_h, finite_h = be.get(loss), be.get(finite)
        if ref is None:
            ref = np.maximum(loss_h, 0.5 * np.sum(Y * Y) if kind == "mse" else 1.0)
            ref = np.where(ref > 0, ref, 1.0)
        bad = ~(np.isfinite(loss_h) & (loss_h <= _RUNAWAY * ref) & finite_h)
        if bad.any():
            k = int(np.argmax(bad))
            raise _Diverged(t, first + k, float(loss_h[k]), float(ref[k]))
        if r < T and rec[r] == t:
            f_tr[:, r] = be.get(z)
            loss_rec[:, r] = loss_h
            if Q or record_ntk:
                fte, ntk = record(Ws, bs, Xtd, Xall)
                if Q:
                    f_te[:, r] = be.get(fte)
                if record_ntk:
                    ntk_rec[:, r] = be.get(ntk)
            r += 1
        if t == steps:
            break
        if not be.get(solved).all():
            raise DomainError(f"method='newton': the training NTK of a network is singular at "
                              f"step {t} (duplicate training inputs, or more training outputs "
                              "P*C than parameters); use method='gd'")
        Ws, bs = newW, newb
    if ntk_rec is not None:
        ntk_rec = ntk_rec.transpose(0, 1, 2, 4, 3, 5)           # (S, T, n, n, C, C)
    return f_tr, f_te, loss_rec, ntk_rec


#: marks ``seed`` not given (the default seed is 0; ``params=`` excludes any ``seed``)
_UNSET = object()


class _Diverged(Exception):
    def __init__(self, step, network, loss, ref):
        super().__init__(step)
        self.step, self.network, self.loss, self.ref = step, network, loss, ref


def check_gd_step(H0: np.ndarray, eta: float, overflow_hint: str) -> None:
    """Refuse a learning rate beyond gradient descent's stability bound
    ``eta < 2 / lambda_max(H0)`` of the first network's training NTK at initialization (the MLP
    and CNN trainers share it); a non-finite NTK is reported with ``overflow_hint``."""
    if not np.isfinite(H0).all():
        raise DomainError(f"the training NTK at initialization is not finite ({overflow_hint})")
    lam = float(np.linalg.eigvalsh(H0)[-1])
    bound = 2.0 / lam if lam > 0 else np.inf
    if not eta < bound:
        raise DomainError(
            f"eta={eta:g} is beyond the stability bound of gradient descent, eta < "
            f"2 / lambda_max(training NTK at initialization) = {bound:.4g} (first network); "
            "lower eta")


@public
def train_ensemble(net: MLP, X: Any, y: Any, *, eta: float, updates: int,
                   networks: int | None = None, seed: Any = _UNSET, params: Any = None, lambda_b: Any = 1.0,
                   lambda_w: Any = 1.0, X_test: Any = None, loss: str = "mse",
                   method: str = "gd", record_every: int = 1, record_ntk: bool = False,
                   batch: int | None = None, progress: bool | None = None,
                   backend: str = "numpy") -> TrainedEnsemble:
    r"""Train ``networks`` independently initialized networks on the same data, in one batched run.

    The book's parameterization and learning-rate tensor (module docstring; PDLT (2.19)-(2.20),
    (7.11), (8.6)); full-batch gradient descent or Newton steps; outputs on the training and
    test inputs recorded every ``record_every`` steps.

    Parameters
    ----------
    net : MLP
        Architecture with numeric widths: activation (any registry activation whose first
        derivative is a function; a step is rejected), ``depth`` ``L >= 1`` (``depth = 1``: the
        linear model :math:`z=b+Wx`), ``c_w``, ``c_b`` per layer, ``n_out``.
    X : array_like (P, n_0)
        Training inputs.
    y : array_like
        MSE: ``(P,)`` (``n_out = 1``) or ``(P, n_out)``.  Cross-entropy: ``P`` integer class
        labels or ``(P, n_out)`` target probabilities.
    eta : float
        Global learning rate :math:`\eta > 0`.  Gradient descent must satisfy the lazy stability
        bound :math:`\eta < 2/\lambda_{\max}(\tilde H)` of the training NTK of the first network
        at initialization (MSE); ``method="newton"`` needs ``0 < eta < 2`` (``eta = 1`` is the
        Newton step).  Gradient flow is the small-``eta`` limit at fixed ``eta * updates``.
    updates : int
        Number of updates (``>= 1``); step 0 is the initialization.
    networks : int
        Number of networks ``S`` (omit when ``params`` is given).
    seed : int, SeedSequence, Generator or None, default 0
        ``numpy.random.default_rng(seed).spawn(networks)`` gives one generator per network, from
        which :func:`~effth.simulation.init_params` draws it: network ``s`` does not depend on
        ``batch``.
    params : list of (W, b), optional
        Initial parameters instead of ``seed``/``networks``: the layout of
        :func:`~effth.simulation.init_params` with a leading network axis (or one network
        without it).
    lambda_b, lambda_w : float or sequence of L floats
        :math:`\lambda_b^{(\ell)}` and the width-rescaled :math:`\lambda_W^{(\ell)}` (8.6): the
        per-weight rate is :math:`\lambda_W^{(\ell)}/n_{\ell-1}`.
    X_test : array_like (Q, n_0), optional
        Test inputs: recorded, never trained on.
    loss : {'mse', 'cross_entropy'}
        :math:`\frac12\sum(z-y)^2` (7.2) or the softmax cross-entropy (10.36) (``n_out >= 2``).
    method : {'gd', 'newton'}
        ``'gd'``: :math:`\theta\leftarrow\theta-\eta\lambda\,\partial\mathcal L/\partial\theta`.
        ``'newton'`` (MSE only): :math:`\theta_\mu\leftarrow\theta_\mu-\eta\sum\lambda_{\mu\nu}
        \frac{dz_{i;\tilde\alpha_1}}{d\theta_\nu}(\hat H^{-1})^{(i\tilde\alpha_1)(j\tilde\alpha_2)}
        \epsilon_{j;\tilde\alpha_2}` with each network's own empirical NTK on the training set
        (all ``P n_out`` training outputs, output mixing included) -- (10.19) with
        :math:`\eta\kappa=\tilde H^{-1}` (10.25).  At ``eta = 1`` one step solves the linearized
        model exactly (10.30)-(10.31); it fits the training data exactly for models linear in
        their parameters (``depth = 1``).
    record_every : int
        Record every this many steps (the last step is always recorded).
    record_ntk : bool
        Also record the NTK on all inputs at the recorded steps (memory ``S T (n n_out)^2``).
    batch : int, optional
        Networks per chunk (default: about 32 MB per temporary).
    progress : bool, optional
        Progress bar over the networks (``docs/conventions.md``).
    backend : {"numpy", "jax"}
        Array library of the forward/backward passes and the updates.  ``"numpy"`` (default);
        ``"jax"``: every update compiled (``jax.jit``) on JAX's default device (a GPU when JAX
        finds one), float64 in JAX's scoped ``enable_x64`` (the global JAX configuration is not
        changed), chunks of networks sized to a quarter of the accelerator's memory (256 MiB on a
        CPU) unless ``batch`` is given; the initial parameters are drawn on the host exactly as
        for NumPy, so the trajectories agree to round-off.  Needs ``pip install effth[jax]``.

    Returns
    -------
    TrainedEnsemble

    Raises
    ------
    DomainError
        Bad input (naming the argument), ``eta`` beyond the stability bound (naming it), a
        singular training NTK for ``'newton'``, or divergence during training (naming the step
        and the network).
    """
    if not isinstance(net, MLP):
        raise DomainError(f"net must be an effth.MLP, got {type(net).__name__}")
    be = _resolve_backend(backend)
    from effth.arch._common import require_plain
    require_plain(net, "the trainer")
    if net.widths is None and net.depth == 1:
        net = net.with_widths(())                     # no hidden layer: nothing to give
    if net.widths is None:
        raise DomainError("net has symbolic widths (widths=None); pass widths=... to train it")
    _, fns = _resolve_callables(net.act)        # closed forms for tanh/relu; no jumps
    if net.act.family == "polynomial" and dict(net.act.params).get("coeffs") == (0, 1):
        fns = _LINEAR                               # the identity, without a polynomial evaluation
    if loss not in ("mse", "cross_entropy"):
        raise DomainError(f"loss={loss!r}: use 'mse' or 'cross_entropy'")
    if method not in ("gd", "newton"):
        raise DomainError(f"method={method!r}: use 'gd' or 'newton'")
    if method == "newton" and loss != "mse":
        raise DomainError("method='newton' needs loss='mse' (the Newton step (10.25) inverts the "
                          "NTK, the Hessian of the MSE loss in the linearized model)")
    C = net.n_out
    if loss == "cross_entropy" and C < 2:
        raise DomainError(f"loss='cross_entropy' needs n_out >= 2 outputs, net has n_out={C}")
    X = _real_array(X, "X")
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise DomainError(f"X must be a 2-D array (P, n_0) with P, n_0 >= 1, got shape {X.shape}")
    P, n0 = X.shape
    Y = _targets(y, P, C, loss)
    Xt = None
    if X_test is not None:
        Xt = _real_array(X_test, "X_test")
        if Xt.ndim != 2 or Xt.shape[1] != n0 or Xt.shape[0] < 1:
            raise DomainError(f"X_test must be 2-D with X's {n0} columns (Q, {n0}), got shape "
                              f"{Xt.shape}")
    eta = _real_scalar(eta, "eta")
    if not (np.isfinite(eta) and eta > 0):
        raise DomainError(f"eta={eta!r} must be positive and finite")
    if method == "newton" and not eta < 2:
        raise DomainError(f"eta={eta:g}: Newton steps are stable only for 0 < eta < 2 (eta = 1 is "
                          "the full Newton step)")
    updates = integer(updates, "updates", minimum=1)
    record_every = integer(record_every, "record_every", minimum=1)
    if batch is not None:
        batch = integer(batch, "batch", minimum=1)
    L = net.depth
    lb = _rates(lambda_b, L, "lambda_b")
    lw = _rates(lambda_w, L, "lambda_w")
    widths = net.layer_widths(n0)
    rate_b = lb
    rate_w = tuple(lw[ell] / widths[ell] for ell in range(L))          # lambda_W / n_{l-1}
    if params is not None:
        if seed is not _UNSET:
            raise DomainError("give seed= (with networks=) or params=, not both")
        Ws_all, bs_all = _check_params(params, widths, networks)
        size = Ws_all[0].shape[0]
        gens = None
    else:
        if networks is None:
            raise DomainError("networks= (the number of networks) is required unless params= is "
                              "given")
        size = integer(networks, "networks", minimum=1)
    n_rec = updates // record_every + 1 + (updates % record_every != 0)
    n_out_all = (P + (0 if Xt is None else Xt.shape[0])) * C
    weights = sum(float(widths[ell]) * widths[ell + 1] for ell in range(L))
    check_memory(8.0 * 3 * weights, f"one network's weights and gradients ({weights:.3g} "
                 f"parameters, widths {tuple(widths)})", "lower widths")
    check_memory(8.0 * size * n_rec * n_out_all * (2 + (n_out_all if record_ntk else 0)),
                 f"the records of {size} networks at {n_rec} times (outputs"
                 + (" and NTKs)" if record_ntk else ")"),
                 "lower networks, or raise record_every" + (", or record_ntk=False"
                                                             if record_ntk else ""))
    if params is None:
        gens = as_generator(0 if seed is _UNSET else seed).spawn(size)
    rec = sorted(set(range(0, updates + 1, record_every)) | {updates})

    def draw(start: int, m: int):
        if gens is None:
            return ([W[start:start + m].copy() for W in Ws_all],
                    [b[start:start + m].copy() for b in bs_all])
        nets = [init_params(net, n0, seed=g) for g in gens[start:start + m]]
        return ([np.stack([p[ell][0] for p in nets]) for ell in range(L)],
                [np.stack([p[ell][1] for p in nets]) for ell in range(L)])

    n_all = P + (0 if Xt is None else Xt.shape[0])
    per_net = max(sum(widths[ell] * widths[ell + 1] for ell in range(L)),
                  n_all * C * max(widths), n_all * max(widths) * 4,
                  len(rec) * n_all * C * (1 + (n_all * C if record_ntk else 0)))
    if batch is None:
        elements = _CHUNK_ELEMENTS if be.is_numpy else int(be.chunk_bytes() // 8)
        batch = max(1, min(size, elements // max(per_net, 1)))
    chunks = [(s0, min(batch, size - s0)) for s0 in range(0, size, batch)]
    out = []
    bound = None
    programs = None
    if not be.is_numpy:
        with be.scope():
            jfns = (_backend_activation(net.act, 0, be), _backend_activation(net.act, 1, be))
            key = (net.act, tuple(widths), loss, method, float(eta), rate_b, rate_w, C,
                   bool(record_ntk), P, 0 if Xt is None else Xt.shape[0])
            programs = _device_program(be, jfns, loss, method, float(eta), rate_b, rate_w, C,
                                       bool(record_ntk), key)
    with blas_threads(), progress_bar(size, "training networks", progress=progress,
                                      unit="net") as bar, be.scope():
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                for k, (start, m) in enumerate(chunks):
                    Ws, bs = draw(start, m)
                    if k == 0 and method == "gd" and loss == "mse":
                        W1, b1 = [W[:1] for W in Ws], [b[:1] for b in bs]
                        fp = _mlp.forward(W1, b1, X, *fns)
                        H0 = _train_ntk(fp, W1, C, rate_b, rate_w)[0]
                        check_gd_step(H0, eta, "overflowing network or activation derivative")
                    if programs is not None:
                        out.append(_run_chunk_device(be, programs, Ws, bs, X, Xt, Y, loss,
                                                     updates, rec, record_ntk, start))
                    else:
                        out.append(_run_chunk(Ws, bs, X, Xt, Y, fns, loss, method, eta, updates,
                                              rec, rate_b, rate_w, record_ntk, start))
                    bar.update(m)
        except _Diverged as exc:
            what = ("non-finite outputs" if not np.isfinite(exc.loss) else
                    f"training loss {exc.loss:.3g} > {_RUNAWAY:g} x its initial scale {exc.ref:.3g}")
            raise _diverged(exc.step, exc.network, eta, bound, what) from None
    f_tr, f_te, loss_rec, ntk_rec = (np.concatenate([o[i] for o in out]) if out[0][i] is not None
                                     else None for i in range(4))
    if C == 1:
        f_tr, f_te = f_tr[..., 0], f_te[..., 0]
        if ntk_rec is not None:
            ntk_rec = ntk_rec[..., 0, 0]
    return TrainedEnsemble(f_train=f_tr, f_test=f_te, loss=loss_rec, recorded=np.asarray(rec),
                           net=net, eta=float(eta), lambda_b=lb, lambda_w=lw, method=method,
                           loss_kind=loss, ntk=ntk_rec)


def _diverged(step, network, eta, bound, what) -> DomainError:
    where = "" if step is None else f" at step {step} (network {network})"
    edge = ("" if bound is None else
            f"; the lazy stability bound is eta < 2 / lambda_max(training NTK at initialization) "
            f"= {bound:.4g} for the first network (others, and the NTK as it moves, can be "
            "stiffer)")
    return DomainError(f"training diverged{where}: {what}; eta={eta:g} is beyond the stable range "
                       f"of gradient descent{edge}; lower eta")
