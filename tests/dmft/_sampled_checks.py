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
