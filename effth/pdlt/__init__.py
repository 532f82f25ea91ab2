r"""The effective theory of wide networks of PDLT (Roberts & Yaida), derived by the engine.

* initialization recursions for :math:`K`, :math:`V`, :math:`G^{\{1\}}`
  (:func:`derive_initialization`, and their fast evaluation over inputs and layers, :func:`flow`);
* infinite-channel CNN kernels, the NNGP and the NTK over pixel pairs (:func:`cnn_kernels`,
  Novak et al. 2019, Arora et al. 2019);
* exact finite-width deep linear networks (:mod:`effth.pdlt.deep_linear`, chapter 3);
* the exact second layer and the single-input chi forms (:mod:`effth.pdlt.initialization.reductions`);
* the couplings g, v of the quartic action from K, V, G1 (:mod:`effth.pdlt.initialization.couplings`);
* criticality and universality classes (:mod:`.criticality`, chapter 5) and the large-depth laws
  of the NTK hierarchy per class (:func:`ntk_asymptotics`, :mod:`.depth_asymptotics`, §9.2–§9.3, §11.3);
* the NTK hierarchy :math:`\Theta, H^{\{1\}}, A, B, D, F, P, Q, R, S, T, U` (:func:`derive_ntk`,
  chapters 8, 9, 11, ∞) and its compiled evaluation (:func:`ntk_flow`, :func:`learning_rates`);
* learning at infinite width: Bayesian posterior and gradient-descent ensemble predictions
  (:func:`predict`, chapters 6, 7, 10), the evidence and model comparison (:func:`log_evidence`,
  :func:`evidence_scan`; :mod:`effth.pdlt.learning.prediction`);
* two nearby inputs: the derived delta expansion of K and Theta, robustness and \*-polation, and
  the exact finite-angle flow of scale-invariant networks (:func:`delta_flow`,
  :func:`finite_angle_flow`; :mod:`effth.pdlt.learning.two_input`, PDLT §10.3);
* linear models and their kernel duals (:func:`linear_model`, PDLT §10.4);
* the trained network at finite width: the algorithm projectors, the per-network solution and
  the :math:`O(1/n)` ensemble mean and covariance (:func:`algorithm_projectors`,
  :func:`trained_output`, :func:`finite_width_mean`, :func:`finite_width_covariance`;
  ``predict(..., widths=n)``; PDLT §∞.2);
* residual MLPs (PDLT app. B): the same derivation with skip legs (``residual=True``), the
  critical :math:`C_W(\gamma)`, :math:`\nu(\gamma)`, the optimal aspect ratio :math:`r^\star` of
  app. A and :math:`\gamma^\star(r)` (:mod:`effth.pdlt.residual`);
* Bayesian learning at finite width (:func:`bayes_posterior`, PDLT §6.4) and nearly-kernel
  methods (:func:`quadratic_model`, :func:`nearly_kernel_predict`, PDLT §11.4).
"""

from effth.pdlt import criticality, deep_linear, depth_asymptotics
from effth.pdlt.cnn import CNNKernels, cnn_kernels
from effth.pdlt.depth_asymptotics import (NTKAsymptotics, iterate_ntk_single_input, measure_ntk_asymptotics,
                                          ntk_asymptotics)
from effth.pdlt.deep_linear import deep_linear_flow, layer_factor, single_input_moment
from effth.pdlt.initialization import (RATIO, Flow, KernelScaleWarning, LayerStep, Recursion,
                                       WidthWarning, couplings, derive, derive_initialization, flow,
                                       initialization_flow, mlp_flow, second_layer, single_input)
from effth.pdlt.learning import (AlgorithmProjectors, BayesPosterior, DeltaFlow, EvidenceScan,
                                 FiniteAngleFlow, FiniteWidthCovariance, FiniteWidthMean, LinearModel,
                                 NearlyKernelPrediction, Prediction, QuadraticModel, TrainedOutput,
                                 algorithm_projectors, bayes_posterior, delta_flow, delta_recursions,
                                 evidence_scan, finite_angle_flow, finite_width_covariance,
                                 finite_width_mean, linear_model, log_bayes_factor, log_evidence,
                                 log_evidence_two_inputs, meta_kernel, nearly_kernel_predict,
                                 observable_update, output_kernels, polation_mean, predict,
                                 quadratic_model, trained_output)
from effth.pdlt.ntk import NTK_STATISTICS, NTKFlow, NTKRecursion, derive_ntk, learning_rates, ntk_flow
from effth.pdlt import information, residual, residual_history
from effth.pdlt.derivation.six_point import derive_six_point_vertex, six_point_flow
from effth.pdlt.information import (SkipLayerEntropy, entropy_expansion,
                                    mutual_information_expansion, skip_layer_entropy,
                                    tripartite_information_expansion)
from effth.pdlt.residual import (ResidualCriticality, mutual_information, optimal_aspect_ratio,
                                 optimal_gamma, residual_branch_gain, residual_criticality,
                                 residual_nu)
from effth.pdlt.residual_history import residual_history_flow

__all__ = ["derive_six_point_vertex", "six_point_flow", "cnn_kernels", "CNNKernels", "Recursion", "derive_initialization", "initialization_flow", "mlp_flow", "RATIO",
           "flow", "Flow", "LayerStep", "KernelScaleWarning", "WidthWarning",
           "criticality", "deep_linear", "depth_asymptotics", "ntk_asymptotics", "NTKAsymptotics",
           "iterate_ntk_single_input", "measure_ntk_asymptotics", "deep_linear_flow", "layer_factor", "single_input_moment",
           "second_layer", "single_input", "derive", "couplings",
           "derive_ntk", "NTKRecursion", "NTK_STATISTICS", "ntk_flow", "NTKFlow", "learning_rates",
           "predict", "Prediction", "output_kernels", "log_evidence", "log_bayes_factor",
           "log_evidence_two_inputs", "evidence_scan", "EvidenceScan",
           "delta_flow", "DeltaFlow", "delta_recursions", "finite_angle_flow", "FiniteAngleFlow",
           "polation_mean", "linear_model", "LinearModel",
           "algorithm_projectors", "AlgorithmProjectors", "trained_output", "TrainedOutput",
           "finite_width_mean", "FiniteWidthMean", "finite_width_covariance", "FiniteWidthCovariance",
           "bayes_posterior", "BayesPosterior", "observable_update", "quadratic_model",
           "QuadraticModel", "meta_kernel", "nearly_kernel_predict", "NearlyKernelPrediction",
           "residual", "residual_criticality", "ResidualCriticality", "residual_nu",
           "residual_history", "residual_history_flow",
           "optimal_aspect_ratio", "mutual_information", "optimal_gamma", "residual_branch_gain",
           "information", "entropy_expansion", "mutual_information_expansion",
           "tripartite_information_expansion", "skip_layer_entropy", "SkipLayerEntropy"]
