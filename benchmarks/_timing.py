"""The timing helper the benchmark scripts share (run them from the repository root:
``python benchmarks/NAME.py``, which puts this folder on ``sys.path``)."""

from __future__ import annotations

import time
from typing import Any, Callable


def best(fn: Callable[[], Any], repeat: int = 3, *, result: bool = False) -> Any:
    """Shortest of ``repeat`` wall-clock timings of ``fn()`` in seconds; with ``result=True``
    also the last return value, as ``(seconds, value)``."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return (min(times), out) if result else min(times)
