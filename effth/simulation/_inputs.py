"""Input validation shared by the simulators (NumPy only, like the rest of ``effth.simulation``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DomainError

__all__ = ["check_inputs"]


def check_inputs(X: Any) -> np.ndarray:
    """Inputs as a finite float64 array of shape ``(N_D, n_0)`` with ``N_D, n_0 >= 1``."""
    try:
        Xa = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DomainError(f"X must be a real array of shape (N_D, n_0): {exc}") from None
    if Xa.ndim != 2 or Xa.shape[0] < 1 or Xa.shape[1] < 1:
        raise DomainError(f"X must be 2-D with shape (N_D, n_0), N_D, n_0 >= 1; got shape {Xa.shape}")
    if not np.isfinite(Xa).all():
        raise DomainError("X contains NaN or infinite entries")
    return Xa
