"""The full NTK hierarchy (Theta, H1, A, B, D, F, P, Q, R, S, T, U; PDLT ch. 8, 11, ∞) on N inputs.

Times ``effth.ntk_flow`` (all statistics, depth 5, tanh and GELU, unit-scale random inputs) for
several N, with the atom tables (:class:`effth.numerics.atom_tables.AtomTables`) timed on their
own, and runs the reference evaluator of the atom tables (``method="grid"``: one tensor-product
grid per subset of samples) in the same process where it can (it needs more than its node cap for
four distinct unit-scale samples, i.e. from N = 4 on): the ratio and the largest difference of
every tensor, relative to the tensor's scale, are printed.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_ntk_hierarchy.py`` (and without the
variable) from the repository root.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import time
import warnings
from typing import ClassVar

import numpy as np
from _timing import best

import effth as et
from effth.errors import DomainError
from effth.numerics.atom_tables import AtomTables

nf_mod = importlib.import_module("effth.pdlt.ntk.ntk_flow")   # the module (the package exports the function)


class _Timed(AtomTables):
    """AtomTables that add the time of their table evaluations to a shared clock."""

    clock: ClassVar[list] = [0.0]

    def tables(self, patterns):
        t = time.perf_counter()
        try:
            return super().tables(patterns)
        finally:
            _Timed.clock[0] += time.perf_counter() - t


def run(net, X, method: str = "shared"):
    """ntk_flow with the atom tables of the given method; (seconds, atom seconds, result)."""
    cls = _Timed if method == "shared" else functools.partial(_Timed, method=method)
    saved = nf_mod.AtomTables
    nf_mod.AtomTables = cls
    _Timed.clock[0] = 0.0
    try:
        t, res = best(lambda: nf_mod.ntk_flow(net, X), 1, result=True)
    finally:
        nf_mod.AtomTables = saved
    return t, _Timed.clock[0], res


def compare(a, b) -> float:
    """Largest |a - b| over every NTK tensor and layer, relative to the tensor's largest entry."""
    return max(float(np.max(np.abs(a.tensors[s] - b.tensors[s])) / max(np.max(np.abs(b.tensors[s])), 1e-300))
               for s in b.tensors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3,4,8,12,16")
    ap.add_argument("--acts", default="tanh,gelu")
    ap.add_argument("--depth", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(v) for v in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    Xall = rng.standard_normal((max(sizes), 4))
    t = time.perf_counter()
    nf_mod.ntk_flow(et.MLP("tanh", depth=2), Xall[:2])             # derivations, once per process
    print(f"derivation of the NTK-hierarchy steps (once per process): {time.perf_counter() - t:.1f} s")
    for a in args.acts.split(","):
        net = et.MLP(a, depth=args.depth)
        for N in sizes:
            X = Xall[:N]
            with warnings.catch_warnings():
                warnings.simplefilter("error")                     # an AccuracyWarning fails the run
                t_new, t_atoms, new = run(net, X)
            line = (f"{a:5s} N = {N:2d}, depth {args.depth}: {t_new:7.2f} s "
                    f"(atom tables {t_atoms:6.2f} s), table error {new.table_error.max():.1e}")
            try:
                t_old, t_old_atoms, old = run(net, X, "grid")
                line += (f"; grid reference {t_old:7.2f} s (atom tables {t_old_atoms:6.2f} s): ratio "
                         f"{t_old / t_new:.1f}x (atoms {t_old_atoms / max(t_atoms, 1e-9):.1f}x), "
                         f"max relative difference {compare(new, old):.1e}")
            except DomainError as exc:
                line += f"; grid reference fails ({str(exc)[:60]}...)"
            print(line, flush=True)


if __name__ == "__main__":
    main()
