"""Benchmark of :func:`effth.pdlt.predict` (infinite-width GD / Bayes prediction).

Bar: the full infinite-width prediction (mean + covariance) for 100 training and 100 test inputs
of a depth-10 MLP in well under a second.  Reported separately:

* ``kernels``: :func:`~effth.pdlt.output_kernels` (K^(L), Theta^(L) on the 200 inputs;
  closed forms for ReLU, batched quadrature for smooth activations — the bottleneck for tanh);
* ``predict`` end to end, GD (eigenbasis of the training NTK) and Bayes (Cholesky);
* ``solve only``: ``predict(K=..., Theta=...)`` from precomputed kernels;
* baseline in the same process: a plain NumPy GP solve (``np.linalg.solve`` for the mean and the
  posterior covariance) on the same kernels; the ratio is solve-only / baseline.

``effth.flow`` / ``effth.ntk_flow`` are not used: they also build the O(N^4) four-point tensors
(200^4 doubles = 12.8 GB), which the infinite-width prediction does not need.

Options: ``--train``, ``--test``, ``--depth``, ``--act`` (repeatable), ``--repeat``.
Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_learning.py``.
"""

from __future__ import annotations

import argparse

import numpy as np

import effth as et
from _timing import best
from effth.pdlt import output_kernels, predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=100)
    ap.add_argument("--test", type=int, default=100)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--act", action="append", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    P, Q = args.train, args.test
    XA, XB = rng.normal(size=(P, 16)), rng.normal(size=(Q, 16))
    y = np.sin(XA[:, 0]) + 0.1 * rng.normal(size=P)
    for act in args.act or ["relu", "tanh"]:
        c_w = 2.0 if act == "relu" else 1.0
        net = et.MLP(act, depth=args.depth, c_w=c_w)
        rep = args.repeat if act == "relu" else 1
        X = np.vstack([XA, XB])
        t_k = best(lambda: output_kernels(net, X), rep)
        K, T = output_kernels(net, X)
        t_gd = best(lambda: predict(net, XA, y, XB), rep)
        t_bayes = best(lambda: predict(net, XA, y, XB, method="bayes"), rep)
        t_solve = best(lambda: predict(K=K, Theta=T, y_train=y, n_train=P), 20)
        t_solve_b = best(lambda: predict(K=K, y_train=y, n_train=P, method="bayes"), 20)

        def baseline():
            KA = K[:P, :P]
            mean = K[P:, :P] @ np.linalg.solve(KA, y)
            cov = K[P:, P:] - K[P:, :P] @ np.linalg.solve(KA, K[:P, P:])
            return mean, cov

        t_base = best(baseline, 20)
        print(f"{act}, depth {args.depth}, {P} train + {Q} test:")
        print(f"  kernels K, Theta (output_kernels)   {t_k * 1e3:8.1f} ms")
        print(f"  predict GD, end to end              {t_gd * 1e3:8.1f} ms")
        print(f"  predict Bayes, end to end           {t_bayes * 1e3:8.1f} ms")
        print(f"  solve only: GD / Bayes              {t_solve * 1e3:8.2f} / {t_solve_b * 1e3:.2f} ms")
        print(f"  plain NumPy GP solve (baseline)     {t_base * 1e3:8.2f} ms   "
              f"ratio GD {t_solve / t_base:.1f}x, Bayes {t_solve_b / t_base:.1f}x")


if __name__ == "__main__":
    main()
