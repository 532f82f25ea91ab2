"""Benchmark of the empirical NTK hierarchy simulator (:mod:`effth.simulation.ntk`).

Default case: 10^3 networks of width 128, depth 4, 4 inputs, 3 output neurons, NTK + dNTK
(``order=2``) through :func:`simulate_ntk_ensemble` (and, with ``--order 3``, the ddNTKs too).

Run ``python benchmarks/bench_ntk.py``: it re-runs itself in child processes, one after the
other, with

* ``OPENBLAS_NUM_THREADS=1``;
* the default environment (effth limits BLAS threads to ``$EFFTH_BLAS_THREADS``, default 1,
  inside the simulator);
* the default environment with ``--no-limit`` (BLAS threads not limited by effth),

and prints wall and CPU time of each.  ``--single`` runs one configuration in this process.
Options: ``--size``, ``--width``, ``--depth``, ``--inputs``, ``--outputs``, ``--order``, ``--act``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def run_single(args) -> None:
    import numpy as np

    from effth.arch import MLP
    from effth.simulation import ntk as ntk_mod

    if args.no_limit:
        import contextlib

        ntk_mod.blas_threads = lambda n=None: contextlib.nullcontext()
    net = MLP(args.act, depth=args.depth, widths=args.width, c_w=1.0, c_b=0.0, n_out=args.outputs)
    X = np.random.default_rng(0).standard_normal((args.inputs, args.inputs))
    t0, c0 = time.perf_counter(), time.process_time()
    st = ntk_mod.simulate_ntk_ensemble(net, X, networks=args.size, seed=0, order=args.order,
                                       outputs=range(args.outputs))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"  OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} "
          f"effth-limit={'off' if args.no_limit else 'on'}: wall {wall:.2f} s, cpu {cpu:.2f} s "
          f"({1e3 * wall / args.size:.2f} ms/network); H[0,0] = {st.H[0, 0]:.4f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--inputs", type=int, default=4)
    ap.add_argument("--outputs", type=int, default=3)
    ap.add_argument("--order", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--act", default="tanh")
    ap.add_argument("--no-limit", action="store_true")
    ap.add_argument("--single", action="store_true", help="run one configuration here")
    args = ap.parse_args()
    if args.single:
        run_single(args)
        return
    print(f"size={args.size} width={args.width} depth={args.depth} N_D={args.inputs} "
          f"outputs={args.outputs} order={args.order} act={args.act} "
          f"cores={os.cpu_count()} load={os.getloadavg()[0]:.1f}", flush=True)
    base = [sys.executable, os.path.abspath(__file__), "--single", "--size", str(args.size),
            "--width", str(args.width), "--depth", str(args.depth), "--inputs", str(args.inputs),
            "--outputs", str(args.outputs), "--order", str(args.order), "--act", args.act]
    env1 = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env0 = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    for env, extra in ((env1, []), (env0, []), (env0, ["--no-limit"])):
        subprocess.run(base + extra, env=env, check=True)


if __name__ == "__main__":
    main()
