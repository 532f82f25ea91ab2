"""Networks per second of the three Monte-Carlo simulators, ``backend="numpy"`` against
``backend="jax"``, and the NumPy default against the pre-backend code.

For :func:`effth.simulation.simulate_ensemble`, :func:`effth.simulation.simulate_ntk_ensemble`
and :func:`effth.simulation.train_ensemble` at a few sizes, in one process, interleaved (one call
of each per round, best of ``--repeat`` rounds):

* ``numpy``: the default path of this checkout;
* ``baseline``: the same call on the simulators as they were before the backends were added
  (commit ``98fd2f8^``, exported with ``git archive`` into a temporary folder, or ``--baseline
  PATH`` to a folder holding an ``effth`` package), imported into this process under its own
  ``sys.modules`` entries, swapped in around each of its calls.  Printed as the speed ratio
  ``baseline time / numpy time`` (1: unchanged; the bar is >= 0.95), with a bitwise check that
  both give the same numbers;
* ``jax host``: ``backend="jax"`` with ``draws="host"`` (the same networks as NumPy: its
  statistics must equal NumPy's to 1e-12, checked and printed), timed after a first call that
  compiles (its time printed apart);
* ``jax device``: ``draws="device"`` (``jax.random``; other networks, no comparison), for the two
  simulators that take it.

JAX runs on whatever device it finds (the CPU here unless an accelerator is visible); float64
throughout.  ``uptime``'s load is printed before and after: on a shared machine the figures move
with it.  Run as ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_backends.py`` (add ``--quick``
for one small size each, ``--no-jax`` for the NumPy default against the baseline alone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

BASELINE_COMMIT = "98fd2f8^"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load() -> str:
    return open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"


# ------------------------------------------------------------------ two effth in one process
class Versions:
    """Two copies of ``effth`` in one process: each keeps its own ``sys.modules`` entries, and
    :meth:`use` swaps them (lazy imports inside effth then resolve to the active copy)."""

    def __init__(self) -> None:
        self.mods: dict = {"numpy": {}, "baseline": {}}
        self.active = "numpy"

    @staticmethod
    def _pop() -> dict:
        return {k: sys.modules.pop(k) for k in list(sys.modules) if k == "effth" or k.startswith("effth.")}

    def use(self, name: str) -> None:
        if name != self.active:
            self.mods[self.active].update(self._pop())
            sys.modules.update(self.mods[name])
            self.active = name

    def load_baseline(self, path: str) -> None:
        import effth  # noqa: F401  (this checkout first)
        self.mods["numpy"].update(self._pop())
        sys.path.insert(0, path)
        try:
            import effth as base
            import effth.simulation  # noqa: F401
        finally:
            sys.path.remove(path)
        assert os.path.realpath(base.__file__).startswith(os.path.realpath(path)), base.__file__
        self.active = "baseline"
        self.use("numpy")


def _export_baseline(dest: str) -> str | None:
    try:
        archive = subprocess.run(["git", "-C", HERE, "archive", BASELINE_COMMIT, "effth"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"baseline {BASELINE_COMMIT} not reachable ({exc}); the NumPy default is timed alone")
        return None
    return dest


# ------------------------------------------------------------------------------ the cases
def _rel(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = ~np.isnan(a)
    if not np.array_equal(ok, ~np.isnan(b)):
        return float("inf")
    scale = max(float(np.abs(a[ok]).max(initial=0.0)), 1e-300)
    return float(np.abs(a[ok] - b[ok]).max(initial=0.0)) / scale


def _arrays(name: str, res) -> list:
    """The numbers a result carries, in a fixed order (for the comparisons)."""
    if name == "ensemble":
        from effth.simulation.ensemble import STAT_NAMES
        return [res.value(s, layer) for layer in res.layers for s in STAT_NAMES]
    if name == "ntk":
        return [res.stats[k] for k in sorted(res.stats)]
    return [getattr(res, k) for k in ("f_train", "f_test", "loss")]


def cases(quick: bool) -> list:
    """``(simulator, label, networks, call(backend=..., draws=...))``; ``call`` imports effth
    when called, so it runs on the active copy."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 4))
    y = rng.normal(size=8)
    out = []
    ens = [(64, 2000), (256, 400)] if not quick else [(64, 500)]
    for width, nets in ens:
        def call(width=width, nets=nets, **kw):
            from effth.arch import MLP
            from effth.simulation import simulate_ensemble
            net = MLP("tanh", depth=3, widths=width, c_w=1.5, c_b=0.1)
            return simulate_ensemble(net, X, networks=nets, seed=3, batch=250, **kw)
        out.append(("ensemble", f"tanh depth 3 width {width}, 8 inputs", nets, call))
    ntk = [(16, 3, 400), (64, 1, 1000)] if not quick else [(16, 3, 100)]
    for width, order, nets in ntk:
        def call(width=width, order=order, nets=nets, **kw):
            from effth.arch import MLP
            from effth.simulation import simulate_ntk_ensemble
            net = MLP("tanh", depth=3, widths=width, n_out=2)
            return simulate_ntk_ensemble(net, X[:3], networks=nets, seed=2, order=order, batch=100, **kw)
        out.append(("ntk", f"tanh depth 3 width {width}, order {order}, 3 inputs", nets, call))
    trn = [(32, 100, 50), (128, 100, 20)] if not quick else [(32, 20, 10)]
    for width, updates, nets in trn:
        def call(width=width, updates=updates, nets=nets, **kw):
            kw.pop("draws", None)
            from effth.arch import MLP
            from effth.simulation import train_ensemble
            net = MLP("tanh", depth=3, widths=width)
            return train_ensemble(net, X, y, eta=0.1, updates=updates, networks=nets, seed=4,
                                  X_test=X[:3], record_every=updates, **kw)
        out.append(("train", f"tanh depth 3 width {width}, {updates} GD steps, 8 inputs", nets, call))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="folder holding the pre-backend effth package")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-jax", action="store_true", help="numpy against the baseline only")
    args = ap.parse_args()
    print(f"load {_load()} at start; best of {args.repeat} interleaved rounds; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    vers = Versions()
    tmp = tempfile.TemporaryDirectory()
    base = args.baseline or _export_baseline(tmp.name)
    if base is not None:
        vers.load_baseline(base)
    from effth.simulation._backend import has_jax
    jax_ok = has_jax() and not args.no_jax
    if jax_ok:
        import jax
        print(f"JAX {jax.__version__} on {jax.devices()[0].platform}")
    else:
        print("JAX not installed (or --no-jax): NumPy only")
    failed = False
    for sim, label, nets, call in cases(args.quick):
        fns = {"numpy": lambda call=call: call()}
        if base is not None:
            fns["baseline"] = lambda call=call: call()
        compile_s = {}
        if jax_ok:
            variants = [("jax host", dict(backend="jax"))]
            if sim != "train":
                variants.append(("jax device", dict(backend="jax", draws="device")))
            for key, kw in variants:
                t0 = time.perf_counter()
                call(**kw)                                  # compiles
                compile_s[key] = time.perf_counter() - t0
                fns[key] = lambda call=call, kw=kw: call(**kw)
        times = {k: [] for k in fns}
        res = {}
        for _ in range(args.repeat):
            for key, fn in fns.items():
                vers.use("baseline" if key == "baseline" else "numpy")
                t0 = time.perf_counter()
                res[key] = fn()
                times[key].append(time.perf_counter() - t0)
                vers.use("numpy")
        t = {k: min(v) for k, v in times.items()}
        ref = _arrays(sim, res["numpy"])
        line = [f"{sim:8s} {label}, {nets} networks: numpy {nets / t['numpy']:9.0f} nets/s"]
        if "baseline" in t:
            vers.use("baseline")
            same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ref, _arrays(sim, res["baseline"])))
            vers.use("numpy")
            line.append(f"speed vs pre-backend {t['baseline'] / t['numpy']:.3f} ({'bitwise equal' if same else 'DIFFERENT'})")
            failed |= not same
        for key in ("jax host", "jax device"):
            if key in t:
                s = f"{key} {nets / t[key]:9.0f} nets/s (x{t['numpy'] / t[key]:.2f}, compile {compile_s[key]:.1f} s)"
                if key == "jax host":
                    err = max(_rel(a, b) for a, b in zip(ref, _arrays(sim, res[key])))
                    s += f", max rel. difference from numpy {err:.1e}"
                    failed |= not err <= 1e-12
                line.append(s)
        print("; ".join(line), flush=True)
    print(f"load {_load()} at end")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
