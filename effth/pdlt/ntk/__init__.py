r"""The NTK hierarchy (PDLT ch. 7–9, 11, ∞): the frozen NTK :math:`\Theta` and its :math:`1/n`
correction :math:`H^{\{1\}}`, the NTK variance :math:`A, B`, the cross-correlations :math:`D, F`,
the dNTK :math:`P, Q` and the ddNTK means :math:`R, S, T, U`.

* :mod:`.recursions` -- :func:`derive_ntk`, :class:`NTKRecursion`: derived from the forward
  equations by the shared pipeline (:mod:`effth.pdlt.derivation`);
* :mod:`.ntk_flow` -- :func:`ntk_flow`: compiled over inputs and layers, with the learning-rate
  prescriptions of ch. 9 (:func:`learning_rates`), and the memory estimate of its train/test
  restriction (:func:`restricted_flow_bytes`).
"""

from effth.pdlt.ntk.ntk_flow import (NTKFlow, NTKLayerStep, kinked_dntk_singular, learning_rates, ntk_flow,
                                    restricted_flow_bytes)
from effth.pdlt.ntk.recursions import NTK_STATISTICS, NTKRecursion, derive_ntk

__all__ = ["derive_ntk", "NTKRecursion", "NTK_STATISTICS", "ntk_flow", "NTKFlow", "NTKLayerStep",
           "learning_rates", "kinked_dntk_singular", "restricted_flow_bytes"]
