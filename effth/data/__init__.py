r"""Image data sets for the CNN theory: scikit-learn's 8×8 digits (shipped) and CIFAR-10 (local).

* :func:`load_digits`: the 360 images of the digits 0 and 1 of scikit-learn's copy of the UCI
  "Optical recognition of handwritten digits" data (8×8 pixel counts 0..16), shipped with effth
  as ``effth/data/digits01.npz`` (licence and provenance in ``effth/data/LICENSE_digits.txt``);
  scikit-learn is not needed.  The default data set of the seed paper's CNN experiments at CPU
  scale (Bordelon & Pehlevan 2022, §6, Figs. 5 and 10 use CIFAR-10).
* :func:`load_cifar10`: CIFAR-10 (Krizhevsky 2009) read from a local copy of the "python
  version" (``cifar-10-batches-py``: pickled dicts with ``b"data"`` ``(N, 3072)`` uint8 in
  channel-major order and ``b"labels"``), never downloaded.  The pickles are read by a restricted
  unpickler that builds only dicts, lists, strings, bytes, numbers and NumPy arrays.

Both return an :class:`ImageSet` (images channels last, ``(P, H, W)`` or ``(P, H, W, C)``, ready
for :class:`effth.CNN`; labels; targets :math:`y=\pm1` when two classes are selected).

Scaling (``scale=``): ``"unit"`` (default) centres each image over its pixels and channels and
scales it to unit mean square, :math:`|\mathcal P|^{-1}C^{-1}\sum_{i,c}x_{ic}^2=1`, so that the
diagonal of the channel-averaged input kernel averages to 1 over pixels; ``"max"`` divides by the
largest possible pixel value (16 for digits, 255 for CIFAR); ``"raw"`` keeps the stored values.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence

import numpy as np

from effth._signature import public
from effth.errors import DomainError

__all__ = ["ImageSet", "load_digits", "load_cifar10", "CIFAR10_CLASSES"]

#: CIFAR-10 class names in label order (``batches.meta``)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

_SCALES = ("unit", "max", "raw")


@public
@dataclass(frozen=True, repr=False)
class ImageSet:
    r"""Images with labels, as returned by :func:`load_digits` and :func:`load_cifar10`.

    Attributes
    ----------
    images : ndarray (P, H, W) or (P, H, W, C), float64
        Channels last (one channel: no channel axis).
    labels : ndarray (P,) of int
        Class labels of the source data set.
    classes : tuple of int
        The selected classes, in the order given.
    y : ndarray (P,) or None
        Targets :math:`-1` for ``classes[0]`` and :math:`+1` for ``classes[1]`` when exactly two
        classes are selected; ``None`` otherwise.
    name : str
        ``"digits"`` or ``"cifar10"``.
    """

    images: np.ndarray
    labels: np.ndarray
    classes: tuple
    y: np.ndarray | None
    name: str

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_shape(self) -> tuple:
        """Spatial shape (and channels), ``images.shape[1:]``."""
        return tuple(self.images.shape[1:])

    def split(self, n_train: int) -> tuple["ImageSet", "ImageSet"]:
        """The first ``n_train`` images and the rest (both :class:`ImageSet`)."""
        if isinstance(n_train, bool) or not isinstance(n_train, (int, np.integer)) \
                or not 1 <= n_train < len(self):
            raise DomainError(f"n_train must be an int in 1..{len(self) - 1}, got {n_train!r}")
        cut = lambda sl: ImageSet(self.images[sl], self.labels[sl], self.classes,
                                  None if self.y is None else self.y[sl], self.name)
        return cut(slice(0, n_train)), cut(slice(n_train, None))

    def __repr__(self) -> str:
        return (f"ImageSet({self.name!r}, {len(self)} images of shape {self.image_shape}, "
                f"classes={self.classes})")


def _check_scale(scale: Any) -> str:
    if not isinstance(scale, str) or scale not in _SCALES:
        raise DomainError(f"scale={scale!r}: choose one of {_SCALES}")
    return scale


def _scaled(images: np.ndarray, scale: str, top: float) -> np.ndarray:
    x = images.astype(np.float64)
    if scale == "max":
        return x / top
    if scale == "unit":
        axes = tuple(range(1, x.ndim))
        x = x - x.mean(axis=axes, keepdims=True)
        ms = np.sqrt(np.mean(x * x, axis=axes, keepdims=True))
        if np.any(ms == 0):
            k = int(np.flatnonzero(ms.ravel() == 0)[0])
            raise DomainError(f"image {k} is constant: scale='unit' cannot normalize it; use "
                              "scale='max' or 'raw'")
        return x / ms
    return x


def _select(labels: np.ndarray, classes: Any, available: Sequence[int], n: Any, seed: Any,
            what: str) -> tuple[np.ndarray, tuple]:
    """Indices of the images of ``classes`` (in stored order, or a seeded shuffle), at most
    ``n`` of them, balanced over the classes as far as the data allow."""
    if classes is None:
        cls = tuple(int(c) for c in available)
    else:
        if np.ndim(classes) == 0:
            classes = (classes,)
        try:
            cls = tuple(int(c) for c in classes)
        except (TypeError, ValueError):
            raise DomainError(f"classes must be ints, got {classes!r}") from None
        if any(c != x for c, x in zip(cls, classes)) or not cls:
            raise DomainError(f"classes must be a non-empty sequence of ints, got {classes!r}")
    bad = [c for c in cls if c not in available]
    if bad:
        raise DomainError(f"classes {bad} are not in {what} (available: {tuple(available)})")
    if len(set(cls)) != len(cls):
        raise DomainError(f"classes {cls} repeat a class")
    rng = None if seed is None else np.random.default_rng(seed)
    pools = []
    for c in cls:
        idx = np.flatnonzero(labels == c)
        if rng is not None:
            idx = rng.permutation(idx)
        pools.append(idx)
    total = sum(len(p) for p in pools)
    if n is None:
        take = [len(p) for p in pools]
    else:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise DomainError(f"n must be a positive int (number of images), got {n!r}")
        if n > total:
            raise DomainError(f"n={n} but {what} holds only {total} images of classes {cls}")
        take = [0] * len(pools)                 # round robin: balanced as far as possible
        left = int(n)
        while left:
            for k, p in enumerate(pools):
                if left and take[k] < len(p):
                    take[k] += 1
                    left -= 1
    chosen = [p[:t] for p, t in zip(pools, take)]
    # interleave the classes so that any prefix (ImageSet.split) is balanced
    order = []
    for j in range(max(take)):
        order += [int(c[j]) for c in chosen if j < len(c)]
    return np.asarray(order, dtype=int), cls


def _targets(labels: np.ndarray, cls: tuple) -> np.ndarray | None:
    if len(cls) != 2:
        return None
    return np.where(labels == cls[1], 1.0, -1.0)


@public
def load_digits(n: int | None = None, *, classes: Sequence[int] = (0, 1), scale: str = "unit",
                seed: Any = None) -> ImageSet:
    r"""scikit-learn's 8×8 handwritten digits 0 and 1, shipped with effth (module docstring).

    Parameters
    ----------
    n : int, optional
        Number of images (default: all 360), drawn alternately from the classes (so that every
        prefix is balanced), in stored order or, with ``seed``, in a shuffled order.
    classes : sequence of int
        A subset of ``(0, 1)``, the classes shipped (``(0, 1)``: targets ``y = -1`` for 0 and
        ``+1`` for 1).
    scale : {'unit', 'max', 'raw'}
        Module docstring (``'max'`` divides the pixel counts 0..16 by 16).
    seed : int, optional
        Shuffle before taking ``n`` images.

    Returns
    -------
    ImageSet
        ``images`` ``(P, 8, 8)``.

    Examples
    --------
    >>> data = load_digits(20)
    >>> data.images.shape, data.y[:4]
    ((20, 8, 8), array([-1.,  1., -1.,  1.]))
    """
    scale = _check_scale(scale)
    with resources.files("effth.data").joinpath("digits01.npz").open("rb") as fh:
        raw = np.load(io.BytesIO(fh.read()))
        images, labels = raw["images"], raw["labels"].astype(int)
    idx, cls = _select(labels, classes, (0, 1), n, seed, "the shipped digits (0 and 1 only)")
    lab = labels[idx]
    return ImageSet(_scaled(images[idx], scale, 16.0), lab, cls, _targets(lab, cls), "digits")


class _SafeUnpickler(pickle.Unpickler):
    """Builds only the objects a CIFAR-10 batch holds (dicts, lists, bytes, str, numbers, NumPy
    arrays); any other global is refused (a pickle from elsewhere cannot run code)."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR-10 batch")


