"""Ground-truth simulation of finite-width networks: ensembles at initialization and training.

NumPy only: this package never imports effth's theory, algebra, numerics or codegen modules,
so that the theory can be checked against it.  See :func:`simulate_ensemble` (initialization)
and :func:`simulate_training` (full-batch gradient descent in the DMFT parameterization);
:func:`simulate_ntk_ensemble` gives the empirical NTK, dNTK and ddNTKs (PDLT ch. 7-11, ∞);
:func:`simulate_cnn_ensemble` draws random CNNs (empirical kernels and NTK over image-pixel pairs);
:func:`train_cnn` trains ensembles of CNNs by full-batch GD (NTK or μP / mean-field);
:func:`train_ensemble` trains ensembles of networks in the book's parameterization (PDLT ch. 7, 10);
:func:`sampled_entropy` and :func:`sampled_mutual_information` measure the information of
preactivations on random networks (PDLT app. A).

Results are read like every effth result (``docs/conventions.md``): ``result.layers`` (book layer
numbers), ``result.value(name, layer=l)`` and ``result.stderr(name, layer=l)``.  Randomness is
always ``seed=`` (an int, a ``SeedSequence``, a ``Generator`` or ``None``); long runs take
``progress=``.
"""

from __future__ import annotations

from .cnn import CNNEnsembleStatistics, simulate_cnn_ensemble
from .cnn_training import train_cnn
from .ensemble import ESTIMATORS, STAT_NAMES, EnsembleStatistics, simulate_ensemble
from .ntk import NTK_ESTIMATORS, NTKEnsembleStatistics, NTKResult, empirical_ntk, init_params, simulate_ntk_ensemble
from .learning import TrainedEnsemble, train_ensemble
from .features import network_features
from .training import TrainingRun, simulate_training
from .rules import RuleTrainingRun, simulate_rule_training
from .linear_field import LinearFieldRun, simulate_linear_field, simulate_power_law
from .information import InformationEstimate, mixture_entropy, sampled_entropy, sampled_mutual_information

__all__ = ["simulate_cnn_ensemble", "train_cnn", "CNNEnsembleStatistics", "simulate_ensemble", "EnsembleStatistics", "ESTIMATORS", "simulate_training", "TrainingRun",
           "empirical_ntk", "simulate_ntk_ensemble", "init_params", "NTKResult", "NTKEnsembleStatistics",
           "NTK_ESTIMATORS", "STAT_NAMES", "train_ensemble", "TrainedEnsemble", "network_features",
           "simulate_linear_field", "simulate_power_law", "LinearFieldRun",
           "simulate_rule_training", "RuleTrainingRun", "sampled_entropy",
           "sampled_mutual_information", "mixture_entropy", "InformationEstimate"]
