"""Benchmark: compile once, evaluate a 2-input kernel step over a batch of 10^4 kernels.

Prints compile time, evaluation time, and the ratio to the same step lambdified with
``cse=False``, in this process; then repeats with BLAS limited to one thread
(``OPENBLAS_NUM_THREADS=1`` equivalent, through threadpoolctl) and in a subprocess with the
environment variable set.  Not collected by pytest.

Usage: ``python benchmarks/bench_codegen.py [--batch 10000] [--activation erf] [--repeat 5]``.
With ``--activation tanh`` the time is dominated by the 2-D Gauss–Hermite quadrature of the
numerics (about 1 ms per kernel at rtol=1e-10 on the reference machine); use a smaller batch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
import sympy as sp


def build_step(cse: bool, activation: str):
    from effth.algebra.expectation import GaussianExpectation, sigma
    from effth.algebra.indices import c_b, c_w, ell
    from effth.algebra.tensors import Kernel, KernelMatrix
    from effth.codegen import compile_step

    km = KernelMatrix(Kernel, ell)
    cw, cb = c_w(ell + 1), c_b(ell + 1)
    # PDLT (4.118) plus the chi_perp-like derivative output, to give CSE something to share
    M = sp.Matrix(2, 2, lambda i, j: cb + cw * GaussianExpectation(sigma(i) * sigma(j), km))
    chi = sp.Matrix(2, 2, lambda i, j: cw * sp.diff(M[i, j], Kernel(i, j, ell)) if i != j else cw)
    return compile_step({"K": M, "chi": chi}, {km: "K"}, activation=activation, params=[cw, cb], cse=cse)


def timeit(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run(batch: int, activation: str, repeat: int, label: str) -> None:
    from effth.codegen import clear_cache

    rng = np.random.default_rng(0)
    A = rng.standard_normal((batch, 2, 2))
    K = A @ np.swapaxes(A, -1, -2) / 2 + 0.2 * np.eye(2)

    clear_cache()
    t = time.perf_counter()
    step = build_step(True, activation)
    t_compile = time.perf_counter() - t
    t = time.perf_counter()
    build_step(True, activation)
    t_cached = time.perf_counter() - t
    t = time.perf_counter()
    step_nocse = build_step(False, activation)
    t_compile_nocse = time.perf_counter() - t

    out = step(K=K, C_W=1.0, C_b=0.0)
    ref = step_nocse(K=K, C_W=1.0, C_b=0.0)
    assert np.allclose(out["K"], ref["K"], rtol=1e-13)
    t_eval = timeit(lambda: step(K=K, C_W=1.0, C_b=0.0), repeat)
    t_eval_nocse = timeit(lambda: step_nocse(K=K, C_W=1.0, C_b=0.0), repeat)
    # the lambdified part alone (atoms precomputed): where CSE acts
    args, _ = step._arguments({"K": K}, {"C_W": 1.0, "C_b": 0.0})
    args_n, _ = step_nocse._arguments({"K": K}, {"C_W": 1.0, "C_b": 0.0})
    t_fn = timeit(lambda: step._fn(*args), repeat * 20)
    t_fn_nocse = timeit(lambda: step_nocse._fn(*args_n), repeat * 20)
    print(f"[{label}] batch={batch} activation={activation} atoms={len(step.atoms)}")
    print(f"  compile (cse=True)   : {t_compile * 1e3:8.1f} ms   (cache hit: {t_cached * 1e3:.3f} ms)")
    print(f"  compile (cse=False)  : {t_compile_nocse * 1e3:8.1f} ms")
    print(f"  eval    (cse=True)   : {t_eval * 1e3:8.2f} ms   ({t_eval / batch * 1e6:.3f} us/kernel)")
    print(f"  eval    (cse=False)  : {t_eval_nocse * 1e3:8.2f} ms")
    print(f"  ratio eval cse=True / cse=False : {t_eval / t_eval_nocse:.3f}")
    print(f"  lambdified part only: cse=True {t_fn * 1e6:.1f} us, cse=False {t_fn_nocse * 1e6:.1f} us,"
          f" ratio {t_fn / t_fn_nocse:.3f}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--activation", default="erf",
                   help="erf has a closed form (measures codegen); tanh runs 2-D quadrature")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        run(a.batch, a.activation, a.repeat, "subprocess OPENBLAS_NUM_THREADS=1")
        return
    run(a.batch, a.activation, a.repeat, "default threads")
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            run(a.batch, a.activation, a.repeat, "threadpoolctl blas=1")
    except ImportError:  # pragma: no cover
        print("threadpoolctl not installed; skipping the in-process 1-thread run")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run([sys.executable, __file__, "--child", "--batch", str(a.batch), "--activation",
                    a.activation, "--repeat", str(a.repeat)], env=env, check=True)


if __name__ == "__main__":
    main()
