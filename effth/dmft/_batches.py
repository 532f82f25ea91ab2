"""Batched second moments of the sampled DMFT solvers (the per-batch estimates behind their
standard errors).

Every sampled solver splits its ``S`` single-site samples into ``nb`` equal batches and
estimates a kernel in each, ``<x_i y_j>_b``; the spread of the batch estimates is the
standard error.  These are stacked matrix products (BLAS), not ``einsum`` loops.
"""

from __future__ import annotations

import numpy as np


def batch_gram(x: np.ndarray, y: np.ndarray, nb: int) -> np.ndarray:
    """``(nb, i, j)``: the mean of ``x[s, i] y[s, j]`` over each of ``nb`` consecutive equal
    batches of the rows ``s`` of ``x (S, i)`` and ``y (S, j)`` (``S`` divisible by ``nb``)."""
    m = x.shape[0] // nb
    xb = x.reshape(nb, m, -1)
    yb = y.reshape(nb, m, -1)
    return np.matmul(xb.transpose(0, 2, 1), yb) / m


def batch_gram_equal_time(x: np.ndarray, y: np.ndarray, nb: int, T: int) -> np.ndarray:
    """``(nb, T, n, n)``: the per-batch equal-time moments ``<x_{t i} y_{t j}>_b`` of samples
    ``x, y`` of shape ``(S, T n)`` (time-major columns)."""
    m = x.shape[0] // nb
    xb = x.reshape(nb, m, T, -1).transpose(0, 2, 3, 1)       # (nb, T, n, m)
    yb = y.reshape(nb, m, T, -1).transpose(0, 2, 1, 3)       # (nb, T, m, n)
    return np.matmul(xb, yb) / m
