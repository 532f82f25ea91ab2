r"""The DMFT of convolutional networks with feature learning, by alternating Monte Carlo
(Bordelon & Pehlevan 2022, app. G, eqs. (88)-(89); Algorithm 1 with pixel indices).

The network is :class:`effth.arch.CNN` with ``parameterization='mup'`` (stride 1, ``'circular'``,
``'same'`` or ``'valid'`` padding, ``'gap'`` or ``'flatten'`` readout, one output), trained by full-batch GD
with the rates of :func:`effth.simulation.train_cnn`.  At infinitely many channels every channel
of hidden layer :math:`\ell` carries one single-site field :math:`h^\ell_{\mu i}(t)` over
(image :math:`\mu`, pixel :math:`i`, time), and the order parameters are the two-time kernels
over image-pixel pairs, :math:`\Phi^\ell_{\mu i,\alpha j}(t,s)=\langle\phi(h^\ell_{\mu i}(t))
\phi(h^\ell_{\alpha j}(s))\rangle` and :math:`G^\ell_{\mu i,\alpha j}(t,s)=\langle g^\ell_{\mu i}(t)
g^\ell_{\alpha j}(s)\rangle`, :math:`g^\ell=\gamma_0N\,\partial f/\partial h^\ell`.

Fields (derived here in effth's weight convention, fan-in :math:`qN`; the paper's eq. (89) has
:math:`C_W/q` in place of :math:`C_W`).  With the patch operator
:math:`\mathcal A_\ell[M]=q^{-1}\sum_d S_dMS_d^\top` of convolution :math:`\ell`
(:func:`effth.pdlt.cnn.patch_average`; :math:`(S_dv)_i=v_{i+d}` with the padding) and its adjoint
:math:`\mathcal A_\ell^\top[M]=q^{-1}\sum_dS_d^\top MS_d`, the forward and backward kernels that
layer :math:`\ell` sees are

.. math::

    K^\ell_{\rm in}=C_b^{(\ell)}+C_W^{(\ell)}\mathcal A_\ell[\Phi^{\ell-1}],\qquad
    G^\ell_{\rm in}=C_W^{(\ell+1)}\mathcal A_{\ell+1}^\top[G^{\ell+1}],

:math:`\Phi^0_{\mu i,\alpha j}=x_{\mu i}\cdot x_{\alpha j}/C_0`; for the last hidden layer
:math:`G^L_{\rm in}` is the readout's, :math:`C_W^{(L+1)}/|\mathcal P|^2` (global average pooling)
or :math:`C_W^{(L+1)}\delta_{ij}/|\mathcal P|` (flatten).  On the GD grid :math:`t_k=k\eta`:

.. math::

    h^\ell(t) &= u^\ell(t)+\sum_{s<t}\Big[C_W^{(\ell)}\mathcal A_\ell[\bar A^{\ell-1}](t,s)
        +\gamma_0\eta\,K^\ell_{\rm in}(t,s)D(s)\Big]g^\ell(s),\\
    z^\ell(t) &= r^\ell(t)+\sum_{s\le t}C_W^{(\ell+1)}\mathcal A_{\ell+1}^\top[\bar B^{\ell}](t,s)
        \,\phi(h^\ell(s))+\gamma_0\eta\sum_{s<t}G^\ell_{\rm in}(t,s)D(s)\phi(h^\ell(s)),\qquad
    g^\ell=\phi'(h^\ell)\,z^\ell,

(matrices over image-pixel pairs, :math:`D(s)` multiplies the column :math:`(\alpha,j)` by
:math:`\Delta_\alpha(s)=y_\alpha-f_\alpha(s)`), with Gaussian sources
:math:`u^\ell\sim\mathcal{GP}(0,K^\ell_{\rm in})`, :math:`r^\ell\sim\mathcal{GP}(0,G^\ell_{\rm in})`
and the responses :math:`\bar A^\ell=\langle\partial\phi(h^\ell)/\partial r^\ell\rangle`,
:math:`\bar B^\ell=\langle\partial g^{\ell+1}/\partial u^{\ell+1}\rangle`.  They follow from the
cavity argument of the MLP (app. D) with the weights of one filter offset independent of the
others: the pair of weights that links a channel to the field and back meets with the same offset
:math:`d` on both sides, so every kernel and response is pulled through
:math:`q^{-1}\sum_dS_d\,\cdot\,S_d^\top` (or its adjoint).  The predictions (exact closure, app. M)
are

.. math::

    f_\mu(t)=\gamma_0^{-1}\Big\langle\sum_i r^L_{\mu i}\phi(h^L_{\mu i}(t))\Big\rangle
        +\eta\sum_{s<t}\sum_\alpha\Phi^{\rm out}_{\mu\alpha}(t,s)\Delta_\alpha(s),\qquad
    \Phi^{\rm out}=C_b^{(L+1)}+C_W^{(L+1)}\mathcal R[\Phi^L],

:math:`\mathcal R` the readout's mean over pixel pairs (pooling) or equal pixels (flatten); the
first term is evaluated by the readout's Stein regression as in
:func:`effth.dmft.solve_monte_carlo`.  The equal-time NTK is
:math:`K_{\mu\alpha}=\Phi^{\rm out}_{\mu\alpha}+\sum_\ell\sum_{ij}G^\ell_{\mu i,\alpha j}
K^\ell_{{\rm in},\mu i,\alpha j}`, at initialization the CNTK :math:`\Theta` of
:func:`effth.cnn_kernels`.

Checks (``tests/dmft/test_cnn_dmft.py``): 1×1 filters on one-pixel images reproduce
:func:`effth.dmft.solve_monte_carlo` sample for sample; the NTK of the initial state equals
:func:`effth.cnn_kernels`' :math:`\Theta`; small :math:`\gamma_0` gives the lazy CNTK dynamics;
trained CNNs approach the solution as the channels grow.

Machinery shared with :mod:`effth.dmft.solvers.monte_carlo`: sampling of the sources, the forward
substitution of the causal fields, the causal Stein regression of the responses, the window
constants and the exact closure; :class:`~effth.dmft.grid.TimeGrid`,
:class:`~effth.dmft.result.Diagnostics`; the result is a :class:`CNNDMFTResult`
(a :class:`~effth.dmft.result.DMFTResult` with pixel-resolved kernels).

Cost: the fields of one layer are ``S x T P |P|`` numbers and every kernel is dense over
(time, image, pixel), :math:`m=TP|\mathcal P|` indices, :math:`m^2` entries.  Per sweep, two
source covariances need a factor (:math:`O(m^3/3)`, Cholesky); the first layer's forward source
and the last layer's backward source have exact low-dimensional forms (a time-constant kernel;
the readout's one or :math:`|\mathcal P|` numbers).  The fields, the sample kernels and the
Stein regressions cost :math:`O(Sm^2)`, and the patch operators :math:`O(m^2\sum_kn_k^2)` as
per-axis matrix products.  Memory is :math:`O(m^2)` per kernel.  This is the dense cost the
paper calls very computationally intensive (app. G); up to :math:`m\approx5000` it grows like
:math:`m^{2.1}` (``benchmarks/bench_cnn_dmft.py``, ``docs/cnn.md``).  Circular padding
makes the problem equivariant under a common shift of all images, but the kernels of a fixed
data set are not functions of pixel differences (already :math:`\Phi^0_{\mu i,\alpha j}=
x_{\mu i}\cdot x_{\alpha j}/C_0` is not), so there is no block-circulant structure to split the
index by.  For deep *linear* CNNs :func:`solve_cnn_deep_linear` takes the same expectations in
closed form, and reduces circular pooled ones exactly to :func:`effth.dmft.solve_deep_linear`.
"""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace
from dataclasses import dataclass
from typing import Any

