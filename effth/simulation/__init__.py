"""Ground-truth Monte-Carlo simulation of finite-width networks at initialization.

NumPy only: this package never imports effth's theory, algebra, numerics or codegen modules,
so that the theory can be checked against it.  See :func:`simulate_ensemble`.
"""

from __future__ import annotations

from .ensemble import ESTIMATORS, EnsembleStatistics, simulate_ensemble

__all__ = ["simulate_ensemble", "EnsembleStatistics", "ESTIMATORS"]
