"""Fuzz test of every public entry point: bad values chosen from each parameter's name and
annotation, each call under a time limit and a memory bound.

Entry points are the callables of ``effth.__all__``, ``effth.pdlt.__all__``,
``effth.dmft.__all__`` and ``effth.simulation.__all__``. For each, the bad values come from the
signature (``inspect.signature``): counts get negative, fractional, huge (``10**12``), string and
bool values; real parameters NaN, complex, strings (and negative values where the theory needs
``>= 0``); flags strings such as ``"no"``; inputs and targets NaN, complex, empty, 3-D and
ragged arrays; kernels non-PSD, non-square, NaN and empty matrices; seeds ``-1``, ``1.5`` and
strings; ``net=`` strings; method names that do not exist; duplicated inputs with conflicting
targets.

An outcome is a *finding* when the call

* raises an exception that is not an :class:`effth.EffthError` (a raw ``TypeError``,
  ``IndexError``, ``ValueError`` ... from NumPy or Python internals; Python's own signature
  errors for a call the signature does not bind are not findings);
* refuses only after an allocation hit the memory bound (a ``DomainError`` whose cause is a
  ``MemoryError``: the size was not estimated before allocating);
* runs past the time limit (a hang);
* returns normally with a value that is invalid (only for the entry points with a valid
  baseline call below, where every other argument is valid).

Entry points without a baseline are called with every required argument bad (the symbolic
constructors accept strings as symbols, so acceptance is not a finding there).

The default run draws a few cases per entry point (hypothesis, derandomized) and stays within
the default suite's budget; ``python tests/test_fuzz.py`` runs every (entry point, parameter,
bad value) combination and prints the findings. Tolerated findings are listed, with the reason,
in ``tests/test_fuzz_known.py``.
"""

from __future__ import annotations

import inspect
import itertools
import os
from collections import Counter
import resource
import signal
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import effth as et  # noqa: E402
from effth import dmft, pdlt, simulation  # noqa: E402
from effth.errors import EffthError  # noqa: E402

try:
    from tests.test_fuzz_known import KNOWN
except ImportError:                      # run as a script
    from test_fuzz_known import KNOWN    # type: ignore[no-redef]

TIME_LIMIT_S = 10            # per call
MEMORY_BOUND = 2e9           # effth's own bound ($EFFTH_MAX_BYTES) during the fuzz
ADDRESS_SPACE = 6 * 2**30    # RLIMIT_AS above the current size: an allocation past it is a finding

# ----------------------------------------------------------------------------- valid data
_RNG = np.random.default_rng(11)
X = _RNG.standard_normal((3, 4))
Y = np.array([1.0, -1.0, 0.5])
K3 = X @ X.T / 4 + 0.1 * np.eye(3)
NET = et.MLP("tanh", depth=2, widths=8)
LIN = et.MLP("linear", depth=2, widths=8)
NOT_PSD = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
XD = np.vstack([X, X[:1]])                       # input 0 repeated ...
YC = np.append(Y, Y[0] + 1.0)                    # ... with a conflicting target


def _seeded(width, seed):
    return float(np.random.default_rng(seed).standard_normal(width).mean())


def _fw_tensors():
    return pdlt.ntk_flow(et.MLP("tanh", depth=2), X[:2], n_train=1)


