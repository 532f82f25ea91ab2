"""End-to-end infinite-width predictions against neural-tangents: time, agreement and peak memory.

``effth.predict(net, X_train, y_train, X_test, method=...)`` (the output kernels K, Theta through
every layer and the converged-GD (10.39)-(10.41) or Bayesian (6.57) solve) against
neural-tangents' ``predict.gradient_descent_mse_ensemble(kernel_fn, ...)`` (``get="ntk"``, t =
infinity) and ``get="nngp"`` (the GP posterior) on the same MLP and inputs, float64, the mean
only (the covariance is computed on request by both), interleaved one call of each per round,
best of ``--repeat``; prints effth / neural-tangents and the largest relative disagreement of the
means.  ``--memory`` runs each side once per size in a fresh subprocess and prints the peak
resident set (Linux ``VmHWM``, reset after a warm-up call at 50 inputs) above the resident set
before the call (imports, derivations, jit compilation and the inputs excluded).

Parameterization as ``bench_vs_neural_tangents.py`` (its docstring has the venv):
``C_W = W_std**2``, ``C_b = b_std**2``, ``lambda_W = C_W``, ``lambda_b = C_b``.

    OPENBLAS_NUM_THREADS=1 /path/to/ntenv/bin/python benchmarks/bench_predict_vs_neural_tangents.py \
        --sizes 100,1000,3000 [--memory]

Always (with or without neural-tangents) also against a plain GP in the same process, the floor:
the kernels by the plain NumPy loop of the closed forms of ``bench_vs_neural_tangents.floor``
(whole N x N matrices, one pass per layer) and the mean by ``scipy.linalg.cho_factor`` /
``cho_solve`` (GD: Theta_BA Theta~^{-1} y, Bayes: K_BA K~^{-1} y); printed as effth / GP and the
largest relative difference of the means (an independent evaluation of the same formulas:
neural-tangents' ReLU Theta is itself off by 2e-8, see ``bench_vs_neural_tangents.py``).
Without neural-tangents the script says so and times effth against the GP only.  ``--base REV``
(default ``main``) also times ``predict`` as it was at that git revision, interleaved (see
``bench_predict_cholesky.py``), printed as now / before.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import types

import numpy as np
import scipy.linalg as sl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_vs_neural_tangents import floor  # noqa: E402

DEPTH, C_B, Q, N0 = 10, 0.1, 100, 16
ACTS = {"erf": 1.0, "relu": 2.0}


def _nt():
    sys.modules.setdefault("neural_tangents.experimental", types.ModuleType("neural_tangents.experimental"))
    import jax
    jax.config.update("jax_enable_x64", True)
    import neural_tangents as nt
    from neural_tangents import stax
    return jax, nt, stax


def _data(P: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(P + Q, N0))
    return X[:P], np.sin(X[:P, :1]) + 0.3 * np.cos(X[:P, 1:2]), X[P:]


def _before(act: str, rev: str):
    """``predict`` at git revision ``rev`` on the same network (None when git has no such file)."""
    from bench_predict_cholesky import _base_predict
    import effth as et
    fn = _base_predict(rev)
    if fn is None:
        return None
    c_w = ACTS[act]
    net = et.MLP(act, depth=DEPTH, c_w=c_w, c_b=C_B)

    def before(method, Xa, ya, Xb):
        return fn(net, Xa, ya, Xb, method=method, lambda_b=C_B, lambda_w=c_w).value("mean")
    return before


def _makers(act: str):
    """``(effth call, neural-tangents call)`` factories for one activation: each takes
    ``(method, Xa, ya, Xb)`` and returns the test mean."""
    import effth as et
    c_w = ACTS[act]
    net = et.MLP(act, depth=DEPTH, c_w=c_w, c_b=C_B)

    def ours(method, Xa, ya, Xb):
        return et.predict(net, Xa, ya, Xb, method=method, lambda_b=C_B, lambda_w=c_w).value("mean")

    try:
        jax, nt, stax = _nt()
    except Exception as exc:  # noqa: BLE001
        print(f"neural-tangents not available ({type(exc).__name__}: {exc}); effth against the GP only")
        return ours, None
    blocks = []
    for _ in range(DEPTH - 1):
        blocks += [stax.Dense(512, W_std=c_w ** 0.5, b_std=C_B ** 0.5),
                   stax.Erf() if act == "erf" else stax.Relu()]
    _, _, kernel_fn = stax.serial(*blocks, stax.Dense(1, W_std=c_w ** 0.5, b_std=C_B ** 0.5))
    kernel_fn = jax.jit(kernel_fn, static_argnames="get")

    def theirs(method, Xa, ya, Xb):
        fn = nt.predict.gradient_descent_mse_ensemble(kernel_fn, Xa, ya, diag_reg=0.0)
        return np.asarray(fn(x_test=Xb, get="ntk" if method == "gd" else "nngp", compute_cov=False))

    return ours, theirs


def _gp(act: str):
    """The plain GP: floor kernels and a Cholesky solve (see the module docstring)."""
    c_w = ACTS[act]

    def gp(method, Xa, ya, Xb):
        K, Th = floor(act, np.vstack([Xa, Xb]), DEPTH, c_w, C_B)
        M = Th if method == "gd" else K
        P = len(Xa)
        c = sl.cho_factor(M[:P, :P], lower=True, check_finite=False)
        return M[P:, :P] @ sl.cho_solve(c, ya, check_finite=False)
    return gp


def _child(act: str, side: str, method: str, P: int) -> None:
    ours, theirs = _makers(act)
    fn = ours if side == "effth" else theirs
    fn(method, *_data(50, 1))                      # warm-up: imports, derivations, jit
    data = _data(P)
    base = _status("VmRSS")
    try:                                           # Linux: reset the peak (VmHWM) to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        peak_of = lambda: _status("VmHWM")         # noqa: E731
    except OSError:
        peak_of = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # noqa: E731
    t = time.perf_counter()
    fn(method, *data)
    dt = time.perf_counter() - t
    print(json.dumps({"seconds": dt, "base_mb": base / 1024, "peak_mb": peak_of() / 1024}))


def _status(key: str) -> float:
    """A ``/proc/self/status`` figure in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return float(line.split()[1])
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,3000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--acts", default="erf,relu")
    ap.add_argument("--methods", default="gd,bayes")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--base", default="main")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        act, side, method, P = args.child
        _child(act, side, method, int(P))
        return 0
    print(f"MLP depth {DEPTH}, C_b {C_B}, n0 = {N0}, {Q} test inputs, float64, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, load {os.getloadavg()[0]:.1f}; "
          f"best of {args.repeat} interleaved rounds")
    for act in args.acts.split(","):
        ours, theirs = _makers(act)
        gp = _gp(act)
        before = _before(act, args.base) if args.base else None
        for P in map(int, args.sizes.split(",")):
            data = _data(P)
            for method in args.methods.split(","):
                sides = [ours, gp] + ([theirs] if theirs is not None else []) + (
                    [before] if before is not None else [])
                for fn in sides:
                    fn(method, *_data(50, 1))                       # warm-up
                times = [[] for _ in sides]
                loads = []
                for _ in range(args.repeat):
                    loads.append(os.getloadavg()[0])
                    means = []
                    for fn, ts in zip(sides, times):
                        t = time.perf_counter()
                        means.append(fn(method, *data))
                        ts.append(time.perf_counter() - t)
                best = [min(ts) for ts in times]
                rel = [float(np.max(np.abs(means[0] - m)) / np.max(np.abs(m))) for m in means[1:]]
                line = (f"{act:4s} P={P:5d} {method:5s}: effth {best[0]:7.4f} s, GP {best[1]:7.4f} s "
                        f"(effth/GP {best[0] / best[1]:.2f}, mean rel. diff {rel[0]:.1e})")
                if theirs is not None:
                    line += (f", neural-tangents {best[2]:7.4f} s (effth/NT {best[0] / best[2]:.2f}, "
                             f"mean rel. diff {rel[1]:.1e})")
                if before is not None:
                    line += (f", before {best[-1]:7.4f} s (now/before {best[0] / best[-1]:.2f}, "
                             f"{rel[-1]:.1e} apart)")
                line += f"; load {min(loads):.1f}-{max(loads):.1f}"
                if args.memory and theirs is not None:
                    mem = {}
                    for side in ("effth", "nt"):
                        out = subprocess.run([sys.executable, __file__, "--child", act, side, method,
                                              str(P)], capture_output=True, text=True)
                        r = json.loads(out.stdout.strip().splitlines()[-1])
                        mem[side] = r["peak_mb"] - r["base_mb"]
                    line += (f"; peak above warm-up: effth {mem['effth']:.0f} MB, neural-tangents "
                             f"{mem['nt']:.0f} MB ({mem['effth'] / max(mem['nt'], 1):.2f}x)")
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
