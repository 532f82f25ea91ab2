"""Look up an activation by name, or build one from a SymPy expression (:func:`get_activation`).

This module sits above :mod:`.registry` (the named factories) and :mod:`.user` (activations from
expressions), so neither of those imports the other's consumer.
"""

from __future__ import annotations

from effth._signature import public

from typing import Any

import sympy as sp

from ..errors import DomainError, UnknownActivationError
from .registry import _ALIASES, _REGISTRY, Activation, available_activations
from .user import user_activation

__all__ = ["get_activation"]


@public
def get_activation(name_or_expr: Any, **params: Any) -> Activation:
    """Return an :class:`Activation` by registry name or from a SymPy expression.

    Parameters
    ----------
    name_or_expr : str, Activation or sympy.Expr
        A registry name (see :func:`available_activations`), an existing
        activation (returned unchanged), or a SymPy expression in ``Z`` (or in
        any single free symbol, renamed to ``Z``), giving family ``'user'``.
    **params
        Family parameters (e.g. ``slope=0.1`` for ``leaky_relu``).  For user
        expressions, ``strip=`` sets the analyticity half-width (default 1.0
        for smooth non-polynomial expressions).

    Returns
    -------
    Activation

    Raises
    ------
    UnknownActivationError
        Unknown name (the message lists the available names).
    DomainError
        Invalid parameters.

    Examples
    --------
    >>> get_activation("leaky_relu", slope=0.1).param("a_minus")
    0.1
    >>> import sympy as sp
    >>> get_activation(sp.tanh(sp.Symbol("x"))).family
    'user'
    """
    if isinstance(name_or_expr, Activation):
        if params:
            raise DomainError(f"parameters {params} given together with an Activation instance {name_or_expr!r}")
        return name_or_expr
    if isinstance(name_or_expr, str):
        key = name_or_expr.strip().lower()
        key = _ALIASES.get(key, key)
        if key not in _REGISTRY:
            raise UnknownActivationError(
                f"unknown activation {name_or_expr!r}; available: {', '.join(available_activations())}. "
                "A SymPy expression in z is also accepted.")
        try:
            return _REGISTRY[key](**params)
        except TypeError as exc:
            raise DomainError(f"bad parameters {params} for activation {key!r}: {exc}") from None
    if isinstance(name_or_expr, sp.Basic):
        return user_activation(name_or_expr, **params)
    raise UnknownActivationError(
        f"cannot interpret {name_or_expr!r} as an activation: give a name "
        f"({', '.join(available_activations())}), an Activation, or a SymPy expression")
