"""Input validation shared by every layer: real numbers and real arrays, never truncated.

One place for the rules of ``docs/conventions.md`` on numbers: Python, NumPy and SymPy reals are
accepted; bools, strings, complex values (never silently truncated to their real part) and
symbolic expressions raise :class:`~effth.errors.DomainError` naming the argument.

Examples
--------
>>> real_array([[1, 2], [3, 4]], "K").dtype
dtype('float64')
>>> real_array([1 + 1j], "X")
Traceback (most recent call last):
...
effth.errors.DomainError: X must be real, got a complex array (pass X.real if the imaginary part is meant to be dropped)
"""

from __future__ import annotations

import math
import os
import numbers
from typing import Any

import numpy as np

from .errors import DomainError

__all__ = ["boolean", "callable_value", "check_memory", "check_positional", "count",
           "domain_error_from", "network", "real_number", "text", "finite_array", "format_bytes", "input_matrix", "integer",
           "check_keywords", "check_networks", "check_target_scale", "check_underflow", "output_directory", "restriction_arguments", "check_work", "duplicate_rows", "expand_samples", "format_seconds", "keyword_rules",
           "kernel_matrix", "label_array", "last_hidden_width", "memory_limit", "nonnegative", "optional_boolean",
           "positive", "psd_kernel", "real_array", "real_scalar", "rng", "seed", "seed_sequence", "items",
           "symmetric_matrix", "tolerance", "weight_variance_values",
           "width_ratio_values"]


