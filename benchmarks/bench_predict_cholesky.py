"""Converged GD and Bayes predictions by Cholesky solves, against a plain GP in the same process.

Times ``effth.predict`` (converged gradient descent (10.39)-(10.41) and the Bayesian posterior
(6.57), (6.64)) on precomputed output kernels at P training and Q test inputs, reading the mean
only and then the covariance, against a plain ``scipy.linalg.cho_factor``/``cho_solve`` GP on
the same matrices (mean K_BA K~^{-1} y; covariance K_BB - K_BA K~^{-1} K_AB), interleaved, best of
``--repeat`` rounds; prints the ratios and the largest relative disagreement (bar: 1e-10).
With neural-tangents importable (see ``bench_vs_neural_tangents.py`` for its venv), also its
``predict.gp_inference`` on the same kernels.

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


def _best(fn, repeat):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


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
    print("P, method: effth mean / GP mean, effth mean+cov / GP mean+cov, max rel. difference"
          + (", neural-tangents" if nt else ""))
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
            load = os.getloadavg()[0]
            t_e, (m_e, _) = _best(lambda: eff(False), args.repeat)
            t_g, (m_g, _) = _best(lambda: gp(False), args.repeat)
            t_ec, (_, c_e) = _best(lambda: eff(True), args.repeat)
            t_gc, (_, c_g) = _best(lambda: gp(True), args.repeat)
            rel = max(abs(m_e - m_g).max() / abs(m_g).max(), abs(c_e - c_g).max() / abs(c_g).max())
            before = ""
            if base is not None:                      # before, then now again (best of both)
                t_b, (m_b, _) = _best(lambda: eff(False, fn=base), args.repeat)
                t_e = min(t_e, _best(lambda: eff(False), args.repeat)[0])
                before = (f"; before {t_b:.4f} s (now/before {t_e / t_b:.2f}, "
                          f"{abs(m_b - m_e).max() / abs(m_b).max():.1e} apart)")
            line = (f"{P:5d} {method:5s}: {t_e:.4f} / {t_g:.4f} s ({t_e / t_g:.2f}x), "
                    f"{t_ec:.4f} / {t_gc:.4f} s ({t_ec / t_gc:.2f}x), {rel:.1e}" + before)
            if nt is not None:
                kt = {"nngp": K[:P, :P], "ntk": Th[:P, :P]}
                def ntp():
                    fn = nt.predict.gradient_descent_mse(kt["ntk"], y) if method == "gd" else None
                    if method == "gd":
                        return fn(None, 0.0, 0.0, Th[P:, :P])[1]
                    pf = nt.predict.gp_inference(K[:P, :P], y, diag_reg=0.0)
                    return pf("nngp", K[P:, :P])
                t_n, m_n = _best(ntp, args.repeat)
                line += f"; neural-tangents {t_n:.4f} s ({t_e / t_n:.2f}x), {abs(np.asarray(m_n) - m_e).max() / abs(m_e).max():.1e}"
            print(line + f"; load {load:.1f}-{os.getloadavg()[0]:.1f}", flush=True)
            assert rel < 1e-10, rel
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
