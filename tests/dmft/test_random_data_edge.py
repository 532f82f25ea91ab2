"""Random-data DMFT near the edge of stability (Bordelon & Pehlevan, deep linear networks on random
data, App. A): the theory is the D -> infinity limit there too, but finite networks approach it
slowly, so ``solve_random_data`` warns from ``q = eta kappa (1 + alpha^-1/2)^2 >= 1.5`` on.

(a) the criterion and the warning; (b) ``q = 2`` is the lazy finite-data stability bound of
``max_stable_learning_rate``; (c) simulated networks (``simulate_linear_field``): at ``q = 1.75`` the gap
is large at D = 800 and shrinks towards zero by D = 3200, at ``q = 0.87`` it is a small 1/D gap.
"""

import warnings

import numpy as np
import pytest

from effth.dmft import solve_random_data
from effth.dmft.random_data import _params, lazy_edge_ratio
from effth.errors import AccuracyWarning
from effth.simulation import simulate_linear_field

KW = dict(hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0)


def _q(**kw):
    args = dict(depth=None, hidden_layers=2, alpha=2.0, nu=1.0, gamma0=1.0, eta=0.2, steps=5,
                sigma=0.0, signal=1.0, centering=False, batch_ratio=None, parameterization="mup",
                reference_nu=1.0, branch_scale=None, branch_scale0=None)
    args.update(kw)
    return lazy_edge_ratio(_params(**args))


def test_edge_ratio_and_warning():
    assert _q() == pytest.approx(0.2 * 3 * (1 + 2 ** -0.5) ** 2, rel=1e-14)      # 1.75
    assert _q(alpha=np.inf) is None
    assert _q(hidden_layers=1, eta=0.2) == pytest.approx(1.1657, abs=1e-4)
    with pytest.warns(AccuracyWarning, match="edge of stability"):
        solve_random_data(eta=0.2, steps=5, **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solve_random_data(eta=0.1, steps=5, **KW)                                  # q = 0.87
        solve_random_data(eta=0.2, steps=5, **dict(KW, alpha=np.inf))              # no spectrum edge
        solve_random_data(eta=0.2, steps=5, **dict(KW, hidden_layers=1))           # q = 1.17


@pytest.mark.slow
def test_near_the_edge_networks_approach_the_theory_slowly(opt_in_slow):
    """q = 1.75: the test-loss gap at t = 59 is large at D = 800 (about half the loss) and has
    shrunk by D = 3200 (the theory is the limit); q = 0.87: |gap| x D stays below 5."""
    tt = 59
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        th = solve_random_data(eta=0.2, steps=60, **KW).test_loss[tt]
    gaps = {}
    for D, nets in ((800, 32), (3200, 8)):
        run = simulate_linear_field(dim=D, eta=0.2, steps=60, networks=nets, seed=D + 7, **KW)
        gaps[D] = (run.value("test_loss")[tt] - th, run.stderr("test_loss")[tt])
    g8, s8 = gaps[800]
    g32, s32 = gaps[3200]
    assert g8 < -0.3 * th and abs(g8) > 5 * s8, gaps                 # far from the limit at 800
    assert abs(g32) < abs(g8) - 3 * np.hypot(s8, s32), gaps          # and approaching it
    th1 = solve_random_data(eta=0.1, steps=60, **KW).test_loss[tt]
    run = simulate_linear_field(dim=800, eta=0.1, steps=60, networks=16, seed=815, **KW)
    g, s = run.value("test_loss")[tt] - th1, run.stderr("test_loss")[tt]
    assert abs(g) * 800 < 5 + 4 * s * 800, (g, s)
