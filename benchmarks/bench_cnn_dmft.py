"""Benchmark: cost of the CNN DMFT (effth.dmft.solve_cnn_monte_carlo) against T, P and |S|.

The solver is dense over the index (time, image, pixel), of size m = T P |S|: per sweep and layer
it takes square roots of two (m x m) source covariances (eigh, O(m^3)), a causal Stein
factorization (O(m^3)), the forward substitution of S fields (O(S m^2)) and the patch operators
(O(q m^2)).  This script times one sweep of one replica at a grid of sizes and fits the exponent
of the time in m; it then times the issue's reference problem when it fits (P = 10 digits,
8x8 pixels, 3x3 filters, depth 3, T = 50: m = 32000, about 8 GB per kernel -- it does not, and
the script says so instead of running it).  Not collected by pytest.

Usage: ``python benchmarks/bench_cnn_dmft.py [--samples 1000] [--big]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def one(T, P, side, samples, dims=2):
    import effth as et
    from effth.dmft import solve_cnn_monte_carlo

    d = et.data.load_digits(P)
    X = d.images[:, :side, :side] if dims == 2 else d.images[:, 3, :side]
    X = X - X.mean(axis=tuple(range(1, X.ndim)), keepdims=True)
    X = X / np.sqrt(np.mean(X ** 2, axis=tuple(range(1, X.ndim)), keepdims=True))
    net = et.CNN("relu", depth=3, filter_size=3, dims=dims, padding="circular", c_w=2.0,
                 parameterization="mup", gamma0=1.0)
    Th = et.cnn_kernels(net, X).value("Theta")
    eta = 1.0 / np.linalg.eigvalsh(Th)[-1]
    t = time.perf_counter()
    r = solve_cnn_monte_carlo(net, X, d.y, eta=eta, steps=T, samples=samples, iterations=1,
                              replicas=1, seed=0)
    return time.perf_counter() - t, r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--big", action="store_true", help="also m = 2560 (8x8 pixels; minutes)")
    args = ap.parse_args()
    rows = []
    sizes = [(5, 2, 4), (10, 2, 4), (10, 4, 4), (20, 4, 4), (10, 4, 6), (10, 6, 6)]
    for T, P, side in sizes + ([(10, 4, 8)] if args.big else []):
        m = T * P * side * side
        sec, _ = one(T, P, side, args.samples)
        rows.append((m, sec))
        print(f"T={T:3d} P={P:2d} |S|={side}x{side}: m = T P |S| = {m:5d}, one sweep "
              f"({args.samples} draws, depth 3): {sec:7.2f} s")
    m, s = np.array(rows, dtype=float).T
    big = m >= 600
    p = np.polyfit(np.log(m[big]), np.log(s[big]), 1)
    print(f"time per sweep ~ m^{p[0]:.2f} for m >= 600")
    m_ref = 50 * 10 * 64
    est = np.exp(np.polyval(p, np.log(m_ref)))
    print(f"reference problem (P=10, 8x8, T=50): m = {m_ref}, {8 * m_ref ** 2 / 1e9:.1f} GB per "
          f"dense kernel, extrapolated {est / 3600:.1f} h per sweep: not run (the dense solver "
          "does not reach it; translation structure is not exploited)")


if __name__ == "__main__":
    main()
