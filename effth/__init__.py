r"""effth: the effective theory of wide neural networks, derived, printed, compiled and checked.

The public surface is re-exported here; modules below ``effth`` are organized by layer
(``algebra`` → ``activations`` → ``numerics`` → ``codegen``; ``printing`` beside them; the theories
``pdlt`` and ``dmft`` above them; ``simulation`` beside the theories, never importing them;
``compare``, ``report`` and ``cli`` on top).

Examples
--------
>>> import effth as et
>>> round(float(et.gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[1.0]], "relu")), 15)
0.5
"""

from __future__ import annotations

__version__ = "0.1.0"

from .activations import Activation, available_activations, get_activation, register_activation
from .algebra.action import (
    QuarticAction,
    connected_correlator,
    diagrams,
    partition_function,
    perturbative_moment,
)
from .algebra.cumulants import (
    Cumulant,
    Moment,
    bell_number,
    cumulants_to_moments,
    moments_to_cumulants,
    set_partitions,
)
from .algebra.expectation import GaussianExpectation, expect, sigma, z
from .algebra.indices import alpha, beta, c_b, c_w, ell, gamma, gamma0, neuron, width
from .algebra.tensors import (
    FourPointVertex,
    InverseKernel,
    InverseMetric,
    Kernel,
    KernelMatrix,
    Metric,
    NLOMetric,
    Propagator,
    QuadraticCoupling,
    QuarticCoupling,
    RaisedFourPointVertex,
    SampleSum,
    SymmetricQuarticCoupling,
    expand_sample_sums,
)
from .algebra.wick import (
    Slot,
    WickExpansion,
    WickGraph,
    c2m,
    count_pairings,
    cycle_histogram,
    enumerate_pairings,
    wick_classes,
)
from effth.arch import CNN, MLP
from .codegen import compile_expression, compile_step
from .compare import Comparison, ScalingFit, compare, scaling_fit
from .report import run_report
from .sweeps import Sweep, sweep
from .errors import (
    AccuracyWarning,
    ClosedFormUnavailableWarning,
    ConvergenceError,
    DomainError,
    EffthError,
    NotDerivedError,
    UnknownActivationError,
)
from .numerics import gaussian_expectation, validate_covariance
from .numerics.closed_forms import has_closed_form
from .printing import init_printing, latex
from .simulation import (EnsembleStatistics, TrainedEnsemble, TrainingRun, simulate_ensemble,
                         simulate_training, train_ensemble)
from . import dmft, pdlt
from . import data
from .pdlt import CNNKernels, cnn_kernels
from .pdlt import Flow, NTKFlow, derive, derive_initialization, derive_ntk, flow, ntk_flow
from .pdlt.learning import (EvidenceScan, Prediction, evidence_scan, log_bayes_factor,
                                    log_evidence, output_kernels, predict)

__all__ = [
    "__version__",
    # activations
    "Activation", "available_activations", "get_activation", "register_activation",
    # algebra: indices and tensors
    "alpha", "beta", "gamma", "ell", "gamma0", "neuron", "width", "c_w", "c_b",
    "Kernel", "InverseKernel", "Metric", "InverseMetric", "NLOMetric", "FourPointVertex",
    "RaisedFourPointVertex", "QuadraticCoupling", "Propagator", "QuarticCoupling",
    "SymmetricQuarticCoupling", "KernelMatrix", "SampleSum", "expand_sample_sums",
    # algebra: Wick, cumulants, actions, atoms
    "Slot", "WickGraph", "WickExpansion", "wick_classes", "enumerate_pairings", "count_pairings",
    "cycle_histogram", "c2m",
    "Moment", "Cumulant", "set_partitions", "bell_number", "moments_to_cumulants",
    "cumulants_to_moments",
    "QuarticAction", "diagrams", "perturbative_moment", "connected_correlator",
    "partition_function",
    "GaussianExpectation", "z", "sigma", "expect",
    # networks and their simulation (ground truth)
    "MLP", "CNN", "cnn_kernels", "CNNKernels", "simulate_ensemble", "EnsembleStatistics", "simulate_training", "TrainingRun",
    "train_ensemble", "TrainedEnsemble",
    # learning at infinite width (PDLT ch. 6, 10)
    "predict", "Prediction", "output_kernels", "log_evidence", "log_bayes_factor", "evidence_scan",
    "EvidenceScan",
    "pdlt", "dmft", "data", "flow", "Flow", "derive", "derive_initialization",
    "derive_ntk", "ntk_flow", "NTKFlow",
    # theory meets measurement
    "compare", "scaling_fit", "Comparison", "ScalingFit", "run_report", "sweep", "Sweep",
    # numerics, codegen, printing
    "gaussian_expectation", "validate_covariance", "has_closed_form", "compile_expression", "compile_step",
    "latex", "init_printing",
    # errors
    "EffthError", "DomainError", "UnknownActivationError", "ConvergenceError", "NotDerivedError",
    "ClosedFormUnavailableWarning", "AccuracyWarning",
]
