"""Shared check of a sampled (Monte-Carlo) DMFT solution against an exact one."""

from __future__ import annotations

import numpy as np


def assert_sampled_matches_exact(mc, exact, wrong, names_layers) -> None:
    """Every ``(name, layers)`` of the sampled solution ``mc`` lies within 5 batch SE plus 2 % of
    the exact solution's scale (the batch errors ignore the noise of the estimated kernels and
    responses fed back into the conditional draws), and the ``wrong`` theory lies outside that
    band somewhere (so the band can reject)."""
    outside = False
    for name, layers in names_layers:
        for layer in layers:
            got, se = mc.value(name, layer=layer), mc.stderr(name, layer=layer)
            ref = exact.value(name, layer=layer)
            band = 5 * se + 0.02 * np.abs(ref).max()
            assert np.all(np.abs(got - ref) <= band), (name, layer)
            outside |= bool(np.any(np.abs(got - wrong.value(name, layer=layer)) > band))
    assert outside


def gap_slope(widths, d2) -> tuple[float, float]:
    """Weighted least-squares slope of ``log mean(d2)`` on ``log N`` and its standard error.

    ``d2`` holds per-network squared gaps to a theory, one row per width (independent networks
    at each width); each point is weighted by ``1 / Var(log mean)`` (delta method,
    ``(SE / mean)^2``).  A right theory leaves only the ``O(N^-1/2)`` fluctuations: slope
    ``-1``; a wrong one a plateau that bends it towards 0."""
    d2 = np.asarray(d2, dtype=float)
    m = d2.mean(1)
    se = d2.std(1, ddof=1) / np.sqrt(d2.shape[1])
    A = np.vstack([np.log(np.asarray(widths, dtype=float)), np.ones(len(m))]).T
    w = (m / se) ** 2
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    p = cov @ A.T @ (w * np.log(m))
    return float(p[0]), float(np.sqrt(cov[0, 0]))