#: a valid call for the main entry points: ``(callable, kwargs)``; every fuzzed argument is
#: replaced in turn, the others stay valid
BASE: dict[str, tuple[Callable, dict]] = {
    "MLP": (et.MLP, dict(activation="tanh", depth=2, widths=8, c_w=1.0, c_b=0.0)),
    "flow": (et.flow, dict(net=NET, X=X, rtol=1e-8)),
    "flow[K1]": (et.flow, dict(K1=K3, depth=2, activation="tanh", c_w=1.0, c_b=0.0)),
    "ntk_flow": (et.ntk_flow, dict(K1=K3, Theta1=K3, depth=2, activation="tanh", statistics=("Theta",),
                                   lambda_b=1.0, lambda_w=1.0)),
    "predict": (et.predict, dict(net=NET, X_train=X, y_train=Y, X_test=X[:1], rtol=1e-10)),
    "predict[K]": (et.predict, dict(K=np.vstack([np.hstack([K3, K3[:, :1]]), np.append(K3[0], 1.1)]),
                                    Theta=np.vstack([np.hstack([K3, K3[:, :1]]), np.append(K3[0], 1.1)]),
                                    y_train=Y, n_train=3, eta=0.5, updates=3, noise=0.0)),
    "log_evidence": (et.log_evidence, dict(K=K3, y_train=Y, noise=0.1)),
    "gaussian_expectation": (et.gaussian_expectation,
                             dict(factors=[(0, "sigma", 0), (1, "sigma", 0)], K=K3[:2, :2],
                                  activation="tanh", rtol=1e-8)),
    "simulate_ensemble": (et.simulate_ensemble, dict(net=NET, X=X, networks=20, seed=0)),
    "simulate_training": (et.simulate_training, dict(X=X, y=Y, depth=2, widths=8, gamma0=0.5, eta=0.1,
                                                     steps=3, seed=0)),
    "train_ensemble": (et.train_ensemble, dict(net=LIN, X=X, y=Y, eta=0.1, updates=2, networks=3,
                                               seed=0)),
    "simulate_ntk_ensemble": (simulation.simulate_ntk_ensemble, dict(net=NET, X=X[:2], networks=4,
                                                                     seed=0, order=1)),
    "simulate_linear_field": (simulation.simulate_linear_field,
                              dict(dim=4, depth=2, nu=1.0, gamma0=0.5, eta=0.1, steps=3, networks=2,
                                   seed=0)),
    "simulate_rule_training": (simulation.simulate_rule_training,
                               dict(X=X, y=Y, depth=2, widths=8, gamma0=0.5, eta=0.1, steps=3,
                                    seed=0)),
    "solve_deep_linear": (dmft.solve_deep_linear, dict(X=X, y=Y, depth=2, gamma0=0.5, eta=0.1, steps=4,
                                                       weight_decay=0.0, tol=1e-10)),
    "solve_two_layer": (dmft.solve_two_layer, dict(X=X[:2], y=Y[:2], gamma0=0.5, eta=0.1, steps=3,
                                                   activation="tanh", nodes=6, quad_tol=None)),
    "solve_monte_carlo": (dmft.solve_monte_carlo, dict(X=X, y=Y, depth=2, gamma0=0.5, eta=0.1, steps=3,
                                                       samples=64, iterations=2, seed=0)),
    "gamma0_series": (dmft.gamma0_series, dict(X=X, y=Y, depth=2, eta=0.1, steps=3, order=2)),
    "solve_random_data": (dmft.solve_random_data, dict(depth=2, gamma0=0.5, eta=0.1, steps=5,
                                                       sigma=0.0, nu=2.0)),
    "learning_rate_sweep": (dmft.learning_rate_sweep, dict(etas=[0.1, 0.2], nus=[1.0], depth=2,
                                                           gamma0=0.5, steps=5)),
    "max_stable_learning_rate": (dmft.max_stable_learning_rate, dict(depth=2, gamma0=0.5, steps=5,
                                                                     tol=0.1)),
    "lazy_entk": (dmft.lazy_entk, dict(kx=K3, activation="relu", depth=2)),
    "solve_rule_forward": (dmft.solve_rule_forward, dict(X=X, y=Y, depth=2, gamma0=0.5, eta=0.1,
                                                         steps=3, samples=200, batches=2, seed=0,
                                                         jitter=1e-10)),
    "solve_rule_two_layer": (dmft.solve_rule_two_layer, dict(X=X, y=Y, gamma0=0.5, eta=0.1, steps=3,
                                                             samples=200, batches=2, seed=0)),
    "linear_model": (pdlt.linear_model, dict(features_train=X, y_train=Y, features_test=X[:1],
                                             ridge=0.1)),
    "bayes_posterior": (pdlt.bayes_posterior, dict(net=NET, X_train=X[:2], y_train=Y[:2],
                                                   X_test=X[2:], widths=8)),
    "sweep": (et.sweep, dict(func=_seeded, grid={"width": [2, 3]}, seed=0, scheduler="serial")),
    "nearly_kernel_predict": (pdlt.nearly_kernel_predict,
                              dict(k=K3, mu=np.zeros((3, 3, 3)), y_train=Y[:2], n_train=2)),
}

