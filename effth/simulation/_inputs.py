"""Input validation shared by the simulators (NumPy only, like the rest of ``effth.simulation``)."""

from __future__ import annotations

from typing import Any

import numpy as np


from .._validate import input_matrix, rng as _rng
from effth.arch import MLP
from ..errors import DomainError

__all__ = ["as_generator", "check_inputs", "check_ensemble"]


def as_generator(seed: Any) -> np.random.Generator:
    """``numpy.random.default_rng(seed)`` (a Generator is used as is); bad seeds are rejected.

    ``seed`` may be an int >= 0, a ``numpy.random.SeedSequence``, a ``numpy.random.Generator``
    or ``None`` (fresh entropy).
    """
    return _rng(seed)


def check_inputs(X: Any) -> np.ndarray:
    """Inputs as a finite float64 array of shape ``(N_D, n_0)`` with ``N_D, n_0 >= 1``.

    Complex inputs are rejected (never silently truncated to their real part).
    """
    return input_matrix(X, "X")


def check_ensemble(net: Any, X: Any, networks: Any, batch: Any) -> np.ndarray:
    """Validate the arguments every ensemble simulator takes; returns the checked inputs."""
    if not isinstance(net, MLP):
        raise DomainError(f"net must be an effth.arch.MLP, got {type(net).__name__}")
    if net.hidden_widths is None:
        raise DomainError("the MLP has symbolic widths (widths=None); pass widths=... to simulate")
    Xa = check_inputs(X)
    if isinstance(networks, bool) or not isinstance(networks, (int, np.integer)) or networks < 2:
        raise DomainError(f"networks must be an int >= 2 (a covariance needs two networks), got "
                          f"{networks!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, (int, np.integer))
                              or batch < 1):
        raise DomainError(f"batch must be a positive int or None, got {batch!r}")
    return Xa
