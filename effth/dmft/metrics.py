"""Kernel alignment metrics of Bordelon & Pehlevan (2022) (§4 of the paper; Bordelon & Pehlevan (2022), §6 "Alignment metric", corrected here).

``A(K1, K2) = Tr(K1 K2) / (||K1||_F ||K2||_F)`` -- the cosine similarity of two symmetric kernels
(1 for proportional kernels).  The paper compares the DMFT kernels with those of width-``N``
networks (Fig. 1f/i, Fig. 4d), the initial with the final kernel (Fig. 2c), and a kernel with the
target ``y y^T`` (Fig. 5c): ``A(K, y y^T) = y^T K y / (||K||_F ||y||^2)``.
"""

from __future__ import annotations

from effth._signature import public

import numpy as np

from effth._validate import real_array
from effth.errors import DomainError

__all__ = ["kernel_alignment", "layer_alignment", "target_alignment"]


def _as_matrix(K, name):
    K = np.asarray(K, dtype=float)
    if K.ndim == 4:                                   # (T, n, T, n) -> (T n, T n)
        if K.shape[0] != K.shape[2] or K.shape[1] != K.shape[3]:
            raise DomainError(f"{name} of shape {K.shape} is not (T, n, T, n)")
        K = K.reshape(K.shape[0] * K.shape[1], -1)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise DomainError(f"{name} must be square (n, n) or (T, n, T, n), got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise DomainError(f"{name} has non-finite entries")
    return K


@public
def kernel_alignment(K1, K2) -> float:
    """``A(K1, K2) = Tr(K1 K2) / (||K1||_F ||K2||_F)`` (Bordelon & Pehlevan (2022), §4).

    Accepts ``(n, n)`` kernels (e.g. the final-time ``P x P`` block) or two-time kernels of shape
    ``(T, n, T, n)``, which are compared as ``(T n) x (T n)`` matrices (the "dynamics" alignment
    of Fig. 1f/i; corrected here).  For symmetric kernels ``Tr(K1 K2) = sum K1 * K2``.
    """
    A, B = _as_matrix(K1, "K1"), _as_matrix(K2, "K2")
    if A.shape != B.shape:
        raise DomainError(f"kernels have different shapes {A.shape} and {B.shape}")
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    if na == 0 or nb == 0:
        raise DomainError("alignment of a zero kernel is undefined")
    return float(np.trace(A @ B) / (na * nb))


@public
def target_alignment(K, y) -> float:
    """``A(K, y y^T) = y^T K y / (||K||_F ||y||^2)`` (Fig. 5c)."""
    K = _as_matrix(K, "K")
    y = np.asarray(y, dtype=float).ravel()
    if y.size != K.shape[0]:
        raise DomainError(f"y has {y.size} entries but K is {K.shape[0]} x {K.shape[0]}")
    return kernel_alignment(K, np.outer(y, y))


@public
def layer_alignment(K1, K2) -> np.ndarray:
    """Alignment per layer of two stacks of kernels ``(L, ...)`` (e.g. ``result.phi`` and a
    network's ``run.mean('phi')``); average with ``.mean()`` for the ``ell``-averaged metric of
    Fig. 4d."""
    K1, K2 = real_array(K1, "K1"), real_array(K2, "K2")
    if K1.ndim < 2 or K2.ndim < 2:
        raise DomainError(f"K1 and K2 must be stacks of kernels (L, ...), got shapes {K1.shape} "
                          f"and {K2.shape}")
    if K1.shape[0] != K2.shape[0]:
        raise DomainError(f"different numbers of layers: {K1.shape[0]} and {K2.shape[0]}")
    return np.array([kernel_alignment(a, b) for a, b in zip(K1, K2)])
