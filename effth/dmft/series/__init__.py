r"""The :math:`\gamma_0`-series of the DMFT (Bordelon & Pehlevan 2022, §4 and app. E): the order
parameters expanded around the lazy process to any order.

* :mod:`.gamma0` -- :func:`gamma0_series`, :class:`Gamma0Series`, :func:`gamma0_leading_order`
  (the public entry points);
* :mod:`.deep_linear`, :mod:`.two_layer`, :mod:`.deep_nonlinear`, :mod:`.deep_jets` -- the
  coefficients of deep linear (exact), two-layer (any smooth :math:`\sigma`) and deep nonlinear
  networks;
* :mod:`.leading` -- the :math:`O(\gamma_0^2)` coefficients in closed form (symbolic);
* :mod:`.formulas`, :mod:`.formulas_two_layer`, :mod:`.formulas_nonlinear` -- the coefficients as
  printed equations (deep linear, every order; two-layer, any smooth activation, every order in
  Gaussian atoms times time functions of the errors; deep nonlinear at :math:`\gamma_0^2` in
  Gaussian moments) with evaluators of the printed equations;
* :mod:`.arith` -- truncated power-series arithmetic;
* :mod:`.compare` -- static NTK, gradient independence, the series and the full DMFT side by side.
"""

from effth.dmft.series.compare import ApproximationComparison, compare_approximations
from effth.dmft.series.gamma0 import Gamma0Series, gamma0_leading_order, gamma0_series

__all__ = ["gamma0_series", "Gamma0Series", "gamma0_leading_order", "compare_approximations",
           "ApproximationComparison"]
