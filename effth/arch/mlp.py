r"""The fully connected network :class:`MLP` (PDLT (2.5))."""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass, field
from typing import Any, Sequence

from effth.activations import Activation, get_activation
from effth.arch._common import LayeredNetwork, _as_int, _widths, per_layer, real_sequence
from effth.errors import DomainError
from effth._validate import check_memory, check_work

__all__ = ["MLP"]


@public
@dataclass(frozen=True)
class MLP(LayeredNetwork):
    r"""A fully connected network :math:`z^{(\ell+1)} = b^{(\ell+1)} + W^{(\ell+1)}\sigma(z^{(\ell)})`.

    Parameters
    ----------
    activation : str or Activation
        Registered name (see :func:`effth.activations.available_activations`) or an
        :class:`~effth.activations.Activation`.
    depth : int
        Number of weight layers :math:`L\ge1` (output layer included).
    widths : int or sequence of int, optional
        Hidden widths :math:`n_1..n_{L-1}` (an int means all equal); ``None`` leaves them
        symbolic for the theory (a simulation needs them).
    c_w, c_b : float or sequence of float
        :math:`C_W^{(\ell)} > 0` and :math:`C_b^{(\ell)} \ge 0`, one value or one per weight layer
        :math:`\ell = 1..L`.
    n_out : int
        Output width :math:`n_L` (default 1).
    gamma, xi : float or sequence of float
        Residual hyperparameters of PDLT (B.4),
        :math:`z^{(\ell)}=\xi^{(\ell)}[b^{(\ell)}+W^{(\ell)}\sigma(z^{(\ell-1)})]+\gamma^{(\ell)}z^{(\ell-1)}`:
        the skip gain :math:`\gamma` and the branch gain :math:`\xi`.  One value applies to the
        hidden-to-hidden layers :math:`\ell=2..L-1` (the book's residual connections join hidden
        layers only, §B.1); a sequence gives one value per weight layer :math:`\ell=1..L`, with
        :math:`\gamma^{(1)}=\gamma^{(L)}=0` (the input and output widths differ from the hidden
        ones).  Defaults :math:`\gamma=0`, :math:`\xi=1`: the plain MLP (PDLT (2.5)).  A layer
        with :math:`\gamma^{(\ell)}\ne0` needs :math:`n_\ell=n_{\ell-1}`.

    Raises
    ------
    DomainError
        Non-positive depth or widths, negative or non-finite variances, wrong lengths; a skip
        connection on the first or the output layer, or between layers of different widths;
        a non-positive or non-finite :math:`\xi`, a non-finite :math:`\gamma`.

    Examples
    --------
    >>> net = MLP("relu", depth=4, widths=32, c_w=2 * (1 - 0.5**2), gamma=0.5)
    >>> net.gamma_at(2), net.gamma_at(4), net.residual
    (0.5, 0.0, True)
    """

    activation: Any
    depth: int
    widths: Any = None
    c_w: Any = 1.0
    c_b: Any = 0.0
    n_out: int = 1
    gamma: Any = 0.0
    xi: Any = 1.0
    _act: Activation = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_act", get_activation(self.activation))
        depth = _as_int(self.depth, "depth")
        if depth < 1:
            raise DomainError(f"depth must be an int >= 1 (number of weight layers), got {self.depth!r}")
        check_memory(160.0 * depth, f"the per-layer settings of depth={depth} (widths, c_w, c_b, "
                     "gamma, xi: about 160 bytes a layer)", "lower depth")
        check_work(2e-6 * depth, f"MLP(depth={depth}) (per-layer settings)", "lower depth")
        object.__setattr__(self, "depth", depth)
        if self.widths is not None:
            object.__setattr__(self, "widths", _widths(self.widths, depth))
        n_out = _as_int(self.n_out, "n_out")
        if n_out < 1:
            raise DomainError(f"n_out must be a positive int, got {self.n_out!r}")
        object.__setattr__(self, "n_out", n_out)
        object.__setattr__(self, "c_w", per_layer(self.c_w, self.depth, "c_w", positive=True))
        object.__setattr__(self, "c_b", per_layer(self.c_b, self.depth, "c_b", positive=False))
        object.__setattr__(self, "gamma", _residual(self.gamma, depth, "gamma", 0.0))
        object.__setattr__(self, "xi", _residual(self.xi, depth, "xi", 1.0))
        if any(x <= 0 for x in self.xi):
            raise DomainError(f"xi (the residual branch gain of PDLT (B.4)) must be positive, got {self.xi}")
        if self.gamma[0] != 0 or (depth > 1 and self.gamma[-1] != 0):
            raise DomainError("gamma: the first and the output layer have no skip connection "
                              "(PDLT §B.1: hidden layers only); give gamma[0] = gamma[-1] = 0, or "
                              "one number for the hidden layers")
        if self.widths is not None:
            for k in range(2, depth):
                if self.gamma[k - 1] != 0 and self.widths[k - 1] != self.widths[k - 2]:
                    raise DomainError(
                        f"gamma at layer {k} needs n_{k} = n_{k - 1} (a skip connection adds "
                        f"z^({k - 1}) to z^({k})), got widths {self.widths[k - 2]} and {self.widths[k - 1]}")

    def layer_widths(self, n_in: int) -> tuple[int, ...]:
        """:math:`(n_0, n_1, \\dots, n_L)` for input dimension ``n_in``."""
        if self.widths is None:
            raise DomainError("this MLP has symbolic widths; pass widths=... to simulate it")
        return (int(n_in), *self.widths, self.n_out)

    def gamma_at(self, layer: int) -> float:
        """Skip gain :math:`\\gamma^{(\\ell)}` (PDLT (B.4)) of weight layer ``layer`` in 1..L."""
        return self.gamma[self._check(layer)]

    def xi_at(self, layer: int) -> float:
        """Branch gain :math:`\\xi^{(\\ell)}` (PDLT (B.4)) of weight layer ``layer`` in 1..L."""
        return self.xi[self._check(layer)]

    @property
    def residual(self) -> bool:
        """Whether any layer has a skip connection or a branch gain other than 1 (PDLT (B.4))."""
        return any(g != 0 for g in self.gamma) or any(x != 1 for x in self.xi)


    def __repr__(self) -> str:
        def short(values: tuple) -> str:
            if len(set(values)) == 1:
                return f"{values[0]:g}"
            text = "(" + ", ".join(f"{v:g}" for v in values) + ")"
            return text if len(text) <= 60 else f"({values[0]:g}, ..., {values[-1]:g})"

        widths = "None" if self.widths is None else (
            short(self.widths) if self.widths else "()")
        out = f", n_out={self.n_out}" if self.n_out != 1 else ""
        if any(g != 0 for g in self.gamma):
            out += f", gamma={short(self.gamma[1:-1]) if len(self.gamma) > 2 else short(self.gamma)}"
        if any(x != 1 for x in self.xi):
            out += f", xi={short(self.xi[1:-1]) if len(self.xi) > 2 else short(self.xi)}"
        name = self.activation if isinstance(self.activation, str) else self._act.name
        return (f"MLP({name!r}, depth={self.depth}, widths={widths}, "
                f"c_w={short(self.c_w)}, c_b={short(self.c_b)}{out})")

    def with_widths(self, widths: int | Sequence[int]) -> "MLP":
        """The same network with other hidden widths."""
        return MLP(self.activation, self.depth, widths, self.c_w, self.c_b, self.n_out,
                   self.gamma, self.xi)


def _residual(value: Any, depth: int, name: str, plain: float) -> tuple[float, ...]:
    """Per-layer residual gains: one number for the hidden-to-hidden layers 2..L-1 (``plain``
    elsewhere) or one finite value per weight layer."""
    seq = real_sequence(value, (depth,), name)
    if isinstance(seq, float):
        values = tuple(seq if 2 <= k <= depth - 1 else plain for k in range(1, depth + 1))
    else:
        values = seq
    for v in values:
        if not (v == v) or v in (float("inf"), float("-inf")):
            raise DomainError(f"{name} must be finite, got {values}")
    return values
