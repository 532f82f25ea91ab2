r"""Learning rules at infinite width (Bordelon & Pehlevan 2023): GD, :math:`\rho`-FA, DFA, Hebb and
GLN as one rule object the solvers take.

* :mod:`.solvers` -- :func:`learning_rule`, :func:`lazy_entk`, the deep linear, two-layer and
  forward (rich, nonlinear) solvers, :func:`kernel_fluctuations`;
* :mod:`.feedback_alignment` -- the feedback-alignment fields of the sampled solvers.
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
