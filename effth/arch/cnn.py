r"""The convolutional network :class:`CNN`: 1-D or 2-D convolutions of stride 1 and a dense readout.

The network (Novak et al. 2019, "Bayesian deep CNNs with many channels are Gaussian processes",
§2 and app. E; Arora et al. 2019, "On exact computation with an infinitely wide neural net",
§4; Bordelon & Pehlevan 2022, app. G, eq. (88)), on an image :math:`x_\alpha` with
:math:`C_0` channels and pixels :math:`i` of a 1-D or 2-D grid:

.. math::

    z^{(1)}_{\alpha,c,i} &= b^{(1)}_c + \sqrt{\frac{C_W^{(1)}}{q\,C_0}}
        \sum_{d\in\mathcal S}\sum_{c'} \omega^{(1)}_{c c' d}\; x_{\alpha,c',i+d},\\
    z^{(\ell+1)}_{\alpha,c,i} &= b^{(\ell+1)}_c + \sqrt{\frac{C_W^{(\ell+1)}}{q\,n_\ell}}
        \sum_{d\in\mathcal S}\sum_{c'} \omega^{(\ell+1)}_{c c' d}\;
        \sigma\big(z^{(\ell)}_{\alpha,c',i+d}\big),\qquad \ell=1..L-2,

with :math:`\omega\sim\mathcal N(0,1)`, :math:`b^{(\ell)}\sim\mathcal N(0,C_b^{(\ell)})`, filter
offsets :math:`\mathcal S` (:math:`q=|\mathcal S|` of them), stride 1, and hidden channels
:math:`n_1..n_{L-1}` (``widths``).  The fan-in of a filter is :math:`q\,n_\ell` (channels times
filter size), the convention of neural-tangents' ``stax.Conv(W_std=sqrt(C_W), b_std=sqrt(C_b),
parameterization='ntk')``; Bordelon & Pehlevan's eq. (88) normalizes by :math:`\sqrt N` only,
i.e. their :math:`C_W` is this one divided by :math:`q`.  The readout (weight layer :math:`L`,
no activation after it) is dense:

* ``readout="gap"`` (global average pooling):
  :math:`f_\alpha = b^{(L)} + \sqrt{C_W^{(L)}/n_{L-1}}\sum_c \omega_c\,
  |\mathcal P|^{-1}\sum_i\sigma(z^{(L-1)}_{\alpha,c,i})`;
* ``readout="flatten"``: :math:`f_\alpha = b^{(L)} + \sqrt{C_W^{(L)}/(n_{L-1}|\mathcal P|)}
  \sum_{c,i}\omega_{c i}\,\sigma(z^{(L-1)}_{\alpha,c,i})`,

:math:`|\mathcal P|` the number of pixels of the last hidden layer.

Padding (``padding=``) fixes the pixels :math:`i+d` that a filter reads, with the offsets
:math:`d=0..f-1` of a filter of size :math:`f` shifted by ``(f-1)//2`` (the convention of
``SAME`` convolutions in TensorFlow, JAX and neural-tangents):

* ``"circular"``: :math:`i+d` taken modulo the image size (the image is a torus; kernels then
  depend on pixel differences only for translation-invariant data); the image size is kept;
* ``"same"``: zero padding (the activations outside the image are 0); the size is kept;
* ``"valid"``: no padding; each layer's output is :math:`f-1` pixels shorter per axis.

Parameterizations (``parameterization=``):

* ``"ntk"``: the network above with unit learning rate on every :math:`\omega` and
  :math:`\beta=b/\sqrt{C_b}`: the NTK parameterization of PDLT §9.1 / Jacot et al. (the
  NTK :math:`\Theta` of neural-tangents);
* ``"mup"``: Bordelon & Pehlevan's μP / mean-field network (their eq. (1) and app. G): the
  same hidden layers, the output divided by :math:`\gamma=\gamma_0\sqrt{n_{L-1}}`, and learning
  rate :math:`\eta\gamma^2` per NTK-normalized parameter (in the standard weights
  :math:`W=\sqrt{C_W/\mathrm{fan\,in}}\,\omega` of the hidden and readout layers this is
  :math:`\eta\gamma_0^2\,n_{L-1}C_W/\mathrm{fan\,in}`, and :math:`\eta\gamma_0^2 n_{L-1}` for
  the first layer's :math:`\omega`, as in :func:`effth.simulation.simulate_training`).  The
  NTK in units of :math:`\eta` equals the ``"ntk"`` one at any width; the output's covariance
  at initialization is the ``"ntk"`` one divided by :math:`\gamma^2`.

Examples
--------
>>> net = CNN("relu", depth=3, widths=16, filter_size=3, dims=2, padding="circular")
>>> net.filter_shapes, net.hidden_layers
(((3, 3), (3, 3)), 2)
>>> net.spatial_shapes((8, 8))
((8, 8), (8, 8), (8, 8))
>>> CNN("relu", depth=3, filter_size=3, dims=1, padding="valid").spatial_shapes((10,))
((10,), (8,), (6,))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from effth._signature import public
from effth._validate import real_array
from effth.activations import Activation, get_activation
from effth.arch._common import LayeredNetwork, _as_int, _is_scalar, _widths, as_real, per_layer
from effth.errors import DomainError

__all__ = ["CNN", "PADDINGS", "READOUTS", "PARAMETERIZATIONS"]

#: padding modes (module docstring)
PADDINGS = ("circular", "same", "valid")
#: readouts of the last hidden layer
READOUTS = ("gap", "flatten")
#: parameterizations
PARAMETERIZATIONS = ("ntk", "mup")


def _filter_shapes(filter_size: Any, dims: int, convs: int) -> tuple[tuple[int, ...], ...]:
    """One filter shape (a ``dims``-tuple of positive ints) per convolutional layer from an int,
    a ``dims``-tuple, or a sequence of ``convs`` of those."""
    def one(v: Any) -> tuple[int, ...]:
        if _is_scalar(v):
            f = _as_int(v, "filter_size")
            shape = (f,) * dims
        else:
            if isinstance(v, (str, bytes)):
                raise DomainError(f"filter_size must be an int or a tuple of {dims} ints, got {v!r}")
            shape = tuple(_as_int(x, "filter_size") for x in v)
            if len(shape) != dims:
                raise DomainError(f"filter_size {v!r} needs {dims} entries (one per spatial axis, "
                                  f"dims={dims})")
        if any(f < 1 for f in shape):
            raise DomainError(f"filter sizes must be positive ints, got {shape}")
        return shape

    if _is_scalar(filter_size):
        return (one(filter_size),) * convs
    if isinstance(filter_size, (str, bytes)):
        raise DomainError(f"filter_size must be an int or a tuple of ints, got {filter_size!r}")
    items = list(filter_size)
    if any(not _is_scalar(v) for v in items):          # one entry per convolutional layer
        if len(items) != convs:
            raise DomainError(f"filter_size needs one shape per convolutional layer (depth-1 = "
                              f"{convs}), got {len(items)}")
        return tuple(one(v) for v in items)
    if len(items) == dims:                             # one shape for every layer
        return (one(items),) * convs
    if dims == 1 and len(items) == convs:              # 1-D: one size per layer
        return tuple(one(v) for v in items)
    raise DomainError(f"filter_size={filter_size!r}: give an int, a tuple of dims={dims} ints, or "
                      f"one of those per convolutional layer ({convs})")


@public
@dataclass(frozen=True)
class CNN(LayeredNetwork):
    r"""A convolutional network of stride 1 with a dense readout (module docstring).

    Parameters
    ----------
    activation : str or Activation
        Registered name (:func:`effth.activations.available_activations`) or an
        :class:`~effth.activations.Activation`.
    depth : int
        Number of weight layers :math:`L\ge2`: :math:`L-1` convolutions and the readout.
    widths : int or sequence of int, optional
        Hidden channels :math:`n_1..n_{L-1}` (an int means all equal); ``None`` for the
        infinite-width theory (a simulation needs them).  :attr:`channels` is the same tuple.
    filter_size : int, tuple of int, or sequence of those
        Filter size per spatial axis: one int (square filters), a ``dims``-tuple, or one of those
        per convolutional layer (e.g. ``[(8, 8), 1, 1]``).
    dims : {1, 2}
        Number of spatial axes of the images.
    padding : {'circular', 'same', 'valid'}
        Module docstring.
    readout : {'gap', 'flatten'}
        Global average pooling or flattening of the last hidden layer before the dense readout.
    c_w, c_b : float or sequence of float
        :math:`C_W^{(\ell)}>0`, :math:`C_b^{(\ell)}\ge0`, one value or one per weight layer
        :math:`\ell=1..L` (the readout last).
    parameterization : {'ntk', 'mup'}
        Module docstring; ``'mup'`` needs ``gamma0``.
    gamma0 : float, optional
        :math:`\gamma_0\ne0` of the μP network (``None`` with ``'ntk'``).
    n_out : int
        Number of outputs (default 1).

    Raises
    ------
    DomainError
        ``depth < 2``, non-positive channels or filter sizes, unknown padding, readout or
        parameterization, ``gamma0`` missing for ``'mup'`` (or given for ``'ntk'``), negative or
        non-finite variances, wrong lengths.
    """

    activation: Any
    depth: int
    widths: Any = None
    filter_size: Any = 3
    dims: int = 2
    padding: str = "circular"
    readout: str = "gap"
    c_w: Any = 1.0
    c_b: Any = 0.0
    parameterization: str = "ntk"
    gamma0: Any = None
    n_out: int = 1
    _act: Activation = field(init=False, repr=False, compare=False)
    filter_shapes: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_act", get_activation(self.activation))
        depth = _as_int(self.depth, "depth")
        if depth < 2:
            raise DomainError(f"a CNN needs depth >= 2 (at least one convolution and the readout), "
                              f"got depth={self.depth!r}")
        object.__setattr__(self, "depth", depth)
        dims = _as_int(self.dims, "dims")
        if dims not in (1, 2):
            raise DomainError(f"dims must be 1 or 2 (1-D or 2-D convolutions), got {self.dims!r}")
        object.__setattr__(self, "dims", dims)
        if self.widths is not None:
            try:
                object.__setattr__(self, "widths", _widths(self.widths, depth))
            except DomainError as exc:
                raise DomainError(str(exc).replace("hidden widths", "hidden channels (widths)")) from None
        object.__setattr__(self, "filter_shapes", _filter_shapes(self.filter_size, dims, depth - 1))
        for name, value, allowed in (("padding", self.padding, PADDINGS),
                                     ("readout", self.readout, READOUTS),
                                     ("parameterization", self.parameterization, PARAMETERIZATIONS)):
            if not isinstance(value, str) or value not in allowed:
                raise DomainError(f"{name}={value!r}: choose one of {allowed}")
        if self.parameterization == "mup":
            if self.gamma0 is None:
                raise DomainError("parameterization='mup' needs gamma0= (gamma = gamma0 sqrt(N))")
            g0 = as_real(self.gamma0, "gamma0")
            if not (np.isfinite(g0) and g0 != 0):
                raise DomainError(f"gamma0={self.gamma0!r} must be finite and nonzero")
            object.__setattr__(self, "gamma0", g0)
        elif self.gamma0 is not None:
            raise DomainError("gamma0= belongs to parameterization='mup'; the 'ntk' network has none")
        n_out = _as_int(self.n_out, "n_out")
        if n_out < 1:
            raise DomainError(f"n_out must be a positive int, got {self.n_out!r}")
        object.__setattr__(self, "n_out", n_out)
        object.__setattr__(self, "c_w", per_layer(self.c_w, depth, "c_w", positive=True))
        object.__setattr__(self, "c_b", per_layer(self.c_b, depth, "c_b", positive=False))

    # ------------------------------------------------------------------ description
    @property
    def channels(self):
        """The hidden channels (the same as :attr:`hidden_widths`)."""
        return self.widths


    def spatial_shapes(self, image_shape: Sequence[int]) -> tuple[tuple[int, ...], ...]:
        """Spatial shapes of the input and of the hidden layers ``1..L-1``.

        Raises :class:`~effth.errors.DomainError` when a filter is larger than the image it reads
        (naming the layer): ``'circular'`` would wrap a filter onto itself and ``'valid'`` would
        leave no pixel.
        """
        shape = tuple(int(s) for s in image_shape)
        if len(shape) != self.dims:
            raise DomainError(f"images of this {self.dims}-D CNN need {self.dims} spatial axes, "
                              f"got the shape {shape}")
        if any(s < 1 for s in shape):
            raise DomainError(f"image sizes must be positive, got {shape}")
        out = [shape]
        for ell, f in enumerate(self.filter_shapes, start=1):
            if any(fk > sk for fk, sk in zip(f, shape)):
                raise DomainError(
                    f"the filter {f} of convolutional layer {ell} is larger than the "
                    f"{'input image' if ell == 1 else f'output of layer {ell - 1}'} {shape} "
                    f"(padding={self.padding!r}); use a smaller filter_size"
                    + (", fewer layers or 'circular'/'same' padding" if self.padding == "valid" else ""))
            if self.padding == "valid":
                shape = tuple(sk - fk + 1 for fk, sk in zip(f, shape))
            out.append(shape)
        return tuple(out)

    def images(self, X: Any, name: str = "X") -> np.ndarray:
        """Inputs as a finite float64 array ``(P, *spatial, C_0)`` (channels last, as NHWC).

        Accepts ``(P, *spatial)`` (one channel) or ``(P, *spatial, C_0)``; ``dims`` decides which.
        """
        Xa = real_array(X, name)
        if Xa.ndim == 1 + self.dims:
            Xa = Xa[..., None]
        if Xa.ndim != 2 + self.dims:
            lay = "(P, L)" if self.dims == 1 else "(P, H, W)"
            lay_c = "(P, L, C)" if self.dims == 1 else "(P, H, W, C)"
            raise DomainError(f"{name} must hold images of equal shape, {lay} or {lay_c} for this "
                              f"{self.dims}-D CNN; got an array of shape {Xa.shape}")
        if min(Xa.shape) < 1:
            raise DomainError(f"{name} has an empty axis: shape {Xa.shape}")
        if not np.isfinite(Xa).all():
            raise DomainError(f"{name} has non-finite entries (NaN or inf)")
        self.spatial_shapes(Xa.shape[1:-1])
        return Xa

    def __repr__(self) -> str:
        def short(values: tuple) -> str:
            if len(set(values)) == 1:
                v = values[0]
                return f"{v:g}" if isinstance(v, float) else f"{v}"
            return "(" + ", ".join(f"{v:g}" if isinstance(v, float) else f"{v}" for v in values) + ")"

        widths = "None" if self.widths is None else short(self.widths)
        name = self.activation if isinstance(self.activation, str) else self._act.name
        fs = self.filter_shapes
        filt = (fs[0][0] if len(set(fs)) == 1 and len(set(fs[0])) == 1 else
                fs[0] if len(set(fs)) == 1 else list(fs))
        par = (f", parameterization='mup', gamma0={self.gamma0:g}"
               if self.parameterization == "mup" else "")
        out = f", n_out={self.n_out}" if self.n_out != 1 else ""
        return (f"CNN({name!r}, depth={self.depth}, widths={widths}, filter_size={filt}, "
                f"dims={self.dims}, padding={self.padding!r}, readout={self.readout!r}, "
                f"c_w={short(self.c_w)}, c_b={short(self.c_b)}{par}{out})")

    def with_widths(self, widths: int | Sequence[int] | None) -> "CNN":
        """The same network with other hidden channels."""
        return CNN(self.activation, self.depth, widths, [tuple(f) for f in self.filter_shapes],
                   self.dims, self.padding, self.readout, self.c_w, self.c_b,
                   self.parameterization, self.gamma0, self.n_out)


# ------------------------------------------------------------------ the padding convention
def padding_widths(f: int, padding: str) -> tuple[int, int]:
    """Zeros (or wrapped pixels) added before and after an axis for a filter of size ``f``:
    ``(0, 0)`` for ``'valid'``, else ``((f - 1) // 2, f - 1 - (f - 1) // 2)`` (the simulator,
    the lazy kernels and the CNN DMFT share it)."""
    if padding == "valid":
        return 0, 0
    before = (f - 1) // 2
    return before, f - 1 - before


def unpad(acc: np.ndarray, pads: Sequence[tuple[int, int]], spatial: Sequence[int], padding: str,
          first_axis: int) -> np.ndarray:
    """From padded back to image coordinates on the axes ``first_axis, first_axis + 1, ...``:
    the core of each axis, with (``'circular'``) the padding wrapped back onto it; ``'same'``
    drops it.  The adjoint of padding."""
    for ax, ((pb, pa), n) in enumerate(zip(pads, spatial)):
        axis = first_axis + ax
        core = np.take(acc, np.arange(pb, pb + n), axis=axis)
        if padding == "circular":
            if pa:
                idx = [slice(None)] * core.ndim
                idx[axis] = slice(0, pa)
                core[tuple(idx)] += np.take(acc, np.arange(pb + n, pb + n + pa), axis=axis)
            if pb:
                idx = [slice(None)] * core.ndim
                idx[axis] = slice(n - pb, n)
                core[tuple(idx)] += np.take(acc, np.arange(0, pb), axis=axis)
        acc = core
    return acc
