"""Width-scaling bar: theory vs simulation across n in {16, 32, 64, 128}.

For ReLU, tanh and GELU (depth 4, two inputs, critical C_W, C_b) prints per activation a table
n, Delta_G = G - (K + G^{1}/n) (off-diagonal component, control-variate estimator) +- se,
Delta_V = V_sim - V ((01)(01) component) +- se, the weighted power-law fits
Delta = A n^-p with sigma_p (predictions p_G = 2, p_V = 1) and the fit with a deliberately wrong
NLO metric 0.9 G^{1} (must be rejected), plus wall times.  The estimator and the fit live in
``tests/pdlt/test_width_scaling.py`` (the slow test runs the same study).

Run from the repository root:  ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_width_scaling.py``
(about 8-9 minutes on 2 cores; budget 25).  ``--scale 0.25`` runs a quick reduced version,
``--acts relu`` a subset, ``--markdown FILE`` also writes the tables as Markdown.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.pdlt.test_width_scaling import (  # noqa: E402
    DEPTH, FULL_SIZES, OFF, WIDTHS, CONFIGS, study)


def verdict(fit, p_pred: float) -> str:
    if fit.rejects(p_pred):
        return "FAIL"
    return "PASS" if fit.p_err <= 0.2 else "inconclusive (sigma_p > 0.2)"


def table(res: dict) -> list[str]:
    th = res["theory"]
    cw, cb, scale = CONFIGS[res["act"]]
    out = [f"### {res['act']}  (depth {DEPTH}, C_W = {cw:.6g}, C_b = {cb:.6g}, "
           f"K^(1) = {scale**2:g}*[[1, .6], [.6, 1]])", "",
           f"K_01 = {th['K'][OFF]:.6f}, G1_01 = {th['G1'][OFF]:.6f}, V_(01)(01) = {th['V'][OFF, OFF]:.6f}", "",
           "| n | networks | Δ_G = G_01 − (K + G¹/n)_01 | se | n²·Δ_G | plain RB se | Δ_V = V_sim − V | se | n·Δ_V | time (s) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        n = r["n"]
        out.append(f"| {n} | {r['size']:,} | {r['dG'][OFF]:+.3e} | {r['G_err'][OFF]:.1e} | "
                   f"{n * n * r['dG'][OFF]:+.3f} ± {n * n * r['G_err'][OFF]:.3f} | {r['G_raw_err'][OFF]:.1e} | "
                   f"{r['dV'][OFF, OFF]:+.3e} | {r['V_err'][OFF, OFF]:.1e} | "
                   f"{n * r['dV'][OFF, OFF]:+.3g} ± {n * r['V_err'][OFF, OFF]:.2g} | {r['time']:.1f} |")
    fG, fW, fV = res["fit_G"], res["fit_G_wrong"], res["fit_V"]
    out += ["",
            f"* fit Δ_G = A n^-p: **p = {fG.p:.3f} ± {fG.p_err:.3f}** (predicted 2), A = {fG.A:.3g} ± {fG.A_err:.2g}, "
            f"χ² = {fG.chi2:.2f} / {fG.dof} dof (p-value {fG.pvalue:.2f}) — {verdict(fG, 2.0)}",
            f"* fit Δ_V = A n^-p: **p = {fV.p:.3f} ± {fV.p_err:.3f}** (predicted 1), A = {fV.A:.3g} ± {fV.A_err:.2g}, "
            f"χ² = {fV.chi2:.2f} / {fV.dof} dof (p-value {fV.pvalue:.2f}) — {verdict(fV, 1.0)}",
            f"* with a wrong NLO metric 0.9·G¹: p = {fW.p:.3f} ± {fW.p_err:.3f}, χ² = {fW.chi2:.1f} / {fW.dof} "
            f"(p-value {fW.pvalue:.1e}) — {'rejected (as it must be)' if fW.rejects(2.0) else 'NOT rejected'}",
            f"* wall time {res['time']:.0f} s (theory {res['time_theory']:.1f} s)", ""]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--acts", default="relu,tanh,gelu")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every ensemble size")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--markdown", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    lines = []
    for act in args.acts.split(","):
        sizes = {n: max(2000, int(args.scale * m)) for n, m in FULL_SIZES[act].items()}
        res = study(act, sizes, seed=args.seed, widths=WIDTHS, verbose=True)
        tab = table(res)
        print("\n".join(tab), flush=True)
        lines += tab
    total = time.perf_counter() - t0
    lines.append(f"Total wall time: {total:.0f} s ({os.cpu_count()} cores, OPENBLAS_NUM_THREADS="
                 f"{os.environ.get('OPENBLAS_NUM_THREADS')})")
    print(lines[-1])
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
