r"""One batched forward/backward pass of fully connected networks, shared by the trainers.

A leading **network axis** ``S`` runs through every array, so thousands of independently
initialized networks are pushed through one set of batched matrix products.  The network
(PDLT (2.5), with an optional fixed multiplier per layer so that the DMFT/μP networks fit too):

.. math::

    z^{(1)}_{\alpha} = a_1\,W^{(1)} x_\alpha + b^{(1)},\qquad
    z^{(\ell+1)}_{\alpha} = a_{\ell+1}\,W^{(\ell+1)}\sigma(z^{(\ell)}_\alpha) + b^{(\ell+1)},

``\ell = 1..L-1``; the output :math:`z^{(L)}` has no activation.  The book's parameterization is
:math:`a_\ell = 1`; the DMFT network of :func:`~effth.simulation.simulate_training` has
:math:`a_1 = 1/\sqrt{D}`, hidden :math:`a_\ell = m` and readout :math:`a_L = m/\gamma`.

Backward pass: the chain rule (8.10), (8.16)-(8.18),
:math:`\partial z^{(L)}/\partial z^{(\ell)} = \partial z^{(L)}/\partial z^{(\ell+1)}\,
a_{\ell+1}W^{(\ell+1)}\sigma'(z^{(\ell)})`, pulled back from any output co-vector: the error factor
:math:`\epsilon` (a vector-Jacobian product: the gradient of the loss) or the identity over
the outputs (the Jacobians :math:`dz^{(L)}_{i;\alpha}/dz^{(\ell)}`, from which the NTK (8.7) and
the Newton step are built).  Parameter derivatives (8.11): :math:`dz_i/db_j=\delta_{ij}`,
:math:`dz_i/dW_{jk}=a\,\delta_{ij}\sigma_k`.

Layouts: inputs ``X`` ``(n, n_0)`` (shared by all networks) or ``(S, n, n_0)``; ``W[l-1]``
``(S, n_l, n_{l-1})``; ``b[l-1]`` ``(S, n_l)`` or ``None`` (no bias); preactivations
``z[l-1]`` ``(S, n, n_l)``; a co-vector at the output ``(S, n, [k,] n_L)`` with an optional
direction axis ``k``.  The arrays are NumPy's, or JAX's for ``backend="jax"``
(:mod:`effth.simulation._backend`): every function works in the namespace of its array arguments
(traceable by ``jax.jit``); the ground truth never imports theory code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["Pass", "forward", "backward", "param_grads", "ntk"]


def _ns(a):
    """``numpy`` for a NumPy array, else the array's own namespace (``jax.numpy``)."""
    if isinstance(a, np.ndarray):
        return np
    from ._backend import namespace
    return namespace(a)


@dataclass
class Pass:
    """State of a forward pass of ``S`` networks on ``n`` inputs.

    ``z[l-1]`` is :math:`z^{(l)}` ``(S, n, n_l)``, ``l = 1..L``; ``s[l]`` is the input of weight
    layer ``l+1`` (``s[0] = X``, ``s[l] = sigma(z^(l))``); ``ds[l-1] = sigma'(z^(l))`` for the
    hidden layers ``l = 1..L-1`` (``None`` unless a derivative was given); ``scales[l-1] = a_l``.
    """

    z: list
    s: list
    ds: list | None
    scales: tuple

    @property
    def out(self) -> np.ndarray:
        """Network outputs :math:`z^{(L)}`, ``(S, n, n_L)``."""
        return self.z[-1]


def _scales(scales, L: int) -> tuple:
    return (1.0,) * L if scales is None else tuple(scales)


def forward(Ws: Sequence[np.ndarray], bs: Sequence[np.ndarray | None], X: np.ndarray,
            act: Callable, dact: Callable | None = None, scales=None) -> Pass:
    """Forward pass of ``S`` networks (module docstring); ``dact`` also stores ``sigma'``."""
    L = len(Ws)
    a = _scales(scales, L)
    xp = _ns(Ws[0])
    s = [X]
    zs, ds = [], ([] if dact is not None else None)
    for ell in range(L):
        x = s[-1]
        if a[ell] != 1.0:
            x = a[ell] * x
        z = xp.matmul(x, xp.swapaxes(Ws[ell], -1, -2))
        if bs[ell] is not None:
            z = z + bs[ell][:, None, :]
        zs.append(z)
        if ell < L - 1:
            s.append(act(z))
            if dact is not None:
                ds.append(dact(z))
    return Pass(z=zs, s=s, ds=ds, scales=a)


