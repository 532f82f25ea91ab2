"""effth._threads: thread counts from the environment, thread_map in item order."""

from __future__ import annotations

import pytest

from effth._threads import default_blas_threads, thread_map, worker_threads


def test_thread_map_keeps_order_and_raises(monkeypatch):
    monkeypatch.setenv("EFFTH_THREADS", "2")
    assert worker_threads() == 2
    assert thread_map(lambda x: x * x, range(7)) == [x * x for x in range(7)]
    assert thread_map(lambda x: -x, [3], threads=4) == [-3]

    def boom(x):
        if x == 2:
            raise ZeroDivisionError("item 2")
        return x

    with pytest.raises(ZeroDivisionError, match="item 2"):
        thread_map(boom, range(5))


@pytest.mark.parametrize("var, fn", [("EFFTH_THREADS", worker_threads),
                                     ("EFFTH_BLAS_THREADS", default_blas_threads)])
@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_bad_thread_counts(monkeypatch, var, fn, bad):
    monkeypatch.setenv(var, bad)
    with pytest.raises(ValueError, match=var):
        fn()


def test_nested_thread_map_does_not_deadlock(monkeypatch):
    monkeypatch.setenv("EFFTH_THREADS", "2")
    out = thread_map(lambda i: sum(thread_map(lambda j: i * j, range(4))), range(6))
    assert out == [6 * i for i in range(6)]


def test_simulator_workers_variable_takes_precedence(monkeypatch):
    from effth.errors import DomainError
    from effth.simulation.ensemble import _n_workers

    monkeypatch.setenv("EFFTH_THREADS", "1")
    monkeypatch.delenv("EFFTH_SIM_WORKERS", raising=False)
    assert _n_workers() == 1
    monkeypatch.setenv("EFFTH_SIM_WORKERS", "3")
    assert _n_workers() == 3
    monkeypatch.setenv("EFFTH_SIM_WORKERS", "x")
    with pytest.raises(DomainError, match="EFFTH_SIM_WORKERS"):
        _n_workers()
