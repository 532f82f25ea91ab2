"""Gaussian expectations of activation products: closed forms, quadrature, references.

See ``docs/gaussian_numerics.md``.
"""

from __future__ import annotations

from typing import Any

from .dispatch import gaussian_expectation
from .validation import validate_covariance

__all__ = ["gaussian_expectation", "closed_form", "validate_covariance"]


def __getattr__(name: str) -> Any:
    # closed_form lives in effth.numerics.closed_forms (separate module, imported lazily)
    if name == "closed_form":
        from .closed_forms import closed_form
        return closed_form
    raise AttributeError(f"module 'effth.numerics' has no attribute {name!r}")
