r"""The derivation pipeline shared by every derived PDLT object.

* :mod:`.pipeline` -- forward equation of an MLP (PDLT (2.5)) → Wick contraction of the layer's
  weights and biases → coincidence split of the neuron sums → cumulant (Edgeworth) expansion of
  the layer-:math:`\ell` expectations → single-neuron atoms;
* :mod:`.ntk_forward` -- the stochastic forward equations of the NTK hierarchy as data
  (PDLT (8.12), (11.24), (∞.169), (∞.170)), with a numeric evaluation the tests check against the
  exact derivatives of real networks;
* :mod:`.ntk_pipeline` -- the same pipeline on joint moments of :math:`z`, :math:`\hat H`,
  :math:`\widehat{dH}`, :math:`\widehat{ddH}`.

* :mod:`.six_point` -- the same steps one order further in :math:`1/n`: the six-point vertex
  :math:`U_6` (PDLT epilogue (ε.17)–(ε.20)).

The initialization recursions (:mod:`effth.pdlt.initialization`) and the NTK hierarchy
(:mod:`effth.pdlt.ntk`) are both outputs of this one pipeline.
"""
