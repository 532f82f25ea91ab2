"""Shared rules of the architecture objects: depths, widths and per-layer hyperparameters
(``docs/conventions.md``)."""


from __future__ import annotations

from typing import Any, Sequence

from effth._validate import integer, real_scalar
from effth.errors import DomainError

__all__ = ["as_real", "per_layer", "real_sequence", "require_plain", "resolve_branch_scale",
           "resolve_depth"]


def require_plain(net: Any, what: str) -> None:
    """Refuse a residual MLP (PDLT (B.4)) where only the plain forward equation is implemented,
    rather than silently dropping its skip connections."""
    if getattr(net, "residual", False):
        raise DomainError(f"{what} implements the plain MLP (PDLT (2.5)) only; this net has residual "
                          "gamma/xi (PDLT (B.4)).  Residual networks: simulate_ensemble, "
                          "derive_initialization(..., residual=True), mlp_flow, initialization_flow")


as_real = real_scalar      # the one rule for real numbers (effth._validate)


def _is_scalar(value: Any) -> bool:
    return (not isinstance(value, (str, bytes)) and not hasattr(value, "__len__")
            and not hasattr(value, "__iter__")) or getattr(value, "ndim", None) == 0


def real_sequence(value: Any, counts: Sequence[int], name: str) -> tuple[float, ...] | float:
    """One real number (returned as a float) or a sequence whose length is one of ``counts``.

    Raises :class:`~effth.errors.DomainError` (naming ``name`` and the lengths allowed) otherwise.
    """
    if _is_scalar(value):
        return as_real(value, name)
    if isinstance(value, (str, bytes)):
        raise DomainError(f"{name} must be a number or a sequence of numbers, got {value!r}")
    try:
        values = tuple(as_real(v, name) for v in value)
    except TypeError as exc:                       # not iterable
        raise DomainError(f"{name} must be a number or a sequence of numbers, got {value!r}") from exc
    if len(values) not in counts:
        want = " or ".join(str(c) for c in counts)
        raise DomainError(f"{name} needs one value or {want} values (one per weight layer), "
                          f"got {len(values)}")
    return values


def per_layer(value: Any, count: int, name: str, *, positive: bool = False) -> tuple[float, ...]:
    """One finite value per weight layer from a scalar or a sequence of ``count`` (NumPy and SymPy
    reals included); non-negative, or positive with ``positive=True``."""
    seq = real_sequence(value, (count,), name)
    values = (seq,) * count if isinstance(seq, float) else seq
    for v in values:
        if not (v == v) or v in (float("inf"), float("-inf")):
            raise DomainError(f"{name} must be finite, got {values}")
        if v < 0 or (positive and v == 0):
            raise DomainError(f"{name} must be {'positive' if positive else 'non-negative'}, got {values}")
    return values


def resolve_branch_scale(branch_scale: Any, branch_scale0: Any, layers: int) -> float | None:
    r"""The residual branch scale :math:`\beta` from at most one of ``branch_scale`` (:math:`\beta`)
    and ``branch_scale0`` (:math:`\beta_0`, with :math:`\beta=\beta_0/\sqrt{L}` over ``layers``
    residual blocks, the depth-:math:`\mu`P scaling of Bordelon & Pehlevan's ResNets, App. C);
    ``None`` when neither is given (no residual branches)."""
    if branch_scale is not None and branch_scale0 is not None:
        raise DomainError("give at most one of branch_scale= (beta) and branch_scale0= "
                          "(beta0, beta = beta0/sqrt(L))")
    if branch_scale is None and branch_scale0 is None:
        return None
    if branch_scale is not None:
        beta = real_scalar(branch_scale, "branch_scale")
    else:
        beta = real_scalar(branch_scale0, "branch_scale0") / float(layers) ** 0.5
    if not (beta == beta and abs(beta) != float("inf") and beta >= 0):
        raise DomainError(f"branch scale beta={beta!r} must be finite and >= 0")
    return beta


