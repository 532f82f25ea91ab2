"""DMFT of feature learning in wide networks (Bordelon & Pehlevan, seed 000).

Solvers of the infinite-width, mean-field/muP dynamical field theory on the discrete grid of
full-batch gradient descent (spec ``seed-000-dmft.md`` §2-§3):

* :func:`solve_deep_linear` -- closed matrix equations of deep linear networks (no sampling);
* :func:`solve_monte_carlo` -- the alternating Monte-Carlo solver (seed Algorithm 1) for any
  activation;
* :func:`static_ntk_solve` -- the lazy ``gamma0 = 0`` limit (static NTK).
"""

from __future__ import annotations

from .deep_linear import solve_deep_linear
from .grid import TimeGrid, TrainingData, prepare_data
from .nonlinear import solve_monte_carlo
from .lazy import check_stability, lazy_kernels, static_ntk_dynamics, static_ntk_solve
from .result import Diagnostics, DMFTResult

__all__ = ["solve_deep_linear", "solve_monte_carlo", "TimeGrid", "TrainingData", "prepare_data", "check_stability",
           "lazy_kernels", "static_ntk_dynamics", "static_ntk_solve", "Diagnostics", "DMFTResult"]
