"""Limit BLAS threads while effth does its own heavy numerical work.

On the 2-core machines effth targets, oversubscribed BLAS threads made batched matrix products
about 100x slower.  effth therefore limits BLAS to ``EFFTH_BLAS_THREADS`` threads (default 1)
*inside* its own heavy routines only, via :func:`blas_threads` (the simulators, among them
``simulate_training``; the DMFT marchers and sweeps; the kernel and NTK flows); it never
changes the user's global settings.
"""

from __future__ import annotations

import functools
import os
import threading
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, TypeVar

__all__ = ["blas_threads", "limits_blas_threads", "default_blas_threads", "worker_threads",
           "thread_map"]

F = TypeVar("F", bound=Callable)


def _positive_env(name: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError as exc:
        raise ValueError(f"{name} must be a positive integer, got {value!r}") from exc
    if n < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return n


def default_blas_threads() -> int:
    """Thread count used by :func:`blas_threads`: ``$EFFTH_BLAS_THREADS`` or 1."""
    return _positive_env("EFFTH_BLAS_THREADS", os.environ.get("EFFTH_BLAS_THREADS", "1"))


@contextmanager
def blas_threads(n: int | None = None) -> Iterator[None]:
    """Context manager limiting BLAS threads to ``n`` (default :func:`default_blas_threads`)."""
    controller = _controller()
    if controller is None:  # pragma: no cover - threadpoolctl is a declared dependency
        yield
        return
    with controller.limit(limits=n or default_blas_threads(), user_api="blas"):
        yield


_CONTROLLER: list = [None, -1]      # threadpoolctl's controller, and len(sys.modules) when made


def _controller():
    """A cached ``threadpoolctl.ThreadpoolController`` (making one scans the loaded shared
    libraries, milliseconds per call); made again when modules were imported since (a new
    extension module may bring its own BLAS)."""
    import sys
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover
        return None
    if _CONTROLLER[0] is None or _CONTROLLER[1] != len(sys.modules):
        _CONTROLLER[0], _CONTROLLER[1] = ThreadpoolController(), len(sys.modules)
    return _CONTROLLER[0]


def limits_blas_threads(func: F) -> F:
    """Decorator form of :func:`blas_threads` for effth's heavy entry points."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with blas_threads():
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def worker_threads(variable: str | None = None) -> int:
    """Threads effth's own chunked loops use (:func:`thread_map`): ``$variable`` if given and set
    (e.g. ``EFFTH_SIM_WORKERS`` for the simulators), else ``$EFFTH_THREADS``, else the cores this
    process may run on (at most 8)."""
    name = variable if variable is not None and variable in os.environ else "EFFTH_THREADS"
    value = os.environ.get(name)
    if value is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            cores = os.cpu_count() or 1
        return max(1, min(cores, 8))
    return _positive_env(name, value)


def thread_map(fn: Callable[[Any], Any], items: Iterable[Any], threads: int | None = None) -> list:
    """``[fn(item) for item in items]``, run on :func:`worker_threads` threads.

    For chunks of vectorized NumPy work (ufuncs and reductions release the GIL): each chunk is
    computed exactly as in the serial loop, so the results do not depend on the thread count.
    Exceptions propagate (the first one in item order).
    """
    items = list(items)
    n = worker_threads() if threads is None else int(threads)
    # inside a worker (a nested call) the items run serially: waiting on the same pool from
    # its own workers could deadlock
    if n <= 1 or len(items) <= 1 or threading.current_thread().name.startswith("effth_"):
        return [fn(it) for it in items]
    return list(_pool(n).map(fn, items))


_POOLS: dict = {}
_POOL_LOCK = threading.Lock()


def _pool(n: int) -> ThreadPoolExecutor:
    """One persistent pool per thread count and process (a forked child makes its own: the
    parent's worker threads do not exist there); creating a pool per call cost more than the
    threads saved on small tables."""
    key = (os.getpid(), n)
    with _POOL_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="effth_")
        return pool