import numpy as np

from effth import _validate as _v
from effth._signature import public
from effth.arch.cnn import CNN, unpad
from effth.dmft.grid import TimeGrid, TrainingData, real_scalar
from effth.dmft.result import Diagnostics, DMFTResult
from effth.dmft.solvers.lazy import (activation_label, check_stability, check_stability_along,
                                     static_ntk_dynamics)
from effth.dmft.solvers.monte_carlo import (_FIRST_STOP, _criterion_text, _drive, _exact_closure,
                                            _finish,
                                            _flag_growth, _sample, _solve_fields, _stein,
                                            _unit_lower_inverse, _window)
from effth.errors import ConvergenceError, DomainError
from effth.pdlt.cnn import _pads, _pair_tables, cnn_kernels
from effth._progress import progress_bar

__all__ = ["CNNDMFTResult", "solve_cnn_monte_carlo", "solve_cnn_deep_linear", "patch_adjoint"]

#: paddings the solver handles (``'valid'``: every convolution shrinks the pixel grid)
DMFT_PADDINGS = ("circular", "same", "valid")


@public
def patch_adjoint(M: Any, filter_shape: tuple, padding: str) -> np.ndarray:
    r"""The adjoint patch operator :math:`\mathcal A^\top[M]=q^{-1}\sum_dS_d^\top MS_d`.

    For every offset :math:`d` the entry :math:`M_{\alpha i,\beta j}` is added at
    :math:`(\alpha, i+d;\ \beta, j+d)` (wrapped for ``'circular'``, dropped outside the image
    for ``'same'``), so that :math:`\langle\mathcal A[X],Y\rangle=\langle X,\mathcal A^\top[Y]\rangle`
    with :func:`effth.pdlt.cnn.patch_average`.

    Parameters
    ----------
    M : ndarray (P, *spatial, P, *spatial)
    filter_shape : tuple of int
    padding : {'circular', 'same'}

    Returns
    -------
    ndarray of the shape of ``M``
    """
    M = np.asarray(M, dtype=np.float64)
    dims = len(filter_shape)
    if padding not in DMFT_PADDINGS:
        raise DomainError(f"padding={padding!r}: the adjoint is implemented for {DMFT_PADDINGS}")
    if M.ndim != 2 + 2 * dims:
        raise DomainError(f"M must have shape (P, *spatial, P, *spatial) with {dims} spatial axes, "
                          f"got {M.shape}")
    sp = M.shape[1:1 + dims]
    pads = [_pads(f, padding) for f in filter_shape]
    big = (M.shape[0],) + tuple(s + f - 1 for s, f in zip(sp, filter_shape))
    acc = np.zeros(big + big)
    for d in itertools.product(*(range(f) for f in filter_shape)):
        sl = tuple(slice(dk, dk + s) for dk, s in zip(d, sp))
        acc[(slice(None),) + sl + (slice(None),) + sl] += M
    if padding != "valid":
        # back from padded to image coordinates, axis by axis (both sides)
        for side in (0, 1 + dims):
            acc = unpad(acc, pads, sp, padding, side + 1)
    return acc / float(np.prod(filter_shape))


def _axis_patch(f: int, n_in: int, n_out: int, padding: str) -> np.ndarray:
    r"""The patch operator of one spatial axis on pixel pairs, ``(n_out^2, n_in^2)``:
    :math:`f^{-1}\sum_dS_d\otimes S_d`, :math:`(S_dv)_i=v_{i+d-p}` (:math:`p` the padding before
    the axis; wrapped for ``'circular'``, zero outside for ``'same'``, :math:`p=0` and
    :math:`n_{\rm out}=n_{\rm in}-f+1` for ``'valid'``).  A shift of the pixel grid is a product
    of one shift per axis, with the same offset on both pixels of a pair, so
    :math:`\mathcal A=\mathcal A_1\circ\cdots\circ\mathcal A_{\rm dims}`: :math:`2\sum_k
    n_k^2` operations per entry of a kernel (a 3x3 filter on 8x8 pixels: 256), done as matrix
    products, instead of :math:`q` strided shifted copies."""
    pb = _pads(f, padding)[0]
    out = np.zeros((n_out * n_out, n_in * n_in))
    for d in range(f):
        Sd = np.zeros((n_out, n_in))
        for i in range(n_out):
            j = i + d - pb
            if padding == "circular":
                Sd[i, j % n_in] = 1.0
            elif 0 <= j < n_in:
                Sd[i, j] = 1.0
        out += np.kron(Sd, Sd)
    return out / float(f)


def _factor(K: np.ndarray) -> np.ndarray:
    """``F`` (m, r) with ``F F^T = K`` to rounding for a symmetric positive semi-definite ``K``:
    its Cholesky factor, or where ``K`` is singular the pivoted Cholesky factor of LAPACK's
    ``dpstrf`` (stopped at the numerical rank, tolerance ``m eps max K_ii``: the neglected
    Schur complement is semi-definite with diagonal below it), rows permuted back.  About a
    fifteenth of the work of the ``eigh`` square root of :func:`~effth.dmft.solvers.monte_carlo._sample`
    (and of its product), with the same Gaussian law of ``xi F^T``."""
    K = 0.5 * (K + K.T)
    try:
        return np.linalg.cholesky(K)
    except np.linalg.LinAlgError:
        pass
    from scipy.linalg import lapack
    c, piv, rank, info = lapack.dpstrf(K, lower=1, tol=-1.0)
    if info < 0:                                                    # pragma: no cover
        raise DomainError(f"dpstrf rejected argument {-info}")
    F = np.zeros((K.shape[0], rank))
    F[piv - 1] = np.tril(c[:, :rank])
    return F


def _draw(rng, F: np.ndarray, count: int) -> np.ndarray:
    r"""``count`` draws of :math:`\mathcal N(0,FF^\top)`."""
    return rng.standard_normal((count, F.shape[1])) @ F.T


