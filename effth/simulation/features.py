r"""A network at initialization as a linear model: its random features (PDLT §10.4.3).

Linearized around initialization, a network is the linear model (10.119) in the features
:math:`\hat\phi_{\mu}(x)=\sqrt{\lambda_\mu}\,dz^{(L)}_i(x)/d\theta_\mu` (10.138)–(10.139), whose
kernel :math:`\sum_\mu\hat\phi_\mu(x_1)\hat\phi_\mu(x_2)` is the empirical NTK :math:`\hat H^{(L)}_{ii}`
(10.140)–(10.141); training only the last layer is the linear model in
:math:`\bigl(\sqrt{\lambda_b^{(L)}},\sqrt{\lambda_W^{(L)}/n_{L-1}}\,\sigma(z^{(L-1)})\bigr)` (10.134),
whose kernel at :math:`\lambda^{(L)}=C^{(L)}` is the empirical :math:`K^{(L)}` given the penultimate
layer (10.135)–(10.137). :func:`network_features` returns these matrices for one network.
"""

from __future__ import annotations

from effth._signature import public

from typing import Any, Sequence

import numpy as np

from effth.arch._common import per_layer
from effth.errors import DomainError

from . import _mlp
from ._inputs import check_inputs
from .ntk import _activation_derivs, _check_params

__all__ = ["network_features"]


@public
def network_features(params: Sequence, X: Any, activation: Any, *, kind: str = "ntk",
                     lambda_b: Any = 1.0, lambda_w: Any = 1.0, output: int = 0) -> np.ndarray:
    r"""Feature matrix of one network at its parameters: rows are inputs, columns parameters.

    Parameters
    ----------
    params : sequence of (W, b)
        One network in the book's parameterization (as from :func:`init_params` without ``size``).
    X : array_like (N, n_0)
    activation : str, Activation or MLP
    kind : {"ntk", "last_layer"}
        ``"ntk"``: :math:`\sqrt{\lambda_\mu}\,\partial z^{(L)}_{i}/\partial\theta_\mu` over all
        parameters, with :math:`\lambda_{b^{(\ell)}}=\lambda_b^{(\ell)}` and
        :math:`\lambda_{W^{(\ell)}}=\lambda_W^{(\ell)}/n_{\ell-1}` (8.6); ``"last_layer"``: the
        :math:`1+n_{L-1}` features of the output layer's bias and weights.
    lambda_b, lambda_w : float or sequence of L floats
        Learning rates (for ``"last_layer"`` only the last entry is used).
    output : int
        The output component :math:`i`.

    Returns
    -------
    ndarray (N, P)
        :math:`\Phi` with :math:`\Phi\Phi^\top=\hat H^{(L)}_{ii}` (``"ntk"``) or
        :math:`\lambda_b^{(L)}+\lambda_W^{(L)}\sigma^{(L-1)}\cdot\sigma^{(L-1)}/n_{L-1}`
        (``"last_layer"``).
    """
    if kind not in ("ntk", "last_layer"):
        raise DomainError(f"kind must be 'ntk' or 'last_layer', got {kind!r}")
    X = check_inputs(X)
    Ws, bs, batched = _check_params(params, X)
    if batched:
        raise DomainError("network_features takes one network (parameters without a batch axis)")
    Ws, bs = Ws[1:], bs[1:]                      # _check_params pads layer 0
    L = len(Ws)
    lb, lw = per_layer(lambda_b, L, "lambda_b"), per_layer(lambda_w, L, "lambda_w")
    n_out = Ws[-1].shape[-2]
    if isinstance(output, bool) or not isinstance(output, (int, np.integer)) or not 0 <= output < n_out:
        raise DomainError(f"output must be an int in 0..{n_out - 1}, got {output!r}")
    fs = _activation_derivs(activation, 1)
    fp = _mlp.forward(Ws, bs, X, fs[0], fs[1])
    def inp(ell: int) -> np.ndarray:           # input of weight layer ell + 1, (N, n_ell)
        return fp.s[ell][0] if fp.s[ell].ndim == 3 else fp.s[ell]

    if kind == "last_layer":
        s = inp(L - 1)
        n = s.shape[-1]
        return np.hstack([np.full((X.shape[0], 1), np.sqrt(lb[-1])), np.sqrt(lw[-1] / n) * s])
    cov = np.zeros((1, X.shape[0], n_out))
    cov[:, :, output] = 1.0
    g = _mlp.backward(Ws, fp, cov)
    cols = []
    for ell in range(L):
        gl, s = g[ell][0], inp(ell)
        cols.append(np.sqrt(lb[ell]) * gl)
        cols.append(np.sqrt(lw[ell] / s.shape[-1]) * (gl[:, :, None] * s[:, None, :]).reshape(len(gl), -1))
    return np.hstack(cols)
