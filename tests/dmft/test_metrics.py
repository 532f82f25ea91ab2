"""Kernel alignment A(K1, K2) of Bordelon & Pehlevan (2022), §4."""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import DomainError
from effth.dmft.metrics import (
    kernel_alignment,
    layer_alignment,
    target_alignment,
)


def test_alignment_values():
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((5, 5))
    K = Z @ Z.T
    assert kernel_alignment(K, 3.0 * K) == pytest.approx(1.0)
    assert kernel_alignment(np.eye(2), np.array([[1.0, 0.0], [0.0, 0.0]])) == pytest.approx(
        1 / np.sqrt(2))
    K2 = K + np.diag(rng.random(5))
    a = kernel_alignment(K, K2)
    assert 0 < a < 1
    assert a == pytest.approx(np.sum(K * K2) / np.linalg.norm(K) / np.linalg.norm(K2))
    y = rng.standard_normal(5)
    assert target_alignment(K, y) == pytest.approx(y @ K @ y / np.linalg.norm(K) / (y @ y))
    # two-time kernels (T, n, T, n) are compared as (T n) x (T n) matrices
    W = rng.standard_normal((3, 2, 4))
    K4 = np.einsum("tak,sbk->tasb", W, W)
    assert kernel_alignment(K4, K4) == pytest.approx(1.0)
    assert np.allclose(layer_alignment(np.stack([K, K]), np.stack([K, 2 * K])), 1.0)


def test_alignment_bad_input():
    with pytest.raises(DomainError):
        kernel_alignment(np.eye(2), np.eye(3))
    with pytest.raises(DomainError):
        kernel_alignment(np.zeros((2, 2)), np.eye(2))
    with pytest.raises(DomainError):
        target_alignment(np.eye(2), [1.0, 2.0, 3.0])
