"""Convergence rates of the numeric backends, not just single points.

* Monte Carlo: the reported standard error falls like N^{-1/2} and is honest (about 95% of
  independent runs land within 2 standard errors of the reference);
* quadrature: each requested rtol is met against an independent reference, and a looser rtol
  is never more accurate than a tighter one by accident of node choice (the error tracks rtol).
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.numerics import gaussian_expectation

K2 = np.array([[1.0, 0.4], [0.4, 0.7]])
PAIR = [(0, "sigma", 0), (1, "sigma", 0)]


@pytest.mark.mc
def test_mc_standard_error_falls_like_inverse_sqrt_n_and_is_honest():
    ref = float(gaussian_expectation(PAIR, K2, "tanh", method="quadrature", rtol=1e-12))
    sizes = np.array([2_000, 8_000, 32_000, 128_000])
    errs, covered, runs = [], 0, 0
    for n in sizes:
        reported = []
        for seed in range(12):
            val, err = gaussian_expectation(PAIR, K2, "tanh", method="mc", seed=seed, n_samples=int(n),
                                            return_error=True)
            reported.append(float(err))
            covered += abs(float(val) - ref) < 2.0 * float(err)
            runs += 1
        errs.append(np.mean(reported))
    slope = np.polyfit(np.log(sizes), np.log(errs), 1)[0]
    assert abs(slope + 0.5) < 0.1, slope
    # 48 runs, P(within 2 sigma) = 0.954: binomial 99.9% range is about [38, 48]
    assert covered >= 38, (covered, runs)


ONE_SLOT = ([(0, "sigma", 1), (0, "sigma", 0), (0, "z", 1)], np.array([[1.7]]))
TWO_SLOT = ([(0, "sigma", 1), (1, "sigma", 0), (1, "z", 1)], K2)


@pytest.mark.parametrize(
    "name,case",
    [("tanh", ONE_SLOT), ("gelu", ONE_SLOT), ("softplus", ONE_SLOT),
     pytest.param("tanh", TWO_SLOT, marks=pytest.mark.slow),
     pytest.param("softplus", TWO_SLOT, marks=pytest.mark.slow)],
)
def test_quadrature_meets_each_requested_rtol(name, case, request):
    if case is TWO_SLOT:   # the mpmath reference of two slots takes ~20 s (test_reference has the fast bar)
        request.getfixturevalue("opt_in_slow")
    factors, K = case
    ref = float(gaussian_expectation(factors, K, name, method="mpmath"))
    errors = []
    for rtol in (1e-4, 1e-6, 1e-8, 1e-10):
        got = float(gaussian_expectation(factors, K, name, method="quadrature", rtol=rtol))
        err = abs(got - ref) / abs(ref)
        assert err <= rtol, (name, rtol, err)
        errors.append(max(err, 1e-16))
    assert errors[-1] <= errors[0]