# ----------------------------------------------------------------------------- bad values
COUNTS = {"steps", "networks", "samples", "n_samples", "depth", "hidden_layers", "widths",
          "iterations", "nodes", "max_iter", "updates", "batches", "replicas", "n_grid", "dim",
          "order", "n_train", "max_test", "n_out", "batch", "record_every", "windows", "average"}
NONNEG = {"eta", "noise", "ridge", "jitter", "weight_decay", "c_w", "c_b", "lambda_b", "lambda_w",
          "temperature", "tol", "rtol", "damping", "sigma", "nu", "alpha", "quad_tol"}
REALS = NONNEG | {"gamma0", "rho", "momentum", "signal", "gamma", "xi", "diverge_at"}
INPUTS = {"X", "X_train", "X_test", "features_train", "features_test"}
TARGETS = {"y", "y_train", "y_test"}
KERNELS = {"K", "K1", "kernel", "kx", "Theta", "Theta1", "k"}
NAMES = {"method", "rule", "closure", "responses", "parameterization", "scheduler", "loss",
         "test_loss", "algorithm", "quadrature_rule", "activation"}


def bad_values(name: str, param: inspect.Parameter | None = None) -> dict[str, Any]:
    """Unambiguously invalid values for the parameter ``name`` (label -> value)."""
    ann = "" if param is None else str(param.annotation).replace(" ", "")
    out: dict[str, Any] = {}
    if name == "seed":
        out.update({"negative": -1, "float": 1.5, "string": "abc"})
    elif name == "net":
        out.update({"string": "tanh", "int": 3})
    elif name == "func":
        out.update({"not callable": 3})
    elif name in COUNTS or ann in ("int", "int|None"):
        out.update({"negative": -3, "fraction": 2.5, "string": "abc", "huge": 10**12, "bool": True})
    elif name in REALS or ann in ("float", "float|None"):
        out.update({"NaN": float("nan"), "complex": 1 + 1j, "string": "abc", "bool": True})
        if name in NONNEG:
            out["negative"] = -1.0
    elif ann in ("bool", "bool|None") or (param is not None and isinstance(param.default, bool)):
        out.update({"string for a bool": "no", "int for a bool": 1})
    elif name in INPUTS:
        out.update({"NaN": np.full_like(X, np.nan), "complex": X + 1j, "empty": X[:0], "3-D": X[None],
                    "string": "abc"})
    elif name in TARGETS:
        out.update({"NaN": np.full(3, np.nan), "complex": Y + 1j, "wrong length": Y[:1],
                    "string": "abc"})
    elif name in KERNELS:
        out.update({"not PSD": NOT_PSD, "NaN": np.full((3, 3), np.nan), "not square": X,
                    "empty": np.zeros((0, 0)), "string": "abc"})
    elif name in NAMES:
        out.update({"unknown name": "nonsense", "int": 7})
    return out


