"""Benchmark: perturbative correlators under quartic actions, effth vs a naive baseline.

Run:  python benchmarks/bench_wick.py

For each task it prints

* ``cold``: the first call in a fresh Python process (effth and sympy imported beforehand; the
  import time is printed separately) -- this is the figure the bar (< 1 s) refers to;
* ``effth`` and ``naive``: best of 3 in this process, and their ratio.

The naive baseline is what one writes without isomorphism classes: enumerate every one of the
(2m-1)!! pairings, drop vacuum (or disconnected) ones with a networkx connectivity test, build one
sympy term per pairing with its own neuron deltas, and merge equal terms by trying every
relabelling of the dummy sample indices (canonical string).  Both produce the same expression.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from math import factorial

import networkx as nx
import sympy as sp

from effth.algebra.action import QuarticAction, connected_correlator, perturbative_moment
from effth.algebra.tensors import SampleSum, expand_sample_sums
from effth.algebra.wick.counting import collapse_neurons
from effth.algebra.wick.pairings import enumerate_pairings

MU = sp.symbols("mu1:5")
I = sp.symbols("i1:5", integer=True)
A = sp.symbols("alpha1:5")

TASKS = {
    "ch1 connected 4-pt (1.78)": ("ch1", "connected", 4),
    "ch1 two-point O(eps) (1.74)": ("ch1", "moment", 2),
    "ch4 connected 4-pt (4.48)": ("ch4", "connected", 4),
    "ch4 two-point O(v) (4.47)": ("ch4", "moment", 2),
}


def _externals(conv, k):
    return list(MU[:k]) if conv == "ch1" else list(zip(I[:k], A[:k]))


def run_effth(task):
    conv, what, k = TASKS[task]
    act = QuarticAction(conv)
    fn = connected_correlator if what == "connected" else perturbative_moment
    return fn(act, _externals(conv, k), order=1)


def run_naive(task):
    conv, what, k = TASKS[task]
    act = QuarticAction(conv)
    ext = [("x", j) for j in range(k)]
    legs = [("v", 0, leg) for leg in range(4)]
    labels = dict(zip(ext, MU[:k] if conv == "ch1" else A[:k]))
    dummies = [act.dummy_index(j + 1) for j in range(4)]
    labels.update(zip(legs, dummies))
    trace = [(legs[0], legs[1]), (legs[2], legs[3])] if conv == "ch4" else []
    free = dict(zip(ext, I[:k])) if conv == "ch4" else {}
    terms: dict = {}
    zeroth = sp.S.Zero
    for p in enumerate_pairings(ext):  # Gaussian part
        if what == "moment":
            t = sp.Mul(*[act.propagator(labels[a], labels[b]) for a, b in p])
            if conv == "ch4":
                t *= collapse_neurons(p, [], free, act.n)
            zeroth += t
    for p in enumerate_pairings(ext + legs):
        g = nx.Graph()
        g.add_nodes_from(ext + legs)
        g.add_edges_from(p)
        g.add_edges_from((legs[a], legs[b]) for a in range(4) for b in range(a + 1, 4))
        comps = list(nx.connected_components(g))
        if any(not (set(c) & set(ext)) for c in comps):
            continue  # vacuum bubble
        if what == "connected" and len(comps) > 1:
            continue
        body = act.vertex_tensor(*dummies) * sp.Mul(*[act.propagator(labels[a], labels[b]) for a, b in p])
        nfac = collapse_neurons(p, trace, free, act.n) if conv == "ch4" else sp.S.One
        # canonical form under relabelling of the dummies
        best = None
        for perm in itertools.permutations(dummies):
            cand = body.xreplace(dict(zip(dummies, perm)))
            key = sp.srepr(cand)
            if best is None or key < best[0]:
                best = (key, cand)
        key = (best[0], sp.srepr(nfac))
        if key in terms:
            terms[key][2] += 1
        else:
            terms[key] = [best[1], nfac, 1]
    coeff = act.vertex_coefficient
    out = zeroth
    for body, nfac, mult in terms.values():
        out += mult * coeff * nfac * SampleSum(body, *dummies)
    return out


def _best_of(fn, task, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        sp.core.cache.clear_cache()
        t0 = time.perf_counter()
        fn(task)
        best = min(best, time.perf_counter() - t0)
    return best


def _cold(task) -> tuple[float, float]:
    code = (
        "import time; t0=time.perf_counter();"
        "import sympy, effth.algebra.action; t1=time.perf_counter();"
        "import benchmarks.bench_wick as b; t2=time.perf_counter(); b.run_effth(%r); t3=time.perf_counter();"
        "print(t1-t0, t3-t2)" % task
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imp, call = map(float, r.stdout.split())
    return imp, call


def _check_equal(task):
    a, b = run_effth(task), run_naive(task)
    subs = {s: 0 for s in MU + A}
    ea = expand_sample_sums(a, [0, 1]).xreplace(subs)
    eb = expand_sample_sums(b, [0, 1]).xreplace(subs)
    return sp.expand(ea - eb) == 0


def main() -> None:
    print(f"python {sys.version.split()[0]}, sympy {sp.__version__}, networkx {nx.__version__}")
    print(f"{'task':32} {'import':>8} {'cold':>8} {'effth':>9} {'naive':>9} {'ratio':>7}  same")
    for task in TASKS:
        imp, cold = _cold(task)
        te = _best_of(run_effth, task)
        tn = _best_of(run_naive, task)
        same = _check_equal(task)
        print(f"{task:32} {imp:8.3f} {cold:8.4f} {te:9.4f} {tn:9.4f} {tn / te:7.1f}  {same}")
    # general order, for information
    for conv, what, k in [("ch1", "connected", 4), ("ch4", "moment", 2)]:
        t0 = time.perf_counter()
        fn = connected_correlator if what == "connected" else perturbative_moment
        e = fn(QuarticAction(conv), _externals(conv, k), order=2)
        print(f"order 2: {conv} {what} {k}-pt: {time.perf_counter() - t0:.3f} s, {len(e.args)} terms"
              f" (out of {factorial(4 * 2 + k) // (2 ** (4 + k // 2) * factorial(4 + k // 2))} pairings)")


if __name__ == "__main__":
    main()
