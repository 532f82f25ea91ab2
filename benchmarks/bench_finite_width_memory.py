"""Peak memory and time of the O(1/n) mean ``predict(..., widths=n)`` at P training + Q test inputs.

Each size runs in a fresh subprocess (so the peak resident set is that call's): tanh (or
``--act``), depth 3 (``--depth``), inputs on the sphere of radius sqrt(n0); prints the time, the
peak RSS (``resource``), the number of restricted flows (test inputs in chunks when the flow on
all inputs would exceed the budget, ``effth.pdlt.learning.prediction._FLOW_BUDGET``) and the
up-front estimate ``restricted_flow_bytes(P + chunk, L, P)`` of each flow.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_finite_width_memory.py --sizes 12+12,20+12,40+40
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, time
import numpy as np
import effth as et
import effth.pdlt.learning.prediction as pred
from effth.pdlt.ntk.ntk_flow import restricted_flow_bytes
P, Q, L = map(int, sys.argv[1:4])
act = sys.argv[4]
rng = np.random.default_rng(0)
X = rng.standard_normal((P + Q, 4))
X /= np.sqrt((X ** 2).mean(1, keepdims=True))
net = et.MLP(act, depth=L, c_w=1.0, c_b=0.0)
chunk = pred._test_chunk(P, Q, L)
t = time.perf_counter()
p = et.predict(net, X[:P], np.sin(X[:P, 0]), X[P:], widths=16, progress=False)
m = p.value("mean1")
print(json.dumps(dict(P=P, Q=Q, seconds=time.perf_counter() - t, flows=-(-Q // chunk), chunk=chunk,
                      peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      estimate_mb=restricted_flow_bytes(P + chunk, L, P) / 2 ** 20, finite=bool(np.isfinite(m).all()))))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="12+12,20+12")
    ap.add_argument("--act", default="tanh")
    ap.add_argument("--depth", default="3")
    args = ap.parse_args()
    for size in args.sizes.split(","):
        P, Q = size.split("+")
        out = subprocess.run([sys.executable, "-c", _CHILD, P, Q, args.depth, args.act], capture_output=True, text=True,
                             env=dict(os.environ, EFFTH_PROGRESS="0"))
        if out.returncode:
            print(size, "failed:", out.stderr.strip().splitlines()[-1])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['P']:3d} + {r['Q']:3d}: {r['seconds']:7.1f} s, peak RSS {r['peak_mb']:7.0f} MB, "
              f"{r['flows']} flow(s) of {r['P']} + {r['chunk']} inputs (estimate "
              f"{r['estimate_mb']:.0f} MB each)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