class _Ops:
    """The pixel operators of one network on ``n`` images of spatial shape ``shape``, over the
    flattened index ``(t, mu, i)`` (time-major, then image, then pixel in C order).  Layer ``l``
    (``0``: the input) has ``Ss[l]`` pixels and ``ms[l] = n Ss[l]`` image-pixel pairs; ``S``,
    ``m`` are those of the last hidden layer (the readout's)."""

    def __init__(self, net: CNN, shape: tuple, n: int, T: int):
        self.net, self.n, self.T = net, n, T
        self.shapes = net.spatial_shapes(shape)          # input, hidden layers 1..L
        self.Ss = tuple(int(np.prod(sh)) for sh in self.shapes)
        self.ms = tuple(n * S for S in self.Ss)
        L = net.depth - 1
        self.L = L
        self.shape, self.S, self.m = self.shapes[L], self.Ss[L], self.ms[L]
        S = self.S
        # the readout: r^L = rho Lam, rho ~ N(0, cov)
        cwL, cbL = net.c_w_at(L + 1), net.c_b_at(L + 1)
        if net.readout == "gap":
            self.lam = np.ones((1, T * self.m))
            self.cov = np.array([[cwL / S ** 2]])
            self.cols = np.array([0])
        else:
            self.lam = np.tile(np.eye(S), (1, T * n))
            self.cov = cwL / S * np.eye(S)
            self.cols = np.arange(S)
        self.g_top = self.lam.T @ self.cov @ self.lam          # G^L_in (T m, T m)
        self.cwL, self.cbL = cwL, cbL
        # convolution ell's patch operator, one axis at a time (_axis_patch)
        self.axis_ops = [None] + [
            [_axis_patch(f, a, b, net.padding)
             for f, a, b in zip(net.filter_shapes[ell - 1], self.shapes[ell - 1], self.shapes[ell])]
            for ell in range(1, L + 1)]

    def _pix(self, M: np.ndarray, layer: int) -> np.ndarray:
        sh = self.shapes[layer]
        return M.reshape((self.T * self.n, *sh, self.T * self.n, *sh))

    def _flat(self, M: np.ndarray, layer: int) -> np.ndarray:
        k = self.T * self.ms[layer]
        return M.reshape(k, k)

    def patch(self, M: np.ndarray, ell: int) -> np.ndarray:
        """:math:`\\mathcal A_\\ell[M]` of a ``(T m, T m)`` matrix over layer ``ell - 1``'s pixels
        (convolution ``ell``), over layer ``ell``'s: :func:`effth.pdlt.cnn.patch_average` axis by
        axis (:func:`_axis_patch`)."""
        return self._flat(self._apply(self._pix(M, ell - 1), ell, False), ell)

    def adjoint(self, M: np.ndarray, ell: int) -> np.ndarray:
        """:math:`\\mathcal A_\\ell^\\top[M]`: from layer ``ell``'s pixels to layer ``ell - 1``'s
        (:func:`patch_adjoint`, axis by axis)."""
        return self._flat(self._apply(self._pix(M, ell), ell, True), ell - 1)

    def _apply(self, X: np.ndarray, ell: int, adjoint: bool) -> np.ndarray:
        """The per-axis operators of convolution ``ell`` on ``X (N, *sp, N, *sp)``: a contraction
        of the pixel pair ``(i_k, j_k)`` of every axis with an ``(n_out^2, n_in^2)`` matrix."""
        dims = len(self.axis_ops[ell])
        for k, B in enumerate(self.axis_ops[ell]):
            B4 = B.T if adjoint else B
            no, ni = int(round(np.sqrt(B4.shape[0]))), int(round(np.sqrt(B4.shape[1])))
            B4 = B4.reshape(no, no, ni, ni)
            X = np.tensordot(X, B4, axes=([1 + k, 2 + dims + k], [2, 3]))
            X = np.moveaxis(X, (-2, -1), (1 + k, 2 + dims + k))
        return np.ascontiguousarray(X)

    def draw_k_in(self, rng, ell: int, Kin: np.ndarray, count: int) -> np.ndarray:
        """``count`` draws of :math:`u^\\ell\\sim\\mathcal N(0,K^\\ell_{\\rm in})`: for
        :math:`\\ell=1` the kernel is constant in time (the input does not move), so one draw over
        (image, pixel) is repeated at every time -- the same law, a factor of
        :math:`P|\\mathcal P|` instead of :math:`TP|\\mathcal P|` indices; else :func:`_factor`."""
        if ell == 1:
            if getattr(self, "f_in1", None) is None:
                self.f_in1 = _factor(self.k_in1)
            return np.tile(_draw(rng, self.f_in1, count), (1, self.T))
        return _draw(rng, _factor(Kin), count)

    def draw_g_in(self, rng, ell: int, Gin: np.ndarray, count: int) -> np.ndarray:
        """``count`` draws of :math:`r^\\ell\\sim\\mathcal N(0,G^\\ell_{\\rm in})`: for the last
        hidden layer :math:`r^L=\\rho\\Lambda` with :math:`\\rho\\sim\\mathcal N(0,{\\rm cov})`
        of the readout (one or :math:`|\\mathcal P|` independent numbers), else :func:`_factor`."""
        if ell == self.L:
            rho = rng.standard_normal((count, self.cov.shape[0])) * np.sqrt(np.diag(self.cov))
            return rho @ self.lam
        return _draw(rng, _factor(Gin), count)

    def k_in(self, Phi_prev: np.ndarray, ell: int) -> np.ndarray:
        return self.net.c_b_at(ell) + self.net.c_w_at(ell) * self.patch(Phi_prev, ell)

    def g_in(self, G_next: np.ndarray | None, ell: int) -> np.ndarray:
        if ell == self.L:
            return self.g_top
        return self.net.c_w_at(ell + 1) * self.adjoint(G_next, ell + 1)

    def readout_kernel(self, PhiL: np.ndarray) -> np.ndarray:
        """:math:`\\Phi^{\\rm out}` over ``(t, mu)`` pairs, ``(T n, T n)``."""
        X = PhiL.reshape(self.T * self.n, self.S, self.T * self.n, self.S)
        if self.net.readout == "gap":
            R = X.mean(axis=(1, 3))
        else:
            R = np.einsum("aibi->ab", X) / self.S
        return self.cbL + self.cwL * R

    def readout_response(self, ph: np.ndarray, rho: np.ndarray) -> np.ndarray:
        r"""Per-sample :math:`\sum_i\sum_{kk'}\Lambda_{k,(t\mu i)}\mathrm{cov}_{kk'}
        \widehat{\partial\phi_{t\mu i}/\partial\rho_{k'}}` ``(S, T, n)``: the readout term
        :math:`\langle\sum_ir^L_{\mu i}\phi(h^L_{\mu i})\rangle` by Stein's identity, regressed on
        the sample's own :math:`\rho` (exact for :math:`\phi` linear in :math:`\rho`)."""
        S = ph.shape[0]
        coef = rho @ np.linalg.inv(rho.T @ rho / S)                      # (S, k)
        w = (coef @ self.cov) @ self.lam                                 # (S, T m)
        return (ph * w).reshape(S, self.T, self.n, self.S).sum(axis=-1)


