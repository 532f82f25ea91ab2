r"""Infinite-channel CNN kernels: the NNGP kernel and the NTK over pixel pairs.

For the network :class:`effth.arch.CNN`, at infinitely many channels every preactivation
:math:`z^{(\ell)}_{\alpha,c,i}` is a Gaussian process over (image, pixel) with covariance
:math:`K^{(\ell)}_{\alpha i,\beta j}` independent of the channel (Novak et al. 2019, §2.2 and
eq. (7)-(8); Garriga-Alonso et al. 2019), and the NTK is the CNTK of Arora et al. 2019, §4 and
app. D; the lazy (:math:`\gamma_0\to0`) limit of Bordelon & Pehlevan 2022, app. G, eq. (89).
With the patch operator of a filter of :math:`q=|\mathcal S|` offsets,

.. math::

    \mathcal A[M]_{\alpha i,\beta j} = \frac1q\sum_{d\in\mathcal S} M_{\alpha,i+d;\,\beta,j+d}

(the same offset on both sides; the padding of :class:`~effth.arch.CNN` fixes :math:`i+d`:
wrapped for ``'circular'``, zero outside the image for ``'same'``, the valid pixels only for
``'valid'``), and :math:`Q^{(\ell)}=\langle\sigma\sigma\rangle_{K^{(\ell)}}`,
:math:`\dot Q^{(\ell)}=\langle\sigma'\sigma'\rangle_{K^{(\ell)}}` taken entry by entry over the
:math:`2\times2` covariances of pixel pairs:

.. math::

    K^{(1)} &= C_b^{(1)} + C_W^{(1)}\,\mathcal A[x x^\top / C_0],\qquad \Theta^{(1)} = K^{(1)},\\
    K^{(\ell+1)} &= C_b^{(\ell+1)} + C_W^{(\ell+1)}\mathcal A[Q^{(\ell)}],\qquad
    \Theta^{(\ell+1)} = K^{(\ell+1)} + C_W^{(\ell+1)}\mathcal A[\dot Q^{(\ell)}\odot\Theta^{(\ell)}],

for :math:`\ell=1..L-2` (PDLT (4.118) and (9.5) with the NTK parameterization's
:math:`\lambda_b=C_b`, :math:`\lambda_W=C_W`, the sum over one filter taking the place of the sum
over neurons).  The readout (layer :math:`L`) replaces :math:`\mathcal A` by the mean over all
pixel pairs, :math:`|\mathcal P|^{-2}\sum_{ij}M_{\alpha i,\beta j}` (global average pooling), or
over equal pixels, :math:`|\mathcal P|^{-1}\sum_i M_{\alpha i,\beta i}` (flatten).  These are
neural-tangents' ``stax.Conv(..., padding='CIRCULAR'|'SAME'|'VALID')``, ``GlobalAvgPool``,
``Flatten`` and ``Dense`` kernels with ``W_std**2 = C_W``, ``b_std**2 = C_b`` (its fan-in is
channels times filter size).

For ``parameterization='mup'`` the same :math:`\Theta` is the NTK in units of the DMFT time step
:math:`\eta` (Bordelon & Pehlevan 2022, eq. (19) with their :math:`C_W` divided by :math:`q`),
and the output's covariance at initialization is :math:`K^{(L)}/\gamma^2\to0`; :math:`K^{(L)}`
is then the readout kernel :math:`C_b+C_W\Phi^{L-1}` of the pooled features.

The Gaussian expectations over pixel pairs are effth's shared two-point tables (closed forms:
the arc-cosine kernels for ReLU and its family, Williams' arcsine kernel for erf; Mehler's
expansion or quadrature for tanh and other smooth activations), evaluated on the
:math:`P|\mathcal P|\times P|\mathcal P|` kernel of a layer.

Cost and memory per layer: :math:`O(P^2|\mathcal P|^2)` two-point expectations and
:math:`O(qP^2|\mathcal P|^2)` additions for the patch operator (the filter's local structure: the
same offset on both pixels, never a dense :math:`(P|\mathcal P|)^2\times(P|\mathcal P|)^2` map);
memory :math:`O(P^2|\mathcal P|^2)` floats per layer held (10 images of 8×8 pixels: 3.3 MB per
layer).  Measured on one core: 10 images of 8×8, 3×3 filters, depth 5, ReLU, NNGP and NTK in
about 0.1 s (``docs/cnn.md``).

The flatten readout reads only the equal-pixel entries :math:`K_{\alpha i,\beta i}` of layer
:math:`L-1`, and :math:`\mathcal A[M]_{\alpha i,\beta i}=q^{-1}\sum_dM_{\alpha,i+d;\beta,i+d}`
reads only equal-pixel entries of the layer below, so these
:math:`D_{\alpha\beta,i}=K_{\alpha i,\beta i}` obey the same recursion on their own (what
neural-tangents' ``Flatten`` exploits, its ``diagonal_spatial``).  ``cnn_kernels`` takes this path
for the flatten readout (``pixel_pairs``): :math:`O(P^2|\mathcal P|)` expectations and memory
per layer, :math:`|\mathcal P|` times fewer (digits of 8×8, ``benchmarks/cnn_flatten_diagonal.py``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from effth._results import WeightLayers
from effth._signature import public
from effth.arch.cnn import CNN
from effth.arch.cnn import padding_widths as _pads
from effth.errors import DomainError
from effth.numerics import gaussian_expectation
from effth.numerics.sample_tables import closed_pair_tables, pair_plans, pair_tables

__all__ = ["CNNKernels", "cnn_kernels", "patch_average"]


@public
def patch_average(M: Any, filter_shape: tuple, padding: str) -> np.ndarray:
    r"""The patch operator :math:`\mathcal A[M]_{\alpha i,\beta j}=q^{-1}\sum_{d}M_{\alpha,i+d;\beta,j+d}`.

    Parameters
    ----------
    M : ndarray (P, *spatial, P, *spatial)
        A tensor over (image, pixel) pairs.
    filter_shape : tuple of int
        One size per spatial axis; offsets :math:`d_k=0..f_k-1` shifted by ``(f_k-1)//2``.
    padding : {'circular', 'same', 'valid'}
        Pixels outside the image: wrapped, zero, or not used (the output shrinks by
        :math:`f_k-1` per axis).

    Returns
    -------
    ndarray (P, *out_spatial, P, *out_spatial)
    """
    M = np.asarray(M, dtype=np.float64)
    dims = len(filter_shape)
    if M.ndim != 2 + 2 * dims:
        raise DomainError(f"M must have shape (P, *spatial, P, *spatial) with {dims} spatial axes, "
                          f"got {M.shape}")
    return _shift_mean(M, filter_shape, padding, (1, 2 + dims))


def _shift_mean(M: np.ndarray, filter_shape: tuple, padding: str, starts: tuple) -> np.ndarray:
    r"""The mean over the filter's offsets :math:`d` of ``M`` shifted by the same :math:`d` on
    every group of spatial axes (the groups begin at the axes ``starts``): :math:`\mathcal A` of
    :func:`patch_average` for ``starts=(1, 2 + dims)``; on the equal-pixel entries
    :math:`D_{\alpha\beta,i}=M_{\alpha i,\beta i}` (``starts=(2,)``) the same operator, since
    :math:`\mathcal A` reads the equal-pixel entries :math:`(i+d, i+d)` alone there."""
    dims = len(filter_shape)
    sp = M.shape[starts[0]:starts[0] + dims]
    if padding != "valid":
        width = [(0, 0)] * M.ndim
        for a in starts:
            width[a:a + dims] = [_pads(f, padding) for f in filter_shape]
        M = np.pad(M, width, mode="wrap" if padding == "circular" else "constant")
    out_sp = tuple(s if padding != "valid" else s - f + 1 for s, f in zip(sp, filter_shape))
    out = None
    for d in itertools.product(*(range(f) for f in filter_shape)):
        idx = [slice(None)] * M.ndim
        for a in starts:
            idx[a:a + dims] = [slice(dk, dk + ok) for dk, ok in zip(d, out_sp)]
        block = M[tuple(idx)]
        out = block.copy() if out is None else out + block
    return out / float(np.prod(filter_shape))


def _flat(M: np.ndarray, P: int) -> np.ndarray:
    """(P, *sp, P, *sp) -> (P S, P S)."""
    S = int(np.prod(M.shape[1:M.ndim // 2]))
    return M.reshape(P * S, P * S)


@public
@dataclass(repr=False)
class CNNKernels(WeightLayers):
    r"""Infinite-channel NNGP kernels :math:`K^{(\ell)}` and NTKs :math:`\Theta^{(\ell)}` of a CNN.

    Read it as every effth result (``docs/conventions.md``): ``value(name, layer=ℓ)``,
    ``stderr(...)`` (``None``: deterministic), ``layers``.

    ============  ============================================================  =====================
    name          quantity                                                      shape
    ============  ============================================================  =====================
    ``"K"``       NNGP kernel of layer :math:`\ell` (default: the output)       hidden ``(P, S, P, S)``,
                                                                                output ``(P, P)``
    ``"Theta"``   NTK of layer :math:`\ell` (default: the output)               the same
    ============  ============================================================  =====================

    Hidden layers :math:`\ell=1..L-1` are over (image, pixel) pairs with the pixels of layer
    :math:`\ell` flattened in C order (``S = prod(spatial_shapes[ℓ])``); the output layer
    :math:`L` is over images.  ``value(name, layer=ℓ, pixels=True)`` restores the spatial axes
    ``(P, *spatial, P, *spatial)``; ``value(name, layer=ℓ, diagonal=True)`` gives the equal-pixel
    entries :math:`D_{\alpha\beta,i}=K_{\alpha i,\beta i}`, shape ``(P, P, S)`` (``pixels=True``:
    ``(P, P, *spatial)``, neural-tangents' ``diagonal_spatial`` layout).

    With ``pixel_pairs == "diagonal"`` (a flatten readout, :func:`cnn_kernels`) only those
    entries were computed: the hidden entries of ``K`` and ``Theta`` are ``(P, P, S)``, and
    ``value`` without ``diagonal=True`` computes the full pixel-pair kernels once, on the first
    such call (the cost of ``pixel_pairs="full"``), and keeps them.

    Attributes
    ----------
    K, Theta : list of ndarray
        Entry :math:`\ell-1` is layer :math:`\ell` (``Theta`` is ``None`` when not computed).
    net : CNN
    spatial_shapes : tuple
        Input shape, then the spatial shape of each hidden layer.
    pixel_pairs : {'full', 'diagonal'}
        Which pixel pairs the hidden layers hold.
    """

    K: list
    Theta: list | None
    net: CNN
    spatial_shapes: tuple
    pixel_pairs: str = "full"
    _inputs: tuple | None = field(default=None, compare=False)
    _full: Any = field(default=None, compare=False)

    @property
    def depth(self) -> int:
        return self.net.depth

    @property
    def layers(self) -> tuple:
        return tuple(range(1, self.net.depth + 1))

    @property
    def names(self) -> tuple:
        return ("K",) if self.Theta is None else ("K", "Theta")

    def value(self, name: str, layer: int | None = None, *, pixels: bool = False,
              diagonal: bool = False) -> np.ndarray:
        """The kernel ``name`` at book layer ``layer`` (``None``: the output layer ``L``);
        ``diagonal=True``: its equal-pixel entries (hidden layers; class docstring)."""
        if name not in ("K", "Theta"):
            raise DomainError(f"unknown name {name!r}; CNNKernels holds {self.names}")
        if name == "Theta" and self.Theta is None:
            raise DomainError("the NTK was not computed: call cnn_kernels(..., ntk=True)")
        ell = self.depth if layer is None else layer
        if isinstance(ell, bool) or not isinstance(ell, (int, np.integer)) or not 1 <= ell <= self.depth:
            raise DomainError(f"layer must be an int in 1..{self.depth}, got {layer!r}")
        arr = (self.K if name == "K" else self.Theta)[ell - 1]
        if ell < self.depth:
            P = self.K[-1].shape[0]
            sp = self.spatial_shapes[ell]
            S = int(np.prod(sp))
            if diagonal:
                if self.pixel_pairs == "full":
                    arr = np.einsum("aibi->abi", arr.reshape(P, S, P, S)).copy()
                return arr.reshape((P, P, *sp)) if pixels else arr.reshape(P, P, S)
            if self.pixel_pairs == "diagonal":
                if self._full is None:
                    X, ntk, rtol = self._inputs
                    self._full = cnn_kernels(self.net, X, ntk=ntk, rtol=rtol, pixel_pairs="full")
                return self._full.value(name, ell, pixels=pixels)
            arr = arr.reshape((P, *sp, P, *sp)) if pixels else arr.reshape(P, -1, P, S)
        return arr

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: the theory is deterministic."""
        self.value(name, layer, diagonal=True)
        return None

    def __repr__(self) -> str:
        P = self.K[-1].shape[0]
        return (f"CNNKernels({self.names}, {P} images of shape {self.spatial_shapes[0]}, "
                f"depth={self.depth}, {self.net.act.name}, padding={self.net.padding!r}, "
                f"readout={self.net.readout!r}, pixel_pairs={self.pixel_pairs!r})")


def _expectation_pairs(K: np.ndarray, act: Any, order: int, iu: np.ndarray, ju: np.ndarray,
                       rtol: float) -> np.ndarray:
    r""":math:`\langle\sigma^{(p)}_u\sigma^{(p)}_v\rangle` for the index pairs ``(iu, ju)`` by
    :func:`effth.gaussian_expectation`, batched over their :math:`2\times2` covariances (equal
    indices as one-sample atoms): point masses of zero-variance pixels included."""
    out = np.empty(iu.size)
    d = np.diag(K)
    same = iu == ju
    if same.any():
        f1 = [(0, "sigma", order), (0, "sigma", order)]
        out[same] = gaussian_expectation(f1, d[iu[same]].reshape(-1, 1, 1), act, rtol=rtol)
    if (~same).any():
        u, v = iu[~same], ju[~same]
        B = np.empty((u.size, 2, 2))
        B[:, 0, 0], B[:, 1, 1] = d[u], d[v]
        B[:, 0, 1] = B[:, 1, 0] = K[u, v]
        out[~same] = gaussian_expectation([(0, "sigma", order), (1, "sigma", order)], B, act,
                                          rtol=rtol)
    return out


def _pair_tables(Kf: np.ndarray, act: Any, ntk: bool, rtol: float, layer: int) -> tuple:
    r""":math:`Q=\langle\sigma\sigma\rangle` and (``ntk``) :math:`\dot Q=\langle\sigma'\sigma'\rangle`
    over all (image, pixel) pairs, as the MLP NTK flow evaluates its two-point atoms: closed forms
    (:func:`~effth.numerics.sample_tables.closed_pair_tables`), then Mehler's expansion or
    shared-node quadrature for smooth activations
    (:func:`~effth.numerics.sample_tables.pair_tables`), then
    :func:`effth.gaussian_expectation` entry by entry (kinked activations at zero-variance pixels,
    where the point mass :math:`\sigma(0)` counts, PDLT (2.9))."""
    Kf = 0.5 * (Kf + Kf.T)
    orders = {(0, 0), (1, 1)} if ntk else {(0, 0)}
    if ntk and act.singular_part(1):
        raise DomainError(f"the NTK of {act!r} is not defined: sigma' has a Dirac part (a jump); "
                          "use ntk=False for the NNGP kernel alone")
    n = Kf.shape[0]
    zero = np.diag(Kf) <= 0.0
    if act.kinks and zero.any() and not zero.all():
        # kinked sigma at zero-variance pixels (zero patches): closed forms on the other pixels;
        # a zero-variance z_u is the constant 0, so <sigma^(p)_u sigma^(p)_v> is the point mass
        # sigma^(p)(0) (PDLT (2.9), as effth.gaussian_expectation counts it) times
        # <sigma^(p)_v>, with <sigma^(p)_v> = sigma^(p)(0) at another zero pixel
        pos = np.flatnonzero(~zero)
        sub = _pair_tables(Kf[np.ix_(pos, pos)], act, ntk, rtol, layer)
        z = np.flatnonzero(zero)
        d = np.diag(Kf).copy()
        tabs = {}
        for o, T in zip(((0, 0), (1, 1)), sub):
            if T is None:
                continue
            f1 = [(0, "sigma", o[0])]
            point = float(gaussian_expectation(f1, [[0.0]], act, rtol=rtol))
            mean = np.full(n, point)
            mean[pos] = gaussian_expectation(f1, d[pos].reshape(-1, 1, 1), act, rtol=rtol)
            full = np.empty((n, n))
            full[np.ix_(pos, pos)] = T
            full[z, :] = point * mean[None, :]
            full[:, z] = point * mean[:, None]
            tabs[o] = full
        return tabs[0, 0], tabs.get((1, 1))
    with np.errstate(over="ignore", invalid="ignore"):
        tabs = closed_pair_tables(Kf, act, orders)
        rest = {o for o in orders if o not in tabs}
        if rest and act.is_smooth:
            more, _ = pair_tables(Kf, act, rest, rtol=rtol)
            tabs.update(more)
        for o in orders:
            if o not in tabs:
                iu, ju = np.triu_indices(n)
                v = _expectation_pairs(Kf, act, o[0], iu, ju, rtol)
                T = np.empty((n, n))
                T[iu, ju] = v
                T[ju, iu] = v
                tabs[o] = T
    for o in orders:
        if not np.all(np.isfinite(tabs[o])):
            raise DomainError(f"non-finite Gaussian expectations at layer {layer} (the kernel "
                              "overflows); reduce c_w, c_b or the input scale")
    return tabs[0, 0], (tabs[1, 1] if ntk else None)


@public
def cnn_kernels(net: CNN, X: Any, *, ntk: bool = True, rtol: float = 1e-10,
                pixel_pairs: str = "auto") -> CNNKernels:
    r"""NNGP kernels and NTKs of an infinitely wide CNN, layer by layer (module docstring).

    Parameters
    ----------
    net : CNN
        Its ``widths`` are ignored (infinite channels).
    X : array_like, shape (P, *spatial) or (P, *spatial, C_0)
        Images of equal shape (channels last).
    ntk : bool
        Also compute :math:`\Theta^{(\ell)}` (needs :math:`\sigma'` to be a function).
    rtol : float
        Relative accuracy of the Gaussian expectations without a closed form (tanh, ...).
    pixel_pairs : {'auto', 'full', 'diagonal'}
        The pixel pairs computed at the hidden layers.  ``'full'``: all of them.
        ``'diagonal'`` (flatten readout only): the equal-pixel entries
        :math:`K_{\alpha i,\beta i}` alone, which are all that the flatten readout reads and
        that :math:`\mathcal A` needs (the same offset :math:`d` on both pixels maps equal pixels
        to equal pixels), :math:`|\mathcal P|` times fewer entries (module docstring).
        ``'auto'``: ``'diagonal'`` for the flatten readout, ``'full'`` for pooling.  The output
        kernels are the same either way to round-off (closed forms) or to ``rtol`` (quadrature,
        whose rules follow the largest scale of the kernel they are given).

    Returns
    -------
    CNNKernels

    Raises
    ------
    DomainError
        Not a CNN, images of the wrong rank or unequal shape, a filter larger than the image it
        reads, an NTK for an activation with a jump, overflow (the layer is named),
        ``pixel_pairs='diagonal'`` with the pooling readout.

    Examples
    --------
    >>> import numpy as np
    >>> from effth.arch import CNN
    >>> X = np.random.default_rng(0).standard_normal((3, 6))
    >>> kern = cnn_kernels(CNN("relu", depth=3, filter_size=3, dims=1), X)
    >>> kern.value("K").shape, kern.value("Theta", layer=1).shape
    ((3, 3), (3, 6, 3, 6))
    """
    if not isinstance(net, CNN):
        raise DomainError(f"net must be an effth.arch.CNN, got {type(net).__name__} "
                          "(for an MLP use effth.flow / effth.ntk_flow)")
    if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
        raise DomainError(f"rtol must be in (0, 1), got {rtol!r}")
    if not isinstance(pixel_pairs, str) or pixel_pairs not in ("auto", "full", "diagonal"):
        raise DomainError(f"pixel_pairs must be 'auto', 'full' or 'diagonal', got {pixel_pairs!r}")
    if pixel_pairs == "diagonal" and net.readout != "flatten":
        raise DomainError("pixel_pairs='diagonal' needs readout='flatten': global average pooling "
                          "reads every pixel pair of the last hidden layer")
    if pixel_pairs == "auto":
        pixel_pairs = "diagonal" if net.readout == "flatten" else "full"
    Xa = net.images(X)
    if pixel_pairs == "diagonal":
        return _diagonal_kernels(net, Xa, ntk, rtol)
    P, C0 = Xa.shape[0], Xa.shape[-1]
    shapes = net.spatial_shapes(Xa.shape[1:-1])
    act = net.act
    L = net.depth
    dims = net.dims
    # input Gram over (image, pixel) pairs, channels averaged: (P, *sp, P, *sp)
    flat = Xa.reshape(P, -1, C0)
    G = np.einsum("aic,bjc->aibj", flat, flat) / C0
    G = G.reshape((P, *shapes[0], P, *shapes[0]))
    Ks, Ts = [], ([] if ntk else None)
    K = net.c_b_at(1) + net.c_w_at(1) * patch_average(G, net.filter_shapes[0], net.padding)
    T = K.copy() if ntk else None
    for ell in range(1, L):
        Ks.append(_flat(K, P))
        if ntk:
            Ts.append(_flat(T, P))
        sp = shapes[ell]
        Q, Qd = _pair_tables(Ks[-1], act, ntk, rtol, ell)
        cw, cb = net.c_w_at(ell + 1), net.c_b_at(ell + 1)
        M = Q.reshape((P, *sp, P, *sp))
        MT = (Qd * Ts[-1]).reshape((P, *sp, P, *sp)) if ntk else None
        if ell < L - 1:
            K = cb + cw * patch_average(M, net.filter_shapes[ell], net.padding)
            if ntk:
                T = K + cw * patch_average(MT, net.filter_shapes[ell], net.padding)
        else:
            pix_axes = tuple(range(1, 1 + dims)) + tuple(range(2 + dims, 2 + 2 * dims))
            if net.readout == "gap":
                K = cb + cw * M.mean(axis=pix_axes)
                if ntk:
                    T = K + cw * MT.mean(axis=pix_axes)
            else:
                S = int(np.prod(sp))
                K = cb + cw * np.einsum("aibi->ab", Q.reshape(P, S, P, S)) / S
                if ntk:
                    T = K + cw * np.einsum("aibi->ab", MT.reshape(P, S, P, S)) / S
    _close_kernels(Ks, Ts, K, T if ntk else None)
    return CNNKernels(K=Ks, Theta=Ts, net=net, spatial_shapes=shapes)


def _close_kernels(Ks: list, Ts: list, K: np.ndarray, T: np.ndarray | None) -> None:
    """Append the (symmetrized) output-layer kernels and refuse an overflow at any layer."""
    Ks.append(0.5 * (K + K.T))
    if T is not None:
        Ts.append(0.5 * (T + T.T))
    for ell, k in enumerate(Ks, start=1):
        if not np.all(np.isfinite(k)):
            raise DomainError(f"the kernel overflows at layer {ell}; reduce c_w, c_b or the input scale")


def _diagonal_pair_tables(D: np.ndarray, act: Any, ntk: bool, rtol: float, layer: int) -> tuple:
    r""":func:`_pair_tables` on the equal-pixel entries ``D`` ``(P, P, S)``: the closed forms of
    :func:`~effth.numerics.sample_tables.closed_pair_tables` batched over the pixels (the same
    entry-by-entry formulas and the same conditions on the variances of all (image, pixel)
    inputs), else :func:`_pair_tables` pixel by pixel on its :math:`P\times P` kernel."""
    P, S = D.shape[0], D.shape[2]
    D = 0.5 * (D + D.transpose(1, 0, 2))
    orders = [(0, 0), (1, 1)] if ntk else [(0, 0)]
    d = np.einsum("aai->ai", D)
    ar = np.arange(P)
    iu, ju = np.triu_indices(P, 1)
    plans = {} if (ntk and act.singular_part(1)) else pair_plans(act, orders, d.ravel())
    tabs = {}
    for o in orders:
        if o not in plans:
            break
        # image pairs mu < nu, then mirrored: the orders (p, p) are symmetric, and the pair's
        # arguments come in the order of the full path's upper triangle
        T = np.empty(D.shape)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            T[iu, ju, :] = plans[o][0](d[iu], d[ju], D[iu, ju, :])
            T[ju, iu, :] = T[iu, ju, :]
            T[ar, ar, :] = np.asarray(plans[o][1](d.ravel())).reshape(P, S)
        if not np.all(np.isfinite(T)):
            break
        tabs[o] = T
    if len(tabs) == len(orders):
        return tabs[0, 0], tabs.get((1, 1))
    Q, Qd = np.empty((P, P, S)), (np.empty((P, P, S)) if ntk else None)
    for i in range(S):          # pixel i: its P x P kernel over images
        q, qd = _pair_tables(D[:, :, i], act, ntk, rtol, layer)
        Q[:, :, i] = q
        if ntk:
            Qd[:, :, i] = qd
    return Q, Qd


def _diagonal_kernels(net: CNN, Xa: np.ndarray, ntk: bool, rtol: float) -> CNNKernels:
    r""":func:`cnn_kernels` on the equal-pixel entries :math:`D_{\alpha\beta,i}=K_{\alpha i,\beta i}`
    alone (flatten readout): per layer :math:`|\mathcal P|` two-point tables of :math:`P\times P`
    and :math:`O(qP^2|\mathcal P|)` additions."""
    P, C0 = Xa.shape[0], Xa.shape[-1]
    shapes = net.spatial_shapes(Xa.shape[1:-1])
    L = net.depth
    G = np.einsum("aic,bic->abi", Xa.reshape(P, -1, C0), Xa.reshape(P, -1, C0)) / C0
    G = G.reshape((P, P, *shapes[0]))
    Ks, Ts = [], ([] if ntk else None)
    K = net.c_b_at(1) + net.c_w_at(1) * _shift_mean(G, net.filter_shapes[0], net.padding, (2,))
    T = K.copy() if ntk else None
    for ell in range(1, L):
        sp = shapes[ell]
        S = int(np.prod(sp))
        Ks.append(K.reshape(P, P, S))
        if ntk:
            Ts.append(T.reshape(P, P, S))
        Q, Qd = _diagonal_pair_tables(Ks[-1], net.act, ntk, rtol, ell)
        cw, cb = net.c_w_at(ell + 1), net.c_b_at(ell + 1)
        MT = Qd * Ts[-1] if ntk else None
        if ell < L - 1:
            K = cb + cw * _shift_mean(Q.reshape((P, P, *sp)), net.filter_shapes[ell], net.padding,
                                      (2,))
            if ntk:
                T = K + cw * _shift_mean(MT.reshape((P, P, *sp)), net.filter_shapes[ell],
                                         net.padding, (2,))
        else:
            K = cb + cw * Q.sum(axis=2) / S
            if ntk:
                T = K + cw * MT.sum(axis=2) / S
    _close_kernels(Ks, Ts, K, T if ntk else None)
    return CNNKernels(K=Ks, Theta=Ts, net=net, spatial_shapes=shapes, pixel_pairs="diagonal",
                      _inputs=(Xa, ntk, rtol))
