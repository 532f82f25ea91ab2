"""The whole-array arcsin / arccos of effth.numerics._fastmath behind the erf and arc-cosine
kernels: within 2 ulp of the correctly rounded value (40-digit mpmath) on a dense grid of
[-1, 1] with the ends, the branch point 1/2 and tiny arguments; a coefficient off by 1e-9 is
caught; the kernels built on them equal the C library forms to rounding."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from effth import get_activation
from effth.numerics import _fastmath as fm
from effth.numerics.sample_tables import fast_pair_joint


def _grid():
    rng = np.random.default_rng(0)
    near1 = 1.0 - np.logspace(-16, 0, 400)
    half = 0.5 + np.linspace(-1e-12, 1e-12, 41)
    x = np.concatenate([np.linspace(-1.0, 1.0, 1001), rng.uniform(-1.0, 1.0, 1000), near1, -near1,
                        half, -half, np.logspace(-300, 0, 200), -np.logspace(-300, 0, 200),
                        [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, np.nextafter(0.5, 1.0), np.nextafter(0.5, 0.0)]])
    return x


@pytest.fixture(scope="module")
def exact():
    x = _grid()
    with mpmath.workdps(40):
        asin = np.array([float(mpmath.asin(mpmath.mpf(float(v)))) for v in x])
        acos = np.array([float(mpmath.acos(mpmath.mpf(float(v)))) for v in x])
        comp = np.array([float(mpmath.pi - mpmath.acos(mpmath.mpf(float(v)))) for v in x])
    return x, asin, acos, comp


def _ulps(v, e):
    return float(np.max(np.abs(v - e) / np.spacing(np.abs(e))))


def test_asin_acos_within_two_ulp(exact):
    x, asin, acos, comp = exact
    assert _ulps(fm.asin(x), asin) <= 2.0
    assert _ulps(fm.acos(x), acos) <= 2.0
    assert _ulps(fm.acos(x, complement=True), comp) <= 2.0
    assert np.array_equal(np.signbit(fm.asin(np.array([-0.0, 0.0]))), [True, False])


def test_a_wrong_coefficient_is_caught(exact, monkeypatch):
    x, asin, _, _ = exact
    monkeypatch.setattr(fm, "_P", (fm._P[0] * (1 + 1e-9),) + fm._P[1:])
    assert _ulps(fm.asin(x), asin) > 2.0


def test_keep_zero_gives_the_exact_end_angles():
    x = np.array([1.0 - 2.0 ** -52, -1.0 + 2.0 ** -52, 0.3])
    keep = np.array([0.0, 0.0, 1.0])
    th = fm.acos(x, keep)
    assert th[0] == 0.0 and th[1] == np.pi
    assert abs(th[2] - np.arccos(0.3)) <= 2 * np.spacing(th[2])


def test_scratch_pool_reuses_its_arrays():
    ws = fm.Scratch()
    a = ws.take((3, 4))
    ws.reset()
    b = ws.take((2, 5))
    assert np.shares_memory(a, b)
    x = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    ws.reset()
    assert np.array_equal(fm.asin(x, ws=ws), fm.asin(x))


@pytest.mark.parametrize("name", ["erf", "relu", "leaky_relu"])
def test_kernels_equal_the_libm_forms(name):
    """Williams' erf kernel and the arc-cosine kernels evaluated with np.arcsin / np.arctan2
    (written out here) against the fused pass: agreement to a few ulp of the table's scale
    (entrywise the arc-cosine forms lose digits to cancellation near rho = -1 in both)."""
    act = get_activation(name)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 5))
    X[3] = X[0]
    K = X @ X.T / 5 + 0.1
    d = np.diag(K)
    da, db = d[:, None], d[None, :]
    out = fast_pair_joint(act)(da, db, K)
    if name == "erf":
        u = 1.0 / np.sqrt(1.0 + 2.0 * d)
        t = np.clip(2.0 * K * np.outer(u, u), -1.0, 1.0)
        e00 = 2.0 / np.pi * np.arcsin(t)
        e11 = 4.0 / np.pi * np.outer(u, u) / np.sqrt(1.0 - t * t)
    else:
        ap, am = float(act.param("a_plus")), float(act.param("a_minus"))
        sab = np.sqrt(np.outer(d, d))
        rho = np.clip(K / sab, -1.0, 1.0)
        st = np.sqrt(np.clip((1.0 - rho) * (1.0 + rho), 0.0, None))
        st[st * st <= 8 * np.finfo(float).eps] = 0.0
        th = np.arctan2(st, rho)

        def m11(th, rho):
            return sab * (st + (np.pi - th) * rho) / (2 * np.pi)

        e00 = (ap * ap + am * am) * m11(th, rho) - 2 * ap * am * m11(np.pi - th, -rho)
        e11 = ((ap * ap + am * am) * (np.pi - th) + 2 * ap * am * th) / (2 * np.pi)
    for got, ref in ((out[0, 0], e00), (out[1, 1], e11)):
        off = ~np.eye(len(d), dtype=bool)                  # the diagonal is set from one-sample forms
        assert np.max(np.abs(got - ref)[off]) <= 1e-15 * np.max(np.abs(ref))
        assert np.array_equal(got, got.T)
