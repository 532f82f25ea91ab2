"""The comparison type: z-scores and scaling fits whose error bars have the coverage they claim."""

from __future__ import annotations

import numpy as np
import pytest

from effth import DomainError
from effth.compare import Comparison, compare, scaling_fit


class _Measured:
    """A stand-in measured result: the mean of ``draws`` with its standard error."""

    def __init__(self, draws: np.ndarray):
        self.draws = draws
        self.layers = (1,)

    def value(self, name, layer=None):
        return self.draws.mean(axis=0)

    def stderr(self, name, layer=None):
        return self.draws.std(axis=0, ddof=1) / np.sqrt(self.draws.shape[0])


class _Theory:
    layers = (1,)

    def __init__(self, mean):
        self.mean = mean

    def value(self, name, layer=None, widths=None):
        return self.mean

    def stderr(self, name, layer=None):
        return None


def test_z_scores_have_unit_variance_under_the_true_theory():
    # 400 entries, each the mean of 50 unit-variance draws: the z of the true theory are
    # t-distributed with 49 dof (variance 49/47 = 1.043); the sample variance of 400 of them has
    # relative standard error sqrt(2/400) = 7 %.
    rng = np.random.default_rng(1)
    mean = rng.standard_normal(400)
    meas = _Measured(mean + rng.standard_normal((50, 400)))
    c = compare(_Theory(mean), meas, "G", layer=1)
    var = float(np.var(c.z))
    assert abs(var - 49 / 47) < 5 * 0.07 * 49 / 47
    assert c.dof == 400 and c.chi2 == pytest.approx(np.sum(c.z ** 2))


def test_a_wrong_theory_is_rejected():
    rng = np.random.default_rng(2)
    mean = 1.0 + rng.random(50)
    meas = _Measured(mean + 0.05 * rng.standard_normal((400, 50)))     # stderr 0.0025
    assert compare(_Theory(mean), meas, "G").max_abs_z < 5
    assert compare(_Theory(0.9 * mean), meas, "G").max_abs_z > 20        # 0.1..0.2 off = 40+ SE


def test_theory_stderr_adds_in_quadrature_and_plain_arrays_work():
    class MCTheory(_Theory):
        def stderr(self, name, layer=None):
            return np.full(3, 0.4)
    c = compare(MCTheory(np.zeros(3)), np.ones(3), "f", stderr=np.full(3, 0.3))
    np.testing.assert_allclose(c.stderr, 0.5)
    np.testing.assert_allclose(c.z, 2.0)


def test_scaling_fit_recovers_the_exponent_with_honest_error_bars():
    # errors c/n^2 measured with 2 % noise at five widths: the fitted slope is within 4 SE of -2
    # in every one of 200 replicas, and its spread matches the reported standard error.
    rng = np.random.default_rng(3)
    ns = np.array([8, 16, 32, 64, 128])
    slopes, ses = [], []
    for _ in range(200):
        comps = []
        for n in ns:
            d = (1.0 / n ** 2) * (1 + 0.02 * rng.standard_normal(16))
            comps.append(Comparison("G", None, np.zeros(16), d, np.full(16, 0.02 / n ** 2)))
        fit = scaling_fit(comps, ns)
        slopes.append(fit.slope)
        ses.append(fit.slope_stderr)
        assert fit.consistent_with(-2.0)
    slopes = np.array(slopes)
    assert abs(slopes.mean() + 2.0) < 5 * slopes.std() / np.sqrt(slopes.size)
    assert 0.7 < slopes.std() / np.median(ses) < 1.5
    assert not scaling_fit(comps, ns).consistent_with(-1.8)


def test_bad_input_is_refused():
    with pytest.raises(DomainError, match="shape"):
        compare(np.zeros(2), np.zeros(3), "G", stderr=np.ones(3))
    with pytest.raises(DomainError, match="standard error"):
        compare(np.zeros(2), np.zeros(2), "G")
    with pytest.raises(DomainError, match="finite"):
        compare(np.array([np.nan, 0.0]), np.zeros(2), "G", stderr=np.ones(2))
    with pytest.raises(DomainError, match="complex"):
        compare(np.zeros(2) + 1j, np.zeros(2), "G", stderr=np.ones(2))
    noisy = Comparison("G", None, np.zeros(4), np.full(4, 1e-3), np.full(4, 1.0))
    with pytest.raises(DomainError, match="not resolved"):
        scaling_fit([noisy, noisy], [1, 2])
    with pytest.raises(DomainError, match="two points"):
        scaling_fit([noisy], [1])


