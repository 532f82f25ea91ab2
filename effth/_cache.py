"""On-disk cache of symbolic derivations (each new process otherwise re-derives them).

The NTK-hierarchy recursions take 1-6 s each to derive with the Wick/cumulant engine (about 15 s
for the set a full ``ntk_flow`` reads), the initialization recursions about 2 s. They depend only on
effth's own code and SymPy, so :func:`disk_cached` stores a derivation's result (pickled SymPy
objects) under a key made of

* a hash of every ``.py`` file of the installed effth package and the SymPy version (any change of
  the code, or an upgrade, starts a fresh cache: a stale derivation can never be read), and
* the function's module, name and arguments.

Location: ``$EFFTH_CACHE_DIR``, else ``$XDG_CACHE_HOME/effth``, else ``~/.cache/effth``.
``EFFTH_CACHE=0`` turns it off (the test suite does, so that every run derives afresh). A file
that cannot be read or written is ignored (the derivation is then just recomputed): the cache
can only save time, never change a result. The files are Python pickles; like any pickle they
must only be read from a directory the user controls, which the defaults are.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any, Callable

__all__ = ["disk_cached", "cache_dir", "cache_enabled", "source_hash"]


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """Hash of effth's source files and the SymPy version (16 hex digits)."""
    import sympy

    root = Path(__file__).resolve().parent
    h = hashlib.sha256(sympy.__version__.encode())
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """The directory of this source version's cache files."""
    base = os.environ.get("EFFTH_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "effth")
    return Path(base) / source_hash()


def cache_enabled() -> bool:
    """``False`` when ``EFFTH_CACHE=0``."""
    return os.environ.get("EFFTH_CACHE", "1") != "0"


def disk_cached(func: Callable) -> Callable:
    """Memoize ``func`` (hashable, repr-stable arguments) in memory and on disk."""

    @functools.lru_cache(maxsize=None)
    def wrapper(*args: Any) -> Any:
        if not cache_enabled():
            return func(*args)
        key = hashlib.sha256(repr((func.__module__, func.__qualname__, args)).encode()).hexdigest()[:32]
        path = cache_dir() / f"{key}.pkl"
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)
        except Exception:           # missing, unreadable or written by a broken run: recompute
            pass
        out = func(*args)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(out, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)   # atomic: a concurrent reader sees the old file or the new one
        except Exception:
            try:
                os.unlink(tmp)
            except Exception:
                pass
        return out

    wrapper.uncached = func
    return wrapper
