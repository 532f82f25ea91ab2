"""K, V, G1 of ``effth.flow`` on 32 inputs at depth 20 (tanh, erf, ReLU): this checkout against the
code as it was, interleaved in one process.

The baseline is the whole ``effth`` package at git revision ``--base`` (default ``main``),
extracted to a temporary directory and imported beside this checkout as ``effth_base`` (its
absolute imports renamed; its numba kernels compiled into that directory on first use).  Each
round runs one flow of each, best of ``--rounds``; prints the two times, their ratio, the load
average and the largest difference of K, V, G1 relative to each layer's largest entry and entry
by entry.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_flow_ab.py [--acts relu erf tanh]
        [--inputs 32] [--depth 20] [--rounds 3] [--threads 2]

Measured 2026-12-04 on the 2-core machine shared with other sessions, two threads, best of 2,
load 2.6-3.8: ReLU 6.9 / 11.7 s (0.59), erf 4.9 / 13.4 s (0.36), tanh 16.8 / 41.0 s (0.41); one
thread, load 4.4-5.2: 0.49, 0.30, 0.47.  K bitwise; V, G1 within 7.3e-15 and 1.3e-14 of each
layer's largest entry (erf; ReLU and tanh 4e-16 and 0).  See docs/performance.md ("Closed forms
where they exist").
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np


def base_package(rev: str, name: str = "effth_base"):
    """The ``effth`` package at git revision ``rev``, imported as ``name``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    data = subprocess.run(["git", "archive", rev, "effth"], capture_output=True, check=True,
                          cwd=root).stdout
    d = tempfile.mkdtemp(prefix="effth_ab_")
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(d)
    os.rename(os.path.join(d, "effth"), os.path.join(d, name))
    pat = re.compile(r"(from|import) effth(\.|\b)")
    for dirpath, _, files in os.walk(os.path.join(d, name)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    src = fh.read()
                src = pat.sub(lambda m: f"{m.group(1)} {name}{m.group(2)}", src)
                src = src.replace('"effth.', f'"{name}.').replace("'effth.", f"'{name}.")
                with open(path, "w") as fh:
                    fh.write(src)
    sys.path.insert(0, d)
    return importlib.import_module(name)


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
    eb = base_package(args.base)
    print(f"{worker_threads()} effth threads, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"baseline: effth at {args.base}; best of {args.rounds} interleaved rounds", flush=True)
    for act in args.acts:
        X = np.random.default_rng(args.inputs).standard_normal((args.inputs, 10))
        c_w = 2.0 if et.get_activation(act).family == "piecewise_linear" else 1.0
        nets = [pkg.MLP(act, args.depth, 128, c_w=c_w, c_b=0.0) for pkg in (et, eb)]
        for pkg in (et, eb):                               # derivations, compilation
            pkg.flow(pkg.MLP(act, 2, 128, c_w=c_w, c_b=0.0), X[:5], rtol=1e-8, progress=False)
        tn, tb, loads = [], [], []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            t = time.perf_counter()
            new = et.flow(nets[0], X, rtol=1e-8, progress=False)
            tn.append(time.perf_counter() - t)
            t = time.perf_counter()
            base = eb.flow(nets[1], X, rtol=1e-8, progress=False)
            tb.append(time.perf_counter() - t)
        devs = {k: _dev(getattr(new, k), getattr(base, k)) for k in ("K", "V", "G1")}
        dv = ", ".join(f"{k} {a:.1e}/{b:.1e}" for k, (a, b) in devs.items())
        print(f"{act:4s} N={args.inputs} L={args.depth}: now {min(tn):6.2f} s, before {min(tb):6.2f} s, "
              f"ratio {min(tn) / min(tb):.2f}; load {min(loads):.1f}-{max(loads):.1f}; "
              f"difference (of the layer's max / per entry) {dv}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
