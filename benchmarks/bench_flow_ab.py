"""K, V, G1 of ``effth.flow`` on 32 inputs at depth 20 (tanh, erf, ReLU): this checkout against the
code as it was, interleaved in one process.

The baseline is this checkout with the compiled kernels of the four-point tables swapped back
for their previous versions: the orthant integrals of erf and ReLU
(``effth/numerics/_closed/_orthant_kernel.py`` read from git revision ``--base``, default
``main``, and loaded as a temporary module) and, for tanh, the NumPy path of the four-distinct
grid (:func:`effth.numerics.sample_tables._fused_four` switched off).  Each round runs one flow
of each, best of ``--rounds``; prints the two times, their ratio, the load average and the
largest difference of K, V, G1 relative to each layer's largest entry and entry by entry.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_flow_ab.py [--acts relu erf tanh]
        [--inputs 32] [--depth 20] [--rounds 3] [--threads 2]

Measured 2026-12-04 on the 2-core machine shared with other sessions (load 7.6-10.4), two
threads, best of 2: ReLU 18.0 / 31.4 s (0.57), erf 17.8 / 32.0 s (0.56), tanh 30.6 / 75.3 s
(0.41); one thread (load 9-10): 0.53, 0.51, 0.44.  K bitwise; V, G1 within 7.3e-15 and
1.3e-14 of each layer's largest entry (erf; ReLU and tanh 4e-16 and 0).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import tempfile
import time
from contextlib import contextmanager

import numpy as np


def _old_module(rev: str, path: str, name: str):
    src = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout
    d = tempfile.mkdtemp(prefix="effth_ab_")
    f = os.path.join(d, name + ".py")
    with open(f, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(name, f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@contextmanager
def _baseline(old_kernel):
    from effth.numerics import sample_tables as st
    from effth.numerics._closed import _orthant as o
    keep_c, keep_f = o._compiled_orthant4, st._fused_four

    def compiled():
        def integrals(R, mu, rule):
            out, out2 = np.empty(len(R)), np.empty(len(R))
            old_kernel.orthant4_rule(np.ascontiguousarray(R), np.ascontiguousarray(mu), *rule,
                                     old_kernel._PAIRINGS, out, out2)
            return out, out2
        return integrals
    o._compiled_orthant4 = compiled
    st._fused_four = lambda *a, **k: None
    try:
        yield
    finally:
        o._compiled_orthant4, st._fused_four = keep_c, keep_f


def _dev(a, b):
    """(max |a-b| / max|b| per layer, max |a-b| / max(|b|, 1e-3 max|b|) per entry: the measure of
    effth's own table errors, ``kernel_flow._relative``)."""
    lay, ent = 0.0, 0.0
    for x, y in zip(a, b):
        m = float(np.max(np.abs(y)))
        if m == 0:
            continue
        d = np.abs(x - y)
        lay = max(lay, float(d.max()) / m)
        ent = max(ent, float(np.max(d / np.maximum(np.abs(y), 1e-3 * m))))
    return lay, ent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--acts", nargs="+", default=["relu", "erf", "tanh"])
    ap.add_argument("--inputs", type=int, default=32)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="EFFTH_THREADS (default: effth's)")
    ap.add_argument("--base", default="main")
    args = ap.parse_args()
    if args.threads:
        os.environ["EFFTH_THREADS"] = str(args.threads)
    import effth as et
    from effth._threads import worker_threads
    old = _old_module(args.base, "effth/numerics/_closed/_orthant_kernel.py", "_orthant_kernel_base")
    print(f"{worker_threads()} effth threads, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"baseline kernels from {args.base}; best of {args.rounds} interleaved rounds", flush=True)
    for act in args.acts:
        X = np.random.default_rng(args.inputs).standard_normal((args.inputs, 10))
        c_w = 2.0 if et.get_activation(act).family == "piecewise_linear" else 1.0
        net = et.MLP(act, args.depth, 128, c_w=c_w, c_b=0.0)
        small = et.MLP(act, 2, 128, c_w=c_w, c_b=0.0)
        et.flow(small, X[:5], rtol=1e-8, progress=False)             # derivations, compilation
        with _baseline(old):
            et.flow(small, X[:5], rtol=1e-8, progress=False)
        tn, tb, loads = [], [], []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            t = time.perf_counter()
            new = et.flow(net, X, rtol=1e-8, progress=False)
            tn.append(time.perf_counter() - t)
            with _baseline(old):
                t = time.perf_counter()
                base = et.flow(net, X, rtol=1e-8, progress=False)
                tb.append(time.perf_counter() - t)
        devs = {k: _dev(getattr(new, k), getattr(base, k)) for k in ("K", "V", "G1")}
        dv = ", ".join(f"{k} {a:.1e}/{b:.1e}" for k, (a, b) in devs.items())
        print(f"{act:4s} N={args.inputs} L={args.depth}: now {min(tn):6.2f} s, before {min(tb):6.2f} s, "
              f"ratio {min(tn) / min(tb):.2f}; load {min(loads):.1f}-{max(loads):.1f}; "
              f"difference (of the layer's max / per entry) {dv}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
