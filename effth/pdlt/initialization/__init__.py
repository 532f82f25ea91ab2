r"""Statistics at initialization (PDLT ch. 4): the derived recursions of :math:`K`, :math:`V`,
:math:`G^{\{1\}}`, their special cases, the couplings of the quartic action, and the compiled flow
over inputs and layers.

* :mod:`.recursions` -- :func:`derive_initialization`, :class:`Recursion` (PDLT (4.115), (4.118),
  (4.119));
* :mod:`effth.pdlt.initialization.reductions` -- the exact second layer and the single-input forms in :math:`\chi_\parallel`,
  :math:`\chi_\perp` (:func:`second_layer`, :func:`single_input`, :func:`derive`);
* :mod:`effth.pdlt.initialization.couplings` -- :math:`g`, :math:`v` of the layer action from :math:`K, V, G^{\{1\}}` (PDLT §4.4);
* :mod:`.kernel_flow` -- :func:`flow`: the recursions compiled and iterated over inputs and layers.
"""

from effth.pdlt.initialization.couplings import couplings
from effth.pdlt.initialization.kernel_flow import Flow, KernelScaleWarning, LayerStep, WidthWarning, flow
from effth.pdlt.initialization.recursions import (RATIO, Recursion, derive_initialization,
                                                  initialization_flow, mlp_flow)
from effth.pdlt.initialization.reductions import derive, second_layer, single_input

__all__ = ["Recursion", "derive_initialization", "initialization_flow", "mlp_flow", "RATIO",
           "derive", "second_layer", "single_input", "couplings",
           "flow", "Flow", "LayerStep", "KernelScaleWarning", "WidthWarning"]
