r"""Finite CNNs trained by full-batch gradient descent, batched over networks: the ground truth of
the CNN DMFT and of lazy CNN kernel regression.

The networks are the :class:`effth.arch.CNN` of :mod:`effth.simulation.cnn` (NTK-normalized
parameters :math:`\omega,\beta\sim\mathcal N(0,1)`, multipliers :math:`\sqrt{C_W/\mathrm{fan\,in}}`
and :math:`\sqrt{C_b}`, fan-in = channels times filter size), pushed through the same im2col
forward pass and its adjoint.  One GD step on the loss :math:`\mathcal L` of the training
images (the extensive losses of :func:`~effth.simulation.train_ensemble`: MSE
:math:`\frac12\sum_{\mu,k}(f_{\mu k}-y_{\mu k})^2`, PDLT (7.2), or the softmax cross-entropy
(10.36)) is

.. math::

    \theta_p \leftarrow \theta_p - \eta\,\lambda\,\partial\mathcal L/\partial\theta_p ,

with one rate for every parameter: :math:`\lambda=1` for ``parameterization='ntk'`` (PDLT §9.1,
Jacot et al.) and :math:`\lambda=\gamma^2=\gamma_0^2 n_{L-1}` for ``'mup'``, whose output is
divided by :math:`\gamma` (Bordelon & Pehlevan 2022, eq. (1) and app. G; the mean-field form of
their app. N, equivalent to μP at any width).  In both, the NTK in units of :math:`\eta` is
:math:`\hat\Theta=\lambda\sum_p\partial_pf\,\partial_pf`, at initialization the
:func:`effth.cnn_kernels` :math:`\Theta` at infinite width, so one step of the lazy
(linearized) network is :math:`f\leftarrow f-\eta\hat\Theta\,\partial\mathcal L/\partial f`, and
:math:`\eta` is the time step of the DMFT grid (:func:`effth.dmft.solve_cnn_monte_carlo`).  At
fixed :math:`\gamma_0` the ``'mup'`` dynamics have a width-independent limit with feature
learning; the ``'ntk'`` ones become lazy, :math:`O(n^{-1/2})` per network.

``center=True`` (the default for ``'mup'``, as in :func:`~effth.simulation.simulate_training`)
trains and reports :math:`f(\theta)-f(\theta_0)`: gradients unchanged, the initial output
(:math:`O(1/\gamma)` for μP, :math:`O(1)` for NTK) removed, the DMFT's :math:`f(0)=0`.

Seeding, losses and divergence checks are those of :func:`~effth.simulation.train_ensemble`:
``SeedSequence(seed).spawn(networks)`` gives one generator per network (a network does not
depend on ``batch``), and the result is a :class:`~effth.simulation.TrainedEnsemble`.  NumPy
only: this module never imports effth's theory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from effth._signature import public
from effth.arch.cnn import CNN

from .._progress import progress_bar
from .._threads import blas_threads
from .._validate import check_memory, integer
from ..errors import DomainError
from ._inputs import as_generator
from .cnn import _backprop, _forward, _gamma, _init, _ntk, _readout_init, _readout_signal
from .learning import _RUNAWAY, TrainedEnsemble, _diverged, _loss_and_eps, _targets, check_gd_step
from .training import _real_scalar, _resolve_callables

__all__ = ["train_cnn"]

#: target number of float64 elements of the largest per-chunk temporary (the im2col patches)
_CHUNK_ELEMENTS = 1 << 22


def _grads(net: CNN, params: list, readout: tuple, fw: tuple, fns: tuple, E: np.ndarray):
    r"""Gradients of :math:`\sum_{\mu k}E_{\mu k}f_{\mu k}` with respect to every NTK-normalized
    parameter (filters ``(m, qC, n)``, biases ``(m, n)``, readout ``(m, fan, n_out)`` and its
    bias ``(m, n_out)``), by one backward pass (:func:`effth.simulation.cnn._backprop`)."""
    L = net.depth
    _, phi, aL, _ = fw
    inv_g = 1.0 / _gamma(net)
    d_read = (aL * inv_g * np.matmul(np.swapaxes(phi, -1, -2), E),
              np.sqrt(net.c_b_at(L)) * inv_g * E.sum(axis=1))
    d_conv = [None] * (L - 1)
    ds = _readout_signal(net, readout, fw, E)
    for ell, Pf, a, dzf in _backprop(net, params, fw, fns, ds):
        m = Pf.shape[0]
        gw = a * np.matmul(np.swapaxes(Pf.reshape(m, -1, Pf.shape[-1]), -1, -2),
                           dzf.reshape(m, -1, dzf.shape[-1]))
        gb = np.sqrt(net.c_b_at(ell)) * dzf.sum(axis=(1, 2))
        d_conv[ell - 1] = (gw, gb)
    return d_conv, d_read


def _images(net: CNN, X: Any, name: str, like: np.ndarray | None = None) -> np.ndarray:
    Xa = net.images(X, name)
    if like is not None and Xa.shape[1:] != like.shape[1:]:
        raise DomainError(f"{name} holds images of shape {Xa.shape[1:]} (spatial axes, channels), "
                          f"the training images {like.shape[1:]}: images must have equal shapes")
    return Xa


@public
def train_cnn(net: CNN, X: Any, y: Any, *, eta: float, updates: int, networks: int,
              seed: Any = 0, X_test: Any = None, loss: str = "mse", center: bool | None = None,
              record_every: int = 1, record_ntk: bool = False, batch: int | None = None,
              progress: bool | None = None) -> TrainedEnsemble:
    r"""Train ``networks`` independently initialized CNNs on the same images by full-batch GD.

    Module docstring: the NTK (``net.parameterization='ntk'``) or μP / mean-field
    (``'mup'``, ``gamma0``) network of :class:`effth.arch.CNN`, rates :math:`\eta` resp.
    :math:`\eta\gamma^2` on every NTK-normalized parameter.

    Parameters
    ----------
    net : CNN
        With finite ``widths`` (channels); any activation whose derivative is a function.
    X : array_like (P, *spatial) or (P, *spatial, C_0)
        Training images (channels last).
    y : array_like
        Targets as for :func:`~effth.simulation.train_ensemble`: MSE ``(P,)`` or
        ``(P, n_out)``; cross-entropy ``P`` labels or ``(P, n_out)`` probabilities.
    eta : float
        Learning rate (the DMFT time step); gradient descent (MSE) must satisfy the lazy bound
        :math:`\eta<2/\lambda_{\max}(\hat\Theta)` of the first network's training NTK.
    updates : int
        Number of GD updates; step 0 is the initialization (``updates + 1`` recorded points
        with ``record_every=1``, the DMFT's ``steps``).
    networks : int
        Number of networks.
    seed : int, SeedSequence, Generator or None
        ``SeedSequence(seed).spawn(networks)``: one generator per network.
    X_test : array_like, optional
        Test images of the training images' shape, recorded, not trained on.
    loss : {'mse', 'cross_entropy'}
    center : bool, optional
        Train and report :math:`f-f(\theta_0)` (default: ``True`` for ``'mup'``, ``False`` for
        ``'ntk'``).
    record_every : int
        Record every this many updates (the last one always).
    record_ntk : bool
        Also record the exact empirical NTK (averaged over the outputs) on train-then-test
        images, ``(networks, T, n, n)``.
    batch : int, optional
        Networks per chunk (default: about 32 MB of im2col patches).
    progress : bool, optional

    Returns
    -------
    TrainedEnsemble
        ``value("f")`` ``(T, n[, n_out])``, ``"loss"``, ``"ntk"`` (``record_ntk``), ``"mean"``,
        ``"covariance"``; ``lambda_b = lambda_w`` the rate :math:`\lambda` per weight layer.

    Raises
    ------
    DomainError
        Not a CNN or infinite channels, images of unequal shape or a filter larger than an
        image (:meth:`effth.arch.CNN.images`), bad targets, ``eta`` beyond the lazy stability
        bound, divergence during training (naming the step and network).
    """
    if not isinstance(net, CNN):
        raise DomainError(f"net must be an effth.CNN, got {type(net).__name__} (for an MLP use "
                          "train_ensemble or simulate_training)")
    if net.widths is None:
        raise DomainError("the CNN has infinite channels (widths=None); pass widths=... to train it")
    _, fns = _resolve_callables(net.activation)
    if loss not in ("mse", "cross_entropy"):
        raise DomainError(f"loss={loss!r}: use 'mse' or 'cross_entropy'")
    C = net.n_out
    if loss == "cross_entropy" and C < 2:
        raise DomainError(f"loss='cross_entropy' needs n_out >= 2 outputs, net has n_out={C}")
    Xa = _images(net, X, "X")
    P = Xa.shape[0]
    Y = _targets(y, P, C, loss)
    Xt = None if X_test is None else _images(net, X_test, "X_test", like=Xa)
    Xall = Xa if Xt is None else np.concatenate([Xa, Xt])
    n = Xall.shape[0]
    eta = _real_scalar(eta, "eta")
    if not (np.isfinite(eta) and eta > 0):
        raise DomainError(f"eta={eta!r} must be positive and finite")
    updates = integer(updates, "updates", minimum=1)
    size = integer(networks, "networks", minimum=1)
    record_every = integer(record_every, "record_every", minimum=1)
    if batch is not None:
        batch = integer(batch, "batch", minimum=1)
    if center is None:
        center = net.parameterization == "mup"
    shapes = net.spatial_shapes(Xa.shape[1:-1])
    S_last = int(np.prod(shapes[-1]))
    rec = sorted(set(range(0, updates + 1, record_every)) | {updates})
    T = len(rec)
    C0 = Xa.shape[-1]
    chans = (C0,) + tuple(net.widths)
    per_net = max(int(np.prod(s)) * int(np.prod(f)) * c
                  for s, f, c in zip(shapes[:-1], net.filter_shapes, chans)) * n
    per_net = max(per_net, T * n * C * (1 + (n if record_ntk else 0)))
    if record_ntk:                              # the per-image filter Jacobians of the NTK
        per_net = max(per_net, n * max(int(np.prod(f)) * c * w for f, c, w in
                                       zip(net.filter_shapes, chans, net.widths)))
    if batch is None:
        batch = max(1, min(size, _CHUNK_ELEMENTS // max(per_net, 1)))
    check_memory(8.0 * 3 * per_net * min(batch, size) * (net.depth - 1),
                 f"{min(batch, size)} CNNs at once (im2col patches of {n} images)",
                 "lower batch= or the channels")
    check_memory(8.0 * size * T * n * C * (2 + (n if record_ntk else 0)),
                 f"the records of {size} networks at {T} times", "lower networks, or raise "
                 "record_every" + (", or record_ntk=False" if record_ntk else ""))
    lam = _gamma(net) ** 2                      # 1 ('ntk'), gamma^2 ('mup'): units of eta
    gens = as_generator(seed).spawn(size)
    f_rec = np.empty((size, T, n, C))
    loss_rec = np.empty((size, T))
    ntk_rec = np.empty((size, T, n, n)) if record_ntk else None
    bound = None

    def draw(gs):
        one = [(_init(net, C0, 1, g), _readout_init(net, S_last, 1, g)) for g in gs]
        params = [(np.concatenate([o[0][k][0] for o in one]),
                   np.concatenate([o[0][k][1] for o in one])) for k in range(net.depth - 1)]
        readout = (np.concatenate([o[1][0] for o in one]), np.concatenate([o[1][1] for o in one]))
        return params, readout

    chunks = [(s0, min(batch, size - s0)) for s0 in range(0, size, batch)]
    with blas_threads(), np.errstate(over="ignore", invalid="ignore"), \
            progress_bar(size, "training CNNs", progress=progress, unit="net") as bar:
        for k, (start, m) in enumerate(chunks):
            params, readout = draw(gens[start:start + m])
            if k == 0 and loss == "mse":
                first = [(w[:1], b[:1]) for w, b in params], tuple(r[:1] for r in readout)
                fw1 = _forward(net, *first, Xa, fns, keep=True)[2]
                H0 = _ntk(net, first[0], first[1], fw1, fns)[0]
                check_gd_step(H0, eta, "overflowing network; reduce c_w or the input scale")
            f0, ref, r = None, None, 0
            for t in range(updates + 1):
                f, _, fw = _forward(net, params, readout, Xall, fns, keep=True)
                if f0 is None:
                    f0 = f.copy() if center else 0.0
                f = f - f0
                lval, eps = _loss_and_eps(f[:, :P], Y, loss)
                if ref is None:
                    ref = np.maximum(lval, 0.5 * np.sum(Y * Y) if loss == "mse" else 1.0)
                    ref = np.where(ref > 0, ref, 1.0)
                bad = ~(np.isfinite(lval) & (lval <= _RUNAWAY * ref)
                        & np.isfinite(f).all(axis=(1, 2)))
                if bad.any():
                    j = int(np.argmax(bad))
                    what = ("non-finite outputs" if not np.isfinite(lval[j]) else
                            f"training loss {lval[j]:.3g} > {_RUNAWAY:g} x its initial scale "
                            f"{ref[j]:.3g}")
                    raise _diverged(t, start + j, eta, bound, what)
                if r < T and rec[r] == t:
                    f_rec[start:start + m, r] = f
                    loss_rec[start:start + m, r] = lval
                    if record_ntk:
                        ntk_rec[start:start + m, r] = _ntk(net, params, readout, fw, fns)
                    r += 1
                if t == updates:
                    break
                E = np.zeros((m, n, C))
                E[:, :P] = eps                           # test images carry no loss
                d_conv, d_read = _grads(net, params, readout, fw, fns, E)
                step = eta * lam
                params = [(w - step * gw, b - step * gb)
                          for (w, b), (gw, gb) in zip(params, d_conv)]
                readout = (readout[0] - step * d_read[0], readout[1] - step * d_read[1])
            bar.update(m)
    f_tr, f_te = f_rec[:, :, :P], f_rec[:, :, P:]
    if C == 1:
        f_tr, f_te = f_tr[..., 0], f_te[..., 0]
    rates = (float(lam),) * net.depth
    return TrainedEnsemble(f_train=f_tr, f_test=f_te, loss=loss_rec, recorded=np.asarray(rec),
                           net=net, eta=float(eta), lambda_b=rates, lambda_w=rates, method="gd",
                           loss_kind=loss, ntk=ntk_rec)
