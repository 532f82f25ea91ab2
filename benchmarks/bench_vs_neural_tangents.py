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

The floor: a plain NumPy loop of the same closed forms over whole N x N matrices (arc-cosine
kernels with ``theta = arctan2(sqrt((1-rho)(1+rho)), rho)``, as effth evaluated them before its
whole-array arccos; Williams' erf kernels), one pass per layer; printed as effth / floor, with or without neural-tangents.

Parameterization: NT's ``Dense(W_std, b_std, parameterization="ntk")`` is the book's with
``C_W = W_std**2``, ``C_b = b_std**2`` and learning rates ``lambda_W = C_W``, ``lambda_b = C_b``.
Without neural-tangents the script says so and times effth against the floor only.

Measured on the 2-core development machine (1 BLAS thread, otherwise idle, interleaved, best of
5; 2026-12-03, before the arc-cosine angle moved to :mod:`effth.numerics._fastmath`), depth 8 /
20: erf effth/floor 0.77 / 0.78, effth/neural-tangents 0.77 / 0.75 (neural-tangents 0.075 /
0.213 s); ReLU effth/floor 1.08 / 0.91, effth/neural-tangents 0.45 / 0.27 (0.175 / 0.712 s);
runs ten minutes apart differ by about 10 %.

Measured again after it (same day, the machine shared with other sessions: load average 8-9,
1 BLAS thread, best of 5), depth 8 / 20: erf effth/floor 0.35 / 0.39 (1 effth thread 0.55 /
0.52), effth/neural-tangents 0.30 / 0.29 (0.48 / 0.39); ReLU effth/floor 0.31 / 0.46 (0.46 /
0.45), effth/neural-tangents 0.27 / 0.24 (0.39 / 0.23).  Under load neural-tangents slowed
more than effth (0.62 s for erf at depth 8 against 0.075 s idle; effth 0.19 s against 0.058 s),
so these ratios flatter effth; the idle ratios above are the fair ones for erf, whose numbers are
unchanged (bitwise).  With the default BLAS threads (same load): erf effth/neural-tangents 0.33 /
0.58, ReLU 0.44 / 0.19.  In one process against the code before the whole-array angle, ReLU
takes 0.76 of the time at depth 8 and 20 (load 10), erf 0.96 / 1.14 (load 7.5: no gain seen).
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


def floor(act: str, X: np.ndarray, L: int, c_w: float, c_b: float) -> tuple:
    """K and Theta of an MLP (PDLT (4.118), (9.5), lambda_b = C_b, lambda_W = C_W) by a plain loop
    of closed forms over the whole matrices: the baseline effth's flow is held to."""
    K = c_b + c_w * (X @ X.T) / X.shape[1]
    Th = K.copy()
    for _ in range(L - 1):
        d = np.sqrt(np.diag(K))
        if act == "relu":
            dd = np.outer(d, d)
            c = np.clip(K / dd, -1.0, 1.0)
            s = np.sqrt(np.maximum((1.0 - c) * (1.0 + c), 0.0))
            th = np.arctan2(s, c)
            EK, Ed = dd * (s + (np.pi - th) * c) / (2 * np.pi), (np.pi - th) / (2 * np.pi)
        else:
            u = 1.0 / np.sqrt(1.0 + 2.0 * np.diag(K))
            t = np.clip(2.0 * K * np.outer(u, u), -1.0, 1.0)
            EK = 2.0 / np.pi * np.arcsin(t)
            Ed = 4.0 / np.pi * np.outer(u, u) / np.sqrt(1.0 - t * t)
        Th = c_b + c_w * EK + c_w * Ed * Th
        K = c_b + c_w * EK
    return K, Th


def _neural_tangents():
    """``(jax, stax)`` or ``None`` (with the reason printed)."""
    try:
        sys.modules.setdefault("neural_tangents.experimental", types.ModuleType("neural_tangents.experimental"))
        import jax
        jax.config.update("jax_enable_x64", True)
        from neural_tangents import stax
    except Exception as exc:  # noqa: BLE001
        print(f"neural-tangents not available ({type(exc).__name__}: {exc}); effth against the floor only")
        return None
    return jax, stax


def _rel(a: tuple, b: tuple) -> float:
    return max(float(np.max(np.abs(x - y)) / np.max(np.abs(y))) for x, y in zip(a, b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of inputs N [1000]")
    ap.add_argument("--depths", default="8,20")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    nt_mod = _neural_tangents()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 16))
    c_b = 0.1
    print(f"N = {args.n} inputs in n0 = 16, float64, 1 BLAS thread recommended; best of {args.repeat} "
          "interleaved rounds")
    for act, c_w in (("erf", 1.0), ("relu", 2.0)):
        for L in map(int, args.depths.split(",")):
            fns = {"floor": lambda act=act, L=L, c_w=c_w: floor(act, X, L, c_w, c_b)}
            t_compile = None
            if nt_mod is not None:
                jax, stax = nt_mod
                ws, bs = c_w ** 0.5, c_b ** 0.5
                layer = stax.Erf if act == "erf" else stax.Relu
                blocks = []
                for _ in range(L - 1):
                    blocks += [stax.Dense(512, W_std=ws, b_std=bs), layer()]
                _, _, kernel_fn = stax.serial(*blocks, stax.Dense(1, W_std=ws, b_std=bs))
                kernel_fn = jax.jit(kernel_fn, static_argnames="get")
                Xj = jax.numpy.asarray(X)

                def nt(kernel_fn=kernel_fn, Xj=Xj):
                    k = kernel_fn(Xj, Xj, get=("nngp", "ntk"))
                    return np.asarray(k.nngp), np.asarray(k.ntk)

                t0 = time.perf_counter()
                nt()                               # compile
                t_compile = time.perf_counter() - t0
                fns["nt"] = nt
            net = et.MLP(act, depth=L, c_w=c_w, c_b=c_b)
            t0 = time.perf_counter()
            et.output_kernels(net, X[:3], lambda_b=c_b, lambda_w=c_w)    # first call: derivation
            t_first = time.perf_counter() - t0

            def ours(net=net, c_w=c_w):
                return et.output_kernels(net, X, lambda_b=c_b, lambda_w=c_w)

            def serial():
                os.environ["EFFTH_THREADS"] = "1"
                try:
                    return ours()
                finally:
                    _restore(threads)

            fns["effth"], fns["serial"] = ours, serial
            # interleaved: one call of each per round, best of the rounds
            times = {k: [] for k in fns}
            res = {}
            for _ in range(args.repeat):
                for key, fn in fns.items():
                    t0 = time.perf_counter()
                    res[key] = fn()
                    times[key].append(time.perf_counter() - t0)
            t = {k: min(v) for k, v in times.items()}
            line = (f"{act:5s} depth {L:3d}: effth {t['effth']:6.3f} s ({worker_threads()} threads; 1 thread "
                    f"{t['serial']:.3f} s), floor {t['floor']:.3f} s: effth/floor {t['effth'] / t['floor']:.2f} "
                    f"(1 thread {t['serial'] / t['floor']:.2f}), max rel. difference "
                    f"{_rel(res['effth'], res['floor']):.1e}")
            if "nt" in t:
                line += (f"; neural-tangents {t['nt']:.3f} s (jit compile {t_compile:.2f} s; effth first "
                         f"call {t_first:.2f} s): effth/NT {t['effth'] / t['nt']:.2f} (1 thread "
                         f"{t['serial'] / t['nt']:.2f}), max rel. difference {_rel(res['effth'], res['nt']):.1e}")
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
