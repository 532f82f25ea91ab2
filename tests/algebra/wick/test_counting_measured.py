"""Measured corner for neuron-index counting: Monte Carlo of i.i.d. Gaussian neurons.

For n i.i.d. standard normal neurons, (1/n^m) Σ_{j_1..j_m} E[z_{j1} z_{j1} ... z_{jm} z_{jm}]
= E[(|z|^2/n)^m] = c_{2m}(n): the cycle counting of effth.algebra.wick must reproduce a direct
simulation, including the 1/n rate at which c_{2m}(n) approaches 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.algebra.wick import c2m

WIDTHS = np.array([16, 32, 64, 128])


def _sample_moment(rng, n, m, size):
    chi = (rng.standard_normal((size, n)) ** 2).mean(axis=1)
    x = chi**m
    return x.mean(), x.std(ddof=1) / np.sqrt(size)


@pytest.mark.mc
@pytest.mark.parametrize("m", [2, 3, 4])
def test_c2m_matches_simulated_neurons(m):
    rng = np.random.default_rng(1000 + m)
    for n in (2, 5, 16):
        est, err = _sample_moment(rng, n, m, 200_000)
        exact = float(c2m(m, n))
        assert abs(est - exact) < 4.5 * err, (m, n, est, exact, err)
        # able to fail: the Gaussian value 1 and a one-cycle-too-few count are excluded
        assert abs(est - 1.0) > 10 * err


@pytest.mark.mc
def test_c4_deviation_falls_like_inverse_width():
    rng = np.random.default_rng(7)
    dev, err = [], []
    for n in WIDTHS:
        est, e = _sample_moment(rng, int(n), 2, 200_000)
        dev.append(est - 1.0)
        err.append(e)
    dev, err = np.array(dev), np.array(err)
    exact = np.array([float(c2m(2, int(n))) - 1.0 for n in WIDTHS])
    assert np.all(np.abs(dev - exact) < 4.5 * err)
    slope, intercept = np.polyfit(np.log(WIDTHS), np.log(dev), 1)
    assert abs(slope + 1.0) < 0.3, slope
    assert np.exp(intercept) == pytest.approx(2.0, rel=0.15)  # c_4(n) - 1 = 2/n
