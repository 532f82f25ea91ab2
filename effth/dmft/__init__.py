r"""The dynamical mean-field theory (DMFT) of feature learning in wide networks.

Three theories of Bordelon & Pehlevan, on one time grid and one result type:

* :mod:`effth.dmft.solvers` -- the infinite-width, mean-field/μP DMFT of full-batch gradient
  descent ("Self-consistent dynamical field theory of kernel evolution in wide neural networks",
  2022, §2–§3): :func:`solve_deep_linear` (closed equations, no sampling), :func:`solve_two_layer`
  (one hidden layer, quadrature or Monte Carlo), :func:`solve_monte_carlo` (Algorithm 1, any
  activation and depth), :func:`static_ntk_solve` (the lazy limit :math:`\gamma_0=0`);
* :mod:`effth.dmft.series` -- the :math:`\gamma_0`-series around the lazy process
  (:func:`gamma0_series`, :func:`compare_approximations`);
* :mod:`effth.dmft.random_data` -- deep linear networks on random data at finite data and width
  ratios (:func:`solve_random_data`, learning-rate sweeps, power laws);
* :mod:`effth.dmft.rules` -- learning rules (GD, ρ-FA, DFA, Hebb, GLN; 2023): :func:`learning_rule`,
  :func:`lazy_entk` and the rule solvers;
* :mod:`effth.dmft.fluctuations` -- the O(1/N) fluctuations of the DMFT from the Hessian of its
  action (2022, App. P.7): :func:`deep_linear_fluctuations`, :func:`two_layer_fluctuations`,
  :func:`deep_nonlinear_fluctuations` (a sampled Monte-Carlo saddle);
  :mod:`effth.dmft.mean_shift` -- the O(1/N) shift of the mean of deep linear and two-layer
  networks (the cubic term of eq. (174)): :func:`deep_linear_mean_shift`,
  :func:`two_layer_mean_shift`;
* shared: :mod:`effth.dmft.grid` (:class:`TimeGrid`, :class:`TrainingData`), :mod:`effth.dmft.result`
  (:class:`DMFTResult`), :mod:`effth.dmft.metrics` (the kernel-alignment metric of Fig. 1).
"""

from __future__ import annotations

from effth.dmft import random_data, rules, series, solvers
from effth.dmft.fluctuations import (DMFTFluctuations, deep_linear_fluctuations,
                                     deep_nonlinear_fluctuations, two_layer_fluctuations)
from effth.dmft.mean_shift import DMFTMeanShift, deep_linear_mean_shift, two_layer_mean_shift
from effth.dmft.grid import TimeGrid, TrainingData, prepare_data
from effth.dmft.metrics import kernel_alignment, layer_alignment, target_alignment
from effth.dmft.random_data import (DepthExtrapolation, LearningRateSweep, PowerLawResult,
                                    RandomDataResult, extrapolate_depth, gamma0_at,
                                    learning_rate_sweep, max_stable_learning_rate,
                                    power_law_exponent, resnet_kernel, solve_power_law,
                                    solve_random_data)
from effth.dmft.result import Diagnostics, DMFTResult
from effth.dmft.rules import (KernelFluctuations, LazyENTK, LearningRule, RuleDMFTResult,
                              TwoLayerSolution, fa_fixed_point, gradient_correlation,
                              kernel_fluctuations, lazy_entk, learning_rule, solve_rule_deep_linear,
                              solve_rule_forward, solve_rule_two_layer, target_overlap,
                              task_alignment, two_layer_exact)
from effth.dmft.series import (ApproximationComparison, Gamma0Series, compare_approximations,
                               gamma0_leading_order, gamma0_series)
from effth.dmft.solvers import CNNDMFTResult, solve_cnn_deep_linear, solve_cnn_monte_carlo
from effth.dmft.solvers import (LangevinEquilibrium, check_stability, lazy_kernels, saddle_point_nlo,
                                solve_deep_linear, solve_deep_linear_equilibrium, solve_equilibrium,
                                solve_monte_carlo,
                                solve_two_layer, static_ntk_dynamics, static_ntk_solve)

__all__ = ["random_data", "rules", "series", "solvers", "solve_cnn_monte_carlo", "solve_cnn_deep_linear", "CNNDMFTResult",
           "ApproximationComparison",
           "DMFTResult",
           "LangevinEquilibrium",
           "DMFTFluctuations",
           "deep_linear_fluctuations",
           "deep_nonlinear_fluctuations",
           "two_layer_fluctuations",
           "DMFTMeanShift",
           "deep_linear_mean_shift",
           "two_layer_mean_shift",
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
           "solve_deep_linear_equilibrium",
           "solve_equilibrium",
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
