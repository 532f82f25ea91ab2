"""Shared pytest configuration: deterministic hypothesis profile and common fixtures."""

from __future__ import annotations

import os

import numpy as np
import pytest

# Long runs draw progress bars only when asked in tests (see effth._progress).
os.environ.setdefault("EFFTH_PROGRESS", "0")
# Every test run derives the recursions afresh (effth._cache would otherwise read them from disk).
os.environ.setdefault("EFFTH_CACHE", "0")

try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "effth",
        derandomize=True,
        deadline=None,
        max_examples=40,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "effth"))
except ImportError:  # pragma: no cover
    pass


@pytest.fixture
def rng() -> np.random.Generator:
    """A freshly seeded generator (seed 20261121) for each test."""
    return np.random.default_rng(20261121)


def random_psd(rng: np.random.Generator, k: int, lo: float = 0.2, hi: float = 2.0) -> np.ndarray:
    """A random k x k covariance with eigenvalues in [lo, hi] (well conditioned)."""
    q, _ = np.linalg.qr(rng.standard_normal((k, k)))
    lam = rng.uniform(lo, hi, size=k)
    out = (q * lam) @ q.T
    return 0.5 * (out + out.T)


def skip_unless_slow(request) -> None:
    """Skip unless selected with ``-m slow`` or ``EFFTH_SLOW=1`` (any fixture scope)."""
    markexpr = request.config.getoption("markexpr", default="") or ""
    if not (("slow" in markexpr and "not slow" not in markexpr) or os.environ.get("EFFTH_SLOW") == "1"):
        pytest.skip("takes minutes; run with -m slow or EFFTH_SLOW=1")


@pytest.fixture
def opt_in_slow(request) -> None:
    """Skip unless selected with ``-m slow`` or ``EFFTH_SLOW=1``: for tests that take minutes each
    (they stay out of the default run, which CI keeps under 15 minutes)."""
    skip_unless_slow(request)
