"""Benchmark of :func:`effth.flow` (compiled K, V, G1 over all layers and inputs).

Bar: a depth-20 tanh network on 8 inputs gives K, V, G1 at every layer in under 2 s;
on 16 inputs in under 20 s.  Baseline in the same process: the naive evaluation, one quadrature
call per tensor entry per layer (``initialization_flow``, which evaluates each of the
symmetry-distinct components of the derived expression separately).  The naive run is timed on
``--naive-layers`` layer steps and extrapolated linearly to the full depth (its cost per step
does not depend on the layer beyond the kernel scale; the extrapolation is printed as such).
Accuracy: the two are compared entry by entry on the layers both computed.

Options: ``--inputs``, ``--depth``, ``--act``, ``--rtol``, ``--naive-layers`` (0 to skip).
Run ``python benchmarks/bench_flow.py`` (effth limits BLAS threads itself).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import effth as et
from effth.theories.pdlt import initialization_flow
from effth.theories.pdlt.kernel_flow import layer_steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--act", default="tanh")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--naive-layers", type=int, default=2)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    layer_steps()                      # derivation + compilation (once per process)
    t_compile = time.perf_counter() - t0
    print(f"derive + compile the three steps: {t_compile:.2f} s (once per process)")
    for N in args.inputs:
        X = rng.standard_normal((N, 10))
        net = et.MLP(args.act, args.depth, 128, c_w=1.0, c_b=0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        fl = et.flow(net, X, rtol=args.rtol)
        t_fast, c_fast = time.perf_counter() - t0, time.process_time() - c0
        print(f"\n{args.act}, depth {args.depth}, {N} inputs, rtol {args.rtol:g}")
        print(f"  effth.flow          : {t_fast:8.2f} s wall, {c_fast:.2f} s CPU  (K, V with {N**4} "
              f"entries, G1; all layers)"
              f"  max est. table error {fl.table_error.max():.1e}")
        if args.naive_layers:
            m = min(args.naive_layers, args.depth - 1)
            t0 = time.perf_counter()
            ref = initialization_flow(fl.K[0], m + 1, args.act, c_w=1.0, c_b=0.0, rtol=args.rtol)
            t_naive = (time.perf_counter() - t0) / m * (args.depth - 1)
            dev = max(float(np.max(np.abs(np.asarray(ref[k]) - getattr(fl, k)[:m + 1])
                                / max(np.max(np.abs(getattr(fl, k)[1:m + 1])), 1e-300)))
                      for k in ("K", "V", "G1") if np.any(getattr(fl, k)[1:m + 1]))
            print(f"  naive (per entry)   : {t_naive:8.1f} s  (timed on {m} layer steps, "
                  f"extrapolated to {args.depth - 1})")
            print(f"  ratio naive/flow    : {t_naive / t_fast:8.0f}x ;  max |flow - naive| / max|.|"
                  f" on those layers: {dev:.1e}")


if __name__ == "__main__":
    main()