def real_scalar(value: Any, name: str) -> float:
    """A Python float from a Python, NumPy (0-d arrays included) or SymPy real number.

    Infinite and NaN values are returned as they are (callers decide what they allow).
    """
    if isinstance(value, (bool, np.bool_)) or getattr(getattr(value, "dtype", None), "kind", "") == "b":
        raise DomainError(f"{name} must be a real number, got the bool {value!r}")
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "dtype") and np.ndim(value) == 0 and value.dtype.kind in "iuf":
        return float(value)
    if getattr(value, "is_number", False) and hasattr(value, "is_real"):   # SymPy number
        if value.is_real is False or (value.is_real is None and abs(complex(value).imag) > 0):
            raise DomainError(f"{name} must be a real number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    raise DomainError(f"{name} must be a real number (Python, NumPy or SymPy), got {value!r}")


def positive(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """:func:`real_scalar`, then required to be > 0 (and finite unless ``allow_inf``)."""
    v = real_scalar(value, name)
    if v != v or v <= 0 or (v == float("inf") and not allow_inf):
        raise DomainError(f"{name}={value!r} must be a positive number"
                          + (" (inf allowed)" if allow_inf else " (finite)"))
    return v


def real_array(a: Any, name: str, *, finite: bool = False) -> np.ndarray:
    """``a`` as a float64 array; complex or non-numeric input raises :class:`DomainError`.

    Parameters
    ----------
    a : array_like
    name : str
        The argument's name, for the message.
    finite : bool
        Also refuse NaN and infinite entries.
    """
    try:
        raw = np.asarray(a)
    except (TypeError, ValueError) as exc:
        raise DomainError(f"{name} must be a real numeric array: {exc}") from None
    if raw.dtype.kind == "c":
        raise DomainError(f"{name} must be real, got a complex array (pass {name}.real if the "
                          "imaginary part is meant to be dropped)")
    if raw.dtype.kind == "O" and any(isinstance(v, (complex, np.complexfloating))
                                     for v in raw.ravel()):
        raise DomainError(f"{name} must be real, got complex entries")
    if raw.dtype.kind not in "biufO":
        raise DomainError(f"{name} must be a real numeric array, got dtype {raw.dtype}")
    try:
        out = raw.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise DomainError(f"{name} must be a real numeric array: {exc}") from None
    if finite and not np.all(np.isfinite(out)):
        raise DomainError(f"{name} contains NaN or infinite entries")
    return out



def teacher_signal(signal: Any, outputs: int):
    r"""The teacher's signal ``S = |w_*|^2 / D`` (one output) or, for ``C = outputs`` channels
    (Bordelon & Pehlevan 2025, app. G), the ``(C, C)`` matrix ``S_cc' = w*_c . w*_c' / D``: a
    positive number (``S`` times the identity) or a symmetric positive semi-definite ``(C, C)``
    matrix with a positive diagonal.  Returns ``(S, None)`` for one output,
    ``(max_c S_cc, matrix)`` otherwise (shared by the random-data theory and its simulator)."""
    if np.ndim(signal) == 0:
        S = positive(signal, "signal")
        return (S, None) if outputs == 1 else (S, S * np.eye(outputs))
    M = real_array(signal, "signal", finite=True)
    if M.shape != (outputs, outputs):
        raise DomainError(f"signal has shape {M.shape}: with outputs={outputs} give a number or "
                          f"the ({outputs}, {outputs}) matrix S_cc' = w*_c . w*_c' / D")
    if not np.allclose(M, M.T, rtol=1e-12, atol=0.0):
        raise DomainError("signal must be a symmetric matrix S_cc' = w*_c . w*_c' / D")
    M = 0.5 * (M + M.T)
    if np.any(np.diag(M) <= 0) or np.linalg.eigvalsh(M)[0] < -1e-12 * np.abs(M).max():
        raise DomainError("signal must be positive semi-definite with a positive diagonal "
                          "(a Gram matrix of the teacher vectors, S_cc' = w*_c . w*_c' / D)")
    if outputs == 1:
        return float(M[0, 0]), None
    return float(np.diag(M).max()), M

def input_matrix(X: Any, name: str = "X") -> np.ndarray:
    """Network inputs as a finite float64 array of shape ``(N_D, n_0)``, ``N_D, n_0 >= 1``."""
    Xa = real_array(X, name)
    if Xa.ndim != 2 or Xa.shape[0] < 1 or Xa.shape[1] < 1:
        raise DomainError(f"{name} must be 2-D with shape (N_D, n_0), N_D, n_0 >= 1; got shape "
                          f"{Xa.shape}")
    if not np.isfinite(Xa).all():
        raise DomainError(f"{name} contains NaN or infinite entries")
    return Xa


def kernel_matrix(K: Any, name: str = "K", *, check_psd: bool = True) -> np.ndarray:
    """A real, finite, symmetric (N, N) kernel (positive semi-definite if ``check_psd``)."""
    Ka = real_array(K, name)
    if Ka.ndim != 2 or Ka.shape[0] != Ka.shape[1] or Ka.shape[0] < 1:
        raise DomainError(f"{name} must be a square (N, N) matrix with N >= 1, got shape {Ka.shape}")
    if not np.isfinite(Ka).all():
        raise DomainError(f"{name} has NaN or infinite entries (overflow upstream?)")
    scale = float(np.max(np.abs(Ka))) or 1.0
    if not np.allclose(Ka, Ka.T, rtol=0.0, atol=1e-12 * scale):
        raise DomainError(f"{name} is not symmetric (max |{name} - {name}^T| = "
                          f"{float(np.max(np.abs(Ka - Ka.T))):.3g})")
    if check_psd:
        lam = float(np.min(np.linalg.eigvalsh(0.5 * (Ka + Ka.T))))
        if lam < -1e-10 * scale:
            raise DomainError(f"{name} is not positive semi-definite (smallest eigenvalue "
                              f"{lam:.3g}); a kernel is a covariance")
    return Ka


def integer(value: Any, name: str, *, minimum: int | None = None) -> int:
    """An exact integer from Python, NumPy or SymPy integers (bools and floats such as 5.5, or
    even 5.0, are refused: a count is never rounded)."""
    out = None
    if not isinstance(value, (bool, np.bool_)):
        if isinstance(value, numbers.Integral) or getattr(value, "is_Integer", False):
            out = int(value)
        elif hasattr(value, "dtype") and np.ndim(value) == 0 and value.dtype.kind in "iu":
            out = int(value)
    if out is None:
        raise DomainError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and out < minimum:
        what = "a positive int" if minimum == 1 else f"an integer >= {minimum}"
        raise DomainError(f"{name} must be {what}, got {out}")
    return out


def items(value: Any, name: str) -> list:
    """The elements of a finite sequence (a list, tuple, string, range or 1-D array) as a list,
    taken at the call: a number, ``None``, a set or a mapping raises :class:`DomainError` (the
    combinatorial generators would otherwise fail only when first iterated, with a raw
    ``TypeError``).

    >>> items("abc", "slots")
    ['a', 'b', 'c']
    >>> items(3, "slots")
    Traceback (most recent call last):
    ...
    effth.errors.DomainError: slots must be a sequence (list, tuple, string), got int 3
    """
    if isinstance(value, (set, frozenset, dict)) or not hasattr(value, "__len__") \
            or not hasattr(value, "__getitem__") \
            or (isinstance(value, np.ndarray) and value.ndim != 1):
        raise DomainError(f"{name} must be a sequence (list, tuple, string), got "
                          f"{type(value).__name__} {value!r:.60}")
    return list(value)


def finite_array(x: Any, name: str, ndim: tuple) -> np.ndarray:
    """A finite real float array with ndim in ``ndim``; DomainError naming ``name`` otherwise."""
    try:
        a = np.asarray(x)
    except Exception as exc:      # ragged input
        raise DomainError(f"{name} is not an array: {exc}") from None
    if np.iscomplexobj(a):
        raise DomainError(f"{name} is complex; effth's kernels and labels are real")
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise DomainError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    a = a.astype(float)
    if a.ndim not in ndim:
        want = " or ".join(f"{d}-D" for d in ndim)
        raise DomainError(f"{name} must be {want}, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise DomainError(f"{name} contains NaN or inf")
    return a


def nonnegative(x: Any, name: str) -> float:
    """A finite real number >= 0 (Python, NumPy or SymPy); bools refused."""
    if isinstance(x, bool) or not (isinstance(x, (numbers.Real, np.floating, np.integer)) or getattr(x, "is_Number", False)):
        raise DomainError(f"{name} must be a real number >= 0, got {x!r}")
    v = float(x)
    if not (math.isfinite(v) and v >= 0):
        raise DomainError(f"{name} must be finite and >= 0, got {x!r}")
    return v


def symmetric_matrix(M: np.ndarray, name: str) -> np.ndarray:
    """A square matrix symmetric to 1e-10 of its scale, returned symmetrized."""
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise DomainError(f"{name} must be a square (N, N) matrix, got shape {M.shape}")
    scale = max(float(np.max(np.abs(M))), 1e-300) if M.size else 1.0
    # in cache-sized blocks: a whole-array M - M.T reads M.T with a stride of a row (0.55 s
    # per call at N = 3100, against about 0.05 s blocked)
    n, b = M.shape[0], 256
    out = np.empty_like(M, dtype=float)
    blocks = [0.0]
    for i in range(0, n, b):
        for j in range(i, n, b):
            up, lo = M[i:i + b, j:j + b], M[j:j + b, i:i + b].T
            d = up - lo
            blocks.append(float(np.max(np.abs(d, out=d))))
            avg = np.add(up, lo, out=d)
            avg *= 0.5
            out[i:i + b, j:j + b] = avg
            out[j:j + b, i:i + b] = avg.T
    worst = float(np.max(blocks))                  # NaN propagates
    if not worst <= 1e-10 * scale:
        raise DomainError(f"{name} is not symmetric (max |M - M^T| = {worst:.3g})")
    return out


def label_array(y: Any, P: int, name: str = "y_train") -> np.ndarray:
    """Training targets: finite, 1-D or 2-D, one row per training input."""
    y = finite_array(y, name, (1, 2))
    if y.shape[0] != P:
        raise DomainError(f"{name} has {y.shape[0]} rows but there are {P} training inputs")
    return y


def last_hidden_width(widths: Any, name: str = "widths", *, equal: bool = False) -> int:
    """:math:`n_{L-1}` from ``widths`` (an int, or one positive int per hidden layer
    :math:`n_1..n_{L-1}`): the width that sets the :math:`1/n` corrections of the output layer.

    With ``equal`` the hidden widths must all be the same (theories that take one width).
    """
    seq = [widths] if np.ndim(widths) == 0 else list(np.asarray(widths, dtype=object).ravel())
    if not seq:
        raise DomainError(f"{name} is empty: a network with no hidden layer has no 1/n corrections")
    out = [integer(x, name, minimum=1) for x in seq]
    if equal and len(set(out)) > 1:
        raise DomainError(f"{name}={tuple(out)}: this O(1/n) theory takes equal hidden widths; give "
                          "one int")
    return out[-1]


# ----------------------------------------------------------------------------- seeds, flags, tolerances
_SEED_KINDS = "an int >= 0, a sequence of ints >= 0, a numpy SeedSequence, a numpy Generator or None"


def seed(value: Any, name: str = "seed", *, generator: bool = True, sequence: bool = True) -> Any:
    """A seed NumPy accepts, checked once for every entry point: ``None``, an int >= 0, a
    sequence of ints >= 0 (returned as a tuple), a ``numpy.random.SeedSequence`` or (if
    ``generator``) a ``numpy.random.Generator``, returned unchanged. Strings, floats, bools and
    negative ints raise :class:`DomainError` with one message.

    >>> seed(3), seed([1, 2])
    (3, (1, 2))
    >>> seed(-1)
    Traceback (most recent call last):
    ...
    effth.errors.DomainError: seed=-1 must be an int >= 0, a sequence of ints >= 0, a numpy SeedSequence, a numpy Generator or None
    """
    kinds = _SEED_KINDS if generator else _SEED_KINDS.replace(", a numpy Generator", "")
    if not sequence:
        kinds = kinds.replace(", a sequence of ints >= 0", "")
    if value is None or isinstance(value, np.random.SeedSequence):
        return value
    if isinstance(value, np.random.Generator):
        if generator:
            return value
        raise DomainError(f"{name} is a numpy Generator; here {name} must be {kinds} (pass "
                          f"{name}=np.random.SeedSequence(...) or an int)")

    def _int(v):
        if isinstance(v, (bool, np.bool_)):
            return None
        if (isinstance(v, (numbers.Integral, np.integer))
                or (getattr(getattr(v, "dtype", None), "kind", "") in "iu" and np.ndim(v) == 0
                    and hasattr(v, "dtype"))) and int(v) >= 0:
            return int(v)
        return None

    if np.ndim(value) == 0 and not isinstance(value, (str, bytes)):
        out = _int(value)
        if out is None:
            raise DomainError(f"{name}={value!r} must be {kinds}")
        return out
    if sequence and not isinstance(value, (str, bytes)):
        try:
            items = list(np.asarray(value, dtype=object).ravel()) if np.ndim(value) else []
        except Exception:   # noqa: BLE001 - ragged
            items = []
        ints = [_int(v) for v in items]
        if items and all(v is not None for v in ints):
            return tuple(ints)
    raise DomainError(f"{name}={value!r} must be {kinds}")


def rng(value: Any, name: str = "seed") -> np.random.Generator:
    """``numpy.random.default_rng(seed)`` after :func:`seed` (a Generator is used as is)."""
    s = seed(value, name)
    return s if isinstance(s, np.random.Generator) else np.random.default_rng(s)


def seed_sequence(value: Any, name: str = "seed") -> np.random.SeedSequence:
    """A ``SeedSequence`` to spawn children from (a Generator's own sequence is used; it spawns
    the same children as ``Generator.spawn``)."""
    s = seed(value, name)
    if isinstance(s, np.random.SeedSequence):
        return s
    if isinstance(s, np.random.Generator):
        return s.bit_generator.seed_seq
    return np.random.SeedSequence(s)


def boolean(value: Any, name: str) -> bool:
    """A real ``bool`` (NumPy bools included); strings, ints and None raise :class:`DomainError`
    (``"no"`` is truthy, so accepting it would silently mean True).

    >>> boolean(np.True_, "center")
    True
    >>> boolean("no", "bias")
    Traceback (most recent call last):
    ...
    effth.errors.DomainError: bias must be True or False, got 'no'
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise DomainError(f"{name} must be True or False, got {value!r}")


def optional_boolean(value: Any, name: str) -> bool | None:
    """``None`` (the default: decide automatically) or a real bool, as :func:`boolean`."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise DomainError(f"{name} must be True, False or None, got {value!r}")


def tolerance(value: Any, name: str = "rtol") -> float:
    """A relative tolerance: a finite real number with 0 < value < 1."""
    try:
        v = real_scalar(value, name)
    except DomainError:
        raise DomainError(f"{name} must be a real number with 0 < {name} < 1, got {value!r}") from None
    if not (math.isfinite(v) and 0.0 < v < 1.0):
        raise DomainError(f"{name}={value!r} must be finite with 0 < {name} < 1 (a relative "
                          "tolerance)")
    return v


# ----------------------------------------------------------------------------- memory bound
MEMORY_ENV = "EFFTH_MAX_BYTES"
_MEMORY_FRACTION = 0.5


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):   # pragma: no cover - non-POSIX
        return 8.0 * 2**30


def memory_limit() -> float:
    """Bytes one effth allocation may take: ``$EFFTH_MAX_BYTES`` if set (a number of bytes,
    e.g. ``4e9``), else half the machine's physical memory."""
    env = os.environ.get(MEMORY_ENV)
    if env:
        try:
            v = float(env)
        except ValueError:
            raise DomainError(f"{MEMORY_ENV}={env!r} must be a number of bytes (e.g. 4e9)") from None
        if not (v > 0):
            raise DomainError(f"{MEMORY_ENV}={env!r} must be a positive number of bytes")
        return v
    return _MEMORY_FRACTION * _physical_memory()


def format_bytes(nbytes: float) -> str:
    """``7.3 TiB``-style size."""
    v = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(v) < 1024 or unit == "EiB":
            return f"{v:.3g} {unit}" if unit != "B" else f"{v:.0f} B"
        v /= 1024
    return f"{v:.3g} EiB"   # pragma: no cover


def check_memory(nbytes: float, what: str, hint: str) -> float:
    """Refuse, before allocating, an allocation of ``nbytes`` above :func:`memory_limit`.

    ``what`` names the array(s) ("the (10^6 x 10^6) weight matrices"), ``hint`` the knob to turn
    ("lower widths"). Raises :class:`DomainError` "needs 7.3 TiB for ...; ..."; returns
    ``nbytes`` otherwise. Callers compute ``nbytes`` in floating point (never by allocating).
    """
    nbytes = float(nbytes)
    limit = memory_limit()
    if not (nbytes <= limit):
        raise DomainError(f"needs {format_bytes(nbytes)} for {what}, above the memory bound of "
                          f"{format_bytes(limit)} (half the physical memory, or ${MEMORY_ENV}); "
                          f"{hint}")
    return nbytes


WORK_ENV = "EFFTH_MAX_SECONDS"
_WORK_SECONDS = 1800.0


def format_seconds(seconds: float) -> str:
    """``3.2 h``-style duration."""
    s = float(seconds)
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s:.3g} s"


def check_work(seconds: float, what: str, hint: str) -> float:
    """Refuse, before starting, a loop whose *optimistic* run-time estimate ``seconds`` exceeds
    ``$EFFTH_MAX_SECONDS`` (default 1800 s): a call that cannot finish is an error, not a hang.

    Callers estimate ``seconds`` from lower bounds on the cost per item (so nothing feasible is
    refused); raise the bound with the environment variable to run longer studies.
    """
    env = os.environ.get(WORK_ENV)
    limit = _WORK_SECONDS
    if env:
        try:
            limit = float(env)
        except ValueError:
            raise DomainError(f"{WORK_ENV}={env!r} must be a number of seconds") from None
    seconds = float(seconds)
    if not (seconds <= limit):
        raise DomainError(f"{what} would run for at least {format_seconds(seconds)} (estimate), "
                          f"above the work bound of {format_seconds(limit)} (${WORK_ENV}); {hint}")
    return seconds


# ----------------------------------------------------------------------------- keyword rules
def _annotation(p: Any) -> str:
    ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
    return str(ann).replace(" ", "").replace("Optional[", "").rstrip("]") if ann else ""


def real_number(value: Any, name: str) -> float:
    """A real number (:func:`real_scalar`) that is not NaN; infinities pass (``alpha=inf`` is a
    limit). The rule for parameters annotated ``float``."""
    v = real_scalar(value, name)
    if v != v:
        raise DomainError(f"{name}=nan must be a real number, not NaN")
    return v


#: real parameters that are finite and >= 0 by their meaning (tolerances, variances, ridges)
NONNEGATIVE_REALS = frozenset({"tol", "quad_tol", "noise", "ridge", "jitter", "weight_decay",
                               "temperature"})

#: parameters annotated ``int`` that count something of which at least one is needed
POSITIVE_COUNTS = frozenset({"max_iter", "nodes", "max_nodes", "samples", "n_samples", "networks",
                             "iterations", "replicas", "n_grid", "workers", "max_test_inputs"})


def count(value: Any, name: str) -> int:
    """An exact integer (:func:`integer`): the rule for parameters annotated ``int``; at least 1
    for the counts of :data:`POSITIVE_COUNTS` (iterations, nodes, samples, networks ...)."""
    return integer(value, name, minimum=1 if name in POSITIVE_COUNTS else None)


def text(value: Any, name: str) -> str:
    """A ``str``: the rule for parameters annotated ``str`` (a method name, a rule name ...)."""
    if not isinstance(value, str):
        raise DomainError(f"{name} must be a string, got {value!r}")
    return value


def callable_value(value: Any, name: str) -> Any:
    """A callable (the function a sweep or a solver calls)."""
    if not callable(value):
        raise DomainError(f"{name} must be a callable, got {type(value).__name__} {value!r:.60}")
    return value


def network(value: Any, name: str = "net") -> Any:
    """An architecture object (:class:`effth.MLP` or :class:`effth.CNN`), not a name or a dict."""
    from .arch._common import LayeredNetwork
    if not isinstance(value, LayeredNetwork):
        hint = (f" (build one: effth.MLP({value!r}, depth=...))" if isinstance(value, str) else "")
        raise DomainError(f"{name} must be an effth.MLP or effth.CNN, got {type(value).__name__} "
                          f"{value!r:.60}{hint}")
    return value


def keyword_rules(fn: Any) -> dict:
    """The checks :func:`effth._signature.public` applies to the arguments of ``fn`` a caller
    passes: by name, ``seed`` (:func:`seed`), ``rtol`` (:func:`tolerance`), ``progress``
    (:func:`optional_boolean`), ``net`` (:func:`network`);
    by annotation, ``bool`` / ``bool | None`` (:func:`boolean`, :func:`optional_boolean`),
    ``int`` (:func:`count`), ``float`` (:func:`real_number`), ``str`` (:func:`text`) and
    ``Callable`` (:func:`callable_value`). A ``None`` is let through where ``None`` is the
    default or the annotation allows it. The values reach ``fn`` unchanged.
    """
    import inspect
    rules = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        ann = _annotation(p)
        parts = set(ann.split("|")) if ann else set()
        none_ok = p.default is None or "None" in parts
        core = parts - {"None"}
        if p.name == "seed":
            rule = seed
        elif p.name == "rtol":
            rule = tolerance
        elif p.name == "progress" or core == {"bool"} and "None" in parts:
            rule = optional_boolean
        elif core == {"bool"} or (p.annotation is p.empty and isinstance(p.default, bool)):
            rule = boolean
        elif p.name == "net" and core <= {"Any", "MLP", "CNN", ""}:
            rule = network
        elif p.name in NONNEGATIVE_REALS:
            rule = nonnegative
        elif core == {"int"}:
            rule = count
        elif core == {"float"}:
            rule = real_number
        elif core == {"str"} and p.name not in ("activation", "rule", "kernel"):
            rule = text
        elif core == {"Callable"}:
            rule = callable_value
        else:
            continue
        rules[p.name] = (rule, none_ok)
    return rules


def check_keywords(rules: dict, kwargs: dict) -> None:
    """Apply :func:`keyword_rules` to the keywords of one call (raises :class:`DomainError`)."""
    for name in rules.keys() & kwargs.keys():
        rule, none_ok = rules[name]
        value = kwargs[name]
        if value is None and none_ok:
            continue
        rule(value, name)


def check_positional(rules: dict, names: tuple, args: tuple) -> None:
    """:func:`check_keywords` for the positional arguments of one call (``names`` are the
    parameters in order)."""
    for name, value in zip(names, args):
        entry = rules.get(name)
        if entry is None or (value is None and entry[1]):
            continue
        entry[0](value, name)


def _extreme_arguments(args: tuple, kwargs: dict, names: tuple) -> list:
    """``name=value`` of the arguments of one call whose size could overflow float64 or memory:
    numbers above 1e6 or below 1e-100 in magnitude, arrays with such entries."""
    out = []
    for name, value in list(zip(names, args)) + list(kwargs.items()):
        if isinstance(value, (bool, np.bool_, str)):
            continue
        try:
            a = np.asarray(value, dtype=float) if np.ndim(value) <= 3 else None
        except (TypeError, ValueError):
            continue
        if a is None or a.size == 0 or a.size > 10**6:
            continue
        with np.errstate(all="ignore"):
            m = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 0.0
            nz = np.abs(a[(a != 0) & np.isfinite(a)])
        if m > 1e6 or (nz.size and float(nz.min()) < 1e-100):
            out.append(f"{name}={value!r:.40}" if a.ndim == 0 else f"{name} (entries up to {m:.3g})")
    return out


_TYPE_NAMES = {"NoneType": type(None), "str": str, "float": float, "int": int, "bool": bool,
               "complex": complex, "numpy.ndarray": np.ndarray, "list": list, "tuple": tuple,
               "dict": dict, "set": set, "bytes": bytes}


def _wrong_type_argument(message: str, args: tuple, kwargs: dict, names: tuple) -> str | None:
    """``name=value`` of the argument whose built-in type a raw ``TypeError`` / ``AttributeError``
    names ("'str' object has no attribute ...", "'NoneType' object is not iterable",
    "unhashable type: 'numpy.ndarray'"), or ``None`` when no argument has that type (an error
    of effth's own, not of the input)."""
    import re
    m = re.search(r"'(NoneType|str|float|int|bool|complex|numpy\.ndarray|list|tuple|dict|set|bytes)'"
                  r"|<class '(NoneType|str|float|int|bool|complex|list|tuple|dict)'>", message)
    if not m:
        return None
    kind = _TYPE_NAMES[m.group(1) or m.group(2)]
    for name, value in list(zip(names, args)) + list(kwargs.items()):
        if type(value) is kind or (kind is float and isinstance(value, np.floating)):
            return f"{name}={value!r:.40}"
    return None


def domain_error_from(exc: BaseException, where: str, args: tuple, kwargs: dict,
                      names: tuple) -> DomainError | None:
    """The :class:`DomainError` that replaces a raw ``MemoryError``, ``OverflowError`` or SymPy
    ``SympifyError`` escaping a public function ``where`` (``None`` for other exceptions): it
    names the arguments whose size is the likely cause (the knob to turn)."""
    kind = type(exc).__name__
    if isinstance(exc, MemoryError):
        what = "ran out of memory"
    elif isinstance(exc, OverflowError):
        what = "overflowed float64"
    elif isinstance(exc, (TypeError, AttributeError)) and type(exc) in (TypeError, AttributeError):
        culprit = _wrong_type_argument(str(exc), args, kwargs, names)
        if culprit is None:
            return None
        return DomainError(f"{where}(): {culprit} has the wrong type ({exc}); see help({where})")
    elif type(exc) is ValueError:
        # a plain ValueError of NumPy / Python on an argument (DomainError is a ValueError too,
        # so code catching ValueError still does)
        return DomainError(f"{where}(): {exc}")
    elif kind == "SympifyError":
        return DomainError(f"{where}(): an argument is not a number or expression SymPy can read "
                           f"({exc})")
    else:
        return None
    knobs = _extreme_arguments(args, kwargs, names)
    hint = (f"lower {', '.join(knobs)}" if knobs else
            "lower the sizes (counts, steps, widths) or the scale of the inputs")
    detail = str(exc.args[-1] if exc.args and isinstance(exc.args[-1], str) else exc).strip()
    return DomainError(f"{where}() {what}" + (f" ({detail})" if detail else "") + f"; {hint}")


def _positive_per_layer(values: Any, count: int, name: str, what: str, unit: str, per: str,
                        count_note: str = "") -> tuple | None:
    """``count`` positive finite floats, one per layer (``None`` when not given or all 1); the
    one check behind :func:`width_ratio_values` and :func:`weight_variance_values`."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, bool, np.bool_)) or np.ndim(values) != 1:
        raise DomainError(f"{name}={values!r} must be {what}")
    try:
        a = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise DomainError(f"{name}={values!r} must be {what}") from None
    if a.size != count:
        raise DomainError(f"{name} needs one {unit} per {per} ({count}{count_note}), got "
                          f"{a.size}: {values!r}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise DomainError(f"{name}={values!r}: every {unit} must be a finite number > 0")
    if np.all(a == 1.0):
        return None
    return tuple(float(v) for v in a)


def width_ratio_values(width_ratios: Any, hidden_layers: int,
                       name: str = "width_ratios") -> tuple | None:
    """Validated hidden-layer width ratios ``a_l = N_l / N`` (Bordelon & Pehlevan (2022),
    App. D.8): ``None`` when not given or all equal to 1 (equal widths), else a tuple of
    ``hidden_layers`` positive finite floats; :class:`DomainError` otherwise."""
    return _positive_per_layer(
        width_ratios, hidden_layers, name,
        f"a sequence of {hidden_layers} positive numbers a_l = N_l / N, one per hidden layer",
        "ratio a_l = N_l / N", "hidden layer")


def weight_variance_values(weight_variances: Any, weight_layers: int,
                           name: str = "weight_variances") -> tuple | None:
    """Validated initial weight variances ``sigma_l^2`` of the ``weight_layers`` weight layers
    ``W^0 .. W^{L-1}, w^L`` (Bordelon & Pehlevan (2022), App. D.8: ``W^l_ij ~ N(0, sigma_l^2)``):
    ``None`` when not given or all equal to 1, else a tuple of positive finite floats;
    :class:`DomainError` otherwise."""
    return _positive_per_layer(
        weight_variances, weight_layers, name,
        f"a sequence of {weight_layers} positive numbers sigma_l^2, one per weight layer "
        "(input, hidden and readout)",
        "variance sigma_l^2", "weight layer", ": input, hidden and readout")


def langevin_momentum(temperature: Any, momentum: Any) -> tuple[float, float]:
    """Validated Langevin temperature :math:`1/\\beta` (finite, >= 0) and heavy-ball coefficient
    :math:`\\mu=e^{-\\eta/\\tau}` in [0, 1) (Bordelon & Pehlevan 2022 apps. K, L; both nonzero:
    underdamped Langevin dynamics, :class:`effth.dmft.grid.ParameterFilter`): one check for the
    DMFT solvers and the trainer."""
    vals = []
    for v, name in ((temperature, "temperature"), (momentum, "momentum")):
        if isinstance(v, (bool, np.bool_)):
            raise DomainError(f"{name}={v!r} must be a number")
        vals.append(real_scalar(v, name))
    temperature, momentum = vals
    if not (np.isfinite(temperature) and temperature >= 0):
        raise DomainError(f"temperature={temperature!r} must be a finite number >= 0 (the Langevin "
                          "temperature 1/beta; 0 is gradient descent)")
    if not (np.isfinite(momentum) and 0.0 <= momentum < 1.0):
        raise DomainError(f"momentum={momentum!r} must lie in [0, 1) (the heavy-ball coefficient mu "
                          "= exp(-eta / tau); 0 is gradient descent)")
    return float(temperature), float(momentum)


# ----------------------------------------------------------------------------- kernels, duplicates
def psd_kernel(K: Any, name: str = "K", *, n_train: int | None = None,
               train_factor: bool = False) -> Any:
    r"""A finite, non-empty, symmetric (to 1e-10 of its scale), positive semi-definite (N, N)
    kernel, returned symmetrized. Every block a formula reads is checked, the test blocks too:
    with ``n_train`` the message says whether the training block, the test block or only the
    coupling between them breaks positivity (a covariance of the joint outputs must be PSD).

    With ``train_factor`` (and ``n_train``) returns ``(K, L)``: ``L`` the lower Cholesky factor
    of the training block when it is positive definite (else ``None``), from which the check
    was made blockwise: :math:`K_{AA}=LL^\top` and the Schur complement
    :math:`K_{BB}+\epsilon-W^\top W`, :math:`W=L^{-1}K_{AB}`, definite with
    :math:`\epsilon=10^{-10}` of the scale imply that :math:`K+\epsilon` is definite (its
    Schur complement, with :math:`(K_{AA}+\epsilon)^{-1}\preceq K_{AA}^{-1}`, is larger), the
    test below; a caller that solves with the training block reuses ``L`` instead of a second
    factorization.  When the blockwise test fails the test below decides.
    """
    Ka = real_array(K, name)
    if Ka.ndim != 2 or Ka.shape[0] != Ka.shape[1] or Ka.shape[0] < 1:
        raise DomainError(f"{name} must be a square (N, N) matrix with N >= 1, got shape {Ka.shape}")
    if not np.isfinite(Ka).all():
        raise DomainError(f"{name} has NaN or infinite entries (overflow upstream?)")
    Ka = symmetric_matrix(Ka, name)
    scale = float(np.max(np.abs(Ka))) or 1.0
    if train_factor:
        if n_train is None or not 0 < n_train < Ka.shape[0]:
            raise ValueError("train_factor needs 0 < n_train < N")
        L = _blockwise_psd(Ka, int(n_train), 1e-10 * scale)
        if L is not None:
            return Ka, L
        return psd_kernel(Ka, name, n_train=n_train), None

    def smallest(M):
        return float(np.min(np.linalg.eigvalsh(M))) if M.size else 0.0

    # a Cholesky factorization of K + 1e-10 scale 1 (a third of an eigvalsh's cost, no
    # eigendecomposition in the common PSD case) decides; the eigenvalues only say by how much
    try:
        from scipy.linalg import cholesky
        cholesky(Ka + (1e-10 * scale) * np.eye(Ka.shape[0]), lower=True, check_finite=False)
        return Ka
    except np.linalg.LinAlgError:
        pass
    lam = smallest(Ka)
    if lam < -1e-10 * scale:
        where = ""
        if n_train is not None and 0 < n_train < Ka.shape[0]:
            lt, lb = smallest(Ka[:n_train, :n_train]), smallest(Ka[n_train:, n_train:])
            where = (" in its training block" if lt < -1e-10 * scale else
                     " in its test block" if lb < -1e-10 * scale else
                     " (both blocks are PSD: the train-test block is too large for them)")
        raise DomainError(f"{name} is not positive semi-definite{where} (smallest eigenvalue "
                          f"{lam:.3g}); a kernel is a covariance of the outputs")
    return Ka


def _blockwise_psd(K: np.ndarray, P: int, eps: float, *, coupling: bool = False) -> Any:
    """The lower Cholesky factor of ``K[:P, :P]`` when it and the Schur complement of the test
    block plus ``eps`` factor (then ``K + eps`` is definite: see :func:`psd_kernel`), else None.
    ``coupling``: ``(L, W)`` with :math:`W=L^{-1}K_{AB}`, or ``(None, None)``."""
    from scipy.linalg import LinAlgError, cholesky, solve_triangular
    try:
        L = cholesky(K[:P, :P], lower=True, check_finite=False)
        W = solve_triangular(L, K[:P, P:], lower=True, check_finite=False)
        S = K[P:, P:] - W.T @ W
        S[np.diag_indices_from(S)] += eps
        cholesky(S, lower=True, check_finite=False)
    except (np.linalg.LinAlgError, LinAlgError):
        return (None, None) if coupling else None
    return (L, W) if coupling else L


def duplicate_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(first, index)`` when some rows of ``X`` repeat exactly: ``X[first]`` are the distinct
    rows (in order of first appearance) and ``X[first][index] == X``; ``None`` when all rows
    differ. A function of the inputs evaluated on ``X[first]`` and expanded with ``index``
    gives identical rows for identical inputs, as the mathematics does."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[0] < 2:
        return None
    _, first, inverse = np.unique(X, axis=0, return_index=True, return_inverse=True)
    if first.size == X.shape[0]:
        return None
    order = np.argsort(first)                 # distinct rows in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[np.asarray(inverse).ravel()]


def expand_samples(a: np.ndarray, index: np.ndarray, axes: tuple) -> np.ndarray:
    """``a`` with each axis in ``axes`` (sample axes) re-indexed by ``index``
    (:func:`duplicate_rows`)."""
    for ax in axes:
        a = np.take(a, index, axis=ax)
    return a


def check_underflow(values: np.ndarray, what: str, hint: str, *, first_layer: int = 1) -> None:
    """Refuse a stack of per-layer arrays ``values[l]`` whose scale falls below the smallest
    normal float64 (2.2e-308) while the first layer's does not: the digits are gone (a ReLU
    kernel halves per layer at ``C_W = 1``). The message names the first such layer."""
    v = np.asarray(values, dtype=float)
    if v.ndim < 1 or v.shape[0] == 0:
        return
    scale = np.max(np.abs(v.reshape(v.shape[0], -1)), axis=1)
    tiny = np.finfo(float).tiny
    if not scale[0] > tiny:
        return
    low = np.nonzero(scale < tiny)[0]
    if low.size:
        ell = int(low[0]) + first_layer
        raise DomainError(f"{what} underflows double precision at layer {ell} (scale "
                          f"{scale[low[0]]:.3g}, layer {first_layer}: {scale[0]:.3g}); {hint}")


def restriction_arguments(n_train: Any, max_test: Any) -> None:
    """``n_train`` (None, or an int >= 1: the first inputs are training inputs) and ``max_test``
    (an int >= 0 that restricts only together with ``n_train``) of a restricted flow."""
    m = integer(max_test, "max_test", minimum=0)
    if n_train is None:
        if m != 1:
            raise DomainError(f"max_test={m} restricts the entries by their test inputs, which "
                              "needs n_train= (inputs 0..n_train-1 are the training inputs)")
        return
    integer(n_train, "n_train", minimum=1)


def output_directory(out: Any, name: str = "out") -> Any:
    """A directory results can be written to, created now (before any work) so that an
    unwritable path or an existing file is refused at once; ``None`` passes (write nothing)."""
    if out is None:
        return None
    from pathlib import Path
    if not isinstance(out, (str, os.PathLike)) or isinstance(out, bytes):
        raise DomainError(f"{name} must be a directory path (str or Path) or None, got {out!r}")
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise DomainError(f"{name}={str(p)!r} is an existing file, not a directory; give a new or "
                          "existing directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DomainError(f"{name}={str(p)!r} cannot be created ({exc.strerror or exc}); give a "
                          "writable directory") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise DomainError(f"{name}={str(p)!r} is not writable; give a writable directory")
    return p


def check_networks(networks: int, flops: float, what: str) -> None:
    """Refuse, before any seed is spawned or network drawn, an ensemble whose optimistic run
    time (>= 1 us and ``flops`` at <= 2 GFLOP/s per network) or whose per-network seeds
    (a ``SeedSequence`` each, about 200 bytes) exceed the bounds of :func:`check_work` and
    :func:`check_memory`."""
    n = float(networks)
    check_work(n * (1e-6 + float(flops) / 2e9), f"{what} with {networks} networks",
               "lower networks")
    check_memory(200.0 * n, f"the seeds of {networks} networks", "lower networks")


def check_target_scale(y: Any, power: int, what: str, name: str = "y") -> None:
    """Refuse targets whose ``power``-th power overflows float64 (a loss ``sum Delta^2 / 2`` is
    ``power = 2``; a gamma0-series coefficient of order ``k`` in the loss grows as
    ``|y|^(k + 2)``): a clear error instead of an ``inf``/NaN result."""
    m = float(np.max(np.abs(np.asarray(y, dtype=float)))) if np.size(y) else 0.0
    if m > 0 and power * math.log10(m) > 300:
        raise DomainError(f"{name} has entries up to {m:.3g}: {what} grows as |{name}|^{power} and "
                          f"overflows float64; rescale {name} (e.g. divide by {m:.3g})")