def _read_batch(path: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as fh:
            obj = _SafeUnpickler(fh, encoding="bytes").load()
    except FileNotFoundError:
        raise DomainError(f"CIFAR-10 batch file {path!r} not found") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            IndexError, KeyError) as exc:
        raise DomainError(f"{path!r} is not a CIFAR-10 python batch (a pickled dict with "
                          f"b'data' and b'labels'): {exc}") from None
    if not isinstance(obj, dict):
        raise DomainError(f"{path!r} holds a {type(obj).__name__}, not the dict of a CIFAR-10 batch")
    obj = {(k.decode() if isinstance(k, bytes) else k): v for k, v in obj.items()}
    if "data" not in obj or "labels" not in obj:
        raise DomainError(f"{path!r}: a CIFAR-10 batch needs the keys b'data' and b'labels', "
                          f"found {sorted(map(str, obj))}")
    data = np.asarray(obj["data"])
    labels = np.asarray(obj["labels"])
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DomainError(f"{path!r}: b'data' must have shape (N, 3072) (32x32 pixels, 3 channels, "
                          f"channel-major), got {data.shape}")
    if labels.shape != (data.shape[0],):
        raise DomainError(f"{path!r}: {labels.shape[0] if labels.ndim == 1 else labels.shape} "
                          f"labels for {data.shape[0]} images")
    if data.dtype != np.uint8:
        if not (np.issubdtype(data.dtype, np.integer) and data.min(initial=0) >= 0
                and data.max(initial=0) <= 255):
            raise DomainError(f"{path!r}: b'data' must hold pixel values 0..255 (uint8), got "
                              f"dtype {data.dtype}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min(initial=0) < 0 \
            or labels.max(initial=0) > 9:
        raise DomainError(f"{path!r}: labels must be ints 0..9")
    return data.astype(np.uint8), labels.astype(int)


@public
def load_cifar10(path: str | os.PathLike, n: int | None = None, *,
                 batches: Sequence[str] = ("data_batch_1",), classes: Sequence[int] | None = (0, 1),
                 grayscale: bool = False, scale: str = "unit", seed: Any = None) -> ImageSet:
    r"""CIFAR-10 images from a local copy of its python version (module docstring).

    Parameters
    ----------
    path : str or PathLike
        The directory ``cifar-10-batches-py`` (batch files inside) or one batch file.
    n : int, optional
        Number of images (default: all of the selected classes), alternating over the classes.
    batches : sequence of str
        Batch file names inside ``path`` (``"data_batch_1"`` .. ``"data_batch_5"``,
        ``"test_batch"``); ignored when ``path`` is a file.
    classes : sequence of int or None
        Labels to keep (``CIFAR10_CLASSES`` names them; default airplane vs automobile, targets
        ``-1``/``+1``); ``None`` keeps all ten.
    grayscale : bool
        Average the three channels (images ``(P, 32, 32)``) instead of ``(P, 32, 32, 3)``.
    scale : {'unit', 'max', 'raw'}
        Module docstring (``'max'`` divides by 255).
    seed : int, optional
        Shuffle before taking ``n`` images.

    Returns
    -------
    ImageSet

    Raises
    ------
    DomainError
        A missing directory or file (naming it), a file that is not a CIFAR-10 batch (not a
        pickled dict, missing keys, ``data`` not ``(N, 3072)`` of values 0..255, labels outside
        0..9 or of the wrong number), an unknown class, ``n`` larger than the data.
    """
    scale = _check_scale(scale)
    p = os.fspath(path)
    if os.path.isdir(p):
        if isinstance(batches, str):
            batches = (batches,)
        files = [os.path.join(p, b) for b in batches]
        if not files:
            raise DomainError("batches= is empty: name at least one batch file")
        missing = [f for f in files if not os.path.isfile(f)]
        if missing:
            have = sorted(os.listdir(p))[:12]
            raise DomainError(f"CIFAR-10 batch file(s) {missing} not found in {p!r} (it holds "
                              f"{have}); download the python version from "
                              "https://www.cs.toronto.edu/~kriz/cifar.html and pass its "
                              "cifar-10-batches-py directory")
    elif os.path.isfile(p):
        files = [p]
    else:
        raise DomainError(f"CIFAR-10 path {p!r} does not exist (give the cifar-10-batches-py "
                          "directory of the python version, or one batch file)")
    parts = [_read_batch(f) for f in files]
    data = np.concatenate([d for d, _ in parts])
    labels = np.concatenate([lab for _, lab in parts])
    idx, cls = _select(labels, classes, tuple(range(10)), n, seed, "these CIFAR-10 batches")
    if idx.size == 0:
        raise DomainError(f"no images of classes {cls} in {files}")
    imgs = data[idx].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)        # NCHW -> NHWC
    x = imgs.astype(np.float64)
    if grayscale:
        x = x.mean(axis=-1)
    lab = labels[idx]
    return ImageSet(_scaled(x, scale, 255.0), lab, cls, _targets(lab, cls), "cifar10")
