r"""Sweeps over widths, seeds and hyperparameters, run through Dask.

Width studies, ensembles over seeds and hyperparameter scans are embarrassingly parallel: every
grid point is an independent call.  :func:`sweep` builds one Dask task per point and computes
them with Dask's local scheduler (threads by default; processes or a single thread on request)
or on a user's cluster (``client=`` a ``dask.distributed.Client``).  Dask is an optional
dependency (``pip install "effth[parallel]"``); without it the points run one after another,
with the same results.

Reproducibility: with ``seed=``, every point gets its own child of
``numpy.random.SeedSequence(seed)`` (spawned in grid order), passed to the function as
``seed=``.  A point's result therefore depends on the grid and the seed only, never on the
scheduler, the number of workers or the order in which tasks finish: the parallel sweep equals
the serial one bit for bit.

Examples
--------
>>> import numpy as np
>>> from effth.sweeps import sweep
>>> def mean_of_draws(width, seed):
...     return np.random.default_rng(seed).standard_normal(width).mean()
>>> s = sweep(mean_of_draws, {"width": [10, 100]}, seed=0, scheduler="synchronous")
>>> s.points
[{'width': 10}, {'width': 100}]
>>> s2 = sweep(mean_of_draws, {"width": [10, 100]}, seed=0)        # threads (or serial)
>>> bool(np.all(np.array(s.results) == np.array(s2.results)))
True
"""

from __future__ import annotations

from . import _validate as _v
from effth._signature import public

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ._progress import progress_bar
from .errors import DomainError

__all__ = ["sweep", "Sweep", "SCHEDULERS", "have_dask"]

#: Local Dask schedulers (``"serial"`` runs without Dask).
SCHEDULERS = ("threads", "processes", "synchronous", "serial")


@public
def have_dask() -> bool:
    """Whether Dask is importable."""
    try:
        import dask  # noqa: F401
    except ImportError:
        return False
    return True


@public
@dataclass(frozen=True)
class Sweep:
    r"""Results of :func:`sweep`, one per grid point, in grid order.

    Attributes
    ----------
    points : list of dict
        The keyword arguments of each call (without ``seed``).
    results : list
        What the function returned for each point.
    seeds : list of numpy.random.SeedSequence or None
        The seed passed to each call (``None`` without ``seed=``).
    scheduler : str
        How the points were computed (``"client"`` for a distributed client).
    """

    points: list
    results: list
    seeds: list
    scheduler: str

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self):
        return iter(zip(self.points, self.results))

    def where(self, **fixed: Any) -> list:
        """The results of the points whose parameters equal ``fixed``."""
        return [r for p, r in zip(self.points, self.results)
                if all(p.get(k) == v for k, v in fixed.items())]

    def value(self, name: str, **kwargs: Any) -> np.ndarray:
        r"""``result.value(name, **kwargs)`` of every point, stacked on a leading axis.

        For results that follow effth's result conventions (``docs/conventions.md``).
        """
        try:
            return np.stack([np.asarray(r.value(name, **kwargs)) for r in self.results])
        except AttributeError:
            raise DomainError("the sweep's results have no .value(); read .results directly") from None

    def __repr__(self) -> str:
        return f"Sweep({len(self.points)} points, scheduler={self.scheduler!r})"


def _grid(grid: Any) -> list[dict]:
    if isinstance(grid, Mapping):
        keys = list(grid)
        if not keys:
            raise DomainError("the grid is empty")
        for k in keys:
            if not isinstance(k, str):
                raise DomainError(f"grid keys must be argument names (str), got {k!r}")
            if isinstance(grid[k], (str, bytes)) or not isinstance(grid[k], Iterable):
                raise DomainError(f"grid[{k!r}] must be a sequence of values, got {grid[k]!r}")
        values = [list(grid[k]) for k in keys]
        if any(len(v) == 0 for v in values):
            raise DomainError("every grid axis needs at least one value")
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    if isinstance(grid, Sequence) and not isinstance(grid, (str, bytes)):
        points = [dict(p) if isinstance(p, Mapping) else None for p in grid]
        if any(p is None for p in points):
            raise DomainError("a grid given as a sequence must hold one dict of arguments per point")
        if not points:
            raise DomainError("the grid is empty")
        return points
    raise DomainError("grid must be a dict of argument -> values (a Cartesian product) or a "
                      "sequence of dicts (one per point)")


@public
def sweep(func: Callable, grid: Any, *, seed: Any = None, client: Any = None,
          scheduler: str = "threads", workers: int | None = None,
          progress: bool | None = None) -> Sweep:
    r"""Call ``func(**point)`` for every point of a grid, in parallel through Dask.

    Parameters
    ----------
    func : callable
        Called with the point's keyword arguments (and ``seed=`` when ``seed`` is given).  With
        ``scheduler="processes"`` or a distributed client it must be picklable (a module-level
        function, or ``functools.partial`` of one).
    grid : dict or sequence of dict
        ``{"width": [32, 64], "c_w": [1.0, 2.0]}`` (the Cartesian product, first key slowest),
        or an explicit list of keyword dicts.
    seed : int, SeedSequence or None
        Root of the per-point seeds: point ``k`` gets ``SeedSequence(seed).spawn(len(grid))[k]``
        (as ``seed=``).  ``None``: no ``seed`` argument is passed.
    client : dask.distributed.Client, optional
        Compute on this cluster instead of locally.
    scheduler : {"threads", "processes", "synchronous", "serial"}
        Local Dask scheduler; ``"serial"`` is a plain loop without Dask (also used when Dask is
        not installed and no client is given).
    workers : int, optional
        Number of local workers (Dask's default: one per core).
    progress : bool or None
        A progress bar over points for the serial loop (``None``: on a terminal or in a notebook,
        unless ``EFFTH_PROGRESS=0``).

    Returns
    -------
    Sweep

    Raises
    ------
    DomainError
        An empty or malformed grid, an unknown scheduler, a client without Dask.
    """
    points = _grid(grid)
    if scheduler not in SCHEDULERS:
        raise DomainError(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise DomainError(f"workers must be a positive int, got {workers!r}")
    if seed is not None:
        root = _v.seed_sequence(seed)
        seeds = root.spawn(len(points))
        calls = [dict(p, seed=s) for p, s in zip(points, seeds)]
    else:
        seeds = [None] * len(points)
        calls = points
    if client is not None:
        if not have_dask():
            raise DomainError("client= needs Dask: pip install 'effth[parallel]'")
        if not (callable(getattr(client, "compute", None)) and callable(getattr(client, "gather", None))):
            raise DomainError(f"client= must be a dask.distributed.Client (with compute and gather), "
                              f"got {type(client).__name__}")
        import dask

        futures = client.compute([dask.delayed(func)(**c) for c in calls])
        return Sweep(points, list(client.gather(futures)), seeds, "client")
    if scheduler == "serial" or not have_dask():
        results = []
        with progress_bar(len(calls), "sweep", progress=progress, unit="point") as bar:
            for c in calls:
                results.append(func(**c))
                bar.update(1)
        return Sweep(points, results, seeds, "serial")
    import dask

    kw = {} if workers is None else {"num_workers": workers}
    results = dask.compute(*[dask.delayed(func, pure=False)(**c) for c in calls],
                           scheduler=scheduler, **kw)
    return Sweep(points, list(results), seeds, scheduler)
