"""Grouping of an ensemble into disjoint blocks and the delete-one-group jackknife (shared by the
simulators; NumPy only)."""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_GROUPS", "group_units", "jackknife_error"]

#: Maximum number of jackknife groups (disjoint blocks of networks).
MAX_GROUPS = 32


def group_units(size: int, batch: int) -> tuple[int, list[tuple[int, int, int]]]:
    """Split ``size`` networks into ``K = min(32, size // 2)`` groups of chunks of at most ``batch``.

    Returns ``(K, [(group, start, m), ...])``.
    """
    K = min(MAX_GROUPS, size // 2) if size >= 4 else 1
    bounds = np.linspace(0, size, K + 1).round().astype(int)
    units = []
    for k in range(K):
        g0, g1 = int(bounds[k]), int(bounds[k + 1])
        nchunks = -(-(g1 - g0) // batch)
        cb = np.linspace(g0, g1, nchunks + 1).round().astype(int)
        units.extend((k, int(cb[j]), int(cb[j + 1] - cb[j])) for j in range(nchunks))
    return K, units


def jackknife_error(loo: np.ndarray) -> np.ndarray:
    """Standard error from the K leave-one-group-out estimates stacked on axis 0."""
    K = loo.shape[0]
    with np.errstate(over="ignore", invalid="ignore"):
        dev = loo - loo.mean(axis=0)
        err = np.sqrt((K - 1) / K * np.sum(dev * dev, axis=0))
        redo = ~np.isfinite(err) & np.isfinite(dev).all(axis=0)
        if redo.any():                      # squares overflowed: rescale by the largest deviation
            d = dev[:, redo]
            scale = np.abs(d).max(axis=0)
            scale[scale == 0] = 1.0
            err[redo] = scale * np.sqrt((K - 1) / K * np.sum((d / scale) ** 2, axis=0))
    return err
