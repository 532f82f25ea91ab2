"""Benchmark of the O(1/n) trained prediction (PDLT §∞.2): cost against the number of training
points.

Two parts, reported separately:

* ``contract``: :func:`~effth.pdlt.finite_width_mean` from given output-layer
  statistics (random tensors with the right symmetries), N_A training inputs and one test input:
  the projectors in the eigenbasis of the training NTK and every contraction of (∞.155)-(∞.160).
  Baseline in the same process: the same mean with the projectors materialized from their
  definitions, X_II and X_III as dense inverses of the N_A^2 x N_A^2 and N_A^3 x N_A^3 Kronecker
  sums (the route that does not scale), for N_A up to 6.  Ratio: baseline / effth.
* ``end to end``: the O(1/n) mean on a depth-5 MLP (tanh; ``--act`` for others) with N_A training and N_A test inputs,
  whose cost is that of :func:`~effth.ntk_flow` on the N_A + N_B inputs restricted to the entries
  with at most one test input (``n_train=N_A, max_test=1``).  Baseline in the same process: the
  full flow (every entry) for N_A up to ``--full-up-to``.  Bar: 20 + 20 inputs "in seconds".
  Second baseline, for tanh: the same restricted mean with the compiled atom kernels switched
  off (``EFFTH_FUSED=0``: the NumPy path) for N_A up to ``--numpy-up-to``.

* ``covariance`` (``--covariance N_A``, repeatable): ``predict(..., widths=64)`` on the same
  network, its mean and then its covariance (read on first use).  Baseline in the same process:
  the covariance without the mean's atoms (``atom_cache`` emptied), i.e. its ``max_test=2`` flow
  integrating every subset again.  Ratio: baseline / effth for the covariance.

Options: ``--train`` (repeatable), ``--e2e`` (repeatable N_A for the end-to-end part),
``--repeat``, ``--rtol``, ``--full-up-to``, ``--numpy-up-to``, ``--act`` (repeatable),
``--covariance`` (repeatable).  Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_finite_width.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import effth as et
from _timing import best
from effth.pdlt.learning.finite_width import finite_width_mean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "theories" / "pdlt"))
from _trained_reference import dense_projectors, symmetric_statistics  # noqa: E402


def dense_mean(T, y, P, eta):
    """The dNTK and ddNTK parts with dense projectors (the baseline route)."""
    Z = dense_projectors(T["Theta"][:P, :P], eta)
    W = (np.einsum("di,ef->idef", y, y @ y.T + T["K"][:P, :P])
         + np.einsum("ei,fd->idef", y, T["K"][:P, :P]) + np.einsum("fi,de->idef", y, T["K"][:P, :P]))
    R = T["R"][:, :P, :P, :P]
    out = np.einsum("Dabc,abcdef,idef->Di", R, Z["IB"], W)
    out += np.einsum("Dabc,abcdef,idef->Di", T["S"][:, :P, :P, :P], Z["IIB"], W)
    out += np.einsum("Dabc,abcd,di->Di", T["P"][:, :P, :P, :P], Z["B"], y)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, action="append")
    ap.add_argument("--e2e", type=int, action="append")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rtol", type=float, default=1e-8, help="ntk_flow accuracy [1e-8]")
    ap.add_argument("--full-up-to", type=int, default=8, help="largest N_A for the full-flow baseline")
    ap.add_argument("--numpy-up-to", type=int, default=10,
                    help="largest N_A for the NumPy-path baseline (compiled atom kernels off) [10]")
    ap.add_argument("--covariance", type=int, action="append",
                    help="N_A (= N_B) of the covariance part (repeatable; none by default)")
    ap.add_argument("--act", action="append",
                    help="activations of the end-to-end part (repeatable) [tanh]; erf's atoms are "
                         "closed forms, tanh's shared-node quadrature")
    a = ap.parse_args(argv)
    sizes = a.train or [2, 4, 6, 10, 20, 40]
    rng = np.random.default_rng(0)
    print("contract: finite_width_mean from given statistics (one test input)")
    print(f"{'N_A':>5} {'effth s':>10} {'dense s':>10} {'ratio':>8}")
    for P in sizes:
        T = symmetric_statistics(P + 1, rng)
        y = rng.standard_normal((P, 1))
        eta = 1.0 / np.linalg.eigvalsh(T["Theta"][:P, :P]).max()
        t = best(lambda: finite_width_mean(T, y, n_train=P, eta=eta), a.repeat)
        if P <= 6:
            td = best(lambda: dense_mean(T, y, P, eta), a.repeat)
            print(f"{P:5d} {t:10.4f} {td:10.4f} {td / t:8.1f}")
        else:
            print(f"{P:5d} {t:10.4f} {'-':>10} {'-':>8}")
    ts = np.array([best(lambda: finite_width_mean(symmetric_statistics(P + 1, rng), rng.standard_normal((P, 1)),
                                                  n_train=P, algorithm="gradient_flow"), 1) for P in sizes])
    if len(sizes) > 2:
        slope = np.polyfit(np.log(sizes[-3:]), np.log(ts[-3:]), 1)[0]
        print(f"fitted cost exponent in N_A over the three largest sizes: {slope:.2f}")
    for act in a.act or ["tanh"]:
        _end_to_end(a, act, rng)
        if a.covariance:
            _covariance(a, act, rng)


def _end_to_end(a, act: str, rng) -> None:
    import os

    from effth.activations import get_activation
    from effth.numerics._tanh_fused import applies

    e2e = a.e2e or [2, 4, 8]
    compiled = applies(get_activation(act), [(0,)], 3)
    print(f"end to end: the O(1/n) mean on a depth-5 {act} MLP, N_A training + N_A test inputs, "
          f"rtol={a.rtol:g}")
    print("  effth: ntk_flow(n_train=N_A, max_test=1) + finite_width_mean; baselines: the full "
          "ntk_flow (every entry) + finite_width_mean" + ("; the same with the compiled atom "
                                                          "kernels off (EFFTH_FUSED=0)" if compiled else ""))
    print(f"{'N_A':>5} {'effth s':>10} {'full s':>10} {'ratio':>8}" + (f" {'numpy s':>10} {'ratio':>8}"
                                                                      if compiled else ""))
    net = et.MLP(act, depth=5, c_w=1.0, c_b=0.0)
    et.ntk_flow(net, rng.standard_normal((4, 4)))          # compile the steps once (not timed)
    times = []
    for P in e2e:
        X = rng.standard_normal((2 * P, 4))
        y = rng.standard_normal((P, 1))

        def mean(**kw):
            nf = et.ntk_flow(net, X, rtol=a.rtol, **kw)
            return finite_width_mean(nf, y, n_train=P, algorithm="gradient_flow", widths=64)

        t = best(lambda: mean(n_train=P, max_test=1), 1)
        times.append(t)
        row = f"{P:5d} {t:10.2f}"
        if P <= a.full_up_to:
            tf = best(lambda: mean(), 1)
            row += f" {tf:10.2f} {tf / t:8.1f}"
        else:
            row += f" {'-':>10} {'-':>8}"
        if compiled and P <= a.numpy_up_to:
            old = os.environ.get("EFFTH_FUSED")
            os.environ["EFFTH_FUSED"] = "0"
            try:
                tn = best(lambda: mean(n_train=P, max_test=1), 1)
            finally:
                if old is None:
                    del os.environ["EFFTH_FUSED"]
                else:
                    os.environ["EFFTH_FUSED"] = old
            row += f" {tn:10.2f} {tn / t:8.1f}"
        elif compiled:
            row += f" {'-':>10} {'-':>8}"
        print(row)
    if len(e2e) > 2:
        slope = np.polyfit(np.log(e2e[-3:]), np.log(times[-3:]), 1)[0]
        print(f"fitted cost exponent in N_A (= N_B) over the three largest sizes: {slope:.2f}")


def _covariance(a, act: str, rng) -> None:
    import effth.pdlt.learning.prediction as learning

    print(f"covariance: predict(widths=64) on a depth-5 {act} MLP, N_A training + N_A test inputs; "
          "the mean, then the covariance reusing the mean's atoms; baseline: the covariance "
          "without them")
    print(f"{'N_A':>5} {'mean s':>10} {'cov s':>10} {'cov base s':>11} {'ratio':>8}")
    net = et.MLP(act, depth=5, c_w=1.0, c_b=0.0)
    keep = learning._ATOM_CACHE_BYTES
    for P in a.covariance:
        X = rng.standard_normal((2 * P, 4))
        y = rng.standard_normal(P)
        times = []
        for cap in (keep, -1):                 # -1: the snapshots are dropped after the mean
            learning._ATOM_CACHE_BYTES = cap
            try:
                tm, p = best(lambda: et.predict(net, X[:P], y, X[P:], widths=64), 1, result=True)
                p.value("mean1")
                times.append((tm, best(lambda: p.value("covariance1"), 1)))
            finally:
                learning._ATOM_CACHE_BYTES = keep
        (tm, tc), (_, tb) = times
        print(f"{P:5d} {tm:10.2f} {tc:10.2f} {tb:11.2f} {tb / tc:8.2f}")


if __name__ == "__main__":
    main()
