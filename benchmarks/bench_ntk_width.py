"""Cost and statistical efficiency of the NTK width study (``tests/pdlt/ntk_width_study.py``).

For the study's configuration (depth 3, two inputs, ``order=3``) and each width, times
:func:`effth.simulation.simulate_ntk_ensemble` for ``outputs`` = 2 (the baseline), 3 and 4
selected output neurons in this process, and prints per configuration the CPU seconds per 10^3
networks and, per statistic, the *efficiency ratio* (SE^2 x cost) relative to the 2-output
baseline (< 1: more output pairs pay for themselves).  Use ``OPENBLAS_NUM_THREADS=1``.

    python benchmarks/bench_ntk_width.py [--act tanh] [--widths 64 256] [--size 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from effth.arch import MLP
from effth.simulation import simulate_ntk_ensemble

STATS = ("H", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U")


def measure(act: str, n: int, m: int, size: int) -> tuple[float, dict[str, float]]:
    X = np.array([[1.0, 0.0], [0.6, 0.8]]) * np.sqrt(2.0)
    net = MLP(act, depth=3, widths=n, c_w=1.0, c_b=0.0, n_out=m)
    c0 = time.process_time()
    st = simulate_ntk_ensemble(net, X, networks=size, seed=0, order=3, outputs=range(m))
    cost = (time.process_time() - c0) / size * 1e3
    return cost, {k: float(np.mean(st.err[k] ** 2)) for k in STATS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--act", default="tanh")
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--size", type=int, default=2000)
    a = ap.parse_args()
    for n in a.widths:
        base_cost, base_var = measure(a.act, n, 2, a.size)
        print(f"width {n}: outputs=2 baseline {base_cost:.2f} CPU s / 1e3 networks")
        for m in (3, 4):
            cost, var = measure(a.act, n, m, a.size)
            ratios = " ".join(f"{k}:{var[k] * cost / (base_var[k] * base_cost):.2f}" for k in STATS)
            print(f"  outputs={m}: {cost:.2f} CPU s / 1e3 (x{cost / base_cost:.2f}); efficiency ratio {ratios}")


if __name__ == "__main__":
    main()
