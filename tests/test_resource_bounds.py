"""The memory and work bounds of effth._validate: estimates refused before allocating.

Each refusal must come back at once, with the estimate and the knob to turn, and without
allocating (the peak traced allocation stays far below the size refused).
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

import effth as et
from effth import DomainError
from effth._validate import check_memory, check_work, format_bytes, memory_limit, seed, tolerance

X = np.random.default_rng(0).standard_normal((3, 4))
Y = np.array([1.0, -1.0, 0.5])


def test_format_bytes_binary_units():
    assert format_bytes(8 * 10**12) == "7.28 TiB"        # 8e12 / 2**40
    assert format_bytes(3 * 2**30) == "3 GiB"
    assert format_bytes(512) == "512 B"


def test_memory_bound_from_the_environment(monkeypatch):
    monkeypatch.setenv("EFFTH_MAX_BYTES", "1e6")
    assert memory_limit() == 1e6
    assert check_memory(1e6, "x", "y") == 1e6
    with pytest.raises(DomainError, match=r"needs 1.91 MiB for the thing, above the memory bound "
                                          r"of 977 KiB.*; lower it"):
        check_memory(2e6, "the thing", "lower it")
    monkeypatch.setenv("EFFTH_MAX_BYTES", "lots")
    with pytest.raises(DomainError, match="EFFTH_MAX_BYTES"):
        memory_limit()


def test_work_bound_from_the_environment(monkeypatch):
    monkeypatch.setenv("EFFTH_MAX_SECONDS", "10")
    assert check_work(10, "x", "y") == 10
    with pytest.raises(DomainError, match=r"at least 1.5 min \(estimate\).*10 s"):
        check_work(90, "x", "lower y")


def test_a_lowered_bound_refuses_a_run_that_fits_otherwise(monkeypatch):
    """The bound is the one knob: a 20-step deep-linear DMFT runs, and is refused at 1 MB."""
    kw = dict(depth=3, gamma0=0.5, eta=0.1, steps=20)
    et.dmft.solve_deep_linear(X, Y, **kw)
    monkeypatch.setenv("EFFTH_MAX_BYTES", "1e5")
    with pytest.raises(DomainError, match="lower steps"):
        et.dmft.solve_deep_linear(X, Y, **kw)


@pytest.mark.parametrize("call", [
    lambda: et.train_ensemble(et.MLP("linear", depth=3, widths=10**6), X, Y, eta=0.1, updates=2,
                              networks=4, seed=0),
    lambda: et.simulate_training(X, Y, depth=2, widths=16, gamma0=0.5, eta=0.1, steps=10**6,
                                 record_kernels=True, seed=0),
    lambda: et.dmft.solve_deep_linear(X, Y, depth=3, gamma0=0.5, eta=0.1, steps=10**5),
    lambda: et.dmft.solve_random_data(depth=2, gamma0=0.5, eta=0.1, steps=10**6),
    lambda: et.MLP("tanh", depth=10**9, widths=8),
    lambda: et.simulate_ensemble(et.MLP("tanh", depth=3, widths=8), X, networks=10**10, seed=0),
    lambda: et.gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], [[1.0, 0.3], [0.3, 0.8]],
                                    "tanh", method="mc", n_samples=10**11),
], ids=["train_ensemble", "simulate_training", "solve_deep_linear", "solve_random_data", "MLP",
        "simulate_ensemble", "gaussian_expectation"])
def test_refused_at_once_without_allocating(call):
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(DomainError, match=r"needs [\d.]+ [GTP]iB for|would run for at least"):
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 5.0
    assert peak < 50 * 2**20, f"allocated {peak / 2**20:.0f} MiB before refusing"


def test_seed_rule_accepts_every_documented_kind():
    ss = np.random.SeedSequence(3)
    g = np.random.default_rng(3)
    assert seed(None) is None and seed(ss) is ss and seed(g) is g
    assert seed(np.int64(4)) == 4 and seed([1, np.uint8(2)]) == (1, 2)
    for bad in ("3", 3.0, -1, True, [1, -1], [1.5], [], {"a": 1}):
        with pytest.raises(DomainError, match="seed="):
            seed(bad)


def test_tolerance_rule():
    assert tolerance(1e-10) == 1e-10
    for bad in (0, 1, -1e-3, float("nan"), float("inf"), "1e-3", 1e-3j, True):
        with pytest.raises(DomainError, match="rtol"):
            tolerance(bad)
