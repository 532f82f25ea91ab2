"""Limit BLAS threads while effth does its own heavy numerical work.

On the 2-core machines effth targets, oversubscribed BLAS threads made batched matrix products
about 100x slower.  effth therefore limits BLAS to ``EFFTH_BLAS_THREADS`` threads (default 1)
*inside* its own heavy routines only, via :func:`blas_threads`; it never changes the user's
global settings.
"""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

__all__ = ["blas_threads", "limits_blas_threads", "default_blas_threads"]

F = TypeVar("F", bound=Callable)


def default_blas_threads() -> int:
    """Thread count used by :func:`blas_threads`: ``$EFFTH_BLAS_THREADS`` or 1."""
    value = os.environ.get("EFFTH_BLAS_THREADS", "1")
    try:
        n = int(value)
    except ValueError as exc:
        raise ValueError(f"EFFTH_BLAS_THREADS must be a positive integer, got {value!r}") from exc
    if n < 1:
        raise ValueError(f"EFFTH_BLAS_THREADS must be a positive integer, got {value!r}")
    return n


@contextmanager
def blas_threads(n: int | None = None) -> Iterator[None]:
    """Context manager limiting BLAS threads to ``n`` (default :func:`default_blas_threads`)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a declared dependency
        yield
        return
    with threadpool_limits(limits=n or default_blas_threads(), user_api="blas"):
        yield


def limits_blas_threads(func: F) -> F:
    """Decorator form of :func:`blas_threads` for effth's heavy entry points."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with blas_threads():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
