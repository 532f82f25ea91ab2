"""Converged GD and Bayes predictions by Cholesky solves, against a plain GP in the same process.

Times ``effth.predict`` (converged gradient descent (10.39)-(10.41) and the Bayesian posterior
(6.57), (6.64)) on precomputed output kernels at P training and Q test inputs, reading the mean
only and then the covariance, against a plain ``scipy.linalg.cho_factor``/``cho_solve`` GP on
the same matrices (mean K_BA K~^{-1} y; covariance K_BB - K_BA K~^{-1} K_AB), interleaved (one
call of each side per round), best of ``--repeat`` rounds; prints the ratios and the largest
relative disagreement (bar: 1e-10).  With neural-tangents importable (see
``bench_vs_neural_tangents.py`` for its venv), also its ``predict.gradient_descent_mse``
(converged, t = None) and ``predict.gp_inference`` on the same kernels, mean only: printed as
effth / NT and GP / NT (the floor of a validation-free Cholesky solve against NT).

``--base REV`` (default ``main``) also times ``predict`` as it was at that git revision
(``effth/pdlt/learning/prediction.py`` read from git and loaded beside this checkout's) on the
same matrices, interleaved: printed as now / before.  Bayes is given K alone (it reads no
Theta).  Each line ends with the load average over its rounds.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_predict_cholesky.py --sizes 100,1000,3000
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import scipy.linalg as sl

import effth as et


def _base_predict(rev):
    """``predict`` of effth/pdlt/learning/prediction.py at git revision ``rev``, or None."""
    try:
        src = subprocess.run(["git", "show", f"{rev}:effth/pdlt/learning/prediction.py"],
                             capture_output=True, text=True, check=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    f = os.path.join(tempfile.mkdtemp(prefix="effth_base_"), "prediction_base.py")
    with open(f, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location("effth.pdlt.learning._prediction_base", f)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.predict


def _gp(KAA, KBA, KBB, y, cov):
    c = sl.cho_factor(KAA, lower=True, check_finite=False)
    mean = KBA @ sl.cho_solve(c, y, check_finite=False)
    if not cov:
        return mean, None
    return mean, KBB - KBA @ sl.cho_solve(c, KBA.T, check_finite=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,3000")
    ap.add_argument("--base", default="main")
    ap.add_argument("--test", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        sys.modules.setdefault("neural_tangents.experimental", types.ModuleType("neural_tangents.experimental"))
        import jax
        jax.config.update("jax_enable_x64", True)
        import neural_tangents as nt
    except Exception:  # noqa: BLE001
        nt = None
    base = _base_predict(args.base) if args.base else None
    net = et.MLP("erf", depth=10, c_w=1.0, c_b=0.1)
    rng = np.random.default_rng(0)
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, best of {args.repeat} "
          "interleaved rounds; P, method: effth mean / GP mean, effth mean+cov / GP mean+cov, max "
          "rel. difference" + (", neural-tangents" if nt else ""))
    for P in map(int, args.sizes.split(",")):
        X = rng.normal(size=(P + args.test, 16))
        y = np.sin(X[:P, :1])
        K, Th = et.output_kernels(net, X)
        for method, M in (("gd", Th), ("bayes", K)):
            def eff(cov, method=method, fn=et.predict):
                kw = dict(Theta=Th) if method == "gd" else {}
                p = fn(K=K, y_train=y, n_train=P, method=method, **kw)
                return p.value("mean"), (p.value("covariance") if cov else None)
            ref_gd = method == "gd"
            def gp(cov, M=M):
                mean, c = _gp(M[:P, :P], M[P:, :P], M[P:, P:], y, cov)
                if c is not None and ref_gd:   # GD (10.41): Cov of z_B - Pm z_A under K
                    Pm = sl.cho_solve(sl.cho_factor(M[:P, :P], lower=True), M[:P, P:]).T
                    KAB = K[:P, P:]
                    c = K[P:, P:] - Pm @ KAB - KAB.T @ Pm.T + Pm @ K[:P, :P] @ Pm.T
                return mean, c
            sides = {"effth": lambda: eff(False), "GP": lambda: gp(False)}
            if nt is not None:
                kt = {"nngp": K[:P, :P], "ntk": Th[:P, :P]}

                def ntp(method=method, kt=kt):
                    if method == "gd":
                        fn = nt.predict.gradient_descent_mse(kt["ntk"], y)
                        return np.asarray(fn(None, 0.0, 0.0, Th[P:, :P])[1])
                    pf = nt.predict.gp_inference(kt["nngp"], y, diag_reg=0.0)
                    return np.asarray(pf("nngp", K[P:, :P]))
                sides["NT"] = ntp
            if base is not None:
                sides["before"] = lambda: eff(False, fn=base)[0]
            sides["effth+cov"] = lambda: eff(True)
            sides["GP+cov"] = lambda: gp(True)
            for f in sides.values():                  # warm-up (jit, imports)
                f()
            times = {k: [] for k in sides}
            outs, loads = {}, [os.getloadavg()[0]]
            for _ in range(args.repeat):              # interleaved: one call of each per round
                for k, f in sides.items():
                    t = time.perf_counter()
                    outs[k] = f()
                    times[k].append(time.perf_counter() - t)
                loads.append(os.getloadavg()[0])
            t = {k: min(v) for k, v in times.items()}
            m_e, m_g = outs["effth"][0], outs["GP"][0]
            c_e, c_g = outs["effth+cov"][1], outs["GP+cov"][1]
            rel = max(abs(m_e - m_g).max() / abs(m_g).max(), abs(c_e - c_g).max() / abs(c_g).max())
            line = (f"{P:5d} {method:5s}: {t['effth']:.4f} / {t['GP']:.4f} s ({t['effth'] / t['GP']:.2f}x), "
                    f"{t['effth+cov']:.4f} / {t['GP+cov']:.4f} s ({t['effth+cov'] / t['GP+cov']:.2f}x), "
                    f"{rel:.1e}")
            if "before" in t:
                line += (f"; before {t['before']:.4f} s (now/before {t['effth'] / t['before']:.2f}, "
                         f"{abs(outs['before'] - m_e).max() / abs(outs['before']).max():.1e} apart)")
            if "NT" in t:
                line += (f"; neural-tangents {t['NT']:.4f} s (effth/NT {t['effth'] / t['NT']:.2f}, "
                         f"GP/NT {t['GP'] / t['NT']:.2f}), "
                         f"{abs(outs['NT'] - m_e).max() / abs(m_e).max():.1e}")
            print(line + f"; load {min(loads):.1f}-{max(loads):.1f}", flush=True)
            assert rel < 1e-10, rel
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
