"""DMFT of feature learning in wide networks (Bordelon & Pehlevan, Bordelon & Pehlevan (2022)).

Solvers of the infinite-width, mean-field/muP dynamical field theory on the discrete grid of
full-batch gradient descent (§2-§3):

* :func:`solve_deep_linear` -- closed matrix equations of deep linear networks (no sampling);
* :func:`solve_monte_carlo` -- the alternating Monte-Carlo solver (Bordelon & Pehlevan (2022), Algorithm 1) for any
  activation;
* :func:`solve_two_layer` -- ``L = 1`` by one forward pass in time (Gauss-Hermite quadrature
  or Monte Carlo), with weight decay;
* :func:`static_ntk_solve` -- the lazy ``gamma0 = 0`` limit (static NTK);
* :func:`kernel_alignment`, :func:`target_alignment`, :func:`layer_alignment` -- the
  alignment metric ``A(K1, K2)`` of Bordelon & Pehlevan (2022), Fig. 1.
"""

from __future__ import annotations

from ._series_compare import ApproximationComparison, compare_approximations
from .deep_linear import solve_deep_linear
from .gamma_series import Gamma0Series, gamma0_leading_order, gamma0_series
from .grid import TimeGrid, TrainingData, prepare_data
from .lazy import check_stability, lazy_kernels, static_ntk_dynamics, static_ntk_solve
from .metrics import kernel_alignment, layer_alignment, target_alignment
from .nonlinear import solve_monte_carlo
from .random_data import (DepthExtrapolation, LearningRateSweep, PowerLawResult, RandomDataResult,
                          extrapolate_depth, gamma0_at, learning_rate_sweep,
                          max_stable_learning_rate, power_law_exponent, resnet_kernel,
                          solve_power_law, solve_random_data)
from .result import Diagnostics, DMFTResult
from .rules import (KernelFluctuations, LazyENTK, LearningRule, RuleDMFTResult, TwoLayerSolution,
                    fa_fixed_point, gradient_correlation, kernel_fluctuations, lazy_entk,
                    learning_rule, solve_rule_deep_linear, solve_rule_forward,
                    solve_rule_two_layer, target_overlap, task_alignment, two_layer_exact)
from .saddle_point import saddle_point_nlo
from .two_layer import solve_two_layer

__all__ = [
           "ApproximationComparison",
           "DMFTResult",
           "Diagnostics",
           "Gamma0Series",
           "TimeGrid",
           "TrainingData",
           "check_stability",
           "compare_approximations",
           "gamma0_leading_order",
           "gamma0_series",
           "kernel_alignment",
           "layer_alignment",
           "lazy_kernels",
           "prepare_data",
           "solve_deep_linear",
           "solve_monte_carlo",
           "solve_two_layer",
           "static_ntk_dynamics",
           "static_ntk_solve",
           "target_alignment",
           "DepthExtrapolation", "LearningRateSweep", "PowerLawResult", "RandomDataResult",
           "extrapolate_depth", "gamma0_at", "learning_rate_sweep", "max_stable_learning_rate",
           "power_law_exponent", "resnet_kernel", "solve_power_law", "solve_random_data",
           "LazyENTK", "LearningRule", "RuleDMFTResult", "TwoLayerSolution", "fa_fixed_point",
           "gradient_correlation", "lazy_entk", "learning_rule", "solve_rule_deep_linear",
           "target_overlap", "task_alignment", "two_layer_exact", "solve_rule_two_layer",
           "solve_rule_forward", "kernel_fluctuations", "KernelFluctuations", "saddle_point_nlo",
]