def _initial_state(net: CNN, Xall: np.ndarray, ops: _Ops):
    """The lazy (initialization) kernels: :math:`\\Phi^\\ell=\\langle\\phi\\phi\\rangle_{K^\\ell}`,
    :math:`G^\\ell=\\langle\\phi'\\phi'\\rangle_{K^\\ell}\\odot G^\\ell_{\\rm in}` top down, tiled in
    time, and the NTK :math:`\\Phi^{\\rm out}+\\sum_\\ell\\sum_{ij}G^\\ell K^\\ell_{\\rm in}` over
    images."""
    kern = cnn_kernels(net.with_widths(None), Xall, ntk=False, pixel_pairs="full")
    n, L, T, ms, Ss = ops.n, ops.L, ops.T, ops.ms, ops.Ss
    ops.k_in1 = kern.value("K", layer=1).reshape(ms[1], ms[1])          # C_b + C_W A[x x / C_0]
    Q, Qd, Kin = [], [], []
    for ell in range(1, L + 1):
        K = kern.value("K", layer=ell).reshape(ms[ell], ms[ell])
        q, qd = _pair_tables(K, net.act, True, 1e-10, ell)
        Q.append(q)
        Qd.append(qd)
        Kin.append(K)
    one = _Ops(net, ops.shapes[0], n, 1)
    G = [None] * L
    for ell in range(L, 0, -1):
        G[ell - 1] = Qd[ell - 1] * one.g_in(G[ell] if ell < L else None, ell)
    ntk = one.readout_kernel(Q[-1])
    for ell in range(L):
        S = Ss[ell + 1]
        ntk = ntk + (G[ell] * Kin[ell]).reshape(n, S, n, S).sum(axis=(1, 3))
    return ([np.tile(q, (T, T)) for q in Q], [np.tile(g, (T, T)) for g in G], ntk)


@public
@dataclass(repr=False)
class CNNDMFTResult(DMFTResult):
    r"""A :class:`~effth.dmft.result.DMFTResult` of the CNN DMFT, kernels over image-pixel pairs.

    ``phi``, ``g`` are ``(L, T, n S, T, n S)`` (index ``(image, pixel)`` flattened, pixels in C
    order), read with ``value("phi", layer=ℓ)`` (or ``pixels=True`` for
    ``(T, n, *spatial, T, n, *spatial)``); ``A``, ``B`` the responses
    :math:`\gamma_0^{-1}\bar A`, :math:`\gamma_0^{-1}\bar B` in the same layout; ``f``, ``delta``,
    ``loss`` over images as for every DMFT result.  ``"ntk"`` is the equal-time NTK over images
    (module docstring of :mod:`effth.dmft.solvers.cnn`).  ``data.kx`` is the image Gram matrix
    :math:`x_\mu\cdot x_\alpha/(|\mathcal P|C_0)` of the flattened images.

    Attributes
    ----------
    With ``'valid'`` padding the layers have different pixel grids and ``phi``, ``g``, ``A``,
    ``B`` (and the standard errors of ``phi``, ``g``) are tuples with one ``(T, n S_l, T, n S_l)``
    array per layer instead of stacked arrays.

    Attributes
    ----------
    net : CNN
    spatial_shape : tuple
        The image size.
    layer_shapes : tuple of tuple
        The pixel grid of every hidden layer (all equal to ``spatial_shape`` but for ``'valid'``).
    ntk_equal_time : ndarray (T, n, n)
    """

    net: Any = None
    spatial_shape: tuple = ()
    layer_shapes: tuple = ()
    ntk_equal_time: np.ndarray | None = None

    @property
    def ntk(self) -> np.ndarray:
        """``(T, n, n)`` equal-time NTK over images."""
        return self.ntk_equal_time

    @property
    def ntk_two_time(self):
        raise DomainError("the CNN DMFT result holds the equal-time NTK only (value('ntk'))")

    @property
    def phi0(self):
        raise DomainError("the CNN DMFT's input kernel is over image-pixel pairs; see "
                          "effth.cnn_kernels for the layer kernels at initialization")

    def value(self, name: str, layer: int | None = None, *, pixels: bool = False) -> np.ndarray:
        """As :meth:`DMFTResult.value`; ``pixels=True`` restores the spatial axes of ``'phi'`` and
        ``'g'`` at one layer."""
        out = super().value(name, layer)
        if pixels:
            if name not in ("phi", "g") or layer is None:
                raise DomainError("pixels=True needs name='phi' or 'g' and a layer=")
            T, n = self.grid.steps, self.data.n_all
            sh = self.layer_shapes[int(layer) - 1] if self.layer_shapes else self.spatial_shape
            out = out.reshape((T, n, *sh, T, n, *sh))
        return out

    def __repr__(self) -> str:
        return (f"CNNDMFTResult({self.method}, {self.net!r}, eta={self.grid.eta:g}, "
                f"steps={self.grid.steps}, images={self.data.n_all} of shape {self.spatial_shape})")


def _check_net(net: Any) -> CNN:
    if not isinstance(net, CNN):
        raise DomainError(f"net must be an effth.CNN, got {type(net).__name__} (for an MLP use "
                          "effth.dmft.solve_monte_carlo)")
    if net.parameterization != "mup":
        raise DomainError("the CNN DMFT describes the muP / mean-field network: give "
                          "CNN(..., parameterization='mup', gamma0=...) (an 'ntk' network is lazy "
                          "at infinite width: use effth.cnn_kernels' Theta)")
    if net.padding not in DMFT_PADDINGS:
        raise DomainError(f"padding={net.padding!r} is not solved by the CNN DMFT (the layers "
                          f"would change size); use one of {DMFT_PADDINGS}")
    if net.n_out != 1:
        raise DomainError(f"the CNN DMFT solves one output; net has n_out={net.n_out}")
    return net


def _prepare(net, X, y, X_test, eta, steps):
    """Checked network, training images, all images (train then test), targets and grid."""
    net = _check_net(net)
    Xa = net.images(X)
    P = Xa.shape[0]
    yv = _v.real_array(y, "y", finite=True)
    if yv.shape != (P,):
        raise DomainError(f"y must have shape ({P},) (one target per training image), got {yv.shape}")
    Xall = Xa
    if X_test is not None:
        Xt = net.images(X_test, "X_test")
        if Xt.shape[1:] != Xa.shape[1:]:
            raise DomainError(f"X_test holds images of shape {Xt.shape[1:]}, the training images "
                              f"{Xa.shape[1:]}: images must have equal shapes")
        Xall = np.concatenate([Xa, Xt])
    eta = real_scalar(eta, "eta")
    return net, Xa, Xall, yv, TimeGrid(eta, steps)