def resolve_depth(depth: Any = None, hidden_layers: Any = None, *, minimum: int = 2) -> int:
    r"""The number of weight layers :math:`L` from exactly one of ``depth`` or ``hidden_layers``.

    effth's one convention (``docs/conventions.md``): ``depth`` counts weight layers, the output
    layer included (PDLT's :math:`L`); ``hidden_layers = depth - 1`` counts the hidden layers
    :math:`h^1..h^L` of the DMFT papers.  Functions that describe a network take either keyword.

    Parameters
    ----------
    depth, hidden_layers : int, optional
        Give exactly one.  NumPy and SymPy integers are accepted.
    minimum : int
        The smallest ``depth`` the caller can treat (2: at least one hidden layer).

    Returns
    -------
    int
        ``depth``.

    Raises
    ------
    DomainError
        Both or neither given, a non-integer, or ``depth < minimum``.

    Examples
    --------
    >>> resolve_depth(hidden_layers=2), resolve_depth(depth=3)
    (3, 3)
    """
    if (depth is None) == (hidden_layers is None):
        raise DomainError("give exactly one of depth= (weight layers, output included) or "
                          "hidden_layers= (= depth - 1)"
                          + (f"; got depth={depth!r}, hidden_layers={hidden_layers!r}"
                             if depth is not None else ""))
    if depth is not None:
        L = _as_int(depth, "depth")
    else:
        L = _as_int(hidden_layers, "hidden_layers") + 1
    if L < minimum:
        what = (f"depth={L}" if hidden_layers is None else f"hidden_layers={L - 1}")
        raise DomainError(f"{what} is too shallow here: need depth >= {minimum} "
                          f"(hidden_layers >= {minimum - 1})")
    from effth._validate import check_memory, check_work
    knob = "lower depth" if hidden_layers is None else "lower hidden_layers"
    check_memory(160.0 * L, f"the per-layer state of depth={L}", knob)     # before any loop
    check_work(1e-5 * L, f"a pass through depth={L} layers", knob)
    return L


_as_int = integer      # the one rule for integers (effth._validate)


def _widths(widths: Any, depth: int) -> tuple[int, ...]:
    """Hidden widths n_1..n_{L-1} from an int or a sequence / array of ints (exact integers only)."""
    if _is_scalar(widths):
        n = _as_int(widths, "widths")
        values = (n,) * (depth - 1)
    else:
        if isinstance(widths, (str, bytes)):
            raise DomainError(f"widths must be an int or a sequence of ints, got {widths!r}")
        values = tuple(_as_int(n, "widths") for n in widths)
        if len(values) != depth - 1:
            raise DomainError(
                f"widths needs depth-1 = {depth - 1} hidden widths (n_1..n_{{L-1}}), got {len(values)}")
    if any(n < 1 for n in values):
        raise DomainError(f"hidden widths must be positive ints, got {values}")
    return values


class LayeredNetwork:
    """What every architecture object answers the same way (a mixin for :class:`~effth.MLP`
    and :class:`~effth.CNN`; they hold ``depth``, ``widths``, ``c_w``, ``c_b`` and ``_act``)."""

    @property
    def act(self):
        """The resolved :class:`~effth.activations.Activation`."""
        return self._act

    @property
    def hidden_layers(self) -> int:
        """Number of hidden layers, ``depth - 1`` (the DMFT papers' :math:`L`)."""
        return self.depth - 1

    @property
    def hidden_widths(self):
        """Hidden widths (channels of a CNN) :math:`(n_1, \\dots, n_{L-1})`, or ``None`` at
        infinite width."""
        return self.widths

    def c_w_at(self, layer: int) -> float:
        """:math:`C_W^{(\\ell)}` for weight layer ``layer`` in 1..L."""
        return self.c_w[self._check(layer)]

    def c_b_at(self, layer: int) -> float:
        """:math:`C_b^{(\\ell)}` for weight layer ``layer`` in 1..L."""
        return self.c_b[self._check(layer)]

    def _check(self, layer: int) -> int:
        if not 1 <= layer <= self.depth:
            raise DomainError(f"layer must be in 1..{self.depth}, got {layer}")
        return layer - 1
