r"""Truncated power series with array coefficients: the arithmetic of the gamma0-expansion.

A :class:`TruncatedSeries` holds :math:`X(x)=\sum_{k=0}^{K}x^kX_k` as one array of shape
``(K + 1, *shape)`` (order axis first), where ``x`` is the expansion variable (``gamma0**2`` for the
deep linear equations, ``gamma0`` for the field-level expansion of the two-layer process).
Products are Cauchy products truncated at order ``K``; indexing, transposes and reshapes act on the
array axes and leave the order axis alone, so a numerical recursion written for arrays runs
unchanged on series and returns every Taylor coefficient of its output (forward-mode Taylor
arithmetic).  Coefficients may be ``float`` arrays or ``object`` arrays of
:class:`fractions.Fraction` (exact rational arithmetic).
"""

from __future__ import annotations

from effth._signature import public

from math import factorial

import numpy as np

__all__ = ["TruncatedSeries", "compose"]


def _coerce(x, like: TruncatedSeries) -> TruncatedSeries:
    if isinstance(x, TruncatedSeries):
        return x
    arr = np.asarray(x, dtype=like.c.dtype if like.c.dtype == object else None)
    c = np.zeros((like.order + 1,) + arr.shape, dtype=np.result_type(arr.dtype, like.c.dtype))
    if c.dtype == object:
        c[...] = 0
    c[0] = arr
    return TruncatedSeries(c)


@public
class TruncatedSeries:
    """A power series truncated at a fixed order, with array-valued coefficients.

    Parameters
    ----------
    c : ndarray, shape (K + 1, ...)
        Coefficients ``c[k]`` of ``x**k``.
    """

    __array_priority__ = 100

    def __init__(self, c) -> None:
        self.c = c if isinstance(c, np.ndarray) else np.asarray(c)

    # -------------------------------------------------------------- construction
    @classmethod
    def constant(cls, value, order: int, exact: bool = False) -> TruncatedSeries:
        """``value + 0 x + ... + 0 x**order``."""
        v = np.asarray(value, dtype=object if exact else float)
        c = np.zeros((order + 1,) + v.shape, dtype=v.dtype)
        if exact:
            c[...] = 0
        c[0] = v
        return cls(c)

    @classmethod
    def zeros(cls, shape, order: int, exact: bool = False) -> TruncatedSeries:
        """The zero series with coefficient shape ``shape``."""
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        c = np.zeros((order + 1,) + shape, dtype=object if exact else float)
        if exact:
            c[...] = 0
        return cls(c)

    # -------------------------------------------------------------- array protocol
    @property
    def order(self) -> int:
        """Truncation order ``K``."""
        return self.c.shape[0] - 1

    @property
    def shape(self) -> tuple:
        """Shape of one coefficient."""
        return self.c.shape[1:]

    def __getitem__(self, idx) -> TruncatedSeries:
        idx = idx if isinstance(idx, tuple) else (idx,)
        return TruncatedSeries(self.c[(slice(None),) + idx])

    def __setitem__(self, idx, value) -> None:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if isinstance(value, TruncatedSeries):
            self.c[(slice(None),) + idx] = value.c
        else:
            self.c[(slice(None),) + idx] = 0
            self.c[(0,) + idx] = value

    @property
    def T(self) -> TruncatedSeries:
        """Transpose of the coefficient arrays (order axis kept first)."""
        nd = self.c.ndim
        return TruncatedSeries(np.transpose(self.c, (0,) + tuple(range(nd - 1, 0, -1))))

    def reshape(self, *shape) -> TruncatedSeries:
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return TruncatedSeries(self.c.reshape((self.c.shape[0],) + tuple(shape)))

    def sum(self, axis) -> TruncatedSeries:
        axis = axis if axis < 0 else axis + 1
        return TruncatedSeries(self.c.sum(axis=axis))

    def copy(self) -> TruncatedSeries:
        return TruncatedSeries(self.c.copy())

    # -------------------------------------------------------------- arithmetic
    def __add__(self, other):
        other = _coerce(other, self)
        return TruncatedSeries(self.c + other.c)

    __radd__ = __add__

    def __sub__(self, other):
        other = _coerce(other, self)
        return TruncatedSeries(self.c - other.c)

    def __rsub__(self, other):
        other = _coerce(other, self)
        return TruncatedSeries(other.c - self.c)

    def __neg__(self):
        return TruncatedSeries(-self.c)

    def _cauchy(self, other, op):
        K = min(self.order, other.order)
        out = [op(self.c[0], other.c[0])]
        for k in range(1, K + 1):
            acc = op(self.c[0], other.c[k])
            for j in range(1, k + 1):
                acc = acc + op(self.c[j], other.c[k - j])
            out.append(acc)
        return TruncatedSeries(np.stack(out))

    def __mul__(self, other):
        if isinstance(other, TruncatedSeries):
            return self._cauchy(other, np.multiply)
        return TruncatedSeries(self.c * np.asarray(other, dtype=self.c.dtype
                                                   if self.c.dtype == object else None))

    def __rmul__(self, other):
        if isinstance(other, TruncatedSeries):
            return other._cauchy(self, np.multiply)
        return self.__mul__(other)

    def __matmul__(self, other):
        other = _coerce(other, self)
        return self._cauchy(other, np.matmul)

    def __rmatmul__(self, other):
        other = _coerce(other, self)
        return other._cauchy(self, np.matmul)

    def times_x(self, power: int = 1) -> TruncatedSeries:
        """Multiply by ``x**power`` (shift the coefficients up, dropping the overflow)."""
        c = np.zeros_like(self.c)
        if c.dtype == object:
            c[...] = 0
        if power <= self.order:
            c[power:] = self.c[: self.order + 1 - power]
        return TruncatedSeries(c)

    def divide_x(self) -> TruncatedSeries:
        """Divide by ``x`` (requires a vanishing constant term; the top order is lost)."""
        return TruncatedSeries(self.c[1:])

    def __repr__(self) -> str:
        return f"TruncatedSeries(order={self.order}, shape={self.shape})"


@public
def compose(derivatives, delta: TruncatedSeries) -> TruncatedSeries:
    r"""Taylor composition :math:`F(a + \delta) = \sum_k F^{(k)}(a)\,\delta^k/k!`.

    Parameters
    ----------
    derivatives : sequence of ndarray
        ``F^{(k)}(a)`` for ``k = 0 .. K`` (broadcastable to ``delta.shape``).
    delta : TruncatedSeries
        The perturbation, with vanishing constant term.

    Returns
    -------
    TruncatedSeries
    """
    K = delta.order
    out = TruncatedSeries.zeros(delta.shape, K)
    out.c[0] = derivatives[0]
    power = None
    for k in range(1, K + 1):
        power = delta if power is None else power * delta
        out = out + power * (derivatives[k] / factorial(k))
    return out
