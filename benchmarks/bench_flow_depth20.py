"""Wall time of ``effth.flow`` (K, V, G1 at every layer) on 32 inputs at depth 20 for tanh, erf
and ReLU, each in a fresh process, with a cold and a warm derivation cache.

Bar: under 15 s per activation on two cores (unit-scale random inputs in 10 dimensions, C_W = 1
for tanh and erf, 2 for ReLU, C_b = 0, rtol 1e-8).  "cold": ``EFFTH_CACHE=0`` (the recursions
derived and compiled in the process, numba kernels from their on-disk cache); "warm": the
derivation cache on (a first run fills it).  The time printed is the whole call, derivation
included, and separately the flow alone (a second call in the same process).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_flow_depth20.py [--inputs 32] [--acts tanh erf relu]

Measured on a 2-core machine at load average 8-16 (other jobs; the wall times overstate): erf
cold 253 s wall / 43 s CPU, warm 96 s / 40 s, the flow alone 66-138 s / 37-39 s CPU; ReLU cold
171 s / 32 s, warm 79 s / 29 s, the flow alone 67-140 s / 27 s CPU; tanh not finished.  The bar
is to be checked on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import effth as et
act, N, L = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
X = np.random.default_rng(N).standard_normal((N, 10))
c_w = 2.0 if et.get_activation(act).family == "piecewise_linear" else 1.0
net = et.MLP(act, L, 128, c_w=c_w, c_b=0.0)
t1, c1 = time.perf_counter(), time.process_time()
fl = et.flow(net, X, rtol=1e-8, progress=False)
t2, c2 = time.perf_counter(), time.process_time()
et.flow(net, X, rtol=1e-8, progress=False)
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps(dict(import_s=t1 - t0, first_s=t2 - t1, again_s=t3 - t2, first_cpu=c2 - c1,
                      again_cpu=c3 - c2,
                      finite=bool(np.isfinite(fl.V).all()))))
"""

BAR_S = 15.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--acts", nargs="+", default=["tanh", "erf", "relu"])
    args = ap.parse_args()
    env = dict(os.environ, EFFTH_PROGRESS="0")
    for act in args.acts:
        for cache in ("cold", "warm"):
            e = dict(env, EFFTH_CACHE="0" if cache == "cold" else "1")
            if cache == "warm":          # fill the derivation cache first
                subprocess.run([sys.executable, "-c", _CHILD, act, "3", "2"], env=e,
                               capture_output=True)
            out = subprocess.run([sys.executable, "-c", _CHILD, act, str(args.inputs),
                                  str(args.depth)], env=e, capture_output=True, text=True)
            if out.returncode:
                print(act, cache, "failed:", out.stderr.strip().splitlines()[-1])
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{act:5s} {cache}: first flow {r['first_s']:6.1f} s (derivation included), "
                  f"again {r['again_s']:6.1f} s (CPU {r['first_cpu']:.1f} s, {r['again_cpu']:.1f} s), "
                  f"import {r['import_s']:.1f} s  "
                  f"[bar < {BAR_S:.0f} s: {'met' if r['first_s'] < BAR_S else 'NOT met'}]",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