def backward(Ws: Sequence[np.ndarray], fp: Pass, cov: np.ndarray) -> list:
    """Pull the output co-vector ``cov`` ``(S, n, [k,] n_L)`` back through every layer.

    Returns ``g`` with ``g[l-1] = sum_i cov_i dz^(L)_i / dz^(l)`` ``(S, n, [k,] n_l)``,
    ``l = 1..L`` (``g[L-1] = cov``).  With ``cov`` the error factor this is the backpropagated
    gradient of the loss; with the identity on a direction axis it is the Jacobian.
    """
    L = len(Ws)
    if fp.ds is None:
        raise ValueError("backward needs a forward pass with dact")
    xp = _ns(Ws[-1])
    g = [None] * L
    g[L - 1] = cov
    S = cov.shape[0]
    lead = cov.shape[1:-1]
    for ell in range(L - 1, 0, -1):
        flat = g[ell].reshape(S, -1, g[ell].shape[-1])
        h = xp.matmul(flat, Ws[ell]).reshape((S,) + lead + (Ws[ell].shape[-1],))
        if fp.scales[ell] != 1.0:
            h = h * fp.scales[ell]
        d = fp.ds[ell - 1]
        if len(lead) == 2:                          # direction axis k after the sample axis
            d = d[:, :, None, :]
        g[ell - 1] = h * d
    return g


def param_grads(fp: Pass, g: list) -> tuple[list, list]:
    """Gradients from backpropagated signals ``g[l-1]`` ``(S, n, n_l)`` (no direction axis):
    ``dW[l-1] = a_l sum_alpha g_alpha (x) s^(l-1)_alpha`` ``(S, n_l, n_{l-1})`` and
    ``db[l-1] = sum_alpha g_alpha`` ``(S, n_l)``."""
    dW, db = [], []
    xp = _ns(g[0])
    for ell, gl in enumerate(g):
        w = xp.matmul(xp.swapaxes(gl, -1, -2), fp.s[ell])
        if fp.scales[ell] != 1.0:
            w = w * fp.scales[ell]
        dW.append(w)
        db.append(gl.sum(axis=1))
    return dW, db


def ntk(fp: Pass, jac: list, rate_b: Sequence[float], rate_w: Sequence[float]) -> np.ndarray:
    r"""Empirical NTK (8.7) from the Jacobians ``jac[l-1]`` ``(S, n, k, n_l)`` (``backward`` of
    the identity over ``k`` output components).

    ``rate_b[l-1]``, ``rate_w[l-1]`` are the per-parameter learning rates of layer ``l`` (the
    book's :math:`\lambda_b^{(\ell)}` and :math:`\lambda_W^{(\ell)}/n_{\ell-1}`, (8.6)).  Returns
    :math:`\hat H_{(\alpha i)(\beta j)}=\sum_\ell[\lambda_b+\lambda_W/n_{\ell-1}\,a_\ell^2\,
    s^{(\ell-1)}_\alpha\cdot s^{(\ell-1)}_\beta]\,(g^{(\ell)}_{\alpha i}\cdot g^{(\ell)}_{\beta j})`
    with shape ``(S, n, k, n, k)``.
    """
    S, n, k = jac[-1].shape[:3]
    xp = _ns(jac[-1])
    H = xp.zeros((S, n, k, n, k))
    for ell, gl in enumerate(jac):
        flat = gl.reshape(S, n * k, gl.shape[-1])
        gg = xp.matmul(flat, xp.swapaxes(flat, -1, -2)).reshape(S, n, k, n, k)
        x = fp.s[ell]
        ss = xp.matmul(x, xp.swapaxes(x, -1, -2))
        if ss.ndim == 2:
            ss = ss[None]
        coef = rate_b[ell] + rate_w[ell] * fp.scales[ell] ** 2 * ss        # (S or 1, n, n)
        H += gg * coef[:, :, None, :, None]
    return H
