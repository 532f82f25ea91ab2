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
import numbers
from typing import Any

import numpy as np

from .errors import DomainError

__all__ = ["finite_array", "input_matrix", "integer", "kernel_matrix", "label_array",
           "last_hidden_width", "nonnegative", "positive", "real_array", "real_scalar",
           "symmetric_matrix"]


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
    if not np.allclose(M, M.T, rtol=0.0, atol=1e-10 * scale):
        raise DomainError(f"{name} is not symmetric (max |M - M^T| = "
                          f"{float(np.max(np.abs(M - M.T))):.3g})")
    return 0.5 * (M + M.T)


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


def width_ratio_values(width_ratios: Any, hidden_layers: int,
                       name: str = "width_ratios") -> tuple | None:
    """Validated hidden-layer width ratios ``a_l = N_l / N`` (Bordelon & Pehlevan (2022),
    App. D.8): ``None`` when not given or all equal to 1 (equal widths), else a tuple of
    ``hidden_layers`` positive finite floats; :class:`DomainError` otherwise."""
    if width_ratios is None:
        return None
    if isinstance(width_ratios, (str, bytes, bool, np.bool_)) or np.ndim(width_ratios) != 1:
        raise DomainError(f"{name}={width_ratios!r} must be a sequence of {hidden_layers} "
                          "positive numbers a_l = N_l / N, one per hidden layer")
    try:
        a = np.asarray(width_ratios, dtype=float)
    except (TypeError, ValueError):
        raise DomainError(f"{name}={width_ratios!r} must be a sequence of {hidden_layers} "
                          "positive numbers a_l = N_l / N, one per hidden layer") from None
    if a.size != hidden_layers:
        raise DomainError(f"{name} needs one ratio a_l = N_l / N per hidden layer "
                          f"({hidden_layers}), got {a.size}: {width_ratios!r}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise DomainError(f"{name}={width_ratios!r}: every ratio a_l = N_l / N must be a finite "
                          "number > 0")
    if np.all(a == 1.0):
        return None
    return tuple(float(v) for v in a)