# ----------------------------------------------------------------------------- entry points
def entry_points() -> dict[str, Callable]:
    """Every public callable, once (by identity), under its first public name."""
    seen: dict[int, tuple[str, Callable]] = {}
    for mod in (et, pdlt, dmft, simulation):
        for n in mod.__all__:
            obj = getattr(mod, n)
            if not callable(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
                continue
            if isinstance(obj, type) and n not in ("MLP", "CNN"):
                continue              # result classes: built by the functions, not by users
            seen.setdefault(id(obj), (n, obj))
    return {n: o for n, o in seen.values() if n not in SKIP}


#: not fuzzed: global state (printing, the activation registry) or files (the report), and the
#: symbolic information expansions, whose first call takes ~8 s of CPU whatever the arguments
#: (their bad input is checked by tests/pdlt/test_information.py)
SKIP = {"init_printing", "register_activation", "run_report", "entropy_expansion",
        "mutual_information_expansion", "tripartite_information_expansion"}


class Hang(Exception):
    pass


def _alarm(signum, frame):  # pragma: no cover - only on a hang
    raise Hang()


#: outcomes of every call so far, for the script's summary
TALLY: Counter = Counter()


def outcome(fn: Callable, kwargs: dict, *, accept_is_finding: bool) -> str | None:
    """``None`` for a clear refusal (or, without a baseline, any normal return), else what
    went wrong."""
    found = _outcome(fn, kwargs, accept_is_finding=accept_is_finding)
    TALLY["finding" if found else _LAST[0]] += 1
    return found


_LAST = ["accepted"]


def _outcome(fn: Callable, kwargs: dict, *, accept_is_finding: bool) -> str | None:
    _LAST[0] = "accepted"
    old = signal.signal(signal.SIGALRM, _alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    env = os.environ.get("EFFTH_MAX_BYTES")
    os.environ["EFFTH_MAX_BYTES"] = str(MEMORY_BOUND)
    try:
        limit = _current_vm() + ADDRESS_SPACE
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        signal.alarm(TIME_LIMIT_S)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = fn(**kwargs)
            if inspect.isgenerator(result):
                # a generator checks nothing until iterated: draw a few items under the limits
                list(itertools.islice(result, 1000))
    except Hang:
        return f"hang (> {TIME_LIMIT_S} s)"
    except MemoryError:
        return "MemoryError: allocation above the bound"
    except EffthError as exc:
        if isinstance(exc.__cause__, MemoryError):
            return "allocation above the bound (refused only after a MemoryError)"
        _LAST[0] = "refused (EffthError)"
        return None
    except TypeError as exc:
        try:
            inspect.signature(fn).bind(**kwargs)
        except TypeError:
            _LAST[0] = "Python's signature error"
            return None                       # Python's own signature error
        return f"raw TypeError: {str(exc)[:100]}"
    except Exception as exc:  # noqa: BLE001 - the finding
        return f"raw {type(exc).__name__}: {str(exc)[:100]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        if env is None:
            os.environ.pop("EFFTH_MAX_BYTES", None)
        else:
            os.environ["EFFTH_MAX_BYTES"] = env
    return "silently accepted" if accept_is_finding else None


def _current_vm() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:                           # pragma: no cover - non-Linux
        return 0


def base_cases() -> list[tuple[str, str, str]]:
    """(baseline, parameter, bad-value label) for every baseline argument, plus the duplicates."""
    out = []
    for key, (fn, kw) in BASE.items():
        params = inspect.signature(fn).parameters
        for name in kw:
            for label in bad_values(name, params.get(name)):
                out.append((key, name, label))
    # conflicting duplicates: no function interpolates both (converged GD and Bayes refuse); finite
    # -time training and the DMFT have the least-squares meaning and accept them
    return out + [("predict", "X_train", "duplicate, conflicting targets")]


def check_baselines() -> None:
    """Call every baseline once with its valid arguments, untimed.

    The oracle's premise: a bad value is the only thing wrong with a fuzzed call, so a baseline
    that itself fails would turn all of its "silently accepted" checks into passes.  The first
    valid call also pays the one-time symbolic derivation of the kernel recursions (about 7 s
    with ``EFFTH_CACHE=0``), which the per-call time limit would otherwise report as a hang.
    """
    for key, (fn, kw) in BASE.items():
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                fn(**kw)
            except Exception as exc:  # noqa: BLE001 - reported with the baseline's name
                raise AssertionError(f"the baseline {key!r} is not a valid call: {exc!r}") from exc


def run_base(key: str, name: str, label: str) -> str | None:
    fn, kw = BASE[key]
    kw = dict(kw)
    if label == "duplicate, conflicting targets":
        kw[name] = XD
        kw["y_train" if "y_train" in kw else "y"] = YC
    else:
        kw[name] = bad_values(name, inspect.signature(fn).parameters.get(name))[label]
    # a huge width or number of updates is valid for a theory (closed forms): accepted or refused
    return outcome(fn, kw, accept_is_finding=not (label == "huge" and name in MAY_BE_HUGE))


#: counts for which a huge value is a valid input of a theory (no loop or array grows with it)
MAY_BE_HUGE = {"widths", "updates"}


def free_cases() -> list[tuple[str, str]]:
    """(entry point, bad-value label) for the entry points without a baseline: every required
    argument gets the bad value of that label for its kind (or a generic one)."""
    out = []
    for name, fn in entry_points().items():
        for label in ("string", "NaN", "negative", "None", "empty"):
            out.append((name, label))
    return out


_GENERIC = {"string": "abc", "NaN": float("nan"), "negative": -1, "None": None,
            "empty": np.zeros((0, 0))}


def run_free(name: str, label: str) -> str | None:
    fn = entry_points()[name]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        TALLY["not called (no signature)"] += 1
        return None
    named = [p for p in params.values()
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY)]
    chosen = [p for p in named if p.default is p.empty] or named[:1]
    if not chosen:
        TALLY["not called (no parameters)"] += 1
        return None
    kw = {p.name: bad_values(p.name, p).get(label, _GENERIC[label]) for p in chosen}
    return outcome(fn, kw, accept_is_finding=False)


def known(case: tuple) -> bool:
    """Listed as a case, or its whole entry point listed (``(name,)``)."""
    return case in KNOWN or (case[0],) in KNOWN


# ----------------------------------------------------------------------------- tests
FUZZ = settings(max_examples=8, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
_BASE_BY_KEY: dict[str, list] = {}
for _c in base_cases():
    _BASE_BY_KEY.setdefault(_c[0], []).append(_c)


@pytest.fixture(scope="module")
def valid_baselines() -> None:
    check_baselines()


@pytest.mark.usefixtures("valid_baselines")
@pytest.mark.parametrize("key", sorted(_BASE_BY_KEY))
@FUZZ
@given(data=st.data())
def test_fuzz_baseline(key: str, data) -> None:
    case = data.draw(st.sampled_from(_BASE_BY_KEY[key]), label="case")
    found = run_base(*case)
    assert found is None or known(case), f"{case}: {found}"


_FREE = [c for c in free_cases() if c[0] not in {k.split("[")[0] for k in BASE}]
_FREE_NAMES = sorted({c[0] for c in _FREE})


@pytest.mark.usefixtures("valid_baselines")
@FUZZ
@given(data=st.data())
def test_fuzz_every_entry_point(data) -> None:
    # one example covers a slice of the entry points, each with a drawn label
    k = data.draw(st.integers(0, 7), label="slice")
    for name in _FREE_NAMES[k::8]:
        label = data.draw(st.sampled_from(("string", "NaN", "negative", "None", "empty")), label=name)
        found = run_free(name, label)
        assert found is None or known((name, label)), f"{name} with {label} arguments: {found}"


@pytest.mark.usefixtures("valid_baselines")
def test_known_findings_still_listed_are_real() -> None:
    """Every tolerated finding still happens (a fixed one must leave the list)."""
    for case in KNOWN:
        if len(case) == 1:
            found = any(run_free(case[0], label) for label in _GENERIC)
        else:
            found = run_base(*case) if len(case) == 3 else run_free(*case)
        assert found, f"{case} is fixed: remove it from tests/test_fuzz_known.py"


def test_fuzz_catches_a_raw_exception_and_a_silent_acceptance() -> None:
    """The oracle itself: a raw IndexError, a silent acceptance and a hang are findings."""
    def raw(x):
        return [][x]

    assert outcome(raw, {"x": 1}, accept_is_finding=True).startswith("raw IndexError")
    assert outcome(lambda x: x, {"x": 1}, accept_is_finding=True) == "silently accepted"
    assert outcome(et.MLP, {"activation": "tanh", "depth": -1}, accept_is_finding=True) is None

    def lazy(x):                       # a raw TypeError only once the generator is iterated
        yield from x

    assert outcome(lazy, {"x": 1.5}, accept_is_finding=False).startswith("raw TypeError")


if __name__ == "__main__":
    import time
    start = time.perf_counter()
    check_baselines()
    findings = []
    for case in base_cases():
        f = run_base(*case)
        if f:
            findings.append((case, f))
            print(("known " if known(case) else "NEW   ") + f"{case}: {f}", flush=True)
    for case in free_cases():
        f = run_free(*case)
        if f:
            findings.append((case, f))
            print(("known " if known(case) else "NEW   ") + f"{case}: {f}", flush=True)
    print(f"{len(findings)} findings ({sum(not known(c) for c, _ in findings)} new) in "
          f"{len(base_cases()) + len(free_cases())} calls, {time.perf_counter() - start:.0f} s; "
          "outcomes: " + ", ".join(f"{n} {k}" for k, n in TALLY.most_common()))
