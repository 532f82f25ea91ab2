"""How the infinite-width K and Theta cost grows with the number of inputs N and the depth L.

Times ``effth.output_kernels`` (K^(L) and Theta^(L), PDLT (4.118), (9.5)) for erf and ReLU
(closed-form tables) and tanh (Mehler-series tables), against a plain NumPy loop of the same
erf recursion run in the same process (the baseline: the ratio is printed), fits the power laws
time ~ N^a and ~ L^b, and with ``--plot FILE`` draws both (the figure in docs/performance.md).

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_scaling.py --plot docs/figures/flow_scaling.png``.
"""

from __future__ import annotations

import argparse

import numpy as np

import effth as et
from _timing import best


def plain_erf(X, L, c_w=1.0, c_b=0.1):
    """The erf K + Theta recursion written directly in NumPy (lambda_b = lambda_W = 1)."""
    K = c_b + c_w * X @ X.T / X.shape[1]
    T = 1.0 + X @ X.T / X.shape[1]
    for _ in range(L - 1):
        d = np.sqrt(1.0 + 2.0 * np.diag(K))
        ss = (2 / np.pi) * np.arcsin(np.clip(2.0 * K / np.outer(d, d), -1, 1))
        dd = (4 / np.pi) / np.sqrt(np.outer(d * d, d * d) - 4.0 * K * K)
        K, T = c_b + c_w * ss, 1.0 + ss + c_w * dd * T
    return K, T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", default=None)
    ap.add_argument("--sizes", default="100,200,400,800,1600")
    ap.add_argument("--depths", default="5,10,20,40,80")
    args = ap.parse_args()
    sizes = [int(v) for v in args.sizes.split(",")]
    depths = [int(v) for v in args.depths.split(",")]
    rng = np.random.default_rng(0)
    Xall = rng.normal(size=(max(sizes), 16))
    acts = (("erf", 1.0), ("relu", 2.0), ("tanh", 1.0))
    res_n = {a: [] for a, _ in acts}
    res_l = {a: [] for a, _ in acts}
    base = []
    for a, cw in acts:
        et.output_kernels(et.MLP(a, depth=3, c_w=cw), Xall[:3])          # derivation, once
    for N in sizes:
        X = Xall[:N]
        base.append(best(lambda: plain_erf(X, 10), 2))
        for a, cw in acts:
            net = et.MLP(a, depth=10, c_w=cw, c_b=0.1)
            res_n[a].append(best(lambda: et.output_kernels(net, X), 3))
        print(f"N = {N:5d}, depth 10: " + ", ".join(f"{a} {res_n[a][-1]:.3f} s" for a, _ in acts)
              + f"; plain NumPy erf {base[-1]:.3f} s (erf ratio {res_n['erf'][-1] / base[-1]:.2f}x)")
    X = Xall[:400]
    for L in depths:
        for a, cw in acts:
            net = et.MLP(a, depth=L, c_w=cw, c_b=0.1)
            res_l[a].append(best(lambda: et.output_kernels(net, X), 3))
        print(f"L = {L:3d}, N = 400: " + ", ".join(f"{a} {res_l[a][-1]:.3f} s" for a, _ in acts))
    fits_n = {a: np.polyfit(np.log(sizes[1:]), np.log(res_n[a][1:]), 1)[0] for a, _ in acts}
    fits_l = {a: np.polyfit(np.log(depths[1:]), np.log(res_l[a][1:]), 1)[0] for a, _ in acts}
    print("exponents, time ~ N^a (N >= 200): " + ", ".join(f"{a} {v:.2f}" for a, v in fits_n.items()))
    print("exponents, time ~ L^b (L >= 10):  " + ", ".join(f"{a} {v:.2f}" for a, v in fits_l.items()))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
        for a, _ in acts:
            a1.loglog(sizes, res_n[a], "o-", label=f"{a} (slope {fits_n[a]:.2f})")
            a2.loglog(depths, res_l[a], "o-", label=f"{a} (slope {fits_l[a]:.2f})")
        a1.loglog(sizes, base, "k--", label="plain NumPy erf loop")
        a1.set_xlabel("number of inputs N"); a1.set_ylabel("time of K and Theta [s]")
        a1.set_title("depth 10, 1 BLAS thread"); a1.legend(fontsize=8)
        a2.set_xlabel("depth L"); a2.set_ylabel("time of K and Theta [s]")
        for ax, ticks in ((a1, sizes), (a2, depths)):      # plain tick labels at the measured points
            ax.minorticks_off()
            ax.set_xticks(ticks, [str(t) for t in ticks])
        a2.set_title("N = 400 inputs"); a2.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
