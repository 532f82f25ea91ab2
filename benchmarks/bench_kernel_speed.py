"""Speed of the infinite-width kernels K and Θ through the layer flows' ``statistics=`` path.

Ratios against a plain NumPy loop of the same closed-form recursions, run in the same process:
PDLT (4.118) and (9.5) (side by side in (10.44)–(10.45)) with Williams' erf kernel and the
arc-cosine kernels of ReLU,

    K' = C_b + C_W <σσ>_K,   Θ' = λ_b + λ_W <σσ>_K + C_W <σ'σ'>_K Θ,

on full N×N matrices.  Also: tanh (no closed form: shared-node quadrature), ReLU
``ntk_flow(statistics=["Theta"])`` on 100 inputs at depth 10, and ``predict`` (tanh, 100 + 100
inputs, depth 10) against the recursion ``output_kernels`` had before it called the flows
(batched ``gaussian_expectation`` over all pairs).

Run:  OPENBLAS_NUM_THREADS=1 python benchmarks/bench_kernel_speed.py [--quick]
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

os.environ.setdefault("EFFTH_PROGRESS", "0")

import effth as et  # noqa: E402
from _timing import best  # noqa: E402
from effth.numerics import gaussian_expectation  # noqa: E402
from effth.pdlt import predict  # noqa: E402


def plain(act, X, L, cw, cb, lb, lw):
    """The closed-form recursion in plain NumPy (full N x N matrices)."""
    G = X @ X.T / X.shape[1]
    K, T = cb + cw * G, lb + lw * G
    for _ in range(L - 1):
        d = np.diag(K)
        if act == "erf":
            s = np.sqrt(1 + 2 * d)
            ss = 2 / np.pi * np.arcsin(2 * K / np.outer(s, s))
            dd = 4 / np.pi / np.sqrt(np.outer(1 + 2 * d, 1 + 2 * d) - 4 * K * K)
        else:
            sd = np.sqrt(d)
            rho = np.clip(K / np.outer(sd, sd), -1, 1)
            np.fill_diagonal(rho, 1.0)
            t = np.arccos(rho)
            ss = np.outer(sd, sd) * (np.sin(t) + (np.pi - t) * rho) / (2 * np.pi)
            dd = (np.pi - t) / (2 * np.pi)
        K, T = cb + cw * ss, lb + lw * ss + cw * dd * T
    return K, T


def old_output_kernels(net, X, lb, lw, rtol=1e-10):
    """output_kernels before it called the flows: its own recursion, gaussian_expectation per table."""
    def tables(K, act):
        N = K.shape[0]
        ss, dd = np.empty((N, N)), np.empty((N, N))
        diag = np.diag(K).reshape(N, 1, 1)
        ss[np.diag_indices(N)] = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], diag, act, rtol=rtol)
        dd[np.diag_indices(N)] = gaussian_expectation([(0, "sigma", 1), (0, "sigma", 1)], diag, act, rtol=rtol)
        a, b = np.triu_indices(N, 1)
        Kb = np.empty((len(a), 2, 2))
        Kb[:, 0, 0], Kb[:, 1, 1] = K[a, a], K[b, b]
        Kb[:, 0, 1] = Kb[:, 1, 0] = K[a, b]
        ss[a, b] = ss[b, a] = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], Kb, act, rtol=rtol)
        dd[a, b] = dd[b, a] = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], Kb, act, rtol=rtol)
        return ss, dd

    G = X @ X.T / X.shape[1]
    K, T = net.c_b_at(1) + net.c_w_at(1) * G, lb + lw * G
    for layer in range(1, net.depth):
        ss, dd = tables(K, net.act)
        T = lb + lw * ss + net.c_w_at(layer + 1) * dd * T
        K = net.c_b_at(layer + 1) + net.c_w_at(layer + 1) * ss
    return K, T


def main(quick: bool = False) -> None:
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print("K + Theta: ntk_flow(net, X, statistics=('Theta',)) vs plain NumPy loop (same process)")
    print(f"{'act':6s} {'L':>3s} {'N':>5s} {'effth [s]':>10s} {'plain [s]':>10s} {'ratio':>6s} "
          f"{'K-only [s]':>10s} {'max rel diff':>12s}")
    cw = {"erf": 1.0, "relu": 2.0}
    for act in ("erf", "relu"):
        for L in (8, 20):
            for N in ((200,) if quick else (200, 1000)):
                X = rng.normal(size=(N, 10))
                net = et.MLP(act, depth=L, c_w=cw[act], c_b=0.1 if act == "erf" else 0.0)
                rep = 1 if N == 1000 else 3
                te = best(lambda: et.ntk_flow(net, X, lambda_b=0.5, lambda_w=1.0,
                                              statistics=("Theta",)), rep)
                tk = best(lambda: et.flow(net, X, statistics=("K",)), rep)
                tp = best(lambda: plain(act, X, L, net.c_w_at(2), net.c_b_at(2), 0.5, 1.0), rep)
                nf = et.ntk_flow(net, X, lambda_b=0.5, lambda_w=1.0, statistics=("Theta",))
                K, T = plain(act, X, L, net.c_w_at(2), net.c_b_at(2), 0.5, 1.0)
                diff = max(np.max(np.abs(nf["Theta"][-1] - T)) / np.max(np.abs(T)),
                           np.max(np.abs(nf.kernel.K[-1] - K)) / np.max(np.abs(K)))
                print(f"{act:6s} {L:3d} {N:5d} {te:10.3f} {tp:10.3f} {te / tp:6.2f} {tk:10.3f} {diff:12.1e}")
    X = rng.normal(size=(200, 10))
    net = et.MLP("tanh", depth=10, c_w=1.0)
    t = best(lambda: et.ntk_flow(net, X, statistics=("Theta",)), 1)
    print(f"tanh L=10 N=200 K+Theta (quadrature, rtol 1e-8): {t:.3f} s")
    X = rng.normal(size=(100, 10))
    net = et.MLP("relu", depth=10, c_w=2.0)
    t = best(lambda: et.ntk_flow(net, X, statistics=["Theta"]), 3)
    print(f"relu L=10 N=100 ntk_flow(statistics=['Theta']): {t:.3f} s")
    Xa, Xb = rng.normal(size=(100, 10)), rng.normal(size=(100, 10))
    y = np.sin(Xa[:, 0])
    net = et.MLP("tanh", depth=10, c_w=1.0)
    t_new = best(lambda: predict(net, Xa, y, Xb, method="gd"), 1)
    t_old = best(lambda: old_output_kernels(net, np.vstack([Xa, Xb]), 1.0, 1.0), 1)
    K0, T0 = old_output_kernels(net, np.vstack([Xa, Xb]), 1.0, 1.0)
    K1, T1 = et.output_kernels(net, np.vstack([Xa, Xb]))
    d = max(np.max(np.abs(K1 - K0)) / np.max(np.abs(K0)), np.max(np.abs(T1 - T0)) / np.max(np.abs(T0)))
    print(f"predict tanh 100+100 L=10 (gd): {t_new:.3f} s; the old kernel recursion alone: "
          f"{t_old:.3f} s; K, Theta max rel diff {d:.1e}")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
