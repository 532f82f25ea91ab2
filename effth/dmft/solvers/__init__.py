r"""Solvers of the infinite-width DMFT on the gradient-descent grid (Bordelon & Pehlevan 2022, §2–§3).

* :mod:`effth.dmft.solvers.deep_linear` -- :func:`solve_deep_linear`: the closed matrix equations of deep linear
  networks, marched in time (no sampling);
* :mod:`effth.dmft.solvers.equilibrium` -- :func:`solve_deep_linear_equilibrium`,
  :func:`solve_equilibrium`: the Gibbs equilibrium (Bayesian posterior) of Langevin training of
  deep linear and nonlinear networks (App. K.3);
* :mod:`effth.dmft.solvers.two_layer` -- :func:`solve_two_layer`: one hidden layer in one pass over time
  (Gauss–Hermite quadrature or Monte Carlo);
* :mod:`.monte_carlo` -- :func:`solve_monte_carlo`: the alternating Monte-Carlo solver
  (Algorithm 1) for any activation and depth;
* :mod:`effth.dmft.solvers.cnn` -- :func:`solve_cnn_monte_carlo`, :func:`solve_cnn_deep_linear`: the CNN DMFT with pixel indices
  (app. G), by the same alternating Monte Carlo;
* :mod:`effth.dmft.solvers.lazy` -- the lazy limit :math:`\gamma_0=0` (static NTK) and the stability check;
* :mod:`effth.dmft.solvers.saddle_point` -- the next-to-leading order of the saddle point.
"""

from effth.dmft.solvers.cnn import CNNDMFTResult, solve_cnn_deep_linear, solve_cnn_monte_carlo
from effth.dmft.solvers.deep_linear import solve_deep_linear
from effth.dmft.solvers.equilibrium import (LangevinEquilibrium, solve_deep_linear_equilibrium,
                                            solve_equilibrium)
from effth.dmft.solvers.lazy import check_stability, lazy_kernels, static_ntk_dynamics, static_ntk_solve
from effth.dmft.solvers.monte_carlo import solve_monte_carlo
from effth.dmft.solvers.saddle_point import saddle_point_nlo
from effth.dmft.solvers.two_layer import solve_two_layer

__all__ = ["solve_cnn_monte_carlo", "solve_cnn_deep_linear", "CNNDMFTResult", "solve_deep_linear", "solve_deep_linear_equilibrium", "solve_equilibrium", "LangevinEquilibrium", "solve_two_layer", "solve_monte_carlo", "check_stability",
           "lazy_kernels", "static_ntk_dynamics", "static_ntk_solve", "saddle_point_nlo"]
