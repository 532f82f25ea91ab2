r"""Learning rules at infinite width (Bordelon & Pehlevan 2023): GD, :math:`\rho`-FA, DFA, Hebb and
GLN as one rule object the solvers take.

* :mod:`.solvers` -- :func:`learning_rule`, :func:`lazy_entk`, the deep linear, two-layer and
  forward (rich, nonlinear) solvers, :func:`kernel_fluctuations`;
* :mod:`.feedback_alignment` -- the feedback-alignment fields of the sampled solvers;
* :mod:`._filter` -- weight decay and momentum of the sampled solvers (the trainer's optimizer
  as a filter ``a(t)``, ``k(j)``, App. C, eqs. (50)-(53)).
"""

from effth.dmft.rules.solvers import (RULES, KernelFluctuations, LazyENTK, LearningRule,
                                      RuleDMFTResult, TwoLayerSolution, fa_fixed_point,
                                      gradient_correlation, kernel_fluctuations, lazy_entk,
                                      learning_rule, solve_rule_deep_linear, solve_rule_forward,
                                      solve_rule_two_layer, target_overlap, task_alignment,
                                      two_layer_exact)

__all__ = ["RULES", "KernelFluctuations", "LazyENTK", "LearningRule", "RuleDMFTResult",
           "TwoLayerSolution", "fa_fixed_point", "gradient_correlation", "kernel_fluctuations",
           "lazy_entk", "learning_rule", "solve_rule_deep_linear", "solve_rule_forward",
           "solve_rule_two_layer", "target_overlap", "task_alignment", "two_layer_exact"]
