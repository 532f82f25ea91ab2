"""Benchmark of the DMFT solvers (issue 5).

Bar: deep linear DMFT, L = 5 hidden layers, P = 10 points, T = 100 grid points, converged to
1e-10 in under 10 s on one core.  The default solver (``method='march'``, exact forward recursion
in time) is timed against the older whole-window fixed-point sweeps (``method='sweep'``) in the same
process.  Run with ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_dmft.py``.
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the working tree's effth

from effth.dmft import solve_deep_linear


def _data():
    rng = np.random.default_rng(0)
    P, D = 10, 20
    X = rng.standard_normal((P, D))
    y = rng.standard_normal(P)
    y /= np.linalg.norm(y) / np.sqrt(P)
    return X, y


def deep_linear_bar(method: str = "march"):
    X, y = _data()
    t0 = time.perf_counter()
    res = solve_deep_linear(X, y, hidden_layers=5, gamma0=1.0, eta=0.02, steps=100, tol=1e-10,
                            method=method)
    dt = time.perf_counter() - t0
    d = res.diagnostics
    print(f"deep linear L=5 P=10 T=100 [{method}]: {dt:.2f} s, {d.iterations} sweeps, "
          f"final residual {d.residuals[-1]:.2e}, loss {res.loss[0]:.3f} -> {res.loss[-1]:.3e} "
          f"[bar: < 10 s] {'PASS' if dt < 10 and d.converged else 'FAIL'}")
    return dt, res


if __name__ == "__main__":
    t_march, r_march = deep_linear_bar("march")
    t_sweep, r_sweep = deep_linear_bar("sweep")
    diff = max(np.max(np.abs(r_march.phi - r_sweep.phi)), np.max(np.abs(r_march.g - r_sweep.g)),
               np.max(np.abs(r_march.f - r_sweep.f)))
    print(f"march / sweep time ratio: {t_march / t_sweep:.3f} (speed-up x{t_sweep / t_march:.1f}); "
          f"max |march - sweep| over Phi, G, f: {diff:.2e}")
