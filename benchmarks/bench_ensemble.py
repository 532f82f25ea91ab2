"""Benchmark of :func:`effth.simulation.simulate_ensemble`.

Performance bar: 10^4 networks of width 128 and depth 10 on 8 inputs in under 30 s with
``method="weights"`` on a 2-core machine.  Prints the wall time of both methods and their ratio.

Run ``python benchmarks/bench_ensemble.py`` and, to compare thread settings,
``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_ensemble.py`` and
``EFFTH_SIM_WORKERS=1 python benchmarks/bench_ensemble.py`` and
``python benchmarks/bench_ensemble.py --no-limit`` (BLAS threads not limited).
Wall time depends on machine load (printed); CPU time is printed too.
Options: ``--size``, ``--width``, ``--depth``, ``--inputs``, ``--act``, ``--repeat``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from effth.arch import MLP
from effth.simulation import simulate_ensemble


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--act", default="tanh")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-limit", action="store_true",
                    help="do not limit BLAS threads (replace effth._threads.blas_threads by a no-op)")
    args = ap.parse_args()
    if args.no_limit:
        import contextlib

        import effth.simulation.ensemble as ens

        ens.blas_threads = lambda n=None: contextlib.nullcontext()
    net = MLP(args.act, depth=args.depth, widths=args.width, c_w=1.0, c_b=0.0)
    X = np.random.default_rng(0).standard_normal((args.inputs, args.inputs))
    print(f"size={args.size} width={args.width} depth={args.depth} N_D={args.inputs} act={args.act} "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} "
          f"EFFTH_SIM_WORKERS={os.environ.get('EFFTH_SIM_WORKERS')} "
          f"blas_threads limit={'off' if args.no_limit else 'on'} load={os.getloadavg()[0]:.1f}")
    times = {}
    for method in ("weights", "conditional"):
        best, cpu = np.inf, np.inf
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            simulate_ensemble(net, X, networks=args.size, seed=1, method=method)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        times[method] = best
        print(f"{method:12s} wall {best:8.2f} s   cpu {cpu:8.2f} s")
    print(f"ratio weights/conditional: {times['weights'] / times['conditional']:.1f}")


if __name__ == "__main__":
    main()
