"""Infinite-width K and Theta against neural-tangents (optional: never an effth dependency).

Times ``effth.output_kernels`` (K^(L), Theta^(L), PDLT (4.118), (9.5)) and neural-tangents'
``kernel_fn(X, X, ("nngp", "ntk"))`` for the same MLP on the same N x N inputs, float64, and
prints the ratio effth / neural-tangents and the largest relative disagreement. Both run in this
process, interleaved (one call of each per round), best of ``--repeat`` rounds; effth is also
timed with ``EFFTH_THREADS=1`` (the baseline of any threaded part of its path).

neural-tangents 0.6.5 imports only with jax/jaxlib 0.4.30, installed without dependencies plus
frozendict, opt_einsum, ml_dtypes and absl-py; its ``neural_tangents.experimental`` module pulls
TensorFlow and is replaced by an empty module before import (done below)::

    python -m venv ntenv && ntenv/bin/pip install "jax==0.4.30" "jaxlib==0.4.30"
    ntenv/bin/pip install --no-deps "neural-tangents==0.6.5" frozendict opt_einsum ml_dtypes absl-py
    ntenv/bin/pip install -e .        # effth
    OPENBLAS_NUM_THREADS=1 ntenv/bin/python benchmarks/bench_vs_neural_tangents.py

Parameterization: NT's ``Dense(W_std, b_std, parameterization="ntk")`` is the book's with
``C_W = W_std**2``, ``C_b = b_std**2`` and learning rates ``lambda_W = C_W``, ``lambda_b = C_b``.
Without neural-tangents the script says so and exits 0.

Measured on the 2-core development machine (1 BLAS thread, otherwise idle, interleaved, best of
5), depth 8 / 20: erf 0.83x / 0.64x on two worker threads, 0.87x / 0.83x with
``EFFTH_THREADS=1`` (neural-tangents 0.081 / 0.222 s); ReLU 0.65x / 0.30x, and 0.84x / 0.39x on one
thread (0.127 / 0.708 s); runs ten minutes apart differ by about 10 %.
neural-tangents' jit compile takes 0.46-3.1 s on top; effth's first call reads its derivations
from the disk cache. K agrees to 1e-15. For ReLU, neural-tangents' Theta differs from effth's by
up to 2e-8 relative, on the diagonal: against a 40-digit mpmath iteration of the arc-cosine
recursions, effth's diagonal is off by 4e-16 and neural-tangents' by 1.8e-8 (its arc-cosine
derivative near cos = 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np

import effth as et
from effth._threads import worker_threads

threads = os.environ.get("EFFTH_THREADS")


def _restore(value):
    if value is None:
        os.environ.pop("EFFTH_THREADS", None)
    else:
        os.environ["EFFTH_THREADS"] = value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of inputs N [1000]")
    ap.add_argument("--depths", default="8,20")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    try:
        sys.modules.setdefault("neural_tangents.experimental", types.ModuleType("neural_tangents.experimental"))
        import jax
        jax.config.update("jax_enable_x64", True)
        from neural_tangents import stax
    except Exception as exc:  # noqa: BLE001
        print(f"neural-tangents not available ({type(exc).__name__}: {exc}); nothing to compare")
        return 0
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 16))
    c_b = 0.1
    print(f"N = {args.n} inputs in n0 = 16, float64, 1 BLAS thread recommended")
    for act, c_w, layer in (("erf", 1.0, stax.Erf), ("relu", 2.0, stax.Relu)):
        for L in map(int, args.depths.split(",")):
            ws, bs = c_w ** 0.5, c_b ** 0.5
            blocks = []
            for _ in range(L - 1):
                blocks += [stax.Dense(512, W_std=ws, b_std=bs), layer()]
            _, _, kernel_fn = stax.serial(*blocks, stax.Dense(1, W_std=ws, b_std=bs))
            kernel_fn = jax.jit(kernel_fn, static_argnames="get")
            Xj = jax.numpy.asarray(X)

            def nt():
                k = kernel_fn(Xj, Xj, get=("nngp", "ntk"))
                return np.asarray(k.nngp), np.asarray(k.ntk)

            t0 = time.perf_counter()
            nt()                               # compile
            t_compile = time.perf_counter() - t0
            net = et.MLP(act, depth=L, c_w=c_w, c_b=c_b)
            t0 = time.perf_counter()
            et.output_kernels(net, X[:3], lambda_b=c_b, lambda_w=c_w)    # first call: derivation
            t_first = time.perf_counter() - t0
            def ours():
                return et.output_kernels(net, X, lambda_b=c_b, lambda_w=c_w)

            def serial():
                os.environ["EFFTH_THREADS"] = "1"
                try:
                    return ours()
                finally:
                    _restore(threads)

            # interleaved: one call of each per round, best of the rounds
            times = {"nt": [], "effth": [], "serial": []}
            for _ in range(args.repeat):
                for key, fn in (("nt", nt), ("effth", ours), ("serial", serial)):
                    t0 = time.perf_counter()
                    res = fn()
                    times[key].append(time.perf_counter() - t0)
                    if key == "nt":
                        Kn, Tn = res
                    elif key == "effth":
                        Ke, Te = res
            t_nt, t_e, t_s = (min(times[k]) for k in ("nt", "effth", "serial"))
            err = max(np.max(np.abs(Ke - Kn)) / np.max(np.abs(Kn)), np.max(np.abs(Te - Tn)) / np.max(np.abs(Tn)))
            print(f"{act:5s} depth {L:3d}: effth {t_e:6.3f} s ({worker_threads()} threads; 1 thread "
                  f"{t_s:.3f} s), neural-tangents {t_nt:6.3f} s (jit compile {t_compile:.2f} s; effth "
                  f"first call {t_first:.2f} s)  ratio {t_e / t_nt:5.2f}x (1 thread {t_s / t_nt:.2f}x)  "
                  f"max rel. difference {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
