"""Benchmark of the random-data deep linear DMFT (Bordelon & Pehlevan, "Deep Linear Network
Training Dynamics from Random Initialization").

Bars: one ``(alpha, nu)`` point at ``L = 4`` hidden layers, ``T = 100`` in well under a second;
a 20 eta x 5 nu learning-rate sweep (``T = 100``) in under a minute.  Ratios are printed against a
baseline run in the same process: the infinite-width, single-point ``solve_deep_linear`` (the
``alpha = nu = inf`` special case) at the same depth and grid.  Run with
``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_random_data.py``.
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
from _timing import best

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the working tree's effth

from effth.dmft import (learning_rate_sweep, solve_deep_linear, solve_power_law,
                                 solve_random_data)


def main() -> int:
    ok = True
    base = best(lambda: solve_deep_linear(kernel=np.array([[1.0]]), y=np.array([1.0]),
                                             hidden_layers=4, gamma0=1.0, eta=0.05, steps=100))
    print(f"baseline solve_deep_linear (alpha = nu = inf), L=4, T=100: {base:.3f} s")
    one = best(lambda: solve_random_data(hidden_layers=4, alpha=2.0, nu=1.0, gamma0=1.0,
                                            eta=0.05, steps=100))
    ok &= one < 1.0
    print(f"solve_random_data alpha=2 nu=1, L=4, T=100: {one:.3f} s  (ratio {one / base:.2f} x "
          f"baseline) [bar: < 1 s] {'PASS' if one < 1.0 else 'FAIL'}")
    res = best(lambda: solve_random_data(hidden_layers=4, branch_scale0=1.0, alpha=2.0, nu=1.0,
                                            gamma0=1.0, eta=0.05, steps=100), repeat=1)
    print(f"  residual network, same point: {res:.3f} s  (ratio {res / base:.2f} x baseline)")
    etas = np.geomspace(0.01, 0.5, 20)
    t0 = time.perf_counter()
    sweep = learning_rate_sweep(etas, [0.5, 1.0, 2.0, 4.0, 16.0], hidden_layers=4, gamma0=1.0,
                                steps=100, alpha=2.0, sigma=0.3, progress=False)
    sw = time.perf_counter() - t0
    ok &= sw < 60.0
    print(f"learning-rate sweep 20 eta x 5 nu, L=4, T=100: {sw:.2f} s  (ratio {sw / base:.1f} x "
          f"baseline) [bar: < 60 s] {'PASS' if sw < 60 else 'FAIL'}; optimal eta "
          f"{np.round(sweep.optimal_eta, 4).tolist()}")
    t0 = time.perf_counter()
    solve_power_law(hidden_layers=1, capacity=1.5, source=0.5, gamma0=1.0, eta=0.2, steps=600,
                    modes=4000)
    pl = time.perf_counter() - t0
    print(f"power-law DMFT L=1, M=4000 modes, T=600: {pl:.2f} s  (ratio {pl / base:.1f} x baseline)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
