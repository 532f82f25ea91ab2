r"""Learning (PDLT ch. 6, 7, 10, 11, ∞): predictions at infinite and finite width.

* :mod:`.prediction` -- :func:`predict`, the one entry point for Bayesian and gradient-descent
  predictions; the evidence and model comparison (:func:`log_evidence`, :func:`evidence_scan`);
* :mod:`effth.pdlt.learning.linear_models` -- linear models and their kernel duals (PDLT §10.4);
* :mod:`effth.pdlt.learning.two_input` -- two nearby inputs: the :math:`\delta` expansion, robustness, \*-polation,
  the finite-angle flow (PDLT §5.5, §10.3);
* :mod:`effth.pdlt.learning.projectors` -- the algorithm projectors of GD, gradient flow and Newton steps (PDLT §∞.2);
* :mod:`.finite_width` -- the trained network at finite width: one network's end of training and
  the :math:`O(1/n)` ensemble mean and covariance (PDLT §∞.2);
* :mod:`effth.pdlt.learning.bayes_finite` -- Bayesian learning at finite width (PDLT §6.4);
* :mod:`effth.pdlt.learning.nearly_kernel` -- nearly-kernel methods (PDLT §11.4).
"""

from effth.pdlt.learning.bayes_finite import BayesPosterior, bayes_posterior, observable_update
from effth.pdlt.learning.finite_width import (FiniteWidthCovariance, FiniteWidthMean, TrainedOutput,
                                              finite_width_covariance, finite_width_mean,
                                              trained_output)
from effth.pdlt.learning.linear_models import LinearModel, linear_model
from effth.pdlt.learning.nearly_kernel import (NearlyKernelPrediction, QuadraticModel, meta_kernel,
                                               nearly_kernel_predict, quadratic_model)
from effth.pdlt.learning.prediction import (EvidenceScan, Prediction, evidence_scan, log_bayes_factor,
                                         log_evidence, log_evidence_two_inputs, output_kernels,
                                         predict)
from effth.pdlt.learning.projectors import AlgorithmProjectors, algorithm_projectors
from effth.pdlt.learning.two_input import (DeltaFlow, FiniteAngleFlow, delta_flow, delta_recursions,
                                           finite_angle_flow, polation_mean)

__all__ = ["predict", "Prediction", "output_kernels", "log_evidence", "log_bayes_factor",
           "log_evidence_two_inputs", "evidence_scan", "EvidenceScan",
           "linear_model", "LinearModel",
           "delta_flow", "DeltaFlow", "delta_recursions", "finite_angle_flow", "FiniteAngleFlow",
           "polation_mean",
           "algorithm_projectors", "AlgorithmProjectors",
           "trained_output", "TrainedOutput", "finite_width_mean", "FiniteWidthMean",
           "finite_width_covariance", "FiniteWidthCovariance",
           "bayes_posterior", "BayesPosterior", "observable_update",
           "quadratic_model", "QuadraticModel", "meta_kernel", "nearly_kernel_predict",
           "NearlyKernelPrediction"]
