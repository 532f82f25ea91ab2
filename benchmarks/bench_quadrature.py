"""Timing of batched quadrature for 1..4-slot tanh atoms (not collected by pytest).

Usage::

    python benchmarks/bench_quadrature.py [--batch 100] [--slots 1 2 3 4] [--rtol 1e-10 1e-8]
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_quadrature.py

For each (slots, rtol) it prints the tensor-product nodes per kernel, the time
for one batched call over ``batch`` kernels, the time of a naive Python loop of
per-kernel calls, and their ratio.  Kernels are a 11^T + diag(d) (eigenvalues ~[0.2, 2.2]).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from effth.activations import get_activation
from effth.numerics.quadrature import quadrature_expectation

FACTORS = {
    1: [(0, "sigma", 0), (0, "sigma", 0)],
    2: [(0, "sigma", 0), (1, "sigma", 0)],
    3: [(0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 1), (2, "z", 2)],
    4: [(0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 0), (3, "sigma", 0)],
}


def kernels(k: int, n: int, seed: int = 0) -> np.ndarray:
    """NN-like kernels a 11^T + diag(d): positive correlations, eigenvalues in ~[0.2, 2.2]."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.05, 0.3, size=(n, 1, 1))
    d = rng.uniform(0.2, 1.0, size=(n, k))
    return a * np.ones((k, k)) + d[:, :, None] * np.eye(k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--rtol", type=float, nargs="+", default=[1e-10, 1e-8])
    ap.add_argument("--loop-max", type=int, default=100, help="kernels timed in the naive loop")
    args = ap.parse_args()
    act = get_activation("tanh")
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, batch={args.batch}")
    print(f"{'slots':>5} {'rtol':>7} {'nodes/kernel':>13} {'batched s':>10} {'loop s':>9} {'loop/batch':>10}")
    for k in args.slots:
        K = kernels(k, args.batch, seed=k)
        for rtol in args.rtol:
            t0 = time.perf_counter()
            v, e, n = quadrature_expectation(FACTORS[k], K, act, rtol=rtol, return_info=True)
            tb = time.perf_counter() - t0
            m = min(args.loop_max, args.batch)
            t0 = time.perf_counter()
            loop = [float(quadrature_expectation(FACTORS[k], K[i], act, rtol=rtol)) for i in range(m)]
            tl = (time.perf_counter() - t0) * args.batch / m
            dev = np.max(np.abs(np.array(loop) - v[:m]) / np.maximum(np.abs(v[:m]), 1e-300))
            print(f"{k:>5} {rtol:>7.0e} {int(np.max(n)):>13d} {tb:>10.3f} {tl:>9.3f} {tl / tb:>10.2f}"
                  f"   (max rel diff batch/loop {dev:.1e})")


if __name__ == "__main__":
    main()
