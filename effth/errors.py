"""Exceptions and warnings raised by effth.

Every error names the offending value, what was expected, and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "EffthError",
    "DomainError",
    "UnknownActivationError",
    "ConvergenceError",
    "NotDerivedError",
    "ClosedFormUnavailableWarning",
    "AccuracyWarning",
]


class EffthError(Exception):
    """Base class of every exception raised by effth."""


class DomainError(EffthError, ValueError):
    """Input outside the domain of the theory or the numerics.

    Raised for non-symmetric or non-PSD kernels, mismatched sample counts,
    impossible hyperparameters and similar bad input, before any expensive work.
    """


class UnknownActivationError(DomainError):
    """An activation name that is not in the registry."""


class ConvergenceError(EffthError, RuntimeError):
    """An iterative solver or adaptive quadrature did not reach its tolerance."""


class NotDerivedError(EffthError, NotImplementedError):
    """A request the engine cannot honour (yet); the message says what is supported."""


class ClosedFormUnavailableWarning(UserWarning):
    """A closed form was requested where none exists; effth fell back to another method."""


class AccuracyWarning(UserWarning):
    """A numeric result may not meet the requested tolerance (the message gives the estimate)."""
