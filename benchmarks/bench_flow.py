"""Benchmark of :func:`effth.flow` (compiled K, V, G1 over all layers and inputs).

Bar: a depth-20 tanh network (unit-scale random inputs in 10 dimensions, C_W = 1, C_b = 0,
rtol 1e-8) gives K, V, G1 at every layer on 32 inputs in under 30 s, with peak memory within
2x the V tensor of all layers; the cost of the four-point table grows like N^4 (every multiset of
four inputs). Baselines in the same process:

* the naive evaluation, one quadrature call per tensor entry per layer (``initialization_flow``,
  which evaluates each of the symmetry-distinct components of the derived expression
  separately), for N <= ``--naive-max``: timed on ``--naive-layers`` layer steps and extrapolated
  linearly to the full depth (its cost per step does not depend on the layer beyond the kernel
  scale; the extrapolation is printed as such);
* ``effth.flow`` on one thread (``EFFTH_THREADS=1``), the baseline of the threaded chunks (the
  tables do not depend on the thread count: checked here).

Accuracy: the naive and compiled flows are compared entry by entry on the layers both computed.
``--memory`` also reports the peak of ``tracemalloc`` (a separate, untimed run: tracing slows
NumPy's allocations) against the size of V.

Options: ``--inputs``, ``--depth``, ``--act`` (several: compared at each N), ``--c-w``, ``--rtol``, ``--naive-layers`` (0 to skip),
``--naive-max``, ``--memory``. Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_flow.py``
(effth limits BLAS threads itself).
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np

import effth as et
from effth._threads import worker_threads
from effth.pdlt import initialization_flow
from effth.pdlt.initialization.kernel_flow import layer_steps

BAR_N, BAR_S = 32, 30.0


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def _serial(fn):
    old = os.environ.get("EFFTH_THREADS")
    os.environ["EFFTH_THREADS"] = "1"
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop("EFFTH_THREADS", None)
        else:
            os.environ["EFFTH_THREADS"] = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, nargs="+", default=[8, 16, 24, 32])
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--act", nargs="+", default=["tanh"])
    ap.add_argument("--c-w", type=float, default=None,
                    help="C_W (default: 2 for the arc-cosine family, the critical value; else 1)")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--naive-layers", type=int, default=2)
    ap.add_argument("--naive-max", type=int, default=16)
    ap.add_argument("--memory", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    layer_steps()                      # derivation + compilation (once per process)
    t_compile = time.perf_counter() - t0
    print(f"derive + compile the three steps: {t_compile:.2f} s (once per process); "
          f"{worker_threads()} threads; bar: {BAR_N} inputs at depth 20 in < {BAR_S:.0f} s, "
          "peak memory < 2x V")
    for act, N in [(a, n) for n in args.inputs for a in args.act]:
        X = np.random.default_rng(N).standard_normal((N, 10))
        c_w = args.c_w if args.c_w is not None else (
            2.0 if et.get_activation(act).family == "piecewise_linear" else 1.0)
        net = et.MLP(act, args.depth, 128, c_w=c_w, c_b=0.0)
        et.flow(et.MLP(act, 2, 128, c_w=c_w), X[:3], rtol=args.rtol)          # warm-up
        t_fast, c_fast, fl = _timed(lambda net=net, X=X: et.flow(net, X, rtol=args.rtol))
        t_one, _, fl1 = _timed(lambda net=net, X=X: _serial(lambda: et.flow(net, X, rtol=args.rtol)))
        same = all(np.array_equal(getattr(fl, k), getattr(fl1, k)) for k in ("K", "V", "G1"))
        print(f"\n{act} (C_W = {c_w:g}), depth {args.depth}, {N} inputs, rtol {args.rtol:g}")
        print(f"  effth.flow          : {t_fast:8.2f} s wall, {c_fast:.2f} s CPU  (K, V with {N**4} "
              f"entries, G1; all layers)  max est. table error {fl.table_error.max():.1e}"
              + (f"  [bar: < {BAR_S:.0f} s: {'met' if t_fast < BAR_S else 'NOT met'}]" if N == BAR_N else ""))
        print(f"  on one thread       : {t_one:8.2f} s  ratio one thread / threaded {t_one / t_fast:5.2f}x;"
              f" tables identical: {same}")
        if args.memory:
            tracemalloc.start()
            et.flow(net, X, rtol=args.rtol)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            print(f"  peak traced memory  : {peak / 2**20:8.1f} MiB = {peak / fl.V.nbytes:.2f} x V "
                  f"({fl.V.nbytes / 2**20:.1f} MiB, all layers)")
        if args.naive_layers and N <= args.naive_max:
            m = min(args.naive_layers, args.depth - 1)
            t0 = time.perf_counter()
            ref = initialization_flow(fl.K[0], m + 1, act, c_w=c_w, c_b=0.0, rtol=args.rtol)
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
