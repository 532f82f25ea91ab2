"""Honest Monte-Carlo errors and diagnostics of the alternating DMFT solver.

Coverage: over 40 seeds of a small deep linear problem (L = 2, gamma0 = 1, strong feature
learning), the solver's z-scores against the exact deep linear solver must be standard.  With
``R`` replicas the error estimate has ``R - 1`` degrees of freedom, so ``z ~ t_{R-1}``; it is mapped
to a standard normal ``u = Phi^-1(F_t(z))`` and ``mean(u^2)`` over seeds is compared with 1.  The
final-time predictions of one seed are correlated, so the 40 seeds are the independent units:
``sd(mean u^2) <= sqrt(2 / 40) = 0.22`` and the band 1 +- 4.5 x 0.22 is used.  The former error
estimate (batches of the last sweep, ``replicas=1``) fails the same test.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from effth.errors import DomainError
from effth.dmft import solve_deep_linear, solve_monte_carlo, solve_two_layer

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
Y = np.array([1.0, -0.5])
PROB = dict(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.2, steps=6)
SEEDS = 40


def _u2(replicas, name="f"):
    ex = solve_deep_linear(**PROB)
    exact = ex.value(name)[-1]
    u2 = []
    for seed in range(SEEDS):
        r = solve_monte_carlo(**PROB, activation="linear", samples=512, iterations=10,
                              responses="stein", seed=seed, replicas=replicas)
        z = (r.value(name)[-1] - exact) / r.stderr(name)[-1]
        R = r.diagnostics.replicas
        u = stats.norm.ppf(stats.t.cdf(z, df=R - 1)) if R > 1 else z
        u2.append(np.mean(u ** 2))
    return float(np.mean(u2))


def test_replica_errors_cover_the_exact_solution():
    band = 4.5 * np.sqrt(2 / SEEDS)
    good = _u2(replicas=8)
    assert abs(good - 1) < band, good
    old = _u2(replicas=1)                    # batches of one sweep: misses the propagated noise
    assert old > 1 + band, old


def test_loss_has_a_standard_error_that_covers_the_exact_loss():
    """stderr('loss') of the Monte-Carlo solver (the replicas' spread of their own losses); the
    bias of the loss of a noisy f, O(Var f), is far below its standard error at 512 samples."""
    band = 4.5 * np.sqrt(2 / SEEDS)
    assert abs(_u2(replicas=8, name="loss") - 1) < band
    r = solve_monte_carlo(**PROB, activation="linear", samples=256, iterations=4, seed=0)
    se = r.stderr("loss")
    assert se is not None and se.shape == r.loss.shape and np.all(se[1:] > 0)


def test_converged_is_honest_and_growth_is_flagged():
    r = solve_monte_carlo(**PROB, activation="linear", samples=256, iterations=6,
                          responses="stein", seed=0)
    assert r.diagnostics.converged is None                      # no tolerance: nothing tested
    assert r.diagnostics.replicas == 8 and not r.diagnostics.diverged
    r = solve_monte_carlo(**PROB, activation="linear", samples=256, iterations=40,
                          responses="stein", seed=0, tol=1e-12, replicas=1)
    assert r.diagnostics.converged is False                     # noise floor never reaches 1e-12
    from effth.dmft.solvers.monte_carlo import _flag_growth
    from effth.dmft.result import Diagnostics
    d = Diagnostics(residuals=[235.0, 240.0, 300.0, 900.0, 3000.0, 8455.0])
    with pytest.warns(UserWarning, match="diverging"):
        _flag_growth(d)
    assert d.diverged
    d = Diagnostics(residuals=[0.49, 0.59, 0.97, 0.28, 0.31, 0.27, 0.14, 0.34, 0.26])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _flag_growth(d)                                          # a noise plateau is not growth
    assert not d.diverged


@pytest.mark.parametrize("bad", [dict(replicas=0), dict(replicas=1.5), dict(tol=-1.0),
                                 dict(gamma0=1.0 + 0j), dict(y=Y + 0j), dict(kernel=KX + 0j)])
def test_bad_input(bad):
    kw = dict(PROB, activation="linear", samples=64, iterations=2)
    kw.update(bad)
    with pytest.raises(DomainError):
        solve_monte_carlo(**kw)


def test_stability_is_checked_along_the_run():
    """eta = 0.6 on the canonical data: the lazy NTK 2 K^x gives eta lambda_max = 1.8 < 2 at t = 0
    (the only check before), but feature learning grows the NTK past the edge for gamma0 = 1;
    gamma0 = 0.5 stays inside.  The largest eta lambda_max is recomputed here from result.ntk."""
    kw = dict(kernel=KX, y=Y, hidden_layers=1, eta=0.6, steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = solve_deep_linear(gamma0=0.5, **kw)
    assert 1.8 <= ok.diagnostics.stability < 2
    with pytest.warns(UserWarning, match=r"stable region.*first at step \d+"):
        bad = solve_deep_linear(gamma0=1.0, **kw)
    x = 0.6 * np.linalg.eigvalsh(bad.ntk)[:, -1]
    assert abs(x[0] - 1.8) < 1e-12 and x.max() >= 2
    assert bad.diagnostics.stability == pytest.approx(x.max(), rel=1e-12)
    with pytest.warns(UserWarning, match="stable region"):
        solve_two_layer(kernel=KX, y=Y, gamma0=1.0, eta=0.6, steps=20, activation="linear",
                        quad_tol=None)


LONG = dict(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.2, steps=20)


def test_adaptive_sweeps_converge_where_fifteen_do_not():
    """Strong feature learning over 20 steps (L = 2, gamma0 = 1): the fixed-point iteration
    approaches its fixed point slowly and with an oscillation, and the former default of 15
    sweeps leaves the predictions 4.6-9.4 standard errors (max over times and points, 8 seeds)
    from the exact deep linear solution.  The default drift test (iterations=None) stopped after
    26-47 sweeps within 2.8 standard errors (same 8 seeds); seed 4 is checked here."""
    exact = solve_deep_linear(**LONG).f
    kw = dict(LONG, activation="linear", samples=2000, responses="stein", seed=4)
    r = solve_monte_carlo(**kw)
    d = r.diagnostics
    assert d.converged is True and d.iterations > 15 and "standard errors" in d.criterion
    assert len(d.drift) == d.iterations and d.drift[-1] < d.drift_z == 2.5
    assert np.max(np.abs(r.f - exact) / r.stderr("f")) < 4.5
    old = solve_monte_carlo(**kw, iterations=15)
    assert old.diagnostics.converged is None and old.diagnostics.criterion is None
    assert np.max(np.abs(old.f - exact) / old.stderr("f")) > 4.5


def test_adaptive_sweeps_raise_when_not_converged():
    from effth.errors import ConvergenceError
    kw = dict(LONG, activation="linear", samples=256, responses="stein", seed=0)
    # 12 sweeps, the earliest the drift test can stop at: this problem needs more than 15
    with pytest.raises(ConvergenceError, match="did not converge in max_iterations=12.*"
                       "raise max_iterations or samples.*iterations="):
        solve_monte_carlo(**kw, max_iterations=12)
    r1 = solve_monte_carlo(**dict(kw, steps=6), replicas=1)   # one chain: batch errors
    assert r1.diagnostics.converged is True and r1.diagnostics.replicas == 1
    assert r1.diagnostics.iterations == len(r1.diagnostics.drift) >= 12
    for bad in (dict(max_iterations=11), dict(drift_z=0.0), dict(iterations=0)):
        with pytest.raises(DomainError):
            solve_monte_carlo(**kw, **bad)
