"""Activation functions: registry, analytic data, fast NumPy derivatives.

See ``docs/activations.md``.
"""

from __future__ import annotations

from . import builtin as _builtin  # noqa: F401  (registers the built-in names)
from .lookup import get_activation
from .registry import Activation, Z, available_activations, register_activation

__all__ = ["Z", "Activation", "get_activation", "register_activation", "available_activations"]