@public
def solve_cnn_monte_carlo(net: CNN, X: Any, y: Any, *, eta: float, steps: int, X_test: Any = None,
                          samples: int = 2000, iterations: int | None = 15, damping: float = 0.6,
                          tol: float = 0.0, replicas: int = 4, stein_cut: float = 2.0,
                          seed: Any = 0, diverge_at: float = 1e6,
                          progress: bool | None = None, max_iterations: int = 200,
                          drift_z: float = 2.5, sampler: str = "cholesky") -> CNNDMFTResult:
    r"""Solve the CNN DMFT (app. G, eq. (89)) by alternating Monte Carlo (module docstring).

    Parameters
    ----------
    net : CNN
        ``parameterization='mup'`` with ``gamma0`` (its ``widths`` are ignored), padding
        ``'circular'``, ``'same'`` or ``'valid'`` (each convolution then shrinks the pixel grid:
        the kernels of layer :math:`\ell` live on its own pixels, :math:`\mathcal A_\ell` maps
        layer :math:`\ell-1`'s grid to :math:`\ell`'s), ``n_out = 1``, any activation (Stein
        responses).
    X : array_like (P, *spatial) or (P, *spatial, C_0)
        Training images (channels last).
    y : array_like (P,)
        Targets (loss :math:`\frac12\sum_\mu(f_\mu-y_\mu)^2`).
    eta, steps
        GD step (the time step of :func:`effth.simulation.train_cnn`) and number of grid
        points (``steps - 1`` updates).
    X_test : array_like, optional
        Test images of the same shape.
    samples : int
        Monte-Carlo draws per layer and sweep, split over ``replicas`` independent solves.
    iterations, damping, tol, stein_cut, diverge_at, max_iterations, drift_z
        As for :func:`effth.dmft.solve_monte_carlo`, with the one difference that
        ``iterations`` defaults to 15 sweeps here; ``iterations=None`` sweeps until the order
        parameters (``f`` and the diagonals of ``Phi^l``, ``G^l``) stop drifting within
        ``drift_z`` replica standard errors (the same test, ``replicas >= 2``), else
        :class:`~effth.errors.ConvergenceError` after ``max_iterations``.
    replicas : int
        Independent solves whose mean is returned and whose spread gives ``stderr`` of ``'f'``,
        ``'loss'``, ``'phi'``, ``'g'`` (``1``: no standard errors).
    seed : int, SeedSequence or Generator
    progress : bool, optional
    sampler : {'cholesky', 'eigh'}
        How the Gaussian sources are drawn; both draw exactly :math:`\mathcal N(0,K)`.
        ``'cholesky'``: the first layer's forward source once over (image, pixel) and repeated
        in time (its kernel is constant in time), the last layer's backward source from the
        readout's one (pooling) or :math:`|\mathcal P|` (flatten) numbers, the others through a
        (pivoted, where singular) Cholesky factor.  ``'eigh'``: every source through the
        symmetric square root of its :math:`TP|\mathcal P|\times TP|\mathcal P|`
        covariance, as :func:`effth.dmft.solve_monte_carlo` draws them (the same draws on the
        problems that are MLPs), about 15 times the work per factorization.

    Returns
    -------
    CNNDMFTResult
        A :class:`UserWarning` is issued when gradient descent leaves its stable region along the
        run (:math:`\eta\lambda_{\max}` of the equal-time NTK above 2, recorded in
        ``diagnostics.stability``): feature learning grows the NTK, and past that edge finite
        networks oscillate away from the DMFT.

    Raises
    ------
    DomainError
        Not a μP CNN, several outputs, images of unequal shape or a filter larger than the image
        (or than a layer's output with ``'valid'``), bad ``y``, ``eta`` past the lazy stability edge, or a problem
        whose dense kernels would not fit in memory.
    ConvergenceError
        A kernel entry exceeds ``diverge_at``.
    """
    net, Xa, Xall, yv, grid = _prepare(net, X, y, X_test, eta, steps)
    P, T = Xa.shape[0], grid.steps
    adaptive = iterations is None
    for name, v, lo in (("samples", samples, 4), ("replicas", replicas, 1)) + (
            (("max_iterations", max_iterations, _FIRST_STOP),) if adaptive
            else (("iterations", iterations, 1),)):
        _v.integer(v, name, minimum=lo)
    if adaptive and (int(replicas) < 2 or not (np.isfinite(drift_z) and drift_z > 0)):
        raise DomainError(f"iterations=None needs replicas >= 2 (their spread is the standard "
                          f"error of the drift test; got {replicas!r}) and a finite drift_z > 0 "
                          f"(got {drift_z!r})")
    n_max = int(max_iterations) if adaptive else int(iterations)
    if not (0.0 < damping <= 1.0):
        raise DomainError(f"damping={damping!r} must lie in (0, 1]")
    if sampler not in ("cholesky", "eigh"):
        raise DomainError(f"sampler={sampler!r} must be 'cholesky' or 'eigh'")
    if not (np.isfinite(tol) and tol >= 0) or not (np.isfinite(stein_cut) and stein_cut >= 0):
        raise DomainError(f"tol={tol!r} and stein_cut={stein_cut!r} must be finite and >= 0")
    shape = tuple(Xa.shape[1:-1])
    n = Xall.shape[0]
    ops = _Ops(net, shape, n, T)
    Tm = T * max(ops.ms[1:])
    R = int(replicas)
    per = -(-int(samples) // R)
    per += per % 2
    _v.check_memory(8.0 * (Tm * Tm * (6 * ops.L + 8) + 4 * per * Tm),
                    f"the CNN DMFT's dense kernels over (time, image, pixel) = {Tm} indices",
                    "lower steps, the number of images or the image size")
    Phi0, G0, ntk0 = _initial_state(net, Xall, ops)
    check_stability(ntk0[:P, :P], grid.eta)
    seed = _v.seed(seed)
    if isinstance(seed, np.random.Generator):
        gens = seed.spawn(R)
    else:
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        gens = [np.random.default_rng(c) for c in ss.spawn(R)] if R > 1 else [np.random.default_rng(seed)]
    t0 = time.perf_counter()
    chains = [_solve_one(net, ops, Phi0, G0, ntk0, yv, grid, per, n_max, float(damping),
                         float(tol), float(stein_cut), g, float(diverge_at), adaptive,
                         sampler)
              for g in gens]
    drift = None
    if adaptive:
        subs, drift, _ = _drive(chains, n_max, float(drift_z), float(tol), progress,
                                "CNN DMFT sweeps", "raise max_iterations or samples, damp more "
                                "(lower damping), or pass iterations= for a fixed number of sweeps")
    else:
        with progress_bar(R * n_max, "CNN DMFT sweeps", progress=progress, unit="sweep") as bar:
            subs = [_finish(c, bar) for c in chains]
    stack = {k: np.stack([s[k] for s in subs]) for k in ("f", "ntk")}
    mean = {k: v.mean(axis=0) for k, v in stack.items()}
    per = {k: [np.stack([s[k][j] for s in subs]) for j in range(len(subs[0][k]))]
           for k in ("phi", "g", "A", "B")}                      # per layer, replicas first
    for k, v in per.items():
        mean[k] = [x.mean(axis=0) for x in v]
    delta = yv[None] - mean["f"][:, :P]
    diag = Diagnostics(iterations=len(subs[0]["res"]) if adaptive else n_max, tol=float(tol),
                       replicas=R,
                       residuals=[float(x) for x in np.max([s["res"] for s in subs], axis=0)])
    diag.converged = None if tol == 0 else all(s["converged"] for s in subs)
    if adaptive:
        diag.converged, diag.drift, diag.drift_z = True, drift, float(drift_z)
        diag.criterion = _criterion_text(float(drift_z), n_max, float(tol))
    _flag_growth(diag)
    diag.seconds = time.perf_counter() - t0
    se = None
    if R > 1:
        losses = 0.5 * np.sum((yv[None, None] - stack["f"][:, :, :P]) ** 2, axis=2)
        se = {"f": stack["f"].std(axis=0, ddof=1) / np.sqrt(R)}
        for k in ("phi", "g"):
            se[k] = _layered([x.std(axis=0, ddof=1) / np.sqrt(R) for x in per[k]], T,
                             ops.ms[1:], ops.m)
        se["loss"] = losses.std(axis=0, ddof=1) / np.sqrt(R)
    return _result(net, ops, grid, Xall, yv, mean, delta, "monte_carlo", diag, se)


def _result(net, ops, grid, Xall, yv, out, delta, method, diag, se):
    T, n, L, ms, gam = grid.steps, ops.n, ops.L, ops.ms, float(net.gamma0)
    data = TrainingData(Xall.reshape(n, -1) @ Xall.reshape(n, -1).T / (ops.Ss[0] * Xall.shape[-1]),
                        yv, yv.size)
    return check_stability_along(CNNDMFTResult(
        grid=grid, data=data, hidden_layers=L, gamma0=gam, activation=activation_label(net.act),
        phi=_layered(out["phi"], T, ms[1:], ops.m), g=_layered(out["g"], T, ms[1:], ops.m),
        A=_layered(out["A"], T, ms[1:L], ops.m, gam), B=_layered(out["B"], T, ms[2:], ops.m, gam),
        f=out["f"], delta=delta, method=method, closure="exact", diagnostics=diag, mc_stderr=se,
        net=net, spatial_shape=ops.shapes[0], layer_shapes=ops.shapes[1:],
        ntk_equal_time=out["ntk"]))


def _drives(ops, w, ell, k0, Phi, G, Ab, Bb, dcol, ge):
    """Layer ``ell``'s source covariances and drive matrices of the field equations (module
    docstring): ``K_in``, ``G_in`` and ``Cm = C_W A[Abar] + gamma0 eta K_in D`` (maps ``g`` into
    ``h``, strictly causal), ``Dm = C_W A^T[Bbar] + gamma0 eta G_in D`` (maps ``phi(h)`` into
    ``z``); ``ge = gamma0 eta``, ``dcol`` the column weights ``Delta_alpha(s)``."""
    L = ops.L
    Kin = k0 if ell == 1 else ops.k_in(Phi[ell - 2], ell)
    Gin = ops.g_in(G[ell] if ell < L else None, ell)
    Cm = ge * w.strict_r * Kin * dcol[None, :]
    Dm = ge * w.strict_r * Gin * dcol[None, :]
    if ell >= 2:
        Cm = Cm + ops.net.c_w_at(ell) * ops.patch(Ab[ell - 2], ell)
    if ell <= L - 1:
        Dm = Dm + ops.net.c_w_at(ell + 1) * ops.adjoint(Bb[ell - 1], ell + 1)
    return Kin, Gin, Cm, Dm


def _solve_one(net, ops, Phi0, G0, ntk0, y, grid, S, iterations, damping, tol, cut, rng,
               diverge_at, adaptive=False, sampler="cholesky"):
    """One alternating solve with ``S`` draws per layer and sweep (Jacobi sweeps over layers), as
    a generator: after each sweep it yields the monitored order parameters (``adaptive``: ``f``
    and the diagonals of the new ``Phi^l``, ``G^l``, for
    :func:`~effth.dmft.solvers.monte_carlo._drive`) and receives whether to stop; a fixed-sweep
    chain stops itself after ``iterations`` sweeps or at ``tol``.  Returns its state."""
    L, T = ops.L, ops.T
    P = y.size
    eta, gam = grid.eta, float(net.gamma0)
    phi_f, dphi_f = net.act.numpy(0), net.act.numpy(1)
    ws = _windows(ops)
    delta = y[None] - static_ntk_dynamics(ntk0, y, eta, T)[:, :P]
    Phi, G = [p.copy() for p in Phi0], [g.copy() for g in G0]
    Ab, Bb = _zero_responses(ops)
    k0 = np.tile(ops.k_in1, (T, T))                                # K^1_in, constant in time
    res_hist, converged, f = [], False, None
    for it in range(iterations):
        dcols = _error_columns(ops, delta, P)
        Phin, Gn, Abn, Bbn = [None] * L, [None] * L, [None] * (L - 1), [None] * (L - 1)
        ro = None
        with np.errstate(over="ignore", invalid="ignore"):
            for ell in range(1, L + 1):
                w, m = ws[ell], ops.ms[ell]
                Kin, Gin, Cm, Dm = _drives(ops, w, ell, k0, Phi, G, Ab, Bb, dcols[ell], gam * eta)
                if sampler == "eigh":
                    uh, rh = _sample(rng, Kin, S // 2), _sample(rng, Gin, S // 2)
                else:
                    uh = ops.draw_k_in(rng, ell, Kin, S // 2)
                    rh = ops.draw_g_in(rng, ell, Gin, S // 2)
                uh = np.concatenate([uh, uh])
                rh = np.concatenate([rh, -rh])
                h, z, g = _solve_fields(uh, rh, Cm, Dm, phi_f, dphi_f, T, m, 1)
                ph = phi_f(h)
                Phin[ell - 1] = ph.T @ ph / S
                Gn[ell - 1] = g.T @ g / S
                if ell <= L - 1:
                    Abn[ell - 1] = w.mask_a * _stein(ph, rh, Gin, cut, True, w.pre_a)
                if ell >= 2:
                    Bbn[ell - 2] = w.mask_b * _stein(g, uh, Kin, cut, False, w.pre_b, w.eq_b)
                if ell == L:
                    ro = ops.readout_response(ph, rh[:, ops.cols])
        bad = [x for x in Phin + Gn if not np.all(np.isfinite(x)) or np.max(np.abs(x)) > diverge_at]
        if bad:
            raise ConvergenceError(f"CNN DMFT diverged at iteration {it + 1}; lower gamma0 or eta, "
                                   "raise samples or damp more")
        Pout = ops.readout_kernel(Phin[-1])
        f = _exact_closure(Pout, ro.mean(axis=0)[..., None] / gam, y[:, None], eta)[..., 0]
        delta_new = y[None] - f[:, :P]
        res = max(max(float(np.max(np.abs(a - b))) for a, b in zip(Phin + Gn, Phi + G)),
                  float(np.max(np.abs(delta_new - delta))))
        res_hist.append(res)
        mix = lambda old, new: [(1 - damping) * a + damping * b for a, b in zip(old, new)]
        Phi, G, Ab, Bb = mix(Phi, Phin), mix(G, Gn), mix(Ab, Abn), mix(Bb, Bbn)
        delta = (1 - damping) * delta + damping * delta_new
        if adaptive:
            x = np.concatenate([f.ravel()] + [np.diagonal(a) for a in Phin + Gn])
            if (yield SimpleNamespace(x=x, se=None, res=res, it=it + 1, final=True)):
                break
            continue
        yield None
        if tol > 0 and res < tol:
            converged = True
            break
    ntk = _equal_time_ntk(ops, k0, Phi, G)
    return dict(phi=Phi, g=G, A=Ab, B=Bb, f=f, ntk=ntk, res=res_hist, converged=converged)


def _windows(ops):
    """The Monte-Carlo window constants of every hidden layer (shared between equal sizes)."""
    cache = {}
    for m in set(ops.ms[1:]):
        cache[m] = _window(ops.T, m, 1, 1.0, np.zeros((m, m)))
    return [None] + [cache[m] for m in ops.ms[1:]]


def _zero_responses(ops):
    """``Abar^1..Abar^{L-1}`` (layers 1..L-1) and ``Bbar^1..Bbar^{L-1}`` (on layers 2..L), zero."""
    T, L = ops.T, ops.L
    return ([np.zeros((T * ops.ms[k], T * ops.ms[k])) for k in range(1, L)],
            [np.zeros((T * ops.ms[k], T * ops.ms[k])) for k in range(2, L + 1)])


def _error_columns(ops, delta, P):
    """Per hidden layer, :math:`\\Delta_\\alpha(s)` on the columns ``(s, alpha, j)``."""
    dl = np.zeros((ops.T, ops.n))
    dl[:, :P] = delta
    flat = dl.reshape(-1)
    return [None] + [np.repeat(flat, S) for S in ops.Ss[1:]]


def _layered(arrs, T, ms, m_default, scale=1.0):
    """Per-layer flat ``(T m, T m)`` arrays as ``(k, T, m, T, m)`` when the layers share ``m``
    (every padding but ``'valid'``), else a tuple of ``(T, m_l, T, m_l)`` arrays."""
    shaped = [a.reshape(T, m, T, m) / scale for a, m in zip(arrs, ms)]
    if len(set(ms)) > 1:
        return tuple(shaped)
    if not shaped:
        return np.zeros((0, T, m_default, T, m_default))
    return np.stack(shaped)



def _equal_time_ntk(ops, k0, Phi, G):
    r"""``(T, n, n)`` equal-time NTK :math:`\Phi^{\rm out}+\sum_\ell\sum_{ij}G^\ell K^\ell_{\rm in}`."""
    T, n, L = ops.T, ops.n, ops.L
    idx = np.arange(T)
    eq = lambda M, m: M.reshape(T, m, T, m)[idx, :, idx, :]              # (T, m, m)
    ntk = ops.readout_kernel(Phi[-1]).reshape(T, n, T, n)[idx, :, idx, :]
    for ell in range(1, L + 1):
        Kin = k0 if ell == 1 else ops.k_in(Phi[ell - 2], ell)
        m, S = ops.ms[ell], ops.Ss[ell]
        ntk = ntk + (eq(G[ell - 1], m) * eq(Kin, m)).reshape(T, n, S, n, S).sum(axis=(2, 4))
    return ntk


def _is_identity(act) -> bool:
    xs = np.linspace(-3.0, 3.0, 13)
    return bool(np.allclose(act.numpy(0)(xs), xs, rtol=0, atol=1e-12)
                and np.allclose(act.numpy(1)(xs), 1.0, rtol=0, atol=1e-12))


@public
def solve_cnn_deep_linear(net: CNN, X: Any, y: Any, *, eta: float, steps: int,
                          X_test: Any = None, tol: float = 1e-11, max_iter: int | None = None,
                          reduce: bool = False) -> DMFTResult:
    r"""The CNN DMFT of a deep *linear* CNN in closed form, without sampling (app. G with
    :math:`\phi(h)=h`; the CNN analogue of :func:`effth.dmft.solve_deep_linear`).

    For :math:`\phi(h)=h` the field equations of :mod:`effth.dmft.solvers.cnn` are linear,
    :math:`h=u+C_sz`, :math:`z=r+D_lh` (:math:`C_s` the strictly causal part of the drive of
    :math:`h`, :math:`D_l` the causal part of the drive of :math:`z`, both over
    (time, image, pixel)), so with :math:`M=(1-C_sD_l)^{-1}` (unit lower triangular by causality)
    :math:`h=M(u+C_sr)` and :math:`z=(1+D_lMC_s)r+D_lMu` are Gaussian and every order parameter is
    a matrix product,

    .. math::

        \Phi^\ell=M(K^\ell_{\rm in}+C_sG^\ell_{\rm in}C_s^\top)M^\top,\quad
        G^\ell=N G^\ell_{\rm in}N^\top+D_lMK^\ell_{\rm in}M^\top D_l^\top\ (N=1+D_lMC_s),\quad
        \bar A^\ell=MC_s,\quad \bar B^{\ell-1}=D_lM,

    and the readout term of the exact closure is
    :math:`\langle\sum_ir^L_{\mu i}h^L_{\mu i}(t)\rangle=\sum_i[MC_sG^L_{\rm in}]_{(t\mu i),(t\mu i)}`:
    the expectations that :func:`solve_cnn_monte_carlo` estimates, taken exactly.  The
    equations are iterated (Jacobi sweeps over layers, as the Monte-Carlo solver) to the fixed
    point, which causality makes exact after finitely many sweeps.  Cost
    :math:`O((TP|\mathcal P|)^3)` per sweep and layer, memory :math:`O((TP|\mathcal P|)^2)`.

    ``reduce=True`` (circular padding, global average pooling, :math:`C_W=1`, :math:`C_b=0`): the
    exact reduction to the deep linear MLP.  With circular padding the pixel mean
    :math:`\bar h^{\ell+1}_j=\sum_{k}w^\ell_{jk}\bar h^\ell_k/\sqrt N` of a linear
    convolution only sees the summed filter :math:`w^\ell=q^{-1/2}\sum_dW^\ell_d`, whose entries
    are again :math:`\mathcal N(0,1)`; pooling reads out :math:`\bar h^L` only, and gradient
    descent with one rate on every :math:`W_d` moves :math:`w` by the MLP's gradient step
    (:math:`\partial w/\partial W_d=q^{-1/2}`, :math:`q` offsets).  So the CNN is, at every width
    and step, the deep linear MLP of the same depth and :math:`\gamma_0` on the pixel-mean images
    :math:`\bar x_\mu` (kernel :math:`\bar x_\mu\cdot\bar x_\alpha/C_0`), solved by
    :func:`effth.dmft.solve_deep_linear` at :math:`O(T^2P^2)` cost whatever the image size.
    Its ``phi`` are the pixel means :math:`|\mathcal P|^{-2}\sum_{ij}\Phi^\ell_{\mu i,\alpha j}`
    of the CNN kernels, its ``g`` are :math:`|\mathcal P|^2G^\ell` (the backward fields of a linear
    pooled CNN do not depend on the pixel), and ``f``, ``loss`` and the NTK are the CNN's.

    Parameters
    ----------
    net : CNN
        ``parameterization='mup'``, identity activation (``'linear'`` or ``'identity'``),
        ``'circular'``, ``'same'`` or ``'valid'`` padding, one output.
    X, y, X_test, eta, steps
        As for :func:`solve_cnn_monte_carlo`.
    tol : float
        Stop when the largest change of a kernel, response or residual is below ``tol``.
    max_iter : int, optional
        Sweeps before :class:`ConvergenceError` (default ``2 T L + 10``).
    reduce : bool
        Use the exact reduction to :func:`effth.dmft.solve_deep_linear` (above).

    Returns
    -------
    CNNDMFTResult or DMFTResult
        The pixel-resolved result (``method='deep_linear'``, no standard errors), or with
        ``reduce=True`` the deep linear MLP's :class:`~effth.dmft.result.DMFTResult`.

    Raises
    ------
    DomainError
        A nonlinear activation; with ``reduce=True`` a network outside the reduction's conditions;
        otherwise as :func:`solve_cnn_monte_carlo`.
    ConvergenceError
        No fixed point within ``max_iter`` sweeps.
    """
    net, Xa, Xall, yv, grid = _prepare(net, X, y, X_test, eta, steps)
    if not _is_identity(net.act):
        raise DomainError(f"solve_cnn_deep_linear needs the identity activation ('linear' or "
                          f"'identity'), got {net.act!r}; use solve_cnn_monte_carlo")
    if not (np.isfinite(tol) and tol > 0):
        raise DomainError(f"tol={tol!r} must be finite and > 0")
    P, T, L = Xa.shape[0], grid.steps, net.depth - 1
    if reduce:
        from effth.dmft.solvers.deep_linear import solve_deep_linear
        cw = [net.c_w_at(k) for k in range(1, net.depth + 1)]
        cb = [net.c_b_at(k) for k in range(1, net.depth + 1)]
        if net.padding != "circular" or net.readout != "gap" or any(c != 1.0 for c in cw) \
                or any(c != 0.0 for c in cb):
            raise DomainError("reduce=True is exact for circular padding, readout='gap', c_w=1 "
                              f"and c_b=0 (got padding={net.padding!r}, readout={net.readout!r}, "
                              f"c_w={tuple(cw)}, c_b={tuple(cb)}); use reduce=False")
        xbar = Xall.reshape(Xall.shape[0], -1, Xall.shape[-1]).mean(axis=1)
        kx = xbar @ xbar.T / Xall.shape[-1]
        return solve_deep_linear(kernel=kx, y=yv, depth=net.depth, gamma0=float(net.gamma0),
                                 eta=grid.eta, steps=T, tol=max(tol, 1e-10))
    shape = tuple(Xa.shape[1:-1])
    n = Xall.shape[0]
    ops = _Ops(net, shape, n, T)
    Tm = T * max(ops.ms[1:])
    _v.check_memory(8.0 * Tm * Tm * (6 * L + 12),
                    f"the linear CNN DMFT's dense kernels over (time, image, pixel) = {Tm} indices",
                    "lower steps, the number of images or the image size")
    max_iter = 2 * T * L + 10 if max_iter is None else _v.integer(max_iter, "max_iter", minimum=1)
    Phi0, G0, ntk0 = _initial_state(net, Xall, ops)
    check_stability(ntk0[:P, :P], grid.eta)
    t0 = time.perf_counter()
    out = _solve_linear(net, ops, Phi0, G0, ntk0, yv, grid, float(tol), int(max_iter))
    diag = Diagnostics(iterations=len(out["res"]), tol=float(tol), residuals=out["res"])
    diag.converged = True
    diag.seconds = time.perf_counter() - t0
    return _result(net, ops, grid, Xall, yv, out, yv[None] - out["f"][:, :P], "deep_linear", diag,
                   None)


def _solve_linear(net, ops, Phi0, G0, ntk0, y, grid, tol, max_iter):
    """Jacobi sweeps of the exact Gaussian expectations (:func:`solve_cnn_deep_linear`)."""
    L, T, n = ops.L, ops.T, ops.n
    P = y.size
    eta, gam = grid.eta, float(net.gamma0)
    ws = _windows(ops)
    masks = {}
    for m in set(ops.ms[1:]):
        ones = np.ones((m, m))
        masks[m] = (np.kron(np.tril(np.ones((T, T)), -1), ones),       # h sees g of s < t
                    np.kron(np.tril(np.ones((T, T))), ones),           # z sees h of s <= t
                    np.eye(T * m))
    delta = y[None] - static_ntk_dynamics(ntk0, y, eta, T)[:, :P]
    Phi, G = [p.copy() for p in Phi0], [g.copy() for g in G0]
    Ab, Bb = _zero_responses(ops)
    k0 = np.tile(ops.k_in1, (T, T))
    res_hist, f = [], None
    for it in range(max_iter):
        dcols = _error_columns(ops, delta, P)
        Phin, Gn, Abn, Bbn = [None] * L, [None] * L, [None] * (L - 1), [None] * (L - 1)
        for ell in range(1, L + 1):
            w = ws[ell]
            strict, causal, eye = masks[ops.ms[ell]]
            Kin, Gin, Cm, Dm = _drives(ops, w, ell, k0, Phi, G, Ab, Bb, dcols[ell], gam * eta)
            Cs, Dl = Cm * strict, Dm * causal
            M = _unit_lower_inverse(eye - Cs @ Dl)
            MC, DM = M @ Cs, Dl @ M
            Phin[ell - 1] = M @ (Kin + Cs @ Gin @ Cs.T) @ M.T
            N = eye + DM @ Cs
            Gn[ell - 1] = N @ Gin @ N.T + DM @ Kin @ DM.T
            if ell <= L - 1:
                Abn[ell - 1] = w.mask_a * MC
            if ell >= 2:
                Bbn[ell - 2] = w.mask_b * DM
            if ell == L:
                ro = np.einsum("ii->i", MC @ Gin).reshape(T, n, ops.S).sum(axis=-1)
        Pout = ops.readout_kernel(Phin[-1])
        f = _exact_closure(Pout, ro[..., None] / gam, y[:, None], eta)[..., 0]
        delta_new = y[None] - f[:, :P]
        res = max(max(float(np.max(np.abs(a - b))) for a, b in zip(Phin + Gn + Abn + Bbn,
                                                                   Phi + G + Ab + Bb)),
                  float(np.max(np.abs(delta_new - delta))))
        res_hist.append(res)
        Phi, G, Ab, Bb, delta = Phin, Gn, Abn, Bbn, delta_new
        if not np.isfinite(res):
            break
        if res < tol:
            ntk = _equal_time_ntk(ops, k0, Phi, G)
            return dict(phi=Phi, g=G, A=Ab, B=Bb, f=f, ntk=ntk, res=res_hist)
    raise ConvergenceError(f"the linear CNN DMFT did not reach tol={tol:g} in {max_iter} sweeps "
                           f"(last residual {res_hist[-1]:.3g}); lower gamma0 or eta")