def test_repr_is_short():
    c = compare(np.zeros((40, 40)), np.ones((40, 40)), "V", stderr=np.ones((40, 40)))
    assert len(repr(c)) < 300 and "max|z|=1.00" in repr(c)
    assert "<table>" in c._repr_html_()
    assert c.table().count("\n") <= 14


def test_debiased_error_removes_the_noise_floor():
    """Plain RMS errors never fall below the noise floor: a study whose sample size shrinks with
    the width shows a spurious plateau. error_debiased removes E[s^2]; scaling_fit(debias=True)
    recovers the true exponent where the plain fit is biased towards 0, and refuses pure noise."""
    rng = np.random.default_rng(5)
    widths = np.array([32, 64, 128, 256, 512])
    m = 48                                                  # entries per comparison
    slopes_plain, slopes_db = [], []
    for rep in range(40):
        comps = []
        for n in widths:
            s = 0.6 * 64 / n * np.sqrt(n / 64)              # noise shrinks slower than the signal
            mu = (0.3 * 64 / n) * np.ones(m)                # true error ~ 1/n
            comps.append(Comparison("C", None, np.zeros(m), mu + s / 8 * rng.standard_normal(m),
                                    np.full(m, s / 8)))
        slopes_plain.append(scaling_fit(comps, widths, min_z=2.0).slope)
        slopes_db.append(scaling_fit(comps, widths, debias=True, min_z=2.0).slope)
    assert abs(np.mean(slopes_db) + 1.0) < 0.05, np.mean(slopes_db)
    assert np.mean(slopes_plain) > -0.95, np.mean(slopes_plain)       # biased towards 0
    # pure noise: the plain RMS sits at the floor, the debiased one near zero, and is refused
    noise = Comparison("C", None, np.zeros(200), 0.1 * rng.standard_normal(200), np.full(200, 0.1))
    assert noise.error == pytest.approx(noise.noise_floor, rel=0.15)
    assert noise.error_debiased < 0.3 * noise.noise_floor
    with pytest.raises(DomainError, match="above the noise"):
        scaling_fit([noise, noise], [1, 2], debias=True)


def test_dof_counts_distinct_entries_of_symmetric_tensors():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 3))
    sym = a + a.T
    c = compare(sym, sym + 0.1, "G", stderr=np.full((3, 3), 0.05))
    assert c.dof == 6 and c.chi2 == pytest.approx(6 * 4.0)         # 9 entries, 6 distinct
    # a matrix without the symmetry keeps all 9
    assert compare(a, a + 0.1, "G", stderr=np.full((3, 3), 0.05)).dof == 9
    perms = [(0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 3, 2), (1, 0, 3, 2),
             (2, 3, 0, 1), (3, 2, 0, 1), (2, 3, 1, 0), (3, 2, 1, 0)]
    v = rng.normal(size=(3,) * 4)
    v = sum(np.transpose(v, g) for g in perms)
    assert compare(v, v, "V", stderr=np.full(v.shape, 0.1)).dof == 21   # (6 * 7) / 2 pairs of pairs


def test_consistent_is_an_attribute_and_within_takes_a_bound():
    c = compare(np.zeros(3), np.array([0.0, 0.2, 0.45]), "f", stderr=np.full(3, 0.1))
    assert c.consistent is True and c.within(4.0) is False and c.within(4.5) is True


def test_rectangular_and_time_indexed_arrays_keep_every_entry():
    a = np.arange(6.0).reshape(3, 2)
    assert compare(a, a + 0.1, "f", stderr=np.full((3, 2), 0.1)).dof == 6
    b = np.ones((5, 2, 5, 2))            # (T, n, T, n): a generator that changes the shape is skipped
    assert compare(b, b, "phi", stderr=np.full(b.shape, 0.1)).dof > 0
