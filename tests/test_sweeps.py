"""Sweeps through Dask: identical to the serial loop for the same seed, whatever the scheduler."""

from __future__ import annotations

import numpy as np
import pytest

import effth
from effth.errors import DomainError
from effth.sweeps import have_dask, sweep


def _ensemble(width, c_w, seed):
    net = effth.MLP(depth=3, activation="tanh", widths=width, c_w=c_w)
    return effth.simulate_ensemble(net, np.eye(2), networks=300, seed=seed)


def _draw(width, seed):
    return np.random.default_rng(seed).standard_normal(width).sum()


def test_serial_sweep_and_seeds():
    s = sweep(_ensemble, {"width": [8, 16], "c_w": [1.0, 2.0]}, seed=3, scheduler="serial")
    assert s.points == [{"width": 8, "c_w": 1.0}, {"width": 8, "c_w": 2.0},
                        {"width": 16, "c_w": 1.0}, {"width": 16, "c_w": 2.0}]
    assert s.value("V", layer=3).shape == (4, 2, 2, 2, 2)
    # each point's seed is the spawned child: the same call alone reproduces it
    alone = _ensemble(16, 2.0, np.random.SeedSequence(3).spawn(4)[3])
    np.testing.assert_array_equal(alone.value("V", layer=3), s.where(width=16, c_w=2.0)[0].value("V", layer=3))
    # different points get different seeds (not one stream reused)
    assert s.results[0].value("G", layer=3)[0, 0] != s.results[1].value("G", layer=3)[0, 0] / 2


@pytest.mark.skipif(not have_dask(), reason="Dask not installed (pip install 'effth[parallel]')")
@pytest.mark.parametrize("scheduler", ["threads", "processes", "synchronous"])
def test_dask_sweep_equals_serial(scheduler):
    grid = {"width": [8, 16, 32]}
    serial = sweep(_ensemble, [dict(g, c_w=1.0) for g in ({"width": w} for w in grid["width"])],
                   seed=11, scheduler="serial")
    par = sweep(_ensemble, [dict(width=w, c_w=1.0) for w in grid["width"]], seed=11,
                scheduler=scheduler, workers=2)
    assert par.scheduler == scheduler
    np.testing.assert_array_equal(serial.value("V", layer=3), par.value("V", layer=3))
    np.testing.assert_array_equal(serial.value("G", layer=3), par.value("G", layer=3))


def test_distributed_client():
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client:
        par = sweep(_draw, {"width": [5, 50, 500]}, seed=2, client=client)
    serial = sweep(_draw, {"width": [5, 50, 500]}, seed=2, scheduler="serial")
    assert par.results == serial.results and par.scheduler == "client"


def test_bad_grids():
    for bad in ({}, {"width": []}, {"width": 3}, [], [1, 2], "width", {1: [2]}):
        with pytest.raises(DomainError):
            sweep(_draw, bad)
    with pytest.raises(DomainError, match="scheduler"):
        sweep(_draw, {"width": [1]}, scheduler="mpi")
    with pytest.raises(DomainError, match="workers"):
        sweep(_draw, {"width": [1]}, workers=0)
    s = sweep(_draw, {"width": [3]}, seed=0, scheduler="serial")
    with pytest.raises(DomainError, match="value"):
        s.value("mean")
